/* Portable attention backward kernels (attn_bwd_template.h) with one-lane "vectors": a
 * 4 x 4 GEMM tile in plain float multiply-adds (no FMA contraction without -mfma) and
 * the softmax backward. The reference every ISA's kernels are tested against. */
#include <stdint.h>

#define VT float
#define VL 1
#define MR 4
#define NV 4

#define V_ZERO() 0.0f
#define V_SET1(x) (x)
#define V_LOADU(p) (*(p))
#define V_STOREU(p, v) (*(p) = (v))
#define V_LOADN(p, n) ((n) > 0 ? *(p) : 0.0f)
#define V_STOREN(p, v, n) ((n) > 0 ? (void)(*(p) = (v)) : (void)0)
#define V_SUB(a, b) ((a) - (b))
#define V_MUL(a, b) ((a) * (b))
#define V_FMA(a, b, c) ((a) * (b) + (c))

#define NAME_GEMM ta_attn_bwd_gemm_scalar_4x4
#define NAME_DSOFTMAX ta_attn_bwd_dsoftmax_scalar
#define FILL_FN ta_attn_bwd_fill_scalar

#include "kernels/attn_bwd_template.h"
