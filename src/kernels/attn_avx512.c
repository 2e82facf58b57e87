/* Attention micro-kernels for AVX-512 (docs/kernels.md, "Attention"):
 * Q.K^T on a 48-query x 8-key tile (24 zmm accumulators), P.V on 6 rows x 64 columns
 * (24 accumulators), and a Cody-Waite + degree-6 polynomial expf whose 2^n scaling is
 * vscalefps (so results that underflow into denormals are still right). Tiles of <= 8
 * rows (decode, grouped heads): dot products along D (8 rows x 2 chains of zmm per key)
 * and P.V on whole V rows of up to 8 zmm (128 columns), 3 rows (24 zmm) per pass. */
#include "kernels/vec_avx512.h"

#define QV 3
#define KJ 8
#define PR 6
#define PC 4
#define DR 8
#define DC 2
/* a decode row: 4 FMA chains along d, not 2 (latency-bound at 2) */
#define DC_FEW 4
#define ROWS_MAX 8
#define RP 3
#define PCW 8

#define NAME_QK ta_attn_qk_avx512_48x8
#define NAME_QK_ROWS ta_attn_qk_rows_avx512_8
#define NAME_SOFTMAX ta_attn_softmax_avx512_48
#define NAME_PV ta_attn_pv_avx512_6x64
#define NAME_EXP ta_expf_avx512
#define NAME_PACKQ ta_attn_pack_t_avx512
#define NAME_SCALE_ROW ta_attn_scale_row_avx512
#define NAME_FINISH_ROWS ta_attn_finish_rows_avx512
#define FILL_FN ta_attn_fill_avx512

#include "kernels/attn_template.h"
