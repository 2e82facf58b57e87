/* The avx512bf16 ISA's kernels (attn_rows_template.h over vec_avx512.h and AVX512_BF16's
 * dot product; docs/kernels.md, "Decode: the few-row kernels" and "Attention"): the scores
 * of a bfloat16 query against bfloat16 K rows in 32 products a vdpbf16ps, where the
 * avx512 kernels widen K and take 16 an FMA: attn_qk_rows_bf16dot (tiles of few rows)
 * and attn_qk_bf16dot (attn_qk's tiles). Every other entry stays avx512's. */
#include "kernels/vec_avx512.h"

#include <string.h>

/* The bfloat16 pair at p (any alignment) in every 32-bit lane. */
static inline __m512bh bcast_pair(const uint16_t *p)
{
    int32_t t;
    memcpy(&t, p, sizeof t);
    return (__m512bh)_mm512_set1_epi32(t);
}

#define ROWS_MAX 8
#define PV_ACC 16

#define VB __m512bh
#define VB_LOAD(p) ((__m512bh)_mm512_loadu_si512((const void *)(p)))
#define VB_BCAST_PAIR(p) bcast_pair(p)
#define VB_LOAD_VL(p) ((__m512bh)_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define V_DOT_BF16(acc, a, b) _mm512_dpbf16_ps((acc), (a), (b))

#define NAME_QK_BF16DOT ta_attn_qk_rows_bf16dot_avx512bf16
/* attn_qk's tile of attn_avx512.c (48 queries x 8 keys): the filler checks attn_mq */
#define TILE_QV 3
#define TILE_KJ 8
#define NAME_QK_TILE_BF16DOT ta_attn_qk_bf16dot_avx512bf16_48x8
#define FILL_FN ta_attn_rows_fill_avx512bf16

#include "kernels/attn_rows_template.h"
