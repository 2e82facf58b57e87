/* ta-test: all-isas -- float16 and bfloat16 conversions: the scalar conversions of
 * src/core/dtype.h, the kernel table's vector converters of the ISA TA_ARCH selects
 * (tests/run_isa runs this once per ISA), ta_convert and the strided rows SDPA uses,
 * all against an oracle in double arithmetic (tests/support/dtype_oracle.c: the formats'
 * definitions by ldexp and a binary search for the nearest value), bit for bit.
 *   widening:  all 65536 patterns of each type (exact; NaN quiet, sign and payload kept);
 *   float32 -> float16 / bfloat16: every value of the type, every midpoint between two
 *              neighbours (the ties) and the float32 on either side of it, the overflow
 *              and underflow edges, NaN payloads, and random floats (full bit patterns and
 *              in-range exponents);
 *   float64 -> float16 / bfloat16: the same from doubles, with the double right beside
 *              each midpoint, which rounding through float32 would turn into a tie;
 *   kernels:   lengths 0 .. 40 (every tail), operands ending at an mprotect-ed guard page
 *              and a sentinel before the output. */
#include "ta_test.h"

#include "core/dtype.h"
#include "dtype_oracle.h"
#include "guard.h"
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545F4914F6CDD1Du;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint32_t bits_f(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static float f_bits(uint32_t b)
{
    float x;
    memcpy(&x, &b, 4);
    return x;
}

static double oracle_value(uint16_t h, ta_dtype dt)
{
    return dt == TA_F16 ? ta_oracle_f16_value(h) : ta_oracle_bf16_value(h);
}

static uint32_t widened_bits(uint16_t h, ta_dtype dt) { return bits_f(ta_oracle_widen(h, dt)); }

static void (*narrow_kernel(ta_dtype dt))(uint16_t *, const float *, int64_t)
{
    const ta_kernels *k = ta_kernels_active();
    return dt == TA_F16 ? k->cvt_f32_f16 : k->cvt_f32_bf16;
}

static void (*widen_kernel(ta_dtype dt))(float *, const uint16_t *, int64_t)
{
    const ta_kernels *k = ta_kernels_active();
    return dt == TA_F16 ? k->cvt_f16_f32 : k->cvt_bf16_f32;
}

static const ta_dtype halves[2] = {TA_F16, TA_BF16};

/* ------------------------------------------------------------------ widening */

static void test_widening_is_exact_for_every_pattern(void **state)
{
    (void)state;
    uint16_t *h = malloc(65536 * sizeof *h);
    float *viak = malloc(65536 * sizeof *viak), *viac = malloc(65536 * sizeof *viac);
    double *d = malloc(65536 * sizeof *d);
    assert_true(h && viak && viac && d);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int t = 0; t < 2; t++) {
        ta_dtype dt = halves[t];
        widen_kernel(dt)(viak, h, 65536);
        TA_CHECK_OK(ta_convert(viac, TA_F32, h, dt, 65536));
        TA_CHECK_OK(ta_convert(d, TA_F64, h, dt, 65536));
        for (uint32_t i = 0; i < 65536; i++) {
            uint32_t want = widened_bits(h[i], dt);
            float scalar = dt == TA_F16 ? ta_f16_to_f32(h[i]) : ta_bf16_to_f32(h[i]);
            if (bits_f(viak[i]) != want || bits_f(viac[i]) != want || bits_f(scalar) != want)
                fail_msg("%s 0x%04x: kernel 0x%08x, ta_convert 0x%08x, scalar 0x%08x, expected "
                         "0x%08x", ta_dtype_name(dt), i, bits_f(viak[i]), bits_f(viac[i]),
                         bits_f(scalar), want);
            double v = oracle_value(h[i], dt);
            if (isnan(v) ? !isnan(d[i]) : (d[i] != v || !signbit(d[i]) != !signbit(v)))
                fail_msg("%s 0x%04x -> f64: %.17g, expected %.17g", ta_dtype_name(dt), i, d[i], v);
        }
    }
    /* float16 <-> bfloat16: widening is exact, so the pair rounds once */
    uint16_t *out = malloc(65536 * sizeof *out);
    assert_non_null(out);
    for (int t = 0; t < 2; t++) {
        ta_dtype from = halves[t], to = halves[1 - t];
        TA_CHECK_OK(ta_convert(out, to, h, from, 65536));
        for (uint32_t i = 0; i < 65536; i++) {
            uint16_t want = ta_oracle_from_f32(f_bits(widened_bits(h[i], from)), to);
            if (out[i] != want)
                fail_msg("%s 0x%04x -> %s: 0x%04x, expected 0x%04x", ta_dtype_name(from), i,
                         ta_dtype_name(to), out[i], want);
        }
    }
    free(out);
    free(h);
    free(viak);
    free(viac);
    free(d);
}

/* ----------------------------------------------------------------- narrowing */

/* A growing array of inputs. */
typedef struct inputs {
    double *x;
    size_t n, cap;
} inputs;

static void add(inputs *in, double x)
{
    if (in->n == in->cap) {
        in->cap = in->cap ? 2 * in->cap : 4096;
        in->x = realloc(in->x, in->cap * sizeof *in->x);
        assert_non_null(in->x);
    }
    in->x[in->n++] = x;
}

/* Every finite value of both types, the midpoints between neighbours (up to the
 * virtual 2^(emax+1) past the largest finite), beside each (delta: the nearest
 * neighbours in the caller's precision), both signs; the edges. */
static void add_specials(inputs *in, bool as_double)
{
    for (int t = 0; t < 2; t++) {
        ta_dtype dt = halves[t];
        uint16_t max = dt == TA_F16 ? 0x7bff : 0x7f7f;
        double top = dt == TA_F16 ? 65536.0 : ldexp(1.0, 128);
        for (uint32_t p = 0; p <= max; p++) {
            double v0 = oracle_value((uint16_t)p, dt);
            double v1 = p == max ? top : oracle_value((uint16_t)(p + 1), dt);
            double mid = (v0 + v1) / 2;
            double below = as_double ? nextafter(mid, 0) : nextafterf((float)mid, 0);
            double above = as_double ? nextafter(mid, INFINITY) : nextafterf((float)mid, INFINITY);
            double s = (p & 1) ? -1 : 1;
            add(in, s * v0);
            add(in, s * mid);
            add(in, -s * below);
            add(in, s * above);
        }
    }
    const double edges[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 65504, 65519.99, 65520,
                            65536, -65520, FLT_MAX, -FLT_MAX, 0x1p-24, 0x1p-25, 0x1.8p-25,
                            0x1p-26, 0x1p-149, -0x1p-149, 0x1p-126, 0x1p-133, 0x1p-134,
                            0x1.8p-134, 3.0e38, 3.4e38, -3.39e38, 1.0 / 3.0};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) add(in, edges[i]);
    if (as_double) {
        const double wide[] = {1e300, -1e300, 1e-300, DBL_MIN, 0x1p-1074, DBL_MAX, 0x1.fffffffffffffp127};
        for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) add(in, wide[i]);
    }
}

static void check_narrow_f32(const float *x, size_t n, const char *what)
{
    uint16_t *got = malloc(n * sizeof *got), *conv = malloc(n * sizeof *conv);
    assert_true(got && conv);
    for (int t = 0; t < 2; t++) {
        ta_dtype dt = halves[t];
        narrow_kernel(dt)(got, x, (int64_t)n);
        TA_CHECK_OK(ta_convert(conv, dt, x, TA_F32, n));
        for (size_t i = 0; i < n; i++) {
            uint16_t want = ta_oracle_from_f32(x[i], dt);
            uint16_t scalar = dt == TA_F16 ? ta_f32_to_f16(x[i]) : ta_f32_to_bf16(x[i]);
            if (got[i] != want || conv[i] != want || scalar != want)
                fail_msg("%s: f32 0x%08x (%.9g) -> %s: kernel 0x%04x, ta_convert 0x%04x, scalar "
                         "0x%04x, expected 0x%04x", what, bits_f(x[i]), (double)x[i],
                         ta_dtype_name(dt), got[i], conv[i], scalar, want);
        }
    }
    free(got);
    free(conv);
}

static void test_f32_narrowing_rounds_to_nearest_even(void **state)
{
    (void)state;
    inputs in = {0};
    add_specials(&in, false);
    size_t n = in.n;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)in.x[i]; /* each exact in float32 */
    check_narrow_f32(x, n, "values, midpoints, neighbours");
    free(x);
    free(in.x);

    /* NaN payloads, signalling and quiet, both signs */
    const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffc00000u, 0x7fa12345u,
                             0xffffffffu, 0x7f802000u, 0x7fbfffffu, 0x7f810000u};
    float xn[9];
    for (int i = 0; i < 9; i++) xn[i] = f_bits(nans[i]);
    check_narrow_f32(xn, 9, "NaN");

    /* random floats: any bit pattern, and exponents around both types' ranges */
    enum { R = 1 << 18 };
    float *r = malloc(2 * R * sizeof *r);
    assert_non_null(r);
    for (int i = 0; i < R; i++) r[i] = f_bits((uint32_t)next_u64());
    for (int i = 0; i < R; i++) {
        uint64_t u = next_u64();
        int e = (i & 1) ? (int)(u % 48) - 30 : (int)(u % 270) - 140; /* f16 : bf16 */
        r[R + i] = ldexpf(1.0f + (float)((u >> 16) & 0x7fffff) * 0x1p-23f, e);
        if (u >> 63) r[R + i] = -r[R + i];
    }
    check_narrow_f32(r, 2 * R, "random");
    free(r);
}

static void test_f64_narrowing_rounds_once(void **state)
{
    (void)state;
    inputs in = {0};
    add_specials(&in, true);
    for (int i = 0; i < (1 << 17); i++) {
        uint64_t u = next_u64();
        int e = (i & 1) ? (int)(u % 48) - 30 : (int)(u % 270) - 140;
        double x = ldexp(1.0 + (double)(u >> 12) * 0x1p-52, e);
        add(&in, (u & 1) ? -x : x);
        uint64_t b = next_u64(); /* any double: huge, tiny, subnormal, NaN */
        double w;
        memcpy(&w, &b, 8);
        add(&in, w);
    }
    const uint64_t nans[] = {UINT64_C(0x7ff0000000000001), UINT64_C(0xfff8000000000000),
                             UINT64_C(0x7ff4000000000000), UINT64_C(0x7ff0040000000000)};
    for (int i = 0; i < 4; i++) {
        double d;
        memcpy(&d, &nans[i], 8);
        add(&in, d);
    }
    size_t n = in.n;
    uint16_t *got = malloc(n * sizeof *got);
    float *f = malloc(n * sizeof *f);
    assert_true(got && f);
    for (int t = 0; t < 2; t++) {
        ta_dtype dt = halves[t];
        TA_CHECK_OK(ta_convert(got, dt, in.x, TA_F64, n));
        size_t through_f32_differs = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t want = ta_oracle_from_f64(in.x[i], dt);
            uint16_t scalar = dt == TA_F16 ? ta_f64_to_f16(in.x[i]) : ta_f64_to_bf16(in.x[i]);
            if (got[i] != want || scalar != want)
                fail_msg("f64 %.17g -> %s: ta_convert 0x%04x, scalar 0x%04x, expected 0x%04x",
                         in.x[i], ta_dtype_name(dt), got[i], scalar, want);
            if (!isnan(in.x[i]) && ta_oracle_round((float)in.x[i], dt) != want) through_f32_differs++;
        }
        /* the inputs do hold values that double rounding would get wrong */
        assert_true(through_f32_differs > 1000);
    }
    /* float64 -> float32: the hardware's nearest-even */
    TA_CHECK_OK(ta_convert(f, TA_F32, in.x, TA_F64, n));
    for (size_t i = 0; i < n; i++) {
        float want = (float)in.x[i];
        if (bits_f(f[i]) != bits_f(want) && !(isnan(want) && isnan(f[i])))
            fail_msg("f64 %.17g -> f32: %.9g, expected %.9g", in.x[i], (double)f[i], (double)want);
    }
    free(got);
    free(f);
    free(in.x);
}

/* ------------------------------------------------------------ kernel tails */

/* A mix of specials and random values, float32. */
static float sample(uint64_t u)
{
    static const uint32_t specials[] = {0x7f800001u, 0xffc00000u, 0x7f800000u, 0x80000000u,
                                        0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u,
                                        0x00000001u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu};
    if (u % 4 == 0) return f_bits(specials[(u >> 8) % 12]);
    return ldexpf((float)((u >> 20) & 0xffffff) * 0x1p-24f, (int)((u >> 48) % 60) - 40) *
           ((u >> 63) ? -1.0f : 1.0f);
}

static void test_kernels_handle_every_tail(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        ta_dtype dt = halves[t];
        for (int64_t n = 0; n <= 40; n++) {
            /* inputs and outputs end at a guard page; the output has a sentinel before */
            ta_guard gs, gd, gh, gw;
            float *src = ta_guard_floats(&gs, (size_t)n + 1) + 1;
            uint16_t *dst = (uint16_t *)ta_guard_bytes(&gd, 2 * ((size_t)n + 1)) + 1;
            uint16_t *hsrc = (uint16_t *)ta_guard_bytes(&gh, 2 * ((size_t)n + 1)) + 1;
            float *wide = ta_guard_floats(&gw, (size_t)n + 1) + 1;
            for (int64_t i = 0; i < n; i++) {
                src[i] = sample(next_u64());
                hsrc[i] = (uint16_t)next_u64();
            }
            dst[-1] = 0xabcd;
            wide[-1] = 7.0f;
            narrow_kernel(dt)(dst, src, n);
            widen_kernel(dt)(wide, hsrc, n);
            assert_int_equal(dst[-1], 0xabcd);
            assert_true(wide[-1] == 7.0f);
            for (int64_t i = 0; i < n; i++) {
                if (dst[i] != ta_oracle_from_f32(src[i], dt))
                    fail_msg("%s narrow, n = %lld, element %lld: 0x%08x -> 0x%04x, expected 0x%04x",
                             ta_dtype_name(dt), (long long)n, (long long)i, bits_f(src[i]), dst[i],
                             ta_oracle_from_f32(src[i], dt));
                if (bits_f(wide[i]) != widened_bits(hsrc[i], dt))
                    fail_msg("%s widen, n = %lld, element %lld: 0x%04x -> 0x%08x",
                             ta_dtype_name(dt), (long long)n, (long long)i, hsrc[i], bits_f(wide[i]));
            }
            ta_guard_release(&gs);
            ta_guard_release(&gd);
            ta_guard_release(&gh);
            ta_guard_release(&gw);
        }
    }
}

/* ----------------------------------------------------------- strided rows */

static void test_rows_convert_with_any_stride(void **state)
{
    (void)state;
    enum { N = 37 };
    const int64_t strides[] = {1, 2, 5, -3, 0};
    const ta_dtype types[] = {TA_F32, TA_F16, TA_BF16, TA_F64};
    for (size_t si = 0; si < sizeof strides / sizeof strides[0]; si++) {
        int64_t s = strides[si], span = s ? (N - 1) * (s < 0 ? -s : s) + 1 : 1;
        for (int ti = 0; ti < 4; ti++) {
            ta_dtype dt = types[ti];
            size_t size = ta_dtype_size(dt);
            unsigned char *buf = calloc((size_t)span, size);
            assert_non_null(buf);
            /* the row starts at its first element: the far end for a negative stride */
            unsigned char *row = buf + (s < 0 ? (size_t)(span - 1) * size : 0);
            float src[N], back[N];
            for (int j = 0; j < N; j++) src[j] = sample(next_u64());
            if (s == 0) { /* a broadcast row: one element read N times */
                ta_dtype_store(row, dt, src[0]);
                ta_row_to_f32(back, row, dt, N, 0);
                for (int j = 0; j < N; j++) assert_memory_equal(&back[j], &back[0], 4);
                free(buf);
                continue;
            }
            ta_row_from_f32(row, dt, src, N, s);
            ta_row_to_f32(back, row, dt, N, s);
            for (int j = 0; j < N; j++) {
                const unsigned char *p = row + j * s * (int64_t)size;
                float want;
                if (dt == TA_F16 || dt == TA_BF16) {
                    uint16_t h;
                    memcpy(&h, p, 2);
                    if (h != ta_oracle_from_f32(src[j], dt))
                        fail_msg("stride %lld, %s, element %d: 0x%04x, expected 0x%04x",
                                 (long long)s, ta_dtype_name(dt), j, h, ta_oracle_from_f32(src[j], dt));
                    want = f_bits(widened_bits(h, dt));
                } else {
                    want = src[j]; /* float32 and float64 hold it exactly */
                }
                if (dt == TA_F64 && isnan(want)) /* float64 quiets a signalling NaN */
                    want = f_bits(bits_f(want) | 0x00400000u);
                if (bits_f(back[j]) != bits_f(want))
                    fail_msg("stride %lld, %s, element %d back: %.9g, expected %.9g", (long long)s,
                             ta_dtype_name(dt), j, (double)back[j], (double)want);
            }
            free(buf);
        }
    }
}

/* ----------------------------------------------------------------- the API */

static void test_convert_checks_its_arguments(void **state)
{
    (void)state;
    assert_int_equal(ta_dtype_size(TA_F32), 4);
    assert_int_equal(ta_dtype_size(TA_F64), 8);
    assert_int_equal(ta_dtype_size(TA_F16), 2);
    assert_int_equal(ta_dtype_size(TA_BF16), 2);
    assert_int_equal(ta_dtype_size((ta_dtype)4), 0);
    assert_int_equal(ta_dtype_size((ta_dtype)-1), 0);
    assert_string_equal(ta_dtype_name(TA_F32), "f32");
    assert_string_equal(ta_dtype_name(TA_F64), "f64");
    assert_string_equal(ta_dtype_name(TA_F16), "f16");
    assert_string_equal(ta_dtype_name(TA_BF16), "bf16");
    assert_string_equal(ta_dtype_name((ta_dtype)9), "unknown");

    float f[4] = {1, 2, 3, 4};
    uint16_t h[8] = {0};
    TA_CHECK_ERR(ta_convert(h, (ta_dtype)9, f, TA_F32, 4), TA_EINVAL,
                 "ta_convert: to = 9 is not a ta_dtype");
    TA_CHECK_ERR(ta_convert(h, TA_F16, f, (ta_dtype)-2, 4), TA_EINVAL,
                 "ta_convert: from = -2 is not a ta_dtype");
    TA_CHECK_ERR(ta_convert(NULL, TA_F16, f, TA_F32, 4), TA_EINVAL, "ta_convert: dst is NULL");
    TA_CHECK_ERR(ta_convert(h, TA_F16, NULL, TA_F32, 4), TA_EINVAL, "ta_convert: src is NULL");
    TA_CHECK_ERR(ta_convert(h, TA_F16, f, TA_F32, SIZE_MAX / 2), TA_EINVAL, "do not fit");
    /* overlapping: the float16 output would overwrite float32 input not yet read */
    TA_CHECK_ERR(ta_convert((uint16_t *)f + 1, TA_F16, f, TA_F32, 4), TA_EINVAL,
                 "ta_convert: dst and src overlap");
    TA_CHECK_ERR(ta_convert(f, TA_F16, f, TA_F32, 4), TA_EINVAL, "overlap");
    for (int i = 0; i < 8; i++) assert_int_equal(h[i], 0); /* nothing written */
    assert_true(f[0] == 1 && f[1] == 2 && f[2] == 3 && f[3] == 4);
    TA_CHECK_OK(ta_convert(NULL, TA_F16, NULL, TA_F32, 0));
    TA_CHECK_OK(ta_convert(f, TA_F32, f, TA_F32, 4)); /* in place, the same type */
    /* adjacent, not overlapping */
    uint16_t two[8];
    TA_CHECK_OK(ta_convert(two + 4, TA_F16, f, TA_F32, 4));
    TA_CHECK_OK(ta_convert(two, TA_BF16, two + 4, TA_F16, 4));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(two[4 + i], ta_oracle_round(f[i], TA_F16));
        assert_int_equal(two[i], ta_oracle_round(f[i], TA_BF16));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widening_is_exact_for_every_pattern),
        cmocka_unit_test(test_f32_narrowing_rounds_to_nearest_even),
        cmocka_unit_test(test_f64_narrowing_rounds_once),
        cmocka_unit_test(test_kernels_handle_every_tail),
        cmocka_unit_test(test_rows_convert_with_any_stride),
        cmocka_unit_test(test_convert_checks_its_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
