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
/* The state of one work item in a thread's scratch (Q rows, O rows, m, l, the rows' bounds,
 * its tile's scores and row tables), for `rows` rows of Q and O and tiles of `keys` keys
 * (a sweep's further heads: attn_rows_max rows, whose few-row tiles keep to TA_FUSED_NK
 * keys; the first state: any item's, TA_FUSED_NK_LAST, or f->few_keys for a few-row tile
 * outside a sweep). */
static void ws_state_layout(ta_arena *a, fused_ws *w, const fused_plan *f, int64_t rows,
                            int64_t keys)
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
    /* a sweep's heads keep their tiles' scores and row tables until the tile ends */
    w->s = TA_ARENA_TAKE2(a, float, mq, keys);
    w->rowk = TA_ARENA_TAKE(a, int32_t, mq);
    w->krows = (const void **)TA_ARENA_TAKE(a, void *, keys + TA_ROWS_AHEAD);
    w->vrows = (const void **)TA_ARENA_TAKE(a, void *, keys + TA_ROWS_AHEAD);
    w->o_live = TA_ARENA_TAKE(a, int32_t, 1);
    w->q_dot = TA_ARENA_TAKE(a, int32_t, 1);
}

/* A thread's scratch: one item's state, then what the steps of any item share. */
static void ws_layout(ta_arena *a, fused_ws *w, const fused_plan *f)
{
    const ta_sdpa_problem *p = f->p;
    const int64_t mq = f->mq_max;
    ws_state_layout(a, w, f, mq, TA_MAX(TA_FUSED_NK_LAST, f->few_keys));
    w->ones = TA_ARENA_TAKE(a, float, mq);
    const bool hq = p->Q->dtype != TA_F32; /* pack_q widens a half Q's rows here */
    w->qrows = hq ? TA_ARENA_TAKE2(a, float, mq, p->D ? p->D : 1) : NULL;
    w->qroff = hq ? TA_ARENA_TAKE(a, int64_t, mq) : NULL;
    w->rowk_run = TA_ARENA_TAKE(a, int32_t, mq);
    w->kp = f->pack_k ? TA_ARENA_TAKE2(a, float, TA_FUSED_NK_LAST, p->D) : NULL;
    w->vp = f->pack_v ? TA_ARENA_TAKE2(a, float, TA_FUSED_NK_LAST, p->Dv) : NULL;
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
    ws_state_layout(&st, &w, f, f->k->attn_rows_max, TA_FUSED_NK);
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

/* K and V whose rows lie far apart ([B, L, H, D] tensors, varlen's packed [T, H, D]: a
 * head's rows are H D floats apart) are read through a contiguous copy where the tiles
 * reread them. Each thread copies the rows of the group it works on, as its items need
 * them, into a buffer of its own (hold_rows), which stays in its L2 while it works on the
 * group; the kernels see the same values, so the results are bitwise those of the same
 * data in [B, Hkv, Lk, D] (tested).
 *   V: where its rows alias in L1 (ta_sdpa_rows_alias) and the tiles have many rows
 * (not a decode step, which reads each row once): attn_pv reads a V tile once per 6 query
 * rows, so the tile must stay in L1. Measured on the two-port Xeon, 1 thread,
 * varlen_prefill's sequences: without the copy 1.09x the time (docs/performance.md).
 * Not for a group of at most TA_FUSED_VCOPY_MIN_KEYS keys, whose copy costs more than
 * its tiles' rereads: varlen calls of equal sequences (H8 D64 causal, [T, H, D], rows 2
 * KiB apart; separate processes in turns, 1 / 2 threads, ms with / without the copy):
 * 1000 x 16 8.4 - 9.1 / 7.8 - 7.9 and 5.3 - 5.4 / 4.5; 250 x 64 11.5 / 10.5 and 6.1 /
 * 5.4 - 5.5; 62 x 256 26.7 - 27.0 / 25.3 - 25.9 and 13.7 - 13.8 / 13.3 - 13.7; 41 x 384
 * 36.6 - 36.8 / 34.4 - 34.6 and 19.0 - 19.2 / 18.8 - 19.2; 32 x 512 47.6 - 48.2 / 48.0
 * - 48.1 and 24.0 - 24.1 / 24.4 - 24.8; 16 x 1024 91.4 - 91.7 / 101.0 - 101.5.
 *   K: attn_qk reads each key row of a tile once per query tile, so K needs a copy only
 * where a group has several query tiles and its rows miss the caches between them
 * (k_rows_spill): a row stride that puts a micro-tile's rows and the next ones it
 * prefetches on fewer L1 sets than they need, or the group's rows on fewer L2 sets than
 * hold them. Measured (two-port Xeon, 1 thread, causal L1024, all four tensors
 * [B, L, H, D], with against without the K copy, alternated): H32 D128 47.7 -> 44.6 ms,
 * H16 D64 13.2 -> 12.0, H8 D128 12.9 -> 12.3, H4 D128 L2048 23.4 -> 22.3, H8 D64 L2048
 * 24.6 -> 23.8; H8 D64 L1024 (which k_rows_spill leaves in place) 5.97 against 5.94,
 * and varlen_prefill's sequences 2 - 4% slower with the copy.
 * A group of more than TA_FUSED_VCOPY_MAX bytes of K or V is read in place. */
#define TA_FUSED_VCOPY_MAX ((size_t)32 << 20)
/* The same bound for a half K or V widened into the buffer (plan_kv_copy): a chunked
 * prefill over a long KV cache would otherwise ask for up to 32 MiB a thread and tensor;
 * past it the tiles widen the rows they read, as before. */
#define TA_FUSED_HALF_COPY_MAX ((size_t)4 << 20)
#define TA_FUSED_VCOPY_MIN_KEYS 384

/* gcd(a, b) for b a power of two: the sets of a cache of b sets that rows a lines apart
 * start in are b / gcd(a, b). */
static int64_t gcd_pow2(int64_t a, int64_t b)
{
    a %= b;
    return a == 0 ? b : a & -a;
}

/* Whether float32 rows of `cols` floats at t's stride[2] miss the caches that a
 * contiguous K keeps them in (see above): the 16 rows of a Q.K^T micro-tile and the next
 * one (64 sets, 8 of the ways: Zen 4's L1 has 8, Golden Cove's 12), or the Lk rows of a
 * group (2048 sets of 16 ways: Golden Cove's 2 MiB L2; Zen 4's 1 MiB has 8). */
static bool k_rows_spill(const ta_tensor *t, int64_t cols, int64_t Lk)
{
    const int64_t row = cols * (int64_t)sizeof(float), ld = t->stride[2] * (int64_t)sizeof(float);
    if (t->dtype != TA_F32 || t->stride[3] != 1 || ld == row || ld % 64 != 0) return false;
    const int64_t lines = (row + 63) / 64, step = ld / 64;
    const int64_t sets1 = TA_MIN(64, 64 / gcd_pow2(step, 64) * lines);
    const int64_t sets2 = TA_MIN(2048, 2048 / gcd_pow2(step, 2048) * lines);
    return 16 * lines > 8 * sets1 || Lk * lines > 16 * sets2;
}

/* Whether tiles of many rows take attn_qk_bf16dot: a bfloat16 query on bfloat16 K rows
 * read in place (kernels.h). */
static bool qk_dot_tile_of(const ta_sdpa_problem *p, const ta_kernels *k)
{
    return p->Q->dtype == TA_BF16 && p->K->dtype == TA_BF16 && p->K->stride[3] == 1 &&
           p->D % 2 == 0 && k->attn_qk_bf16dot;
}

/* How the kernels read K and V (f->p's): packed tile copies, the few-row kernels' kinds,
 * the bfloat16 dot product's kernels. make_plan, and copy_plan for K or V in a thread's
 * float32 buffer. */
static void kv_flags(fused_plan *f)
{
    const ta_sdpa_problem *p = f->p;
    /* half-precision K and V are widened tile by tile (ta_sdpa_native_dtypes) */
    f->pack_k = (p->K->stride[3] != 1 && p->D > 1) || p->K->dtype != TA_F32;
    f->pack_v = (p->V->stride[3] != 1 && p->Dv > 1) || p->V->dtype != TA_F32;
    f->kind_k = rows_kind(p->K, p->D, f->k->attn_vl);
    f->kind_v = rows_kind(p->V, p->Dv, f->k->attn_vl);
    /* a bfloat16 query on bfloat16 K: the CPU's dot product where it has one (products
     * exact in float32; 18.5 against 38.2 cycles a (kv head, key) pair for Q.K^T alone on
     * the Zen 4, 4 rows, D 128: docs/kernels.md); pack_q packs its rows as bfloat16 */
    f->qk_dot = f->kind_k == 2 && p->Q->dtype == TA_BF16 && f->k->attn_qk_rows_bf16dot; /* D % attn_vl 0 */
    f->qk_dot_tile = qk_dot_tile_of(p, f->k);
}

/* The floats of a thread's copy of K (value false) or V (0: read in place). bound: of any
 * problem with Lk' <= Lk (the sequences of a varlen whole). A half K or V that a group's
 * several query tiles of many rows read is copied too, widened (session 30): once a
 * group instead of a tile's widening for every query tile that reads it (kv_tile); not
 * K where the bfloat16 dot product reads it as it is. */
static int64_t plan_kv_copy(const ta_sdpa_problem *p, bool value, bool bound)
{
    const ta_kernels *k = ta_kernels_active();
    const ta_tensor *t = value ? p->V : p->K;
    const int64_t cols = value ? p->Dv : p->D;
    if (p->pages.table || cols < 1 || cols > TA_FUSED_DIM_MAX) return 0;
    if (t->dtype != TA_F32) {
        if (p->G * p->Lq <= k->attn_mq || (!value && qk_dot_tile_of(p, k))) return 0;
    } else if (value ? TA_MIN(k->attn_mq, p->G * p->Lq) <= k->attn_rows_max ||
                           p->Lk <= TA_FUSED_VCOPY_MIN_KEYS ||
                           !ta_sdpa_rows_alias(t, cols, TA_FUSED_NK)
                     : p->G * p->Lq <= k->attn_mq || !k_rows_spill(t, cols, p->Lk)) {
        return 0;
    }
    const size_t most = t->dtype != TA_F32 ? TA_FUSED_HALF_COPY_MAX : TA_FUSED_VCOPY_MAX;
    const int64_t keys_max = (int64_t)(most / sizeof(float)) / cols;
    if (p->Lk > keys_max) return bound ? keys_max * cols : 0;
    return p->Lk * cols;
}

/* The key count from which an item's K and V rows request themselves through the
 * kernels' stream (fused_pf.kv; else only a group's first item's do): where the rows go
 * into L2 (ta_pf_stream_l2) and an item's K and V rows fill 3/4 of it, so that the next
 * item of the group finds them gone. Rows read through a per-thread copy never. Measured
 * on the two-port Xeon (2 MiB L2; driver, 1 thread, medians of 5 - 7 alternations, ms
 * without / with): B1 H4 L4096 D128 174.8 / 157.9 (2 threads 87.5 / 80.4), H1 L8192
 * D128 176.2 / 156.6, D64 88.4 / 82.5, H8 L4096 D64 170.6 / 165.7, H8 L2048 D128 82.7 /
 * 78.7; H8 L3072 D64 (1.5 MiB) 92.5 / 92.9; rows that stay in L2, 1 MiB, 1% slower with
 * (H32/8 L1024 D128 79.1 / 79.7, L2048 D64 causal 42.0 / 42.4). */
static int64_t plan_kv_far(const fused_plan *f)
{
    const ta_sdpa_problem *p = f->p;
    if (!ta_pf_stream_l2 || f->kcopy_floats > 0 || f->vcopy_floats > 0) return INT64_MAX;
    const int64_t row = p->D * (int64_t)ta_elem_size(p->K->dtype) +
                        p->Dv * (int64_t)ta_elem_size(p->V->dtype);
    return TA_MAX(ta_l2_bytes / 4 * 3 / TA_MAX(row, 1), 1);
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
    kv_flags(&f);
    /* few-row tiles of TA_FUSED_NK_STREAM keys where the few-row kernels read K's and V's
     * rows in place (kind >= 0: unit-stride rows of a whole number of vectors, nothing
     * widened into kp / vp). The dtypes and the vector decide, not the row strides or
     * the shape: a [B, L, H, D] view gives the bits of the contiguous tensors, and every
     * sequence of a varlen call or a KV-cache batch the same scratch layout. */
    f.few_keys = f.kind_k >= 0 && f.kind_v >= 0 ? TA_FUSED_NK_STREAM : TA_FUSED_NK;
    /* a large O with non-temporal stores (ta_sdpa_stream_rows). Measured on the two-port
     * Xeon (driver, medians, alternated): causal B512 H8 L128 D64 (O 128 MiB) 161 -> 152
     * ms on 1 thread, 84.2 -> 79.1 on 2; the seed's causal case (32 MiB) 89.1 -> 85.9 and
     * 44.8 -> 43.7. Below the bound O stays in the caches for the next operation. */
    f.stream_o = ta_sdpa_stream_rows(p->O, p->Dv, ta_sdpa_o_stream_min(p->O, p->Dv));
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
    f.vcopy_floats = f.sweep > 1 ? 0 : plan_kv_copy(p, true, false);
    f.kcopy_floats = f.sweep > 1 ? 0 : plan_kv_copy(p, false, false);
    f.kv_far_keys = plan_kv_far(&f);
    /* The next group's first rows ahead (fused_pf.ahead): K, V and Q rows that follow
     * each other, float32, unpaged, a group's Q, K and V within a quarter of L2 (what
     * comes ahead stays there, and a short group's last items have the steps to spare:
     * a long group's last item requests the next one's first rows in time through
     * stream_pv), where the stream goes into L2 (ta_pf_stream_l2: Intel; where it goes
     * into L1, up to 44 KiB ahead would evict the tiles at work). Two-port Xeon, causal
     * B512 H8 L128 D64, one driver alternating, ms: 1 thread 68.3 -> 65.5, 65.9 -> 63.7;
     * 2 threads 33.6 -> 32.4; non-causal 100.8 -> 100.2, 99.2 -> 98.5 (1 thread). */
    {
        const ta_tensor *Q = p->Q, *K = p->K, *V = p->V;
        const int64_t bytes =
            (int64_t)sizeof(float) * (p->G * p->Lq * p->D + p->Lk * (p->D + p->Dv));
        f.ahead = ta_pf_stream_l2 && f.sweep <= 1 && !f.split && !p->pages.table &&
                  !f.kcopy_floats && !f.vcopy_floats && Q->dtype == TA_F32 && K->dtype == TA_F32 &&
                  V->dtype == TA_F32 && Q->stride[3] == 1 && K->stride[3] == 1 &&
                  V->stride[3] == 1 && Q->stride[2] == p->D && K->stride[2] == p->D &&
                  V->stride[2] == p->Dv && bytes <= ta_l2_bytes / 4;
    }
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
    m->vbuf = f->vcopy_floats ? TA_ARENA_TAKE2(a, float, f->vcopy_floats, f->nt) : NULL;
    m->kbuf = f->kcopy_floats ? TA_ARENA_TAKE2(a, float, f->kcopy_floats, f->nt) : NULL;
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

size_t ta_sdpa_forward_fused_scratch(const ta_sdpa_problem *p)
{
    if (p->B * p->H * p->Lq == 0) return 0;
    fused_plan f = make_plan(p);
    return plan_bytes(&f);
}

/* At least the scratch of any problem like p with Lq' <= Lq, Lk' <= Lk (the sequences of
 * a variable-length batch whose whole is p). All but the key split grows with Lq and Lk;
 * a shorter problem may split where p does not (below TA_FUSED_FEW_TILES tiles), into at
 * most min(TA_FUSED_MAX_CHUNKS, ceil(Lk / TA_FUSED_SPLIT)) chunks. */
size_t ta_sdpa_forward_fused_scratch_bound(const ta_sdpa_problem *p)
{
    if (p->B * p->H * p->Lq == 0) return 0;
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
    /* a sequence with fewer keys copies its V rows where the whole's are too many */
    f.vcopy_floats = plan_kv_copy(p, true, true);
    f.kcopy_floats = plan_kv_copy(p, false, true);
    return plan_bytes(&f);
}

/* The K or V rows [lo, hi) of group (b, hkv) that a thread's buffer holds (b = -1:
 * none). */
typedef struct held_rows {
    int64_t b, hkv, lo, hi;
} held_rows;

/* buf seen as a tensor of like's shape with strides 0 along B and Hkv (copy_plan). */
static const ta_tensor *buffer_rows(ta_tensor *view, float *buf, const ta_tensor *like)
{
    *view = ta_tensor_view(buf, 4, like->shape);
    view->stride[0] = view->stride[1] = 0;
    return view;
}

/* fv: f on pv, which is f's problem with K and V the thread's buffers kbuf and vbuf
 * (those not NULL) seen as [B, Hkv, Lk, D] and [B, Hkv, Lk, Dv] with strides 0 along B
 * and Hkv: whatever group an item names, its key j is row j of the buffer, which
 * hold_rows fills for the item. */
static const fused_plan *copy_plan(const fused_plan *f, fused_plan *fv, ta_sdpa_problem *pv,
                                    ta_tensor *kt, float *kbuf, ta_tensor *vt, float *vbuf)
{
    *pv = *f->p;
    if (vbuf) pv->V = buffer_rows(vt, vbuf, f->p->V);
    if (kbuf) pv->K = buffer_rows(kt, kbuf, f->p->K);
    *fv = *f;
    fv->p = pv;
    kv_flags(fv); /* float32 rows now, where a half K or V was widened into the buffer */
    return fv;
}

/* K's (value false) or V's rows [a, b) of group (bi, hkv) into rows a .. b - 1 of buf. */
static void copy_kv_rows(const fused_plan *f, bool value, int64_t bi, int64_t hkv, int64_t a,
                        int64_t b, float *buf)
{
    if (a >= b) return;
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *t = value ? p->V : p->K;
    const int64_t es = (int64_t)ta_elem_size(t->dtype), cols = value ? p->Dv : p->D;
    const char *v = (const char *)t->data + ta_sdpa_kv_offset(p, value, bi, hkv, a) * es;
    for (int64_t j = a; j < b; j++, v += t->stride[2] * es) {
        if (t->dtype == TA_F32) memcpy(buf + j * cols, v, sizeof(float) * (size_t)cols);
        else ta_k_row_to_f32(f->k, buf + j * cols, v, t->dtype, cols, t->stride[3]); /* widened */
    }
}

/* Makes the buffer hold K's (value false) or V's rows of the item's keys [jlo, jhi) of
 * its group: copies the rows it lacks (a new group: all of them; the same group: those
 * below and above the rows held, so that the held rows stay one range). */
static void hold_rows(const fused_plan *f, const fused_item *it, bool value, float *buf,
                      held_rows *h)
{
    if (it->jhi <= it->jlo) return;
    if (h->b != it->b || h->hkv != it->hkv) *h = (held_rows){it->b, it->hkv, it->jlo, it->jlo};
    const int64_t lo = TA_MIN(it->jlo, h->lo), hi = TA_MAX(it->jhi, h->hi);
    copy_kv_rows(f, value, it->b, it->hkv, lo, h->lo, buf);
    copy_kv_rows(f, value, it->b, it->hkv, h->hi, hi, buf);
    h->lo = lo;
    h->hi = hi;
}

/* The first item of the thread's next group after item it (of its chunk, which ends
 * before item hi, or the next chunk's, from item first, -1: none); prev: the answer for
 * the item before. */
static const fused_item *next_group(const fused_mem *m, const fused_item *it, int64_t hi,
                                    int64_t first, const fused_item *prev)
{
    /* the items of a group follow each other: no other group starts before prev */
    if (prev && prev > it && (prev->b != it->b || prev->hkv != it->hkv)) return prev;
    for (const fused_item *x = it + 1; x < m->items + hi; x++)
        if (x->b != it->b || x->hkv != it->hkv) return x;
    if (first < 0) return NULL;
    const fused_item *x = &m->items[first];
    return x->b != it->b || x->hkv != it->hkv ? x : NULL;
}

/* One work item of a call that is not a sweep: its tiles, then its rows of O and LSE (or
 * its partial of a key split). next: as ta_fused_run_item takes it. */
static void run_one(const fused_plan *fp, const fused_mem *m, const fused_item *it,
                    const fused_ws *w, const fused_item *next)
{
    ta_fused_run_item(fp, it, w, next);
    if (fp->split) ta_fused_store_partial(fp, m, it, w);
    else ta_fused_finish_item(fp, it, w);
}

/* The chunks a call's threads claim: the work lists of n plans (one problem each: a
 * dense call's, or the sequences of a variable-length batch, ta_sdpa_forward_fused_seqs)
 * in the order `order` gives, plan order[k]'s items in chunks of grab[order[k]], which
 * are chunks cbase[k] .. cbase[k + 1] - 1 of the claims (cbase[n] in all). kbuf, vbuf:
 * the threads' copies of K and V rows (kcopy_floats, vcopy_floats each), for the plans
 * that copy. A chunk of a sweep's plan is one unit (its sweep items). */
typedef struct fused_job {
    const fused_plan *plans;
    const fused_mem *mems;
    const int64_t *order, *cbase, *grab;
    int64_t n;
    float *kbuf, *vbuf;
    int64_t kcopy_floats, vcopy_floats;
} fused_job;

/* The place in j's order of the plan whose chunks hold chunk c, from place k on (c lies at
 * or past plan order[k]'s first chunk). */
static int64_t job_place(const fused_job *j, int64_t c, int64_t k)
{
    while (k + 1 < j->n && j->cbase[k + 1] <= c) k++;
    return k;
}

/* A thread's share of a job (its workspaces ws: the first, then a sweep's further
 * heads'; its prefetch stream pfs; next_chunk: the claims' counter, ta_claims). Each
 * thread claims its next chunk before it runs the current one, so that the last item of
 * a chunk knows the item that follows it on this thread (the next chunk's first, perhaps
 * another group's), whose Q rows and first keys it requests meanwhile
 * (ta_fused_run_item; a sweep's unit, the next unit's first tile). A thread so holds at
 * most one chunk it has not started; each work list runs from the costly items to the
 * cheap ones, and the job's order puts the plans of costly chunks first, so that costs
 * the end little. */
static void run_chunks(const fused_job *j, const fused_ws *ws, fused_pf *pfs, int64_t *next_chunk,
                       int64_t per)
{
    const size_t me = (size_t)omp_get_thread_num();
    float *kbuf = j->kcopy_floats ? j->kbuf + me * (size_t)j->kcopy_floats : NULL;
    float *vbuf = j->vcopy_floats ? j->vbuf + me * (size_t)j->vcopy_floats : NULL;
    /* the current plan (place k of the order): with K or V copies its items run on a
     * plan whose K or V is this thread's buffer */
    int64_t k = -1;
    const fused_plan *f = NULL, *fp = NULL;
    const fused_mem *m = NULL;
    fused_plan fv;
    ta_sdpa_problem pv;
    ta_tensor kt, vt;
    held_rows hk = {.b = -1}, hv = {.b = -1};
    float *kb = NULL, *vb = NULL;
    const int64_t nchunks = j->cbase[j->n];
    ta_claims cl; /* claims of `per` chunks (job_bundle) */
    for (int64_t c = ta_claims_first(&cl, next_chunk, per, nchunks); c < nchunks;) {
        const int64_t cn = ta_claims_next(&cl, c);
        const int64_t kc = job_place(j, c, k < 0 ? 0 : k);
        if (kc != k) { /* another plan: its own rows, groups and copies */
            k = kc;
            f = fp = &j->plans[j->order[k]];
            m = &j->mems[j->order[k]];
            kb = f->kcopy_floats ? kbuf : NULL;
            vb = f->vcopy_floats ? vbuf : NULL;
            if (kb || vb) fp = copy_plan(f, &fv, &pv, &kt, kb, &vt, vb);
            hk = hv = (held_rows){.b = -1};
            pfs->b = -1;
            pfs->ahead_item = NULL;
        }
        const int64_t g = j->grab[j->order[k]], lo = (c - j->cbase[k]) * g;
        const int64_t hi = TA_MIN(lo + g, m->nitems);
        /* the first item of the thread's next chunk, where it is of the same plan */
        const int64_t first =
            cn < nchunks && job_place(j, cn, k) == k ? (cn - j->cbase[k]) * g : -1;
        if (f->sweep > 1) { /* a unit: the sweep's heads of one batch row (and chunk) */
            const fused_item *its = &m->items[lo];
            ta_fused_run_sweep(f, its, f->sweep, ws, first >= 0 ? &m->items[first] : NULL);
            for (int64_t h = 0; h < f->sweep; h++) {
                if (f->split) ta_fused_store_partial(f, m, &its[h], &ws[h]);
                else ta_fused_finish_item(f, &its[h], &ws[h]);
            }
        } else {
            for (int64_t n = lo; n < hi; n++) {
                const fused_item *it = &m->items[n];
                const fused_item *nx = n + 1 < hi ? it + 1 : first >= 0 ? &m->items[first] : NULL;
                if (kb) hold_rows(f, it, false, kb, &hk);
                if (vb) hold_rows(f, it, true, vb, &hv);
                if (f->ahead) pfs->ahead_item = next_group(m, it, hi, first, pfs->ahead_item);
                run_one(fp, m, it, ws, nx);
            }
        }
        c = cn;
    }
}

/* The chunks a claim of job j takes on nt threads: ta_claim_bundle's where every plan
 * sweeps (a decode batch, a varlen call of sequences of few tokens: one unit a chunk,
 * each short and alike), else one. A varlen call of 1000 sequences of 3 tokens (H8 D64
 * causal) made 1000 claims: 2 threads, binaries in turns, 1.73 -> 1.58 ms (the same
 * tokens as one [B, L, H, D] call, also a sweep, 1.17 -> 1.08). */
static int64_t job_bundle(const fused_job *j, int nt)
{
    for (int64_t k = 0; k < j->n; k++)
        if (j->plans[j->order[k]].sweep <= 1) return 1;
    return ta_claim_bundle(j->cbase[j->n], nt);
}

/* Items a chunk of plan f claims: whole groups while there are plenty (each core keeps
 * one group's K and V in its own L2), single tiles otherwise (to balance few large
 * groups). Where the threads copy K or V rows (hold_rows: each thread its own copy of
 * the group it works on), whole groups from 4 a thread, when they divide evenly among
 * the threads and are equally costly (no mask tensor, which may cut one batch's keys
 * more than another's): a group's rows are then copied once, not once per thread. Fewer
 * groups a thread leave no room to balance a busy core (the bound came in when the claim
 * ahead let the first thread take both of 2 groups, B1 H2 L4096 D64 causal as [B, L, H,
 * D]: 21.7 ms against 10.9 with tiles, before ta_claims gave every thread its own
 * first chunk). Two-port Xeon, 2 threads, in one driver alternating the rule:
 * varlen_prefill's 8 sequences (H8: 8 groups) 5.62 - 5.80 ms against 5.72 - 5.83 with
 * tiles. Short groups (at most 4 Mi multiply-adds, ~20 us on one core) go four to a
 * claim where there are at least 256 a thread (so the last claims balance within 2%): a
 * claim is an atomic add, which waits for the previous item's non-temporal O stores to
 * drain. Two-port Xeon, causal B512 H8 L128 D64, one driver alternating, ms: 67.26 /
 * 66.43 on 1 thread, 33.73 / 33.29 on 2 (one group / four a claim).
 *
 * groups: the groups of the whole job (a varlen call's or a KV cache batch's plans share
 * one claim counter; f->ngroups for a call alone). Groups far shorter than that (a
 * sequence of 16 tokens: 32 Ki multiply-adds a head) go as many to a claim as make ~4 Mi,
 * up to 64 (a chunk never leaves its plan, so at most the sequence's groups): a varlen
 * call of 1000 sequences of 16 tokens (H8 D64 causal) had claimed each of its 8000
 * groups alone, and on 2 threads the claims' atomics, contended and waiting on O's
 * non-temporal stores, took it to 1.47x the same call on one dense view of its tensors. */
static int64_t plan_grab(const fused_plan *f, int nt, int64_t groups)
{
    if (f->sweep > 1) return f->sweep; /* one unit */
    const ta_sdpa_problem *p = f->p;
    const bool even_copies = (f->vcopy_floats || f->kcopy_floats) && !p->mask.mask &&
                             f->ngroups >= 4 * (int64_t)nt && f->ngroups % nt == 0;
    const int64_t macs = p->G * p->Lq * p->Lk * (p->D + p->Dv), budget = (int64_t)4 << 20;
    const bool short_groups = macs <= budget && groups >= 256 * (int64_t)nt;
    const bool whole = f->ngroups >= 8 * (int64_t)nt || even_copies || short_groups;
    const int64_t per = TA_MAX(4, TA_MIN(64, budget / TA_MAX(macs, 1)));
    return !f->split && whole ? f->tpg * (short_groups ? per : 1) : 1;
}

/* A thread's workspaces (carved from its own piece of scratch, mine: ws[0], then the
 * states of a sweep's further heads up to `sweep`) and prefetch stream, ready for plan
 * f's items (or any plan of a job sweeping at most as many heads: the first workspace is
 * alike in all). */
static void thread_ws(ta_arena *mine, fused_ws *ws, fused_pf *pfs, const fused_plan *f,
                      int64_t sweep)
{
    *pfs = (fused_pf){.next = NULL, .b = -1};
    ws_layout(mine, &ws[0], f);
    ws[0].pfs = pfs;
    for (int64_t h = 1; h < sweep; h++) {
        ws[h] = ws[0];
        ws_state_layout(mine, &ws[h], f, f->k->attn_rows_max, TA_FUSED_NK);
    }
    /* Scores a kernel skips stay as they were (the caller masks those of real rows): the
     * padding lanes hold a previous item's values, finite or not, after this. A sweep's
     * further heads run few-row tiles only, whose kernels write every lane they read
     * (store_sums, rows_copy in attn_rows_template.h): not zeroed, which took 5% of a
     * decode step over 256 keys (8 heads of 12 KiB a call; B1 H32 Hkv8 D128 float16, 1
     * thread, 46.8 -> 44.5 us). */
    memset(ws[0].s, 0, sizeof(float) * (size_t)(f->mq_max * TA_FUSED_NK_LAST));
    /* (keys past TA_FUSED_NK_LAST: few-row tiles only, whose kernels read rows < mq
     * alone, after writing them) */
    for (int64_t r = 0; r < f->mq_max; r++) ws[0].ones[r] = 1.0f;
}

/* A job on nt threads, each with its workspaces in ws (ws_bytes apiece, laid out for f0:
 * a plan that sweeps as many heads as any of the job's), then the partials of its plans
 * that split their keys merged tile by tile in the same region (after a barrier: every
 * chunk's first). stream_o: a plan writes O with non-temporal stores. */
static void run_job(const fused_job *j, unsigned char *ws_base, const fused_plan *f0, int nt,
                    bool stream_o)
{
    bool split = false;
    for (int64_t k = 0; k < j->n; k++) split |= j->plans[j->order[k]].split;
    int64_t next_chunk = 0; /* claims past the first (ta_claims) */
    const int64_t per = job_bundle(j, nt);
#pragma omp parallel num_threads(nt)
    {
        fused_ws ws[TA_FUSED_SWEEP_MAX];
        fused_pf pfs;
        ta_arena mine = ta_arena_over(ws_base + (size_t)omp_get_thread_num() * f0->ws_bytes,
                                      f0->ws_bytes);
        thread_ws(&mine, ws, &pfs, f0, f0->sweep);
        run_chunks(j, ws, &pfs, &next_chunk, per);
        if (stream_o) ta_sdpa_stream_fence(); /* before the barriers */
        if (split) {
#pragma omp barrier
            for (int64_t k = 0; k < j->n; k++) {
                const fused_plan *f = &j->plans[j->order[k]];
                if (!f->split) continue;
#pragma omp for schedule(static) nowait
                for (int64_t t = 0; t < f->ntiles; t++)
                    ta_fused_merge_tile(f, &j->mems[j->order[k]], t);
            }
        }
    }
}

ta_status ta_sdpa_forward_fused(const ta_sdpa_problem *p, ta_arena *scratch)
{
    if (p->B * p->H * p->Lq == 0) return TA_OK;
    fused_plan f = make_plan(p);
    fused_mem m;
    layout(scratch, &m, &f);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", p->fn);
    if (f.mrows) {
        ta_fused_mask_bounds(&p->mask, m.mt, f.mrows, f.nt);
        f.mt = m.mt;
    }
    ta_fused_group_tiles(&f, m.t_r0, m.t_mq);
    m.nitems = ta_fused_build_items(&f, &m);
    const int64_t grab = plan_grab(&f, f.nt, f.ngroups), zero = 0;
    const int64_t cbase[2] = {0, (m.nitems + grab - 1) / grab};
    const fused_job job = {.plans = &f, .mems = &m, .order = &zero, .cbase = cbase,
                           .grab = &grab, .n = 1, .kbuf = m.kbuf, .vbuf = m.vbuf,
                           .kcopy_floats = f.kcopy_floats, .vcopy_floats = f.vcopy_floats};
    run_job(&job, m.ws, &f, f.nt, f.stream_o);
    return TA_OK;
}

/* ------------------------------------------------ many problems in one region */

/* The sequences of a variable-length call (sdpa_seqs.c) or of a KV cache's batch
 * (sdpa_kvcache.c), as many dense problems, run in one parallel region: each its own plan
 * and work list, their chunks claimed from one counter, problems with the costliest chunks
 * first; those that split their keys then merge their partials in the same region. One
 * region a sequence cost a fork, a join and the wait for its last item each time
 * (two-port Xeon, 2 threads, 64 sequences of 128 causal, [T, H8, D64]: ~10 us a
 * sequence; a split decode two of them), and the short sequences' few items left
 * threads idle. A problem joins unless it reads a mask table, or splits its keys where
 * the scratch has no room for all the partials (a varlen call's bound leaves none: its
 * long sequences run alone); the others run alone after the region. Each problem's items
 * are computed as a dense call of it computes them (its plan, its items, its merge): the
 * results do not depend on who joins. */

/* The fixed part of the scratch: per problem its plan, its work list's place, and the
 * order; the pool after it holds the work lists, the partials, the threads' workspaces
 * and copies (or, after the region, a problem that runs alone). */
typedef struct seqs_head {
    fused_plan *plans;
    fused_mem *mems;
    ta_sdpa_cost *keys; /* a problem's first chunk's (query, key) pairs */
    int64_t *order, *cbase, *grab; /* grab 0: the problem runs alone */
} seqs_head;

static void seqs_head_layout(ta_arena *a, seqs_head *h, int64_t n)
{
    h->plans = TA_ARENA_TAKE(a, fused_plan, n);
    h->mems = TA_ARENA_TAKE(a, fused_mem, n);
    h->order = TA_ARENA_TAKE(a, int64_t, n);
    h->cbase = TA_ARENA_TAKE(a, int64_t, n + 1);
    h->grab = TA_ARENA_TAKE(a, int64_t, n);
    h->keys = TA_ARENA_TAKE(a, ta_sdpa_cost, n);
}

/* What a region's pool holds: items, tiles (ta_fused_group_tiles' r0 and mq), the
 * partials' floats and their tiles' chunk counts (split problems), and per thread a
 * workspace of ws_bytes and copies of K and V rows. */
typedef struct seqs_need {
    int64_t items, tiles, parts, nch, kcopy, vcopy;
    int nt;
    size_t ws_bytes;
} seqs_need;

typedef struct seqs_pool {
    fused_item *items;
    int64_t *tiles, *nch;
    float *parts;
    unsigned char *ws;
    float *kbuf, *vbuf;
} seqs_pool;

static void seqs_pool_layout(ta_arena *a, seqs_pool *q, const seqs_need *n)
{
    q->items = TA_ARENA_TAKE(a, fused_item, n->items);
    q->tiles = TA_ARENA_TAKE2(a, int64_t, n->tiles, 2);
    q->nch = TA_ARENA_TAKE(a, int64_t, n->nch);
    q->parts = TA_ARENA_TAKE(a, float, n->parts);
    q->ws = TA_ARENA_TAKE2(a, unsigned char, (int64_t)n->ws_bytes, n->nt);
    q->kbuf = n->kcopy ? TA_ARENA_TAKE2(a, float, n->kcopy, n->nt) : NULL;
    q->vbuf = n->vcopy ? TA_ARENA_TAKE2(a, float, n->vcopy, n->nt) : NULL;
}

static size_t pool_bytes(const seqs_need *n)
{
    ta_arena a = ta_arena_measure();
    seqs_pool q;
    seqs_pool_layout(&a, &q, n);
    return ta_arena_bytes(&a);
}

/* The head's bytes and the pool's (at least `alone`, what one problem alone needs). */
static size_t seqs_bytes(int64_t n, const seqs_need *need, size_t alone)
{
    ta_arena a = ta_arena_measure();
    seqs_head h;
    seqs_head_layout(&a, &h, n);
    return ta_size_sum(ta_arena_bytes(&a), TA_MAX(pool_bytes(need), alone));
}

/* A plan's share of a pool: f's work list, tiles and partials. */
static void need_add(seqs_need *n, const fused_plan *f, bool parts)
{
    n->items += f->nitems;
    n->tiles += f->tpg;
    if (parts && f->split) {
        n->parts += f->nparts * f->part_floats;
        n->nch += f->ntiles;
    }
    n->kcopy = TA_MAX(n->kcopy, f->kcopy_floats);
    n->vcopy = TA_MAX(n->vcopy, f->vcopy_floats);
}

bool ta_sdpa_forward_fused_together(const ta_sdpa_problem *p, int64_t n)
{
    /* no query row at all (a varlen batch of Tq = 0): nothing to run together, and
     * ta_sdpa_forward_fused_seqs_bound plans no region for it */
    if (p->backward || p->path != TA_SDPA_FUSED || n < 2 || p->B * p->H * p->Lq == 0)
        return false;
    ta_sdpa_staging st;
    ta_sdpa_stage_plan(&st, p);
    return ta_sdpa_stage_bytes(&st) == 0;
}

size_t ta_sdpa_forward_fused_seqs_bound(const ta_sdpa_problem *whole, int64_t n, size_t alone)
{
    if (n < 1 || whole->B * whole->H * whole->Lq == 0) return alone;
    fused_plan f = make_plan(whole);
    if (f.too_big || f.ws_bytes == SIZE_MAX) return SIZE_MAX;
    if (sweep_heads(&f, true) > f.sweep) { /* a sequence of fewer queries may sweep */
        f.sweep = sweep_heads(&f, true);
        plan_ws_bytes(&f);
    }
    /* a sequence of Lq rows has at most Hkv ceil(G Lq / MQ) <= H (Lq / MQ + 1) tiles, and a
     * group G ceil(Lq / MQ) of them: summed over the sequences, below H (Tq / MQ + n) and
     * G (Tq / MQ + n); no partials (a sequence that splits runs alone) */
    const int64_t per = (whole->Lq + f.mq_max - 1) / f.mq_max + n;
    const seqs_need need = {.items = whole->H * per, .tiles = whole->G * per,
                            .kcopy = plan_kv_copy(whole, false, true),
                            .vcopy = plan_kv_copy(whole, true, true), .nt = ta_threads(),
                            .ws_bytes = f.ws_bytes};
    return seqs_bytes(n, &need, alone);
}

/* The most the partials of the problems that run together may take: past it (a batch of
 * hundreds of sequences over caches of 32k keys) the split ones run alone, each reusing
 * its own partials, and the scratch stays one the library keeps between calls
 * (TA_SCRATCH_KEEP_MAX). */
#define TA_FUSED_JOINT_PARTS_MAX ((int64_t)32 << 20)

size_t ta_sdpa_forward_fused_batch_bound(const ta_sdpa_problem *p, int64_t n, size_t alone)
{
    if (n < 1 || p->B * p->H * p->Lq == 0) return alone;
    const fused_plan f = make_plan(p);
    if (f.too_big || f.ws_bytes == SIZE_MAX) return SIZE_MAX;
    const bool parts = f.split && (int64_t)sizeof(float) * f.nparts * f.part_floats <=
                                      TA_FUSED_JOINT_PARTS_MAX / n;
    seqs_need need = {.nt = plan_threads(n * f.nitems), .ws_bytes = f.ws_bytes};
    for (int64_t s = 0; s < n; s++) need_add(&need, &f, parts);
    return seqs_bytes(n, &need, alone);
}

/* Whether problem p (plan f) may join the region: it has rows, its scratch fits, no mask
 * table (split: see parts, in ta_sdpa_forward_fused_seqs). */
static bool joins(const ta_sdpa_problem *p, const fused_plan *f)
{
    return p->B * p->H * p->Lq != 0 && !f->too_big && !f->mrows && f->ws_bytes != SIZE_MAX;
}

/* The joined plans' (h->order[0 .. joined)) lists, partials and claim order in pool q;
 * whether any streams O. */
static bool seqs_build(seqs_head *h, int64_t joined, const seqs_pool *q, int nt)
{
    int64_t groups = 0; /* the job's, for plan_grab */
    for (int64_t k = 0; k < joined; k++) groups += h->plans[h->order[k]].ngroups;
    fused_item *it = q->items;
    int64_t *t = q->tiles, *nch = q->nch;
    float *parts = q->parts;
    bool stream_o = false;
    for (int64_t k = 0; k < joined; k++) {
        const int64_t s = h->order[k];
        fused_plan *f = &h->plans[s];
        fused_mem *m = &h->mems[s];
        f->nt = nt;
        m->items = it;
        m->t_r0 = t;
        m->t_mq = t + f->tpg;
        if (f->split) {
            m->parts = parts;
            m->t_nch = nch;
            parts += f->nparts * f->part_floats;
            nch += f->ntiles;
        }
        ta_fused_group_tiles(f, m->t_r0, m->t_mq);
        m->nitems = ta_fused_build_items(f, m);
        it += m->nitems;
        t += 2 * f->tpg;
        h->grab[s] = plan_grab(f, nt, groups);
        int64_t pairs = 0; /* the costlier first chunk first, then in the call's order */
        for (int64_t i = 0; i < TA_MIN(h->grab[s], m->nitems); i++)
            pairs += m->items[i].mq * (m->items[i].jhi - m->items[i].jlo);
        h->keys[k] = (ta_sdpa_cost){(double)pairs, s};
        stream_o |= f->stream_o;
    }
    ta_sdpa_order_by_cost(h->keys, joined, h->order);
    h->cbase[0] = 0;
    for (int64_t k = 0; k < joined; k++) {
        const int64_t s = h->order[k];
        h->cbase[k + 1] = h->cbase[k] + (h->mems[s].nitems + h->grab[s] - 1) / h->grab[s];
    }
    return stream_o;
}

ta_status ta_sdpa_forward_fused_seqs(const ta_sdpa_problem *ps, int64_t n, ta_arena *scratch)
{
    seqs_head h;
    seqs_head_layout(scratch, &h, n);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", ps->fn);
    /* the pool (a problem that runs alone takes it from its start, after the region) */
    ta_arena rest = ta_arena_over(scratch->base + scratch->used, scratch->size - scratch->used);
    /* plans, and what the region needs with and without the split problems' partials */
    seqs_need all = {0}, plain = {0};
    int64_t joined = 0, widest = -1; /* widest: the plan that sweeps the most heads */
    for (int64_t s = 0; s < n; s++) {
        fused_plan *f = &h.plans[s];
        h.mems[s] = (fused_mem){.nitems = 0};
        h.grab[s] = 0;
        if (ps[s].B * ps[s].H * ps[s].Lq == 0) {
            *f = (fused_plan){.p = &ps[s]}; /* nothing to run: no chunk */
            continue;
        }
        *f = make_plan(&ps[s]);
        if (!joins(&ps[s], f)) continue;
        need_add(&all, f, true);
        if (!f->split) need_add(&plain, f, false);
        if (widest < 0 || f->sweep > h.plans[widest].sweep) widest = s;
    }
    if (widest < 0) widest = 0;
    all.nt = plain.nt = plan_threads(TA_MAX(all.items, 1));
    all.ws_bytes = plain.ws_bytes = h.plans[widest].ws_bytes;
    const bool parts = pool_bytes(&all) <= rest.size;
    int64_t o_numel = 0; /* what the region writes of O */
    for (int64_t s = 0; s < n; s++)
        if (joins(&ps[s], &h.plans[s]) && (parts || !h.plans[s].split)) {
            h.order[joined++] = s;
            o_numel += ta_tensor_numel(ps[s].O);
        }
    /* O's rows non-temporal by what the region writes, not by each sequence's share */
    for (int64_t k = 0; k < joined; k++) {
        fused_plan *f = &h.plans[h.order[k]];
        f->stream_o = ta_sdpa_stream_rows_of(f->p->O, f->p->Dv, o_numel,
                                             ta_sdpa_o_stream_min(f->p->O, f->p->Dv));
    }
    if (joined > 1) {
        const seqs_need *need = parts ? &all : &plain;
        const fused_plan *f0 = &h.plans[widest];
        const int nt = need->nt;
        ta_arena a = rest;
        seqs_pool q;
        seqs_pool_layout(&a, &q, need);
        if (a.overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", ps->fn);
        const bool stream_o = seqs_build(&h, joined, &q, nt);
        const fused_job job = {.plans = h.plans, .mems = h.mems, .order = h.order,
                               .cbase = h.cbase, .grab = h.grab, .n = joined, .kbuf = q.kbuf,
                               .vbuf = q.vbuf, .kcopy_floats = need->kcopy,
                               .vcopy_floats = need->vcopy};
        run_job(&job, q.ws, f0, nt, stream_o);
    }
    /* the others alone, in order */
    for (int64_t s = 0; s < n; s++) {
        if (h.grab[s] || ps[s].B * ps[s].H * ps[s].Lq == 0) continue;
        ta_arena a = rest;
        ta_status st = ta_sdpa_forward_fused(&ps[s], &a);
        if (st) return st;
    }
    return TA_OK;
}
