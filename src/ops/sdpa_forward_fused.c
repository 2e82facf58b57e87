/* The fused SDPA forward (FlashAttention-2, Dao 2023, Algorithm 1) on the CPU.
 *
 * The rows of one (batch, kv head) group, r = g * Lq + i for the G = H / Hkv query
 * heads h = hkv * G + g that share K and V, are cut into query tiles of attn_mq rows
 * (a tile stays inside one head when Lq >= attn_mq, and spans heads otherwise, so a
 * decode step with grouped heads still fills the vector lanes). For each tile the
 * keys run in tiles of TA_FUSED_NK:
 *     S  = (scale Q_tile) K_tile^T                   attn_qk, in L1 (attn_qk_rows on
 *                                                    tiles of few rows: decode)
 *     S  = mask(S)                                   only on tiles a bound cuts
 *     m' = max(m, rowmax S), P = exp(S - m'),        attn_softmax
 *     l  = l exp(m - m') + rowsum P
 *     O  = O exp(m - m') + P V_tile                  attn_pv (rescale fused)
 * and at the end O / l and LSE = m + log l. Keys past the last row's bound
 * (ta_mask_row_end: causal limit and key length) are never visited.
 *
 * This file plans a call (tiles, the key split, scratch) and runs its work items on the
 * threads; sdpa_fused_tiles.c holds the tile steps of a work item, sdpa_fused_items.c
 * the work list (its order: at the top there), the keys each row sees and the merge of
 * a key split; sdpa_fused_internal.h what the files share.
 *
 * Semantics are the reference path's (blocked scores are -inf whatever Q K^T held;
 * empty rows give O = 0 and LSE -inf; NaN and +inf scores make the row NaN), with one
 * difference: the fused path skips V at keys that no row of a block attends, so a NaN
 * or inf in V at a key blocked for a row reaches that row only sometimes (when a
 * neighbouring row of its block attends the key and p = 0 meets it), where the
 * reference path's 0 * NaN always spreads it. */
#include "ops/sdpa.h"

#include "core/core.h"
#include "core/tensor_internal.h"
#include "kernels/kernels.h"
#include "ops/sdpa_fused_internal.h"
#include "ops/sdpa_fused_variants.h"

#include <omp.h>
#include <string.h>

/* One thread's workspace laid out in arena a (measuring or carving: the plan sizes it
 * with the same code). */
/* The state of one work item in a thread's scratch (Q rows, O rows, m, l and the rows'
 * bounds), for `rows` rows of Q and O (a sweep's further heads: attn_rows_max). */
static void ws_state_layout(ta_arena *a, fused_ws *w, const fused_plan *f, int64_t rows)
{
    const ta_sdpa_problem *p = f->p;
    const int64_t mq = f->mq_max;
    w->qp = TA_ARENA_TAKE2(a, float, rows, p->D ? p->D : 1);
    w->o = TA_ARENA_TAKE2(a, float, rows, f->ldo);
    w->m = TA_ARENA_TAKE(a, float, mq);
    w->l = TA_ARENA_TAKE(a, float, mq);
    w->alpha = TA_ARENA_TAKE(a, float, mq);
    w->end = TA_ARENA_TAKE(a, int64_t, mq);
    w->qoff = TA_ARENA_TAKE(a, int64_t, mq);
    w->lo = TA_ARENA_TAKE(a, int64_t, mq);
    w->slope = TA_ARENA_TAKE(a, float, mq);
    w->pos = TA_ARENA_TAKE(a, float, mq);
}

/* A thread's scratch: one item's state, then what the steps of any item share. */
static void ws_layout(ta_arena *a, fused_ws *w, const fused_plan *f)
{
    const ta_sdpa_problem *p = f->p;
    const int64_t mq = f->mq_max;
    ws_state_layout(a, w, f, mq);
    w->s = TA_ARENA_TAKE2(a, float, mq, TA_FUSED_NK);
    w->rowk = TA_ARENA_TAKE(a, int32_t, mq);
    w->ones = TA_ARENA_TAKE(a, float, mq);
    w->rowk_run = TA_ARENA_TAKE(a, int32_t, mq);
    w->krows = (const void **)TA_ARENA_TAKE(a, void *, TA_FUSED_NK + TA_ROWS_AHEAD);
    w->vrows = (const void **)TA_ARENA_TAKE(a, void *, TA_FUSED_NK + TA_ROWS_AHEAD);
    w->kp = f->pack_k ? TA_ARENA_TAKE2(a, float, TA_FUSED_NK, p->D) : NULL;
    w->vp = f->pack_v ? TA_ARENA_TAKE2(a, float, TA_FUSED_NK, p->Dv) : NULL;
}

/* The threads of a call with nitems work items (at least one). */
static int plan_threads(int64_t nitems)
{
    int nt = ta_threads();
    if (nt > nitems) nt = (int)nitems;
    return nt < 1 ? 1 : nt;
}

/* Everything about a call that does not depend on data: tiles, the key split, packing,
 * threads. The same for the size query and the run. */
/* The kind of rows the few-row kernels read from t in place (kernels.h,
 * attn_qk_rows_kv), or -1 when its rows are not unit-stride or cols is not a multiple of
 * the kernels' vector (kv_tile copies them then). */
static int rows_kind(const ta_tensor *t, int64_t cols, int vl)
{
    if (cols <= 0 || cols % vl != 0 || t->stride[3] != 1) return -1;
    return t->dtype == TA_F32 ? 0 : t->dtype == TA_F16 ? 1 : t->dtype == TA_BF16 ? 2 : -1;
}

/* How many kv heads a sweep steps together (ta_fused_run_sweep): Hkv when every tile is a
 * few-row tile (one per group: a decode step), the few-row kernels read K and V in place
 * and the key rows hold every head side by side (stride[1] < stride[2]: a KV cache
 * [B, L, Hkv, D], paged or not), else 1. The order matters there: a head's next rows are
 * Hkv * D elements apart, and reading a short tile of all heads keeps the reads within
 * one span of memory (docs/inference.md, "Decode order"). */
static int64_t sweep_heads(const fused_plan *f, bool any_lq)
{
    const ta_sdpa_problem *p = f->p;
    if (f->kind_k < 0 || f->kind_v < 0 || p->Hkv < 2 || p->Hkv > TA_FUSED_SWEEP_MAX ||
        (!any_lq && p->G * p->Lq > f->k->attn_rows_max))
        return 1;
    const bool side = p->K->stride[1] < p->K->stride[2] && p->V->stride[1] < p->V->stride[2];
    return side ? p->Hkv : 1;
}

/* A thread's scratch bytes (f->ws_bytes): ws_layout's, and a sweep's further heads'
 * states (f->state_bytes each). */
static void plan_ws_bytes(fused_plan *f)
{
    ta_arena one = ta_arena_measure();
    fused_ws w;
    ws_layout(&one, &w, f);
    ta_arena st = ta_arena_measure();
    ws_state_layout(&st, &w, f, f->k->attn_rows_max);
    f->state_bytes = ta_arena_bytes(&st);
    f->ws_bytes = ta_arena_bytes(&one) + (size_t)(f->sweep - 1) * f->state_bytes;
}

/* ta_sdpa_rows_alias (sdpa.h): whether the rows of t (cols floats each, unit-stride) sit
 * at a stride that maps a tile of `rows` of them onto too few sets of a 64-set L1 data
 * cache for the tile to stay there while the kernels read it again (attn_pv reads a V
 * tile once per 6 query rows; the backward rereads Q, K and dO tiles likewise): a
 * row stride that is a multiple of a large power of two, as in [B, L, H, D] tensors
 * (varlen's packed [T, H, D], a KV cache) where a head's rows are H D floats apart.
 * (Zen 4: 32 KiB, 8 ways; Golden Cove: 48 KiB, 12 ways; both 64 sets.) */
bool ta_sdpa_rows_alias(const ta_tensor *t, int64_t cols, int64_t rows)
{
    const int64_t row = cols * (int64_t)sizeof(float), ld = t->stride[2] * (int64_t)sizeof(float);
    if (t->dtype != TA_F32 || t->stride[3] != 1 || ld == row || ld % 64 != 0) return false;
    const int64_t lines = (row + 63) / 64, step = (ld / 64) % 64;
    int64_t g = 64; /* gcd(step, 64): rows start in 64 / g different sets */
    for (int64_t a = step, b = 64; a;) {
        const int64_t r = b % a;
        b = a;
        a = r;
        g = b;
    }
    const int64_t sets = TA_MIN(64, 64 / g * lines);
    return rows * lines > 4 * sets; /* more than a third of 12 ways, half of 8 */
}

static fused_plan make_plan(const ta_sdpa_problem *p)
{
    fused_plan f = {.p = p, .k = ta_kernels_active(), .G = p->G};
    f.too_big = p->D > TA_FUSED_DIM_MAX || p->Dv > TA_FUSED_DIM_MAX;
    if (f.too_big) return f;
    f.mq_max = f.k->attn_mq;
    /* O rows: attn_pv writes whole vectors (a multiple of attn_vl, a power of two) and
     * rows start 64-byte aligned (16 floats) */
    f.ldo = ta_round_up(p->Dv ? p->Dv : 1, TA_MAX(16, f.k->attn_vl));
    /* half-precision K and V are widened tile by tile (ta_sdpa_native_dtype) */
    f.pack_k = (p->K->stride[3] != 1 && p->D > 1) || p->K->dtype != TA_F32;
    f.pack_v = (p->V->stride[3] != 1 && p->Dv > 1) || p->V->dtype != TA_F32;
    f.kind_k = rows_kind(p->K, p->D, f.k->attn_vl);
    f.kind_v = rows_kind(p->V, p->Dv, f.k->attn_vl);
    f.prefetch_o = p->O->stride[3] == 1 && p->O->stride[2] != p->Dv && p->Dv > 0;
    f.scores_var = ta_sdpa_fused_scores_needed(&p->var);
    f.tpg = ta_fused_group_tiles(&f, NULL, NULL);
    f.ngroups = p->B * p->Hkv;
    f.ntiles = f.ngroups * f.tpg;
    f.split = f.ntiles < TA_FUSED_FEW_TILES && p->Lk >= 2 * TA_FUSED_SPLIT;
    f.nchunks = f.split ? (p->Lk + TA_FUSED_SPLIT - 1) / TA_FUSED_SPLIT : 1;
    if (f.nchunks > TA_FUSED_MAX_CHUNKS) f.nchunks = TA_FUSED_MAX_CHUNKS; /* widen them */
    f.chunk_keys = f.split ? ta_round_up((p->Lk + f.nchunks - 1) / f.nchunks, TA_FUSED_NK)
                           : p->Lk;
    if (f.split) f.nchunks = (p->Lk + f.chunk_keys - 1) / f.chunk_keys;
    f.sweep = sweep_heads(&f, false);
    plan_ws_bytes(&f);
    /* Partials (split only): per tile and chunk, m and l of mq_used rows, then mq_used
     * rows of Dv. */
    f.mq_used = TA_MIN(f.mq_max, p->Lq >= f.mq_max ? f.mq_max : f.G * p->Lq);
    f.part_floats = 2 * f.mq_used + f.mq_used * p->Dv;
    f.mrows = ta_fused_mask_table_rows(&p->mask);
    f.nitems = f.ntiles * f.nchunks;
    f.nparts = f.split ? f.nitems : 0;
    f.nt = plan_threads(f.nitems / f.sweep); /* a sweep's unit: Hkv items */
    return f;
}

static void layout(ta_arena *a, fused_mem *m, const fused_plan *f)
{
    if (f->too_big || f->ws_bytes == SIZE_MAX) {
        a->overflow = true;
        return;
    }
    m->ws = TA_ARENA_TAKE2(a, unsigned char, (int64_t)f->ws_bytes, f->nt);
    m->parts = f->split ? TA_ARENA_TAKE2(a, float, f->part_floats, f->nparts) : NULL;
    m->items = TA_ARENA_TAKE(a, fused_item, f->nitems);
    m->t_r0 = TA_ARENA_TAKE(a, int64_t, f->tpg);
    m->t_mq = TA_ARENA_TAKE(a, int64_t, f->tpg);
    m->t_nch = f->split ? TA_ARENA_TAKE(a, int64_t, f->ntiles) : NULL;
    m->mt = f->mrows ? TA_ARENA_TAKE2(a, int64_t, f->mrows, 2) : NULL;
}

static size_t plan_bytes(const fused_plan *f)
{
    ta_arena a = ta_arena_measure();
    fused_mem m;
    layout(&a, &m, f);
    return ta_arena_bytes(&a);
}

/* V whose rows alias in L1 (ta_sdpa_rows_alias) gets a contiguous [B, Hkv, Lk, Dv] copy
 * in the scratch before the tiles run, when the tiles reread it (tiles of many rows: not
 * a decode step, which reads each row once) and the copy needs at most
 * TA_FUSED_REPACK_MAX bytes: attn_pv reads a V tile once per 6 query rows, so it must
 * stay in L1. One pass over V per call instead of misses on every reread; the kernels
 * see the same values, so the results are bitwise those of the same data in
 * [B, Hkv, Lk, Dv] (tested). K needs no copy: attn_qk reads each key row of a tile once
 * per query tile (its values are broadcast across the tile's rows), from L2 either way.
 * Measured on the two-port Xeon, 1 thread, varlen_prefill's sequences (packed [T, H, D]):
 * without the V copy 1.09x the time, with a K copy too 1.05x (docs/performance.md). */
#define TA_FUSED_REPACK_MAX ((size_t)32 << 20)

/* The floats of V's copy (0: none). cap false: whatever the copy's size (the bound of a
 * varlen whole, whose sequences are each checked against the cap). */
static size_t plan_repack(const ta_sdpa_problem *p, bool cap)
{
    const ta_kernels *k = ta_kernels_active();
    if (p->pages.table || p->D > TA_FUSED_DIM_MAX || p->Dv > TA_FUSED_DIM_MAX ||
        TA_MIN(k->attn_mq, p->G * p->Lq) <= k->attn_rows_max ||
        !ta_sdpa_rows_alias(p->V, p->Dv, TA_FUSED_NK))
        return 0;
    const size_t floats = (size_t)(p->B * p->Hkv * p->Lk * p->Dv);
    return cap && floats > TA_FUSED_REPACK_MAX / sizeof(float) ? 0 : floats;
}

static size_t repack_bytes(size_t floats)
{
    ta_arena a = ta_arena_measure();
    (void)TA_ARENA_TAKE(&a, float, floats);
    return a.overflow ? SIZE_MAX : ta_arena_bytes(&a);
}

/* pp: p with V as the contiguous [B, Hkv, Lk, Dv] view vt of vbuf (NULL while sizing). */
static void repacked_problem(const ta_sdpa_problem *p, ta_sdpa_problem *pp, ta_tensor *vt,
                             float *vbuf)
{
    *pp = *p;
    *vt = ta_tensor_view(vbuf, 4, p->V->shape);
    pp->V = vt;
}

static size_t fused_scratch(const ta_sdpa_problem *p)
{
    fused_plan f = make_plan(p);
    return plan_bytes(&f);
}

static size_t add_bytes(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

size_t ta_sdpa_forward_fused_scratch(const ta_sdpa_problem *p)
{
    if (p->B * p->H * p->Lq == 0) return 0;
    const size_t r = plan_repack(p, true);
    if (!r) return fused_scratch(p);
    ta_sdpa_problem pp;
    ta_tensor vt;
    repacked_problem(p, &pp, &vt, NULL);
    return add_bytes(repack_bytes(r), fused_scratch(&pp));
}

/* At least the scratch of any problem like p with Lq' <= Lq, Lk' <= Lk (the sequences of
 * a variable-length batch whose whole is p). All but the key split grows with Lq and Lk;
 * a shorter problem may split where p does not (below TA_FUSED_FEW_TILES tiles), into at
 * most min(TA_FUSED_MAX_CHUNKS, ceil(Lk / TA_FUSED_SPLIT)) chunks. */
static size_t fused_scratch_bound(const ta_sdpa_problem *p);

size_t ta_sdpa_forward_fused_scratch_bound(const ta_sdpa_problem *p)
{
    if (p->B * p->H * p->Lq == 0) return 0;
    const size_t plain = fused_scratch_bound(p);
    /* a sequence copies its V when it aliases and fits the cap (plan_repack): at most
     * the whole's copy, at most the cap, beside the bound of the copied layout */
    const size_t r = plan_repack(p, false);
    if (!r) return plain;
    ta_sdpa_problem pp;
    ta_tensor vt;
    repacked_problem(p, &pp, &vt, NULL);
    const size_t copied = add_bytes(TA_MIN(repack_bytes(r), TA_FUSED_REPACK_MAX),
                                    fused_scratch_bound(&pp));
    return TA_MAX(plain, copied);
}

static size_t fused_scratch_bound(const ta_sdpa_problem *p)
{
    fused_plan f = make_plan(p);
    if (p->Lk >= 2 * TA_FUSED_SPLIT) {
        int64_t chunks = TA_MIN(TA_FUSED_MAX_CHUNKS, (p->Lk + TA_FUSED_SPLIT - 1) / TA_FUSED_SPLIT);
        f.split = true;
        f.nparts = TA_MIN(f.ntiles, TA_FUSED_FEW_TILES - 1) * chunks;
        f.nitems = TA_MAX(f.ntiles, f.nparts);
        f.nt = plan_threads(f.nitems);
    }
    if (sweep_heads(&f, true) > f.sweep) { /* a sequence of fewer queries may sweep */
        f.sweep = sweep_heads(&f, true);
        plan_ws_bytes(&f);
        f.nt = plan_threads(f.nitems);
    }
    return plan_bytes(&f);
}

static ta_status forward_fused(const ta_sdpa_problem *p, ta_arena *scratch);

ta_status ta_sdpa_forward_fused(const ta_sdpa_problem *p, ta_arena *scratch)
{
    if (p->B * p->H * p->Lq == 0) return TA_OK;
    const size_t r = plan_repack(p, true);
    if (!r) return forward_fused(p, scratch);
    float *vbuf = TA_ARENA_TAKE(scratch, float, r);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", p->fn);
    ta_sdpa_problem pp;
    ta_tensor vt;
    repacked_problem(p, &pp, &vt, vbuf);
    ta_tensor_copy_rows(&vt, p->V); /* rows in parallel, one memcpy each */
    return forward_fused(&pp, scratch);
}

static ta_status forward_fused(const ta_sdpa_problem *p, ta_arena *scratch)
{
    fused_plan f = make_plan(p);
    fused_mem m;
    layout(scratch, &m, &f);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", p->fn);
    if (f.mrows) {
        ta_fused_mask_bounds(&p->mask, m.mt, f.mrows, f.nt);
        f.mt = m.mt;
    }
    ta_fused_group_tiles(&f, m.t_r0, m.t_mq);
    const int64_t nitems = ta_fused_build_items(&f, &m);

    /* Threads take whole groups while there are plenty (each core keeps one group's K
     * and V in its own L2), single tiles otherwise (to balance few large groups). */
    const int64_t grab = !f.split && f.ngroups >= 8 * (int64_t)f.nt ? f.tpg : 1;
#pragma omp parallel num_threads(f.nt)
    {
        fused_ws w;
        ta_arena mine = ta_arena_over(m.ws + (size_t)omp_get_thread_num() * f.ws_bytes, f.ws_bytes);
        ws_layout(&mine, &w, &f);
        /* Scores a kernel skips stay as they were (the caller masks those of real rows):
         * the padding lanes hold a previous item's values, finite or not, after this. */
        memset(w.s, 0, sizeof(float) * (size_t)(f.mq_max * TA_FUSED_NK));
        for (int64_t r = 0; r < f.mq_max; r++) w.ones[r] = 1.0f;
        if (f.sweep > 1) { /* the further heads' states follow the shared part */
            fused_ws ws[TA_FUSED_SWEEP_MAX];
            ws[0] = w;
            for (int64_t h = 1; h < f.sweep; h++) {
                ws[h] = w;
                ws_state_layout(&mine, &ws[h], &f, f.k->attn_rows_max);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t u = 0; u < nitems / f.sweep; u++) {
                const fused_item *its = &m.items[u * f.sweep];
                ta_fused_run_sweep(&f, its, f.sweep, ws);
                for (int64_t h = 0; h < f.sweep; h++) {
                    if (f.split) ta_fused_store_partial(&f, &m, &its[h], &ws[h]);
                    else ta_fused_finish_item(&f, &its[h], &ws[h]);
                }
            }
        } else {
#pragma omp for schedule(dynamic, grab)
            for (int64_t n = 0; n < nitems; n++) {
                const fused_item *it = &m.items[n];
                ta_fused_run_item(&f, it, &w);
                if (f.split) ta_fused_store_partial(&f, &m, it, &w);
                else ta_fused_finish_item(&f, it, &w);
            }
        }
    }
    if (f.split) ta_fused_merge_partials(&f, &m);
    return TA_OK;
}
