/* The float16 / bfloat16 oracle (see dtype_oracle.h). */
#include "ta_test.h"

#include "dtype_oracle.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct format {
    int mb, eb;     /* mantissa and exponent bits */
    uint16_t max;   /* the largest finite pattern; max + 1 is infinity */
} format;

static format format_of(ta_dtype dtype)
{
    return dtype == TA_BF16 ? (format){7, 8, 0x7f7f} : (format){10, 5, 0x7bff};
}

static double value(uint16_t h, format f)
{
    int bias = (1 << (f.eb - 1)) - 1;
    int s = h >> 15, e = (h >> f.mb) & ((1 << f.eb) - 1), m = h & ((1 << f.mb) - 1);
    double v;
    if (e == (1 << f.eb) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, 1 - bias - f.mb);
    else v = ldexp((1 << f.mb) + m, e - bias - f.mb);
    return s ? -v : v;
}

double ta_oracle_f16_value(uint16_t h) { return value(h, format_of(TA_F16)); }
double ta_oracle_bf16_value(uint16_t h) { return value(h, format_of(TA_BF16)); }

/* value() of the positive patterns 0 .. max, computed once per format. */
static const double *positive_values(ta_dtype dtype)
{
    static double tab[2][0x7f80];
    static int done[2];
    int k = dtype == TA_BF16;
    if (!done[k]) {
        format f = format_of(dtype);
        for (uint32_t p = 0; p <= f.max; p++) tab[k][p] = value((uint16_t)p, f);
        done[k] = 1;
    }
    return tab[k];
}

uint16_t ta_oracle_round(double x, ta_dtype dtype)
{
    format f = format_of(dtype);
    const double *tab = positive_values(dtype);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    /* the largest pattern p in 0 .. max + 1 whose value is <= a; the pattern after the
     * largest finite stands for 2^(emax + 1), where an unbounded exponent would round */
    double top = ldexp(1.0, 1 << (f.eb - 1));
    uint32_t lo = 0, hi = (uint32_t)f.max + 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        double v = mid == (uint32_t)f.max + 1 ? top : tab[mid];
        if (v <= a) lo = mid;
        else hi = mid - 1;
    }
    uint32_t p = lo;
    if (p <= f.max) {
        double v0 = tab[p], v1 = p + 1 == (uint32_t)f.max + 1 ? top : tab[p + 1];
        double midpoint = (v0 + v1) / 2; /* exact: one more bit than the format has */
        if (a > midpoint || (a == midpoint && (p & 1))) p++;
    }
    return (uint16_t)(sign | p);
}

uint16_t ta_oracle_nan_from_f32(uint32_t bits, ta_dtype dtype)
{
    format f = format_of(dtype);
    uint32_t exp = ((1u << f.eb) - 1) << f.mb, quiet = 1u << (f.mb - 1);
    uint32_t payload = (bits & 0x7fffffu) >> (23 - f.mb);
    return (uint16_t)(((bits >> 16) & 0x8000u) | exp | quiet | payload);
}

uint16_t ta_oracle_nan_from_f64(uint64_t bits, ta_dtype dtype)
{
    format f = format_of(dtype);
    uint32_t exp = ((1u << f.eb) - 1) << f.mb, quiet = 1u << (f.mb - 1);
    uint32_t payload = (uint32_t)((bits & ((UINT64_C(1) << 52) - 1)) >> (52 - f.mb));
    return (uint16_t)(((uint32_t)(bits >> 48) & 0x8000u) | exp | quiet | payload);
}

uint16_t ta_oracle_from_f32(float x, ta_dtype dtype)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return isnan(x) ? ta_oracle_nan_from_f32(b, dtype) : ta_oracle_round(x, dtype);
}

uint16_t ta_oracle_from_f64(double x, ta_dtype dtype)
{
    uint64_t b;
    memcpy(&b, &x, 8);
    return isnan(x) ? ta_oracle_nan_from_f64(b, dtype) : ta_oracle_round(x, dtype);
}

float ta_oracle_widen(uint16_t h, ta_dtype dtype)
{
    if (dtype == TA_F16 && !ta_oracle_is_nan(h, dtype)) return (float)ta_oracle_f16_value(h);
    uint32_t b = (uint32_t)h << 16; /* a bfloat16: the top half of a float32 */
    if (dtype == TA_F16) /* a float16 NaN: quiet, sign and payload kept */
        b = ((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x3ff) << 13);
    float x;
    memcpy(&x, &b, 4);
    return x;
}

bool ta_oracle_is_nan(uint16_t h, ta_dtype dtype)
{
    format f = format_of(dtype);
    return (h & 0x7fff) > f.max + 1;
}

void ta_oracle_assert_halves(const uint16_t *got, const uint16_t *want, size_t n, ta_dtype dtype,
                             bool nan_any, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue;
        if (nan_any && ta_oracle_is_nan(got[i], dtype) && ta_oracle_is_nan(want[i], dtype))
            continue;
        fail_msg("%s: element %zu is 0x%04x, expected 0x%04x (%s)", what, i, got[i], want[i],
                 ta_dtype_name(dtype));
    }
}
