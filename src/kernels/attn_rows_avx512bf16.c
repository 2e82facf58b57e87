/* The avx512bf16 ISA's kernels (attn_rows_template.h over vec_avx512bf16.h: AVX512_BF16's
 * dot product; docs/kernels.md, "Decode: the few-row kernels" and "Attention"): the scores
 * of a bfloat16 query against bfloat16 K rows in 32 products a vdpbf16ps, where the
 * avx512 kernels widen K and take 16 an FMA: attn_qk_rows_bf16dot (tiles of few rows)
 * and attn_qk_bf16dot (attn_qk's tiles). Every other entry stays avx512's. */
#include "kernels/vec_avx512bf16.h"

#define ROWS_MAX 8
#define PV_ACC 16

#define NAME_QK_BF16DOT ta_attn_qk_rows_bf16dot_avx512bf16
/* attn_qk's tile of attn_avx512.c (48 queries x 8 keys): the filler checks attn_mq */
#define TILE_QV 3
#define TILE_KJ 8
#define NAME_QK_TILE_BF16DOT ta_attn_qk_bf16dot_avx512bf16_48x8
#define FILL_FN ta_attn_rows_fill_avx512bf16

#include "kernels/attn_rows_template.h"
