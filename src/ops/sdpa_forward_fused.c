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
 * On tiles that a row bound cuts (the causal diagonal, a key length) the kernels get
 * each row's key count and skip the blocks no row of theirs needs.
 *
 * K and V may be paged (a KV cache's blocks, ta_sdpa_pages): a key tile then spans
 * blocks, and its scores and P V run block by block (the kernels read each block's rows
 * in place, at their stride), while the softmax step and O's rescale stay once per tile:
 * blocks of 16 keys cost about what one 64-key tile does.
 *
 * Threads take whole work items (a tile, or a tile's key chunk) from a list ordered by
 * group, then within the group by query position from the last tile to the first (a
 * causal tile near the diagonal's end costs the most; with any other bound the tiles
 * cost the same): the threads share one group's K and V in cache, and the cheap items
 * fill the gaps at the end. The list is built in that order, never sorted. Each output
 * row is computed by one thread in a fixed order, so results do not depend on the
 * thread count. Problems with few tiles and many keys
 * (decode) also split the keys into chunks of about TA_FUSED_SPLIT keys, fixed by the
 * shape alone, whose partial (m, l, O) are merged by log-sum-exp in chunk order.
 *
 * Semantics are the reference path's (blocked scores are -inf whatever Q K^T held;
 * empty rows give O = 0 and LSE -inf; NaN and +inf scores make the row NaN), with one
 * difference: the fused path skips V at keys that no row of a block attends, so a NaN
 * or inf in V at a key blocked for a row reaches that row only sometimes (when a
 * neighbouring row of its block attends the key and p = 0 meets it), where the
 * reference path's 0 * NaN always spreads it. */
#include "ops/sdpa.h"

#include "core/core.h"
#include "core/dtype.h"
#include "kernels/kernels.h"
#include "ops/sdpa_fused_variants.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#include <stdlib.h>

#define TA_FUSED_NK 64       /* keys per tile: the S tile (mq x 64 floats) stays in L1 */
#define TA_FUSED_SWEEP_MAX 32 /* kv heads a sweep steps together at most */
#define TA_FUSED_SPLIT 512   /* keys per chunk when the keys are split (a multiple of NK) */
#define TA_FUSED_FEW_TILES 16 /* split the keys when there are fewer tiles than this */
#define TA_FUSED_MAX_CHUNKS 64 /* at most this many chunks (then the chunks widen) */
#define TA_FUSED_PREFETCH_ROWS 64 /* rows of the next run requested ahead (prefetch_run) */
/* A head_dim above this needs more scratch than any machine has (a tile of 48 rows:
 * 192 TiB): the plan says "does not fit" before any size arithmetic could wrap. */
#define TA_FUSED_DIM_MAX ((int64_t)1 << 40)

/* One unit of work: rows [r0, r0 + mq) of group (b, hkv), keys [jlo, jhi). */
typedef struct fused_item {
    int64_t b, hkv, r0, mq, jlo, jhi;
    int64_t tile;  /* index of the tile (its partials live at tile * nchunks + chunk) */
    int64_t chunk;
} fused_item;

/* A thread's scratch, sized once per call. */
typedef struct fused_ws {
    float *qp, *s, *o, *m, *l, *alpha, *kp, *vp;
    float *ones;      /* 1.0 per row: the rescale of a tile's later runs (tile_pv) */
    int32_t *rowk_run; /* per row: keys of the current run of a tile it needs */
    int64_t *end;  /* per row: the keys it may see (ta_mask_row_end, or the mask's bound) */
    int64_t *qoff; /* per row: its Q row's offset in elements */
    int32_t *rowk; /* per row: keys of the current tile it needs */
    int64_t *lo;   /* per row: its first key (a window's left bound; 0 without) */
    float *slope, *pos; /* per row: ALiBi slope and position i + delta */
    const void **krows, **vrows; /* a tile's K and V rows for the few-row kernels (row_table) */
} fused_ws;

typedef struct fused_plan {
    const ta_sdpa_problem *p;
    const ta_kernels *k;
    int64_t G, mq_max, ldo, nchunks, chunk_keys;
    int64_t tpg, ngroups, ntiles; /* tiles per (batch, kv head) group, groups, tiles */
    int64_t mq_used, part_floats; /* rows of a tile's partial (split), its floats */
    int64_t nitems, nparts; /* work items at most; partial slots (split only) */
    bool split;          /* the keys are cut into chunks merged by LSE (decode) */
    int64_t sweep;       /* > 1: decode from a cache whose key rows hold every kv head side
                            by side: the Hkv (= sweep) heads of a batch and chunk run as one
                            unit, tile by tile (run_sweep); else 1 */
    size_t state_bytes;  /* a sweep's workspace state per further head (ws_state_layout) */
    bool too_big;        /* D or Dv above TA_FUSED_DIM_MAX: the scratch cannot fit */
    bool pack_k, pack_v; /* K or V not unit-stride along D: copy each key tile */
    int kind_k, kind_v;  /* few-row tiles read K / V rows in place through
                            attn_qk_rows_kv / attn_pv_rows_kv of this kind (0 float32,
                            1 float16, 2 bfloat16), or -1: through kv_tile */
    bool scores_var;     /* softcap or ALiBi change the scores (ta_sdpa_fused_scores) */
    int64_t mrows;       /* rows of the mask's bound table (0: none) */
    const int64_t *mt;   /* the table, once laid out (mask_bounds) */
    size_t ws_bytes;     /* per thread (SIZE_MAX: does not fit) */
    int nt;              /* threads */
} fused_plan;

/* Head and query index of row r of a group. */
static inline void row_hi(const fused_plan *f, int64_t hkv, int64_t r, int64_t *h, int64_t *i)
{
    int64_t Lq = f->p->Lq;
    *h = hkv * f->G + r / Lq;
    *i = r % Lq;
}

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

/* The offset (elements) of Q's row r of a tile. */
static int64_t q_offset(const fused_plan *f, const fused_item *it, int64_t r)
{
    const ta_tensor *Q = f->p->Q;
    int64_t h, i;
    row_hi(f, it->hkv, it->r0 + r, &h, &i);
    return it->b * Q->stride[0] + h * Q->stride[1] + i * Q->stride[2];
}

/* Whether a tile has so few rows that attn_qk_rows computes its scores (a decode step:
 * one row, or the few query heads of a kv head); fixed by the shape alone, so every
 * thread count takes the same path. */
static inline bool few_rows(const fused_plan *f, const fused_item *it)
{
    return it->mq <= f->k->attn_rows_max;
}

/* Q rows of the tile, scaled: into qp [D, mq_max] (rows past mq are zero) for attn_qk,
 * or, for a tile of few rows, untransposed into qp [mq, D] for attn_qk_rows. */
static void pack_q(const fused_plan *f, const fused_item *it, float *qp, int64_t *qoff)
{
    const ta_sdpa_problem *p = f->p;
    const float *q = (const float *)p->Q->data;
    const int64_t D = p->D, s3 = p->Q->stride[3];
    for (int64_t r = 0; r < it->mq; r++) qoff[r] = q_offset(f, it, r);
    if (!few_rows(f, it)) {
        f->k->attn_pack_t(qp, f->mq_max, q, qoff, s3, it->mq, D, p->scale);
        return;
    }
    for (int64_t r = 0; r < it->mq; r++)
        for (int64_t d = 0; d < D; d++) qp[r * D + d] = q[qoff[r] + d * s3] * p->scale;
    if (f->kind_k == 2) { /* bfloat16 K in place: blocks of 2 VL even, then odd (kernels.h) */
        const int64_t vl = f->k->attn_vl;
        float tmp[2 * 64];
        for (int64_t r = 0; r < it->mq; r++)
            for (int64_t d0 = 0; d0 + 2 * vl <= D; d0 += 2 * vl) {
                float *row = qp + r * D + d0;
                for (int64_t i = 0; i < vl; i++) {
                    tmp[i] = row[2 * i];
                    tmp[vl + i] = row[2 * i + 1];
                }
                memcpy(row, tmp, sizeof(float) * (size_t)(2 * vl));
            }
    }
}

/* The tile of keys [j0, j0 + nk) of the item's group in K (value false) or V, which
 * ta_sdpa_kv_run says lie in one run (one block of a paged cache): a pointer to its
 * first row and the row stride in *ld, or, when the rows are float16/bfloat16 (a
 * half-precision cache: widened here, in registers, at half the bytes read) or not
 * unit-stride along D, a float32 copy in buf [nk, cols]. The one place the forward reads
 * K and V. */
/* The first byte of key row j0 of the item's group in K (value false) or V. */
static const char *kv_rows(const fused_plan *f, const fused_item *it, bool value, int64_t j0)
{
    const ta_tensor *t = value ? f->p->V : f->p->K;
    return (const char *)t->data +
           ta_dtype_size(t->dtype) * (size_t)ta_sdpa_kv_offset(f->p, value, it->b, it->hkv, j0);
}

/* The table of K's (value false) or V's rows for keys j0 .. j0 + nk - 1 of the item's
 * group, in rows (TA_FUSED_NK + TA_ROWS_AHEAD entries), then the next keys of the item
 * for the kernels to prefetch (up to TA_ROWS_AHEAD), except when the rows follow each
 * other in memory (a head's keys one stream: the hardware prefetcher follows it, and
 * software prefetches on top cost bandwidth, docs/kernels.md "Decode: streaming K and
 * V"). Returns the entries (the kernels' avail). */
static int64_t row_table(const fused_plan *f, const fused_item *it, bool value, int64_t j0,
                         int64_t nk, const void **rows)
{
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *t = value ? p->V : p->K;
    const bool stream = !p->pages.table && t->stride[2] == (value ? p->Dv : p->D);
    const int64_t n = stream ? nk : TA_MIN(nk + TA_ROWS_AHEAD, it->jhi - j0);
    const size_t es = ta_dtype_size(t->dtype);
    for (int64_t j = 0; j < n; j++)
        rows[j] = (const char *)t->data + es * (size_t)ta_sdpa_kv_offset(p, value, it->b, it->hkv, j0 + j);
    return n;
}

/* Whether the item's tiles read K (value false) or V through the few-row kernels on
 * typed rows (attn_qk_rows_kv / attn_pv_rows_kv): few-row tiles of rows they take,
 * except float32 rows that follow each other with one or two query rows, where
 * attn_qk_rows and attn_pv stream the rows key by key a little faster (1 thread,
 * B1 H32 Lk4096 D128 f32: 6.7 against 8.0 ms in one run). */
static bool typed_rows(const fused_plan *f, const fused_item *it, bool value)
{
    const ta_tensor *t = value ? f->p->V : f->p->K;
    const int kind = value ? f->kind_v : f->kind_k;
    if (!few_rows(f, it) || kind < 0) return false;
    return kind != 0 || it->mq > 2 || t->stride[2] != (value ? f->p->Dv : f->p->D);
}

/* Bytes between key rows of K or V (within a run). */
static int64_t kv_ld(const ta_tensor *t) { return (int64_t)ta_dtype_size(t->dtype) * t->stride[2]; }

static const float *kv_tile(const fused_plan *f, const fused_item *it, bool value, int64_t j0,
                            int64_t nk, float *buf, int64_t *ld)
{
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *t = value ? p->V : p->K;
    const char *src = kv_rows(f, it, value, j0);
    if (!(value ? f->pack_v : f->pack_k)) {
        *ld = t->stride[2];
        return (const float *)src;
    }
    const int64_t cols = value ? p->Dv : p->D, rs = kv_ld(t);
    /* unit-stride half rows: the ISA's converter straight from the table, row by row (a
     * decode step widens tens of thousands of rows: no per-row dispatch) */
    const ta_widen_fn widen = t->stride[3] == 1 ? ta_widen_kernel(t->dtype) : NULL;
    for (int64_t j = 0; j < nk; j++) {
        if (widen)
            widen(buf + j * cols, (const uint16_t *)(src + j * rs), cols);
        else
            ta_row_to_f32(buf + j * cols, src + j * rs, t->dtype, cols, t->stride[3]);
    }
    *ld = cols;
    return buf;
}

/* Blocks the scores of a key tile [j0, j0 + nk) that a bound or the mask tensor hides:
 * with a mask tensor the mask plan decides every score (scale 1: Q is pre-scaled);
 * otherwise only the keys past each row's end become -inf. */
/* The mask tensor's value for one key when every row of the tile reads the same mask
 * row (a [B, 1, 1, Lk] padding mask, or one head's rows of a [B, H, 1, Lk] mask): applied
 * to the whole key column s[t * MQ + 0 .. mq) at once, which vectorises. Scores are
 * already scaled (the scale is folded into Q). Same rules as ta_mask_apply. */
static void mask_tile_shared_row(const ta_mask_plan *mp, const float *m, int64_t ms, float *s,
                                 int64_t MQ, int64_t mq, int64_t nk)
{
    for (int64_t t = 0; t < nk; t++) {
        const float v = m[t * ms];
        float *col = s + t * MQ;
        bool blocked = ta_mask_value_blocks(mp->mode, v);
        if (blocked)
            for (int64_t r = 0; r < mq; r++) col[r] = -INFINITY;
        else if (mp->mode == TA_MASK_ADDITIVE)
            for (int64_t r = 0; r < mq; r++) col[r] += v;
    }
}

/* use_mask false: only the row bounds in w->end (the causal limit, key lengths, or a
 * mask tensor's that the table turned into bounds) block keys of the tile. */
static void mask_tile(const fused_plan *f, const fused_item *it, const fused_ws *w, float *s,
                      int64_t j0, int64_t nk, bool use_mask)
{
    const ta_mask_plan *mp = &f->p->mask;
    int64_t MQ = f->mq_max;
    int64_t h0, i0, h1, i1;
    row_hi(f, it->hkv, it->r0, &h0, &i0);
    row_hi(f, it->hkv, it->r0 + it->mq - 1, &h1, &i1);
    if (use_mask && mp->mstride[2] == 0 && (h0 == h1 || mp->mstride[1] == 0)) {
        mask_tile_shared_row(mp, ta_mask_row_ptr(mp, it->b, h0, i0) + j0 * mp->mstride[3],
                             mp->mstride[3], s, MQ, it->mq, nk);
    } else if (use_mask) {
        for (int64_t r = 0; r < it->mq; r++) {
            int64_t h, i;
            row_hi(f, it->hkv, it->r0 + r, &h, &i);
            ta_mask_apply(mp, it->b, h, i, j0, nk, 1.0f, s + r, MQ);
        }
        return; /* ta_mask_apply applied the row bounds too */
    }
    /* the bound of each row */
    for (int64_t r = 0; r < it->mq; r++) {
        int64_t t = w->end[r] - j0;
        for (t = t < 0 ? 0 : t; t < nk; t++) s[t * MQ + r] = -INFINITY;
    }
}

/* Whether a keep or block mask tensor, with the row bounds in w->end, blocks every key
 * of keys [j0, j0 + nk) for every row of the item: such a tile is skipped, as the ones
 * the causal limit hides are (its scores would all be -inf: it adds nothing). A mask
 * that is causal in disguise (the seed's triu block mask) so costs no more than
 * opts.causal beyond this scan, which stops at the first allowed key. */
static bool tile_blocked(const fused_plan *f, const fused_item *it, const fused_ws *w,
                         int64_t j0, int64_t nk)
{
    const ta_mask_plan *mp = &f->p->mask;
    if (mp->mode == TA_MASK_ADDITIVE) return false;
    const int64_t ms = mp->mstride[3];
    for (int64_t r = 0; r < it->mq; r++) {
        int64_t e = TA_MIN(w->end[r] - j0, nk), t = TA_MAX(w->lo[r] - j0, 0), h, i;
        if (e <= t) continue;
        row_hi(f, it->hkv, it->r0 + r, &h, &i);
        const float *m = ta_mask_row_ptr(mp, it->b, h, i) + j0 * ms;
        for (; t < e; t++)
            if (!ta_mask_value_blocks(mp->mode, m[t * ms])) return false;
    }
    return true;
}

/* A keep or block mask tensor that is broadcast over the batch, the heads or the query
 * rows is often a bound in disguise: the seed's triu mask is the causal limit, a padding
 * mask [B, 1, 1, Lk] a key length. Each distinct mask row gets, once per call, the
 * start P of its first blocked key and the first allowed key N at or after P (Lk if
 * none): a query row whose bound `end` has N >= end sees exactly the keys below
 * min(end, P), so its tiles need no mask at all. */
static int64_t mask_row_index(const ta_mask_plan *mp, int64_t b, int64_t h, int64_t i)
{
    const int64_t nh = mp->mstride[1] ? mp->H : 1, nl = mp->mstride[2] ? mp->Lq : 1;
    return ((mp->mstride[0] ? b : 0) * nh + (mp->mstride[1] ? h : 0)) * nl +
           (mp->mstride[2] ? i : 0);
}

static int64_t mask_table_rows(const ta_mask_plan *mp)
{
    if (!mp->has_mask || mp->mode == TA_MASK_ADDITIVE) return 0;
    if (mp->mstride[0] && mp->mstride[1] && mp->mstride[2]) return 0; /* read once anyway */
    return (mp->mstride[0] ? mp->B : 1) * (mp->mstride[1] ? mp->H : 1) *
           (mp->mstride[2] ? mp->Lq : 1);
}

static void mask_bounds(const ta_mask_plan *mp, int64_t *mt, int64_t rows, int nt)
{
    const int64_t nh = mp->mstride[1] ? mp->H : 1, nl = mp->mstride[2] ? mp->Lq : 1;
    const int64_t ms = mp->mstride[3], Lk = mp->Lk;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t m = 0; m < rows; m++) {
        const float *row = mp->mask + (m / (nh * nl)) * mp->mstride[0] +
                           (m / nl % nh) * mp->mstride[1] + (m % nl) * mp->mstride[2];
        int64_t j = 0;
        while (j < Lk && !ta_mask_value_blocks(mp->mode, row[j * ms])) j++;
        mt[2 * m] = j;
        while (j < Lk && ta_mask_value_blocks(mp->mode, row[j * ms])) j++;
        mt[2 * m + 1] = j;
    }
}

/* The keys row (b, h, i) may see: the causal and key-length bound, tightened by the
 * mask's table; *exact: no mask tensor decides anything for the row below it. */
static int64_t row_bound(const fused_plan *f, int64_t b, int64_t h, int64_t i, bool *exact)
{
    const ta_mask_plan *mp = &f->p->mask;
    int64_t end = ta_mask_row_end(mp, b, i);
    *exact = !mp->mask;
    if (f->mt) {
        const int64_t *t = f->mt + 2 * mask_row_index(mp, b, h, i);
        if (t[1] >= end) {
            *exact = true;
            if (t[0] < end) end = t[0];
        }
    }
    return end;
}

/* The keys [*lo, end) row (b, h, i) may see: row_bound tightened by the window (an empty
 * range has *lo >= end). */
static int64_t row_keys(const fused_plan *f, int64_t b, int64_t h, int64_t i, int64_t *lo,
                        bool *exact)
{
    int64_t end = row_bound(f, b, h, i, exact), wl, wh;
    ta_sdpa_window_keys(&f->p->var, f->p->var.delta, f->p->Lk, i, &wl, &wh);
    *lo = wl;
    return TA_MIN(end, wh);
}

/* A tile's keys come in runs that share a stride (ta_sdpa_kv_run): the whole tile, or
 * one block of a paged cache each. The per-row key counts of the tile of nk keys (rowk,
 * or NULL) for the run [a, a + n) of it. */
static const int32_t *run_rowk(const fused_plan *f, const fused_ws *w, const int32_t *rowk,
                               int64_t nk, int64_t a, int64_t n)
{
    if (!rowk || n == nk) return rowk;
    for (int64_t r = 0; r < f->mq_max; r++) {
        int64_t e = rowk[r] - a;
        w->rowk_run[r] = (int32_t)(e < 0 ? 0 : e > n ? n : e);
    }
    return w->rowk_run;
}

/* A tile of few rows (decode: as fast as memory; a tile of many rows computes long on
 * each block, and reads it again for every query tile): the rows of K's (value false) or
 * V's next run from key j (the next tile of a contiguous cache, the next block of a
 * paged one), up to TA_FUSED_PREFETCH_ROWS, requested into L2 while the current run is
 * read. The hardware prefetchers do not cross 4 KiB pages, and a KV cache's layout
 * [B, L, Hkv, D] puts each key row of a head in a page of its own (rows Hkv * D apart),
 * nor can they know which block a paged cache's table names next. Measured on one Zen 4
 * core, 1 thread, B1 H32 Hkv8 Lk4096 D128 float32: a [B, L, Hkv, D] cache read at about
 * 9 GB/s without this and 15 GB/s with it, as fast as the [B, Hkv, L, D] layout; a
 * paged cache of 16-key blocks in shuffled order ~1.7x faster (docs/inference.md).
 * Into L2, not L1: the L1 miss buffers are the demand loads' (docs/kernels.md). Inlined
 * by force: gcc finds a function that only prefetches free of side effects and deletes
 * the calls. */
static inline __attribute__((always_inline)) void prefetch_run(const fused_plan *f, const fused_item *it, bool value, int64_t j)
{
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *t = value ? p->V : p->K;
    if (!few_rows(f, it) || j >= it->jhi || t->stride[3] != 1) return;
    const int64_t es = (int64_t)ta_dtype_size(t->dtype), bytes = (value ? p->Dv : p->D) * es;
    const int64_t n = TA_MIN(TA_MIN(ta_sdpa_kv_run(p, j), it->jhi - j), TA_FUSED_PREFETCH_ROWS);
    const char *row = (const char *)t->data + es * ta_sdpa_kv_offset(p, value, it->b, it->hkv, j);
    for (int64_t r = 0; r < n; r++, row += es * t->stride[2])
        for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch(row + c, 0, 2);
}

/* The scores of keys [j0, j0 + nk), s = (scale Q) K^T, run by run into the tile's
 * columns: a paged cache's tile spans blocks (its softmax and rescale stay per tile). */
static void tile_scores(const fused_plan *f, const fused_item *it, const fused_ws *w,
                        int64_t j0, int64_t nk, const int32_t *rowk)
{
    const ta_sdpa_problem *p = f->p;
    if (typed_rows(f, it, false)) { /* K rows in place, through a table (any run) */
        const int64_t avail = row_table(f, it, false, j0, nk, w->krows);
        const bool v_too = typed_rows(f, it, true);
        if (v_too) row_table(f, it, true, j0, nk, w->vrows);
        if (avail == nk) prefetch_run(f, it, false, j0 + nk); /* a stream: the next tile */
        f->k->attn_qk_rows_kv[f->kind_k](w->s, f->mq_max, w->qp, p->D, it->mq, w->krows, nk,
                                         p->D, avail, v_too ? w->vrows : NULL,
                                         p->Dv * (int64_t)ta_dtype_size(p->V->dtype));
        return;
    }
    int64_t n, ld;
    for (int64_t a = 0; a < nk; a += n) {
        const int64_t run = ta_sdpa_kv_run(p, j0 + a);
        n = TA_MIN(nk - a, run);
        float *s = w->s + a * f->mq_max;
        const float *kt = kv_tile(f, it, false, j0 + a, n, w->kp, &ld);
        prefetch_run(f, it, false, j0 + a + n);
        if (few_rows(f, it))
            f->k->attn_qk_rows(s, w->qp, p->D, it->mq, kt, ld, n, p->D);
        else
            f->k->attn_qk(s, w->qp, kt, ld, n, p->D, run_rowk(f, w, rowk, nk, a, n));
    }
}

/* O = O alpha + P V over keys [j0, j0 + nk), run by run: alpha rescales O once, with the
 * first run (the others scale by ones). (Gathering a tile's V rows from its blocks
 * instead, for one attn_pv call, cost prefill more than the kernel's extra passes over O
 * did: docs/inference.md.) */
static void tile_pv(const fused_plan *f, const fused_item *it, const fused_ws *w, int64_t j0,
                    int64_t nk, const int32_t *rowk)
{
    const ta_sdpa_problem *p = f->p;
    if (typed_rows(f, it, true)) { /* V rows in place, through a table (any run) */
        int64_t keys = rowk ? 0 : nk; /* keys past every row's need hold p = 0: skip */
        for (int64_t r = 0; rowk && r < it->mq; r++) keys = TA_MAX(keys, (int64_t)rowk[r]);
        const int64_t avail = row_table(f, it, true, j0, nk, w->vrows);
        if (avail == nk) prefetch_run(f, it, true, j0 + nk);
        f->k->attn_pv_rows_kv[f->kind_v](w->o, f->ldo, w->s, f->mq_max, w->alpha, w->vrows,
                                         keys, p->Dv, it->mq, avail);
        return;
    }
    int64_t n, ld;
    for (int64_t a = 0; a < nk; a += n) {
        const int64_t run = ta_sdpa_kv_run(p, j0 + a);
        n = TA_MIN(nk - a, run);
        const float *vt = kv_tile(f, it, true, j0 + a, n, w->vp, &ld);
        prefetch_run(f, it, true, j0 + a + n);
        f->k->attn_pv(w->o, f->ldo, w->s + a * f->mq_max, a ? w->ones : w->alpha, vt, ld, n,
                      p->Dv, it->mq, run_rowk(f, w, rowk, nk, a, n));
    }
}

/* The online softmax of one work item: leaves the unnormalised O, m and l of its rows
 * in the workspace. */
/* What the tiles of a work item share (item_begin): the smallest row bound (key tiles
 * below it need no mask unless a tensor exists that the bounds do not fully describe),
 * a window's largest first key (tiles from it on have no key left of any row's window),
 * and where the tiles the bounds cut start. */
typedef struct item_run {
    int64_t clean_end, clean_lo, cut_start, left_end;
    bool use_mask;
} item_run;

/* Starts the online softmax of one work item (m = -inf, l = 0, O = 0 in the workspace,
 * Q packed, the rows' bounds); false when it has no key. */
static bool item_begin(const fused_plan *f, const fused_item *it, const fused_ws *w,
                       item_run *ir)
{
    const ta_sdpa_problem *p = f->p;
    for (int64_t r = 0; r < f->mq_max; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->o, 0, sizeof(float) * (size_t)(it->mq * f->ldo)); /* no kernel reads rows >= mq */
    if (it->jhi <= it->jlo) return false;
    pack_q(f, it, w->qp, w->qoff);
    const ta_sdpa_variants *v = &p->var;
    int64_t clean_end = p->Lk, clean_lo = 0;
    bool exact_all = true;
    for (int64_t r = 0; r < it->mq; r++) {
        int64_t h, i;
        bool exact;
        row_hi(f, it->hkv, it->r0 + r, &h, &i);
        w->end[r] = row_keys(f, it->b, h, i, &w->lo[r], &exact);
        exact_all &= exact;
        if (w->end[r] < clean_end) clean_end = w->end[r];
        if (w->lo[r] > clean_lo) clean_lo = w->lo[r];
        w->slope[r] = ta_sdpa_alibi_slope(v, it->b, h);
        w->pos[r] = (float)(i + v->delta);
    }
    ir->clean_end = clean_end;
    ir->clean_lo = clean_lo;
    ir->use_mask = p->mask.mask && !exact_all;
    /* Key tiles end where the cut keys start (rounded down to 16 keys, a multiple of
     * every kernel's key block), so the keys a bound cuts (the causal diagonal) share as
     * few tiles as they can; tiles that a window's left bounds cut end at clean_lo
     * (rounded up to 16 keys from the item's first key). */
    ir->cut_start = clean_end < it->jhi ? TA_MAX(it->jlo, clean_end / 16 * 16) : it->jhi;
    ir->left_end = TA_MIN(it->jlo + ta_round_up(TA_MAX(clean_lo - it->jlo, 0), 16), it->jhi);
    return true;
}

/* One online-softmax step of a work item: the key tile from j0 (at most TA_FUSED_NK
 * keys, ending where item_begin's bounds say); returns its key count. */
static int64_t item_tile(const fused_plan *f, const fused_item *it, const fused_ws *w,
                         const item_run *ir, int64_t j0)
{
    const ta_sdpa_problem *p = f->p;
    const ta_kernels *k = f->k;
    const ta_sdpa_variants *v = &p->var;
    const int64_t MQ = f->mq_max;
    const int64_t stop = j0 < ir->left_end && ir->left_end < ir->cut_start ? ir->left_end
                         : j0 < ir->cut_start                              ? ir->cut_start
                                                                           : it->jhi;
    const int64_t nk = TA_MIN(TA_FUSED_NK, stop - j0);
    if (ir->use_mask && tile_blocked(f, it, w, j0, nk)) return nk;
    /* A tile that a row bound cuts (the causal diagonal, a key length, a window): each
     * row's key count lets the kernels skip the blocks no row of theirs needs (none,
     * for a row whose window starts past the tile). */
    const int32_t *rowk = NULL;
    const bool left_cut = j0 < ir->clean_lo, cut = j0 + nk > ir->clean_end || left_cut;
    if (cut || it->mq < MQ) { /* a short tile (decode) skips its empty vectors too */
        for (int64_t r = 0; r < MQ; r++) {
            int64_t e = r < it->mq ? (cut ? w->end[r] - j0 : nk) : 0;
            if (r < it->mq && w->lo[r] >= TA_MIN(w->end[r], j0 + nk)) e = 0;
            w->rowk[r] = (int32_t)(e < 0 ? 0 : e > nk ? nk : e);
        }
        rowk = w->rowk;
    }
    tile_scores(f, it, w, j0, nk, rowk);
    if (f->scores_var) ta_sdpa_fused_scores(k, v, w->s, MQ, it->mq, j0, nk, w->slope, w->pos);
    if (ir->use_mask || j0 + nk > ir->clean_end) mask_tile(f, it, w, w->s, j0, nk, ir->use_mask);
    if (v->window && (left_cut || ir->use_mask))
        ta_sdpa_fused_window_mask(w->s, MQ, it->mq, j0, nk, w->lo, w->end);
    if (few_rows(f, it)) k->attn_softmax_rows(w->s, MQ, w->m, w->l, w->alpha, nk, it->mq);
    else k->attn_softmax(w->s, w->m, w->l, w->alpha, nk, it->mq);
    if (p->Dv > 0) tile_pv(f, it, w, j0, nk, rowk);
    return nk;
}

/* The online softmax of one work item: leaves the unnormalised O, m and l of its rows
 * in the workspace. */
static void run_item(const fused_plan *f, const fused_item *it, const fused_ws *w)
{
    item_run ir;
    if (!item_begin(f, it, w, &ir)) return;
    for (int64_t j0 = it->jlo; j0 < it->jhi;) j0 += item_tile(f, it, w, &ir, j0);
}

/* The items of one sweep unit (the kv heads of a batch and key chunk, in a KV cache
 * whose key rows hold every head side by side), each with its own workspace state,
 * stepped together tile by tile: the tile of every head is read from one span of memory
 * before the next tile (docs/inference.md, "Decode order"). */
static void run_sweep(const fused_plan *f, const fused_item *its, int64_t n, const fused_ws *ws)
{
    item_run ir[TA_FUSED_SWEEP_MAX];
    int64_t j0[TA_FUSED_SWEEP_MAX];
    bool more = false;
    for (int64_t h = 0; h < n; h++) {
        j0[h] = item_begin(f, &its[h], &ws[h], &ir[h]) ? its[h].jlo : its[h].jhi;
        more |= j0[h] < its[h].jhi;
    }
    while (more) {
        more = false;
        for (int64_t h = 0; h < n; h++)
            if (j0[h] < its[h].jhi) {
                j0[h] += item_tile(f, &its[h], &ws[h], &ir[h], j0[h]);
                more |= j0[h] < its[h].jhi;
            }
    }
}

/* O row and LSE of row r of a tile from nch partial (m, l, o) triples, merged in chunk
 * order in double: M = max m_c, L = sum l_c e^(m_c - M), O = sum o_c e^(m_c - M) / L.
 * A row with L = 0 attends to nothing: O = 0, LSE = -inf. NaN in l or o stays NaN. */
static void finish_row(const fused_plan *f, int64_t b, int64_t hkv, int64_t r,
                       const float *const *m, const float *const *l, const float *const *o,
                       int64_t nch)
{
    const ta_sdpa_problem *p = f->p;
    int64_t h, i;
    row_hi(f, hkv, r, &h, &i);
    double M = -INFINITY, fc[TA_FUSED_MAX_CHUNKS], L = 0.0;
    for (int64_t c = 0; c < nch; c++)
        if (m[c][0] > M) M = m[c][0];
    double u = M == -INFINITY ? 0.0 : M;
    for (int64_t c = 0; c < nch; c++) {
        fc[c] = exp((double)m[c][0] - u);
        L += (double)l[c][0] * fc[c];
    }
    const ta_tensor *O = p->O;
    float *orow = (float *)O->data + b * O->stride[0] + h * O->stride[1] + i * O->stride[2];
    double lse = L == 0.0 ? -INFINITY : u + log(L);
    if (p->var.sinks) { /* O = sum o_c e^(m_c - u) * factor */
        double factor;
        ta_sdpa_sink_finish(u, L, ta_sdpa_sink(&p->var, h), &factor, &lse);
        for (int64_t d = 0; d < p->Dv; d++) {
            double acc = 0.0;
            for (int64_t c = 0; c < nch; c++) acc += (double)o[c][d] * fc[c];
            orow[d * O->stride[3]] = L == 0.0 ? 0.0f : (float)(acc * factor);
        }
    } else if (L == 0.0) {
        for (int64_t d = 0; d < p->Dv; d++) orow[d * O->stride[3]] = 0.0f;
    } else {
        for (int64_t d = 0; d < p->Dv; d++) {
            double acc = 0.0;
            for (int64_t c = 0; c < nch; c++) acc += (double)o[c][d] * fc[c];
            orow[d * O->stride[3]] = (float)(acc / L);
        }
    }
    if (p->lse) {
        const ta_tensor *T = p->lse;
        ((float *)T->data)[b * T->stride[0] + h * T->stride[1] + i * T->stride[2]] = (float)lse;
    }
}

/* The unsplit case of finish_row for the rows of a work item, in float: O = o * (1/l),
 * LSE = m + log l (l = 0: O = 0, LSE = -inf; a NaN l gives NaN in both). */
static void finish_item(const fused_plan *f, const fused_item *it, const fused_ws *w)
{
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *O = p->O, *T = p->lse;
    int64_t os = O->stride[3], Dv = p->Dv;
    for (int64_t r = 0; r < it->mq; r++) {
        int64_t h, i;
        row_hi(f, it->hkv, it->r0 + r, &h, &i);
        float *orow = (float *)O->data + it->b * O->stride[0] + h * O->stride[1] +
                      i * O->stride[2];
        const float *o = w->o + r * f->ldo;
        float l = w->l[r], inv = l == 0.0f ? 0.0f : 1.0f / l; /* inv NaN when l is */
        double lse = l == 0.0f ? -INFINITY : (double)w->m[r] + log((double)l);
        if (p->var.sinks) { /* the sink joins the denominator: O and LSE change */
            double factor;
            ta_sdpa_sink_finish(w->m[r], l, ta_sdpa_sink(&p->var, h), &factor, &lse);
            inv = (float)factor;
        }
        if (os == 1)
            for (int64_t d = 0; d < Dv; d++) orow[d] = l == 0.0f ? 0.0f : o[d] * inv;
        else
            for (int64_t d = 0; d < Dv; d++) orow[d * os] = l == 0.0f ? 0.0f : o[d] * inv;
        if (T)
            ((float *)T->data)[it->b * T->stride[0] + h * T->stride[1] + i * T->stride[2]] =
                (float)lse;
    }
}

/* The tiles of a group: per head when Lq fills a tile, across heads otherwise. Returns
 * the number of tiles; fills starts/sizes when given. */
static int64_t group_tiles(const fused_plan *f, int64_t *r0, int64_t *mq)
{
    int64_t Lq = f->p->Lq, G = f->G, MQ = f->mq_max, n = 0;
    if (Lq >= MQ) {
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < Lq; i += MQ, n++)
                if (r0) {
                    r0[n] = g * Lq + i;
                    mq[n] = TA_MIN(MQ, Lq - i);
                }
    } else {
        for (int64_t r = 0; r < G * Lq; r += MQ, n++)
            if (r0) {
                r0[n] = r;
                mq[n] = TA_MIN(MQ, G * Lq - r);
            }
    }
    return n;
}

/* The k-th tile of a group in schedule order, as an index of group_tiles' list: per
 * head (Lq fills tiles), the last query position first, heads in order at each
 * position; across heads (short Lq), the list order. */
static int64_t tile_in_order(const fused_plan *f, int64_t k)
{
    int64_t Lq = f->p->Lq, MQ = f->mq_max;
    if (Lq < MQ) return k;
    int64_t per_head = (Lq + MQ - 1) / MQ, g = k % f->G, pos = per_head - 1 - k / f->G;
    return g * per_head + pos;
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

/* How many kv heads a sweep steps together (run_sweep): Hkv when every tile is a
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
    f.scores_var = ta_sdpa_fused_scores_needed(&p->var);
    f.tpg = group_tiles(&f, NULL, NULL);
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
    f.mrows = mask_table_rows(&p->mask);
    f.nitems = f.ntiles * f.nchunks;
    f.nparts = f.split ? f.nitems : 0;
    f.nt = plan_threads(f.nitems / f.sweep); /* a sweep's unit: Hkv items */
    return f;
}

/* The scratch of one call: the work list, the tile table of a group, each thread's
 * workspace and the partials of a key split. */
typedef struct fused_mem {
    fused_item *items;
    int64_t *t_r0, *t_mq;
    int64_t *t_nch;    /* split: per tile, its chunks that hold keys (the first ones) */
    unsigned char *ws; /* nt per-thread workspaces of ws_bytes */
    float *parts;
    int64_t *mt;       /* the mask's bound table: 2 per row (mask_bounds) */
} fused_mem;

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
    return plan_bytes(&f);
}

/* A tile's keys [*jlo, *jhi): from the smallest first key of its rows (a window's;
 * rounded down to 16 keys) to the largest row bound; 0, 0 when no row sees a key. */
static void tile_keys(const fused_plan *f, const fused_item *base, int64_t *jlo, int64_t *jhi)
{
    int64_t jmin = f->p->Lk, jmax = 0;
    for (int64_t r = 0; r < base->mq; r++) {
        int64_t h, i, lo;
        bool exact;
        row_hi(f, base->hkv, base->r0 + r, &h, &i);
        const int64_t e = row_keys(f, base->b, h, i, &lo, &exact);
        if (lo >= e) continue; /* sees no key */
        if (e > jmax) jmax = e;
        if (lo < jmin) jmin = lo;
    }
    *jlo = jmin >= jmax ? 0 : jmin / 16 * 16;
    *jhi = jmax;
}

/* The work list of a sweep (f->sweep kv heads, one tile each): per batch and key chunk,
 * one unit of the Hkv items (hkv in order), as many chunks as the head with the most
 * keys needs (the others get empty items there: exact zeros in the merge). */
static int64_t build_sweep(const fused_plan *f, const fused_mem *m)
{
    const ta_sdpa_problem *p = f->p;
    int64_t n = 0;
    for (int64_t b = 0; b < p->B; b++) {
        fused_item base[TA_FUSED_SWEEP_MAX];
        int64_t jlo[TA_FUSED_SWEEP_MAX], jhi[TA_FUSED_SWEEP_MAX], nch = 1;
        for (int64_t hkv = 0; hkv < p->Hkv; hkv++) {
            const int64_t g = b * p->Hkv + hkv;
            base[hkv] = (fused_item){.b = b, .hkv = hkv, .r0 = m->t_r0[0], .mq = m->t_mq[0], .tile = g};
            tile_keys(f, &base[hkv], &jlo[hkv], &jhi[hkv]);
            while (f->split && nch < f->nchunks && nch * f->chunk_keys < jhi[hkv]) nch++;
        }
        for (int64_t c = 0; c < nch; c++)
            for (int64_t hkv = 0; hkv < p->Hkv; hkv++) {
                fused_item it = base[hkv];
                it.chunk = c;
                it.jlo = TA_MAX(c * f->chunk_keys, jlo[hkv]);
                it.jhi = TA_MIN(c * f->chunk_keys + f->chunk_keys, jhi[hkv]);
                if (it.jhi < it.jlo) it.jhi = it.jlo;
                m->items[n++] = it;
            }
        for (int64_t hkv = 0; f->split && hkv < p->Hkv; hkv++) m->t_nch[base[hkv].tile] = nch;
    }
    return n;
}

/* The work list, in schedule order: group by group, and within a group the tiles from
 * the last query position to the first (see the top of the file), each tile's chunks
 * in key order. Returns the number of items. */
static int64_t build_items(const fused_plan *f, const fused_mem *m)
{
    const ta_sdpa_problem *p = f->p;
    if (f->sweep > 1) return build_sweep(f, m);
    int64_t n = 0;
    for (int64_t g = 0; g < f->ngroups; g++) {
        for (int64_t k = 0; k < f->tpg; k++) {
            int64_t t = tile_in_order(f, k);
            fused_item base = {.b = g / p->Hkv, .hkv = g % p->Hkv, .r0 = m->t_r0[t],
                               .mq = m->t_mq[t], .tile = g * f->tpg + t};
            int64_t jmin, jmax;
            tile_keys(f, &base, &jmin, &jmax);
            int64_t c = 0;
            for (; c < f->nchunks; c++) {
                if (f->split && c > 0 && c * f->chunk_keys >= jmax) break; /* and later ones */
                fused_item it = base;
                it.chunk = c;
                /* a chunk left of every row's window holds no key: an empty partial */
                it.jlo = TA_MAX(c * f->chunk_keys, jmin);
                it.jhi = TA_MIN(c * f->chunk_keys + f->chunk_keys, jmax);
                if (it.jhi < it.jlo) it.jhi = it.jlo;
                m->items[n++] = it;
            }
            if (f->split) m->t_nch[base.tile] = c;
        }
    }
    return n;
}

/* A work item's (m, l, O) rows into its slot of the partials (split). */
static void store_partial(const fused_plan *f, const fused_mem *m, const fused_item *it,
                          const fused_ws *w)
{
    const int64_t Dv = f->p->Dv, mu = f->mq_used;
    float *pt = m->parts + (it->tile * f->nchunks + it->chunk) * f->part_floats;
    memcpy(pt, w->m, sizeof(float) * (size_t)it->mq);
    memcpy(pt + mu, w->l, sizeof(float) * (size_t)it->mq);
    for (int64_t r = 0; r < it->mq; r++)
        memcpy(pt + 2 * mu + r * Dv, w->o + r * f->ldo, sizeof(float) * (size_t)Dv);
}

/* Every row of a split problem from its chunks' partials: the chunks that hold keys (a
 * chunk past a tile's last key would add an exact zero). */
static void merge_partials(const fused_plan *f, const fused_mem *m)
{
    const ta_sdpa_problem *p = f->p;
    const int64_t mu = f->mq_used;
#pragma omp parallel for num_threads(f->nt) schedule(static)
    for (int64_t t = 0; t < f->ntiles; t++) {
        int64_t g = t / f->tpg, tt = t % f->tpg;
        const float *ms[TA_FUSED_MAX_CHUNKS], *ls[TA_FUSED_MAX_CHUNKS], *os[TA_FUSED_MAX_CHUNKS];
        const int64_t nch = m->t_nch[t];
        for (int64_t r = 0; r < m->t_mq[tt]; r++) {
            for (int64_t c = 0; c < nch; c++) {
                const float *pt = m->parts + (t * f->nchunks + c) * f->part_floats;
                ms[c] = pt + r;
                ls[c] = pt + mu + r;
                os[c] = pt + 2 * mu + r * p->Dv;
            }
            finish_row(f, g / p->Hkv, g % p->Hkv, m->t_r0[tt] + r, ms, ls, os, nch);
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
        mask_bounds(&p->mask, m.mt, f.mrows, f.nt);
        f.mt = m.mt;
    }
    group_tiles(&f, m.t_r0, m.t_mq);
    const int64_t nitems = build_items(&f, &m);

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
                run_sweep(&f, its, f.sweep, ws);
                for (int64_t h = 0; h < f.sweep; h++) {
                    if (f.split) store_partial(&f, &m, &its[h], &ws[h]);
                    else finish_item(&f, &its[h], &ws[h]);
                }
            }
        } else {
#pragma omp for schedule(dynamic, grab)
            for (int64_t n = 0; n < nitems; n++) {
                const fused_item *it = &m.items[n];
                run_item(&f, it, &w);
                if (f.split) store_partial(&f, &m, it, &w);
                else finish_item(&f, it, &w);
            }
        }
    }
    if (f.split) merge_partials(&f, &m);
    return TA_OK;
}
