/* Attention backward micro-kernels for AVX2 + FMA (attn_bwd_template.h): a 6-row x
 * 16-column GEMM tile (12 ymm accumulators, 2 B vectors and one broadcast: 15 of 16
 * registers, the shape of the SGEMM kernel) and the softmax backward with masked tails. */
#include "kernels/vec_avx2.h"

#define MR 6
#define NV 2

#define NAME_GEMM ta_attn_bwd_gemm_avx2_6x16
#define NAME_DSOFTMAX ta_attn_bwd_dsoftmax_avx2
#define FILL_FN ta_attn_bwd_fill_avx2

#include "kernels/attn_bwd_template.h"
