/* An oracle for the float16 and bfloat16 conversions, written in double arithmetic from
 * the formats' definitions and independent of the library's code: the value of every bit
 * pattern by ldexp, and rounding as a binary search for the nearest representable value
 * (ties to the even pattern; past the largest finite, infinity). Used by test_dtype.c,
 * test_tensor_dtype.c and the file tests. */
#ifndef TA_TEST_DTYPE_ORACLE_H
#define TA_TEST_DTYPE_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorattn.h"

/* The value of a float16 / bfloat16 bit pattern: (-1)^s 2^(e - bias) (1 + m / 2^mb),
 * subnormals 2^(1 - bias) m / 2^mb, e all ones: infinity or NaN. */
double ta_oracle_f16_value(uint16_t h);
double ta_oracle_bf16_value(uint16_t h);
/* The pattern of dtype (TA_F16 or TA_BF16) nearest to x (not NaN), ties to the even
 * pattern, beyond the largest finite value's half ulp: infinity. Signed zeros kept. */
uint16_t ta_oracle_round(double x, ta_dtype dtype);
/* The NaN the library must give for a NaN input (the quiet bit set, sign and top payload
 * bits kept), from the input's float32 / float64 bits. */
uint16_t ta_oracle_nan_from_f32(uint32_t bits, ta_dtype dtype);
uint16_t ta_oracle_nan_from_f64(uint64_t bits, ta_dtype dtype);
/* What the library must give: narrowing x (NaN or not) to dtype, and widening pattern h
 * of dtype to float32 (the value; a float16 NaN quiet with sign and payload kept, a
 * bfloat16 NaN shifted as it is). */
uint16_t ta_oracle_from_f32(float x, ta_dtype dtype);
uint16_t ta_oracle_from_f64(double x, ta_dtype dtype);
float ta_oracle_widen(uint16_t h, ta_dtype dtype);
/* Whether pattern h of dtype is a NaN. */
bool ta_oracle_is_nan(uint16_t h, ta_dtype dtype);
/* got[i] == want[i] bitwise for i < n (what names the case on failure); nan_any: a NaN
 * matches any NaN (expectations from PyTorch, which makes NaNs canonical). */
void ta_oracle_assert_halves(const uint16_t *got, const uint16_t *want, size_t n, ta_dtype dtype,
                             bool nan_any, const char *what);

#endif
