/* Attention backward micro-kernels for AVX-512 (attn_bwd_template.h): a 6-row x 64-column
 * GEMM tile (24 zmm accumulators, 4 B vectors and one broadcast: 29 of 32 registers; on
 * Zen 5 a k step is 24 half-rate FMAs against 10 loads) and the softmax backward with
 * masked tails. */
#include <immintrin.h>

#define VT __m512
#define VL 16
#define MR 6
#define NV 4

static inline __mmask16 lanes_mask(int n) { return (__mmask16)((1u << n) - 1u); }

#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps(p, v)
#define V_LOADN(p, n) _mm512_maskz_loadu_ps(lanes_mask(n), p)
#define V_STOREN(p, v, n) _mm512_mask_storeu_ps(p, lanes_mask(n), v)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)

#define NAME_GEMM ta_attn_bwd_gemm_avx512_6x64
#define NAME_DSOFTMAX ta_attn_bwd_dsoftmax_avx512
#define FILL_FN ta_attn_bwd_fill_avx512

#include "kernels/attn_bwd_template.h"
