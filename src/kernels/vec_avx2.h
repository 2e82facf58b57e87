/* The vector vocabulary of the kernel templates (gemm_template.h, attn_template.h,
 * attn_bwd_template.h) for AVX2 + FMA (include only from *_avx2.c files, built with the
 * avx2 row's flags): VT (the vector type), VL (lanes), the V_* operations with masked
 * tails, and the expf and tanhf the attention kernels share (accuracy: docs/kernels.md,
 * "Attention", "Attention variants"). Header-only: it defines no library symbols. */
#ifndef TA_VEC_AVX2_H
#define TA_VEC_AVX2_H

#include "kernels/transpose8_avx.h"

#include <immintrin.h>
#include <stdint.h>

#define VT __m256
#define VL 8

static inline __m256i lanes_mask(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* e^x for x >= lo (x clamped there: max(lo, x), NaN passes; lo = -104 makes -inf and
 * every x whose exp is below half the smallest denormal round to exactly 0). */
static inline __m256 exp_core_avx2(__m256 x, __m256 lo)
{
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2hi = _mm256_set1_ps(0.693359375f), ln2lo = _mm256_set1_ps(-2.12194440e-4f);
    x = _mm256_max_ps(lo, x);                       /* second operand: NaN passes */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2hi, x);
    r = _mm256_fnmadd_ps(n, ln2lo, r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* n in [-150, 128]: 2^n as two normal factors 2^(n/2) 2^(n - n/2), so that results
     * in the denormal range round once, correctly, and n = 128 (x > 88.38, y < 1)
     * stays finite. */
    __m256i e = _mm256_cvtps_epi32(n);
    __m256i e1 = _mm256_srai_epi32(e, 1), e2 = _mm256_sub_epi32(e, e1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

/* expf for x <= 88.7 (NaN -> NaN, -inf -> 0), as exp_avx512 (vec_avx512.h): lanes
 * with x < -87 are 0 (their product would be denormal or 0: an assist on Intel cores),
 * computed again clamped at -104 only when one lies in [-104, -87). */
static inline __m256 exp_avx2(__m256 x)
{
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    __m256 y = _mm256_andnot_ps(tiny, exp_core_avx2(x, _mm256_set1_ps(-87.0f)));
    if (__builtin_expect(_mm256_movemask_ps(tiny) != 0, 0)) {
        const __m256 den = _mm256_and_ps(tiny, _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_GE_OQ));
        if (_mm256_movemask_ps(den)) y = _mm256_blendv_ps(y, exp_core_avx2(x, _mm256_set1_ps(-104.0f)), den);
    }
    return y;
}

/* c * tanh(x * ic) as softcap_avx512 (vec_avx512.h; accuracy: docs/kernels.md,
 * "Attention variants"). */
static inline __m256 softcap_avx2(__m256 x, __m256 c, __m256 ic)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 a = _mm256_andnot_ps(sign, x), y = _mm256_mul_ps(a, ic), z = _mm256_mul_ps(y, y);
    __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), a, a);
    __m256 e = exp_avx2(_mm256_mul_ps(y, _mm256_set1_ps(-2.0f)));
    __m256 big = _mm256_mul_ps(c, _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e)));
    __m256 lo = _mm256_cmp_ps(y, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm256_or_ps(_mm256_blendv_ps(big, small, lo), _mm256_and_ps(x, sign));
}

/* The sum of v's lanes in a fixed order: (lo half + hi half), then pairs, then the last
 * two: the same for the same v on every call. */
static inline float reduce_add_avx2(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_load_ps(p) /* p aligned to the vector size */
#define V_BCAST(p) _mm256_broadcast_ss(p) /* *p in every lane, read straight from memory */
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps(p, v)
#define V_STREAM(p, v) _mm256_stream_ps(p, v) /* vec_avx512.h */
#define V_LOADN(p, n) _mm256_maskload_ps(p, lanes_mask(n))
#define V_STOREN(p, v, n) _mm256_maskstore_ps(p, lanes_mask(n), v)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_MAX(s, m) _mm256_max_ps(s, m)
#define V_NEGINF_TO_ZERO(v) \
    _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ), v)
#define V_EXP(v) exp_avx2(v)
#define V_EXP_ONEPASS(v) exp_avx2(v) /* one form on every core */
/* Key counts per lane (vec_avx512.h) */
#define VI __m256i
#define V_LOADI(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define V_SET1I(x) _mm256_set1_epi32(x)
#define V_KEEP_KEYS(v, rk, j)                                                                \
    _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), v,                                   \
                     _mm256_castsi256_ps(_mm256_cmpgt_epi32(rk, _mm256_set1_epi32(j))))
#define V_SOFTCAP(v, c, ic) softcap_avx2(v, c, ic)
#define V_TANH(v) softcap_avx2(v, V_SET1(1.0f), V_SET1(1.0f))
#define V_REDUCE_ADD(v) reduce_add_avx2(v) /* float: the sum of the lanes, fixed order */

/* Few-row kernels (attn_rows_template.h): VL float16 / bfloat16 values widened in
 * registers (exact), and the lane sums of VL vectors at once. */
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define V_LOAD_BF16(p)                                                                       \
    _mm256_castsi256_ps(_mm256_slli_epi32(                                                   \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))

/* 2 VL bfloat16 values from p: the even-indexed ones widened into *e, the odd ones into
 * *o (a shift and a mask: no shuffle). */
#define V_LOAD_BF16_EO(p, e, o)                                                              \
    do {                                                                                     \
        const __m256i x_ = _mm256_loadu_si256((const __m256i *)(const void *)(p));           \
        *(e) = _mm256_castsi256_ps(_mm256_slli_epi32(x_, 16));                               \
        *(o) = _mm256_castsi256_ps(_mm256_and_si256(x_, _mm256_set1_epi32((int)0xffff0000u))); \
    } while (0)

/* The 2 VL floats a, b (in order) split into their even- and odd-indexed elements, and
 * back (the column layout of V_LOAD_BF16_EO). */
#define V_DEINTERLEAVE(a, b, e, o)                                                           \
    do {                                                                                     \
        const __m256 a_ = (a), b_ = (b); /* e, o may be a, b */                              \
        *(e) = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a_, b_, 0x88)), 0xD8)); \
        *(o) = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a_, b_, 0xDD)), 0xD8)); \
    } while (0)
#define V_INTERLEAVE(e, o, a, b)                                                             \
    do {                                                                                     \
        const __m256 lo_ = _mm256_unpacklo_ps(e, o), hi_ = _mm256_unpackhi_ps(e, o); /* first */ \
        *(a) = _mm256_permute2f128_ps(lo_, hi_, 0x20);                                       \
        *(b) = _mm256_permute2f128_ps(lo_, hi_, 0x31);                                       \
    } while (0)

/* Lane i of the result = the sum of a[i]'s 8 lanes, for 8 vectors at once (a transpose
 * tree: pairs of lanes, then of 64-bit and 128-bit groups; the same order every call). */
static inline __m256 hsum8_avx2(const __m256 *a)
{
    __m256 b[4], c[2];
    for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 2; i++)
        c[i] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    return _mm256_add_ps(_mm256_permute2f128_ps(c[0], c[1], 0x20),
                         _mm256_permute2f128_ps(c[0], c[1], 0x31));
}
#define V_HSUM_ALL(a) hsum8_avx2(a)

#endif
