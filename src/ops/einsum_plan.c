/* einsum, step two: the plan of one call, from shapes and strides alone.
 *
 * Indices of extent 1 are dropped (they never move a pointer). The rest are classified
 * by where they occur:
 *     batch      a, b and out      -> GEMM batch dims
 *     contracted a and b, not out  -> GEMM K
 *     free-a     a and out         -> GEMM M
 *     free-b     b and out         -> GEMM N
 *     summed in one operand only   -> that operand is reduced first (a step)
 * Each group is sorted by stride and neighbours are merged into one dim when their
 * strides chain (outer stride == inner stride * inner extent) in every tensor; a free
 * group that stays split keeps its largest piece as M (or N) and turns the rest into
 * batch dims (stride 0 in the operand that lacks them: it is 0 already). Only a
 * contracted group that cannot be one stride needs a copy: the operand(s) that break the
 * chain are packed (a step) in an order that makes it one. Two operands with nothing
 * contracted run a product loop, one operand a sum loop (einsum.c says why).
 *
 * A step only changes the plan's strides for its operand (to the temporary's), so every
 * later decision sees the layout it will run on; ei_plan_layout then gives each step's
 * temporary and the GEMM's packing buffers their place in one arena. */
#include "core/core.h"
#include "ops/einsum_internal.h"

#include <string.h>

/* -------------------------------------------------------------- loop nests */

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

/* A nest always has an innermost dim for the loops to run along. */
static void ei_loop_ensure_dim(ei_loop *L)
{
    if (L->n > 0) return;
    L->n = 1;
    L->size[0] = 1;
    for (int t = 0; t < 3; t++) L->st[t][0] = 0;
}

/* ------------------------------------------------------------------ steps */

static void ei_plan_init(ei_plan *p, const ei_bind *bd, const ta_tensor *out)
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
}

/* Plans writing operand k into a new contiguous temporary laid out in `order`
 * (outermost first), summing over the indices in `sum`; later decisions read it from
 * there. Sums are in double, rounded once, like every reduction here. */
static ta_status ei_relayout(ei_plan *p, int k, const int *order, int n, const int *sum,
                             int nsum)
{
    if (p->nsteps == EI_MAX_STEPS)
        return ta_error(TA_EINTERNAL, "ta_einsum: more than %d temporaries planned",
                        EI_MAX_STEPS);
    ei_step *s = &p->step[p->nsteps++];
    s->k = k;
    int64_t layout[EI_MAX_IDX], numel = 1;
    for (int i = n - 1; i >= 0; i--) {
        layout[order[i]] = numel;
        numel *= p->size[order[i]];
    }
    s->numel = numel;
    /* K walks the kept indices (tensor 0: the source, tensor 2: the temporary),
     * S the summed ones (tensor 0 only). */
    int64_t kst[3][EI_MAX_IDX], sst[3][EI_MAX_IDX];
    memset(kst, 0, sizeof kst);
    memset(sst, 0, sizeof sst);
    for (int i = 0; i < n; i++) {
        kst[0][order[i]] = p->st[k][order[i]];
        kst[2][order[i]] = layout[order[i]];
    }
    for (int i = 0; i < nsum; i++) sst[0][sum[i]] = p->st[k][sum[i]];
    ei_merge(&s->K, order, n, p->size, (const int64_t(*)[EI_MAX_IDX])kst, 2);
    ei_loop_ensure_dim(&s->K);
    ei_merge(&s->S, sum, nsum, p->size, (const int64_t(*)[EI_MAX_IDX])sst, 0);

    for (int i = 0; i < n; i++) p->st[k][order[i]] = layout[order[i]];
    for (int i = 0; i < nsum; i++) {
        p->st[k][sum[i]] = 0;
        p->has[k][sum[i]] = false;
    }
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
static ta_status ei_prereduce(ei_plan *p, int k)
{
    int sum[EI_MAX_IDX], keep[EI_MAX_IDX];
    int nsum = ei_collect(sum, p, k, true);
    if (nsum == 0) return TA_OK;
    int nkeep = ei_collect(keep, p, k, false);
    /* Keep the operand's own order for its kept indices: the reduction then streams. */
    int ord[EI_MAX_IDX];
    ei_sort(ord, keep, nkeep, p->st[k]);
    p->info.reduced++;
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
static ta_status ei_fix_k(ei_plan *p, const int *kids, int nk)
{
    int oa[EI_MAX_IDX], ob[EI_MAX_IDX];
    bool ca = ei_chains(oa, kids, nk, p->size, p->st[EI_A]);
    bool cb = ei_chains(ob, kids, nk, p->size, p->st[EI_B]);
    ta_status st;
    if (cb && (!ca || ei_operand_numel(p, EI_A) <= ei_operand_numel(p, EI_B))) {
        p->info.packed = 1;
        return ei_pack(p, EI_A, ob, nk);
    }
    if (ca) {
        p->info.packed = 1;
        return ei_pack(p, EI_B, oa, nk);
    }
    p->info.packed = 2;
    if ((st = ei_pack(p, EI_A, oa, nk))) return st;
    return ei_pack(p, EI_B, oa, nk);
}

/* ------------------------------------------------------------------- GEMM */

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

/* The groups of the two-operand plan, as lists of index ids. */
typedef struct ei_groups {
    int b[EI_MAX_IDX], m[EI_MAX_IDX], n[EI_MAX_IDX], k[EI_MAX_IDX], out[EI_MAX_IDX];
    int nb, nm, nn, nk, nout;
} ei_groups;

static ta_status ei_plan_gemm(ei_plan *p, const ei_groups *g)
{
    const int64_t(*st)[EI_MAX_IDX] = (const int64_t(*)[EI_MAX_IDX])p->st;
    ei_loop K, Bt, Mg, Ng;
    ei_merge(&K, g->k, g->nk, p->size, st, EI_A);
    if (K.n != 1) return ta_error(TA_EINTERNAL, "ta_einsum: contracted group left in %d dims", K.n);
    ei_merge(&Bt, g->b, g->nb, p->size, st, EI_C);
    ei_merge(&Mg, g->m, g->nm, p->size, st, EI_C);
    ei_merge(&Ng, g->n, g->nn, p->size, st, EI_C);
    int64_t M, N, ms[3], ns[3];
    ei_pick(&M, ms, &Bt, &Mg);
    ei_pick(&N, ns, &Bt, &Ng);
    if (Bt.n > TA_MAX_DIMS)
        return ta_error(TA_EINTERNAL, "ta_einsum: %d batch dims after merging", Bt.n);
    ta_gemm_batch gb = {.ndim = Bt.n};
    for (int d = 0; d < Bt.n; d++) {
        gb.shape[d] = Bt.size[d];
        gb.stride_a[d] = Bt.st[EI_A][d];
        gb.stride_b[d] = Bt.st[EI_B][d];
        gb.stride_c[d] = Bt.st[EI_C][d];
    }
    p->kind = EI_RUN_GEMM;
    p->info.path = TA_EINSUM_PATH_GEMM;
    p->info.gemm_calls = 1;
    p->info.batch_ndim = Bt.n;
    p->info.batch = ei_loop_numel(&Bt);
    p->info.k = K.size[0];
    ei_gemm *c = &p->gemm;
    /* The engine writes unit-stride rows of C fastest; when only C's M dim is unit
     * stride ("ij,jk->ki"), compute C^T = B^T A^T instead: same products, same sums. */
    if (ei_abs(ns[EI_C]) != 1 && ei_abs(ms[EI_C]) == 1) {
        for (int d = 0; d < gb.ndim; d++) {
            int64_t t = gb.stride_a[d];
            gb.stride_a[d] = gb.stride_b[d];
            gb.stride_b[d] = t;
        }
        p->info.transposed = 1;
        *c = (ei_gemm){.a_op = EI_B, .b_op = EI_A, .rsc = ns[EI_C], .csc = ms[EI_C],
                       .rsa = ns[EI_B], .csa = K.st[EI_B][0], .rsb = K.st[EI_A][0],
                       .csb = ms[EI_A], .M = N, .N = M, .K = K.size[0], .batch = gb};
    } else {
        *c = (ei_gemm){.a_op = EI_A, .b_op = EI_B, .rsc = ms[EI_C], .csc = ns[EI_C],
                       .rsa = ms[EI_A], .csa = K.st[EI_A][0], .rsb = K.st[EI_B][0],
                       .csb = ns[EI_B], .M = M, .N = N, .K = K.size[0], .batch = gb};
    }
    p->info.m = c->M;
    p->info.n = c->N;
    return TA_OK;
}

/* Two operands: reduce what only one has, then one GEMM (or a product loop). */
static ta_status ei_plan2(ei_plan *p)
{
    ta_status st;
    for (int k = 0; k < 2; k++)
        if ((st = ei_prereduce(p, k))) return st;
    ei_groups g = {0};
    for (int i = 0; i < p->nact; i++) {
        int id = p->act[i];
        bool ia = p->has[EI_A][id], ib = p->has[EI_B][id], ic = p->has[EI_C][id];
        if (ic) g.out[g.nout++] = id;
        if (ia && ib && ic) g.b[g.nb++] = id;
        else if (ia && ib) g.k[g.nk++] = id;
        else if (ia && ic) g.m[g.nm++] = id;
        else if (ib && ic) g.n[g.nn++] = id;
    }
    if (g.nk == 0) {
        ei_merge(&p->L, g.out, g.nout, p->size, (const int64_t(*)[EI_MAX_IDX])p->st, EI_C);
        ei_loop_ensure_dim(&p->L);
        p->kind = EI_RUN_PRODUCT;
        p->info.path = TA_EINSUM_PATH_ELEMENTWISE;
        return TA_OK;
    }
    ei_loop K;
    ei_merge(&K, g.k, g.nk, p->size, (const int64_t(*)[EI_MAX_IDX])p->st, EI_A);
    if (K.n > 1 && (st = ei_fix_k(p, g.k, g.nk))) return st;
    return ei_plan_gemm(p, &g);
}

/* One operand: out = sum over the indices the output lacks (permutes, diagonals). */
static void ei_plan1(ei_plan *p)
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
    ei_merge(&p->L, keep, nkeep, p->size, (const int64_t(*)[EI_MAX_IDX])st3, EI_C);
    ei_loop_ensure_dim(&p->L);
    memset(st3[2], 0, sizeof st3[2]);
    ei_merge(&p->S, sum, nsum, p->size, (const int64_t(*)[EI_MAX_IDX])st3, 0);
    p->kind = EI_RUN_SUM;
    p->info.path = TA_EINSUM_PATH_GENERIC;
}

/* ------------------------------------------------------------------ entries */

ta_status ei_plan_make(ei_plan *p, const ei_bind *bd, const ta_tensor *out)
{
    ei_plan_init(p, bd, out);
    p->kind = EI_RUN_NOTHING;
    p->info.path = TA_EINSUM_PATH_EMPTY;
    if (ta_tensor_numel(out) == 0) return TA_OK;
    for (int id = 0; id < EI_MAX_IDX; id++)
        if (bd->used[id] && bd->size[id] == 0) {
            p->kind = EI_RUN_ZERO; /* an empty sum: the result is all zeros, as in torch */
            return TA_OK;
        }
    if (bd->nops == 1) {
        ei_plan1(p);
        return TA_OK;
    }
    return ei_plan2(p);
}

void ei_plan_layout(ta_arena *a, ei_plan *p)
{
    for (int i = 0; i < p->nsteps; i++)
        p->step[i].temp = TA_ARENA_TAKE(a, float, p->step[i].numel);
    if (p->kind == EI_RUN_GEMM) {
        const ei_gemm *c = &p->gemm;
        ta_gemm_layout(a, &p->gemm.pack, c->rsc, c->csc, c->M, c->N, c->K, &c->batch);
    }
}
