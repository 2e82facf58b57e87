/* Attention backward micro-kernels for AVX2 + FMA (attn_bwd_template.h): a 6-row x
 * 16-column GEMM tile (12 ymm accumulators, 2 B vectors and one broadcast: 15 of 16
 * registers, the shape of the SGEMM kernel) and the softmax backward with masked tails. */
#include <immintrin.h>

#define VT __m256
#define VL 8
#define MR 6
#define NV 2

static inline __m256i lanes_mask(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps(p, v)
#define V_LOADN(p, n) _mm256_maskload_ps(p, lanes_mask(n))
#define V_STOREN(p, v, n) _mm256_maskstore_ps(p, lanes_mask(n), v)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)

#define NAME_GEMM ta_attn_bwd_gemm_avx2_6x16
#define NAME_DSOFTMAX ta_attn_bwd_dsoftmax_avx2
#define FILL_FN ta_attn_bwd_fill_avx2

#include "kernels/attn_bwd_template.h"
