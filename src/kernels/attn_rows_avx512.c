/* The few-row attention kernels on float32, float16 and bfloat16 rows for avx512
 * (attn_rows_template.h over vec_avx512.h; docs/kernels.md, "Decode: the few-row kernels"):
 * tiles of up to 8 rows (attn_rows_max), P.V passes of up to 16 accumulators. */
#include "kernels/vec_avx512.h"

#define ROWS_MAX 8
#define PV_ACC 16

#define NAME_QK_F32 ta_attn_qk_rows_f32_avx512
#define NAME_QK_F16 ta_attn_qk_rows_f16_avx512
#define NAME_QK_BF16 ta_attn_qk_rows_bf16_avx512
#define NAME_PV_F32 ta_attn_pv_rows_f32_avx512
#define NAME_PV_F16 ta_attn_pv_rows_f16_avx512
#define NAME_PV_BF16 ta_attn_pv_rows_bf16_avx512
#define NAME_SOFTMAX_ROWS ta_attn_softmax_rows_avx512
#define FILL_FN ta_attn_rows_fill_avx512

#include "kernels/attn_rows_template.h"
