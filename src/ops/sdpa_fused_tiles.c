/* The steps of one work item of the fused SDPA forward: its key tiles, one online-softmax
 * step each (sdpa_forward_fused.c has the whole algorithm; sdpa_fused_internal.h what the
 * files share). The per-tile path (item_tile and all it calls) stays in this one file, so
 * that gcc inlines it.
 *
 * On tiles that a row bound cuts (the causal diagonal, a key length) the kernels get
 * each row's key count and skip the blocks no row of theirs needs.
 *
 * K and V may be paged (a KV cache's blocks, ta_sdpa_pages): a key tile then spans
 * blocks. A few-row tile (decode) reads them through a table of row pointers in one
 * kernel call (row_table); other tiles run their scores and P V block by block (the
 * kernels read each block's rows in place, at their stride), while the softmax step and
 * O's rescale stay once per tile: blocks of 16 keys cost about what one 64-key tile does. */
#include "ops/sdpa_fused_internal.h"

#include "core/core.h"
#include "core/dtype.h"
#include "kernels/kernels.h"
#include "ops/sdpa_fused_variants.h"

#include <math.h>
#include <string.h>

/* Q's row offsets (elements) of rows [r0, r1) of a tile into off: one row_hi for the
 * first, then step by step (a tile's rows run along one head, or on to the next). */
static void q_offsets(const fused_plan *f, const fused_item *it, int64_t r0, int64_t r1,
                      int64_t *off)
{
    const ta_tensor *Q = f->p->Q;
    int64_t h, i;
    row_hi(f, it->hkv, it->r0 + r0, &h, &i);
    for (int64_t r = r0; r < r1; r++, row_next(f, &h, &i))
        off[r - r0] = it->b * Q->stride[0] + h * Q->stride[1] + i * Q->stride[2];
}

/* Whether a tile has so few rows that attn_qk_rows computes its scores (a decode step:
 * one row, or the few query heads of a kv head); fixed by the shape alone, so every
 * thread count takes the same path. */
static inline bool few_rows(const fused_plan *f, const fused_item *it)
{
    return it->mq <= f->k->attn_rows_max;
}

/* Elements d0 .. d0 + n - 1 of Q's row at element offset qoff (Q bfloat16: qk_dot,
 * qk_dot_tile) into out. */
static void q_bf16_piece(const fused_plan *f, int64_t qoff, int64_t d0, int64_t n, uint16_t *out)
{
    const ta_tensor *Q = f->p->Q;
    const int64_t s3 = Q->stride[3];
    const uint16_t *q = (const uint16_t *)Q->data + qoff + d0 * s3;
    if (s3 == 1) memcpy(out, q, sizeof(uint16_t) * (size_t)n);
    else
        for (int64_t d = 0; d < n; d++) out[d] = q[d * s3];
}

/* Q rows of the tile, scaled: into qp [D, mq_max] (rows past mq are zero) for attn_qk,
 * or, for a tile of few rows, untransposed into qp [mq, D] for attn_qk_rows; for the
 * bfloat16 dot product's kernels (a bfloat16 Q) as bfloat16, not scaled. A half Q's rows
 * are widened first (exact; into w->qrows for attn_pack_t): the products of a float32 Q
 * of the same values. */
static void pack_q(const fused_plan *f, const fused_item *it, const fused_ws *w)
{
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *Q = p->Q;
    float *qp = w->qp;
    int64_t *qoff = w->qoff;
    const float *q = (const float *)Q->data; /* when float32 */
    const int64_t D = p->D, s3 = Q->stride[3], qes = (int64_t)ta_elem_size(Q->dtype);
    const bool half = Q->dtype != TA_F32;
    q_offsets(f, it, 0, it->mq, qoff);
    *w->q_dot = few_rows(f, it) ? f->qk_dot : f->qk_dot_tile;
    if (*w->q_dot) { /* only where the dot product gives float32's scores (sdpa.h) */
        uint16_t most = 0, sub = 0;
        for (int64_t r = 0; r < it->mq; r++)
            ta_bf16_scan((const uint16_t *)Q->data + qoff[r], D, s3, &most, &sub);
        *w->q_dot = ta_bf16_dot_fits(most, sub, D, p->scale);
    }
    if (!few_rows(f, it) && *w->q_dot) { /* pairs (attn_qk_bf16dot) */
        uint32_t *qb = (uint32_t *)(void *)qp; /* pair p / 2 of row r at [p / 2][r] */
        const int64_t M = f->mq_max;
        uint16_t row[256]; /* a row's piece of up to 256 elements (D is even) */
        for (int64_t r = 0; r < M; r++)
            for (int64_t d0 = 0; d0 < D; d0 += 256) {
                const int64_t n = TA_MIN(D - d0, 256);
                if (r < it->mq) q_bf16_piece(f, qoff[r], d0, n, row);
                else memset(row, 0, sizeof(uint16_t) * (size_t)n);
                for (int64_t p2 = 0; p2 < n / 2; p2++) {
                    uint32_t pair;
                    memcpy(&pair, row + 2 * p2, sizeof pair);
                    qb[(d0 / 2 + p2) * M + r] = pair;
                }
            }
        return;
    }
    if (*w->q_dot) { /* rows (attn_qk_rows_bf16dot) */
        uint16_t *qb = (uint16_t *)(void *)qp;
        for (int64_t r = 0; r < it->mq; r++) q_bf16_piece(f, qoff[r], 0, D, qb + r * D);
        return;
    }
    if (!few_rows(f, it)) {
        if (half) {
            for (int64_t r = 0; r < it->mq; r++) {
                ta_k_row_to_f32(f->k, w->qrows + r * D, (const char *)Q->data + qoff[r] * qes,
                                Q->dtype, D, s3);
                w->qroff[r] = r * D;
            }
            f->k->attn_pack_t(qp, f->mq_max, w->qrows, w->qroff, 1, it->mq, D, p->scale);
        } else {
            f->k->attn_pack_t(qp, f->mq_max, q, qoff, s3, it->mq, D, p->scale);
        }
        return;
    }
    for (int64_t r = 0; r < it->mq; r++) {
        if (half) { /* widened in place, then scaled */
            ta_k_row_to_f32(f->k, qp + r * D, (const char *)Q->data + qoff[r] * qes, Q->dtype, D, s3);
            for (int64_t d = 0; d < D; d++) qp[r * D + d] *= p->scale;
        } else {
            for (int64_t d = 0; d < D; d++) qp[r * D + d] = q[qoff[r] + d * s3] * p->scale;
        }
    }
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
           ta_elem_size(t->dtype) * (size_t)ta_sdpa_kv_offset(f->p, value, it->b, it->hkv, j0);
}

/* Whether K's (value false) or V's key rows follow each other in memory, unpaged: a
 * head's keys are one stream, which the hardware prefetcher follows. */
static inline bool rows_stream(const ta_sdpa_problem *p, bool value)
{
    const ta_tensor *t = value ? p->V : p->K;
    return !p->pages.table && t->stride[2] == (value ? p->Dv : p->D);
}

/* The table of K's (value false) or V's rows for keys j0 .. j0 + nk - 1 of the item's
 * group, in rows (the tile's keys + TA_ROWS_AHEAD entries), then the next keys of the item
 * for the kernels to prefetch (up to TA_ROWS_AHEAD), except when the rows follow each
 * other in memory (a head's keys one stream: the hardware prefetcher follows it, and
 * software prefetches on top cost bandwidth, docs/kernels.md "Decode: streaming K and
 * V"). Returns the entries (the kernels' avail). */
static int64_t row_table(const fused_plan *f, const fused_item *it, bool value, int64_t j0,
                         int64_t nk, const void **rows, bool ahead)
{
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *t = value ? p->V : p->K;
    const bool stream = rows_stream(p, value);
    const int64_t n = stream || !ahead ? nk : TA_MIN(nk + TA_ROWS_AHEAD, it->jhi - j0);
    const size_t es = ta_elem_size(t->dtype);
    const char *base = (const char *)t->data;
    const int64_t ld = (int64_t)es * t->stride[2];
    /* one run (a block of a paged cache, or all n rows) at a time: one lookup of the
     * block (a division) per run, not per row */
    for (int64_t j = 0; j < n;) {
        const int64_t run = TA_MIN(ta_sdpa_kv_run(p, j0 + j), n - j);
        const char *r = base + es * (size_t)ta_sdpa_kv_offset(p, value, it->b, it->hkv, j0 + j);
        for (int64_t i = 0; i < run; i++) rows[j + i] = r + i * ld;
        j += run;
    }
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
static int64_t kv_ld(const ta_tensor *t) { return (int64_t)ta_elem_size(t->dtype) * t->stride[2]; }

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
    for (int64_t j = 0; j < nk; j++)
        ta_k_row_to_f32(f->k, buf + j * cols, src + j * rs, t->dtype, cols, t->stride[3]);
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
 * mask tensor's that the table turned into bounds) block keys of the tile; rowk: the
 * tile's per-row key counts (tile_begin), NULL when no row bound cuts it. */
static void mask_tile(const fused_plan *f, const fused_item *it, float *s, int64_t j0,
                      int64_t nk, bool use_mask, const int32_t *rowk)
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
    /* the bound of each row: key t of the tile blocked where t >= rowk[r] (end[r] - j0
     * in [0, nk], or 0 for a row whose window starts past the tile, all of whose keys the
     * window blocks anyway), column by column, which vectorises (row by row stored one
     * score per line); without rowk every row sees the whole tile */
    if (!rowk) return;
    const int mq = (int)it->mq;
    for (int32_t t = 0; t < (int32_t)nk; t++) {
        float *col = s + t * MQ;
        for (int r = 0; r < mq; r++) col[r] = t >= rowk[r] ? -INFINITY : col[r];
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
 * Into L2, not L1: the L1 miss buffers are the demand loads' (docs/kernels.md). Rows
 * that follow each other (a head's keys one stream: [B, Hkv, L, D]) are left to the
 * hardware prefetcher, as row_table leaves them: on the two-port Xeon, 1 thread,
 * B1 H32 Lk4096 D128 float32 [B, H, L, D], the burst on top took 12.5 against 11.4 ms
 * (2 threads 6.2 against 5.7; five alternations, medians). Inlined by force: gcc finds
 * a function that only prefetches free of side effects and deletes the calls. */
static inline __attribute__((always_inline)) void prefetch_run(const fused_plan *f, const fused_item *it, bool value, int64_t j)
{
    const ta_sdpa_problem *p = f->p;
    const ta_tensor *t = value ? p->V : p->K;
    if (!few_rows(f, it) || j >= it->jhi || t->stride[3] != 1) return;
    if (rows_stream(p, value)) return;
    const int64_t es = (int64_t)ta_elem_size(t->dtype), bytes = (value ? p->Dv : p->D) * es;
    const int64_t n = TA_MIN(TA_MIN(ta_sdpa_kv_run(p, j), it->jhi - j), TA_FUSED_PREFETCH_ROWS);
    const char *row = (const char *)t->data + es * ta_sdpa_kv_offset(p, value, it->b, it->hkv, j);
    for (int64_t r = 0; r < n; r++, row += es * t->stride[2])
        for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch(row + c, 0, 2);
}

/* Appends to a thread's prefetch stream rows [0, rows) of `bytes` bytes each at base +
 * r * ld bytes (ta_pf_add_rows, as many as it holds). */
static void pf_rows(fused_pf *s, const void *base, int64_t ld, int64_t bytes, int64_t rows)
{
    ta_pf_add_rows(s->spans, &s->n, TA_FUSED_PF_SPANS, base, ld, bytes, rows);
}

/* The rows [j, j + n) of K (value false) or V of the item's group that lie in one run
 * from j (a paged cache's block), into the stream, when its rows are unit-stride along D. */
static void pf_kv_rows(fused_pf *s, const fused_plan *f, const fused_item *it, bool value,
                       int64_t j, int64_t n)
{
    const ta_tensor *t = value ? f->p->V : f->p->K;
    if (t->stride[3] != 1 || n <= 0) return;
    n = TA_MIN(n, ta_sdpa_kv_run(f->p, j));
    const int64_t bytes = (value ? f->p->Dv : f->p->D) * (int64_t)ta_elem_size(t->dtype);
    pf_rows(s, kv_rows(f, it, value, j), kv_ld(t), bytes, n);
}

/* The keys of item a's tile that starts at key j (tile_begin's rule, save that a mask
 * tensor or a window's left edge may end it sooner): what the stream requests of a tile
 * before it starts. */
static int64_t tile_keys_from(const fused_item *a, int64_t j)
{
    const int64_t n = a->jhi - j;
    return n <= TA_FUSED_NK_LAST ? n : TA_FUSED_NK;
}

/* Appends the next group's rows from the cursor on (fused_pf.ahead). */
static void ahead_add(fused_pf *s)
{
    s->ahead_first = -1;
    if (!s->ahead_on || s->ahead_at >= s->ahead_total) return;
    int64_t start = 0;
    for (int k = 0; k < AHEAD_RANGES; start += s->ahead_len[k++]) {
        const int64_t from = TA_MAX(s->ahead_at - start, 0);
        if (from >= s->ahead_len[k] || s->n >= TA_FUSED_PF_SPANS) continue;
        if (s->ahead_first < 0) s->ahead_first = s->n;
        const int64_t i = s->n - s->ahead_first;
        s->ahead_off[i] = start + from;
        s->ahead_a[i] = s->ahead_base[k] + from;
        s->spans[s->n++] = (ta_pf_span){s->ahead_a[i], s->ahead_base[k] + s->ahead_len[k]};
    }
}

/* After a kernel call: how far its steps took the stream into the ahead spans. */
static void ahead_sync(fused_pf *s)
{
    if (s->ahead_first < 0) return;
    const int64_t k = s->pf.next - s->spans;
    if (k >= s->n) {
        const int64_t i = s->n - 1 - s->ahead_first;
        s->ahead_at = s->ahead_off[i] + (s->spans[s->n - 1].b - s->ahead_a[i]);
    } else if (k >= s->ahead_first) {
        const int64_t i = k - s->ahead_first;
        s->ahead_at = s->ahead_off[i] + (s->spans[k].a - s->ahead_a[i]);
    }
    s->ahead_first = -1;
}

/* The stream, once filled, as the kernels take it. */
static ta_pf *pf_ready(fused_pf *s)
{
    ahead_add(s);
    s->pf = (ta_pf){s->spans, s->spans + s->n};
    return &s->pf;
}

/* The memory that the rows of keys [j, je) of batch b for all n heads of a sweep from its
 * first read, in K then in V: a span per run of keys (a paged cache's block) from the
 * first head's row to the end of the last head's, in address order (at most
 * TA_FUSED_REGION_SPANS; returns their count). */
static int64_t region_spans(const fused_plan *f, const fused_item *first, int64_t n, int64_t j,
                            int64_t je, ta_pf_span *out)
{
    const ta_sdpa_problem *p = f->p;
    fused_item last = *first;
    last.hkv = first->hkv + n - 1;
    int64_t m = 0;
    for (int value = 0; value < 2; value++) {
        const ta_tensor *t = value ? p->V : p->K;
        const int64_t bytes = (value ? p->Dv : p->D) * (int64_t)ta_elem_size(t->dtype);
        for (int64_t a = j, run; a < je && m < TA_FUSED_REGION_SPANS; a += run) {
            run = TA_MIN(ta_sdpa_kv_run(p, a), je - a);
            const char *lo = kv_rows(f, first, value, a), *hi = kv_rows(f, &last, value, a);
            const int64_t ld = kv_ld(t);
            if (hi < lo || ld < 0) continue; /* not a cache whose rows hold the heads in order */
            out[m++] = (ta_pf_span){lo, hi + (run - 1) * ld + bytes};
        }
    }
    return m;
}

/* A sweep's region (fused_pf): region_spans of its next tile, keys [j, je). line_key: the
 * lines a call requests per key it reads, so that the calls of a tile (its scores, then
 * its P.V, keys alike) request the whole region. */
static void sweep_region(const fused_plan *f, fused_pf *s, const fused_item *first, int64_t n,
                         int64_t j, int64_t je)
{
    s->rn = region_spans(f, first, n, j, je, s->region);
    s->ri = 0;
    int64_t lines = 0;
    for (int64_t i = 0; i < s->rn; i++) lines += (s->region[i].b - s->region[i].a + 63) / 64;
    s->ra = s->rn ? s->region[0].a : NULL;
    s->line_key = (lines + 2 * n * (je - j) - 1) / TA_MAX(2 * n * (je - j), 1);
}

/* The pages of the tile after a sweep's region, keys [j, je): one line of each 4 KiB
 * page requested now, a tile before the region's requests reach the page line by line (a
 * float32 tile of 64 keys at Hkv 8, D 128 spans 128 pages, a key's rows of all heads
 * each): 128 requests a tile where the region makes 8192. What the region's first
 * request of a page waited for is presumably its translation (this VM shows no TLB
 * counters). On the Zen 4, 1 thread, float32 32k keys from memory: 0.77 - 0.82 -> 0.85 -
 * 0.92 of the plain read on 4 KiB pages (a caller's malloc), 0.74 - 0.76 -> 0.79 - 0.82
 * on the huge pages ta_tensor_empty asks for; half caches 3 - 8% faster on 4 KiB pages,
 * within the noise on huge ones (docs/kernels.md, "A sweep's pages a tile ahead"). Not on
 * Intel, where they cost (kernels.h, ta_sweep_pages). */
static void sweep_pages(const fused_plan *f, const fused_item *first, int64_t n, int64_t j,
                        int64_t je)
{
    ta_pf_span sp[TA_FUSED_REGION_SPANS];
    const int64_t m = region_spans(f, first, n, j, je, sp);
    for (int64_t i = 0; i < m; i++)
        for (uintptr_t x = (uintptr_t)sp[i].a; x < (uintptr_t)sp[i].b; x = (x | 4095) + 1)
            __builtin_prefetch((const void *)x, 0, 1);
}

/* The next `lines` lines of the sweep's region, as the stream of one kernel call. */
static ta_pf *pf_take(fused_pf *s, int64_t lines)
{
    s->n = 0;
    while (lines > 0 && s->ri < s->rn && s->n < TA_FUSED_PF_SPANS) {
        const char *b = s->region[s->ri].b;
        const int64_t take = TA_MIN(lines * 64, (int64_t)(b - s->ra));
        s->spans[s->n++] = (ta_pf_span){s->ra, s->ra + take};
        lines -= (take + 63) / 64;
        s->ra += take;
        if (s->ra >= b && ++s->ri < s->rn) s->ra = s->region[s->ri].a;
    }
    return pf_ready(s);
}

/* The prefetch stream attn_qk advances over a run of a tile of many rows: the V rows of
 * the same keys, which attn_pv reads next (a group's first query tile reads them from
 * memory). */
static ta_pf *stream_scores(const fused_plan *f, const fused_item *it, const fused_ws *w,
                            int64_t j, int64_t n)
{
    fused_pf *s = w->pfs;
    s->n = 0;
    if (s->kv) pf_kv_rows(s, f, it, true, j, n);
    return pf_ready(s);
}

/* The stream attn_pv advances over the last run of a tile of many rows that ends at key
 * j: the item's next K tile, then the next item's share of Q rows (rows r .. r + share
 * within one head; its O rows too when pfs->o, which the finish then writes without
 * waiting on them), and, after the item's last tile, the next item's first K tile when
 * that item starts another group. */
static ta_pf *stream_pv(const fused_plan *f, const fused_item *it, const fused_ws *w, int64_t j)
{
    const ta_sdpa_problem *p = f->p;
    fused_pf *s = w->pfs;
    s->n = 0;
    if (s->kv && j < it->jhi) pf_kv_rows(s, f, it, false, j, tile_keys_from(it, j));
    const fused_item *nx = s->next;
    if (nx && s->r < nx->mq) {
        int64_t h, i;
        row_hi(f, nx->hkv, nx->r0 + s->r, &h, &i);
        /* a share a tile, and what is left with the item's last (the shares count on
         * one tile more than the item may have: the causal diagonal's) */
        const int64_t want = j >= it->jhi ? nx->mq - s->r : TA_MIN(s->share, nx->mq - s->r);
        const int64_t n = TA_MIN(want, p->Lq - i); /* one head */
        const int64_t qes = (int64_t)ta_elem_size(p->Q->dtype);
        pf_rows(s, q_row(p, nx->b, h, i), p->Q->stride[2] * qes, p->D * qes, n);
        if (s->o) {
            const int64_t oes = (int64_t)ta_elem_size(p->O->dtype);
            pf_rows(s, o_row(p, nx->b, h, i), p->O->stride[2] * oes, p->Dv * oes, n);
        }
        s->r += n;
    }
    if (nx && j >= it->jhi && (nx->b != it->b || nx->hkv != it->hkv)) /* its group's first */
        pf_kv_rows(s, f, nx, false, nx->jlo, tile_keys_from(nx, nx->jlo));
    return pf_ready(s);
}

/* The row tables of a tile that the few-row kernels read in place: K's (kn entries, the
 * kernels' avail) and, when V's rows are read in place too, V's (vn entries, else -1),
 * each entry read koff (voff) bytes past where it points. */
typedef struct tile_tab {
    const void *const *k, *const *v;
    int64_t kn, vn, koff, voff;
} tile_tab;

/* The distance in bytes from group (b, hkv0)'s rows of K (value false) or V to (b, hkv)'s,
 * the same for every key (ta_sdpa_kv_offset: hkv enters through stride[1] alone). */
static int64_t head_off(const ta_sdpa_problem *p, bool value, int64_t hkv, int64_t hkv0)
{
    const ta_tensor *t = value ? p->V : p->K;
    return (hkv - hkv0) * t->stride[1] * (int64_t)ta_elem_size(t->dtype);
}

/* The tables of keys [j0, j0 + nk) for a tile whose K rows the few-row kernels read in
 * place (typed_rows): K's in w->krows and, when V's rows are read in place too, V's in
 * w->vrows. In a sweep the first head of the tile fills them and the others read them at
 * their offsets (fused_pf: one table a tile instead of one a head, which took 3 - 5% of
 * a bfloat16 decode step from L3). */
static tile_tab tile_tables(const fused_plan *f, const fused_item *it, const fused_ws *w,
                            int64_t j0, int64_t nk)
{
    fused_pf *s = w->pfs;
    const bool tv = typed_rows(f, it, true);
    if (s->sweep && s->tab_j0 == j0 && s->tab_nk == nk && s->tab_b == it->b &&
        (s->tab_vn >= 0) == tv)
        return (tile_tab){s->tab_k, s->tab_v, s->tab_kn, s->tab_vn,
                          head_off(f->p, false, it->hkv, s->tab_hkv),
                          head_off(f->p, true, it->hkv, s->tab_hkv)};
    const bool ahead = !s->sweep; /* a sweep requests its region instead */
    tile_tab t = {w->krows, w->vrows, 0, -1, 0, 0};
    t.kn = row_table(f, it, false, j0, nk, w->krows, ahead);
    if (tv) t.vn = row_table(f, it, true, j0, nk, w->vrows, ahead);
    if (t.kn == nk && ahead) prefetch_run(f, it, false, j0 + nk); /* a stream: the next tile */
    if (s->sweep) {
        s->tab_k = w->krows;
        s->tab_v = w->vrows;
        s->tab_j0 = j0;
        s->tab_nk = nk;
        s->tab_b = it->b;
        s->tab_hkv = it->hkv;
        s->tab_kn = t.kn;
        s->tab_vn = t.vn;
    }
    return t;
}

/* The scores of keys [j0, j0 + nk), s = (scale Q) K^T, run by run into the tile's
 * columns: a paged cache's tile spans blocks (its softmax and rescale stay per tile).
 * ss: the tile's row stride (score_ld). *tab: the tables the kernels read, whose V table
 * (vn >= 0) tile_pv then takes; vn = -1 when none. */
static void tile_scores(const fused_plan *f, const fused_item *it, const fused_ws *w,
                        int64_t j0, int64_t nk, const int32_t *rowk, int64_t ss, tile_tab *tab)
{
    const ta_sdpa_problem *p = f->p;
    tab->vn = -1;
    if (typed_rows(f, it, false)) { /* K rows in place, through a table (any run) */
        *tab = tile_tables(f, it, w, j0, nk);
        fused_pf *s = w->pfs; /* V's rows prefetched with K's when V has a table */
        const void *const *vt = tab->vn >= 0 ? tab->v : NULL;
        const int64_t vbytes = p->Dv * (int64_t)ta_elem_size(p->V->dtype);
        ta_pf *pf = s->sweep ? pf_take(s, nk * s->line_key) : NULL;
        if (*w->q_dot)
            f->k->attn_qk_rows_bf16dot(w->s, ss, (const uint16_t *)(const void *)w->qp, p->D,
                                       it->mq, p->scale, tab->k, tab->koff, nk, p->D, tab->kn,
                                       vt, tab->voff, vbytes, pf);
        else
            f->k->attn_qk_rows_kv[f->kind_k](w->s, ss, w->qp, p->D, it->mq, tab->k, tab->koff,
                                             nk, p->D, tab->kn, vt, tab->voff, vbytes, pf);
        return;
    }
    int64_t n, ld;
    for (int64_t a = 0; a < nk; a += n) {
        const int64_t run = ta_sdpa_kv_run(p, j0 + a);
        n = TA_MIN(nk - a, run);
        float *s = w->s + a * f->mq_max;
        if (*w->q_dot && !few_rows(f, it)) { /* bfloat16 rows in place, no widening */
            prefetch_run(f, it, false, j0 + a + n);
            f->k->attn_qk_bf16dot(s, (const uint16_t *)(const void *)w->qp,
                                  (const uint16_t *)(const void *)kv_rows(f, it, false, j0 + a),
                                  p->K->stride[2], n, p->D, p->scale,
                                  run_rowk(f, w, rowk, nk, a, n),
                                  stream_scores(f, it, w, j0 + a, n));
            ahead_sync(w->pfs);
            continue;
        }
        const float *kt = kv_tile(f, it, false, j0 + a, n, w->kp, &ld);
        prefetch_run(f, it, false, j0 + a + n);
        if (few_rows(f, it))
            f->k->attn_qk_rows(s, w->qp, p->D, it->mq, kt, ld, n, p->D);
        else
            f->k->attn_qk(s, w->qp, kt, ld, n, p->D, run_rowk(f, w, rowk, nk, a, n),
                          stream_scores(f, it, w, j0 + a, n));
        ahead_sync(w->pfs);
    }
}

/* O = O alpha + P V over keys [j0, j0 + nk), run by run: alpha rescales O once, with the
 * first run (the others scale by ones). (Gathering a tile's V rows from its blocks
 * instead, for one attn_pv call, cost prefill more than the kernel's extra passes over O
 * did: docs/inference.md.) */
static void tile_pv(const fused_plan *f, const fused_item *it, const fused_ws *w, int64_t j0,
                    int64_t nk, const int32_t *rowk, const tile_tab *tab, int64_t ss)
{
    const ta_sdpa_problem *p = f->p;
    if (typed_rows(f, it, true)) { /* V rows in place, through a table (any run) */
        ta_fused_o_ready(f, it, w); /* attn_pv_rows_kv always reads o */
        int64_t keys = rowk ? 0 : nk; /* keys past every row's need hold p = 0: skip */
        for (int64_t r = 0; rowk && r < it->mq; r++) keys = TA_MAX(keys, (int64_t)rowk[r]);
        /* V's table as tile_scores left it, else filled here */
        fused_pf *s = w->pfs;
        const void *const *vt = tab->v;
        int64_t avail = tab->vn, voff = tab->voff;
        if (avail < 0) {
            vt = w->vrows;
            voff = 0;
            avail = row_table(f, it, true, j0, nk, w->vrows, !s->sweep);
        }
        if (avail == nk && !s->sweep) prefetch_run(f, it, true, j0 + nk);
        f->k->attn_pv_rows_kv[f->kind_v](w->o, f->ldo, w->s, ss, w->alpha, vt, voff,
                                         keys, p->Dv, it->mq, avail,
                                         s->sweep ? pf_take(s, nk * s->line_key) : NULL);
        return;
    }
    int64_t n, ld;
    for (int64_t a = 0; a < nk; a += n) {
        const int64_t run = ta_sdpa_kv_run(p, j0 + a);
        n = TA_MIN(nk - a, run);
        const float *vt = kv_tile(f, it, true, j0 + a, n, w->vp, &ld);
        prefetch_run(f, it, true, j0 + a + n);
        /* the item's first P.V writes o without reading it (alpha NULL) */
        const float *alpha = a ? w->ones : *w->o_live ? w->alpha : NULL;
        f->k->attn_pv(w->o, f->ldo, w->s + a * f->mq_max, alpha, vt, ld, n, p->Dv, it->mq,
                      run_rowk(f, w, rowk, nk, a, n),
                      a + n == nk && !few_rows(f, it) ? stream_pv(f, it, w, j0 + nk) : NULL);
        ahead_sync(w->pfs);
        *w->o_live = 1;
    }
}

/* What the tiles of a work item share (item_begin): the smallest row bound (key tiles
 * below it need no mask unless a tensor exists that the bounds do not fully describe),
 * a window's largest first key (tiles from it on have no key left of any row's window),
 * and where the tiles the bounds cut start. */
typedef struct item_run {
    int64_t clean_end, clean_lo, cut_start, left_end;
    bool use_mask;
} item_run;

/* Starts the online softmax of one work item (m = -inf, l = 0, O not yet written: the
 * first P.V writes it, or ta_fused_o_ready zeroes it; Q packed, the rows' bounds); false
 * when it has no key. */
static bool item_begin(const fused_plan *f, const fused_item *it, const fused_ws *w,
                       item_run *ir)
{
    const ta_sdpa_problem *p = f->p;
    for (int64_t r = 0; r < f->mq_max; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    /* O rows are not zeroed here (the first P.V overwrites them): with the per-item
     * memset gone the L128 causal case went from 68.8 to 66.3 ms (Zen 5, 1 thread, driver) */
    *w->o_live = 0;
    for (int64_t r = it->mq; r < f->mq_max; r++) w->rowk[r] = 0; /* item_tile sets rows < mq */
    if (it->jhi <= it->jlo) return false;
    pack_q(f, it, w);
    const ta_sdpa_variants *v = &p->var;
    int64_t clean_end = p->Lk, clean_lo = 0;
    bool exact_all = true;
    int64_t h, i;
    row_hi(f, it->hkv, it->r0, &h, &i);
    if (!f->mt && !v->window && !f->scores_var && i + it->mq <= p->Lq) {
        /* rows of one head whose bounds are ta_mask_row_end's alone (no mask table, no
         * window): the loop below without its per-row calls (1 - 2% of the B512 H8 L128
         * D64 cases, one driver alternating, on a loud host) */
        const ta_mask_plan *mp = &p->mask;
        for (int64_t r = 0; r < it->mq; r++) {
            const int64_t e = ta_mask_row_end(mp, it->b, i + r);
            w->end[r] = e;
            w->lo[r] = 0;
            clean_end = TA_MIN(clean_end, e);
        }
        exact_all = !mp->mask;
    } else {
        for (int64_t r = 0; r < it->mq; r++, row_next(f, &h, &i)) {
            bool exact;
            w->end[r] = ta_fused_row_keys(f, it->b, h, i, &w->lo[r], &exact);
            exact_all &= exact;
            if (w->end[r] < clean_end) clean_end = w->end[r];
            if (w->lo[r] > clean_lo) clean_lo = w->lo[r];
            if (f->scores_var) { /* ta_sdpa_fused_scores' per-row inputs */
                w->slope[r] = ta_sdpa_alibi_slope(v, it->b, h);
                w->pos[r] = (float)(i + v->delta);
            }
        }
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

/* The row stride of a tile's scores: packed, 1, 2, 4 or 8 rows a key (attn_softmax_rows
 * then works in place, with no copy out and back), for a tile of few rows whose K and V
 * rows the typed kernels read in place with nothing between Q.K^T and P.V but the
 * softmax step (no mask tensor, no row bound cutting it, no window or score variant: a
 * decode step); the kernels' attn_mq otherwise, which the masks and variants index by. */
static int64_t score_ld(const fused_plan *f, const fused_item *it, const item_run *ir,
                        int64_t j0, int64_t nk)
{
    if (!typed_rows(f, it, false) || !typed_rows(f, it, true) || f->scores_var ||
        ir->use_mask || f->p->var.window || j0 + nk > ir->clean_end || j0 < ir->clean_lo)
        return f->mq_max;
    return it->mq <= 1 ? 1 : it->mq <= 2 ? 2 : it->mq <= 4 ? 4 : it->mq <= 8 ? 8 : f->mq_max;
}

/* The start of an online-softmax step of a work item: the key tile from j0 (at most
 * TA_FUSED_NK keys, ending where item_begin's bounds say, or the item's last keys up to
 * TA_FUSED_NK_LAST; returns its key count), each
 * row's key count when a row bound cuts it (*rowk, else NULL), and whether a mask tensor
 * blocks all of it (*skip: the tile adds nothing). */
static int64_t tile_begin(const fused_plan *f, const fused_item *it, const fused_ws *w,
                          const item_run *ir, int64_t j0, const int32_t **rowk, bool *skip)
{
    const int64_t MQ = f->mq_max;
    const int64_t stop = j0 < ir->left_end && ir->left_end < ir->cut_start ? ir->left_end
                         : j0 < ir->cut_start                              ? ir->cut_start
                                                                           : it->jhi;
    /* The item's last keys, up to TA_FUSED_NK_LAST, as one tile, the causal diagonal's
     * with the full keys before it (an L = 128 head's rows 96 - 127 saw tiles of 64, 32
     * and 32 keys: each an online-softmax step, a pass over its o rows and a P.V
     * epilogue): unless a mask tensor is read (its tiles skip when all blocked), a
     * window's left edge cuts the keys from j0 on, or the tile has few rows (a decode's
     * tiles keep to its sweep's steps). Causal B32 H8 L128 D64, in L3, 1 thread: 146 ->
     * 155 GFLOP/s (session 26, docs/performance.md). A few-row tile outside a sweep
     * takes f->few_keys (TA_FUSED_NK_STREAM where the few-row kernels read K's and V's
     * rows in place). */
    const bool few = few_rows(f, it);
    const int64_t nk = !ir->use_mask && j0 >= ir->clean_lo && !few &&
                               it->jhi - j0 <= TA_FUSED_NK_LAST
                           ? it->jhi - j0
                           : TA_MIN(few && !w->pfs->sweep ? f->few_keys : TA_FUSED_NK, stop - j0);
    *rowk = NULL;
    *skip = ir->use_mask && tile_blocked(f, it, w, j0, nk);
    if (*skip) return nk;
    /* A tile that a row bound cuts (the causal diagonal, a key length, a window): each
     * row's key count lets the kernels skip the blocks no row of theirs needs (none,
     * for a row whose window starts past the tile). */
    const bool left_cut = j0 < ir->clean_lo, cut = j0 + nk > ir->clean_end || left_cut;
    if (cut || it->mq < MQ) { /* a short tile (decode) skips its empty vectors too */
        for (int64_t r = 0; r < it->mq; r++) { /* rows mq .. MQ - 1: 0 from item_begin */
            int64_t e = cut ? w->end[r] - j0 : nk;
            if (w->lo[r] >= TA_MIN(w->end[r], j0 + nk)) e = 0;
            w->rowk[r] = (int32_t)(e < 0 ? 0 : e > nk ? nk : e);
        }
        *rowk = w->rowk;
    }
    return nk;
}

/* The rest of the step once w->s holds the tile's scores: the score variants, the masks,
 * the softmax step and P.V (tab: as tile_scores left it; ss: score_ld's stride). */
static void tile_end(const fused_plan *f, const fused_item *it, const fused_ws *w,
                     const item_run *ir, int64_t j0, int64_t nk, const int32_t *rowk,
                     const tile_tab *tab, int64_t ss)
{
    const ta_sdpa_problem *p = f->p;
    const ta_kernels *k = f->k;
    const ta_sdpa_variants *v = &p->var;
    const int64_t MQ = f->mq_max;
    const bool left_cut = j0 < ir->clean_lo;
    const bool few = few_rows(f, it);
    if (f->scores_var) ta_sdpa_fused_scores(k, v, w->s, MQ, it->mq, j0, nk, w->slope, w->pos);
    /* the row bounds alone: attn_softmax blocks the keys past each row's count itself */
    if (ir->use_mask || (few && j0 + nk > ir->clean_end))
        mask_tile(f, it, w->s, j0, nk, ir->use_mask, rowk);
    if (v->window && (left_cut || ir->use_mask))
        ta_sdpa_fused_window_mask(w->s, MQ, it->mq, j0, nk, w->lo, w->end);
    if (few) k->attn_softmax_rows(w->s, ss, w->m, w->l, w->alpha, nk, it->mq);
    else k->attn_softmax(w->s, w->m, w->l, w->alpha, nk, it->mq, rowk);
    if (p->Dv > 0) tile_pv(f, it, w, j0, nk, rowk, tab, ss);
}

/* One online-softmax step of a work item: the key tile from j0; returns its key count. */
static int64_t item_tile(const fused_plan *f, const fused_item *it, const fused_ws *w,
                         const item_run *ir, int64_t j0)
{
    const int32_t *rowk;
    bool skip;
    const int64_t nk = tile_begin(f, it, w, ir, j0, &rowk, &skip);
    if (skip) return nk;
    const int64_t ss = score_ld(f, it, ir, j0, nk);
    tile_tab tab;
    tile_scores(f, it, w, j0, nk, rowk, ss, &tab);
    tile_end(f, it, w, ir, j0, nk, rowk, &tab, ss);
    return nk;
}

/* Whether the item requests the next group's first rows (fused_pf.ahead): a later item
 * of its group, when the thread's next group is known; the ranges set up on the first
 * such item. */
static void ahead_begin(const fused_plan *f, fused_pf *s)
{
    const fused_item *a = s->ahead_item;
    s->ahead_on = f->ahead && !s->kv && a && a->jhi > a->jlo;
    s->ahead_first = -1;
    if (!s->ahead_on || s->ahead == a) return;
    const ta_sdpa_problem *p = f->p;
    const int64_t nk = tile_keys_from(a, a->jlo);
    s->ahead = a;
    s->ahead_base[0] = kv_rows(f, a, false, a->jlo);
    s->ahead_len[0] = nk * p->D * (int64_t)sizeof(float);
    int64_t h, i;
    row_hi(f, a->hkv, a->r0, &h, &i);
    s->ahead_base[1] = (const char *)q_row(p, a->b, h, i);
    s->ahead_len[1] = TA_MIN(a->mq, p->Lq - i) * p->D * (int64_t)sizeof(float);
    s->ahead_base[2] = kv_rows(f, a, true, a->jlo);
    s->ahead_len[2] = nk * p->Dv * (int64_t)sizeof(float);
    s->ahead_at = 0;
    s->ahead_total = 0;
    for (int k = 0; k < AHEAD_RANGES; k++) s->ahead_total += s->ahead_len[k];
}

void ta_fused_run_item(const fused_plan *f, const fused_item *it, const fused_ws *w,
                       const fused_item *next)
{
    item_run ir;
    if (!item_begin(f, it, w, &ir)) return;
    /* The next item's Q rows (unit-stride along D only), and its O rows unless O is
     * streamed (non-temporal stores need no line): a share after each key tile, through
     * the kernels' prefetch stream (stream_pv), whether the rows follow each other or lie
     * apart (a [B, L, H, Dv] O, varlen's packed one: a span a row). Measured on the Zen 5,
     * 1 thread, the seed's causal case (driver, medians of 11 alternations, when they
     * were a burst of prefetches per tile): 160 -> 167 GFLOP/s; non-causal 191 -> 195.
     * O rows that lie apart were requested for writing, all of an item's at its start,
     * until session 22: the stream instead, on the two-port Xeon ([B, L, H, D] tensors,
     * driver, medians of 15 - 21 alternations): causal B4 H8 L1024 D64 24.04 -> 23.42 ms
     * on 1 thread, 11.87 -> 11.76 on 2; B64 H8 L128 D64 7.12 -> 6.48 (2 threads); B2
     * H16 L2048 D128 171.1 -> 169.4 (2 threads). */
    if (next && (few_rows(f, next) || next->jhi <= next->jlo || f->p->Q->stride[3] != 1))
        next = NULL;
    const int64_t tiles = (it->jhi - it->jlo + TA_FUSED_NK - 1) / TA_FUSED_NK + 1;
    fused_pf *s = w->pfs;
    s->next = next;
    s->r = 0;
    s->share = next ? (next->mq + tiles - 1) / tiles : 0;
    s->o = !f->stream_o;
    /* K and V rows on the thread's first item of a group: the next ones find them in its
     * L2, unless they are too many to stay there (plan_kv_far; on the Zen 5, whose
     * stream goes into L1, the requests cost the sdpa_L4096 case 1 - 3%) */
    s->kv = it->b != s->b || it->hkv != s->hkv || it->jhi - it->jlo >= f->kv_far_keys;
    s->b = it->b;
    s->hkv = it->hkv;
    ahead_begin(f, s);
    for (int64_t j0 = it->jlo; j0 < it->jhi;) j0 += item_tile(f, it, w, &ir, j0);
}

/* The region of a sweep's step (sweep_region): the keys of its next tile, from the
 * first head's next key (j0 + nk) on, or the next unit's first tile after its last. */
static void sweep_next(const fused_plan *f, fused_pf *s, const fused_item *its, int64_t n,
                       const int64_t *j0, const int64_t *nk, const fused_item *next)
{
    int64_t j = INT64_MAX, je = 0;
    for (int64_t h = 0; h < n; h++)
        if (j0[h] + nk[h] < its[h].jhi) {
            j = TA_MIN(j, j0[h] + nk[h]);
            je = TA_MAX(je, its[h].jhi);
        }
    const fused_item *first = its;
    if (j >= je && next) {
        first = next;
        j = INT64_MAX;
        for (int64_t h = 0; h < n; h++)
            if (next[h].jlo < next[h].jhi) {
                j = TA_MIN(j, next[h].jlo);
                je = TA_MAX(je, next[h].jhi);
            }
    }
    if (j >= je) { /* nothing to request: the calls take an empty stream */
        s->rn = s->ri = 0;
        s->line_key = 0;
        return;
    }
    const int64_t e = TA_MIN(je, j + TA_FUSED_NK);
    sweep_region(f, s, first, n, j, e);
    if (ta_sweep_pages && e < je) sweep_pages(f, first, n, e, TA_MIN(je, e + TA_FUSED_NK));
}

/* A sweep's steps: one key tile of every head (the scores of each, then each head's
 * softmax step and P.V), while the kernels request the next tile of every head (K's rows
 * of all heads, then V's, in address order: sweep_region), or, after the unit's last
 * tile, the next unit's first. Per head and key the same operations as item_tile's: the
 * same results. A cache [B, L, Hkv, D] holds a key's rows of all heads side by side: the
 * region is one span per run of keys, which the Zen 5 takes as a stream; per-head
 * requests (each head's rows 16 ahead, in rounds of 16 keys across the heads: session 11)
 * jumped 2 - 4 KiB at every row. Measured on the Zen 5, B1 H32 Hkv8 D128, 32k keys from
 * memory (driver, medians of 5 random-order alternations): bfloat16 1 thread 7.89 ->
 * 5.47 ms, 2 threads 4.31 -> 3.2 - 3.5; float32 1 thread 15.2 -> 12.1 (docs/inference.md,
 * "Decode order"). */
void ta_fused_run_sweep(const fused_plan *f, const fused_item *its, int64_t n, const fused_ws *ws,
                        const fused_item *next)
{
    fused_pf *s = ws[0].pfs;
    item_run ir[TA_FUSED_SWEEP_MAX];
    int64_t j0[TA_FUSED_SWEEP_MAX], nk[TA_FUSED_SWEEP_MAX];
    tile_tab tab[TA_FUSED_SWEEP_MAX];
    int64_t ss[TA_FUSED_SWEEP_MAX];
    const int32_t *rowk[TA_FUSED_SWEEP_MAX];
    bool live[TA_FUSED_SWEEP_MAX];
    bool more = false;
    for (int64_t h = 0; h < n; h++) {
        j0[h] = item_begin(f, &its[h], &ws[h], &ir[h]) ? its[h].jlo : its[h].jhi;
        more |= j0[h] < its[h].jhi;
    }
    s->sweep = true; /* the region's calls: no rows ahead in the tables (row_table) */
    while (more) {
        for (int64_t h = 0; h < n; h++) {
            bool skip = true;
            nk[h] = 0;
            if (j0[h] < its[h].jhi)
                nk[h] = tile_begin(f, &its[h], &ws[h], &ir[h], j0[h], &rowk[h], &skip);
            live[h] = !skip;
        }
        sweep_next(f, s, its, n, j0, nk, next);
        s->tab_j0 = -1; /* the first head with a table fills this tile's */
        for (int64_t h = 0; h < n; h++) {
            if (!live[h]) continue;
            ss[h] = score_ld(f, &its[h], &ir[h], j0[h], nk[h]);
            tile_scores(f, &its[h], &ws[h], j0[h], nk[h], rowk[h], ss[h], &tab[h]);
        }
        more = false;
        for (int64_t h = 0; h < n; h++) {
            if (j0[h] >= its[h].jhi) continue;
            if (live[h]) tile_end(f, &its[h], &ws[h], &ir[h], j0[h], nk[h], rowk[h], &tab[h], ss[h]);
            j0[h] += nk[h];
            more |= j0[h] < its[h].jhi;
        }
    }
    s->sweep = false; /* the other paths keep their own prefetches */
}
