/* AVX-512 SGEMM micro-kernel 12x32 (contract: docs/kernels.md). Built with -mavx512f.
 * 12 rows x 2 zmm columns = 24 accumulators, + 2 B vectors + 1 broadcast of the 32 zmm
 * registers. On Zen 4/5 a 512-bit FMA issues at half the 256-bit rate, so 24 FMAs take
 * ~24 cycles per k step against 2 loads + 12 broadcasts: the load ports idle, and 24
 * independent chains hide the 4-cycle FMA latency several times over. Vectors run along
 * N so a row-major C tile is stored with plain (unmasked) full-width stores. */
#include "kernels/kernels.h"

#include <immintrin.h>

#define MR 12
#define NR 32

#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECL(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
#define FMA(i)                                                                               \
    {                                                                                        \
        __m512 ai = _mm512_set1_ps(*ROW_PTR(i));                                                   \
        c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);                                        \
        c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);                                        \
    }
/* Row i of A at this k step: base + {0,1,2,3} * rs_a fit x86 addressing modes. */
#define ROW_PTR(i)                                                                           \
    (((i) < 4 ? a0 : (i) < 8 ? a4 : a8) + ((i) % 4 == 3 ? r3 : ((i) % 4) * rs_a))
#define STEP()                                                                               \
    {                                                                                        \
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);                          \
        ROWS(FMA)                                                                            \
    }
#define PREFETCH_C(i)                                                                        \
    _mm_prefetch((const char *)(c + (i) * rs_c), _MM_HINT_T0);                               \
    _mm_prefetch((const char *)(c + (i) * rs_c + NR - 1), _MM_HINT_T0);
#define STORE0(i)                                                                            \
    _mm512_storeu_ps(c + (i) * rs_c, _mm512_mul_ps(va, c##i##_0));                           \
    _mm512_storeu_ps(c + (i) * rs_c + 16, _mm512_mul_ps(va, c##i##_1));
#define STOREB(i)                                                                            \
    _mm512_storeu_ps(c + (i) * rs_c,                                                         \
                     _mm512_fmadd_ps(va, c##i##_0,                                           \
                                     _mm512_mul_ps(vb, _mm512_loadu_ps(c + (i) * rs_c))));   \
    _mm512_storeu_ps(c + (i) * rs_c + 16,                                                    \
                     _mm512_fmadd_ps(va, c##i##_1,                                           \
                                     _mm512_mul_ps(vb, _mm512_loadu_ps(c + (i) * rs_c + 16))));

/* c: [12, 32] tile, row stride rs_c, unit column stride; a: [12, k] with strides
 * (rs_a, cs_a) (packed: 1, 12); b: [k, 32] packed panel (64-byte aligned). */
void ta_sgemm_avx512_12x32(int64_t k, float alpha, const float *a, int64_t rs_a,
                           int64_t cs_a, const float *b, float beta, float *c, int64_t rs_c)
{
    const float *a0 = a, *a4 = a + 4 * rs_a, *a8 = a + 8 * rs_a;
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
        a8 += cs_a;
        b += NR;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    /* beta == 0 must not read C: it may hold NaN or be uninitialised. */
    if (beta == 0.0f) {
        ROWS(STORE0)
    } else {
        ROWS(STOREB)
    }
}
