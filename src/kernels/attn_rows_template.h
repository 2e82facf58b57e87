/* The few-row attention kernels (a decode step: one query row, or the few query heads
 * of a kv head), reading K and V rows straight from float32, float16 or bfloat16
 * memory (half rows widened in registers), written once over the vector vocabulary and
 * instantiated per ISA by attn_rows_scalar.c, attn_rows_avx2.c and attn_rows_avx512.c.
 * Contracts: src/kernels/kernels.h (attn_qk_rows_kv, attn_pv_rows_kv) and docs/kernels.md,
 * "Decode: the few-row kernels".
 *
 * The including file defines:
 *   ROWS_MAX           the most rows a tile of the few-row path has (attn_rows_max);
 *   PV_ACC             accumulators of a P.V pass (rows x column vectors);
 *   NAME_QK_F32, NAME_QK_F16, NAME_QK_BF16, NAME_PV_F32, NAME_PV_F16, NAME_PV_BF16,
 *   NAME_SOFTMAX_ROWS, FILL_FN   the exported names (each group of NAME_QK_*, NAME_PV_*
 *                      and NAME_SOFTMAX_ROWS optional: an instance without one leaves
 *                      the parent's entries); NAME_QK_BF16DOT (optional, with the
 *                      vocabulary's VB, VB_LOAD and V_DOT_BF16): attn_qk_rows_bf16dot;
 *   NAME_QK_TILE_BF16DOT (optional, with VB_BCAST_PAIR and the tile TILE_QV x TILE_KJ):
 *                      attn_qk_bf16dot, installed when the table's attn_mq is its tile's;
 * and the vocabulary: VT, VL, V_ZERO, V_SET1, V_BCAST, V_LOADU, V_STOREU, V_ADD, V_SUB,
 * V_MUL, V_FMA, V_MAX, V_EXP, V_EXP_ONEPASS, V_LOAD_BF16_EO(p, e, o) (2 VL bfloat16:
 * even, odd widened), V_LOAD_F16(p), V_LOAD_BF16(p) (VL values widened), V_HSUM_ALL(a)
 * (lane i = the sum of a[i]'s lanes, for VL vectors, in a fixed order).
 *
 * Both kernels need d (dv) a multiple of VL and unit-stride rows; the driver takes the
 * copying path otherwise. Each K or V row is read once per call (the scores of all rows
 * from one pass over K; P.V in passes over column groups, each V element loaded and
 * widened once per pass that needs it), and rows PF_ROWS ahead are requested into L2
 * while the current ones are used: a KV cache [B, L, Hkv, D] puts each key row of a head
 * in its own page, beyond the hardware prefetchers. A caller's prefetch stream (pf)
 * replaces those requests: its lines spread over the call's steps, in its order. */
#include "kernels/kernels.h"
#include "kernels/softmax_forms.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ROWS_INLINE static inline __attribute__((always_inline))
#define PF_ROWS TA_ROWS_AHEAD /* rows ahead that the kernels prefetch (kernels.h) */

_Static_assert(ROWS_MAX >= 1 && ROWS_MAX <= 8 && ROWS_MAX <= VL * 8,
               "attn_rows_template.h: ROWS_MAX in 1..8");
_Static_assert(PV_ACC >= 8 && PV_ACC <= 16, "attn_rows_template.h: PV_ACC in 8..16");

enum { KIND_F32 = 0, KIND_F16 = 1, KIND_BF16 = 2 };

/* VL elements of a row from element i (kind a constant after inlining). */
ROWS_INLINE VT load_kind(const char *row, int64_t i, const int kind)
{
    if (kind == KIND_F16) return V_LOAD_F16((const uint16_t *)(const void *)row + i);
    if (kind == KIND_BF16) return V_LOAD_BF16((const uint16_t *)(const void *)row + i);
    return V_LOADU((const float *)(const void *)row + i);
}

/* Every 64-byte line of row j + PF_ROWS of the table, into L2, when the table has it
 * (avail entries). */
ROWS_INLINE void prefetch_row(const void *const *rows, int64_t off, int64_t j, int64_t avail,
                              int64_t bytes)
{
    if (j + PF_ROWS >= avail) return;
    const char *r = (const char *)rows[j + PF_ROWS] + off;
    for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch(r + c, 0, 2);
}

/* The 64-byte lines a prefetch stream holds (its spans from next on). */
static inline int64_t pf_lines(const ta_pf *pf)
{
    int64_t n = 0;
    for (const ta_pf_span *sp = pf->next; sp < pf->end; sp++)
        n += (sp->b - sp->a + 63) / 64;
    return n;
}

/* The lines a call requests per step to spread a stream's lines over `steps` steps. */
static inline int64_t pf_per_step(const ta_pf *pf, int64_t steps)
{
    return pf && steps > 0 ? (pf_lines(pf) + steps - 1) / steps : 0;
}

/* The lane partials of q . k along d for one key, in 4 chains (2 vectors a step for
 * bfloat16: its even and odd elements), added in order: (c0 + c1) + (c2 + c3). */
ROWS_INLINE VT dot_seq(const float *q, const char *k, int64_t d, const int kind)
{
    VT c0 = V_ZERO(), c1 = V_ZERO(), c2 = V_ZERO(), c3 = V_ZERO();
    int64_t p = 0;
    if (kind == KIND_BF16) {
        for (; p + 4 * VL <= d; p += 4 * VL) {
            VT e0, o0, e1, o1;
            V_LOAD_BF16_EO((const uint16_t *)(const void *)k + p, &e0, &o0);
            V_LOAD_BF16_EO((const uint16_t *)(const void *)k + p + 2 * VL, &e1, &o1);
            c0 = V_FMA(V_LOADU(q + p), e0, c0);
            c1 = V_FMA(V_LOADU(q + p + VL), o0, c1);
            c2 = V_FMA(V_LOADU(q + p + 2 * VL), e1, c2);
            c3 = V_FMA(V_LOADU(q + p + 3 * VL), o1, c3);
        }
        if (p + 2 * VL <= d) {
            VT e0, o0;
            V_LOAD_BF16_EO((const uint16_t *)(const void *)k + p, &e0, &o0);
            c0 = V_FMA(V_LOADU(q + p), e0, c0);
            c1 = V_FMA(V_LOADU(q + p + VL), o0, c1);
            p += 2 * VL;
        }
    }
    for (; p + 4 * VL <= d; p += 4 * VL) {
        c0 = V_FMA(V_LOADU(q + p), load_kind(k, p, kind), c0);
        c1 = V_FMA(V_LOADU(q + p + VL), load_kind(k, p + VL, kind), c1);
        c2 = V_FMA(V_LOADU(q + p + 2 * VL), load_kind(k, p + 2 * VL, kind), c2);
        c3 = V_FMA(V_LOADU(q + p + 3 * VL), load_kind(k, p + 3 * VL, kind), c3);
    }
    for (; p < d; p += VL) c0 = V_FMA(V_LOADU(q + p), load_kind(k, p, kind), c0);
    return V_ADD(V_ADD(c0, c1), V_ADD(c2, c3));
}

/* Lane k * R + r of sum (the pair of key k, row r) into s[k * mqs + r], for keys k < nkb
 * and rows r < nr. A packed tile (mqs = R: a decode step's scores) takes the vector as it
 * is, rows nr .. R - 1 (row 0's repeats) included: the lanes are where they go, and the
 * softmax that reads them whole finds nothing unwritten. Otherwise through a buffer; the
 * packed case does not, as reading a 16-byte piece of a 64-byte store just made stalls
 * the load until the store leaves (the copy loop took ~10% of Q.K^T's samples in a
 * bfloat16 decode from L3). */
ROWS_INLINE void store_sums(float *s, int64_t mqs, VT sum, int nkb, int nr, const int R)
{
    if (mqs == R) { /* rows nr .. R - 1 too (row 0's repeats): no lane is left unwritten */
        if (nkb == VL / R) V_STOREU(s, sum);
        else V_STOREN(s, sum, nkb * R);
        return;
    }
    float t[VL];
    V_STOREU(t, sum);
    if (nr == R) /* every row real: a key's R scores move as one block */
        for (int j = 0; j < nkb; j++) memcpy(s + j * mqs, t + j * R, sizeof(float) * (size_t)R);
    else
        for (int j = 0; j < nkb; j++)
            for (int r = 0; r < nr; r++) s[j * mqs + r] = t[j * R + r];
}

/* n of the `left` requests of a block's share of the caller's stream pf (PFS: a constant). */
#define QK_PF(n)                                                                             \
    do {                                                                                     \
        if (PFS)                                                                             \
            for (int64_t i_ = 0; i_ < (n) && left > 0; i_++, left--)                       \
                TA_PF_STEP_HINT(pf, !ta_stream_prefetch_l1);                                 \
    } while (0)

/* s[k * MQS + r] = q_r . k_(j0 + k) for KB = VL / R keys from j0 (nkb of them real) and
 * R rows (nr real; the others repeat row 0 and are not stored). Accumulator k * R + r
 * holds the lane sums of that pair along d; V_HSUM_ALL adds all of them at once. PFS (a
 * constant): `per` lines of the caller's stream pf, spread over the block's steps along
 * d (a burst of them at the block's start stalled the loop: 16 lines a block of a
 * float16 decode, 8 cycles a key more than no stream in L2 against 5 spread). */
ROWS_INLINE void qk_block(float *s, int64_t mqs, const float *q, int64_t ldq, int nr,
                          const void *const *k, int64_t koff, int nkb, int64_t d, ta_pf *pf,
                          int64_t per, const int R, const int kind, const int PFS)
{
    const int KB = VL / R;
    TA_PF_BEGIN(pf);
    int64_t left = PFS ? per : 0; /* the stream's requests of this block, spread over it */
    const int64_t steps = d / VL > 0 ? d / VL : 1;
    const int64_t pst = PFS ? (per + steps - 1) / steps : 0; /* requests a step of VL */
    VT acc[VL];
    const float *qr[8];
    const char *kr[VL];
#pragma GCC unroll 16
    for (int i = 0; i < VL; i++) acc[i] = V_ZERO();
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) qr[r] = q + (r < nr ? r : 0) * ldq;
#pragma GCC unroll 16
    for (int j = 0; j < KB; j++) kr[j] = (const char *)k[j < nkb ? j : 0] + koff;
    if (R == 1) { /* one row: key by key, each K row read front to back (one stream) */
#pragma GCC unroll 1
        for (int j = 0; j < KB; j++) {
            QK_PF((per + KB - 1) / KB);
            acc[j] = dot_seq(qr[0], kr[j], d, kind);
        }
        QK_PF(left);
        TA_PF_END(pf);
        store_sums(s, mqs, V_HSUM_ALL(acc), nkb, nr, 1);
        return;
    }
    int64_t p = 0;
    if (kind == KIND_BF16) /* q blocks of 2 VL hold their even elements, then the odd */
        for (; p + 2 * VL <= d; p += 2 * VL) {
            QK_PF(2 * pst);
            VT qe[8], qo[8];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                qe[r] = V_LOADU(qr[r] + p);
                qo[r] = V_LOADU(qr[r] + p + VL);
            }
#pragma GCC unroll 16
            for (int j = 0; j < KB; j++) {
                VT ke, ko;
                V_LOAD_BF16_EO((const uint16_t *)(const void *)kr[j] + p, &ke, &ko);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    acc[j * R + r] = V_FMA(qe[r], ke, acc[j * R + r]);
                    acc[j * R + r] = V_FMA(qo[r], ko, acc[j * R + r]);
                }
            }
        }
    for (; p < d; p += VL) {
        QK_PF(pst);
        VT qv[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) qv[r] = V_LOADU(qr[r] + p);
#pragma GCC unroll 16
        for (int j = 0; j < KB; j++) {
            const VT kv = load_kind(kr[j], p, kind);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[j * R + r] = V_FMA(qv[r], kv, acc[j * R + r]);
        }
    }
    QK_PF(left);
    TA_PF_END(pf);
    store_sums(s, mqs, V_HSUM_ALL(acc), nkb, nr, R);
}

#ifdef V_DOT_BF16
/* One step of qk_block_dot along d at p: 2 VL elements, or with HALF (a constant) VL, the
 * upper pairs loaded as zeros. */
ROWS_INLINE void dot_step(VT *acc, const uint16_t *const *qr, const uint16_t *const *kr,
                          int64_t p, const int R, const int HALF)
{
    const int KB = VL / R;
    VB qv[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) qv[r] = HALF ? VB_LOAD_VL(qr[r] + p) : VB_LOAD(qr[r] + p);
#pragma GCC unroll 16
    for (int j = 0; j < KB; j++) {
        const VB kv = HALF ? VB_LOAD_VL(kr[j] + p) : VB_LOAD(kr[j] + p);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[j * R + r] = V_DOT_BF16(acc[j * R + r], qv[r], kv);
    }
}

/* qk_block for a bfloat16 query (attn_qk_rows_bf16dot; the vocabulary's VB, VB_LOAD,
 * VB_LOAD_VL (VL elements, the others zero) and V_DOT_BF16, lane i += a[2i] b[2i] +
 * a[2i + 1] b[2i + 1]): accumulator k * R + r holds the lane partials of element pairs
 * along d, 2 VL elements a step (a last step of VL), read as they lie in q and K (no
 * widening); then the lanes' sums, times scale. d a multiple of VL. */
ROWS_INLINE void qk_block_dot(float *s, int64_t mqs, const uint16_t *q, int64_t ldq, int nr,
                              float scale, const void *const *k, int64_t koff, int nkb,
                              int64_t d, ta_pf *pf, int64_t per, const int R, const int PFS)
{
    const int KB = VL / R;
    TA_PF_BEGIN(pf);
    int64_t left = PFS ? per : 0;
    const int64_t steps = (d + 2 * VL - 1) / (2 * VL) > 0 ? (d + 2 * VL - 1) / (2 * VL) : 1;
    const int64_t pst = PFS ? (per + steps - 1) / steps : 0; /* requests a step of 2 VL */
    VT acc[VL];
    const uint16_t *qr[8], *kr[VL];
#pragma GCC unroll 16
    for (int i = 0; i < VL; i++) acc[i] = V_ZERO();
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) qr[r] = q + (r < nr ? r : 0) * ldq;
#pragma GCC unroll 16
    for (int j = 0; j < KB; j++)
        kr[j] = (const uint16_t *)(const void *)((const char *)k[j < nkb ? j : 0] + koff);
    int64_t p = 0;
    for (; p + 2 * VL <= d; p += 2 * VL) {
        QK_PF(pst);
        dot_step(acc, qr, kr, p, R, 0);
    }
    if (p < d) { /* VL elements left */
        QK_PF(pst);
        dot_step(acc, qr, kr, p, R, 1);
    }
    QK_PF(left);
    TA_PF_END(pf);
    store_sums(s, mqs, V_MUL(V_HSUM_ALL(acc), V_SET1(scale)), nkb, nr, R);
}
#endif
#undef QK_PF

/* qk_block, or with DOT (a constant) qk_block_dot on q as bfloat16 (scale its factor). */
ROWS_INLINE void qk_block_any(float *s, int64_t mqs, const void *q, int64_t ldq, int nr,
                              float scale, const void *const *k, int64_t koff, int nkb,
                              int64_t d, ta_pf *pf, int64_t per, const int R, const int kind,
                              const int PFS, const int DOT)
{
#ifdef V_DOT_BF16
    if (DOT) {
        qk_block_dot(s, mqs, (const uint16_t *)q, ldq, nr, scale, k, koff, nkb, d, pf, per, R,
                     PFS);
        return;
    }
#endif
    (void)scale;
    (void)DOT;
    qk_block(s, mqs, (const float *)q, ldq, nr, k, koff, nkb, d, pf, per, R, kind, PFS);
}

/* The scores of nk keys for mq rows, R rows a pass (R >= mq, a power of two <= VL); q
 * float32 rows, or with DOT (a constant) bfloat16 rows and the scores times scale. */
ROWS_INLINE void qk_rows(float *s, int64_t mqs, const void *q, int64_t ldq, int mq,
                         float scale, const void *const *k, int64_t koff, int64_t nk,
                         int64_t d, int64_t avail, const void *const *vp, int64_t voff,
                         int64_t vbytes, ta_pf *pf, int64_t per, const int R, const int kind,
                         const int DOT)
{
    const int KB = VL / R;
    const int64_t bytes = d * (kind == KIND_F32 ? 4 : 2);
    for (int64_t j = 0; j < nk; j += KB) {
        const int nkb = (int)(nk - j < KB ? nk - j : KB);
        if (pf) { /* the caller's stream instead of the rows ahead, spread over the block */
            qk_block_any(s + j * mqs, mqs, q, ldq, mq, scale, k + j, koff, nkb, d, pf, per, R,
                         kind, 1, DOT);
            continue;
        }
        for (int i = 0; i < nkb; i++) {
            prefetch_row(k, koff, j + i, avail, bytes);
            if (vp) prefetch_row(vp, voff, j + i, avail, vbytes);
        }
        qk_block_any(s + j * mqs, mqs, q, ldq, mq, scale, k + j, koff, nkb, d, NULL, 0, R, kind,
                     0, DOT);
    }
}

/* s [nk, mqs] (rows < mq only, mq <= 8) = q [mq rows, ldq] K^T for the nk key rows the
 * table k points to (of the kind's type), prefetching from the table's avail rows (and
 * v's, when given): passes of R rows, R the smallest power of two >= mq up to VL (R = 8
 * as two passes of 4 below 8 lanes). q float32, or with DOT bfloat16 rows and the scores
 * times scale. */
ROWS_INLINE void qk_entry(float *s, int64_t mqs, const void *q, int64_t ldq, int64_t mq,
                          float scale, const void *const *k, int64_t koff, int64_t nk,
                          int64_t d, int64_t avail, const void *const *v, int64_t voff,
                          int64_t vbytes, ta_pf *pf, const int kind, const int DOT)
{
    const int rp = mq <= 1 || VL < 2 ? 1 : mq <= 2 || VL < 4 ? 2 : mq <= 4 || VL < 8 ? 4 : 8;
    /* the stream's lines spread over every block (VL / rp keys) of every pass */
    const int64_t per = pf_per_step(pf, (mq + rp - 1) / rp * ((nk + VL / rp - 1) / (VL / rp)));
    const int64_t qsz = DOT ? 2 : 4;
    for (int64_t r0 = 0; r0 < mq; r0 += rp) {
        const int nr = (int)(mq - r0 < rp ? mq - r0 : rp);
        const void *qr = (const char *)q + r0 * ldq * qsz;
#define QK_PASS(RR)                                                                          \
    qk_rows(s + r0, mqs, qr, ldq, nr, scale, k, koff, nk, d, avail, v, voff, vbytes, pf, per, \
            RR, kind, DOT)
        if (rp == 1) QK_PASS(1);
        else if (rp == 2) QK_PASS(VL < 2 ? 1 : 2);
        else if (rp == 4) QK_PASS(VL < 4 ? 1 : 4);
        else QK_PASS(VL < 8 ? 1 : 8);
#undef QK_PASS
    }
}

#ifdef NAME_QK_TILE_BF16DOT
/* attn_qk_bf16dot (kernels.h): the tile kernel of many query rows, attn_qk's layout with
 * bfloat16 pairs. TILE_QV query vectors (MQ = TILE_QV * VL rows, the table's attn_mq: the
 * filler installs it only then) by TILE_KJ keys, TILE_QV * TILE_KJ accumulators; a step
 * takes one pair of d: the q pairs of the tile's rows (2 VL bfloat16 a vector, row r's
 * pair in lane r) and each key's pair broadcast (VB_BCAST_PAIR), one V_DOT_BF16 a vector
 * and key. */
#define TMQ (TILE_QV * VL)
ROWS_INLINE void qk_tile_micro(float *s, const uint16_t *qp, const uint16_t *k, int64_t ldk,
                               int64_t d, float scale, const int nj, const int NQ, ta_pf *pf)
{
    VT acc[TILE_KJ][TILE_QV];
    const uint16_t *kr[TILE_KJ];
#pragma GCC unroll 16
    for (int j = 0; j < TILE_KJ; j++) {
        kr[j] = k + (j < nj ? j : 0) * ldk;
#pragma GCC unroll 4
        for (int q = 0; q < TILE_QV; q++) acc[j][q] = V_ZERO();
    }
    TA_PF_BEGIN(pf);
    for (int64_t p = 0; p < d; p += 2) {
        TA_PF_STEP(pf); /* the caller's stream: a line every pair (attn_qk: every other d) */
        if ((p & 31) == 0) /* the next micro-tile's keys, one line ahead per row */
#pragma GCC unroll 16
            for (int j = 0; j < TILE_KJ; j++) __builtin_prefetch(kr[j] + TILE_KJ * ldk + p);
        VB qv[TILE_QV];
#pragma GCC unroll 4
        for (int q = 0; q < TILE_QV; q++)
            if (q < NQ) qv[q] = VB_LOAD(qp + p * TMQ + 2 * q * VL);
#pragma GCC unroll 16
        for (int j = 0; j < TILE_KJ; j++) {
            if (j >= nj) break;
            const VB kb = VB_BCAST_PAIR(kr[j] + p);
#pragma GCC unroll 4
            for (int q = 0; q < TILE_QV; q++)
                if (q < NQ) acc[j][q] = V_DOT_BF16(acc[j][q], qv[q], kb);
        }
    }
    TA_PF_END(pf);
    const VT sc = V_SET1(scale);
#pragma GCC unroll 16
    for (int j = 0; j < TILE_KJ; j++) {
        if (j >= nj) break;
#pragma GCC unroll 4
        for (int q = 0; q < TILE_QV; q++)
            if (q < NQ) V_STOREU(s + j * TMQ + q * VL, V_MUL(acc[j][q], sc));
    }
}

/* nj keys (<= TILE_KJ) for the query vectors q0 .. q0 + nq - 1 (nq <= TILE_QV). */
ROWS_INLINE void qk_tile_block(float *s, const uint16_t *qp, const uint16_t *k, int64_t ldk,
                               int64_t d, float scale, int nj, int q0, int nq, ta_pf *pf)
{
    float *sq = s + q0 * VL;
    const uint16_t *qq = qp + 2 * q0 * VL;
#define TQ(nq_, n)                                                                           \
    if (n <= TILE_KJ && nq_ <= TILE_QV) qk_tile_micro(sq, qq, k, ldk, d, scale, n, nq_, pf)
#define TQ_SWITCH(nq_)                                                                       \
    switch (nj) {                                                                            \
    case 1: TQ(nq_, 1); break; case 2: TQ(nq_, 2); break; case 3: TQ(nq_, 3); break;        \
    case 4: TQ(nq_, 4); break; case 5: TQ(nq_, 5); break; case 6: TQ(nq_, 6); break;        \
    case 7: TQ(nq_, 7); break; case 8: TQ(nq_, 8); break; default: break;                  \
    }
    switch (nq) {
    case 1: TQ_SWITCH(1) break;
    case 2: TQ_SWITCH(2) break;
    case 3: TQ_SWITCH(3) break;
    default: break;
    }
#undef TQ_SWITCH
#undef TQ
}

_Static_assert(TILE_KJ >= 1 && TILE_KJ <= 8 && TILE_QV >= 1 && TILE_QV <= 3,
               "attn_rows_template.h: the bfloat16 tile kernel's switches: KJ 1..8, QV 1..3");

/* s [nk, MQ] = scale (qp^T K^T) for nk bfloat16 key rows (stride ldk elements) and the
 * tile's q pairs qp [d / 2][MQ][2], d even; rowk as attn_qk's (blocks of TILE_KJ keys for
 * the query vectors from the first to the last that needs them). */
void NAME_QK_TILE_BF16DOT(float *s, const uint16_t *qp, const uint16_t *k, int64_t ldk,
                          int64_t nk, int64_t d, float scale, const int32_t *rowk, ta_pf *pf)
{
    int32_t need[TILE_QV];
    ta_qk_vector_needs(need, TILE_QV, VL, rowk, nk);
    for (int64_t j = 0; j < nk; j += TILE_KJ) {
        const int nj = (int)(nk - j < TILE_KJ ? nk - j : TILE_KJ);
        int q0;
        const int nq = ta_qk_vectors_at(need, TILE_QV, j, &q0);
        if (nq) qk_tile_block(s + j * TMQ, qp, k + j * ldk, ldk, d, scale, nj, q0, nq, pf);
    }
}
#undef TMQ
#endif

#ifdef NAME_QK_F32
#define QK_ENTRY(NAME, KIND)                                                                 \
    void NAME(float *s, int64_t mqs, const float *q, int64_t ldq, int64_t mq,                \
              const void *const *k, int64_t koff, int64_t nk, int64_t d, int64_t avail,     \
              const void *const *v, int64_t voff, int64_t vbytes, ta_pf *pf)                \
    {                                                                                        \
        qk_entry(s, mqs, q, ldq, mq, 1.0f, k, koff, nk, d, avail, v, voff, vbytes, pf, KIND, 0); \
    }
QK_ENTRY(NAME_QK_F32, KIND_F32)
QK_ENTRY(NAME_QK_F16, KIND_F16)
QK_ENTRY(NAME_QK_BF16, KIND_BF16)
#undef QK_ENTRY
#endif

#ifdef NAME_QK_BF16DOT
void NAME_QK_BF16DOT(float *s, int64_t mqs, const uint16_t *q, int64_t ldq, int64_t mq,
                     float scale, const void *const *k, int64_t koff, int64_t nk, int64_t d,
                     int64_t avail, const void *const *v, int64_t voff, int64_t vbytes,
                     ta_pf *pf)
{
    qk_entry(s, mqs, q, ldq, mq, scale, k, koff, nk, d, avail, v, voff, vbytes, pf, KIND_BF16,
             1);
}
#endif

#ifdef NAME_PV_F32
/* o[r, c0 + c * VL ..] = o * alpha[r] + sum_j p[j * mqs + r] v_j[c0 + c * VL ..] for R rows
 * (a constant) and NV column vectors (a constant), keys in order: per element the
 * operations of attn_pv (o * alpha, then one FMA per key in key order), so bitwise its
 * results. */
ROWS_INLINE void pv_group(float *o, int64_t ldo, const float *p, int64_t mqs,
                          const float *alpha, const void *const *v, int64_t voff, int64_t nk,
                          int64_t c0, int64_t avail, int64_t bytes, ta_pf *pf, int64_t per,
                          const int R, const int NV, const int kind, const int PFS)
{
    /* bfloat16 in pairs of vectors: a V block of 2 VL widens by a shift (even columns) and
     * a mask (odd), so each pair of accumulators holds its columns deinterleaved. */
    const int EO = kind == KIND_BF16 && NV % 2 == 0;
    VT acc[8][8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        const VT a = V_SET1(alpha[r]);
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) acc[r][c] = V_LOADU(o + r * ldo + c0 + c * VL);
        if (EO) {
#pragma GCC unroll 8
            for (int c = 0; c < NV; c += 2)
                V_DEINTERLEAVE(acc[r][c], acc[r][c + 1], &acc[r][c], &acc[r][c + 1]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) acc[r][c] = V_MUL(acc[r][c], a);
    }
    TA_PF_BEGIN(pf);
    /* the group's first column folded into the offset, so that the loads below take
     * constant displacements (four column offsets held in registers crowded the key
     * loop: the table's base went to a vector register, the stride to the stack) */
    const int64_t vo = voff + c0 * (kind == KIND_F32 ? 4 : 2);
    for (int64_t j = 0; j < nk; j++) {
        const char *vr = (const char *)v[j] + vo;
        if (PFS) /* the caller's stream instead of the rows ahead */
            for (int64_t i = 0; i < per; i++) TA_PF_STEP_HINT(pf, !ta_stream_prefetch_l1);
        else if (c0 == 0 && j % 4 == 0) /* the next 4 rows' lines: the key loop stays innermost */
            for (int64_t i = j; i < j + 4; i++) prefetch_row(v, voff, i, avail, bytes);
        VT pb[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) pb[r] = V_BCAST(p + j * mqs + r);
#pragma GCC unroll 8
        for (int c = 0; c < NV; c += 1 + EO) {
            VT v0, v1;
            if (EO) V_LOAD_BF16_EO((const uint16_t *)(const void *)vr + c * VL, &v0, &v1);
            else v0 = v1 = load_kind(vr, c * VL, kind);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                acc[r][c] = V_FMA(pb[r], v0, acc[r][c]);
                if (EO) acc[r][c + 1] = V_FMA(pb[r], v1, acc[r][c + 1]);
            }
        }
    }
    TA_PF_END(pf);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        if (EO) {
#pragma GCC unroll 8
            for (int c = 0; c < NV; c += 2)
                V_INTERLEAVE(acc[r][c], acc[r][c + 1], &acc[r][c], &acc[r][c + 1]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) V_STOREU(o + r * ldo + c0 + c * VL, acc[r][c]);
    }
}

/* The column groups pv_rows runs for dv columns of R rows (its choice of widths). */
static inline int64_t pv_groups(int64_t dv, int R)
{
    const int NVMAX = PV_ACC / R >= 8 ? 8 : PV_ACC / R >= 4 ? 4 : PV_ACC / R >= 2 ? 2 : 1;
    int64_t n = 0;
    for (int64_t left = dv / VL; left > 0; n++)
        left -= NVMAX >= 8 && left >= 8 ? 8 : NVMAX >= 4 && left >= 4 ? 4 : NVMAX >= 2 && left >= 2 ? 2 : 1;
    return n;
}

/* All dv columns of R rows: column groups of the most vectors (8, 4, 2 or 1) that fit
 * PV_ACC accumulators and the columns left (pv_groups counts them). */
ROWS_INLINE void pv_rows(float *o, int64_t ldo, const float *p, int64_t mqs,
                         const float *alpha, const void *const *v, int64_t voff, int64_t nk,
                         int64_t dv, int64_t avail, ta_pf *pf, int64_t per, const int R,
                         const int kind)
{
    const int64_t bytes = dv * (kind == KIND_F32 ? 4 : 2);
    const int NVMAX = PV_ACC / R >= 8 ? 8 : PV_ACC / R >= 4 ? 4 : PV_ACC / R >= 2 ? 2 : 1;
    /* a stream or the rows ahead: two instances, no test in the key loop */
#define PV_GROUP(nv) (pf ? pv_group(o, ldo, p, mqs, alpha, v, voff, nk, c0, avail, bytes, pf, per, R, nv, kind, 1) \
                         : pv_group(o, ldo, p, mqs, alpha, v, voff, nk, c0, avail, bytes, NULL, 0, R, nv, kind, 0))
    for (int64_t c0 = 0; c0 < dv;) {
        const int64_t left = (dv - c0) / VL;
        if (NVMAX >= 8 && left >= 8) {
            PV_GROUP(8);
            c0 += 8 * VL;
        } else if (NVMAX >= 4 && left >= 4) {
            PV_GROUP(4);
            c0 += 4 * VL;
        } else if (NVMAX >= 2 && left >= 2) {
            PV_GROUP(2);
            c0 += 2 * VL;
        } else {
            PV_GROUP(1);
            c0 += VL;
        }
    }
#undef PV_GROUP
}

/* o [mq rows, ldo] = o * alpha + p [nk, mqs]^T v for the nk value rows the table v points
 * to (of the kind's type, dv columns), mq <= 8, prefetching from the table's avail rows:
 * passes of up to
 * ROWS_MAX rows. */
#define PV_ENTRY(NAME, KIND)                                                                 \
    void NAME(float *o, int64_t ldo, const float *p, int64_t mqs, const float *alpha,       \
              const void *const *v, int64_t voff, int64_t nk, int64_t dv, int64_t mq,       \
              int64_t avail, ta_pf *pf)                                                      \
    {                                                                                        \
        /* the stream's lines spread over every key of every column group and pass */       \
        int64_t steps = 0;                                                                   \
        for (int64_t r0 = 0; pf && r0 < mq; r0 += ROWS_MAX)                                  \
            steps += nk * pv_groups(dv, (int)(mq - r0 < ROWS_MAX ? mq - r0 : ROWS_MAX));     \
        const int64_t per = pf_per_step(pf, steps);                                          \
        for (int64_t r0 = 0; r0 < mq; r0 += ROWS_MAX) {                                      \
            float *orow = o + r0 * ldo;                                                      \
            const float *pr = p + r0, *ar = alpha + r0;                                      \
            switch (mq - r0 < ROWS_MAX ? mq - r0 : ROWS_MAX) {                               \
            case 1: pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 1, KIND); break; \
            case 2: if (ROWS_MAX >= 2) pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 2, KIND); break; \
            case 3: if (ROWS_MAX >= 3) pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 3, KIND); break; \
            case 4: if (ROWS_MAX >= 4) pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 4, KIND); break; \
            case 5: if (ROWS_MAX >= 5) pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 5, KIND); break; \
            case 6: if (ROWS_MAX >= 6) pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 6, KIND); break; \
            case 7: if (ROWS_MAX >= 7) pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 7, KIND); break; \
            case 8: if (ROWS_MAX >= 8) pv_rows(orow, ldo, pr, mqs, ar, v, voff, nk, dv, avail, pf, per, 8, KIND); break; \
            default: break;                                                                  \
            }                                                                                \
        }                                                                                    \
    }
PV_ENTRY(NAME_PV_F32, KIND_F32)
PV_ENTRY(NAME_PV_F16, KIND_F16)
PV_ENTRY(NAME_PV_BF16, KIND_BF16)
#undef PV_ENTRY
#endif /* NAME_PV_F32 */

#ifdef NAME_SOFTMAX_ROWS
/* The online-softmax step of attn_softmax for the rows r < mq (<= ROWS_MAX) of a score
 * tile s [nk, mqs], with the lanes holding (key, row) pairs instead of one key's rows: G
 * rows (the smallest power of two >= mq: 1, 2, 4 or 8; rows mq .. G - 1 are computed on
 * whatever s holds there and stored back, as attn_softmax does with its vectors' idle
 * rows) by VL / G keys a vector, through a copy in t (nk <= SM_KEYS per chunk), so that a
 * decode tile of 4 rows computes 4 exps a lane where attn_softmax's vectors would hold 12
 * idle lanes, and one row 16 keys a vector. A tile already packed that way (mqs == G) is
 * worked in place, with no copy: its padding keys (up to a whole vector past nk) are
 * written as -inf, then 0. Per row the same definition: m' = max(m, max_j s) (NaN does
 * not enter it), u = m' or 0 when m' = -inf, alpha = exp(m - u), s = exp(s - u), l = l
 * alpha + sum_j s (the lanes' sums of two chains, then the key slots in order), m = m'. */
#define SM_KEYS 64
/* The exps of softmax_rows_g's nv vectors at tp (in place), into its two chains (vector v
 * in chain v mod 2); p as attn_softmax's (sm_p, form MODE: softmax_forms.h). */
ROWS_INLINE void rows_exps(float *tp, int64_t nv, const sm_shift *sh, VT *sum0, VT *sum1,
                           const int MODE, const int SAFE)
{
    int64_t v = 0;
    for (; v + 2 <= nv; v += 2) {
        const VT p0 = sm_p(V_LOADU(tp + v * VL), sh, MODE, SAFE);
        const VT p1 = sm_p(V_LOADU(tp + (v + 1) * VL), sh, MODE, SAFE);
        V_STOREU(tp + v * VL, p0);
        V_STOREU(tp + (v + 1) * VL, p1);
        *sum0 = V_ADD(*sum0, p0);
        *sum1 = V_ADD(*sum1, p1);
    }
    if (v < nv) {
        const VT p0 = sm_p(V_LOADU(tp + v * VL), sh, MODE, SAFE);
        V_STOREU(tp + v * VL, p0);
        *sum0 = V_ADD(*sum0, p0);
    }
}

/* Rows r < mq of n keys of s (stride mqs) into t (stride G), rows mq .. G - 1 there 0:
 * the rows past mq of s are scratch no kernel wrote (attn_qk_rows stores real rows). */
ROWS_INLINE void rows_copy(float *t, const float *s, int64_t mqs, int64_t n, int mq, const int G)
{
    for (int64_t j = 0; j < n; j++) {
        memcpy(t + j * G, s + j * mqs, sizeof(float) * (size_t)mq);
        for (int r = mq; r < G; r++) t[j * G + r] = 0.0f;
    }
}

ROWS_INLINE void softmax_rows_g(float *s, int64_t mqs, float *m, float *l, float *alpha,
                                int64_t nk, int mq, const int G, const int SAFE)
{
    const int KPV = VL / G;
    float t[SM_KEYS * 8];
    float mv[VL], uv[VL], sv[VL];
    const float ninf = -__builtin_inff();
    for (int i = 0; i < VL; i++) mv[i] = m[i % G];
    VT mx = V_LOADU(mv);
    const bool packed = mqs == G; /* s is the copy's layout: in place */
    const bool one = nk <= SM_KEYS; /* t still holds the tile for the second pass */
    for (int64_t j0 = 0; j0 < nk; j0 += SM_KEYS) {
        const int64_t n = nk - j0 < SM_KEYS ? nk - j0 : SM_KEYS, nv = (n + KPV - 1) / KPV;
        float *tp = packed ? s + j0 * G : t;
        if (!packed) rows_copy(t, s + j0 * mqs, mqs, n, mq, G);
        for (int64_t j = n; j < nv * KPV; j++)
            for (int r = 0; r < G; r++) tp[j * G + r] = ninf;
        for (int64_t v = 0; v < nv; v++) mx = V_MAX(V_LOADU(tp + v * VL), mx);
    }
    V_STOREU(mv, mx);
    for (int r = 0; r < G; r++) { /* the key slots' maxima, NaN-free as V_MAX keeps them */
        float x = mv[r];
        for (int k = 1; k < KPV; k++) x = mv[k * G + r] > x ? mv[k * G + r] : x;
        mv[r] = x;
    }
    for (int i = 0; i < VL; i++) {
        const float mr = mv[i % G];
        uv[i] = mr == ninf ? 0.0f : mr;
        sv[i] = m[i % G];
    }
    uint32_t rows = 0; /* the lanes of rows < mq */
    for (int i = 0; i < VL; i++) rows |= (uint32_t)(i % G < mq) << i;
    VT a; /* alpha per row (every key slot alike) */
    const sm_shift sh = sm_shift_of(V_LOADU(uv), V_LOADU(sv), rows, &a, SAFE);
    V_STOREU(sv, a);
    VT sum0 = V_ZERO(), sum1 = V_ZERO();
    for (int64_t j0 = 0; j0 < nk; j0 += SM_KEYS) {
        const int64_t n = nk - j0 < SM_KEYS ? nk - j0 : SM_KEYS, nv = (n + KPV - 1) / KPV;
        float *tp = packed ? s + j0 * G : t;
        if (!one && !packed) rows_copy(t, s + j0 * mqs, mqs, n, mq, G);
        for (int64_t j = n; j < nv * KPV; j++) /* padding keys: exp(-inf) = 0 */
            for (int r = 0; r < G; r++) tp[j * G + r] = ninf;
#ifdef V_EXP2 /* in base 2, as attn_softmax (kernels.h, attn_softmax_exp2) */
        if (sh.mode == 2) rows_exps(tp, nv, &sh, &sum0, &sum1, 2, SAFE);
        else rows_exps(tp, nv, &sh, &sum0, &sum1, 1, SAFE);
#else
        rows_exps(tp, nv, &sh, &sum0, &sum1, 0, SAFE);
#endif
        if (!packed) /* rows mq .. G - 1 of s are scratch, as in attn_softmax */
            for (int64_t j = 0; j < n; j++) memcpy(s + (j0 + j) * mqs, t + j * G, sizeof(float) * (size_t)G);
    }
    float tot[VL];
    V_STOREU(tot, V_ADD(sum0, sum1));
    for (int r = 0; r < mq; r++) {
        float x = tot[r];
        for (int k = 1; k < KPV; k++) x += tot[k * G + r];
        l[r] = l[r] * sv[r] + x;
        m[r] = mv[r];
        alpha[r] = sv[r];
    }
}

/* softmax_rows_g with the exp form ta_exp_denormal_assist picks. */
ROWS_INLINE void softmax_rows_form(float *s, int64_t mqs, float *m, float *l, float *alpha,
                                   int64_t nk, int mq, const int G)
{
    if (ta_exp_denormal_assist) softmax_rows_g(s, mqs, m, l, alpha, nk, mq, G, 1);
    else softmax_rows_g(s, mqs, m, l, alpha, nk, mq, G, 0);
}

/* softmax_rows_g over the rows r < mq of s [nk, mqs] (m, l, alpha: rows >= mq untouched). */
void NAME_SOFTMAX_ROWS(float *s, int64_t mqs, float *m, float *l, float *alpha, int64_t nk,
                       int64_t mq)
{
    if (VL < 4) { /* one-lane vectors: a key a vector, per row */
        for (int64_t r = 0; r < mq; r++)
            softmax_rows_form(s + r, mqs, m + r, l + r, alpha + r, nk, 1, VL < 4 ? VL : 4);
        return;
    }
    /* G = 1 and 2 were G = 4 before session 16: a one-row decode (the [B, H, L, D] float32
     * path) spent three quarters of its exps on idle rows */
    if (mq <= 1) softmax_rows_form(s, mqs, m, l, alpha, nk, 1, 1);
    else if (mq <= 2) softmax_rows_form(s, mqs, m, l, alpha, nk, (int)mq, 2);
    else if (mq <= 4 || VL < 8) softmax_rows_form(s, mqs, m, l, alpha, nk, (int)mq, 4);
    else softmax_rows_form(s, mqs, m, l, alpha, nk, (int)mq, VL < 8 ? 4 : 8);
}
#undef SM_KEYS
#endif /* NAME_SOFTMAX_ROWS */

/* The entries this instance defines (the others stay the parent's). */
void FILL_FN(ta_kernels *k)
{
#ifdef NAME_SOFTMAX_ROWS
    k->attn_softmax_rows = NAME_SOFTMAX_ROWS;
#endif
#ifdef NAME_QK_F32
    k->attn_qk_rows_kv[KIND_F32] = NAME_QK_F32;
    k->attn_qk_rows_kv[KIND_F16] = NAME_QK_F16;
    k->attn_qk_rows_kv[KIND_BF16] = NAME_QK_BF16;
#endif
#ifdef NAME_PV_F32
    k->attn_pv_rows_kv[KIND_F32] = NAME_PV_F32;
    k->attn_pv_rows_kv[KIND_F16] = NAME_PV_F16;
    k->attn_pv_rows_kv[KIND_BF16] = NAME_PV_BF16;
#endif
#ifdef NAME_QK_BF16DOT
    k->attn_qk_rows_bf16dot = NAME_QK_BF16DOT;
#endif
#ifdef NAME_QK_TILE_BF16DOT
    if (k->attn_mq == TILE_QV * VL) k->attn_qk_bf16dot = NAME_QK_TILE_BF16DOT; /* its tile */
#endif
    (void)k;
}
