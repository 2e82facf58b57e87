/* The avx512bf16 ISA's attention backward kernel (attn_bwd_template.h over
 * vec_avx512bf16.h): attn_bwd_gemm_bf16dot, the S = Q K^T and dP = dO V^T products of a
 * bfloat16 backward on attn_bwd_avx512.c's 6-row x 64-column tile, a k step a pair of
 * bfloat16 values (24 vdpbf16ps: 48 products a row and column vector where the float32
 * gemm does 24 FMAs for 24). Every other entry stays avx512's. */
#include "kernels/vec_avx512bf16.h"

#define MR 6
#define NV 4

#define NAME_GEMM_BF16DOT ta_attn_bwd_gemm_bf16dot_avx512bf16_6x64
#define FILL_FN ta_attn_bwd_fill_avx512bf16

#include "kernels/attn_bwd_template.h"
