/* AVX2+FMA SGEMM micro-kernel 6x16 (contract: docs/kernels.md). Built with -mavx2 -mfma.
 * 6 rows x 2 ymm columns = 12 accumulators, + 2 B vectors + 1 broadcast = 15 of the 16
 * ymm registers; per k step 2 loads and 6 broadcasts feed 12 FMAs (6 cycles at 2 FMA
 * per cycle), which the load ports sustain. */
#include "kernels/kernels.h"

#include <immintrin.h>

#define MR 6
#define NR 16

#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
#define FMA(i)                                                                               \
    {                                                                                        \
        __m256 ai = _mm256_broadcast_ss(ROW_PTR(i));                                           \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);                                          \
        c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);                                          \
    }
/* Row i of A at this k step: base + {0,1,2,3} * rs_a fit x86 addressing modes. */
#define ROW_PTR(i) ((i) < 4 ? a0 + ((i) == 3 ? r3 : (i) * rs_a) : a4 + ((i) - 4) * rs_a)
#define STEP()                                                                               \
    {                                                                                        \
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);                           \
        ROWS(FMA)                                                                            \
    }
#define PREFETCH_C(i)                                                                        \
    _mm_prefetch((const char *)(c + (i) * rs_c), _MM_HINT_T0);                               \
    _mm_prefetch((const char *)(c + (i) * rs_c + NR - 1), _MM_HINT_T0);
#define STORE0(i)                                                                            \
    _mm256_storeu_ps(c + (i) * rs_c, _mm256_mul_ps(va, c##i##0));                            \
    _mm256_storeu_ps(c + (i) * rs_c + 8, _mm256_mul_ps(va, c##i##1));
#define STOREB(i)                                                                            \
    _mm256_storeu_ps(c + (i) * rs_c,                                                         \
                     _mm256_fmadd_ps(va, c##i##0,                                            \
                                     _mm256_mul_ps(vb, _mm256_loadu_ps(c + (i) * rs_c))));   \
    _mm256_storeu_ps(c + (i) * rs_c + 8,                                                     \
                     _mm256_fmadd_ps(va, c##i##1,                                            \
                                     _mm256_mul_ps(vb, _mm256_loadu_ps(c + (i) * rs_c + 8))));

/* c: [6, 16] tile, row stride rs_c, unit column stride; a: [6, k] with strides
 * (rs_a, cs_a) (packed: 1, 6); b: [k, 16] packed panel (64-byte aligned). */
void ta_sgemm_avx2_6x16(int64_t k, float alpha, const float *a, int64_t rs_a, int64_t cs_a,
                        const float *b, float beta, float *c, int64_t rs_c)
{
    const float *a0 = a, *a4 = a + 4 * rs_a;
    const int64_t r3 = 3 * rs_a;
    ROWS(DECL)
    ROWS(PREFETCH_C)
    /* Not unrolled: unrolling makes gcc hoist the B loads of later steps and spill
     * accumulators; the loop overhead (2 adds, compare, branch) is free beside the
     * FMAs on an 8-wide core. */
    for (int64_t p = 0; p < k; p++) {
        STEP()
        a0 += cs_a;
        a4 += cs_a;
        b += NR;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    /* beta == 0 must not read C: it may hold NaN or be uninitialised. */
    if (beta == 0.0f) {
        ROWS(STORE0)
    } else {
        ROWS(STOREB)
    }
}
