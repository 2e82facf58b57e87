/* Attention micro-kernels for AVX2 + FMA (docs/kernels.md, "Attention"):
 * Q.K^T on a 24-query x 4-key tile (12 ymm accumulators), P.V on 6 rows x 16 columns
 * (12 accumulators), and a Cody-Waite + degree-6 polynomial expf that builds 2^n in the
 * exponent field as two factors (denormal results are rounded correctly). Tiles of <= 4
 * rows (decode): dot products along D (4 rows x 2 chains of ymm per key) and P.V on whole
 * V rows of up to 12 ymm, one row per pass. */
#include "kernels/vec_avx2.h"

#define QV 3
#define KJ 4
#define PR 6
#define PC 2
#define DR 4
#define DC 2
#define DC_FEW 2
#define ROWS_MAX 4
#define RP 1
#define PCW 12

#define NAME_QK ta_attn_qk_avx2_24x4
#define NAME_QK_ROWS ta_attn_qk_rows_avx2_4
#define NAME_SOFTMAX ta_attn_softmax_avx2_24
#define NAME_PV ta_attn_pv_avx2_6x16
#define NAME_EXP ta_expf_avx2
#define NAME_PACKQ ta_attn_pack_t_avx2
#define NAME_SCALE_ROW ta_attn_scale_row_avx2
#define NAME_FINISH_ROWS ta_attn_finish_rows_avx2
#define FILL_FN ta_attn_fill_avx2

#include "kernels/attn_template.h"
