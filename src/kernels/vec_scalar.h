/* The vector vocabulary of the kernel templates (gemm_template.h, attn_template.h,
 * attn_bwd_template.h) for portable C with one-lane "vectors" (plain float arithmetic:
 * no FMA contraction under -std=c11): VT (the vector type), VL (lanes), the V_*
 * operations with masked tails, and the expf and tanhf the attention kernels share
 * (accuracy: docs/kernels.md, "Attention", "Attention variants"). Header-only: it
 * defines no library symbols. */
#ifndef TA_VEC_SCALAR_H
#define TA_VEC_SCALAR_H

#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

#define VT float
#define VL 1

static inline float exp_scalar(float x)
{
    if (x != x) return x;
    if (x < -104.0f) x = -104.0f; /* -inf and anything below half a denormal -> 0 */
    /* Round to nearest by the 1.5 * 2^23 trick (rintf may be a library call here). */
    float t = x * 1.44269504088896341f;
    float n = (t + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + (r + 1.0f);
    int32_t e = (int32_t)n, e1 = e / 2, e2 = e - e1; /* two factors: n may be 128 */
    uint32_t b1 = (uint32_t)(e1 + 127) << 23, b2 = (uint32_t)(e2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    return y * s1 * s2;
}

/* c * tanh(x * ic) as softcap_avx512 (vec_avx512.h), without fused multiply-adds. */
static inline float softcap_scalar(float x, float c, float ic)
{
    float a = __builtin_fabsf(x), y = a * ic, r;
    if (y < 0.625f) {
        float z = y * y, p = -5.70498872745e-3f;
        p = p * z + 2.06390887954e-2f;
        p = p * z - 5.37397155531e-2f;
        p = p * z + 1.33314422036e-1f;
        p = p * z - 3.33332819422e-1f;
        r = p * z * a + a;
    } else {
        float e = exp_scalar(y * -2.0f); /* NaN stays NaN */
        r = c * ((1.0f - e) / (1.0f + e));
    }
    return __builtin_copysignf(r, x);
}

#define V_ZERO() 0.0f
#define V_SET1(x) (x)
#define V_LOAD(p) (*(p)) /* p aligned to the vector size */
#define V_BCAST(p) (*(p)) /* *p in every lane, read straight from memory */
#define V_LOADU(p) (*(p))
#define V_STOREU(p, v) (*(p) = (v))
#define V_STREAM(p, v) (void)(*(p) = (v)) /* vec_avx512.h */
#define V_LOADN(p, n) ((n) > 0 ? *(p) : 0.0f)
#define V_STOREN(p, v, n) ((n) > 0 ? (void)(*(p) = (v)) : (void)0)
#define V_ADD(a, b) ((a) + (b))
#define V_SUB(a, b) ((a) - (b))
#define V_MUL(a, b) ((a) * (b))
#define V_FMA(a, b, c) ((a) * (b) + (c))
#define V_MAX(s, m) ((s) > (m) ? (s) : (m))
#define V_NEGINF_TO_ZERO(v) ((v) == -__builtin_inff() ? 0.0f : (v))
#define V_EXP(v) exp_scalar(v)
#define V_EXP_ONEPASS(v) exp_scalar(v) /* one form on every core */
/* Key counts per lane (vec_avx512.h): one lane */
#define VI int32_t
#define V_LOADI(p) (*(p))
#define V_SET1I(x) ((int32_t)(x))
#define V_KEEP_KEYS(v, rk, j) ((rk) > (j) ? (v) : -__builtin_inff())
#define V_SOFTCAP(v, c, ic) softcap_scalar(v, c, ic)
#define V_TANH(v) softcap_scalar(v, 1.0f, 1.0f)
#define V_REDUCE_ADD(v) (v) /* float: the sum of the lanes */

/* Few-row kernels (attn_rows_template.h): one float16 / bfloat16 value widened (exact,
 * src/core/dtype.h), and the lane sum of one one-lane vector. */
#define V_LOAD_F16(p) ta_f16_to_f32(*(const uint16_t *)(const void *)(p))
#define V_LOAD_BF16(p) ta_bf16_to_f32(*(const uint16_t *)(const void *)(p))
#define V_LOAD_BF16_EO(p, e, o)                                                              \
    (*(e) = V_LOAD_BF16(p), *(o) = V_LOAD_BF16((const uint16_t *)(const void *)(p) + 1))
#define V_DEINTERLEAVE(a, b, e, o) (*(e) = (a), *(o) = (b)) /* e, o may be a, b */
#define V_INTERLEAVE(e, o, a, b) (*(a) = (e), *(b) = (o))
#define V_HSUM_ALL(a) ((a)[0])

#endif
