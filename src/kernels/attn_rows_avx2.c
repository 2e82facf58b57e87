/* The few-row attention kernels on float32, float16 and bfloat16 rows for avx2
 * (attn_rows_template.h over vec_avx2.h; docs/kernels.md, "Decode: the few-row kernels"):
 * tiles of up to 4 rows (attn_rows_max), P.V passes of up to 8 accumulators. */
#include "kernels/vec_avx2.h"

#define ROWS_MAX 4
#define PV_ACC 8

#define NAME_QK_F32 ta_attn_qk_rows_f32_avx2
#define NAME_QK_F16 ta_attn_qk_rows_f16_avx2
#define NAME_QK_BF16 ta_attn_qk_rows_bf16_avx2
#define NAME_PV_F32 ta_attn_pv_rows_f32_avx2
#define NAME_PV_F16 ta_attn_pv_rows_f16_avx2
#define NAME_PV_BF16 ta_attn_pv_rows_bf16_avx2
#define NAME_SOFTMAX_ROWS ta_attn_softmax_rows_avx2
#define FILL_FN ta_attn_rows_fill_avx2

#include "kernels/attn_rows_template.h"
