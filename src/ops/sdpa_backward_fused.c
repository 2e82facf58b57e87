/* The fused SDPA backward (FlashAttention-2, Dao 2023, Algorithm 2) on the CPU.
 *
 * With P = exp(S - LSE) recomputed from Q, K and the forward's LSE, the gradients are
 *     dV = P^T dO,   dP = dO V^T,   D_i = rowsum(dO_i * O_i),   dS = P * (dP - D),
 *     dQ = scale * dS K,   dK = scale * dS^T Q            (dK, dV summed over a GQA group).
 * D (O(B*H*Lq)) is computed before the blocks that read it: in plan "group" by each
 * group for its own rows as it starts (their O and dO rows requested while the thread's
 * previous group ran: next_stream), in plan "split" in one pass first. Then, for a key
 * tile of BWD_NK keys of one (batch, kv head) group, the query tiles of BWD_MQ rows of
 * every head of the group run in order;
 * each block (query tile x key tile) does, all in L1/L2-sized tiles:
 *     S  = Q_t K_t^T                  attn_bwd_gemm (K_t^T packed once per key tile)
 *     S  = mask(S)                    only on blocks a bound cuts, or with a mask tensor
 *     dP = dO_t V_t^T                 attn_bwd_gemm (V_t^T packed once per key tile)
 *     P  = exp(S*scale - LSE), dS = P * (dP - D)          attn_bwd_dsoftmax
 *     dV_t += P^T dO_t,  dK_t += dS^T Q_t                 attn_bwd_gemm, tile accumulators
 *     dQ_t += dS K_t                                      (plan "group", see below)
 * Blocks whose rows all end before the key tile (causal, key lengths: ta_mask_row_end)
 * are skipped; a block that only the rows' ends cut (the causal diagonal) runs as its
 * triangle (tri_limits, attn_bwd_gemm_ranged: each product over the rows and keys that
 * see each other, by micro-tile), one that a row's start cuts too (a window's left edge)
 * or with a mask tensor as BWD_SUB x BWD_SUB sub-blocks, skipping those whose rows all
 * end before their keys; each sum keeps its order (what is skipped would only have
 * added zeros). Lq x Lk is never formed.
 *
 * dQ sums over key tiles, dK and dV over query tiles. To stay deterministic without
 * atomics, every output element is owned by one work item that adds in a fixed order:
 *   plan "group" (the usual case: enough (batch, kv head) groups to feed the threads):
 *     a work item is a whole group; it walks the key tiles in order and keeps the
 *     group's dQ rows in a per-thread buffer (G * Lq * D floats: O(L), not O(L^2)), so
 *     every product is done once: 2.5x the forward's FLOPs.
 *   plan "split" (few groups, or a dQ buffer above BWD_GROUP_DQ_MAX): pass 1 takes
 *     (group, key tile) items for dK and dV; pass 2 takes (head, query tile) items that
 *     recompute S, P, dP and dS over the key tiles in order for dQ (3.5x the forward).
 * The plan depends on the shape only, never on the thread count, so results are
 * bitwise identical for any number of threads.
 *
 * Attention variants (sdpa_variants.h): a window gives each row a first key next to its
 * last, and blocks (and sub-blocks) left of every row's window are skipped as those past
 * every row's end are; with softcap, ALiBi or a window the block's scores are scaled,
 * capped, biased and masked before the softmax step (sc = 1 then), and softcap's factor
 * 1 - tanh^2 (kept per score in the workspace) multiplies dS. The forward's LSE already
 * holds the sinks (P = exp(s - LSE) is the weight of the definition, and
 * dS = P (dP - D) still holds: the sink has no value row); their gradient dsigma comes
 * from D and the LSE at the end (ta_sdpa_sinks_grad, a fixed-order sum).
 *
 * Half tensors (float16, bfloat16; session 30) are read and written here, with no float32
 * stand-ins of whole tensors: Q, K and dO through their float32 copies (needs_copy: a
 * group's rows widened into the thread's scratch in plan "group"), V a key tile's rows
 * widened before its pack (v_rows), O and dO a row at a time for D_i, the gradients
 * rounded a row at a time as they are stored; the bits of float32 tensors holding the
 * same values, rounded once. Where Q and K (dO and V) are bfloat16 and the CPU has
 * AVX512_BF16, S = Q K^T (dP = dO V^T) takes its dot product from the caller's rows and
 * the key tile's packed pairs (dot_plan). */
#include "ops/sdpa.h"

#include "core/core.h"
#include "core/dtype.h"
#include "kernels/kernels.h"
#include "ops/sdpa_fused_variants.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Tiles: 64 x 64 blocks keep S, dP (16 KiB each) and the dK, dV accumulators in L1/L2;
 * 32 x 64, 128 x 64 and 64 x 128 measured the same within noise (B=32, H=8, L=512, D=64). */
#define BWD_NK 64                  /* keys per tile */
#define BWD_MQ 64                  /* query rows per tile */
#define BWD_SUB 32                 /* sub-blocks of a block a bound cuts */
#define BWD_GROUP_MIN 8            /* plan "group" needs this many (batch, kv head) groups */
#define BWD_GROUP_DQ_MAX (4 << 20) /* ... and a group dQ buffer of at most 4 MiB */

/* ---------------------------------------------------------------- fused path */

/* A tensor's data and element strides, as the kernels read it: row (b, h, i) at data +
 * b s[0] + (h - h0) s[1] + i s[2] (h0: the first head a group's copy holds, else 0). */
typedef struct bwd_view {
    const float *data;
    int64_t s[4];
    int64_t h0;
} bwd_view;

typedef struct bwd_plan {
    const ta_sdpa_problem *p;
    const ta_kernels *k;
    int64_t B, H, Hkv, G, Lq, Lk, D, Dv;
    bwd_view q, k_, v, dout; /* q, k_ and dout have unit stride along D / Dv */
    const float *lse, *di;   /* per row (b * H + h) * Lq + i */
    float *lo;               /* per row: lse + lo is the row's LSE (ta_sdpa_lse_split:
                                0 but where |LSE| is huge); row_terms_range writes it */
    int64_t dq_rows;         /* rows of the per-thread dQ buffer */
    bool nt_dq, nt_dk, nt_dv; /* write that gradient with non-temporal stores
                                 (ta_sdpa_stream_rows: a large one) */
    bool var_scores;         /* a window, softcap or ALiBi: the scores of every block are
                                formed by block_scores */
    bool dot_s, dot_p;       /* S = Q K^T (dP = dO V^T) by the bfloat16 dot product, from
                                the caller's bfloat16 Q and K (dO and V): dot_plan */
    bool v_rows;             /* V is half and its V^T tiles come from rows widened into
                                the thread's vrows (pack_kv) */
    int64_t row_buf;         /* floats of the thread's row buffer (half O, dO or
                                gradients: row_terms_range, store_rows), else 0 */
    int64_t qc_rows, kc_rows, doc_rows; /* > 0: plan "group" reads Q, K, dO through a copy
                                of the group's rows (group_copy) in a buffer of this many
                                rows in the thread's scratch */
    bool bound;              /* sizing the scratch of any sequence of a varlen whole */
    size_t ws_bytes;         /* per thread (SIZE_MAX: does not fit) */
} bwd_plan;

/* A thread's scratch, carved once per call. */
typedef struct bwd_ws {
    float *kt, *vt; /* K_t^T [D][ldt], V_t^T [Dv][ldt] (room for NK); with dot_s (dot_p)
                       kt (vt) holds the tile's bfloat16 pairs [D / 2][ldt] (pack_pairs) */
    float *vrows;   /* v_rows: a key tile's V rows widened, [NK][Dv] */
    float *row;     /* [row_buf]: half rows widened or to be rounded */
    int64_t ldt;    /* their row stride: the tile's keys (pack_kv) */
    float *s, *dp;  /* [MQ][NK] */
    float *dk, *dv; /* [NK][D], [NK][Dv] */
    float *dq;      /* [dq_rows][D] */
    float *cap;     /* softcap: [MQ][NK] of 1 - tanh^2 */
    float *qc, *kc, *doc; /* group copies: Q [G * Lq][D], K [Lk][D], dO [G * Lq][Dv] */
    ta_pf_span *next_rows; /* [2 G]: plan "group", the next group's O and dO rows */
    ta_pf next;            /* their prefetch stream, which the dP products advance */
    ta_pf_span *kv_rows;   /* [2 BWD_NK]: the next key tile's K and V rows */
    ta_pf kv_next;         /* their stream, which the S products advance */
    int32_t *nkeys;        /* [BWD_MQ]: a ranged block's keys each row sees (tri_limits) */
    int32_t *row0;         /* [BWD_NK]: the first of its rows that sees each key */
} bwd_ws;

/* One thread's scratch laid out in arena a (measuring or carving: the plan sizes it with
 * the same code). */
static void ws_layout(ta_arena *a, bwd_ws *w, const bwd_plan *f)
{
    w->kt = TA_ARENA_TAKE2(a, float, f->D, BWD_NK);
    w->vt = TA_ARENA_TAKE2(a, float, f->Dv, BWD_NK);
    /* any half V: v_rows, or dot_p until dot_gate turns it off at run time */
    w->vrows = f->p->V->dtype != TA_F32 ? TA_ARENA_TAKE2(a, float, BWD_NK, f->Dv) : NULL;
    w->row = f->row_buf ? TA_ARENA_TAKE(a, float, f->row_buf) : NULL;
    w->s = TA_ARENA_TAKE2(a, float, BWD_MQ, BWD_NK);
    w->dp = TA_ARENA_TAKE2(a, float, BWD_MQ, BWD_NK);
    w->dk = TA_ARENA_TAKE2(a, float, BWD_NK, f->D);
    w->dv = TA_ARENA_TAKE2(a, float, BWD_NK, f->Dv);
    w->dq = TA_ARENA_TAKE2(a, float, f->dq_rows, f->D);
    w->cap = f->p->var.softcap > 0.0f ? TA_ARENA_TAKE2(a, float, BWD_MQ, BWD_NK) : NULL;
    w->qc = f->qc_rows ? TA_ARENA_TAKE2(a, float, f->qc_rows, f->D) : NULL;
    w->kc = f->kc_rows ? TA_ARENA_TAKE2(a, float, f->kc_rows, f->D) : NULL;
    w->doc = f->doc_rows ? TA_ARENA_TAKE2(a, float, f->doc_rows, f->Dv) : NULL;
    w->next_rows = TA_ARENA_TAKE(a, ta_pf_span, 2 * f->G);
    w->kv_rows = TA_ARENA_TAKE(a, ta_pf_span, 2 * BWD_NK);
    w->nkeys = TA_ARENA_TAKE(a, int32_t, BWD_MQ);
    w->row0 = TA_ARENA_TAKE(a, int32_t, BWD_NK);
}

static size_t ws_bytes(const bwd_plan *f)
{
    ta_arena one = ta_arena_measure();
    bwd_ws w;
    ws_layout(&one, &w, f);
    return ta_arena_bytes(&one);
}

static inline const float *at(const bwd_view *v, int64_t b, int64_t h, int64_t i)
{
    return v->data + b * v->s[0] + (h - v->h0) * v->s[1] + i * v->s[2];
}

/* Row (b, h, i) of a bfloat16 tensor (the caller's Q, K, V or dO: dot_plan). */
static inline const uint16_t *at16(const ta_tensor *t, int64_t b, int64_t h, int64_t i)
{
    return (const uint16_t *)t->data + b * t->stride[0] + h * t->stride[1] + i * t->stride[2];
}

/* The bfloat16 pairs of n rows (row stride s2 elements, d even, unit stride along d)
 * transposed: dst[p * ld + j] = the 32 bits of row j's elements 2 p, 2 p + 1 (the
 * lower first: attn_bwd_gemm_bf16dot's B). */
static void pack_pairs(uint32_t *dst, int64_t ld, const uint16_t *src, int64_t s2, int64_t n,
                       int64_t d)
{
    for (int64_t j = 0; j < n; j++) {
        const uint16_t *row = src + j * s2;
        for (int64_t p = 0; p < d / 2; p++) {
            uint32_t v;
            memcpy(&v, row + 2 * p, sizeof v);
            dst[p * ld + j] = v;
        }
    }
}

/* K_t^T and V_t^T of keys [j0, j0 + nk) of group (b, hkv), row stride w->ldt: nk
 * rounded up to 16 (the rows stay aligned to the cache line), or nk itself below 16.
 * The products read the nk columns only; pack_t zeroes the rest of each row, which at
 * a stride of BWD_NK was 61 floats a row for 3 keys: 60% of a backward of 1000
 * sequences of 3 (B1000 H8 L3 D64 causal, 1 thread, 13.6 ms). */
static void pack_kv(const bwd_plan *f, bwd_ws *w, int64_t b, int64_t hkv, int64_t j0, int64_t nk)
{
    int64_t koff[BWD_NK], voff[BWD_NK];
    for (int64_t j = 0; j < nk; j++) {
        koff[j] = j * f->k_.s[2];
        voff[j] = j * f->v.s[2];
    }
    w->ldt = nk < 16 ? nk : (nk + 15) / 16 * 16;
    const ta_sdpa_problem *p = f->p;
    if (f->dot_s)
        pack_pairs((uint32_t *)(void *)w->kt, w->ldt, at16(p->K, b, hkv, j0), p->K->stride[2],
                   nk, f->D);
    else
        f->k->attn_pack_t(w->kt, w->ldt, at(&f->k_, b, hkv, j0), koff, f->k_.s[3], nk, f->D, 1.0f);
    if (f->dot_p) {
        pack_pairs((uint32_t *)(void *)w->vt, w->ldt, at16(p->V, b, hkv, j0), p->V->stride[2],
                   nk, f->Dv);
    } else if (f->v_rows) { /* half V: its rows widened, then packed as float32 ones */
        const ta_tensor *V = p->V;
        const size_t es = ta_elem_size(V->dtype);
        const char *v0 = (const char *)V->data +
                         (size_t)(b * V->stride[0] + hkv * V->stride[1] + j0 * V->stride[2]) * es;
        for (int64_t j = 0; j < nk; j++) {
            ta_k_row_to_f32(f->k, w->vrows + j * f->Dv, v0 + (size_t)(j * V->stride[2]) * es,
                            V->dtype, f->Dv, V->stride[3]);
            voff[j] = j * f->Dv;
        }
        f->k->attn_pack_t(w->vt, w->ldt, w->vrows, voff, 1, nk, f->Dv, 1.0f);
    } else {
        f->k->attn_pack_t(w->vt, w->ldt, at(&f->v, b, hkv, j0), voff, f->v.s[3], nk, f->Dv, 1.0f);
    }
}

/* The keys query rows [i0, i0 + mq) of batch b see: each row [start, end) (its window,
 * causal limit and key length; an empty row has start = end), and the extremes. A block
 * of keys [j0, j0 + n) needs no mask when j0 >= start_max and j0 + n <= end_min, and no
 * work when j0 >= end_max or j0 + n <= start_min. */
typedef struct bwd_bounds {
    int64_t start_min, start_max, end_min, end_max;
} bwd_bounds;

static void row_keys(const bwd_plan *f, int64_t b, int64_t i, int64_t *start, int64_t *end)
{
    const ta_sdpa_variants *v = &f->p->var;
    int64_t lo, hi, e = ta_mask_row_end(&f->p->mask, b, i);
    ta_sdpa_window_keys(v, v->delta, f->Lk, i, &lo, &hi);
    *start = TA_MIN(lo, f->Lk);
    *end = TA_MAX(TA_MIN(e, hi), *start);
}

/* Each of a row's bounds (the causal limit and the key length: ta_mask_row_end; the
 * window's edges) is a non-decreasing function of i within a batch, and so are the
 * mins and maxes of them that row_keys takes: the first row holds the minima and the
 * last row the maxima: two evaluations instead of one per row, for every block. Rows
 * [i0, i0 + mq), mq >= 1 (every caller's tiles hold a row). */
static bwd_bounds row_bounds(const bwd_plan *f, int64_t b, int64_t i0, int64_t mq)
{
    bwd_bounds r;
    row_keys(f, b, i0, &r.start_min, &r.end_min);
    row_keys(f, b, i0 + mq - 1, &r.start_max, &r.end_max);
    return r;
}

/* The scores of a block with a variant, in place in s (row stride BWD_NK): scale,
 * softcap (its factor 1 - tanh^2 into cap), ALiBi, then the masks and the window
 * (mask: the block is cut or a mask tensor exists). Scaled: dsoftmax takes scale 1. */
static void block_scores(const bwd_plan *f, bwd_ws *w, int64_t b, int64_t h, int64_t i0,
                         int64_t mq, int64_t j0, int64_t nk, bool mask)
{
    const ta_sdpa_problem *p = f->p;
    const ta_sdpa_variants *v = &p->var;
    const float c = v->softcap, slope = ta_sdpa_alibi_slope(v, b, h);
    for (int64_t r = 0; r < mq; r++) {
        float *row = w->s + r * BWD_NK;
        for (int64_t t = 0; t < nk; t++) row[t] *= p->scale;
        if (c > 0.0f) {
            f->k->attn_softcap(row, nk, c);
            float *fac = w->cap + r * BWD_NK;
            for (int64_t t = 0; t < nk; t++) {
                const float th = row[t] / c;
                fac[t] = 1.0f - th * th;
            }
        }
        const int64_t pos = i0 + r + v->delta;
        if (v->alibi)
            for (int64_t t = 0; t < nk; t++)
                row[t] -= slope * (float)(j0 + t > pos ? j0 + t - pos : pos - j0 - t);
        if (!mask) continue;
        ta_mask_apply(&p->mask, b, h, i0 + r, j0, nk, 1.0f, row, 1);
        int64_t lo, hi;
        ta_sdpa_window_keys(v, v->delta, f->Lk, i0 + r, &lo, &hi);
        ta_sdpa_fused_window_mask(row, 1, 1, j0, nk, &lo, &hi);
    }
}

/* One block: query rows [i0, i0 + mq) of head h against keys [j0 + jj, j0 + jj + nk),
 * columns jj .. of the key tile j0 whose K_t^T and V_t^T are in w. bd: the rows' bounds
 * (row_bounds(f, b, i0, mq), which the caller has). kv: accumulate rows jj .. of dV_t,
 * dK_t in w; dq: NULL or the block's dQ rows (row stride D) to accumulate into. ranged
 * (jj = 0): the block's triangle only, as w->nkeys and w->row0 say (tri_limits). */
static void run_block(const bwd_plan *f, bwd_ws *w, int64_t b, int64_t h, int64_t i0,
                      int64_t mq, const bwd_bounds *bd, int64_t j0, int64_t jj, int64_t nk,
                      bool kv, float *dq, bool ranged)
{
    const ta_sdpa_problem *p = f->p;
    const ta_kernels *k = f->k;
    const int64_t NK = BWD_NK, D = f->D, Dv = f->Dv;
    const float *q = at(&f->q, b, h, i0), *dout = at(&f->dout, b, h, i0);
    int64_t qs = f->q.s[2], dos = f->dout.s[2];
    int64_t row0 = (b * f->H + h) * f->Lq + i0;

    /* the ranged products: S and dP over each row's keys, dV and dK over the rows that
     * see each key, dQ over each row's keys (the terms left out are zeros: masked) */
    const int32_t *nkeys = ranged ? w->nkeys : NULL, *first = ranged ? w->row0 : NULL;
    /* S = Q K^T (advancing the next key tile's stream) */
    if (f->dot_s)
        k->attn_bwd_gemm_bf16dot(w->s, NK, at16(p->Q, b, h, i0), p->Q->stride[2],
                                 (const uint32_t *)(const void *)w->kt + jj, w->ldt, mq, nk, D,
                                 nkeys, &w->kv_next);
    else
        k->attn_bwd_gemm_ranged(w->s, NK, q, qs, 1, w->kt + jj, w->ldt, mq, nk, D, 0, NULL,
                                NULL, nkeys, &w->kv_next);
    j0 += jj;
    float sc = p->scale;
    const bool cut = j0 + nk > bd->end_min || j0 < bd->start_max;
    if (f->var_scores) {
        block_scores(f, w, b, h, i0, mq, j0, nk, p->mask.mask || cut);
        sc = 1.0f;
    } else if (p->mask.mask || cut) { /* the mask plan scales and blocks; then scale 1 */
        for (int64_t r = 0; r < mq; r++)
            ta_mask_apply(&p->mask, b, h, i0 + r, j0, nk, p->scale, w->s + r * NK, 1);
        sc = 1.0f;
    }
    /* dP = dO V^T (advancing the next group's stream) */
    if (f->dot_p)
        k->attn_bwd_gemm_bf16dot(w->dp, NK, at16(p->dO, b, h, i0), p->dO->stride[2],
                                 (const uint32_t *)(const void *)w->vt + jj, w->ldt, mq, nk, Dv,
                                 nkeys, &w->next);
    else
        k->attn_bwd_gemm_ranged(w->dp, NK, dout, dos, 1, w->vt + jj, w->ldt, mq, nk, Dv, 0,
                                NULL, NULL, nkeys, &w->next);
    k->attn_bwd_dsoftmax(w->s, w->dp, NK, f->lse + row0, f->lo + row0, f->di + row0, mq, nk, sc,
                         k->attn_exp);
    if (w->cap) /* softcap: d s / d (scale q.k) = 1 - tanh^2 */
        for (int64_t r = 0; r < mq; r++)
            for (int64_t t = 0; t < nk; t++) w->dp[r * NK + t] *= w->cap[r * NK + t];
    if (kv) {
        /* dV += P^T dO, dK += dS^T Q */
        k->attn_bwd_gemm_ranged(w->dv + jj * Dv, Dv, w->s, 1, NK, dout, dos, nk, Dv, mq, 1,
                                first, NULL, NULL, NULL);
        k->attn_bwd_gemm_ranged(w->dk + jj * D, D, w->dp, 1, NK, q, qs, nk, D, mq, 1, first,
                                NULL, NULL, NULL);
    }
    if (dq) /* dQ += dS K */
        k->attn_bwd_gemm_ranged(dq, D, w->dp, NK, 1, at(&f->k_, b, h / f->G, j0), f->k_.s[2],
                                mq, D, nk, 1, NULL, nkeys, NULL, NULL);
}

/* Rows of a gradient, O or dO requested ahead of their use where they lie apart (a
 * [B, H, L, D] view of [B, L, H, D] data: a head's rows H D apart, each few in a page of
 * its own, out of the hardware prefetchers' reach). Two-port Xeon, causal B4 H8 L512
 * D64, every tensor such a view, 1 thread, alternated in one process: the gradients'
 * stores (for writing) 26.5 -> 23.8 ms, row_terms' O and dO rows 26.5 -> 24.1, with the
 * copies' (ta_tensor_copy_rows) all three 26.5 -> 21.1 ([B, H, L, D]: 19.4). */
#define BWD_AHEAD 8

/* Rows [0, n) of a [n][cols] buffer times alpha into rows [r0, r0 + n) of t[b, h]; nt:
 * with non-temporal stores where a row is aligned to the kernels' vector (attn_scale_row:
 * the same products). Rows that lie apart are requested for writing BWD_AHEAD ahead. */
static void store_rows(const ta_kernels *k, ta_tensor *t, int64_t b, int64_t h, int64_t r0,
                       int64_t n, int64_t cols, const float *src, float alpha, bool nt,
                       float *tmp)
{
    if (t->dtype != TA_F32) { /* half: attn_scale_row's products in tmp, rounded once */
        const int64_t es = (int64_t)ta_elem_size(t->dtype);
        char *d0 = (char *)t->data + (b * t->stride[0] + h * t->stride[1] + r0 * t->stride[2]) * es;
        const bool apart = t->stride[3] == 1 && t->stride[2] != cols;
        for (int64_t r = 0; r < n; r++) {
            if (apart && r + BWD_AHEAD < n)
                for (int64_t c = 0; c < cols * es; c += 64)
                    __builtin_prefetch(d0 + (r + BWD_AHEAD) * t->stride[2] * es + c, 1, 3);
            k->attn_scale_row(tmp, src + r * cols, alpha, 0, cols, 0);
            ta_k_row_from_f32(k, d0 + r * t->stride[2] * es, t->dtype, tmp, cols, t->stride[3]);
        }
        return;
    }
    float *dst = (float *)t->data + b * t->stride[0] + h * t->stride[1] + r0 * t->stride[2];
    const bool ahead = !nt && t->stride[3] == 1 && t->stride[2] != cols;
    for (int64_t r = 0; r < n; r++) {
        if (ahead && r + BWD_AHEAD < n)
            for (int64_t c = 0; c < cols; c += 16)
                __builtin_prefetch(dst + (r + BWD_AHEAD) * t->stride[2] + c, 1, 3);
        if (t->stride[3] == 1)
            k->attn_scale_row(dst + r * t->stride[2], src + r * cols, alpha, 0, cols, nt);
        else
            for (int64_t c = 0; c < cols; c++)
                dst[r * t->stride[2] + c * t->stride[3]] = src[r * cols + c] * alpha;
    }
}

/* The rows of K and V of keys [j, j + BWD_NK) of group (b, hkv) (V's only when unit-stride
 * along Dv), as the stream that the tile's S products advance, into L2 on Intel (its
 * pack then finds them there): spread over the products' steps. Requested instead a
 * share of rows before each query tile, which the causal tiles skipped at the start of
 * a key tile issued in one burst, they held up the loop on its prefetches (perf: the
 * prefetches' loop 1% of the seed causal backward's samples). */
static void next_key_tile(const bwd_plan *f, bwd_ws *w, int64_t b, int64_t hkv, int64_t j)
{
    const int64_t n = TA_MIN(BWD_NK, f->Lk - j);
    int64_t m = 0;
    for (int t = 0; t < 2 && n > 0; t++) {
        /* K's rows as the products read them (f->k_: a copy where K is half); V's as
         * the caller has them (pack_kv reads them there, widening a half V) */
        const ta_tensor *V = f->p->V;
        const int64_t es = t ? (int64_t)ta_elem_size(V->dtype) : (int64_t)sizeof(float);
        const int64_t cols = t ? f->Dv : f->D, s2 = t ? V->stride[2] : f->k_.s[2];
        if ((t ? V->stride[3] : f->k_.s[3]) != 1 || cols == 0) continue;
        const void *row = t ? (const void *)((const char *)V->data +
                                             (b * V->stride[0] + hkv * V->stride[1] + j * s2) * es)
                            : (const void *)at(&f->k_, b, hkv, j);
        ta_pf_add_rows(w->kv_rows, &m, 2 * BWD_NK, row, s2 * es, cols * es, n);
    }
    w->kv_next = (ta_pf){w->kv_rows, w->kv_rows + m};
}

/* Whether block (rows [i0, i0 + mq) of batch b, keys [j0, j0 + nk)) runs ranged (the
 * triangle of a block that only the rows' ends cut: the causal diagonal, key lengths;
 * no mask tensor, no row starting past j0), and if so its limits into w: nkeys[r] the
 * keys row r sees, row0[t] the first row that sees key t (mq when none). The ends do
 * not decrease with the row (row_bounds), so neither do nkeys, and row0 follows from
 * them in one pass. A diagonal block of 64 x 64 does 59% of the full block's FMAs this
 * way, 75% as the three 32 x 32 sub-blocks it ran as before (every product ranged:
 * S and dP in row tiles of their keys, dV and dK from each key's first row, dQ over
 * each row tile's keys); two-port Xeon, 1 / 2 threads, alternating: causal B64 H8 L128
 * D64 (two of a head's three blocks on the diagonal) 24.2 -> 21.9 ms, 12.2 -> 11.0;
 * B32 L512 (8 of 36) 129.9 -> 124.3, 63.1 -> 61.1. */
static bool tri_limits(const bwd_plan *f, bwd_ws *w, int64_t b, int64_t i0, int64_t mq,
                       const bwd_bounds *bd, int64_t j0, int64_t nk)
{
    if (f->p->mask.mask || bd->start_max > j0) return false;
    for (int64_t r = 0; r < mq; r++) {
        int64_t start, end;
        row_keys(f, b, i0 + r, &start, &end);
        w->nkeys[r] = (int32_t)TA_MAX(0, TA_MIN(end - j0, nk));
    }
    for (int64_t t = 0, r = 0; t < nk; t++) {
        while (r < mq && w->nkeys[r] <= t) r++;
        w->row0[t] = (int32_t)r;
    }
    return true;
}

/* dK and dV of keys [j0, j0 + nk) of group (b, hkv), from every query tile of the group's
 * heads in order; with dq (the group's [G * Lq][D] dQ buffer) also adds dS K into it. */
static void run_key_tile(const bwd_plan *f, bwd_ws *w, int64_t b, int64_t hkv, int64_t j0,
                         int64_t nk, float *dq)
{
    const ta_sdpa_problem *p = f->p;
    pack_kv(f, w, b, hkv, j0, nk);
    memset(w->dk, 0, sizeof(float) * (size_t)(nk * f->D));
    memset(w->dv, 0, sizeof(float) * (size_t)(nk * f->Dv));
    next_key_tile(f, w, b, hkv, j0 + nk);
    for (int64_t gi = 0; gi < f->G; gi++) {
        int64_t h = hkv * f->G + gi;
        for (int64_t i0 = 0; i0 < f->Lq; i0 += BWD_MQ) {
            const int64_t mq = TA_MIN(BWD_MQ, f->Lq - i0);
            const bwd_bounds bd = row_bounds(f, b, i0, mq);
            /* every row of the tile ends before these keys, or starts after them */
            if (bd.end_max <= j0 || bd.start_min >= j0 + nk) continue;
            float *dqb = dq ? dq + (gi * f->Lq + i0) * f->D : NULL;
            if (j0 + nk <= bd.end_min && j0 >= bd.start_max) {
                run_block(f, w, b, h, i0, mq, &bd, j0, 0, nk, true, dqb, false);
                continue;
            }
            if (tri_limits(f, w, b, i0, mq, &bd, j0, nk)) {
                run_block(f, w, b, h, i0, mq, &bd, j0, 0, nk, true, dqb, true);
                continue;
            }
            /* A block that a bound cuts (the causal diagonal, a window's edges): in
             * sub-blocks, skipping those whose rows all end before their keys or start
             * after them. Every sum keeps its order. */
            for (int64_t ii = 0; ii < mq; ii += BWD_SUB) {
                const int64_t ms = TA_MIN(BWD_SUB, mq - ii);
                const bwd_bounds b2 = row_bounds(f, b, i0 + ii, ms);
                for (int64_t jj = 0; jj < nk && j0 + jj < b2.end_max; jj += BWD_SUB)
                    if (b2.start_min < j0 + jj + TA_MIN(BWD_SUB, nk - jj))
                        run_block(f, w, b, h, i0 + ii, ms, &b2, j0, jj,
                                  TA_MIN(BWD_SUB, nk - jj), true, dqb ? dqb + ii * f->D : NULL,
                                  false);
            }
        }
    }
    store_rows(f->k, p->dK, b, hkv, j0, nk, f->D, w->dk, p->scale, f->nt_dk, w->row);
    store_rows(f->k, p->dV, b, hkv, j0, nk, f->Dv, w->dv, 1.0f, f->nt_dv, w->row);
}

/* Rows [0, L) of heads [h, h + nh) of batch b of t (unit stride along its cols) into buf
 * [nh * L][cols], the source rows requested BWD_AHEAD ahead (they lie apart: group_copy);
 * returns the view of buf that reads as t does for those heads. */
static bwd_view copy_heads(const ta_kernels *k, const ta_tensor *t, int64_t b, int64_t h,
                           int64_t nh, int64_t L, int64_t cols, float *buf)
{
    const int64_t es = (int64_t)ta_elem_size(t->dtype), ld = t->stride[2] * es;
    for (int64_t g = 0; g < nh; g++) {
        const char *src = (const char *)t->data + (b * t->stride[0] + (h + g) * t->stride[1]) * es;
        float *dst = buf + g * L * cols;
        for (int64_t i = 0; i < L; i++, src += ld) {
            if (i + BWD_AHEAD < L)
                for (int64_t c = 0; c < cols * es; c += 64)
                    __builtin_prefetch(src + BWD_AHEAD * ld + c, 0, 3);
            if (t->dtype == TA_F32)
                memcpy(dst + i * cols, src, sizeof(float) * (size_t)cols);
            else /* a half tensor's rows widened (exact) */
                ta_k_row_to_f32(k, dst + i * cols, src, t->dtype, cols, 1);
        }
    }
    return (bwd_view){.data = buf, .s = {0, L * cols, cols, 1}, .h0 = h};
}

static void row_terms_range(const bwd_plan *f, float *di, float *lse, int64_t r0, int64_t r1,
                            float *buf);

/* Plan "group": everything of group (b, hkv), D and the LSE of its rows first (into di
 * and lse, whose rows only this group reads). With group copies (f->qc_rows, ...) the
 * group's rows of Q, K and dO are then copied into the thread's scratch, and the group
 * runs on a plan that reads them there. */
static void run_group(const bwd_plan *fg, bwd_ws *w, int64_t b, int64_t hkv, float *di,
                      float *lse)
{
    const int64_t r0 = (b * fg->H + hkv * fg->G) * fg->Lq;
    row_terms_range(fg, di, lse, r0, r0 + fg->G * fg->Lq, w->row);
    bwd_plan fc;
    const bwd_plan *f = fg;
    if (fg->qc_rows || fg->kc_rows || fg->doc_rows) {
        const ta_sdpa_problem *p = fg->p;
        fc = *fg;
        if (fg->qc_rows)
            fc.q = copy_heads(fg->k, p->Q, b, hkv * fg->G, fg->G, fg->Lq, fg->D, w->qc);
        if (fg->doc_rows)
            fc.dout = copy_heads(fg->k, p->dO, b, hkv * fg->G, fg->G, fg->Lq, fg->Dv, w->doc);
        if (fg->kc_rows) fc.k_ = copy_heads(fg->k, p->K, b, hkv, 1, fg->Lk, fg->D, w->kc);
        f = &fc;
    }
    memset(w->dq, 0, sizeof(float) * (size_t)(f->G * f->Lq * f->D));
    for (int64_t j0 = 0; j0 < f->Lk; j0 += BWD_NK)
        run_key_tile(f, w, b, hkv, j0, TA_MIN(BWD_NK, f->Lk - j0), w->dq);
    for (int64_t gi = 0; gi < f->G; gi++)
        store_rows(f->k, f->p->dQ, b, hkv * f->G + gi, 0, f->Lq, f->D, w->dq + gi * f->Lq * f->D,
                   f->p->scale, f->nt_dq, w->row);
}

/* Plan "split", pass 2: dQ of query rows [i0, i0 + mq) of head h, over the key tiles in
 * order (recomputing S, P, dP and dS). */
static void run_query_tile(const bwd_plan *f, bwd_ws *w, int64_t b, int64_t h, int64_t i0)
{
    const int64_t mq = TA_MIN(BWD_MQ, f->Lq - i0);
    memset(w->dq, 0, sizeof(float) * (size_t)(mq * f->D));
    const bwd_bounds bd = row_bounds(f, b, i0, mq);
    for (int64_t j0 = bd.start_min / BWD_NK * BWD_NK; j0 < bd.end_max; j0 += BWD_NK) {
        int64_t nk = TA_MIN(BWD_NK, f->Lk - j0);
        pack_kv(f, w, b, h / f->G, j0, nk);
        next_key_tile(f, w, b, h / f->G, j0 + nk);
        const bool cut = j0 + nk > bd.end_min || j0 < bd.start_max;
        run_block(f, w, b, h, i0, mq, &bd, j0, 0, nk, false, w->dq,
                  cut && tri_limits(f, w, b, i0, mq, &bd, j0, nk));
    }
    store_rows(f->k, f->p->dQ, b, h, i0, mq, f->D, w->dq, f->p->scale, f->nt_dq, w->row);
}

/* Whether t (Q, K or dO) is read through a float32 unit-stride copy (of the whole tensor,
 * or in plan "group" of each group's rows: group_copy): it is half (the copy widens it:
 * a group's rows in L2 instead of a float32 stand-in of the whole tensor, session 30),
 * its last dim is strided, or its rows alias in L1
 * (ta_sdpa_rows_alias: [B, L, H, D] layouts), where a query tile's Q and dO rows, reread
 * for every key tile, and K's rows, reread by every query tile's dQ, would miss on every
 * pass. Two-port Xeon, 1 thread, causal B1 H8 D64, [B, L, H, D]: L1024
 * 22.2 - 23.8 ms without the copies, 20.9 - 21.5 with ([B, H, L, D]: 18.8 - 20.0). */
static bool needs_copy(const ta_tensor *t)
{
    return t->dtype != TA_F32 || (t->stride[3] != 1 && t->shape[3] > 1) ||
           ta_sdpa_rows_alias(t, t->shape[3], BWD_MQ);
}

/* t's own view (its strides). */
static bwd_view unit_view_of(const ta_tensor *t)
{
    return (bwd_view){.data = t->data,
                      .s = {t->stride[0], t->stride[1], t->stride[2], t->stride[3]}};
}

/* A view of t with unit stride along the last dim: t itself, or a contiguous copy made
 * into buf (numel floats, laid out when needs_copy). */
static bwd_view unit_view(const ta_tensor *t, float *buf)
{
    bwd_view v = unit_view_of(t);
    if (!needs_copy(t)) {
        v.s[3] = 1;
        return v;
    }
    ta_tensor c = ta_tensor_view(buf, 4, t->shape);
    ta_tensor_copy(&c, t);
    v.data = buf;
    for (int d = 0; d < 4; d++) v.s[d] = c.stride[d];
    return v;
}

/* D_i = rowsum(dO_i * O_i) (in double) and the LSE of rows [r0, r1) (flat: (b * H + h) *
 * Lq + i), into di and lse. Each row's sum has one order whatever the range (the same
 * bits from the whole pass and from a group's rows). A half O or dO reads as the
 * contiguous float32 copy of its values would (its rows widened into buf, 2 Dv floats):
 * the bits of float32 tensors holding the same values. */
static void row_terms_range(const bwd_plan *f, float *di, float *lse, int64_t r0, int64_t r1,
                            float *buf)
{
    const ta_tensor *O = f->p->O, *dO = f->p->dO, *L = f->p->fwd_lse;
    const int64_t H = f->H, Lq = f->Lq, Dv = f->Dv;
    const int64_t so = O->stride[3], sd = dO->stride[3];
    const int64_t eo = (int64_t)ta_elem_size(O->dtype), ed = (int64_t)ta_elem_size(dO->dtype);
    const bool ho = O->dtype != TA_F32, hd = dO->dtype != TA_F32;
    if ((so == 1 || ho) && (sd == 1 || hd)) { /* unit-stride rows: the kernels' 8 chains a row */
        const bool ahead = (so == 1 && O->stride[2] != Dv) || (sd == 1 && dO->stride[2] != Dv);
        for (int64_t r = r0; r < r1; r++) {
            const int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
            const char *o = (const char *)O->data +
                            (b * O->stride[0] + h * O->stride[1] + i * O->stride[2]) * eo;
            const char *d = (const char *)dO->data +
                            (b * dO->stride[0] + h * dO->stride[1] + i * dO->stride[2]) * ed;
            lse[r] = ta_sdpa_lse_split(f->p, b, h, i,
                                       ((const float *)L->data)[b * L->stride[0] +
                                                                h * L->stride[1] + i * L->stride[2]],
                                       &f->lo[r]);
            if (ahead && i + BWD_AHEAD < Lq) /* BWD_AHEAD */
                for (int64_t c = 0; c < Dv * 4; c += 64) {
                    if (c < Dv * eo)
                        __builtin_prefetch(o + BWD_AHEAD * O->stride[2] * eo + c, 0, 3);
                    if (c < Dv * ed)
                        __builtin_prefetch(d + BWD_AHEAD * dO->stride[2] * ed + c, 0, 3);
                }
            const float *ov = (const float *)(const void *)o, *dv = (const float *)(const void *)d;
            if (ho) {
                ta_k_row_to_f32(f->k, buf, o, O->dtype, Dv, so);
                ov = buf;
            }
            if (hd) {
                ta_k_row_to_f32(f->k, buf + Dv, d, dO->dtype, Dv, sd);
                dv = buf + Dv;
            }
            di[r] = (float)f->k->attn_row_dot(dv, ov, Dv);
        }
        return;
    }
    /* rows in fours, each row's sum in its own chain (the same order per row as one at a
     * time: the same bits), so that the adds' latency overlaps */
    for (int64_t q0 = r0; q0 < r1; q0 += 4) {
        const char *o[4], *d[4];
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
        const int64_t n = TA_MIN(4, r1 - q0);
        for (int64_t a = 0; a < 4; a++) {
            const int64_t r = q0 + (a < n ? a : 0);
            const int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
            o[a] = (const char *)O->data +
                   (b * O->stride[0] + h * O->stride[1] + i * O->stride[2]) * eo;
            d[a] = (const char *)dO->data +
                   (b * dO->stride[0] + h * dO->stride[1] + i * dO->stride[2]) * ed;
            if (a < n)
                lse[r] = ta_sdpa_lse_split(f->p, b, h, i,
                                           ((const float *)L->data)[b * L->stride[0] +
                                                                    h * L->stride[1] +
                                                                    i * L->stride[2]],
                                           &f->lo[r]);
        }
        for (int64_t c = 0; c < Dv; c++)
            for (int a = 0; a < 4; a++)
                acc[a] += (double)ta_dtype_load(d[a] + c * sd * ed, dO->dtype) *
                          (double)ta_dtype_load(o[a] + c * so * eo, O->dtype);
        for (int64_t a = 0; a < n; a++) di[q0 + a] = (float)acc[a];
    }
}

/* row_terms_range over every row, on nt threads (plan "split"; plan "group" does its
 * groups' rows as each group starts), each with the row buffer of its scratch in ws (nt
 * scratches of f->ws_bytes, free until the blocks run). */
static void row_terms(const bwd_plan *f, float *di, float *lse, int nt, unsigned char *ws)
{
    const int64_t rows = f->B * f->H * f->Lq, chunk = 64;
#pragma omp parallel num_threads(nt)
    {
        bwd_ws w;
        ta_arena mine = ta_arena_over(ws + (size_t)omp_get_thread_num() * f->ws_bytes, f->ws_bytes);
        ws_layout(&mine, &w, f);
#pragma omp for schedule(static)
        for (int64_t r0 = 0; r0 < rows; r0 += chunk)
            row_terms_range(f, di, lse, r0, TA_MIN(rows, r0 + chunk), w.row);
    }
}

/* Whether plan "group" reads t (float32, unit stride along its cols) through a copy of
 * each group's `rows` rows in the thread's scratch instead of a copy of the whole
 * tensor made before the groups run (needs_copy): the rows that lie apart are read once
 * into L2 rather than copied out to memory and read back. At most BWD_GROUP_DQ_MAX
 * bytes a group (the dQ buffer's bound), else the whole copy. */
static bool group_copy(const ta_tensor *t, int64_t rows)
{
    return t->stride[3] == 1 && needs_copy(t) &&
           4.0 * (double)rows * (double)t->shape[3] <= (double)BWD_GROUP_DQ_MAX;
}

/* Whether the bfloat16 dot product computes S = Q K^T (x Q, y K) or dP = dO V^T (x dO,
 * y V) from the caller's tensors: both bfloat16 with unit stride along their last dim, of
 * an even length (cols: pairs), where the kernel table has the product (AVX512_BF16).
 * Each product exact in float32, the pairs' sums in float32 (attn_bwd_gemm_bf16dot):
 * roundoff of the same size as the FMAs'. The other three products read P or dS
 * (float32) and stay on attn_bwd_gemm_ranged, with Q, K and dO widened (needs_copy). */
static bool dot_plan(const ta_kernels *k, const ta_tensor *x, const ta_tensor *y, int64_t cols)
{
    return k->attn_bwd_gemm_bf16dot && x->dtype == TA_BF16 && y->dtype == TA_BF16 &&
           cols > 0 && cols % 2 == 0 && x->stride[3] == 1 && y->stride[3] == 1;
}

/* Whether any of t is stored in a half type. */
static bool any_half(const ta_tensor *const *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i]->dtype != TA_F32) return true;
    return false;
}

/* Everything about a call that does not depend on data: the plan, tiles, threads. */
typedef struct bwd_sched {
    bool group_plan;
    int64_t rows, groups, nkt, qtiles, items1, items2;
    int nt;
} bwd_sched;

/* together: p is one of many problems in one region (ta_sdpa_backward_fused_seqs),
 * which feed the threads with their groups together, so that plan "group" does not need
 * BWD_GROUP_MIN groups of p's own. The two plans give the same bits (each sum in the
 * same order; the row terms in one order whatever the range), but for the sign of a
 * zero: test_varlen_backward_bitwise_as_each_sequence_alone compares them. */
static bwd_plan make_plan_as(const ta_sdpa_problem *p, bwd_sched *sc, bool together)
{
    bwd_plan f = {.p = p, .k = ta_kernels_active(), .B = p->B, .H = p->H, .Hkv = p->Hkv,
                  .G = p->G, .Lq = p->Lq, .Lk = p->Lk, .D = p->D, .Dv = p->Dv};
    /* large gradients with non-temporal stores (ta_sdpa_stream_rows). Two-port Xeon, seed
     * causal backward (dQ, dK, dV 32 MiB each; driver, medians, three alternations):
     * 206.8 -> 204.4 ms on 1 thread, 104.3 -> 101.5 on 2 */
    f.nt_dq = ta_sdpa_stream_rows(p->dQ, f.D, TA_SDPA_STREAM_MIN);
    f.nt_dk = ta_sdpa_stream_rows(p->dK, f.D, TA_SDPA_STREAM_MIN);
    f.nt_dv = ta_sdpa_stream_rows(p->dV, f.Dv, TA_SDPA_STREAM_MIN);
    sc->rows = f.B * f.H * f.Lq;
    sc->groups = f.B * f.Hkv;
    sc->nkt = (f.Lk + BWD_NK - 1) / BWD_NK;
    double dq_bytes = 4.0 * (double)f.G * (double)f.Lq * (double)f.D;
    sc->group_plan = (together || sc->groups >= BWD_GROUP_MIN || sc->nkt <= 1) &&
                     dq_bytes <= BWD_GROUP_DQ_MAX;
    f.dq_rows = sc->group_plan ? f.G * f.Lq : BWD_MQ;
    f.qc_rows = sc->group_plan && group_copy(p->Q, f.G * f.Lq) ? f.G * f.Lq : 0;
    f.kc_rows = sc->group_plan && group_copy(p->K, f.Lk) ? f.Lk : 0;
    f.doc_rows = sc->group_plan && group_copy(p->dO, f.G * f.Lq) ? f.G * f.Lq : 0;
    f.var_scores = p->var.window || p->var.softcap > 0.0f || p->var.alibi;
    f.dot_s = dot_plan(f.k, p->Q, p->K, f.D);
    f.dot_p = dot_plan(f.k, p->dO, p->V, f.Dv);
    f.v_rows = p->V->dtype != TA_F32 && !f.dot_p;
    const ta_tensor *terms[2] = {p->O, p->dO}, *grads[3] = {p->dQ, p->dK, p->dV};
    f.row_buf = TA_MAX(any_half(terms, 2) ? 2 * f.Dv : 0,
                       any_half(grads, 3) ? TA_MAX(f.D, f.Dv) : 0);
    f.ws_bytes = ws_bytes(&f);
    sc->qtiles = (f.Lq + BWD_MQ - 1) / BWD_MQ;
    sc->items1 = sc->group_plan ? sc->groups : sc->groups * sc->nkt;
    sc->items2 = f.B * f.H * sc->qtiles;
    sc->nt = ta_threads();
    int64_t most = TA_MAX(sc->items1, sc->items2);
    if (sc->nt > most) sc->nt = (int)TA_MAX(most, 1);
    return f;
}

static bwd_plan make_plan(const ta_sdpa_problem *p, bwd_sched *sc)
{
    return make_plan_as(p, sc, false);
}

/* At run time, not in the plans that size the scratch: the bfloat16 dot product only where
 * it gives the float32 path's products (ta_sdpa_bf16_dot_exact: it reads K's or V's
 * subnormals as zero, which a large Q or dO makes visible); otherwise Q, K and dO are
 * read through their float32 copies (needs_copy holds for every half tensor) and V's
 * rows widened into vrows (which ws_layout takes for every half V). */
static void dot_gate(bwd_plan *f)
{
    const ta_sdpa_problem *p = f->p;
    if (f->dot_s && !ta_sdpa_bf16_dot_exact(p->Q, f->D, p->scale)) f->dot_s = false;
    if (f->dot_p && !ta_sdpa_bf16_dot_exact(p->dO, f->Dv, 1.0f)) {
        f->dot_p = false;
        f->v_rows = true; /* V is bfloat16 */
    }
}

/* The scratch: per-thread workspaces, D and LSE per row, and unit-stride copies of Q, K,
 * dO where their last dim is strided. */
typedef struct bwd_mem {
    unsigned char *ws; /* nt per-thread scratches of ws_bytes */
    float *di, *lse, *lo, *q, *k, *dout;
} bwd_mem;

static void layout(ta_arena *a, bwd_mem *m, const bwd_plan *f, const bwd_sched *sc)
{
    const ta_sdpa_problem *p = f->p;
    if (f->ws_bytes == SIZE_MAX) {
        a->overflow = true;
        return;
    }
    m->ws = TA_ARENA_TAKE2(a, unsigned char, (int64_t)f->ws_bytes, sc->nt);
    m->di = TA_ARENA_TAKE(a, float, sc->rows);
    m->lse = TA_ARENA_TAKE(a, float, sc->rows);
    m->lo = TA_ARENA_TAKE(a, float, sc->rows);
    /* whole copies where the groups do not copy their rows (a varlen whole's bound: a
     * sequence may do either) */
    const bool wq = needs_copy(p->Q) && (!f->qc_rows || f->bound);
    const bool wk = needs_copy(p->K) && (!f->kc_rows || f->bound);
    const bool wd = needs_copy(p->dO) && (!f->doc_rows || f->bound);
    m->q = wq ? TA_ARENA_TAKE(a, float, ta_tensor_numel(p->Q)) : NULL;
    m->k = wk ? TA_ARENA_TAKE(a, float, ta_tensor_numel(p->K)) : NULL;
    m->dout = wd ? TA_ARENA_TAKE(a, float, ta_tensor_numel(p->dO)) : NULL;
}

static size_t plan_bytes(const bwd_plan *f, const bwd_sched *sc)
{
    ta_arena a = ta_arena_measure();
    bwd_mem m;
    layout(&a, &m, f, sc);
    return ta_arena_bytes(&a);
}

size_t ta_sdpa_backward_fused_scratch(const ta_sdpa_problem *p)
{
    if (p->B * p->Hkv == 0) return 0;
    bwd_sched sc;
    bwd_plan f = make_plan(p, &sc);
    return plan_bytes(&f, &sc);
}

/* At least the scratch of any problem like p with Lq' <= Lq, Lk' <= Lk (the sequences of
 * a variable-length batch whose whole is p). Rows, copies and tiles grow with Lq and Lk;
 * the plan does not: a shorter problem (one key tile) may take plan "group" where p does
 * not, with a dQ buffer of G * Lq' rows up to BWD_GROUP_DQ_MAX bytes. */
static bwd_plan bound_plan(const ta_sdpa_problem *p, bwd_sched *sc)
{
    bwd_plan f = make_plan(p, sc);
    int64_t lq = f.G * f.D > 0 ? TA_MIN(f.Lq, BWD_GROUP_DQ_MAX / (4 * f.G * f.D)) : f.Lq;
    f.dq_rows = TA_MAX(BWD_MQ, f.G * lq);
    /* a sequence in plan "group" may copy its groups' rows (group_copy: up to
     * BWD_GROUP_DQ_MAX bytes each), and one in plan "split" the whole tensors */
    f.bound = true;
    const int64_t cap = BWD_GROUP_DQ_MAX / 4;
    f.qc_rows = group_copy(p->Q, 1) ? TA_MIN(f.G * f.Lq, cap / TA_MAX(f.D, 1)) : 0;
    f.kc_rows = group_copy(p->K, 1) ? TA_MIN(f.Lk, cap / TA_MAX(f.D, 1)) : 0;
    f.doc_rows = group_copy(p->dO, 1) ? TA_MIN(f.G * f.Lq, cap / TA_MAX(f.Dv, 1)) : 0;
    f.ws_bytes = ws_bytes(&f);
    int64_t most = TA_MAX(sc->groups * TA_MAX(sc->nkt, 1), sc->items2);
    sc->nt = (int)TA_MIN((int64_t)ta_threads(), TA_MAX(most, 1));
    return f;
}

size_t ta_sdpa_backward_fused_scratch_bound(const ta_sdpa_problem *p)
{
    if (p->B * p->Hkv == 0) return 0;
    bwd_sched sc;
    bwd_plan f = bound_plan(p, &sc);
    return plan_bytes(&f, &sc);
}

/* Plan "group": the O and dO rows of group g (none past the last group) as the stream
 * that the dP products of the thread's current group advance (a line every other step
 * of their k loop, into L2 on Intel: TA_PF_STEP), so that g's row_terms_range finds them
 * there instead of waiting on memory. A tensor whose head rows do not follow each other
 * is left out (row_terms_range requests such rows ahead itself). Two-port Xeon, seed
 * causal backward (B32 H8 L512 D64), 1 thread, alternated call by call in one process,
 * medians of 11: D and LSE in one pass before the groups 131.2 / 131.8 ms, each group's
 * own rows first 129.7 / 130.7, with this stream 127.4 / 129.4. */
static void next_stream(const bwd_plan *f, bwd_ws *w, int64_t g, int64_t groups)
{
    int64_t n = 0;
    for (int t = 0; t < 2 && g < groups; t++) {
        const ta_tensor *x = t ? f->p->dO : f->p->O;
        const int64_t es = (int64_t)ta_elem_size(x->dtype), row = f->Dv * es;
        if (x->stride[3] != 1 || x->stride[2] != f->Dv) continue;
        for (int64_t gi = 0; gi < f->G; gi++) /* a head's Lq rows follow each other: a span */
            ta_pf_add_rows(w->next_rows, &n, 2 * f->G,
                           (const char *)x->data + (g / f->Hkv * x->stride[0] +
                                                    (g % f->Hkv * f->G + gi) * x->stride[1]) * es,
                           row, row, f->Lq);
    }
    w->next = (ta_pf){w->next_rows, w->next_rows + n};
}

/* The views the plan's products read (a tensor the groups copy: its own strides, which
 * run_group replaces) and its D and LSE rows. */
static void set_views(bwd_plan *f, const bwd_mem *m)
{
    const ta_sdpa_problem *p = f->p;
    f->q = f->qc_rows ? unit_view_of(p->Q) : unit_view(p->Q, m->q);
    f->k_ = f->kc_rows ? unit_view_of(p->K) : unit_view(p->K, m->k);
    f->dout = f->doc_rows ? unit_view_of(p->dO) : unit_view(p->dO, m->dout);
    f->v = unit_view_of(p->V);
    f->di = m->di;
    f->lse = m->lse;
    f->lo = m->lo;
}

ta_status ta_sdpa_backward_fused(const ta_sdpa_problem *p, ta_arena *scratch)
{
    if (p->B * p->Hkv == 0) return TA_OK; /* every output is empty */
    bwd_sched sc;
    bwd_plan f = make_plan(p, &sc);
    dot_gate(&f);
    bwd_mem m;
    layout(scratch, &m, &f, &sc);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", p->fn);
    set_views(&f, &m);
    if (!sc.group_plan) row_terms(&f, m.di, m.lse, sc.rows * f.Dv < 32768 ? 1 : sc.nt, m.ws);
    int64_t claimed = 0; /* plan "group": claims past the first (ta_claims) */

    const int64_t groups = sc.groups, items1 = sc.items1, items2 = sc.items2;
    /* plan "group": several groups a claim where there are plenty (ta_claim_bundle): H8
     * D64 causal, 2 threads, binaries in turns (a loud host), B1000 L16 15.3 - 16.7 ->
     * 14.1 - 15.3 ms, the same tokens as varlen 14.5 - 17.8 -> 13.6 - 17.1; B32 L512 (256
     * groups: one a claim) the same */
    const int64_t per = sc.group_plan ? ta_claim_bundle(groups, sc.nt) : 1;
#pragma omp parallel num_threads(sc.nt)
    {
        bwd_ws w;
        ta_arena mine = ta_arena_over(m.ws + (size_t)omp_get_thread_num() * f.ws_bytes, f.ws_bytes);
        ws_layout(&mine, &w, &f);
        w.next = w.kv_next = (ta_pf){NULL, NULL};
        if (sc.group_plan) {
            /* dynamic, one group ahead: a thread takes its next group as it starts one,
             * so that it can request that group's O and dO rows (next_stream); `per`
             * groups a claim */
            ta_claims cl;
            for (int64_t it = ta_claims_first(&cl, &claimed, per, groups); it < groups;) {
                const int64_t next = ta_claims_next(&cl, it);
                next_stream(&f, &w, next, groups);
                run_group(&f, &w, it / f.Hkv, it % f.Hkv, m.di, m.lse);
                it = next;
            }
        } else {
            /* pass 1: dK, dV per (group, key tile); early key tiles first (they see the
             * most queries under a causal mask) */
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < items1; it++) {
                int64_t t = it / groups, grp = it % groups, j0 = t * BWD_NK;
                run_key_tile(&f, &w, grp / f.Hkv, grp % f.Hkv, j0, TA_MIN(BWD_NK, f.Lk - j0),
                             NULL);
            }
            /* pass 2: dQ per (head, query tile); late query tiles first (most keys) */
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < items2; it++) {
                int64_t t = sc.qtiles - 1 - it / (f.B * f.H), bh = it % (f.B * f.H);
                run_query_tile(&f, &w, bh / f.H, bh % f.H, t * BWD_MQ);
            }
        }
        if (f.nt_dq || f.nt_dk || f.nt_dv) ta_sdpa_stream_fence(); /* before the barrier */
    }
    ta_sdpa_sinks_grad(p); /* dsigma from dO, O and the LSE (when asked for) */
    return TA_OK;
}

/* ------------------------------------------------------ sequences together */

/* The sequences of a variable-length backward in one parallel region: every sequence
 * that takes plan "group" (each item a (batch, kv head) group, nothing between them;
 * planned as together, so whatever its number of groups, when its dQ buffer fits) and
 * reads its tensors in place or through its groups' copies joins; their groups are the
 * items, claimed from one counter, the sequences with the costliest groups first. Each
 * group runs as run_group runs it for its sequence alone, so the bits are those of each
 * sequence alone (either plan) and of any thread count. Before, every sequence was a
 * region of its own: a fork, a join and the wait for its last group (8 of them for
 * Hkv = 8 on 2 threads). The others (a dQ buffer past BWD_GROUP_DQ_MAX, a whole-tensor
 * copy) run alone after the region. */
typedef struct bwd_seqs {
    bwd_plan *plans;
    bwd_sched *scheds;
    ta_sdpa_cost *keys; /* the joined sequences, to sort: a group's G Lq Lk */
    int64_t *order; /* the joined sequences, costliest group first */
    int64_t *base;  /* the first item of each of them, in order (joined + 1) */
    int64_t *rows;  /* each sequence's first row of di and lse */
} bwd_seqs;

static void seqs_layout(ta_arena *a, bwd_seqs *h, int64_t n)
{
    h->plans = TA_ARENA_TAKE(a, bwd_plan, n);
    h->scheds = TA_ARENA_TAKE(a, bwd_sched, n);
    h->keys = TA_ARENA_TAKE(a, ta_sdpa_cost, n);
    h->order = TA_ARENA_TAKE(a, int64_t, n);
    h->base = TA_ARENA_TAKE(a, int64_t, n + 1);
    h->rows = TA_ARENA_TAKE(a, int64_t, n);
}

/* The pool after the head: nt per-thread scratches of ws_bytes, D and LSE of `rows`. */
static void pool_layout(ta_arena *a, bwd_mem *m, size_t ws_bytes, int nt, int64_t rows)
{
    m->ws = TA_ARENA_TAKE2(a, unsigned char, (int64_t)ws_bytes, nt);
    m->di = TA_ARENA_TAKE(a, float, rows);
    m->lse = TA_ARENA_TAKE(a, float, rows);
    m->lo = TA_ARENA_TAKE(a, float, rows);
    m->q = m->k = m->dout = NULL;
}

static size_t seqs_bytes(int64_t n, size_t ws_bytes, int nt, int64_t rows, size_t alone)
{
    ta_arena a = ta_arena_measure(), b = ta_arena_measure();
    bwd_seqs h;
    bwd_mem m;
    seqs_layout(&a, &h, n);
    pool_layout(&b, &m, ws_bytes, nt, rows);
    if (ws_bytes == SIZE_MAX) return SIZE_MAX;
    return ta_size_sum(ta_arena_bytes(&a), TA_MAX(ta_arena_bytes(&b), alone));
}

bool ta_sdpa_backward_fused_together(const ta_sdpa_problem *p, int64_t n)
{
    /* no kv head (H = Hkv = 0): nothing to run together, and
     * ta_sdpa_backward_fused_seqs_bound plans no region for it */
    if (!p->backward || p->path != TA_SDPA_FUSED || n < 2 || p->B * p->Hkv == 0) return false;
    ta_sdpa_staging st;
    ta_sdpa_stage_plan(&st, p);
    return ta_sdpa_stage_bytes(&st) == 0;
}

size_t ta_sdpa_backward_fused_seqs_bound(const ta_sdpa_problem *whole, int64_t n, size_t alone)
{
    if (n < 1 || whole->B * whole->Hkv == 0) return alone;
    bwd_sched sc;
    const bwd_plan f = bound_plan(whole, &sc); /* a thread's scratch for any sequence */
    return seqs_bytes(n, f.ws_bytes, ta_threads(), sc.rows, alone);
}

/* Whether sequence p (planned as f, sc) joins the region. */
static bool joins(const ta_sdpa_problem *p, const bwd_plan *f, const bwd_sched *sc)
{
    return p->B * p->Hkv > 0 && sc->group_plan && f->ws_bytes != SIZE_MAX &&
           (f->qc_rows || !needs_copy(p->Q)) && (f->kc_rows || !needs_copy(p->K)) &&
           (f->doc_rows || !needs_copy(p->dO));
}

/* The joined sequence (an index of order) that item `it` belongs to. */
static int64_t item_seq(const bwd_seqs *h, int64_t joined, int64_t it)
{
    int64_t lo = 0, hi = joined - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (h->base[mid] <= it) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* The joined sequences (order[0 .. joined)) sorted by their groups' cost, the costliest
 * first, ties in sequence order. */
static void order_by_cost(bwd_seqs *h, int64_t joined)
{
    for (int64_t k = 0; k < joined; k++) {
        const bwd_plan *f = &h->plans[h->order[k]];
        h->keys[k] = (ta_sdpa_cost){(double)f->G * (double)f->Lq * (double)f->Lk, h->order[k]};
    }
    ta_sdpa_order_by_cost(h->keys, joined, h->order);
}

ta_status ta_sdpa_backward_fused_seqs(const ta_sdpa_problem *ps, int64_t n, ta_arena *scratch)
{
    bwd_seqs h;
    seqs_layout(scratch, &h, n);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", ps->fn);
    ta_arena rest = ta_arena_over(scratch->base + scratch->used, scratch->size - scratch->used);
    int64_t joined = 0, rows = 0, nq = 0, nk = 0, nv = 0;
    size_t ws = 0;
    bool nt_stores = false;
    for (int64_t s = 0; s < n; s++) {
        h.plans[s] = make_plan_as(&ps[s], &h.scheds[s], true);
        dot_gate(&h.plans[s]);
        if (!joins(&ps[s], &h.plans[s], &h.scheds[s])) continue;
        h.order[joined++] = s;
        h.rows[s] = rows;
        rows += h.scheds[s].rows;
        ws = TA_MAX(ws, h.plans[s].ws_bytes);
        nq += ta_tensor_numel(ps[s].dQ);
        nk += ta_tensor_numel(ps[s].dK);
        nv += ta_tensor_numel(ps[s].dV);
    }
    /* non-temporal stores by what the region writes, not by each sequence's share of it
     * (64 sequences of 128, H8 D64 causal, 16 MiB a gradient: each view 256 KiB, its
     * rows stored plainly, read for ownership first; 1 / 2 threads 28.8 -> 24.8 ms,
     * 17.1 -> 14.4) */
    for (int64_t k = 0; k < joined; k++) {
        bwd_plan *f = &h.plans[h.order[k]];
        const ta_sdpa_problem *p = f->p;
        f->nt_dq = ta_sdpa_stream_rows_of(p->dQ, f->D, nq, TA_SDPA_STREAM_MIN);
        f->nt_dk = ta_sdpa_stream_rows_of(p->dK, f->D, nk, TA_SDPA_STREAM_MIN);
        f->nt_dv = ta_sdpa_stream_rows_of(p->dV, f->Dv, nv, TA_SDPA_STREAM_MIN);
        nt_stores |= f->nt_dq || f->nt_dk || f->nt_dv;
    }
    if (joined > 1) {
        order_by_cost(&h, joined);
        h.base[0] = 0;
        for (int64_t k = 0; k < joined; k++)
            h.base[k + 1] = h.base[k] + h.scheds[h.order[k]].groups;
        const int64_t items = h.base[joined];
        const int nt = (int)TA_MAX(1, TA_MIN((int64_t)ta_threads(), items));
        ta_arena a = rest;
        bwd_mem m;
        pool_layout(&a, &m, ws, nt, rows);
        if (a.overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", ps->fn);
        for (int64_t k = 0; k < joined; k++) {
            const int64_t s = h.order[k];
            bwd_mem ms = m;
            ms.di = m.di + h.rows[s];
            ms.lse = m.lse + h.rows[s];
            ms.lo = m.lo + h.rows[s];
            set_views(&h.plans[s], &ms);
        }
        int64_t claimed = 0;
        const int64_t per = ta_claim_bundle(items, nt);
#pragma omp parallel num_threads(nt)
        {
            unsigned char *mine = m.ws + (size_t)omp_get_thread_num() * ws;
            ta_claims cl;
            for (int64_t it = ta_claims_first(&cl, &claimed, per, items); it < items;) {
                const int64_t next = ta_claims_next(&cl, it); /* the thread's next group */
                const int64_t k = item_seq(&h, joined, it), g = it - h.base[k];
                const bwd_plan *f = &h.plans[h.order[k]];
                bwd_ws w;
                ta_arena own = ta_arena_over(mine, ws);
                ws_layout(&own, &w, f);
                w.next = w.kv_next = (ta_pf){NULL, NULL};
                if (next < items) { /* the next group's O and dO rows, if it is this one's */
                    const int64_t k2 = item_seq(&h, joined, next);
                    if (k2 == k) next_stream(f, &w, next - h.base[k], h.scheds[h.order[k]].groups);
                }
                const int64_t r0 = h.rows[h.order[k]];
                run_group(f, &w, g / f->Hkv, g % f->Hkv, m.di + r0, m.lse + r0);
                it = next;
            }
            if (nt_stores) ta_sdpa_stream_fence();
        }
    }
    /* the others alone, in order */
    for (int64_t s = 0; s < n; s++) {
        if (joined > 1 && joins(&ps[s], &h.plans[s], &h.scheds[s])) continue;
        ta_arena a = rest;
        ta_status st = ta_sdpa_backward_fused(&ps[s], &a);
        if (st) return st;
    }
    for (int64_t k = 0; joined > 1 && k < joined; k++) ta_sdpa_sinks_grad(&ps[h.order[k]]);
    return TA_OK;
}
