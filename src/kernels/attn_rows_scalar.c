/* The few-row attention kernels on float32, float16 and bfloat16 rows for scalar
 * (attn_rows_template.h over vec_scalar.h; docs/kernels.md, "Decode: the few-row kernels"):
 * tiles of up to 1 rows (attn_rows_max), P.V passes of up to 8 accumulators. */
#include "kernels/vec_scalar.h"

#define ROWS_MAX 1
#define PV_ACC 8

#define NAME_QK_F32 ta_attn_qk_rows_f32_scalar
#define NAME_QK_F16 ta_attn_qk_rows_f16_scalar
#define NAME_QK_BF16 ta_attn_qk_rows_bf16_scalar
#define NAME_PV_F32 ta_attn_pv_rows_f32_scalar
#define NAME_PV_F16 ta_attn_pv_rows_f16_scalar
#define NAME_PV_BF16 ta_attn_pv_rows_bf16_scalar
#define NAME_SOFTMAX_ROWS ta_attn_softmax_rows_scalar
#define FILL_FN ta_attn_rows_fill_scalar

#include "kernels/attn_rows_template.h"
