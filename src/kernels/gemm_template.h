/* The SGEMM micro-kernel (contract: docs/kernels.md, "SGEMM micro-kernel"), written once
 * over the vector vocabulary of vec_<isa>.h and instantiated by gemm_scalar.c,
 * gemm_avx2.c and gemm_avx512.c (each built with its ISA's flags).
 *
 * The including file defines:
 *   VT, VL        the vector type and its lanes (vec_<isa>.h);
 *   MR, NV        the tile: MR rows by NV vectors (NR = NV * VL columns), MR * NV
 *                 accumulators held in registers, plus NV B vectors and one broadcast;
 *   V_ZERO() V_SET1(x) V_LOAD(p) (aligned) V_BCAST(p) (*p in every lane) V_LOADU(p)
 *   V_STOREU(p, v) V_MUL V_FMA(a, b, c) = a*b+c (vec_<isa>.h);
 *   NAME_SGEMM    the kernel's name, ta_sgemm_<isa>_<MR>x<NR>;
 *   FILL_FN       the filler that puts it in a table (ta_gemm_fill_<isa>).
 *
 * The k loop is one step per iteration, not unrolled: unrolling makes gcc hoist the B
 * loads of later steps and spill accumulators; the loop overhead (the pointer adds, a
 * compare, a branch) is free beside the FMAs on an 8-wide core. A packed panel (rs_a 1,
 * cs_a MR: what the driver passes for every large block) has its own copy of the loop:
 * the MR values of a step are read at constant offsets from one pointer, so a step is
 * NV aligned loads, MR broadcasts straight from memory, MR * NV FMAs and three scalar
 * uops (two pointer adds, the count; compare and branch fuse). Any other A (read in
 * place) has row i at arow[i / 4] + off[i % 4] with off = {0, rs_a, 2 rs_a, 3 rs_a}:
 * one base pointer per four rows plus an offset held in a register fits x86 addressing
 * modes. */
#include "kernels/kernels.h"

#include <stdbool.h>
#include <stdint.h>

#define NR (NV * VL)
#define GEMM_INLINE static inline __attribute__((always_inline))

_Static_assert(MR >= 1 && NV >= 1 && MR <= 16 && NV <= 16,
               "gemm_template.h: MR and NV in 1..16 (the loops unroll 16)");
_Static_assert(MR * NR <= TA_SGEMM_TILE_MAX,
               "gemm_template.h: the MR x NR tile must fit TA_SGEMM_TILE_MAX (kernels.h)");

/* The one-lane (scalar) instance: gcc 12's loop vectorizer turns its k loop into in-order
 * reductions emulated with shuffles (7.4 GFLOP/s for 4x8 on one core); without it, the
 * basic-block vectorizer holds the 32 accumulators in 8 SSE registers (27.8 GFLOP/s),
 * with the same multiply and add per term, in the same order (the same results). */
#if VL == 1 && defined(__GNUC__) && !defined(__clang__)
#define GEMM_ATTR __attribute__((optimize("no-tree-loop-vectorize")))
#else
#define GEMM_ATTR
#endif

/* C tile [MR, NR] (row stride rs_c, unit columns) = alpha * acc (+ beta * C). beta == 0
 * must not read C: it may hold NaN or be uninitialised. */
GEMM_INLINE void store_tile(float *c, int64_t rs_c, VT acc[MR][NV], float alpha, float beta)
{
    const VT va = V_SET1(alpha), vb = V_SET1(beta);
    if (beta == 0.0f) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++) V_STOREU(c + i * rs_c + v * VL, V_MUL(va, acc[i][v]));
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++) {
                float *ci = c + i * rs_c + v * VL;
                V_STOREU(ci, V_FMA(va, acc[i][v], V_MUL(vb, V_LOADU(ci))));
            }
    }
}

/* One k step: acc += A[:, p] B[p, :], with A[i, p] at ai[i] and B[p, :] at b. */
GEMM_INLINE void kstep(VT acc[MR][NV], const float *const ai[MR], const float *b)
{
    VT bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) bv[v] = V_LOAD(b + v * VL);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        const VT av = V_BCAST(ai[i]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) acc[i][v] = V_FMA(av, bv[v], acc[i][v]);
    }
}

/* acc += A [MR, k] B [k, NR], one k step per iteration. With packed = true the caller
 * guarantees rs_a == 1 and cs_a == MR (a packed panel): the MR values of a step are
 * contiguous, read through one pointer at constant offsets, so the loop keeps only two
 * pointer adds and the count beside its loads and FMAs (fewer non-FMA uops to compete
 * with the FMAs for the vector ports of a two-FMA-port core; docs/kernels.md). Both
 * variants do the same FMAs in the same order. */
GEMM_INLINE void kloop(VT acc[MR][NV], int64_t k, const float *a, int64_t rs_a, int64_t cs_a,
                       const float *b, const bool packed)
{
    const float *ai[MR];
    if (packed) {
        for (int64_t p = 0; p < k; p++, a += MR, b += NR) {
#pragma GCC unroll 16
            for (int i = 0; i < MR; i++) ai[i] = a + i;
            kstep(acc, ai, b);
        }
        return;
    }
    const float *arow[(MR + 3) / 4];
    /* 3 rs_a through an empty asm: gcc no longer sees it as rs_a + 2 rs_a, so it stays in
     * a register instead of a lea per k step (AVX2: 26 instructions per step, as the
     * hand-written kernel had; docs/kernels.md). */
    int64_t r3 = 3 * rs_a;
    __asm__("" : "+r"(r3));
    const int64_t off[4] = {0, rs_a, 2 * rs_a, r3};
#pragma GCC unroll 16
    for (int g = 0; g < (MR + 3) / 4; g++) arow[g] = a + 4 * g * rs_a;
    for (int64_t p = 0; p < k; p++, b += NR) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) ai[i] = arow[i / 4] + off[i % 4];
        kstep(acc, ai, b);
#pragma GCC unroll 16
        for (int g = 0; g < (MR + 3) / 4; g++) arow[g] += cs_a;
    }
}

/* c: [MR, NR] tile, row stride rs_c, unit column stride; a: [MR, k] with strides
 * (rs_a, cs_a) (packed: 1, MR); b: [k, NR] packed panel (64-byte aligned). */
void NAME_SGEMM(int64_t k, float alpha, const float *a, int64_t rs_a, int64_t cs_a,
                const float *b, float beta, float *c, int64_t rs_c);
GEMM_ATTR void NAME_SGEMM(int64_t k, float alpha, const float *a, int64_t rs_a, int64_t cs_a,
                          const float *b, float beta, float *c, int64_t rs_c)
{
    VT acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) acc[i][v] = V_ZERO();
        /* The C tile: every line of the row (a 64-column row spans 4 or 5 lines). */
#pragma GCC unroll 16
        for (int j = 0; j < NR; j += 16) __builtin_prefetch(c + i * rs_c + j, 0, 3);
        __builtin_prefetch(c + i * rs_c + NR - 1, 0, 3);
    }
    if (rs_a == 1 && cs_a == MR) kloop(acc, k, a, 1, MR, b, true);
    else kloop(acc, k, a, rs_a, cs_a, b, false);
    store_tile(c, rs_c, acc, alpha, beta);
}

void FILL_FN(ta_kernels *k)
{
    k->sgemm_ukr = NAME_SGEMM;
    k->sgemm_mr = MR;
    k->sgemm_nr = NR;
}
