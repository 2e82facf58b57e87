/* Attention backward micro-kernels for AVX-512 (attn_bwd_template.h): a 6-row x 64-column
 * GEMM tile (24 zmm accumulators, 4 B vectors and one broadcast: 29 of 32 registers; on
 * Zen 4 a k step is 24 half-rate FMAs against 10 loads) and the softmax backward with
 * masked tails. */
#include "kernels/vec_avx512.h"

/* doubles for attn_row_dot */
#define VD __m512d
#define VDL 8
#define VD_ZERO() _mm512_setzero_pd()
#define VD_WIDEN(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define VD_MUL(a, b) _mm512_mul_pd(a, b)
#define VD_ADD(a, b) _mm512_add_pd(a, b)
#define VD_STOREU(p, v) _mm512_storeu_pd(p, v)

#define MR 6
#define NV 4

#define NAME_GEMM ta_attn_bwd_gemm_avx512_6x64
#define NAME_GEMM_RANGED ta_attn_bwd_gemm_ranged_avx512
#define NAME_DSOFTMAX ta_attn_bwd_dsoftmax_avx512
#define NAME_ROW_DOT ta_attn_row_dot_avx512
#define FILL_FN ta_attn_bwd_fill_avx512

#include "kernels/attn_bwd_template.h"
