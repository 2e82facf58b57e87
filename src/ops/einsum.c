/* einsum for one or two float32 operands: parse -> bind -> plan -> execute.
 *
 * einsum_parse.c  the spec into terms of letter ids, bound to the operands: every index
 *                 gets an extent (broadcast as in torch) and a stride in each operand.
 * einsum_plan.c   from shapes and strides alone: the loop nests, the temporaries (an
 *                 operand pre-reduced over indices only it has, or packed so that its
 *                 contracted indices become one stride) and the one GEMM call.
 * einsum.c        the entries, and execution: one scratch block holds every temporary
 *                 and the GEMM's packing buffers (one arena layout, ei_plan_layout),
 *                 acquired before anything is written; then the steps, then one
 *                 ta_gemm_strided call straight on the operands' and the output's
 *                 strides. Two operands with nothing contracted (outer and Hadamard
 *                 products) run a strided product loop instead: a GEMM with K = 1 does
 *                 the same single rounding but pays per-problem overhead for every
 *                 output element when the free groups are empty. One operand runs a
 *                 loop that sums in double and rounds once.
 *
 * Every output element is computed by exactly one thread in a fixed order, so the
 * results do not depend on the thread count. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "ops/einsum_internal.h"

#include <omp.h>

#define EI_PARALLEL_MIN 32768 /* work below which one thread is faster */

static _Thread_local ta_einsum_plan_info ei_last_plan;

void ta_einsum_last_plan(ta_einsum_plan_info *info)
{
    if (info) *info = ei_last_plan;
}

int ta_einsum_last_plan_packed(void) { return ei_last_plan.packed + ei_last_plan.reduced; }

/* ------------------------------------------------------------------ loops */

typedef struct ei_iter {
    int64_t idx[EI_MAX_IDX];
    int64_t off[3];
} ei_iter;

/* Positions the iterator at the flat (row-major over the nest) element lin. */
static void ei_iter_seek(ei_iter *it, const ei_loop *L, int64_t lin)
{
    it->off[0] = it->off[1] = it->off[2] = 0;
    for (int d = L->n - 1; d >= 0; d--) {
        int64_t x = lin % L->size[d];
        lin /= L->size[d];
        it->idx[d] = x;
        for (int t = 0; t < 3; t++) it->off[t] += x * L->st[t][d];
    }
}

/* Moves run elements along the innermost dim (no further than the row's end) and
 * carries into the outer dims when the row ends. */
static void ei_iter_skip(ei_iter *it, const ei_loop *L, int64_t run)
{
    int last = L->n - 1;
    it->idx[last] += run;
    for (int t = 0; t < 3; t++) it->off[t] += run * L->st[t][last];
    if (it->idx[last] < L->size[last]) return;
    for (int d = last; d >= 0; d--) {
        if (d < last) {
            for (int t = 0; t < 3; t++) it->off[t] += L->st[t][d];
            if (++it->idx[d] < L->size[d]) return;
        }
        for (int t = 0; t < 3; t++) it->off[t] -= L->size[d] * L->st[t][d];
        it->idx[d] = 0;
    }
}

/* Sum in double of p over the nest S (tensor 0), in the nest's fixed order. */
static double ei_sum(const float *p, const ei_loop *S)
{
    int last = S->n - 1;
    int64_t len = S->size[last], st = S->st[0][last];
    int64_t rows = ei_loop_numel(S) / (len ? len : 1);
    ei_iter it;
    ei_iter_seek(&it, S, 0);
    double acc = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const float *q = p + it.off[0];
        for (int64_t i = 0; i < len; i++) acc += (double)q[i * st];
        ei_iter_skip(&it, S, len);
    }
    return acc;
}

static int ei_threads_for(int64_t work) { return work < EI_PARALLEL_MIN ? 1 : ta_threads(); }

/* dst = sum over the nest S of src, for every element of the nest K.
 * K: tensor 0 = src, tensor 2 = dst; S: tensor 0 = src (S->n == 0: a plain copy).
 * Threads take contiguous ranges of K's elements; each element is one thread's. */
static void ei_reduce_run(float *dst, const float *src, const ei_loop *K, const ei_loop *S)
{
    int64_t total = ei_loop_numel(K);
    int64_t inner = S->n ? ei_loop_numel(S) : 1;
    int last = K->n - 1;
    int nt = ei_threads_for(total * inner);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int nth = omp_get_num_threads(), me = omp_get_thread_num();
        int64_t lo = total * me / nth, hi = total * (me + 1) / nth;
        ei_iter it;
        ei_iter_seek(&it, K, lo);
        int64_t ss = K->st[0][last], ds = K->st[2][last];
        for (int64_t o = lo; o < hi;) {
            int64_t run = TA_MIN(K->size[last] - it.idx[last], hi - o);
            const float *s = src + it.off[0];
            float *d = dst + it.off[2];
            if (S->n == 0)
                for (int64_t i = 0; i < run; i++) d[i * ds] = s[i * ss];
            else
                for (int64_t i = 0; i < run; i++) d[i * ds] = (float)ei_sum(s + i * ss, S);
            o += run;
            if (o < hi) ei_iter_skip(&it, K, run);
        }
    }
}

/* c = a * b elementwise over the nest L (tensors a, b, c). */
static void ei_product_run(float *c, const float *a, const float *b, const ei_loop *L)
{
    int64_t total = ei_loop_numel(L);
    int last = L->n - 1;
    int nt = ei_threads_for(total);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int nth = omp_get_num_threads(), me = omp_get_thread_num();
        int64_t lo = total * me / nth, hi = total * (me + 1) / nth;
        ei_iter it;
        ei_iter_seek(&it, L, lo);
        int64_t sa = L->st[EI_A][last], sb = L->st[EI_B][last], sc = L->st[EI_C][last];
        for (int64_t o = lo; o < hi;) {
            int64_t run = TA_MIN(L->size[last] - it.idx[last], hi - o);
            const float *pa = a + it.off[EI_A], *pb = b + it.off[EI_B];
            float *pc = c + it.off[EI_C];
            for (int64_t i = 0; i < run; i++) pc[i * sc] = pa[i * sa] * pb[i * sb];
            o += run;
            if (o < hi) ei_iter_skip(&it, L, run);
        }
    }
}

/* ---------------------------------------------------------------- execute */

/* Runs a carved plan: the steps into their temporaries, then the result.
 * a, b: the operands (b NULL for one); out: the result's view (its layout planned). */
static ta_status ei_execute(const ei_plan *p, ta_tensor *out, const ta_tensor *a,
                            const ta_tensor *b)
{
    const float *ptr[2] = {a->data, b ? b->data : NULL};
    for (int i = 0; i < p->nsteps; i++) {
        const ei_step *s = &p->step[i];
        ei_reduce_run(s->temp, ptr[s->k], &s->K, &s->S);
        ptr[s->k] = s->temp;
    }
    switch (p->kind) {
    case EI_RUN_NOTHING: return TA_OK;
    case EI_RUN_ZERO: return ta_tensor_fill(out, 0.0f);
    case EI_RUN_SUM: ei_reduce_run(out->data, ptr[EI_A], &p->L, &p->S); return TA_OK;
    case EI_RUN_PRODUCT: ei_product_run(out->data, ptr[EI_A], ptr[EI_B], &p->L); return TA_OK;
    case EI_RUN_GEMM: {
        const ei_gemm *c = &p->gemm;
        return ta_gemm_strided(out->data, c->rsc, c->csc, ptr[c->a_op], c->rsa, c->csa,
                               ptr[c->b_op], c->rsb, c->csb, c->M, c->N, c->K, 1.0f, 0.0f,
                               &c->batch, c->pack);
    }
    }
    return ta_error(TA_EINTERNAL, "ta_einsum: unknown plan kind %d", (int)p->kind);
}

/* The bytes of the plan's scratch (SIZE_MAX when they do not fit a size_t). */
static size_t ei_plan_bytes(ei_plan *p)
{
    ta_arena m = ta_arena_measure();
    ei_plan_layout(&m, p);
    return ta_arena_bytes(&m);
}

/* Carves the plan's scratch from arena (which must hold ei_plan_bytes) and runs it. */
static ta_status ei_carve_and_run(const char *fn, ei_plan *p, ta_arena *arena, ta_tensor *out,
                                  const ta_tensor *a, const ta_tensor *b)
{
    ei_plan_layout(arena, p);
    if (arena->overflow)
        return ta_error(TA_EINTERNAL, "%s: einsum's scratch does not fit the %zu bytes given",
                        fn, arena->size);
    ta_status st = ei_execute(p, out, a, b);
    if (!st) ei_last_plan = p->info;
    return st;
}

/* Plans on out's layout, acquires one block (ws, or the library's) and runs. */
static ta_status ei_run_ws(const char *fn, ta_tensor *out, const ei_bind *bd,
                           const ta_tensor *a, const ta_tensor *b, const ta_workspace *ws)
{
    ei_plan p;
    const ta_tensor *t[3] = {out, a, b};
    const char *names[3] = {"out", "a", "b"};
    ta_status st = ta_workspace_check(fn, ws, 3, t, names);
    if (!st) st = ei_plan_make(&p, bd, out);
    if (st) return st;
    ta_scratch s;
    if ((st = ta_scratch_acquire(&s, fn, ws, ei_plan_bytes(&p)))) return st;
    ta_arena arena = ta_arena_over(s.base, s.size);
    st = ei_carve_and_run(fn, &p, &arena, out, a, b);
    ta_scratch_release(&s);
    return st;
}

/* Validates every argument of a call into an existing out (nops: see ei_prepare). */
static ta_status ei_validate(ei_spec *sp, ei_bind *bd, const char *fn, const ta_tensor *out,
                             const char *spec, const ta_tensor *a, const ta_tensor *b,
                             int nops, ei_check check)
{
    if (!out) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    ta_status st = ei_prepare(sp, bd, fn, spec, a, b, nops, check);
    if (!st) st = ei_check_out(fn, out, bd, spec, check);
    if (st || check != EI_CHECK_ALL) return st;
    /* The GEMM and product loops read inputs while writing out: sharing memory would
     * read half-written results. */
    const ta_tensor *ins[2] = {a, b};
    for (int k = 0; k < bd->nops; k++)
        if (ta_tensors_overlap(out, ins[k]))
            return ta_error(TA_EINVAL, "%s: out overlaps operand %d ('%s'); outputs must "
                            "not share memory with the inputs", fn, k, spec);
    return TA_OK;
}

/* The plan's scratch in bytes, or TA_ENOMEM naming fn when it overflows. */
static ta_status ei_scratch_size(size_t *bytes, const char *fn, const ei_bind *bd,
                                 const ta_tensor *out)
{
    ei_plan p;
    ta_status st = ei_plan_make(&p, bd, out);
    if (st) return st;
    size_t n = ei_plan_bytes(&p);
    if (n == SIZE_MAX)
        return ta_error(TA_ENOMEM, "%s: the scratch for these shapes does not fit in memory",
                        fn);
    *bytes = n;
    return TA_OK;
}

/* ---------------------------------------------------------------- entries */

static ta_status ei_call(const char *fn, ta_tensor *out, const char *spec, const ta_tensor *a,
                         const ta_tensor *b, int nops, const ta_workspace *ws)
{
    ei_last_plan = (ta_einsum_plan_info){0};
    ei_spec sp;
    ei_bind bd;
    ta_status st = ei_validate(&sp, &bd, fn, out, spec, a, b, nops, EI_CHECK_ALL);
    if (st) return st;
    return ei_run_ws(fn, out, &bd, a, b, ws);
}

/* The allocating variants: the result is the only allocation besides the scratch. */
static ta_status ei_call_alloc(const char *fn, ta_tensor *out, const char *spec,
                               const ta_tensor *a, const ta_tensor *b, int nops)
{
    ei_last_plan = (ta_einsum_plan_info){0};
    if (!out) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    ei_spec sp;
    ei_bind bd;
    ta_status st = ei_prepare(&sp, &bd, fn, spec, a, b, nops, EI_CHECK_ALL);
    if (st) return st;
    ta_tensor res;
    if ((st = ta_tensor_empty(&res, bd.out_ndim, bd.out_shape))) return st;
    if ((st = ei_run_ws(fn, &res, &bd, a, b, NULL))) {
        ta_tensor_free(&res);
        return st;
    }
    *out = res;
    return TA_OK;
}

ta_status ta_einsum_ext(ta_tensor *out, const char *spec, const ta_tensor *a,
                        const ta_tensor *b, const ta_workspace *ws)
{
    return ei_call("ta_einsum_ext", out, spec, a, b, 0, ws);
}

ta_status ta_einsum(ta_tensor *out, const char *spec, const ta_tensor *a, const ta_tensor *b)
{
    return ei_call("ta_einsum", out, spec, a, b, 2, NULL);
}

ta_status ta_einsum1(ta_tensor *out, const char *spec, const ta_tensor *a)
{
    return ei_call("ta_einsum1", out, spec, a, NULL, 1, NULL);
}

ta_status ta_einsum_alloc(ta_tensor *out, const char *spec, const ta_tensor *a,
                          const ta_tensor *b)
{
    return ei_call_alloc("ta_einsum_alloc", out, spec, a, b, 2);
}

ta_status ta_einsum1_alloc(ta_tensor *out, const char *spec, const ta_tensor *a)
{
    return ei_call_alloc("ta_einsum1_alloc", out, spec, a, NULL, 1);
}

ta_status ta_einsum_workspace_size(size_t *bytes, const ta_tensor *out, const char *spec,
                                   const ta_tensor *a, const ta_tensor *b)
{
    const char *fn = "ta_einsum_workspace_size";
    if (!bytes) return ta_error(TA_EINVAL, "%s: bytes is NULL", fn);
    ei_spec sp;
    ei_bind bd;
    size_t n;
    ta_status st = ei_validate(&sp, &bd, fn, out, spec, a, b, 0, EI_CHECK_ALL);
    if (!st) st = ei_scratch_size(&n, fn, &bd, out);
    if (!st) *bytes = ta_workspace_bytes(n);
    return st;
}

ta_status ta_einsum_scratch_bytes(size_t *bytes, const char *fn, const ta_tensor *out,
                                  const char *spec, const ta_tensor *a, const ta_tensor *b)
{
    ei_spec sp;
    ei_bind bd;
    ta_status st = ei_validate(&sp, &bd, fn, out, spec, a, b, 0, EI_CHECK_LAYOUT);
    if (!st) st = ei_scratch_size(bytes, fn, &bd, out);
    return st;
}

ta_status ta_einsum_run(const char *fn, ta_tensor *out, const char *spec, const ta_tensor *a,
                        const ta_tensor *b, ta_arena *scratch)
{
    ei_last_plan = (ta_einsum_plan_info){0};
    ei_spec sp;
    ei_bind bd;
    ei_plan p;
    ta_status st = ei_validate(&sp, &bd, fn, out, spec, a, b, 0, EI_CHECK_RUN);
    if (!st) st = ei_plan_make(&p, &bd, out);
    if (st) return st;
    ta_arena none = ta_arena_over(NULL, 0);
    if (ei_plan_bytes(&p) > 0 && (!scratch || !scratch->base))
        return ta_error(TA_EINTERNAL, "%s: einsum needs scratch but none was carved", fn);
    return ei_carve_and_run(fn, &p, scratch ? scratch : &none, out, a, b);
}

ta_status ta_einsum_shape(int *ndim, int64_t shape[TA_MAX_DIMS], const char *spec,
                          const ta_tensor *a, const ta_tensor *b)
{
    const char *fn = "ta_einsum_shape";
    if (!ndim) return ta_error(TA_EINVAL, "%s: ndim is NULL", fn);
    if (!shape) return ta_error(TA_EINVAL, "%s: shape is NULL", fn);
    ei_spec sp;
    ei_bind bd;
    ta_status st = ei_prepare(&sp, &bd, fn, spec, a, b, 0, EI_CHECK_ALL);
    if (st) return st;
    *ndim = bd.out_ndim;
    for (int d = 0; d < bd.out_ndim; d++) shape[d] = bd.out_shape[d];
    return TA_OK;
}
