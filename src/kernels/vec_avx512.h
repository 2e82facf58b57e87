/* The vector vocabulary of the kernel templates (gemm_template.h, attn_template.h,
 * attn_bwd_template.h) for AVX-512 (include only from *_avx512.c files, built with the
 * avx512 row's flags): VT (the vector type), VL (lanes), the V_* operations with masked
 * tails, and the expf the attention kernels share (accuracy: docs/kernels.md,
 * "Attention"). Header-only: it defines no library symbols. */
#ifndef TA_VEC_AVX512_H
#define TA_VEC_AVX512_H

#include "kernels/transpose8_avx.h"

#include <immintrin.h>
#include <stdint.h>

#define VT __m512
#define VL 16

static inline __mmask16 lanes_mask(int n) { return (__mmask16)((1u << n) - 1u); }

/* expf for x <= 88.7 (NaN -> NaN, -inf -> 0). Clamping at -104 makes -inf and every
 * x whose exp is below half the smallest denormal round to exactly 0 in vscalefps. */
static inline __m512 exp_avx512(__m512 x)
{
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2hi = _mm512_set1_ps(0.693359375f), ln2lo = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); /* second operand: NaN passes */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2hi, x);
    r = _mm512_fnmadd_ps(n, ln2lo, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
}

#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_load_ps(p) /* p aligned to the vector size */
#define V_BCAST(p) _mm512_set1_ps(*(p)) /* *p in every lane, read straight from memory */
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps(p, v)
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
/* float: the sum of the lanes in gcc's fixed tree (halves, then quarters, ...) */
#define V_REDUCE_ADD(v) _mm512_reduce_add_ps(v)

#endif
