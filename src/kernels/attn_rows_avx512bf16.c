/* The avx512bf16 ISA's few-row kernel (attn_rows_template.h over vec_avx512.h and
 * AVX512_BF16's dot product; docs/kernels.md, "Decode: the few-row kernels"):
 * attn_qk_rows_bf16dot only, the scores of a bfloat16 query against bfloat16 K rows in
 * 32 products a vdpbf16ps where the avx512 kernels widen K and take 16 an FMA. Every
 * other entry stays avx512's. */
#include "kernels/vec_avx512.h"

#define ROWS_MAX 8
#define PV_ACC 16

#define VB __m512bh
#define VB_LOAD(p) ((__m512bh)_mm512_loadu_si512((const void *)(p)))
#define VB_LOAD_VL(p) ((__m512bh)_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define V_DOT_BF16(acc, a, b) _mm512_dpbf16_ps((acc), (a), (b))

#define NAME_QK_BF16DOT ta_attn_qk_rows_bf16dot_avx512bf16
#define FILL_FN ta_attn_rows_fill_avx512bf16

#include "kernels/attn_rows_template.h"
