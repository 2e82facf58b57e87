/* The attention backward micro-kernels (FlashAttention-2 backward,
 * src/ops/sdpa_backward_fused.c), written once over a small vector vocabulary and
 * instantiated per ISA by
 * attn_bwd_scalar.c, attn_bwd_avx2.c and attn_bwd_avx512.c (each with its own -m flags).
 *
 * The including file defines:
 *   VT, VL          the vector type and its lanes (float and 1 for scalar code);
 *   MR, NV          the GEMM micro-tile: MR rows by NV vectors of columns, MR * NV
 *                   accumulators held in registers;
 *   V_ZERO() V_SET1(x) V_LOADU(p) V_STOREU(p, v) V_LOADN(p, n) (lanes >= n read as 0, memory
 *   past them untouched) V_STOREN(p, v, n) V_SUB V_MUL V_FMA(a, b, c) = a*b+c;
 *   VD, VDL         a vector of doubles and its lanes (1, 2, 4 or 8), with VD_ZERO()
 *                   VD_WIDEN(p) (VDL floats from p, widened) VD_MUL VD_ADD VD_STOREU(p, v);
 *   NAME_GEMM, NAME_GEMM_RANGED, NAME_DSOFTMAX, NAME_ROW_DOT, FILL_FN: the exported
 *                   names (NAME_GEMM with NAME_GEMM_RANGED, NAME_DSOFTMAX and
 *                   NAME_ROW_DOT are optional groups: an instance without one leaves its
 *                   parent's entries);
 *   NAME_GEMM_BF16DOT (optional, with the vocabulary's VB, VB_LOADU, VB_LOADN(p, n),
 *                   VB_BCAST_PAIR(p) and V_DOT_BF16(acc, a, b)): attn_bwd_gemm_bf16dot,
 *                   the same micro-tile over bfloat16 pairs.
 *
 * One GEMM form serves all five products of a backward block, because its A operand is
 * read element by element (broadcast) through two arbitrary strides and only B and C need
 * unit column strides: S = Q K^T and dP = dO V^T read K^T and V^T from tiles packed
 * [D][keys]; dV += P^T dO, dK += dS^T Q read the score tile transposed through the strides
 * (rsa = 1, csa = ld) and dO / Q rows in place; dQ += dS K reads K rows in place. */
#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define BWD_INLINE static inline __attribute__((always_inline))

/* The limits of the switches below (a tile over them would silently compute nothing). */
_Static_assert(MR >= 1 && MR <= 8, "attn_bwd_template.h: ROWS_TAIL has cases for 1..7 rows");
_Static_assert(NV >= 1 && NV <= 8, "attn_bwd_template.h: COLS_TAIL has cases for 1..8 vectors");

/* Rows 0 .. mr-1 and column vectors 0 .. nv-1 (the last one holding `last` lanes when
 * TAIL) of a micro-tile's accumulators: C's values (acc), else 0; and back into C. mr,
 * nv and TAIL are constants after inlining (the tile stays in registers). */
BWD_INLINE void tile_load(VT cr[MR][NV], const float *c, int64_t ldc, int acc, const int mr,
                          const int nv, const int TAIL, int last)
{
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
        if (r >= mr) break;
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            if (v >= nv) break;
            if (!acc)
                cr[r][v] = V_ZERO();
            else if (TAIL && v == nv - 1)
                cr[r][v] = V_LOADN(c + r * ldc + v * VL, last);
            else
                cr[r][v] = V_LOADU(c + r * ldc + v * VL);
        }
    }
}

BWD_INLINE void tile_store(float *c, int64_t ldc, VT cr[MR][NV], const int mr, const int nv,
                           const int TAIL, int last)
{
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
        if (r >= mr) break;
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            if (v >= nv) break;
            if (TAIL && v == nv - 1)
                V_STOREN(c + r * ldc + v * VL, cr[r][v], last);
            else
                V_STOREU(c + r * ldc + v * VL, cr[r][v]);
        }
    }
}

#ifdef NAME_GEMM

/* Rows 0 .. mr-1 and column vectors 0 .. nv-1 (the last one holding `last` lanes when TAIL)
 * of C = (acc ? C : 0) + A B over k steps. mr, nv and TAIL are constants after inlining. */
BWD_INLINE void gemm_micro(float *c, int64_t ldc, const float *a, int64_t rsa, int64_t csa,
                           const float *b, int64_t ldb, int64_t k, int acc, const int mr,
                           const int nv, const int TAIL, int last, ta_pf *pf)
{
    VT cr[MR][NV];
    tile_load(cr, c, ldc, acc, mr, nv, TAIL, last);
    TA_PF_BEGIN(pf);
    for (int64_t p = 0; p < k; p++) {
        if (p & 1) TA_PF_STEP(pf); /* the caller's stream, a line every other step */
        VT bv[NV];
        const float *br = b + p * ldb, *ap = a + p * csa;
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            if (v >= nv) break;
            bv[v] = (TAIL && v == nv - 1) ? V_LOADN(br + v * VL, last) : V_LOADU(br + v * VL);
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            if (r >= mr) break;
            VT ab = V_SET1(ap[r * rsa]);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                if (v < nv) cr[r][v] = V_FMA(ab, bv[v], cr[r][v]);
        }
    }
    TA_PF_END(pf);
    tile_store(c, ldc, cr, mr, nv, TAIL, last);
}

/* All m rows of one column strip (nv vectors) of C: full MR-row tiles, then one tile of
 * the leftover rows (an instance per count keeps it in registers). */
BWD_INLINE void gemm_strip(float *c, int64_t ldc, const float *a, int64_t rsa, int64_t csa,
                           const float *b, int64_t ldb, int64_t m, int64_t k, int acc,
                           const int nv, const int TAIL, int last, ta_pf *pf)
{
    int64_t i = 0;
    for (; i + MR <= m; i += MR)
        gemm_micro(c + i * ldc, ldc, a + i * rsa, rsa, csa, b, ldb, k, acc, MR, nv, TAIL, last, pf);
    switch (m - i) {
#define ROWS_TAIL(n) case n: if (n < MR) gemm_micro(c + i * ldc, ldc, a + i * rsa, rsa, csa, b, ldb, k, acc, n, nv, TAIL, last, pf); break;
    ROWS_TAIL(1) ROWS_TAIL(2) ROWS_TAIL(3) ROWS_TAIL(4) ROWS_TAIL(5) ROWS_TAIL(6) ROWS_TAIL(7)
#undef ROWS_TAIL
    default: break;
    }
}

/* C [m, n] (row stride ldc, unit columns) = (acc ? C : 0) + A [m, k] B [k, n], where
 * A[i, p] = a[i * rsa + p * csa] and B[p, j] = b[p * ldb + j]. Each C element is one
 * float32 FMA chain over p = 0, 1, ..., k-1 (after C itself when acc): the order never
 * depends on where the element lies. acc == 0: C is not read. Only the n columns are
 * read or written (masked tails). pf: the caller's prefetch stream (NULL: none), a line
 * every other step of p. */
void NAME_GEMM(float *c, int64_t ldc, const float *a, int64_t rsa, int64_t csa, const float *b,
               int64_t ldb, int64_t m, int64_t n, int64_t k, int acc, ta_pf *pf)
{
    const int64_t W = (int64_t)NV * VL;
    int64_t j = 0;
    for (; j + W <= n; j += W) gemm_strip(c + j, ldc, a, rsa, csa, b + j, ldb, m, k, acc, NV, 0, VL, pf);
    int64_t rest = n - j;
    if (rest <= 0) return;
    int nv = (int)((rest + VL - 1) / VL), last = (int)(rest - (int64_t)(nv - 1) * VL);
    switch (nv) {
#define COLS_TAIL(x) case x: if (x <= NV) gemm_strip(c + j, ldc, a, rsa, csa, b + j, ldb, m, k, acc, x, 1, last, pf); break;
    COLS_TAIL(1) COLS_TAIL(2) COLS_TAIL(3) COLS_TAIL(4) COLS_TAIL(5) COLS_TAIL(6) COLS_TAIL(7)
    COLS_TAIL(8)
#undef COLS_TAIL
    default: break;
    }
}

/* NAME_GEMM over a triangle: each MR-row tile of C (rows i .. i + mr - 1) runs as one
 * NAME_GEMM of its own, over the k steps [min klo, max khi) and the columns [0, max nhi)
 * of its rows (NULL: all). The caller asserts that the terms left out are zeros (a
 * causal diagonal's P and dS), so every element is the full product's in the same
 * order but for the sign of a zero; columns past a tile's range are not computed: 0
 * when !acc, untouched otherwise. */
void NAME_GEMM_RANGED(float *c, int64_t ldc, const float *a, int64_t rsa, int64_t csa,
                      const float *b, int64_t ldb, int64_t m, int64_t n, int64_t k, int acc,
                      const int32_t *klo, const int32_t *khi, const int32_t *nhi, ta_pf *pf)
{
    for (int64_t i = 0; i < m; i += MR) {
        const int64_t mr = m - i < MR ? m - i : MR;
        int64_t k0 = klo ? k : 0, k1 = khi ? 0 : k, n1 = nhi ? 0 : n;
        for (int64_t r = i; r < i + mr; r++) {
            if (klo && klo[r] < k0) k0 = klo[r];
            if (khi && khi[r] > k1) k1 = khi[r];
            if (nhi && nhi[r] > n1) n1 = nhi[r];
        }
        k0 = k0 < 0 ? 0 : k0;
        k1 = k1 > k ? k : k1;
        n1 = n1 > n ? n : n1 < 0 ? 0 : n1;
        float *ci = c + i * ldc;
        const int64_t z = k1 > k0 ? n1 : 0; /* the columns from z on are 0 (!acc) */
        if (!acc && z < n)
            for (int64_t r = 0; r < mr; r++) memset(ci + r * ldc + z, 0, sizeof(float) * (size_t)(n - z));
        if (k1 > k0 && n1 > 0)
            NAME_GEMM(ci, ldc, a + i * rsa + k0 * csa, rsa, csa, b + k0 * ldb, ldb, mr, n1,
                      k1 - k0, acc, pf);
    }
}

#endif /* NAME_GEMM */

#ifdef NAME_GEMM_BF16DOT
/* Rows 0 .. mr-1 and column vectors 0 .. nv-1 (the last one holding `last` lanes when
 * TAIL) of C = A B over kp steps of a bfloat16 pair: A's rows as bfloat16 (row stride
 * lda elements; step p reads the pair at 2 p), B as pairs [kp][ldb] (32 bits each: the
 * two values of one column, the lower first). One dot-product chain per element. */
BWD_INLINE void gemm_dot_micro(float *c, int64_t ldc, const uint16_t *a, int64_t lda,
                               const uint32_t *b, int64_t ldb, int64_t kp, const int mr,
                               const int nv, const int TAIL, int last, ta_pf *pf)
{
    VT cr[MR][NV];
    tile_load(cr, c, ldc, 0, mr, nv, TAIL, last);
    TA_PF_BEGIN(pf);
    for (int64_t p = 0; p < kp; p++) {
        TA_PF_STEP(pf); /* the caller's stream, a line a step (two of attn_bwd_gemm's) */
        VB bv[NV];
        const uint32_t *br = b + p * ldb;
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            if (v >= nv) break;
            bv[v] = (TAIL && v == nv - 1) ? VB_LOADN(br + v * VL, last) : VB_LOADU(br + v * VL);
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            if (r >= mr) break;
            const VB ab = VB_BCAST_PAIR(a + r * lda + 2 * p);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                if (v < nv) cr[r][v] = V_DOT_BF16(cr[r][v], ab, bv[v]);
        }
    }
    TA_PF_END(pf);
    tile_store(c, ldc, cr, mr, nv, TAIL, last);
}

/* Columns [0, n) of mr (< MR when a tail) rows: full strips of NV vectors, then one
 * strip of the rest (an instance per vector count keeps it in registers). */
BWD_INLINE void gemm_dot_rows(float *c, int64_t ldc, const uint16_t *a, int64_t lda,
                              const uint32_t *b, int64_t ldb, int64_t n, int64_t kp,
                              const int mr, ta_pf *pf)
{
    const int64_t W = (int64_t)NV * VL;
    int64_t j = 0;
    for (; j + W <= n; j += W) gemm_dot_micro(c + j, ldc, a, lda, b + j, ldb, kp, mr, NV, 0, VL, pf);
    const int64_t rest = n - j;
    if (rest <= 0) return;
    const int nv = (int)((rest + VL - 1) / VL), last = (int)(rest - (int64_t)(nv - 1) * VL);
    switch (nv) {
#define COLS_TAIL(x) case x: if (x <= NV) gemm_dot_micro(c + j, ldc, a, lda, b + j, ldb, kp, mr, x, 1, last, pf); break;
    COLS_TAIL(1) COLS_TAIL(2) COLS_TAIL(3) COLS_TAIL(4) COLS_TAIL(5) COLS_TAIL(6) COLS_TAIL(7)
    COLS_TAIL(8)
#undef COLS_TAIL
    default: break;
    }
}

/* C [m, n] (row stride ldc, unit columns) = A [m, k] B [k, n] over bfloat16 pairs
 * (kernels.h, attn_bwd_gemm_bf16dot): by tiles of MR rows, each over the columns [0,
 * max nhi[r]) of its rows (nhi NULL: all), the rest of its columns 0. */
void NAME_GEMM_BF16DOT(float *c, int64_t ldc, const uint16_t *a, int64_t lda, const uint32_t *b,
                       int64_t ldb, int64_t m, int64_t n, int64_t k, const int32_t *nhi, ta_pf *pf)
{
    const int64_t kp = k / 2;
    for (int64_t i = 0; i < m; i += MR) {
        const int64_t mr = m - i < MR ? m - i : MR;
        int64_t n1 = nhi ? 0 : n;
        for (int64_t r = i; nhi && r < i + mr; r++)
            if (nhi[r] > n1) n1 = nhi[r];
        n1 = n1 > n ? n : n1 < 0 ? 0 : n1;
        float *ci = c + i * ldc;
        const int64_t z = kp > 0 ? n1 : 0; /* the columns from z on are 0 */
        if (z < n)
            for (int64_t r = 0; r < mr; r++) memset(ci + r * ldc + z, 0, sizeof(float) * (size_t)(n - z));
        if (z == 0) continue;
        const uint16_t *ai = a + i * lda;
        switch (mr) {
#define ROWS_TAIL(x) case x: if (x <= MR) gemm_dot_rows(ci, ldc, ai, lda, b, ldb, z, kp, x, pf); break;
        ROWS_TAIL(1) ROWS_TAIL(2) ROWS_TAIL(3) ROWS_TAIL(4) ROWS_TAIL(5) ROWS_TAIL(6)
        ROWS_TAIL(7) ROWS_TAIL(8)
#undef ROWS_TAIL
        default: break;
        }
    }
}
#endif /* NAME_GEMM_BF16DOT */

#ifdef NAME_DSOFTMAX
/* The softmax backward of one block, rows r < m of the score tile s and the dP tile dp
 * (row stride ld, n columns):
 *   lse[r] == -inf (the row attends to nothing): both rows become 0;
 *   otherwise  P = exp((s * scale - lse[r]) - lo[r])  (into s; a masked score -inf
 *              gives 0; lo NULL or lo[r] 0: exp(s * scale - lse[r]))
 *              dS = P * (dP - di[r])          (into dp), di = rowsum(dO * O).
 * exp is the table's attn_exp (one call per row, in place). */
void NAME_DSOFTMAX(float *s, float *dp, int64_t ld, const float *lse, const float *lo,
                   const float *di, int64_t m, int64_t n, float scale,
                   void (*exp_row)(float *, const float *, int64_t))
{
    const VT sc = V_SET1(scale);
    for (int64_t r = 0; r < m; r++) {
        float *sr = s + r * ld, *dr = dp + r * ld;
        if (lse[r] == -INFINITY) {
            for (int64_t j = 0; j < n; j++) sr[j] = dr[j] = 0.0f;
            continue;
        }
        const VT l = V_SET1(lse[r]), d = V_SET1(di[r]);
        int64_t j = 0;
        for (; j + VL <= n; j += VL) V_STOREU(sr + j, V_SUB(V_MUL(V_LOADU(sr + j), sc), l));
        if (j < n) V_STOREN(sr + j, V_SUB(V_MUL(V_LOADN(sr + j, (int)(n - j)), sc), l), (int)(n - j));
        if (lo && lo[r] != 0.0f) /* a huge LSE's low part (rare rows: scalar) */
            for (j = 0; j < n; j++) sr[j] -= lo[r];
        exp_row(sr, sr, n);
        for (j = 0; j + VL <= n; j += VL)
            V_STOREU(dr + j, V_MUL(V_LOADU(sr + j), V_SUB(V_LOADU(dr + j), d)));
        if (j < n) {
            int t = (int)(n - j);
            V_STOREN(dr + j, V_MUL(V_LOADN(sr + j, t), V_SUB(V_LOADN(dr + j, t), d)), t);
        }
    }
}

#endif /* NAME_DSOFTMAX */

#ifdef NAME_ROW_DOT
/* sum_c x[c] y[c] in double (kernels.h, attn_row_dot): the 8 chains as 8 / VDL vectors
 * of VDL doubles (lane l of vector v: chain v VDL + l), the floats widened exactly. */
double NAME_ROW_DOT(const float *x, const float *y, int64_t n)
{
    VD acc[8 / VDL];
#pragma GCC unroll 8
    for (int v = 0; v < 8 / VDL; v++) acc[v] = VD_ZERO();
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
#pragma GCC unroll 8
        for (int v = 0; v < 8 / VDL; v++)
            acc[v] = VD_ADD(acc[v], VD_MUL(VD_WIDEN(x + c + v * VDL), VD_WIDEN(y + c + v * VDL)));
    double a[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8 / VDL; v++) VD_STOREU(a + v * VDL, acc[v]);
    double sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; c < n; c++) {
        const double t = (double)x[c] * (double)y[c];
        sum = sum + t;
    }
    return sum;
}

#endif /* NAME_ROW_DOT */

void FILL_FN(ta_kernels *k)
{
#ifdef NAME_GEMM
    k->attn_bwd_gemm = NAME_GEMM;
    k->attn_bwd_gemm_ranged = NAME_GEMM_RANGED;
#endif
#ifdef NAME_DSOFTMAX
    k->attn_bwd_dsoftmax = NAME_DSOFTMAX;
#endif
#ifdef NAME_ROW_DOT
    k->attn_row_dot = NAME_ROW_DOT;
#endif
#ifdef NAME_GEMM_BF16DOT
    k->attn_bwd_gemm_bf16dot = NAME_GEMM_BF16DOT;
#endif
}
