/* Attention backward micro-kernels for AVX2 + FMA (attn_bwd_template.h): a 6-row x
 * 16-column GEMM tile (12 ymm accumulators, 2 B vectors and one broadcast: 15 of 16
 * registers, the shape of the SGEMM kernel) and the softmax backward with masked tails. */
#include "kernels/vec_avx2.h"

/* doubles for attn_row_dot */
#define VD __m256d
#define VDL 4
#define VD_ZERO() _mm256_setzero_pd()
#define VD_WIDEN(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define VD_MUL(a, b) _mm256_mul_pd(a, b)
#define VD_ADD(a, b) _mm256_add_pd(a, b)
#define VD_STOREU(p, v) _mm256_storeu_pd(p, v)

#define MR 6
#define NV 2

#define NAME_GEMM ta_attn_bwd_gemm_avx2_6x16
#define NAME_GEMM_RANGED ta_attn_bwd_gemm_ranged_avx2
#define NAME_DSOFTMAX ta_attn_bwd_dsoftmax_avx2
#define NAME_ROW_DOT ta_attn_row_dot_avx2
#define FILL_FN ta_attn_bwd_fill_avx2

#include "kernels/attn_bwd_template.h"
