/* The 8 x 8 register transpose that attn_pack_t's x86 instances use (V_TRANSPOSE8_SCALED in
 * attn_template.h): 256-bit AVX only, so both vec_avx2.h and vec_avx512.h include it
 * (from *_avx2.c / *_avx512.c files, built with flags that include AVX). Header-only. */
#ifndef TA_TRANSPOSE8_AVX_H
#define TA_TRANSPOSE8_AVX_H

#include <immintrin.h>
#include <stdint.h>

/* dst[i * ld + r] = scale * rows[r][p0 + i], i, r < 8: an 8 x 8 transpose in registers
 * (unpack, shuffle, 128-bit permute), then one multiply per element. */
static inline void transpose8_scaled(float *dst, int64_t ld, const float *const *rows,
                                     int64_t p0, float scale)
{
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(rows[i] + p0);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    const __m256 sc = _mm256_set1_ps(scale);
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * ld, _mm256_mul_ps(_mm256_permute2f128_ps(r[i], r[i + 4], 0x20), sc));
        _mm256_storeu_ps(dst + (i + 4) * ld, _mm256_mul_ps(_mm256_permute2f128_ps(r[i], r[i + 4], 0x31), sc));
    }
}
#define V_TRANSPOSE8_SCALED(dst, ld, rows, p0, scale) transpose8_scaled(dst, ld, rows, p0, scale)

#endif
