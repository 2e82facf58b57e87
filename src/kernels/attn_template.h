/* The attention micro-kernels, written once over a small vector vocabulary and
 * instantiated per ISA by attn_scalar.c, attn_avx2.c and attn_avx512.c (each with its
 * own -m flags). Contracts: docs/kernels.md, section "Attention".
 *
 * The including file defines:
 *   VT, VL           the vector type and its lanes (float and 1 for scalar code);
 *   QV, KJ           Q.K^T micro-tile: QV vectors of queries (MQ = QV * VL lanes) by KJ
 *                    keys, QV * KJ accumulators held in registers;
 *   PR, PC           P.V micro-tile: PR query rows by PC vectors of output columns;
 *   DR, DC, ROWS_MAX dot-product Q.K^T for tiles of few rows: DR rows per pass over a
 *                    key, DC accumulators (chains) per row along d (DC_FEW for passes of
 *                    1 or 2 rows: more chains); the driver uses it on
 *                    tiles of <= ROWS_MAX rows, and attn_pv streams V for them,
 *   RP, PCW          RP rows by PCW vectors (whole V rows of up to PCW * VL columns)
 *                    per pass;
 *   V_ZERO() V_SET1(x) V_LOADU(p) V_STOREU(p, v) V_LOADN(p, n) (lanes >= n read as 0,
 *   memory past them untouched) V_STOREN(p, v, n) V_ADD V_SUB V_MUL V_FMA(a, b, c) = a*b+c
 *   V_MAX(s, m) (m when s is NaN) V_NEGINF_TO_ZERO(v) V_EXP(v) V_EXP_ONEPASS(v) (the
 *   same bits as V_EXP, for cores where results in the denormals cost no microcode
 *   assist: ta_exp_denormal_assist = 0) V_REDUCE_ADD(v) (a float: the lanes' sum in a
 *   fixed order);
 *   V_TRANSPOSE8_SCALED(dst, ld, rows, p0, scale) (optional: dst[i * ld + r] =
 *   scale * rows[r][p0 + i] for an 8 x 8 block), V_TRANSPOSE16_SCALED (optional: the
 *   same for a 16 x 16 block);
 *   NAME_QK, NAME_QK_ROWS, NAME_SOFTMAX, NAME_PV, NAME_EXP, NAME_PACKQ, NAME_SCALE_ROW,
 *   NAME_FINISH_ROWS,
 *   FILL_FN: the exported names.
 *
 * Layout (lanes are queries, so the online softmax is vertical, never a horizontal
 * reduction): the query tile is packed transposed, qp[p * MQ + r] = Q[row r, p] * scale;
 * a score tile is s[j * MQ + r] for key j of the tile and query row r. The dot-product
 * kernel (decode: one row, or a few grouped heads) reads the rows untransposed instead,
 * q[r * ldq + p], and writes the same score layout. */
#include "kernels/kernels.h"
#include "kernels/softmax_forms.h"

#include <stdint.h>

#define MQ (QV * VL)
#define ATTN_INLINE static inline __attribute__((always_inline))

/* The limits of the switches below (a tile over them would silently compute nothing). */
_Static_assert(KJ >= 1 && KJ <= 12, "attn_template.h: QK_SWITCH has cases for 1..12 keys");
_Static_assert(PC >= 1 && PC <= 8, "attn_template.h: PV_TAIL has cases for 1..8 vectors");
_Static_assert(QV >= 1 && QV <= 4 && PR >= 1 && PR <= 16,
               "attn_template.h: QV in 1..4 (qk_block's cases), PR in 1..16 (the loops unroll 16)");
_Static_assert(MQ % PR == 0, "attn_template.h: attn_mq must be a multiple of attn_pr");
_Static_assert(DC >= 1 && DC <= 16, "attn_template.h: DC in 1..16 (the loops unroll 16)");
_Static_assert(DC_FEW >= 1 && DC_FEW <= 16, "attn_template.h: DC_FEW in 1..16");
#define DC_MAX (DC_FEW > DC ? DC_FEW : DC)
_Static_assert(DR >= 1 && DR <= 16, "attn_template.h: ROWS_SWITCH has cases for 1..16 rows");
_Static_assert(ROWS_MAX >= 1 && ROWS_MAX <= MQ, "attn_template.h: ROWS_MAX in 1..attn_mq");
_Static_assert(RP >= 1 && RP <= 16 && PCW >= 1 && PCW <= 16,
               "attn_template.h: RP and PCW in 1..16 (ROWS_SWITCH)");

/* s[j, q * VL ..] = qp^T k_j for nj keys and the NQ query vectors from q0 (nj and NQ
 * constants after inlining; q0 any): NQ * KJ accumulators held across the d loop. */
ATTN_INLINE void qk_micro(float *s, const float *qp, const float *k, int64_t ldk, int64_t d,
                          const int nj, const int NQ, ta_pf *pf)
{
    VT acc[KJ][QV];
    const float *kr[KJ];
#pragma GCC unroll 16
    for (int j = 0; j < KJ; j++) {
        kr[j] = k + (j < nj ? j : 0) * ldk;
#pragma GCC unroll 16
        for (int q = 0; q < QV; q++) acc[j][q] = V_ZERO();
    }
    TA_PF_BEGIN(pf);
    for (int64_t p = 0; p < d; p++) {
        if (p & 1) TA_PF_STEP(pf); /* the caller's stream, a line every other step */
        if ((p & 15) == 0) /* the next micro-tile's keys, one line ahead per row */
#pragma GCC unroll 16
            for (int j = 0; j < KJ; j++) __builtin_prefetch(kr[j] + KJ * ldk + p);
        VT qv[QV];
#pragma GCC unroll 16
        for (int q = 0; q < QV; q++)
            if (q < NQ) qv[q] = V_LOADU(qp + p * MQ + q * VL);
#pragma GCC unroll 16
        for (int j = 0; j < KJ; j++) {
            if (j >= nj) break;
            VT kb = V_SET1(kr[j][p]);
#pragma GCC unroll 16
            for (int q = 0; q < QV; q++)
                if (q < NQ) acc[j][q] = V_FMA(kb, qv[q], acc[j][q]);
        }
    }
    TA_PF_END(pf);
#pragma GCC unroll 16
    for (int j = 0; j < KJ; j++) {
        if (j >= nj) break;
#pragma GCC unroll 16
        for (int q = 0; q < QV; q++)
            if (q < NQ) V_STOREU(s + j * MQ + q * VL, acc[j][q]);
    }
}

#define QK_SWITCH(call, n)                                                                 \
    switch (n) { /* one instance per key count keeps each unrolled */                      \
    case 1: call(1); break; case 2: call(2); break; case 3: call(3); break;                \
    case 4: call(4); break; case 5: call(5); break; case 6: call(6); break;                \
    case 7: call(7); break; case 8: call(8); break; case 9: call(9); break;                \
    case 10: call(10); break; case 11: call(11); break; case 12: call(12); break;          \
    default: break;                                                                        \
    }

/* nj keys (<= KJ) for the query vectors q0 .. q0 + nq - 1 (nq <= QV). */
ATTN_INLINE void qk_block(float *s, const float *qp, const float *k, int64_t ldk, int64_t d,
                          int nj, int q0, int nq, ta_pf *pf)
{
    float *sq = s + q0 * VL;
    const float *qq = qp + q0 * VL;
#define QK_NQ(nq_, n) if (n <= KJ && nq_ <= QV) qk_micro(sq, qq, k, ldk, d, n, nq_, pf)
#define QK_NQ1(n) QK_NQ(1, n)
#define QK_NQ2(n) QK_NQ(2, n)
#define QK_NQ3(n) QK_NQ(3, n)
#define QK_NQ4(n) QK_NQ(4, n)
    switch (nq) {
    case 1: QK_SWITCH(QK_NQ1, nj) break;
    case 2: QK_SWITCH(QK_NQ2, nj) break;
    case 3: QK_SWITCH(QK_NQ3, nj) break;
    case 4: QK_SWITCH(QK_NQ4, nj) break;
    default: break;
    }
#undef QK_NQ
#undef QK_NQ1
#undef QK_NQ2
#undef QK_NQ3
#undef QK_NQ4
}

/* s [nk, MQ] = (qp [d, MQ])^T-contract k [nk rows of d, row stride ldk]. rowk NULL: every
 * row needs all nk keys; else row r needs keys < rowk[r] only, and each block of KJ keys
 * is computed for the query vectors from the first to the last one that holds a row
 * needing it, in one micro-tile (the scores of other vectors are left as they were: the
 * caller masks them; a vector in that range that needs none of the block gets scores it
 * will mask). */
void NAME_QK(float *s, const float *qp, const float *k, int64_t ldk, int64_t nk, int64_t d,
             const int32_t *rowk, ta_pf *pf)
{
    int32_t need[QV];
    ta_qk_vector_needs(need, QV, VL, rowk, nk);
    for (int64_t j = 0; j < nk; j += KJ) {
        const int nj = (int)(nk - j < KJ ? nk - j : KJ);
        int q0;
        const int nq = ta_qk_vectors_at(need, QV, j, &q0);
        if (nq) qk_block(s + j * MQ, qp, k + j * ldk, ldk, d, nj, q0, nq, pf);
    }
}

#define ROWS_SWITCH(call, n)                                                               \
    switch (n) { /* one instance per row count (1 .. 16) keeps each unrolled */            \
    case 1: call(1); break; case 2: call(2); break; case 3: call(3); break;                \
    case 4: call(4); break; case 5: call(5); break; case 6: call(6); break;                \
    case 7: call(7); break; case 8: call(8); break; case 9: call(9); break;                \
    case 10: call(10); break; case 11: call(11); break; case 12: call(12); break;          \
    case 13: call(13); break; case 14: call(14); break; case 15: call(15); break;          \
    case 16: call(16); break; default: break;                                              \
    }

/* The K and V rows of a tile of few rows (a decode step) come from memory once: each
 * row is read front to back, one key after the other, so that the hardware prefetcher
 * sees one sequential stream per operand. (Reading several rows interleaved, line by
 * line, as qk_micro does, halved the bandwidth one Zen 4 core got; software prefetches
 * on top of the sequential streams lowered it too: docs/kernels.md.) */

/* s[r * MQ] = q_r . k for NR rows (a constant) and one key: DC chains per row, step t of
 * VL lanes (t = p / VL) in chain t mod DC; the chains are added in order, then the lanes
 * (V_REDUCE_ADD). Of the last steps (fewer than DC), a partial one uses masked loads. */
ATTN_INLINE void dot_key(float *s, const float *q, int64_t ldq, const float *k, int64_t d,
                         const int NR)
{
    /* few rows: more chains (the FMA latency, not the loads, bounds a short tile) */
    const int DCN = NR <= 2 ? DC_FEW : DC;
    VT acc[DR][DC_MAX];
#pragma GCC unroll 16
    for (int r = 0; r < DR; r++)
#pragma GCC unroll 16
        for (int c = 0; c < DC_MAX; c++) acc[r][c] = V_ZERO();
    int64_t p = 0;
    for (; p + DCN * VL <= d; p += DCN * VL) {
#pragma GCC unroll 16
        for (int c = 0; c < DC_MAX; c++) {
            if (c >= DCN) break;
            VT kv = V_LOADU(k + p + c * VL);
#pragma GCC unroll 16
            for (int r = 0; r < DR; r++) {
                if (r >= NR) break;
                acc[r][c] = V_FMA(V_LOADU(q + r * ldq + p + c * VL), kv, acc[r][c]);
            }
        }
    }
#pragma GCC unroll 16
    for (int c = 0; c < DC_MAX; c++, p += VL) {
        if (c >= DCN || p >= d) break;
        const int n = d - p < VL ? (int)(d - p) : VL;
        VT kv = n == VL ? V_LOADU(k + p) : V_LOADN(k + p, n); /* see pv_whole_rows */
#pragma GCC unroll 16
        for (int r = 0; r < DR; r++) {
            if (r >= NR) break;
            VT qv = n == VL ? V_LOADU(q + r * ldq + p) : V_LOADN(q + r * ldq + p, n);
            acc[r][c] = V_FMA(qv, kv, acc[r][c]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < DR; r++) {
        if (r >= NR) break;
        VT t = acc[r][0];
#pragma GCC unroll 16
        for (int c = 1; c < DC_MAX; c++)
            if (c < DCN) t = V_ADD(t, acc[r][c]);
        s[r] = V_REDUCE_ADD(t);
    }
}

/* s [nk, MQ] (rows < mq only) = q [mq rows of d, stride ldq] K^T for nk keys of k (rows
 * of d, stride ldk): the Q.K^T of a tile with few real rows (decode), where attn_qk's
 * lanes would hold one row. Key by key (a stream), the rows in groups of DR. */
void NAME_QK_ROWS(float *s, const float *q, int64_t ldq, int64_t mq, const float *k,
                  int64_t ldk, int64_t nk, int64_t d)
{
    const int64_t pfd = ta_stream_prefetch_rows;
    const int l1 = ta_stream_prefetch_l1;
    for (int64_t j = 0; j < nk; j++) {
        if (pfd) { /* the row pfd keys ahead, line by line, into L1 or L2 (kernels.h) */
            const float *pr = k + (j + pfd) * ldk;
            if (l1)
                for (int64_t c = 0; c < d; c += 16) __builtin_prefetch(pr + c, 0, 3);
            else
                for (int64_t c = 0; c < d; c += 16) __builtin_prefetch(pr + c, 0, 2);
        }
        for (int64_t r0 = 0; r0 < mq; r0 += DR) {
            const int nr = (int)(mq - r0 < DR ? mq - r0 : DR);
#define DOT_ROWS(n) if (n <= DR) dot_key(s + j * MQ + r0, q + r0 * ldq, ldq, k + j * ldk, d, n)
            ROWS_SWITCH(DOT_ROWS, nr)
#undef DOT_ROWS
        }
    }
}

/* The exps of one vector of rows of the softmax step (s: its first lane, keys MQ floats
 * apart; keys [0, full) every lane sees, [full, need) through the counts rk): s[j] =
 * p(s[j]) (sm_p, form MODE: softmax_forms.h), returning the sum of the p in the step's
 * order (two chains, key j in chain j mod 2: the add latency, not the exp, bounds one). */
ATTN_INLINE VT sm_exps(float *s, int64_t full, int64_t need, VI rk, const sm_shift *sh,
                       const int MODE, const int SAFE)
{
#define SM_P(x) sm_p(x, sh, MODE, SAFE)
#define SM_PLAIN(j) V_LOADU(s + (j) * MQ)
#define SM_KEEP(j) V_KEEP_KEYS(V_LOADU(s + (j) * MQ), rk, (int32_t)(j))
#define SM_EXP2(LOAD)                                                                      \
    do {                                                                                   \
        VT p0 = SM_P(LOAD(j));                                                             \
        VT p1 = SM_P(LOAD(j + 1));                                                         \
        V_STOREU(s + j * MQ, p0);                                                          \
        V_STOREU(s + (j + 1) * MQ, p1);                                                    \
        sum0 = V_ADD(sum0, p0);                                                            \
        sum1 = V_ADD(sum1, p1);                                                            \
    } while (0)
    VT sum0 = V_ZERO(), sum1 = V_ZERO();
    int64_t j = 0;
    for (; j + 2 <= full; j += 2) SM_EXP2(SM_PLAIN);
    for (; j + 2 <= need; j += 2) SM_EXP2(SM_KEEP);
    if (j < need) { /* j even: chain 0 */
        VT p0 = SM_P(SM_KEEP(j));
        V_STOREU(s + j * MQ, p0);
        sum0 = V_ADD(sum0, p0);
    }
#undef SM_EXP2
#undef SM_PLAIN
#undef SM_KEEP
#undef SM_P
    return V_ADD(sum0, sum1);
}

/* One online-softmax step over a score tile s [nk, MQ], per query lane r:
 *   m' = max(m, max_j s[j]) (NaN scores do not enter the max; they reach l below),
 *   u  = m' unless m' = -inf (then 0, so that -inf - -inf never makes a NaN),
 *   alpha = exp(m - u), s[j] = exp(s[j] - u), l = l * alpha + sum_j s[j], m = m'.
 * The sum runs over j in order (key j into chain j mod 2): the result depends only on
 * the tile. Only the vectors that hold a row < mq are computed (a decode tile of one
 * row: one vector of QV). rowk NULL: every key counts; else lane r sees keys j <
 * rowk[r] only (rowk holds MQ counts), the others as if s[j] were -inf (p = 0): the
 * same bits as blocking them first. Keys past every lane's count of a vector need no
 * exp (their p is 0) and no max: a vector on the causal diagonal computes only the
 * keys its rows see. */
ATTN_INLINE void softmax_step(float *s, float *m, float *l, float *alpha, int64_t nk,
                              int64_t mq, const int32_t *rowk, const int SAFE)
{
    for (int q = 0; q < QV && (int64_t)q * VL < mq; q++) {
        /* keys [0, full) every lane sees, [need, nk) none */
        int64_t full = nk, need = 0;
        for (int r = 0; r < VL; r++) {
            const int64_t c = rowk ? (rowk[q * VL + r] < nk ? rowk[q * VL + r] : nk) : nk;
            full = c < full ? c : full;
            need = c > need ? c : need;
        }
        /* the lanes' counts for V_KEEP_KEYS, read from rowk as they are (a count past nk
         * keeps every key as nk does): a vector read of a copy stored lane by lane just
         * before stalled on store forwarding, ~10% of the step's samples on the L128
         * causal case (perf, Emerald Rapids) */
        const VI rk = rowk ? V_LOADI(rowk + q * VL) : V_SET1I((int32_t)nk);
#define SM_PLAIN(j) V_LOADU(s + (j) * MQ + q * VL)
#define SM_KEEP(j) V_KEEP_KEYS(V_LOADU(s + (j) * MQ + q * VL), rk, (int32_t)(j))
        VT mo = V_LOADU(m + q * VL), mx = mo, m1 = mo, m2 = mo, m3 = mo;
        int64_t i = 0;
        /* four chains (the vmaxps latency), key i in chain i mod 4: plain loads while every
         * lane sees the four keys, then through the lanes' counts */
#define SM_MAX4(LOAD)                                                                      \
    do {                                                                                   \
        mx = V_MAX(LOAD(i), mx);                                                           \
        m1 = V_MAX(LOAD(i + 1), m1);                                                       \
        m2 = V_MAX(LOAD(i + 2), m2);                                                       \
        m3 = V_MAX(LOAD(i + 3), m3);                                                       \
    } while (0)
        for (; i + 4 <= full; i += 4) SM_MAX4(SM_PLAIN);
        for (; i + 4 <= need; i += 4) SM_MAX4(SM_KEEP);
#undef SM_MAX4
        for (; i < need; i++) mx = V_MAX(SM_KEEP(i), mx);
        mx = V_MAX(V_MAX(m1, mx), V_MAX(m3, m2));
#undef SM_PLAIN
#undef SM_KEEP
        const int rows = mq - (int64_t)q * VL < VL ? (int)(mq - (int64_t)q * VL) : VL;
        VT a, sum;
        const sm_shift sh = sm_shift_of(V_NEGINF_TO_ZERO(mx), mo, (1u << rows) - 1u, &a, SAFE);
#ifdef V_EXP2 /* in base 2 (kernels.h, attn_softmax_exp2): one operation fewer an exp */
        if (sh.mode == 2) sum = sm_exps(s + q * VL, full, need, rk, &sh, 2, SAFE);
        else sum = sm_exps(s + q * VL, full, need, rk, &sh, 1, SAFE);
#else
        sum = sm_exps(s + q * VL, full, need, rk, &sh, 0, SAFE);
#endif
        for (int64_t j = need; j < nk; j++) V_STOREU(s + j * MQ + q * VL, V_ZERO()); /* exp(-inf) */
        V_STOREU(l + q * VL, V_FMA(V_LOADU(l + q * VL), a, sum));
        V_STOREU(m + q * VL, mx);
        V_STOREU(alpha + q * VL, a);
    }
}

void NAME_SOFTMAX(float *s, float *m, float *l, float *alpha, int64_t nk, int64_t mq,
                  const int32_t *rowk)
{
    if (ta_exp_denormal_assist) softmax_step(s, m, l, alpha, nk, mq, rowk, 1);
    else softmax_step(s, m, l, alpha, nk, mq, rowk, 0);
}

/* The largest register tile pv_micro is instantiated for: PR x PC, or RP x PCW (the
 * streamed tiles of few rows). */
#define PV_RMAX (PR > RP ? PR : RP)
#define PV_CMAX (PC > PCW ? PC : PCW)

/* Rows r0 .. r0+NR-1, column vectors c0 .. c0+NV-1 (the last one holding `last` lanes)
 * of o = o * alpha + p^T v (alpha NULL: o = p^T v, o not read), for NR x NV <= PR x PC
 * or RP x PCW. NR, NV and TAIL are constants after inlining. */
ATTN_INLINE void pv_micro(float *o, int64_t ldo, const float *p, const float *alpha,
                          const float *v, int64_t ldv, int64_t nk, const int NR, const int NV,
                          const int TAIL, int last, const int PF, ta_pf *pf)
{
    const int64_t pfd = PF ? ta_stream_prefetch_rows : 0;
    const int l1 = ta_stream_prefetch_l1;
    VT acc[PV_RMAX][PV_CMAX];
#pragma GCC unroll 16
    for (int r = 0; r < PV_RMAX; r++) {
        if (r >= NR) break;
        if (!alpha) {
#pragma GCC unroll 16
            for (int c = 0; c < PV_CMAX; c++)
                if (c < NV) acc[r][c] = V_ZERO();
            continue;
        }
        VT a = V_SET1(alpha[r]);
#pragma GCC unroll 16
        for (int c = 0; c < PV_CMAX; c++)
            if (c < NV) acc[r][c] = V_MUL(V_LOADU(o + r * ldo + c * VL), a);
    }
    TA_PF_BEGIN(pf);
    for (int64_t j = 0; j < nk; j++) {
        VT vv[PV_CMAX];
        const float *vr = v + j * ldv;
        TA_PF_STEP(pf); /* the caller's stream, a line a key */
        if (PF && pfd) { /* into L1 or L2 (kernels.h) */
            if (l1) {
#pragma GCC unroll 16
                for (int c = 0; c < PV_CMAX; c++)
                    if (c < NV && (c * VL * 4) % 64 == 0) __builtin_prefetch(vr + pfd * ldv + c * VL, 0, 3);
            } else {
#pragma GCC unroll 16
                for (int c = 0; c < PV_CMAX; c++)
                    if (c < NV && (c * VL * 4) % 64 == 0) __builtin_prefetch(vr + pfd * ldv + c * VL, 0, 2);
            }
        }
#pragma GCC unroll 16
        for (int c = 0; c < PV_CMAX; c++) {
            if (c >= NV) break;
            vv[c] = (TAIL && c == NV - 1) ? V_LOADN(vr + c * VL, last) : V_LOADU(vr + c * VL);
        }
#pragma GCC unroll 16
        for (int r = 0; r < PV_RMAX; r++) {
            if (r >= NR) break;
            VT pb = V_SET1(p[j * MQ + r]);
#pragma GCC unroll 16
            for (int c = 0; c < PV_CMAX; c++)
                if (c < NV) acc[r][c] = V_FMA(pb, vv[c], acc[r][c]);
        }
    }
    TA_PF_END(pf);
#pragma GCC unroll 16
    for (int r = 0; r < PV_RMAX; r++) {
        if (r >= NR) break;
#pragma GCC unroll 16
        for (int c = 0; c < PV_CMAX; c++)
            if (c < NV) V_STOREU(o + r * ldo + c * VL, acc[r][c]);
    }
}

/* pv_micro over all dv columns of NR rows (a constant): whole micro-tiles, then one
 * instance per count of leftover vectors, the last one masked. */
ATTN_INLINE void pv_rows(float *orow, int64_t ldo, const float *p, const float *alpha,
                         const float *v, int64_t ldv, int64_t nk, int64_t dv, const int NR,
                         ta_pf *pf)
{
    const int64_t W = (int64_t)PC * VL; /* columns per micro-tile */
    int64_t c0 = 0;
    for (; c0 + W <= dv; c0 += W)
        pv_micro(orow + c0, ldo, p, alpha, v + c0, ldv, nk, NR, PC, 0, VL, 0, pf);
    int64_t rest = dv - c0;
    if (rest <= 0) return;
    int nv = (int)((rest + VL - 1) / VL), last = (int)(rest - (int64_t)(nv - 1) * VL);
    switch (nv) {
#define PV_TAIL(n) case n: if (n <= PC) pv_micro(orow + c0, ldo, p, alpha, v + c0, ldv, nk, NR, n, 1, last, 0, pf); break;
    PV_TAIL(1) PV_TAIL(2) PV_TAIL(3) PV_TAIL(4) PV_TAIL(5) PV_TAIL(6) PV_TAIL(7) PV_TAIL(8)
#undef PV_TAIL
    default: break;
    }
}

/* pv_micro on all nv (<= PCW) column vectors of NR (<= RP) rows, the last vector masked
 * only when it is partial: each key's V row is read front to back, so the first pass of a
 * tile streams V. (A masked load of a whole vector costs nothing in cache, but streaming
 * V through one lowered the decode from 22.6 to 17.4 GB/s on Zen 4.) */
ATTN_INLINE void pv_whole_rows(float *o, int64_t ldo, const float *p, const float *alpha,
                               const float *v, int64_t ldv, int64_t nk, int nv, int last,
                               const int NR)
{
#define PV_WHOLE(n)                                                                          \
    if (n <= PCW) {                                                                          \
        if (last == VL) pv_micro(o, ldo, p, alpha, v, ldv, nk, NR, n, 0, VL, 1, NULL);       \
        else pv_micro(o, ldo, p, alpha, v, ldv, nk, NR, n, 1, last, 1, NULL);                \
    }
    ROWS_SWITCH(PV_WHOLE, nv)
#undef PV_WHOLE
}

/* o rows < NR (a constant <= ROWS_MAX) = o * alpha + p^T v, keys in order, each V row
 * read front to back (one stream: see dot_key), o accumulated in place (in L1): for V
 * rows too wide for pv_whole_rows. Per element the same operations in the same order as
 * pv_micro (o * alpha, then one FMA per key in key order): bitwise pv_micro's results. */
ATTN_INLINE void pv_stream(float *o, int64_t ldo, const float *p, const float *alpha,
                           const float *v, int64_t ldv, int64_t nk, int64_t dv, const int NR)
{
    const int64_t nv = dv / VL, rest = dv - nv * VL; /* whole vectors, then a masked one */
#pragma GCC unroll 16
    for (int r = 0; r < ROWS_MAX; r++) {
        if (r >= NR) break;
        const VT a = alpha ? V_SET1(alpha[r]) : V_ZERO();
        for (int64_t c = 0; c < (dv + VL - 1) / VL; c++) /* o has ldo >= that many vectors */
            V_STOREU(o + r * ldo + c * VL, alpha ? V_MUL(V_LOADU(o + r * ldo + c * VL), a) : a);
    }
    for (int64_t j = 0; j < nk; j++) {
        const float *vr = v + j * ldv;
        VT pb[ROWS_MAX];
#pragma GCC unroll 16
        for (int r = 0; r < ROWS_MAX; r++)
            if (r < NR) pb[r] = V_SET1(p[j * MQ + r]);
        for (int64_t c = 0; c < nv; c++) {
            VT vv = V_LOADU(vr + c * VL);
#pragma GCC unroll 16
            for (int r = 0; r < ROWS_MAX; r++) {
                if (r >= NR) break;
                float *oc = o + r * ldo + c * VL;
                V_STOREU(oc, V_FMA(pb[r], vv, V_LOADU(oc)));
            }
        }
        if (rest) {
            VT vv = V_LOADN(vr + nv * VL, (int)rest);
#pragma GCC unroll 16
            for (int r = 0; r < ROWS_MAX; r++) {
                if (r >= NR) break;
                float *oc = o + r * ldo + nv * VL;
                V_STOREU(oc, V_FMA(pb[r], vv, V_LOADU(oc)));
            }
        }
    }
}

/* gcc 12 at -O2/-O3 loop-vectorizes the key loop of the one-lane (scalar) instance with
 * loads that also read the row after the current one, past v's end on the last key
 * (tests/test_kernels.c: a guard-page fault at dv = 2, nk = 1). That instance's P.V
 * stays scalar code; the SIMD instances are intrinsics and unaffected. */
#if VL == 1 && defined(__GNUC__) && !defined(__clang__)
#define PV_ATTR __attribute__((optimize("no-tree-loop-vectorize")))
#else
#define PV_ATTR
#endif

/* o [mq rows, ldo] = o * alpha (per row) + p [nk, MQ]^T v [nk rows of dv, stride ldv]
 * (alpha NULL: o = p^T v, o's old values not read: a work item's first tile) for the
 * rows < mq, in groups of PR rows (a last group of fewer rows has its own
 * instance: a decode tile of one row does one row of FMAs); columns >= dv of o (padding
 * up to ldo, a multiple of VL) get finite junk or NaN, never a read of v past dv; rows
 * >= mq are not touched. */
PV_ATTR void NAME_PV(float *o, int64_t ldo, const float *p, const float *alpha, const float *v,
                     int64_t ldv, int64_t nk_all, int64_t dv, int64_t mq, const int32_t *rowk,
                     ta_pf *pf)
{
    if (mq <= ROWS_MAX) { /* a decode tile: V streamed once, key by key */
        int64_t nk = rowk ? 0 : nk_all;
        for (int r = 0; rowk && r < mq; r++)
            if (rowk[r] > nk) nk = rowk[r];
        const int nv = (int)((dv + VL - 1) / VL), last = (int)(dv - (int64_t)(nv - 1) * VL);
        if (nv > PCW) {
#define PV_STREAM(n) if (n <= ROWS_MAX) pv_stream(o, ldo, p, alpha, v, ldv, nk, dv, n)
            ROWS_SWITCH(PV_STREAM, (int)mq)
#undef PV_STREAM
            return;
        }
        for (int64_t r0 = 0; r0 < mq; r0 += RP) { /* RP rows per pass, V from L1 after one */
            const int nr = (int)(mq - r0 < RP ? mq - r0 : RP);
            const float *ar = alpha ? alpha + r0 : NULL;
#define PV_PASS(n) if (n <= RP) pv_whole_rows(o + r0 * ldo, ldo, p + r0, ar, v, ldv, nk, nv, last, n)
            ROWS_SWITCH(PV_PASS, nr)
#undef PV_PASS
        }
        return;
    }
    for (int64_t r0 = 0; r0 < mq; r0 += PR) {
        const int nr = (int)(mq - r0 < PR ? mq - r0 : PR);
        int64_t nk = rowk ? 0 : nk_all; /* keys past every row's need hold p = 0: skip */
        for (int r = 0; rowk && r < nr; r++)
            if (rowk[r0 + r] > nk) nk = rowk[r0 + r];
        const float *ar = alpha ? alpha + r0 : NULL;
#define PV_ROWS(n) if (n <= PR) pv_rows(o + r0 * ldo, ldo, p + r0, ar, v, ldv, nk, dv, n, pf)
        ROWS_SWITCH(PV_ROWS, nr)
#undef PV_ROWS
    }
}

/* y[i] = exp(x[i]) for i < n (x and y may be the same array). */
ATTN_INLINE void exp_row(float *y, const float *x, int64_t n, const int SAFE)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) V_STOREU(y + i, SM_EXPF(V_LOADU(x + i)));
    if (i < n) V_STOREN(y + i, SM_EXPF(V_LOADN(x + i, (int)(n - i))), (int)(n - i));
}

void NAME_EXP(float *y, const float *x, int64_t n)
{
    if (ta_exp_denormal_assist) exp_row(y, x, n, 1);
    else exp_row(y, x, n, 0);
}

/* qp[p * ld + r] = scale * q[qoff[r] + p * s3] for p < d and r < mq; 0 for mq <= r < ld
 * (one rounding per element, the same in every ISA; scale 1 copies exactly). x86 vocabularies define
 * V_TRANSPOSE8_SCALED (an 8 x 8 block through registers) for unit-stride rows, and
 * AVX-512's V_TRANSPOSE16_SCALED (16 x 16, first: blocks of 16 rows, then of 8); every
 * element the blocks leave is copied one by one. gcc turns the padding rows' zero loop
 * into a memset call per p, which took ~150 ns of a 16-row tile's 225 at d = 64 (Zen 5):
 * the attribute keeps the stores inline. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
void NAME_PACKQ(float *qp, int64_t ld, const float *q, const int64_t *qoff, int64_t s3,
                int64_t mq, int64_t d, float scale)
{
    int64_t r0 = 0, p0 = 0;
#ifdef V_TRANSPOSE16_SCALED
    if (s3 == 1) {
        for (; r0 + 16 <= mq; r0 += 16) {
            const float *rows[16];
            for (int r = 0; r < 16; r++) rows[r] = q + qoff[r0 + r];
            for (p0 = 0; p0 + 16 <= d; p0 += 16) V_TRANSPOSE16_SCALED(qp + p0 * ld + r0, ld, rows, p0, scale);
            for (int64_t p = p0; p < d; p++)
                for (int r = 0; r < 16; r++) qp[p * ld + r0 + r] = rows[r][p] * scale;
        }
    }
#endif
#ifdef V_TRANSPOSE8_SCALED
    if (s3 == 1) {
        for (; r0 + 8 <= mq; r0 += 8) {
            const float *rows[8];
            for (int r = 0; r < 8; r++) rows[r] = q + qoff[r0 + r];
            for (p0 = 0; p0 + 8 <= d; p0 += 8) V_TRANSPOSE8_SCALED(qp + p0 * ld + r0, ld, rows, p0, scale);
            for (int64_t p = p0; p < d; p++)
                for (int r = 0; r < 8; r++) qp[p * ld + r0 + r] = rows[r][p] * scale;
        }
    }
#endif
    (void)p0;
    if (r0 == mq && mq % VL == 0 && ld % VL == 0) { /* the blocks took every row */
        for (int64_t p = 0; p < d && mq < ld; p++) /* the padding rows, whole vectors */
            for (int64_t r = mq; r < ld; r += VL) V_STOREU(qp + p * ld + r, V_ZERO());
        return;
    }
    /* the rows the blocks left, each read front to back (by p, then row, a backward
     * tile of 3 keys took 500 cycles a pack: 24% of a varlen backward of 1000 sequences
     * of 3 tokens) */
    for (int64_t r = r0; r < mq; r++) {
        const float *src = q + qoff[r];
        for (int64_t p = 0; p < d; p++) qp[p * ld + r] = src[p * s3] * scale;
    }
    for (int64_t p = 0; p < d; p++) {
        float *dst = qp + p * ld;
        int64_t r = mq;
        /* the padding rows: to a multiple of VL one by one, then whole vectors */
        for (; r < ld && r % VL != 0; r++) dst[r] = 0.0f;
        for (; r + VL <= ld; r += VL) V_STOREU(dst + r, V_ZERO());
        for (; r < ld; r++) dst[r] = 0.0f;
    }
}

/* dst[c] = src[c] * alpha for c < n (zero: 0 whatever src holds); stream: dst's whole
 * vectors from an address aligned to the vector with non-temporal stores (an output far
 * larger than the caches; the caller fences), the rest plainly. The same products either
 * way. */
ATTN_INLINE void scale_row(float *dst, const float *src, float alpha, int zero, int64_t n,
                           int stream)
{
    const VT a = V_SET1(alpha);
    int64_t c = 0;
#define SCALED(c) (zero ? V_ZERO() : V_MUL(V_LOADU(src + (c)), a))
    if (stream && ((uintptr_t)dst % (VL * sizeof(float))) == 0)
        for (; c + VL <= n; c += VL) V_STREAM(dst + c, SCALED(c));
    for (; c + VL <= n; c += VL) V_STOREU(dst + c, SCALED(c));
    if (c < n) {
        const int t = (int)(n - c);
        V_STOREN(dst + c, zero ? V_ZERO() : V_MUL(V_LOADN(src + c, t), a), t);
    }
#undef SCALED
}

void NAME_SCALE_ROW(float *dst, const float *src, float alpha, int zero, int64_t n, int stream)
{
    scale_row(dst, src, alpha, zero, n, stream);
}

void NAME_FINISH_ROWS(float *dst, int64_t ldd, const float *src, int64_t lds, const float *l,
                      int64_t rows, int64_t n, int stream)
{
    for (int64_t r = 0; r < rows; r++) {
        const float lr = l[r];
        scale_row(dst + r * ldd, src + r * lds, lr == 0.0f ? 0.0f : 1.0f / lr, lr == 0.0f, n,
                  stream);
    }
}

void FILL_FN(ta_kernels *k)
{
    k->attn_mq = MQ;
    k->attn_pr = PR;
    k->attn_vl = VL;
    k->attn_qk = NAME_QK;
    k->attn_qk_rows = NAME_QK_ROWS;
    k->attn_rows_max = ROWS_MAX;
    k->attn_softmax = NAME_SOFTMAX;
#ifdef V_EXP2
    k->attn_softmax_exp2 = 1;
#else
    k->attn_softmax_exp2 = 0;
#endif
    k->attn_pv = NAME_PV;
    k->attn_exp = NAME_EXP;
    k->attn_pack_t = NAME_PACKQ;
    k->attn_scale_row = NAME_SCALE_ROW;
    k->attn_finish_rows = NAME_FINISH_ROWS;
}
