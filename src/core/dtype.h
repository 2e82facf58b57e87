/* Internal dtype helpers: the scalar conversions every path shares (the scalar kernels,
 * strided rows, single elements, files), strided row conversion through the kernel
 * table's vector converters, and dtype argument checks.
 *
 * Rounding (include/tensorattn.h, "dtypes"): widening is exact; narrowing rounds to
 * nearest, ties to even, from the exact source value (a float64 goes straight to
 * float16 or bfloat16, never through float32); a finite value that rounds beyond the
 * largest finite becomes +-inf. NaN stays NaN, quiet, with its sign and the top bits
 * of its payload, exactly as the x86 conversions do (F16C vcvtph2ps sets the quiet bit
 * when widening; vcvtps2ph sets it when narrowing): so the scalar and vector kernels
 * agree bit for bit on every input. bfloat16 widening is a shift (a signalling NaN
 * stays signalling, as in every bfloat16 library). */
#ifndef TA_CORE_DTYPE_H
#define TA_CORE_DTYPE_H

#include "tensorattn.h"

#include <stdint.h>
#include <string.h>

/* Masks of dtypes (bit 1 << dtype) that an argument check accepts. */
enum {
    TA_ACCEPT_F32 = 1u << TA_F32,
    /* what ta_sdpa takes for Q, K, V, O and the caches */
    TA_ACCEPT_STORAGE = (1u << TA_F32) | (1u << TA_F16) | (1u << TA_BF16),
    TA_ACCEPT_ANY = (1u << TA_F32) | (1u << TA_F16) | (1u << TA_BF16) | (1u << TA_F64),
};

/* The bytes of one element (0 for a value outside the enum): ta_dtype_size's one
 * definition, inlined where the fused paths ask per tile and per row table, and in
 * ta_tensor_ptr (a call per element there was 1.9% of a driver's samples on an Emerald
 * Rapids, in its ta_randn fill). */
static inline size_t ta_elem_size(ta_dtype dt)
{
    return dt == TA_F32 ? 4 : dt == TA_F16 || dt == TA_BF16 ? 2 : dt == TA_F64 ? 8 : 0;
}

/* Whether dt is one of the four dtypes. */
static inline int ta_dtype_valid(ta_dtype dt) { return (unsigned)dt <= (unsigned)TA_BF16; }

/* fn: "%s: <what> = %d is not a ta_dtype" (TA_EINVAL) when dt is out of range, "<what>
 * is f64; fn takes f32, f16 or bf16" (TA_EUNSUPPORTED) when accept lacks it, else TA_OK. */
ta_status ta_dtype_check(const char *fn, const char *what, ta_dtype dt, unsigned accept);
/* "f32", "f32, f16 or bf16", ...: the dtypes of mask accept, for messages. */
const char *ta_dtype_list(unsigned accept);

/* ------------------------------------------------------- scalar conversions */

static inline uint32_t ta_f32_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static inline float ta_f32_of_bits(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* The magnitude bits of a narrower format (tmb mantissa bits, exponent bias and largest
 * exponent temax) nearest to m * 2^(e - mb), ties to even: m < 2^(mb + 1), m >= 2^mb
 * unless e is the source's smallest exponent (a subnormal source), mb > tmb. Beyond
 * the largest finite: infinity. One routine for every narrowing: float32 -> float16
 * and float64 -> float16 / bfloat16. */
static inline uint32_t ta_round_bits(uint64_t m, int e, int mb, int tmb, int temax)
{
    const int temin = 1 - temax;
    if (m == 0) return 0;
    if (e > temax) return (uint32_t)(2 * temax + 1) << tmb;
    int shift = mb - tmb + (e < temin ? temin - e : 0);
    if (shift > mb + 1) return 0; /* below half the smallest subnormal */
    uint64_t q = m >> shift, rem = m & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    q += rem > half || (rem == half && (q & 1));
    /* a normal q holds the implicit bit, which adds 1 to the exponent field; a carry
     * out of the mantissa moves to the next binade (or to infinity) by itself */
    return (uint32_t)(e >= temin ? ((uint64_t)(e - temin) << tmb) + q : q);
}

/* IEEE binary16 -> float32, exact. */
static inline float ta_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* inf, or NaN: quiet, payload kept */
        return ta_f32_of_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0));
    if (e) return ta_f32_of_bits(sign | ((e + 127 - 15) << 23) | (m << 13));
    float x = (float)m * 0x1p-24f; /* +-0 and subnormals: m * 2^-24, exact */
    return sign ? -x : x;
}

/* float32 -> IEEE binary16, nearest-even. */
static inline uint16_t ta_f32_to_f16(float x)
{
    uint32_t b = ta_f32_bits(x), sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    int e = (int)(a >> 23);
    uint64_t m = a & 0x7fffffu;
    if (e) m |= 0x800000u;
    else e = 1;
    return (uint16_t)(sign | ta_round_bits(m, e - 127, 23, 10, 15));
}

/* bfloat16 -> float32: the top half of a float32, exact. */
static inline float ta_bf16_to_f32(uint16_t h) { return ta_f32_of_bits((uint32_t)h << 16); }

/* float32 -> bfloat16, nearest-even: add half an ulp less one, plus the kept lsb (a
 * tie then carries only when the lsb is odd), and truncate; the carry moves to the
 * next binade or to infinity by itself. */
static inline uint16_t ta_f32_to_bf16(float x)
{
    uint32_t b = ta_f32_bits(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x0040u);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* float64 -> float16 / bfloat16, nearest-even, rounded once from the double. */
static inline uint16_t ta_f64_to_narrow(double x, int tmb, int temax)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t sign = (uint32_t)(b >> 48) & 0x8000u;
    uint64_t a = b & ~(UINT64_C(1) << 63);
    int ebits = temax == 15 ? 5 : 8;
    if (a > UINT64_C(0x7ff0000000000000)) /* NaN: quiet, top of the payload */
        return (uint16_t)(sign | (((1u << ebits) - 1) << tmb) | (1u << (tmb - 1)) |
                          (uint32_t)((a >> (52 - tmb)) & ((1u << tmb) - 1)));
    int e = (int)(a >> 52);
    uint64_t m = a & ((UINT64_C(1) << 52) - 1);
    if (e) m |= UINT64_C(1) << 52;
    else e = 1;
    return (uint16_t)(sign | ta_round_bits(m, e - 1023, 52, tmb, temax));
}
static inline uint16_t ta_f64_to_f16(double x) { return ta_f64_to_narrow(x, 10, 15); }
static inline uint16_t ta_f64_to_bf16(double x) { return ta_f64_to_narrow(x, 7, 127); }

/* One element at p of dtype dt as float32 (a float64 rounded to nearest), and x stored
 * there rounded to dt. */
static inline float ta_dtype_load(const void *p, ta_dtype dt)
{
    uint16_t h;
    switch (dt) {
    case TA_F16: memcpy(&h, p, 2); return ta_f16_to_f32(h);
    case TA_BF16: memcpy(&h, p, 2); return ta_bf16_to_f32(h);
    case TA_F64: {
        double d;
        memcpy(&d, p, 8);
        return (float)d;
    }
    default: {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    }
}

static inline void ta_dtype_store(void *p, ta_dtype dt, float x)
{
    uint16_t h;
    switch (dt) {
    case TA_F16: h = ta_f32_to_f16(x); memcpy(p, &h, 2); break;
    case TA_BF16: h = ta_f32_to_bf16(x); memcpy(p, &h, 2); break;
    case TA_F64: {
        double d = x;
        memcpy(p, &d, 8);
        break;
    }
    default: memcpy(p, &x, 4); break;
    }
}

/* ------------------------------------------------------------ row conversions */

/* dst[j * ds] = src[j * ss] converted from `from` to `to` (any two of the four dtypes),
 * j < n; strides in elements of each side (0 and negative allowed). Unit strides use
 * the active kernel table's vector converters (float32 <-> float16 / bfloat16; float16
 * <-> bfloat16 through a float32 buffer on the stack), the rest the scalar conversions
 * above: bitwise the same results. The same dtype is a copy (memmove when contiguous).
 * Otherwise dst must not overlap src. No checks: the caller validated the arguments. */
void ta_convert_strided(void *dst, ta_dtype to, int64_t ds, const void *src, ta_dtype from,
                        int64_t ss, int64_t n);

/* The active table's vector converter from a half type to float32 (dst, src, n: a
 * contiguous run), or NULL for any other dtype: for loops that widen many short rows
 * and should look the kernel up once, not per row. */
typedef void (*ta_widen_fn)(float *dst, const uint16_t *src, int64_t n);
ta_widen_fn ta_widen_kernel(ta_dtype from);

/* The building blocks of the dtype-aware paths (SDPA): one row or contiguous run of a
 * storage tensor to float32 and back.
 *   ta_row_to_f32:   dst[j] = src[j * stride] widened (dt: F32, F16, BF16 or F64), j < n
 *   ta_row_from_f32: dst[j * stride] = src[j] rounded to dt, nearest-even
 * stride == 1 runs the vector kernels of the active table (TA_ARCH). dst and src must
 * not overlap (a float32 row onto itself is fine). */
static inline void ta_row_to_f32(float *dst, const void *src, ta_dtype dt, int64_t n,
                                 int64_t stride)
{
    ta_convert_strided(dst, TA_F32, 1, src, dt, stride, n);
}

static inline void ta_row_from_f32(void *dst, ta_dtype dt, const float *src, int64_t n,
                                   int64_t stride)
{
    ta_convert_strided(dst, dt, stride, src, TA_F32, 1, n);
}

#endif
