/* The bfloat16 dot product's vocabulary for the kernel templates (attn_rows_template.h,
 * attn_bwd_template.h) on AVX512_BF16, over vec_avx512.h's (include only from
 * *_avx512bf16.c files, built with that row's flags). vdpbf16ps: each 32-bit lane adds
 * the two products of a pair of bfloat16 values, each product exact in float32,
 * rounding to nearest-even; bfloat16 denormals read as zero and a denormal result
 * flushes to zero. Header-only: it defines no library symbols. */
#ifndef TA_VEC_AVX512BF16_H
#define TA_VEC_AVX512BF16_H

#include "kernels/vec_avx512.h"

#include <string.h>

/* The bfloat16 pair at p (any alignment) in every 32-bit lane. */
static inline __m512bh bcast_pair(const uint16_t *p)
{
    int32_t t;
    memcpy(&t, p, sizeof t);
    return (__m512bh)_mm512_set1_epi32(t);
}

#define VB __m512bh
#define VB_LOAD(p) ((__m512bh)_mm512_loadu_si512((const void *)(p)))
#define VB_LOADU(p) VB_LOAD(p)
/* the first n pairs (32-bit lanes) from p, the others 0 (memory past them untouched) */
#define VB_LOADN(p, n) ((__m512bh)_mm512_maskz_loadu_epi32(lanes_mask(n), (const void *)(p)))
#define VB_BCAST_PAIR(p) bcast_pair(p)
/* VL bfloat16 values (half a vector of pairs) from p, the upper half 0 */
#define VB_LOAD_VL(p) ((__m512bh)_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define V_DOT_BF16(acc, a, b) _mm512_dpbf16_ps((acc), (a), (b))

#endif /* TA_VEC_AVX512BF16_H */
