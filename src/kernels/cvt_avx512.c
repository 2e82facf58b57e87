/* AVX-512 conversions float32 <-> float16 / bfloat16 (cvt_template.h), 16 elements a
 * step in registers: float16 by vcvtph2ps / vcvtps2ph (immediate round-to-nearest-even,
 * subnormals both ways, NaN quieted: the bits of src/core/dtype.h); bfloat16 widening
 * is a zero-extension and a shift, narrowing the integer round-to-nearest-even of
 * dtype.h (add 0x7fff plus the kept lsb, shift), NaN lanes quieted instead, then
 * vpmovdw. Not vcvtneps2bf16 (AVX512_BF16): it flushes subnormal inputs and outputs to
 * zero, so it would disagree with the other ISAs and with PyTorch. */
#include <immintrin.h>
#include <stdint.h>

static inline __m256i bf16_round_avx512(__m512 v)
{
    __m512i x = _mm512_castps_si512(v), hi = _mm512_srli_epi32(x, 16);
    __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

#define CVT_VL 16
#define CVT_F16_F32(d, s) _mm512_storeu_ps(d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s))))
#define CVT_F32_F16(d, s)                                                                     \
    _mm256_storeu_si256((__m256i *)(d),                                                       \
                        _mm512_cvtps_ph(_mm512_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define CVT_BF16_F32(d, s)                                                                    \
    _mm512_storeu_ps(d, _mm512_castsi512_ps(_mm512_slli_epi32(                                \
                            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s))), 16)))
#define CVT_F32_BF16(d, s) _mm256_storeu_si256((__m256i *)(d), bf16_round_avx512(_mm512_loadu_ps(s)))

#define NAME_F16_F32 ta_cvt_f16_f32_avx512
#define NAME_F32_F16 ta_cvt_f32_f16_avx512
#define NAME_BF16_F32 ta_cvt_bf16_f32_avx512
#define NAME_F32_BF16 ta_cvt_f32_bf16_avx512
#define FILL_FN ta_cvt_fill_avx512

#include "kernels/cvt_template.h"
