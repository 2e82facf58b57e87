/* Portable attention kernels (docs/kernels.md, "Attention"): the same template as the
 * vector files with one-lane "vectors": a 4-query x 4-key Q.K^T tile, 4 rows x 4
 * columns of P.V, and the same Cody-Waite + polynomial expf in plain float arithmetic
 * (no FMA contraction without -mfma). Tiles of one row (decode): a dot product in 4
 * chains per key, P.V on whole V rows of up to 8 columns (wider ones in place). */
#include "kernels/vec_scalar.h"

#define QV 4
#define KJ 4
#define PR 4
#define PC 4
#define DR 1
#define DC 4
#define DC_FEW 4
#define ROWS_MAX 1
#define RP 1
#define PCW 8

#define NAME_QK ta_attn_qk_scalar_4x4
#define NAME_QK_ROWS ta_attn_qk_rows_scalar_1
#define NAME_SOFTMAX ta_attn_softmax_scalar_4
#define NAME_PV ta_attn_pv_scalar_4x4
#define NAME_EXP ta_expf_scalar
#define NAME_PACKQ ta_attn_pack_t_scalar
#define NAME_SCALE_ROW ta_attn_scale_row_scalar
#define NAME_FINISH_ROWS ta_attn_finish_rows_scalar
#define FILL_FN ta_attn_fill_scalar

#include "kernels/attn_template.h"
