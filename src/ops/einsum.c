/* einsum for one or two float32 operands: parse -> bind -> plan -> execute.
 *
 * parse  the spec into terms of letter ids (A-Z = 0..25, a-z = 26..51, so sorting ids
 *        sorts by character code, as torch orders an implicit output) and the place
 *        of each "...".
 * bind   the terms to the operands: every index (a letter, or one dim under "...",
 *        right-aligned across operands) gets an extent (size-1 dims broadcast, as in
 *        torch) and, in each operand, an element stride. A letter repeated in one
 *        operand is a diagonal: its stride is the sum of the strides.
 * plan   Indices of extent 1 are dropped (they never move a pointer). The rest are
 *        classified by where they occur:
 *            batch      a, b and out      -> GEMM batch dims
 *            contracted a and b, not out  -> GEMM K
 *            free-a     a and out         -> GEMM M
 *            free-b     b and out         -> GEMM N
 *            summed in one operand only   -> that operand is reduced first
 *        Each group is sorted by stride and neighbours are merged into one dim when
 *        their strides chain (outer stride == inner stride * inner extent) in every
 *        tensor; a free group that stays split keeps its largest piece as M (or N)
 *        and turns the rest into batch dims (stride 0 in the operand that lacks them:
 *        it is 0 already). Only a contracted group that cannot be one stride needs a
 *        copy: the operand(s) that break the chain are packed in an order that makes
 *        it one.
 * execute one ta_gemm_strided call straight on the operands' and the output's
 *        strides. Two operands with nothing contracted (outer and Hadamard products)
 *        run a strided product loop instead: a GEMM with K = 1 does the same single
 *        rounding but pays per-problem overhead for every output element when the
 *        free groups are empty. One operand runs a generic loop that sums in double
 *        and rounds once.
 *
 * Every output element is computed by exactly one thread in a fixed order, so the
 * results do not depend on the thread count. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "ops/einsum.h"
#include "ops/gemm.h"
#include "ops/sdpa.h" /* ta_tensors_overlap */

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EI_LETTERS 52
#define EI_MAX_IDX (EI_LETTERS + TA_MAX_DIMS) /* letters, then the dims under "..." */
#define EI_MAX_TERM 64                        /* letters the parser accepts per term */
#define EI_PARALLEL_MIN 32768                 /* work below which one thread is faster */

enum { EI_A = 0, EI_B = 1, EI_C = 2 };

static _Thread_local ta_einsum_plan_info ei_last_plan;

void ta_einsum_last_plan(ta_einsum_plan_info *info)
{
    if (info) *info = ei_last_plan;
}

int ta_einsum_last_plan_packed(void) { return ei_last_plan.packed + ei_last_plan.reduced; }

/* ------------------------------------------------------------------ parse */

typedef struct ei_term {
    int n;                    /* letters in the term */
    int8_t lab[EI_MAX_TERM];  /* their ids */
    int ell;                  /* letters before "...", or -1 without one */
    int begin, end;           /* the term's characters in the spec, for messages */
} ei_term;

typedef struct ei_spec {
    const char *text;
    int nops;
    ei_term in[2];
    ei_term out;
    bool explicit_out;
} ei_spec;

static int ei_letter_id(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
    return -1;
}

static char ei_id_char(int id) { return (char)(id < 26 ? 'A' + id : 'a' + (id - 26)); }

static const char *ei_term_name(char *buf, size_t size, const ei_spec *sp, const ei_term *t)
{
    int len = t->end - t->begin;
    snprintf(buf, size, "'%.*s'", len, sp->text + t->begin);
    return buf;
}

/* torch's implicit output: the "..." dims first, then the letters that occur exactly
 * once over all operands, in character-code order (uppercase before lowercase). */
static void ei_implicit_output(ei_spec *sp, const int *count)
{
    ei_term *o = &sp->out;
    o->ell = -1;
    for (int k = 0; k < sp->nops; k++)
        if (sp->in[k].ell >= 0) o->ell = 0;
    o->n = 0;
    for (int id = 0; id < EI_LETTERS; id++)
        if (count[id] == 1) o->lab[o->n++] = (int8_t)id;
}

static ta_status ei_parse(ei_spec *sp, const char *fn, const char *spec)
{
    memset(sp, 0, sizeof *sp);
    sp->text = spec;
    sp->nops = 1;
    ei_term *t = &sp->in[0];
    t->ell = -1;
    const char *where = "operand 0";
    static const char *const op_names[2] = {"operand 0", "operand 1"};
    size_t len = strlen(spec);
    for (size_t p = 0; p < len; p++) {
        char c = spec[p];
        if (c == ' ') continue;
        int id = ei_letter_id(c);
        if (id >= 0) {
            if (t->n == EI_MAX_TERM)
                return ta_error(TA_EINVAL, "%s: spec '%s' has more than %d letters in %s", fn,
                                spec, EI_MAX_TERM, where);
            t->lab[t->n++] = (int8_t)id;
        } else if (c == '.') {
            if (spec[p + 1] != '.' || spec[p + 2] != '.')
                return ta_error(TA_EINVAL,
                                "%s: spec '%s' has a '.' at position %zu that is not part of "
                                "an ellipsis '...'", fn, spec, p);
            if (t->ell >= 0)
                return ta_error(TA_EINVAL, "%s: spec '%s' has more than one '...' in %s", fn,
                                spec, where);
            t->ell = t->n;
            p += 2;
        } else if (c == ',') {
            if (sp->explicit_out)
                return ta_error(TA_EINVAL, "%s: spec '%s' has a ',' after '->' (position %zu)",
                                fn, spec, p);
            if (sp->nops == 2)
                return ta_error(TA_EINVAL,
                                "%s: spec '%s' names more than two operands; at most two are "
                                "supported", fn, spec);
            t->end = (int)p;
            where = op_names[sp->nops];
            t = &sp->in[sp->nops++];
            t->ell = -1;
            t->begin = (int)p + 1;
        } else if (c == '-' && spec[p + 1] == '>') {
            if (sp->explicit_out)
                return ta_error(TA_EINVAL, "%s: spec '%s' has more than one '->'", fn, spec);
            t->end = (int)p;
            sp->explicit_out = true;
            where = "the output";
            t = &sp->out;
            t->ell = -1;
            t->begin = (int)p + 2;
            p++;
        } else if (c > 32 && c < 127) {
            return ta_error(TA_EINVAL,
                            "%s: spec '%s' has an invalid character '%c' at position %zu; "
                            "indices must be letters a-z or A-Z", fn, spec, c, p);
        } else {
            return ta_error(TA_EINVAL,
                            "%s: spec has an invalid character (code %d) at position %zu; "
                            "indices must be letters a-z or A-Z", fn, (int)(unsigned char)c, p);
        }
    }
    t->end = (int)len;

    int count[EI_LETTERS] = {0};
    for (int k = 0; k < sp->nops; k++)
        for (int i = 0; i < sp->in[k].n; i++) count[sp->in[k].lab[i]]++;
    if (!sp->explicit_out) {
        ei_implicit_output(sp, count);
        return TA_OK;
    }
    bool seen[EI_LETTERS] = {false};
    for (int i = 0; i < sp->out.n; i++) {
        int id = sp->out.lab[i];
        if (count[id] == 0)
            return ta_error(TA_EINVAL,
                            "%s: spec '%s': output index '%c' does not appear in any operand",
                            fn, spec, ei_id_char(id));
        if (seen[id])
            return ta_error(TA_EINVAL,
                            "%s: spec '%s': output index '%c' appears more than once", fn, spec,
                            ei_id_char(id));
        seen[id] = true;
    }
    return TA_OK;
}

/* ------------------------------------------------------------------- bind */

typedef struct ei_bind {
    int nops, E;                        /* operands; dims under "..." after broadcasting */
    bool used[EI_MAX_IDX];              /* the index occurs in some operand */
    int64_t size[EI_MAX_IDX];           /* extent after broadcasting */
    int64_t opsize[2][EI_MAX_IDX];      /* extent in each operand, -1 where absent */
    int64_t stride[2][EI_MAX_IDX];      /* element stride in each operand (0: absent or
                                           extent 1, i.e. broadcast) */
    bool in_out[EI_MAX_IDX];
    int out_ndim;
    int out_id[TA_MAX_DIMS];
    int64_t out_shape[TA_MAX_DIMS];
} ei_bind;

/* Index id of dim d of a term with ne dims under "..." (E in all). */
static int ei_dim_id(const ei_term *t, int d, int ne, int E)
{
    if (t->ell >= 0 && d >= t->ell && d < t->ell + ne) return EI_LETTERS + E - ne + (d - t->ell);
    return t->lab[(t->ell >= 0 && d >= t->ell) ? d - ne : d];
}

static ta_status ei_bind_sizes(ei_bind *bd, const char *fn, const ei_spec *sp, int k)
{
    for (int id = 0; id < EI_MAX_IDX; id++) {
        int64_t s = bd->opsize[k][id];
        if (s < 0) continue;
        if (!bd->used[id]) {
            bd->used[id] = true;
            bd->size[id] = s;
        } else if (s != bd->size[id] && s != 1) {
            if (bd->size[id] != 1) {
                if (id < EI_LETTERS)
                    return ta_error(TA_ESHAPE,
                                    "%s: index '%c' has size %lld in operand 0 but %lld in "
                                    "operand 1 (spec '%s')", fn, ei_id_char(id),
                                    (long long)bd->size[id], (long long)s, sp->text);
                return ta_error(TA_ESHAPE,
                                "%s: dim %d under '...' has size %lld in operand 0 but %lld "
                                "in operand 1, which do not broadcast (spec '%s')", fn,
                                id - EI_LETTERS, (long long)bd->size[id], (long long)s,
                                sp->text);
            }
            bd->size[id] = s; /* operand 0 had extent 1: it broadcasts */
        }
    }
    return TA_OK;
}

static ta_status ei_bind_ops(ei_bind *bd, const char *fn, const ei_spec *sp,
                             const ta_tensor *const *ops)
{
    memset(bd, 0, sizeof *bd);
    bd->nops = sp->nops;
    int ne[2] = {0, 0};
    char name[96];
    for (int k = 0; k < sp->nops; k++) {
        const ei_term *t = &sp->in[k];
        int nd = ops[k]->ndim;
        if (t->ell < 0 && nd != t->n)
            return ta_error(TA_ESHAPE, "%s: operand %d has %d dims but the spec %s names %d",
                            fn, k, nd, ei_term_name(name, sizeof name, sp, t), t->n);
        if (t->ell >= 0 && nd < t->n)
            return ta_error(TA_ESHAPE,
                            "%s: operand %d has %d dims but the spec %s names at least %d", fn,
                            k, nd, ei_term_name(name, sizeof name, sp, t), t->n);
        ne[k] = t->ell >= 0 ? nd - t->n : 0;
        bd->E = TA_MAX(bd->E, ne[k]);
    }
    for (int k = 0; k < sp->nops; k++) {
        for (int id = 0; id < EI_MAX_IDX; id++) bd->opsize[k][id] = -1;
        const ta_tensor *x = ops[k];
        for (int d = 0; d < x->ndim; d++) {
            int id = ei_dim_id(&sp->in[k], d, ne[k], bd->E);
            int64_t s = x->shape[d];
            if (bd->opsize[k][id] >= 0 && bd->opsize[k][id] != s)
                return ta_error(TA_ESHAPE,
                                "%s: index '%c' is repeated in operand %d with sizes %lld and "
                                "%lld; a diagonal needs equal sizes", fn, ei_id_char(id), k,
                                (long long)bd->opsize[k][id], (long long)s);
            bd->opsize[k][id] = s;
            if (s != 1) bd->stride[k][id] += x->stride[d];
        }
        ta_status st = ei_bind_sizes(bd, fn, sp, k);
        if (st) return st;
    }
    const ei_term *o = &sp->out;
    int nd = o->n + (o->ell >= 0 ? bd->E : 0);
    if (nd > TA_MAX_DIMS)
        return ta_error(TA_EUNSUPPORTED,
                        "%s: the result of spec '%s' would have %d dims; at most %d are "
                        "supported", fn, sp->text, nd, TA_MAX_DIMS);
    bd->out_ndim = nd;
    for (int d = 0; d < nd; d++) {
        int id = ei_dim_id(o, d, o->ell >= 0 ? bd->E : 0, bd->E);
        bd->out_id[d] = id;
        bd->out_shape[d] = bd->size[id];
        bd->in_out[id] = true;
    }
    return TA_OK;
}

/* -------------------------------------------------------------- loop nests */

/* A loop nest over merged dims, outermost first, with element strides in up to three
 * tensors (a, b, c; unused tensors have stride 0). */
typedef struct ei_loop {
    int n;
    int64_t size[EI_MAX_IDX];
    int64_t st[3][EI_MAX_IDX];
} ei_loop;

static int64_t ei_abs(int64_t x) { return x < 0 ? -x : x; }

/* Sorts ids by descending |stride in tensor key| (stable), so the nest walks that
 * tensor outermost-first. */
static void ei_sort(int *ord, const int *ids, int n, const int64_t *st)
{
    for (int i = 0; i < n; i++) {
        int id = ids[i], j = i;
        while (j > 0 && ei_abs(st[ord[j - 1]]) < ei_abs(st[id])) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = id;
    }
}

/* Builds the nest of ids ordered by tensor key, merging neighbours whose strides chain
 * in all three tensors: one dim of extent s1*s2 then walks them both. */
static void ei_merge(ei_loop *L, const int *ids, int n, const int64_t *size,
                     const int64_t (*st)[EI_MAX_IDX], int key)
{
    int ord[EI_MAX_IDX];
    ei_sort(ord, ids, n, st[key]);
    L->n = 0;
    for (int i = 0; i < n; i++) {
        int id = ord[i];
        if (L->n > 0) {
            int q = L->n - 1;
            bool chain = true;
            for (int t = 0; t < 3; t++) chain = chain && L->st[t][q] == st[t][id] * size[id];
            if (chain) {
                L->size[q] *= size[id];
                for (int t = 0; t < 3; t++) L->st[t][q] = st[t][id];
                continue;
            }
        }
        L->size[L->n] = size[id];
        for (int t = 0; t < 3; t++) L->st[t][L->n] = st[t][id];
        L->n++;
    }
}

static int64_t ei_loop_numel(const ei_loop *L)
{
    int64_t n = 1;
    for (int d = 0; d < L->n; d++) n *= L->size[d];
    return n;
}

/* A nest always has an innermost dim for the kernels to run along. */
static void ei_loop_ensure_dim(ei_loop *L)
{
    if (L->n > 0) return;
    L->n = 1;
    L->size[0] = 1;
    for (int t = 0; t < 3; t++) L->st[t][0] = 0;
}

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

/* ------------------------------------------------------------------- plan */

/* The operands and output in index space. */
typedef struct ei_plan {
    int64_t size[EI_MAX_IDX];
    int64_t st[3][EI_MAX_IDX];     /* strides in a, b, out */
    bool has[3][EI_MAX_IDX];       /* the index moves this tensor (extent > 1 there) */
    int nact;
    int act[EI_MAX_IDX];           /* indices of extent > 1, by id */
    const float *ptr[2];
    float *tmp[2];                 /* temporaries owned by the plan */
} ei_plan;

static void ei_plan_init(ei_plan *p, const ei_bind *bd, const ta_tensor *const *ops,
                         const ta_tensor *out)
{
    memset(p, 0, sizeof *p);
    for (int id = 0; id < EI_MAX_IDX; id++) {
        if (!bd->used[id]) continue;
        p->size[id] = bd->size[id];
        if (bd->size[id] != 1) p->act[p->nact++] = id;
        for (int k = 0; k < bd->nops; k++) {
            p->st[k][id] = bd->stride[k][id];
            p->has[k][id] = bd->opsize[k][id] > 1;
        }
    }
    for (int d = 0; d < bd->out_ndim; d++) {
        int id = bd->out_id[d];
        if (out->shape[d] == 1) continue;
        p->st[EI_C][id] = out->stride[d];
        p->has[EI_C][id] = true;
    }
    for (int k = 0; k < bd->nops; k++) p->ptr[k] = ops[k]->data;
}

/* Writes operand k of the plan into a new contiguous temporary laid out in `order`
 * (outermost first), summing over the indices in `sum`, and makes the plan read it
 * from there. Sums are in double, rounded once, like every reduction here. */
static ta_status ei_relayout(ei_plan *p, int k, const int *order, int n, const int *sum,
                             int nsum)
{
    int64_t numel = 1;
    for (int i = 0; i < n; i++) numel *= p->size[order[i]];
    float *t = ta_alloc((size_t)(numel ? numel : 1) * sizeof(float));
    if (!t) return TA_ENOMEM;
    int64_t layout[EI_MAX_IDX], s = 1;
    for (int i = n - 1; i >= 0; i--) {
        layout[order[i]] = s;
        s *= p->size[order[i]];
    }
    /* K walks the kept indices (tensor 0: the operand, tensor 2: the temporary),
     * S the summed ones (tensor 0 only). */
    int64_t kst[3][EI_MAX_IDX], sst[3][EI_MAX_IDX];
    memset(kst, 0, sizeof kst);
    memset(sst, 0, sizeof sst);
    for (int i = 0; i < n; i++) {
        kst[0][order[i]] = p->st[k][order[i]];
        kst[2][order[i]] = layout[order[i]];
    }
    for (int i = 0; i < nsum; i++) sst[0][sum[i]] = p->st[k][sum[i]];
    ei_loop K, S;
    ei_merge(&K, order, n, p->size, (const int64_t(*)[EI_MAX_IDX])kst, 2);
    ei_loop_ensure_dim(&K);
    ei_merge(&S, sum, nsum, p->size, (const int64_t(*)[EI_MAX_IDX])sst, 0);
    ei_reduce_run(t, p->ptr[k], &K, &S);

    for (int i = 0; i < n; i++) p->st[k][order[i]] = layout[order[i]];
    for (int i = 0; i < nsum; i++) {
        p->st[k][sum[i]] = 0;
        p->has[k][sum[i]] = false;
    }
    ta_free(p->tmp[k]);
    p->tmp[k] = t;
    p->ptr[k] = t;
    return TA_OK;
}

/* The active indices of operand k that are summed in it alone (want_sum), or all its
 * others, these sorted by descending |stride in the output| so that a relaid operand
 * walks like the output does. */
static int ei_collect(int *ids, const ei_plan *p, int k, bool want_sum)
{
    int o = 1 - k, n = 0;
    int tmp[EI_MAX_IDX];
    for (int i = 0; i < p->nact; i++) {
        int id = p->act[i];
        if (!p->has[k][id]) continue;
        bool summed_here = !p->has[o][id] && !p->has[EI_C][id];
        if (summed_here == want_sum) tmp[n++] = id;
    }
    if (want_sum) {
        memcpy(ids, tmp, (size_t)n * sizeof *ids);
        return n;
    }
    ei_sort(ids, tmp, n, p->st[EI_C]);
    return n;
}

/* Reduces an operand over the indices only it has (and the output lacks): reading it
 * once beats multiplying every one of its terms by the same value of the other. */
static ta_status ei_prereduce(ei_plan *p, int k, ta_einsum_plan_info *info)
{
    int sum[EI_MAX_IDX], keep[EI_MAX_IDX];
    int nsum = ei_collect(sum, p, k, true);
    if (nsum == 0) return TA_OK;
    int nkeep = ei_collect(keep, p, k, false);
    /* Keep the operand's own order for its kept indices: the reduction then streams. */
    int ord[EI_MAX_IDX];
    ei_sort(ord, keep, nkeep, p->st[k]);
    info->reduced++;
    return ei_relayout(p, k, ord, nkeep, sum, nsum);
}

/* Whether the ids, sorted by descending |stride in st|, chain into one dim there. */
static bool ei_chains(int *ord, const int *ids, int n, const int64_t *size, const int64_t *st)
{
    ei_sort(ord, ids, n, st);
    for (int i = 0; i + 1 < n; i++)
        if (st[ord[i]] != st[ord[i + 1]] * size[ord[i + 1]]) return false;
    return true;
}

static int64_t ei_operand_numel(const ei_plan *p, int k)
{
    int64_t n = 1;
    for (int i = 0; i < p->nact; i++)
        if (p->has[k][p->act[i]]) n *= p->size[p->act[i]];
    return n;
}

/* Packs operand k with its free/batch indices in output order, then the contracted
 * indices in korder (innermost), so that K becomes one stride there. */
static ta_status ei_pack(ei_plan *p, int k, const int *korder, int nk)
{
    int order[EI_MAX_IDX];
    int n = ei_collect(order, p, k, false);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (p->has[EI_C][order[i]]) order[m++] = order[i];
    for (int i = 0; i < nk; i++) order[m++] = korder[i];
    return ei_relayout(p, k, order, m, NULL, 0);
}

/* Makes the contracted indices one stride in both operands, packing what breaks it. */
static ta_status ei_fix_k(ei_plan *p, const int *kids, int nk, ta_einsum_plan_info *info)
{
    int oa[EI_MAX_IDX], ob[EI_MAX_IDX];
    bool ca = ei_chains(oa, kids, nk, p->size, p->st[EI_A]);
    bool cb = ei_chains(ob, kids, nk, p->size, p->st[EI_B]);
    ta_status st;
    if (cb && (!ca || ei_operand_numel(p, EI_A) <= ei_operand_numel(p, EI_B))) {
        info->packed = 1;
        return ei_pack(p, EI_A, ob, nk);
    }
    if (ca) {
        info->packed = 1;
        return ei_pack(p, EI_B, oa, nk);
    }
    info->packed = 2;
    if ((st = ei_pack(p, EI_A, oa, nk))) return st;
    return ei_pack(p, EI_B, oa, nk);
}

/* Takes the largest dim of a free group as the GEMM dim; the rest become batch dims. */
static void ei_pick(int64_t *ext, int64_t st[3], ei_loop *batch, const ei_loop *G)
{
    int best = -1;
    for (int d = 0; d < G->n; d++)
        if (best < 0 || G->size[d] > G->size[best]) best = d;
    *ext = 1;
    st[0] = st[1] = st[2] = 0;
    for (int d = 0; d < G->n; d++) {
        if (d == best) {
            *ext = G->size[d];
            for (int t = 0; t < 3; t++) st[t] = G->st[t][d];
            continue;
        }
        batch->size[batch->n] = G->size[d];
        for (int t = 0; t < 3; t++) batch->st[t][batch->n] = G->st[t][d];
        batch->n++;
    }
}

static ta_status ei_gemm(ei_plan *p, float *C, const int *bids, int nb, const int *mids, int nm,
                         const int *nids, int nn, const int *kids, int nk,
                         ta_einsum_plan_info *info)
{
    const int64_t(*st)[EI_MAX_IDX] = (const int64_t(*)[EI_MAX_IDX])p->st;
    ei_loop K, Bt, Mg, Ng;
    ei_merge(&K, kids, nk, p->size, st, EI_A);
    if (K.n != 1) return ta_error(TA_EINTERNAL, "ta_einsum: contracted group left in %d dims", K.n);
    ei_merge(&Bt, bids, nb, p->size, st, EI_C);
    ei_merge(&Mg, mids, nm, p->size, st, EI_C);
    ei_merge(&Ng, nids, nn, p->size, st, EI_C);
    int64_t M, N, ms[3], ns[3];
    ei_pick(&M, ms, &Bt, &Mg);
    ei_pick(&N, ns, &Bt, &Ng);
    if (Bt.n > TA_MAX_DIMS)
        return ta_error(TA_EINTERNAL, "ta_einsum: %d batch dims after merging", Bt.n);
    ta_gemm_batch gb;
    memset(&gb, 0, sizeof gb);
    gb.ndim = Bt.n;
    for (int d = 0; d < Bt.n; d++) {
        gb.shape[d] = Bt.size[d];
        gb.stride_a[d] = Bt.st[EI_A][d];
        gb.stride_b[d] = Bt.st[EI_B][d];
        gb.stride_c[d] = Bt.st[EI_C][d];
    }
    info->path = TA_EINSUM_PATH_GEMM;
    info->gemm_calls = 1;
    info->batch_ndim = Bt.n;
    info->batch = ei_loop_numel(&Bt);
    info->k = K.size[0];
    /* The engine writes unit-stride rows of C fastest; when only C's M dim is unit
     * stride ("ij,jk->ki"), compute C^T = B^T A^T instead: same products, same sums. */
    if (ei_abs(ns[EI_C]) != 1 && ei_abs(ms[EI_C]) == 1) {
        for (int d = 0; d < gb.ndim; d++) {
            int64_t t = gb.stride_a[d];
            gb.stride_a[d] = gb.stride_b[d];
            gb.stride_b[d] = t;
        }
        info->transposed = 1;
        info->m = N;
        info->n = M;
        return ta_gemm_run("ta_einsum", NULL, C, ns[EI_C], ms[EI_C], p->ptr[EI_B], ns[EI_B], K.st[EI_B][0],
                               p->ptr[EI_A], K.st[EI_A][0], ms[EI_A], N, M, K.size[0], 1.0f,
                               0.0f, &gb);
    }
    info->m = M;
    info->n = N;
    return ta_gemm_run("ta_einsum", NULL, C, ms[EI_C], ns[EI_C], p->ptr[EI_A], ms[EI_A], K.st[EI_A][0],
                           p->ptr[EI_B], K.st[EI_B][0], ns[EI_B], M, N, K.size[0], 1.0f, 0.0f,
                           &gb);
}

/* Two operands: reduce what only one has, then one GEMM (or a product loop). */
static ta_status ei_run2(ei_plan *p, float *C, ta_einsum_plan_info *info)
{
    ta_status st;
    for (int k = 0; k < 2; k++)
        if ((st = ei_prereduce(p, k, info))) return st;
    int b[EI_MAX_IDX], m[EI_MAX_IDX], n[EI_MAX_IDX], kk[EI_MAX_IDX], all[EI_MAX_IDX];
    int nb = 0, nm = 0, nn = 0, nk = 0, nall = 0;
    for (int i = 0; i < p->nact; i++) {
        int id = p->act[i];
        bool ia = p->has[EI_A][id], ib = p->has[EI_B][id], ic = p->has[EI_C][id];
        if (ic) all[nall++] = id;
        if (ia && ib && ic) b[nb++] = id;
        else if (ia && ib) kk[nk++] = id;
        else if (ia && ic) m[nm++] = id;
        else if (ib && ic) n[nn++] = id;
    }
    if (nk == 0) {
        ei_loop L;
        ei_merge(&L, all, nall, p->size, (const int64_t(*)[EI_MAX_IDX])p->st, EI_C);
        ei_loop_ensure_dim(&L);
        info->path = TA_EINSUM_PATH_ELEMENTWISE;
        ei_product_run(C, p->ptr[EI_A], p->ptr[EI_B], &L);
        return TA_OK;
    }
    ei_loop K;
    ei_merge(&K, kk, nk, p->size, (const int64_t(*)[EI_MAX_IDX])p->st, EI_A);
    if (K.n > 1 && (st = ei_fix_k(p, kk, nk, info))) return st;
    return ei_gemm(p, C, b, nb, m, nm, n, nn, kk, nk, info);
}

/* One operand: out = sum over the indices the output lacks (permutes, diagonals). */
static void ei_run1(ei_plan *p, float *C, ta_einsum_plan_info *info)
{
    int keep[EI_MAX_IDX], sum[EI_MAX_IDX], nkeep = 0, nsum = 0;
    for (int i = 0; i < p->nact; i++) {
        int id = p->act[i];
        if (p->has[EI_C][id]) keep[nkeep++] = id;
        else sum[nsum++] = id;
    }
    int64_t st3[3][EI_MAX_IDX];
    memset(st3, 0, sizeof st3);
    memcpy(st3[0], p->st[EI_A], sizeof st3[0]);
    memcpy(st3[2], p->st[EI_C], sizeof st3[2]);
    ei_loop K, S;
    ei_merge(&K, keep, nkeep, p->size, (const int64_t(*)[EI_MAX_IDX])st3, EI_C);
    ei_loop_ensure_dim(&K);
    memset(st3[2], 0, sizeof st3[2]);
    ei_merge(&S, sum, nsum, p->size, (const int64_t(*)[EI_MAX_IDX])st3, 0);
    info->path = TA_EINSUM_PATH_GENERIC;
    ei_reduce_run(C, p->ptr[EI_A], &K, &S);
}

/* --------------------------------------------------------------- entries */

/* Validates the arguments, parses and binds: everything but the output. */
static ta_status ei_prepare(ei_spec *sp, ei_bind *bd, const char *fn, const char *spec,
                            const ta_tensor *a, const ta_tensor *b, int nops)
{
    if (!spec) return ta_error(TA_EINVAL, "%s: spec is NULL", fn);
    ta_status st = ta_tensor_check(fn, "a", a);
    if (st) return st;
    if (nops == 2 && (st = ta_tensor_check(fn, "b", b))) return st;
    if ((st = ei_parse(sp, fn, spec))) return st;
    if (sp->nops != nops)
        return ta_error(TA_EINVAL, "%s: spec '%s' names %d operand%s but %d %s given%s", fn,
                        spec, sp->nops, sp->nops == 1 ? "" : "s", nops,
                        nops == 1 ? "was" : "were",
                        sp->nops == 2 ? " (use ta_einsum for two operands)"
                        : (nops == 2 ? " (use ta_einsum1 for one operand)" : ""));
    const ta_tensor *ops[2] = {a, b};
    return ei_bind_ops(bd, fn, sp, ops);
}

static ta_status ei_check_out(const char *fn, const ta_tensor *out, const ei_bind *bd,
                              const char *spec)
{
    ta_status st = ta_tensor_check(fn, "out", out);
    if (st) return st;
    bool same = out->ndim == bd->out_ndim;
    for (int d = 0; same && d < out->ndim; d++) same = out->shape[d] == bd->out_shape[d];
    if (!same) {
        char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
        return ta_error(TA_ESHAPE, "%s: out has shape %s but the result of '%s' has shape %s",
                        fn, ta_shape_str(s1, sizeof s1, out->ndim, out->shape), spec,
                        ta_shape_str(s2, sizeof s2, bd->out_ndim, bd->out_shape));
    }
    for (int d = 0; d < out->ndim; d++)
        if (out->shape[d] > 1 && out->stride[d] == 0)
            return ta_error(TA_EINVAL,
                            "%s: out has stride 0 in dim %d (size %lld): several results "
                            "would land on one element", fn, d, (long long)out->shape[d]);
    return TA_OK;
}

static ta_status ei_execute(const ei_bind *bd, const ta_tensor *const *ops, ta_tensor *res,
                            ta_einsum_plan_info *info)
{
    if (ta_tensor_numel(res) == 0) {
        info->path = TA_EINSUM_PATH_EMPTY;
        return TA_OK;
    }
    for (int id = 0; id < EI_MAX_IDX; id++)
        if (bd->used[id] && bd->size[id] == 0) {
            /* An empty sum: the result is all zeros, as in torch. */
            info->path = TA_EINSUM_PATH_EMPTY;
            return ta_tensor_fill(res, 0.0f);
        }
    ei_plan p;
    ei_plan_init(&p, bd, ops, res);
    ta_status st = TA_OK;
    if (bd->nops == 1) ei_run1(&p, res->data, info);
    else st = ei_run2(&p, res->data, info);
    ta_free(p.tmp[0]);
    ta_free(p.tmp[1]);
    return st;
}

static ta_status ei_call(const char *fn, const char *spec, ta_tensor *out, const ta_tensor *a,
                         const ta_tensor *b, int nops, bool allocate)
{
    ei_last_plan = (ta_einsum_plan_info){0};
    if (!out) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    ei_spec sp;
    ei_bind bd;
    ta_status st = ei_prepare(&sp, &bd, fn, spec, a, b, nops);
    if (st) return st;
    ta_tensor res;
    if (allocate) {
        if ((st = ta_tensor_empty(&res, bd.out_ndim, bd.out_shape))) return st;
    } else {
        if ((st = ei_check_out(fn, out, &bd, spec))) return st;
        /* The GEMM and product loops read inputs while writing out: sharing memory
         * would read half-written results. */
        const ta_tensor *ins[2] = {a, b};
        for (int k = 0; k < nops; k++)
            if (ta_tensors_overlap(out, ins[k]))
                return ta_error(TA_EINVAL, "%s: out overlaps operand %d ('%s'); outputs must "
                                "not share memory with the inputs", fn, k, spec);
        res = *out;
    }
    ta_einsum_plan_info info = {0};
    const ta_tensor *ops[2] = {a, b};
    st = ei_execute(&bd, ops, &res, &info);
    if (st) {
        if (allocate) ta_tensor_free(&res);
        return st;
    }
    if (allocate) *out = res;
    ei_last_plan = info;
    return TA_OK;
}

ta_status ta_einsum(ta_tensor *out, const char *spec, const ta_tensor *a, const ta_tensor *b)
{
    return ei_call("ta_einsum", spec, out, a, b, 2, false);
}

ta_status ta_einsum1(ta_tensor *out, const char *spec, const ta_tensor *a)
{
    return ei_call("ta_einsum1", spec, out, a, NULL, 1, false);
}

ta_status ta_einsum_alloc(ta_tensor *out, const char *spec, const ta_tensor *a,
                          const ta_tensor *b)
{
    return ei_call("ta_einsum_alloc", spec, out, a, b, 2, true);
}

ta_status ta_einsum1_alloc(ta_tensor *out, const char *spec, const ta_tensor *a)
{
    return ei_call("ta_einsum1_alloc", spec, out, a, NULL, 1, true);
}

ta_status ta_einsum_shape(int *ndim, int64_t shape[TA_MAX_DIMS], const char *spec,
                          const ta_tensor *a, const ta_tensor *b)
{
    const char *fn = "ta_einsum_shape";
    if (!ndim) return ta_error(TA_EINVAL, "%s: ndim is NULL", fn);
    if (!shape) return ta_error(TA_EINVAL, "%s: shape is NULL", fn);
    ei_spec sp;
    ei_bind bd;
    ta_status st = ei_prepare(&sp, &bd, fn, spec, a, b, b ? 2 : 1);
    if (st) return st;
    *ndim = bd.out_ndim;
    for (int d = 0; d < bd.out_ndim; d++) shape[d] = bd.out_shape[d];
    return TA_OK;
}
