/* Conversions between float32 and the storage types float16 and bfloat16 (contract:
 * docs/kernels.md, "Conversions"; rounding: src/core/dtype.h), written once over VL
 * elements at a time. The including cvt_<isa>.c defines:
 *   CVT_VL                      elements per step;
 *   CVT_F16_F32(d, s)           float d[0..CVT_VL) = widened uint16_t s[0..CVT_VL);
 *   CVT_F32_F16(d, s)           uint16_t d[0..CVT_VL) = float s[..] rounded to nearest-even;
 *   CVT_BF16_F32(d, s), CVT_F32_BF16(d, s)  the same for bfloat16;
 *   NAME_F16_F32, NAME_F32_F16, NAME_BF16_F32, NAME_F32_BF16, FILL_FN.
 * The step macros read and write exactly CVT_VL elements at any alignment; a tail of
 * fewer goes through a zero-padded copy on the stack, so nothing past n is touched. */
#include "kernels/kernels.h"

#include <string.h>

#if !defined(CVT_VL) || CVT_VL < 1 || CVT_VL > 64
#error "cvt_template.h: CVT_VL must be in 1..64"
#endif

/* NAME(dst, src, n): steps of CVT_VL, then the tail through buffers. */
#define CVT_LOOP(NAME, DT, ST, STEP)                                                          \
    void NAME(DT *dst, const ST *src, int64_t n)                                              \
    {                                                                                         \
        int64_t i = 0;                                                                        \
        for (; i + CVT_VL <= n; i += CVT_VL) STEP(dst + i, src + i);                          \
        if (CVT_VL > 1 && i < n) {                                                            \
            ST s[CVT_VL];                                                                     \
            DT d[CVT_VL];                                                                     \
            memset(s, 0, sizeof s);                                                           \
            memcpy(s, src + i, (size_t)(n - i) * sizeof(ST));                                 \
            STEP(d, s);                                                                       \
            memcpy(dst + i, d, (size_t)(n - i) * sizeof(DT));                                 \
        }                                                                                     \
    }

CVT_LOOP(NAME_F16_F32, float, uint16_t, CVT_F16_F32)
CVT_LOOP(NAME_F32_F16, uint16_t, float, CVT_F32_F16)
CVT_LOOP(NAME_BF16_F32, float, uint16_t, CVT_BF16_F32)
CVT_LOOP(NAME_F32_BF16, uint16_t, float, CVT_F32_BF16)

#undef CVT_LOOP

void FILL_FN(ta_kernels *k)
{
    k->cvt_f16_f32 = NAME_F16_F32;
    k->cvt_f32_f16 = NAME_F32_F16;
    k->cvt_bf16_f32 = NAME_BF16_F32;
    k->cvt_f32_bf16 = NAME_F32_BF16;
}
