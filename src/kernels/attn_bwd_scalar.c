/* Portable attention backward kernels (attn_bwd_template.h) with one-lane "vectors": a
 * 4 x 4 GEMM tile in plain float multiply-adds (no FMA contraction without -mfma) and
 * the softmax backward. The reference every ISA's kernels are tested against. */
#include "kernels/vec_scalar.h"

/* doubles for attn_row_dot */
#define VD double
#define VDL 1
#define VD_ZERO() 0.0
#define VD_WIDEN(p) ((double)*(p))
#define VD_MUL(a, b) ((a) * (b))
#define VD_ADD(a, b) ((a) + (b))
#define VD_STOREU(p, v) (*(p) = (v))

#define MR 4
#define NV 4

#define NAME_GEMM ta_attn_bwd_gemm_scalar_4x4
#define NAME_GEMM_RANGED ta_attn_bwd_gemm_ranged_scalar
#define NAME_DSOFTMAX ta_attn_bwd_dsoftmax_scalar
#define NAME_ROW_DOT ta_attn_row_dot_scalar
#define FILL_FN ta_attn_bwd_fill_scalar

#include "kernels/attn_bwd_template.h"
