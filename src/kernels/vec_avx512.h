/* The vector vocabulary of the kernel templates (gemm_template.h, attn_template.h,
 * attn_bwd_template.h) for AVX-512 (include only from *_avx512.c files, built with the
 * avx512 row's flags): VT (the vector type), VL (lanes), the V_* operations with masked
 * tails, and the expf and tanhf the attention kernels share (accuracy: docs/kernels.md,
 * "Attention", "Attention variants"). Header-only: it defines no library symbols. */
#ifndef TA_VEC_AVX512_H
#define TA_VEC_AVX512_H

#include "kernels/transpose8_avx.h"

#include <immintrin.h>
#include <stdint.h>

#define VT __m512
#define VL 16

static inline __mmask16 lanes_mask(int n) { return (__mmask16)((1u << n) - 1u); }

/* 2^(j/32) for j = 0 .. 31, each rounded to the nearest float (exp_core_avx512's table). */
static const float exp2_32_avx512[32] __attribute__((aligned(64))) = {
    0x1.000000p+0f, 0x1.059b0ep+0f, 0x1.0b5586p+0f, 0x1.11301ep+0f, 0x1.172b84p+0f,
    0x1.1d4874p+0f, 0x1.2387a6p+0f, 0x1.29e9e0p+0f, 0x1.306fe0p+0f, 0x1.371a74p+0f,
    0x1.3dea64p+0f, 0x1.44e086p+0f, 0x1.4bfdaep+0f, 0x1.5342b6p+0f, 0x1.5ab07ep+0f,
    0x1.6247ecp+0f, 0x1.6a09e6p+0f, 0x1.71f75ep+0f, 0x1.7a1148p+0f, 0x1.82589ap+0f,
    0x1.8ace54p+0f, 0x1.93737cp+0f, 0x1.9c4918p+0f, 0x1.a5503cp+0f, 0x1.ae89fap+0f,
    0x1.b7f770p+0f, 0x1.c199bep+0f, 0x1.cb720ep+0f, 0x1.d5818ep+0f, 0x1.dfc974p+0f,
    0x1.ea4afap+0f, 0x1.f50766p+0f};

/* e^x, 0 in the lanes outside keep, for x >= -104 or NaN in the kept lanes (the other
 * lanes may hold anything: -inf makes NaN there, which the zero mask drops):
 * k = x log2(e) rounded to a multiple of 1/32 (one FMA adding 1.5 * 2^18, whose float
 * has ulp 1/32: the sum's low 5 bits are then j = 32 k mod 32), r = x - k ln2 (Cody-Waite,
 * two FMAs; |r| <= ln2 / 64), e^x = 2^floor(k) * 2^(j/32) * e^r with 2^(j/32) from the
 * table (one two-register permute) and e^r = 1 + r + r^2/2 + r^3/6 (the r^4 term is below
 * 2^-30), the last step one FMA T + T (e^r - 1), and 2^floor(k) by vscalefps (one
 * rounding, also into the denormals). 7 FMA-pipe ops (the Cephes form it replaced had
 * 10); at most 1.02 ulp on every float in [-104, 88.7] (docs/kernels.md). */
static inline __m512 exp_poly_avx512(__m512 x, __mmask16 keep)
{
    const __m512 magic = _mm512_set1_ps(0x1.8p18f);
    const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), magic);
    const __m512 k = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0x1.62e430p-1f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-0x1.05c610p-29f), r);
    const __m512 tab = _mm512_permutex2var_ps(_mm512_load_ps(exp2_32_avx512),
                                              _mm512_castps_si512(t),
                                              _mm512_load_ps(exp2_32_avx512 + 16));
    __m512 q = _mm512_fmadd_ps(r, _mm512_set1_ps(0x1.555556p-3f), _mm512_set1_ps(0.5f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
    q = _mm512_mul_ps(q, r);
    return _mm512_maskz_scalef_ps(keep, _mm512_fmadd_ps(tab, q, tab), k);
}

/* exp_poly_avx512 on x clamped at lo >= -104 first (max(lo, x): NaN passes). */
static inline __m512 exp_core_avx512(__m512 x, __m512 lo, __mmask16 keep)
{
    return exp_poly_avx512(_mm512_max_ps(lo, x), keep); /* second operand: NaN passes */
}

/* expf for x <= 88.7 (NaN -> NaN, -inf -> 0). A result below FLT_MIN costs an Intel core
 * a microcode assist (~10x the exp's time: a causal tile's masked -inf scores measured
 * 8x slower in the softmax step on Emerald Rapids; docs/kernels.md), so lanes with
 * x < -87 are 0 by a mask, and only when one of them lies in [-104, -87) (a genuine
 * denormal result; x < -104 rounds to 0 in any case) are those lanes computed again,
 * clamped at -104, with the assist: the same bits as one pass clamped at -104. */
static inline __m512 exp_avx512(__m512 x)
{
    /* keep: x >= -87 or NaN (not less than, unordered), so no clamp and no mask
     * inversion: two operations of the ~16 a score vector takes in the softmax step, on
     * the two FMA ports of an Intel core; kortest's carry says whether all lanes kept */
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);
    __m512 y = exp_poly_avx512(x, keep);
    if (__builtin_expect(!_kortestc_mask16_u8(keep, keep), 0)) {
        const __mmask16 den = _mm512_mask_cmp_ps_mask((__mmask16)~keep, x, _mm512_set1_ps(-104.0f), _CMP_GE_OQ);
        if (den) y = _mm512_mask_mov_ps(y, den, exp_core_avx512(x, _mm512_set1_ps(-104.0f), den));
    }
    return y;
}

/* 2^x for the softmax step in base 2 (kernels.h, attn_softmax_exp2; docs/kernels.md, "The
 * softmax in base 2"), for x <= 128 or NaN in the kept lanes (the others may hold
 * anything, -inf included: the zero mask drops them), 0 in the lanes outside keep: j/32 =
 * x rounded down to a multiple of 1/32 (one add of 1.5 * 2^18 rounding toward -inf: its
 * low 5 bits are j mod 32), r = x - that (vreduceps: exact, in [0, 1/32)), 2^(j/32) from
 * the table, 2^r - 1 ~ r (c1 + r (c2 + r c3)) (minimax on [0, 1/32]: 2^-31.7 relative
 * with the float coefficients), then 2^floor(x) by vscalefps on x itself (floor(x) is
 * the integer part of j/32's multiple). 6 FMA-pipe operations, one vreduceps, one
 * permute. */
static inline __m512 exp2_poly_avx512(__m512 x, __mmask16 keep)
{
    const __m512 t = _mm512_add_round_ps(x, _mm512_set1_ps(0x1.8p18f), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_reduce_ps(x, (5 << 4) | _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 tab = _mm512_permutex2var_ps(_mm512_load_ps(exp2_32_avx512),
                                              _mm512_castps_si512(t),
                                              _mm512_load_ps(exp2_32_avx512 + 16));
    __m512 q = _mm512_fmadd_ps(r, _mm512_set1_ps(0x1.cb710ap-5f), _mm512_set1_ps(0x1.ebf65ep-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0x1.62e432p-1f));
    q = _mm512_mul_ps(q, r);
    return _mm512_maskz_scalef_ps(keep, _mm512_fmadd_ps(tab, q, tab), x);
}

/* 2^x for x <= 128 (NaN -> NaN, -inf -> 0), as exp_avx512: lanes below -125 are 0 by a
 * mask and computed again, clamped at -150, only when one lies in [-150, -125) (a
 * denormal result, with its microcode assist on Intel): exp2_poly_avx512's bits on x
 * clamped at -150 for every input (V_EXP2_ONEPASS; at most 1.026 ulp, denormals 1.003 x
 * 2^-149, over every float in [-150, 128): docs/kernels.md). */
static inline __m512 exp2_avx512(__m512 x)
{
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_NLT_UQ);
    __m512 y = exp2_poly_avx512(x, keep);
    if (__builtin_expect(!_kortestc_mask16_u8(keep, keep), 0)) {
        const __mmask16 den = _mm512_mask_cmp_ps_mask((__mmask16)~keep, x, _mm512_set1_ps(-150.0f), _CMP_GE_OQ);
        if (den) y = _mm512_mask_mov_ps(y, den, exp2_poly_avx512(_mm512_max_ps(_mm512_set1_ps(-150.0f), x), den));
    }
    return y;
}
#define V_EXP2(v) exp2_avx512(v)
#define V_FMS(a, b, c) _mm512_fmsub_ps(a, b, c)
/* The carry of a base-2 softmax shift (kernels.h, attn_softmax_exp2): u L - uL exactly
 * (one fused multiply-subtract) in the lanes where |uL| < TA_EXP2_BIG, else 0. */
#define V_EXP2_CARRY(u, uL)                                                                  \
    _mm512_maskz_fmsub_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(uL), _mm512_set1_ps(TA_EXP2_BIG), _CMP_LT_OQ), \
                          u, _mm512_set1_ps(TA_LOG2E_F), uL)
/* Whether a lane of bits (a lane mask) holds |uL| >= TA_EXP2_BIG or NaN. */
#define V_EXP2_ANY_BIG(uL, bits)                                                             \
    (_mm512_mask_cmp_ps_mask((__mmask16)(bits), _mm512_abs_ps(uL), _mm512_set1_ps(TA_EXP2_BIG), _CMP_NLT_UQ) != 0)
#define V_EXP2_ONEPASS(v) exp2_poly_avx512(_mm512_max_ps(_mm512_set1_ps(-150.0f), v), (__mmask16)0xFFFF)

/* c * tanh(x * ic) for c > 0 and ic = 1 / c (softcap; c = ic = 1: tanhf; accuracy:
 * docs/kernels.md, "Attention variants"), from a = |x| with x's sign, y = a * ic, on
 * Cephes' split: y < 0.625: a + a y^2 P(y^2) (degree-4 P; so tiny and denormal x come
 * back exactly); else c (1 - e) / (1 + e) with e = exp(-2y) <= 1 (never overflows; e = 0
 * past y ~ 52: exactly c). NaN -> NaN (the comparison fails for NaN and the exp branch
 * keeps it), +-inf -> +-c, -0 -> -0. */
static inline __m512 softcap_avx512(__m512 x, __m512 c, __m512 ic)
{
    const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    __m512 a = _mm512_andnot_ps(sign, x), y = _mm512_mul_ps(a, ic), z = _mm512_mul_ps(y, y);
    __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), a, a);
    __m512 e = exp_avx512(_mm512_mul_ps(y, _mm512_set1_ps(-2.0f)));
    __m512 big = _mm512_mul_ps(c, _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e)));
    __mmask16 lo = _mm512_cmp_ps_mask(y, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm512_or_ps(_mm512_mask_blend_ps(lo, big, small), _mm512_and_ps(x, sign));
}

#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_load_ps(p) /* p aligned to the vector size */
#define V_BCAST(p) _mm512_set1_ps(*(p)) /* *p in every lane, read straight from memory */
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps(p, v)
#define V_STREAM(p, v) _mm512_stream_ps(p, v) /* non-temporal; p aligned to the vector size */
#define V_LOADN(p, n) _mm512_maskz_loadu_ps(lanes_mask(n), p)
#define V_STOREN(p, v, n) _mm512_mask_storeu_ps(p, lanes_mask(n), v)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_MAX(s, m) _mm512_max_ps(s, m)
#define V_NEGINF_TO_ZERO(v) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ), v, _mm512_setzero_ps())
#define V_EXP(v) exp_avx512(v)
/* exp_avx512's bits in one pass (x < -104 gives 0 either way), for cores where denormal
 * results cost no assist (ta_exp_denormal_assist = 0): no compare, no branch. */
#define V_EXP_ONEPASS(v) exp_core_avx512(v, _mm512_set1_ps(-104.0f), (__mmask16)0xFFFF)
/* Key counts per lane: VI holds VL int32 counts (V_LOADI from memory, V_SET1I one count in
 * every lane); V_KEEP_KEYS(v, rk, j) keeps v in the
 * lanes whose count exceeds key j and gives -inf in the others. */
#define VI __m512i
#define V_LOADI(p) _mm512_loadu_si512((const void *)(p))
#define V_SET1I(x) _mm512_set1_epi32(x)
#define V_KEEP_KEYS(v, rk, j) \
    _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(rk, _mm512_set1_epi32(j)), _mm512_set1_ps(-__builtin_inff()), v)

/* dst[i * ld + r] = scale * rows[r][p0 + i], i, r < 16: a 16 x 16 transpose whose first
 * round is done by the loads (x[a]'s 128-bit lane g: columns 4c .. 4c + 3 of row
 * 4g + a, three of them through vinsertf32x4 from memory, which may issue on either
 * vector port), then a 4 x 4 transpose within each lane (8 shuffles per 4 columns: 32
 * per 256 elements, where four rounds of register shuffles took 64), then one multiply
 * per element: the same products as transpose8_scaled's. A 48 x 64 query tile from L1,
 * Emerald Rapids: 182 ns against 307 for the four rounds. */
static inline void transpose16_scaled(float *dst, int64_t ld, const float *const *rows,
                                      int64_t p0, float scale)
{
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512 x[4];
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(rows[a] + p0 + 4 * c));
            v = _mm512_insertf32x4(v, _mm_loadu_ps(rows[4 + a] + p0 + 4 * c), 1);
            v = _mm512_insertf32x4(v, _mm_loadu_ps(rows[8 + a] + p0 + 4 * c), 2);
            x[a] = _mm512_insertf32x4(v, _mm_loadu_ps(rows[12 + a] + p0 + 4 * c), 3);
        }
        const __m512 u0 = _mm512_unpacklo_ps(x[0], x[1]), u1 = _mm512_unpackhi_ps(x[0], x[1]);
        const __m512 u2 = _mm512_unpacklo_ps(x[2], x[3]), u3 = _mm512_unpackhi_ps(x[2], x[3]);
        float *d = dst + 4 * c * ld;
        _mm512_storeu_ps(d, _mm512_mul_ps(_mm512_shuffle_ps(u0, u2, _MM_SHUFFLE(1, 0, 1, 0)), sc));
        _mm512_storeu_ps(d + ld, _mm512_mul_ps(_mm512_shuffle_ps(u0, u2, _MM_SHUFFLE(3, 2, 3, 2)), sc));
        _mm512_storeu_ps(d + 2 * ld, _mm512_mul_ps(_mm512_shuffle_ps(u1, u3, _MM_SHUFFLE(1, 0, 1, 0)), sc));
        _mm512_storeu_ps(d + 3 * ld, _mm512_mul_ps(_mm512_shuffle_ps(u1, u3, _MM_SHUFFLE(3, 2, 3, 2)), sc));
    }
}
#define V_TRANSPOSE16_SCALED(dst, ld, rows, p0, scale) transpose16_scaled(dst, ld, rows, p0, scale)
#define V_SOFTCAP(v, c, ic) softcap_avx512(v, c, ic)
#define V_TANH(v) softcap_avx512(v, V_SET1(1.0f), V_SET1(1.0f))
/* float: the sum of the lanes in gcc's fixed tree (halves, then quarters, ...) */
#define V_REDUCE_ADD(v) _mm512_reduce_add_ps(v)

/* Few-row kernels (attn_rows_template.h): VL float16 / bfloat16 values widened in
 * registers (exact), and the lane sums of VL vectors at once. */
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define V_LOAD_BF16(p)                                                                       \
    _mm512_castsi512_ps(_mm512_slli_epi32(                                                   \
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p))), 16))

/* 2 VL bfloat16 values from p: the even-indexed ones widened into *e, the odd ones into
 * *o (a shift and a mask: no shuffle). */
#define V_LOAD_BF16_EO(p, e, o)                                                              \
    do {                                                                                     \
        const __m512i x_ = _mm512_loadu_si512((const void *)(p));                            \
        *(e) = _mm512_castsi512_ps(_mm512_slli_epi32(x_, 16));                               \
        *(o) = _mm512_castsi512_ps(_mm512_and_si512(x_, _mm512_set1_epi32((int)0xffff0000u))); \
    } while (0)

/* The 2 VL floats a, b (in order) split into their even- and odd-indexed elements, and
 * back (the column layout of V_LOAD_BF16_EO). */
#define V_DEINTERLEAVE(a, b, e, o)                                                           \
    do {                                                                                     \
        const __m512i ie_ = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30); \
        const __m512 a_ = (a), b_ = (b); /* e, o may be a, b */                              \
        *(e) = _mm512_permutex2var_ps(a_, ie_, b_);                                          \
        *(o) = _mm512_permutex2var_ps(a_, _mm512_add_epi32(ie_, _mm512_set1_epi32(1)), b_);  \
    } while (0)
#define V_INTERLEAVE(e, o, a, b)                                                             \
    do {                                                                                     \
        const __m512i il_ = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23); \
        const __m512 e_ = (e), o_ = (o); /* a, b may be e, o */                              \
        *(a) = _mm512_permutex2var_ps(e_, il_, o_);                                          \
        *(b) = _mm512_permutex2var_ps(e_, _mm512_add_epi32(il_, _mm512_set1_epi32(8)), o_);  \
    } while (0)

/* Lane i of the result = the sum of a[i]'s 16 lanes, for 16 vectors at once (a transpose
 * tree: pairs of lanes, then of 64-bit and of 128-bit groups, 45 operations; the same
 * order on every call). */
static inline __m512 hsum16_avx512(const __m512 *a)
{
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    for (int i = 0; i < 2; i++)
        d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88), _mm512_shuffle_f32x4(d[0], d[1], 0xDD));
}
#define V_HSUM_ALL(a) hsum16_avx512(a)

#endif
