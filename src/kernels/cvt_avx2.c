/* AVX2 + F16C conversions float32 <-> float16 / bfloat16 (cvt_template.h), 8 elements a
 * step in registers: float16 by vcvtph2ps / vcvtps2ph (immediate round-to-nearest-even,
 * not MXCSR's mode; subnormals both ways, NaN quieted: the bits of src/core/dtype.h);
 * bfloat16 widening is a zero-extension and a shift, narrowing the integer
 * round-to-nearest-even of dtype.h (add 0x7fff plus the kept lsb, shift) with NaN
 * lanes quieted instead, packed to 16 bits by vpackusdw (every lane fits). The avx2 row
 * requires F16C (src/kernels/cpu.c). */
#include <immintrin.h>
#include <stdint.h>

static inline __m128i bf16_round_avx2(__m256 v)
{
    __m256i x = _mm256_castps_si256(v), hi = _mm256_srli_epi32(x, 16);
    __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

#define CVT_VL 8
#define CVT_F16_F32(d, s) _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s))))
#define CVT_F32_F16(d, s)                                                                     \
    _mm_storeu_si128((__m128i *)(d),                                                          \
                     _mm256_cvtps_ph(_mm256_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define CVT_BF16_F32(d, s)                                                                    \
    _mm256_storeu_ps(d, _mm256_castsi256_ps(_mm256_slli_epi32(                                \
                            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s))), 16)))
#define CVT_F32_BF16(d, s) _mm_storeu_si128((__m128i *)(d), bf16_round_avx2(_mm256_loadu_ps(s)))

#define NAME_F16_F32 ta_cvt_f16_f32_avx2
#define NAME_F32_F16 ta_cvt_f32_f16_avx2
#define NAME_BF16_F32 ta_cvt_bf16_f32_avx2
#define NAME_F32_BF16 ta_cvt_f32_bf16_avx2
#define FILL_FN ta_cvt_fill_avx2

#include "kernels/cvt_template.h"
