/* Portable conversions float32 <-> float16 / bfloat16 (cvt_template.h): one element a
 * step through the scalar conversions of src/core/dtype.h, which define the bits every
 * ISA's kernels must reproduce. */
#include "core/dtype.h"

#define CVT_VL 1
#define CVT_F16_F32(d, s) (*(d) = ta_f16_to_f32(*(s)))
#define CVT_F32_F16(d, s) (*(d) = ta_f32_to_f16(*(s)))
#define CVT_BF16_F32(d, s) (*(d) = ta_bf16_to_f32(*(s)))
#define CVT_F32_BF16(d, s) (*(d) = ta_f32_to_bf16(*(s)))

#define NAME_F16_F32 ta_cvt_f16_f32_scalar
#define NAME_F32_F16 ta_cvt_f32_f16_scalar
#define NAME_BF16_F32 ta_cvt_bf16_f32_scalar
#define NAME_F32_BF16 ta_cvt_f32_bf16_scalar
#define FILL_FN ta_cvt_fill_scalar

#include "kernels/cvt_template.h"
