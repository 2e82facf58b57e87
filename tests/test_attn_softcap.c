/* ta-test: all-isas -- The softcap kernel of the table TA_ARCH selects (attn_softcap:
 * s = cap * tanh(s / cap) in place; contract and measured accuracy in docs/kernels.md,
 * "Attention variants") against double tanh:
 *   - cap = 1 (tanh itself) on a dense sweep of every float magnitude (every 4099th bit
 *     pattern from 0 to +inf, both signs): within 2 ulp (measured over every float: 1.5);
 *   - caps from 2^-100 to 2^100 (Gemma 2's 30 and 50 among them) on a sweep of every
 *     32771st pattern: within 4 ulp of cap * tanh(s / cap) (measured: 3.5);
 *   - the ends: +-inf -> +-cap, +-FLT_MAX -> +-cap, NaN -> NaN, +-0 -> +-0, denormals
 *     unchanged;
 *   - every length 0 .. 3 vectors + 1 with the operand ending at an mprotect-ed guard page,
 *     so a tail that reads or writes one float too far crashes.
 * The ulp is that of the exact value (2^-149 in the denormal range). */
#include "ta_test.h"

#include "guard.h"
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ta_kernels *tested(void)
{
    const ta_kernels *k = ta_kernels_active();
    const char *arch = getenv("TA_ARCH");
    if (arch && *arch && strcmp(arch, k->name) != 0)
        fail_msg("TA_ARCH=%s but the active table is %s", arch, k->name);
    return k;
}

static double ulp_of(double w)
{
    double a = fabs(w);
    if (a < 0x1p-126) return 0x1p-149;
    int e;
    frexp(a, &e);
    return ldexp(1.0, e - 24);
}

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* The sweep of every step-th bit pattern in [0, +inf], both signs, in chunks of n; returns
 * the largest error in ulps. */
static double sweep(const ta_kernels *k, float cap, uint32_t step)
{
    enum { N = 4096 };
    static float x[N], s[N];
    double worst = 0.0;
    uint64_t b = 0;
    const uint64_t end = 0x7f800000u; /* +inf */
    while (b <= end) {
        int n = 0;
        for (; n + 1 < N && b <= end; b += step) {
            x[n] = from_bits((uint32_t)b);
            x[n + 1] = -x[n];
            n += 2;
        }
        memcpy(s, x, sizeof(float) * (size_t)n);
        k->attn_softcap(s, n, cap);
        for (int i = 0; i < n; i++) {
            double want = (double)cap * tanh((double)x[i] / (double)cap);
            double e = fabs((double)s[i] - want) / ulp_of(want);
            if (!(e <= worst)) {
                if (isnan(e))
                    fail_msg("%s cap %g: softcap(%.9g) = %.9g, want %.9g", k->name, (double)cap,
                             (double)x[i], (double)s[i], want);
                worst = e;
            }
        }
    }
    return worst;
}

static void test_tanh_dense_sweep(void **state)
{
    (void)state;
    const ta_kernels *k = tested();
    double e = sweep(k, 1.0f, 4099);
    print_message("%s tanh: max %.3f ulp\n", k->name, e);
    if (!(e <= 2.0)) fail_msg("%s: tanh is %.3f ulp off (bound 2)", k->name, e);
}

static void test_softcap_dense_sweep(void **state)
{
    (void)state;
    const ta_kernels *k = tested();
    const float caps[] = {0x1p-100f, 1e-3f, 0.37f, 2.0f, 30.0f, 50.0f, 1e6f, 0x1p100f};
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) {
        double e = sweep(k, caps[c], 32771);
        if (!(e <= 4.0)) fail_msg("%s: softcap %g is %.3f ulp off (bound 4)", k->name,
                                  (double)caps[c], e);
    }
}

static void test_softcap_ends(void **state)
{
    (void)state;
    const ta_kernels *k = tested();
    const float cap = 50.0f;
    float s[10] = {INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, NAN, 0.0f, -0.0f, 0x1p-149f,
                   -0x1.8p-140f, 1e30f};
    k->attn_softcap(s, 10, cap);
    assert_true(s[0] == cap && s[1] == -cap && s[2] == cap && s[3] == -cap);
    assert_true(isnan(s[4]));
    assert_true(s[5] == 0.0f && !signbit(s[5]) && s[6] == 0.0f && signbit(s[6]));
    assert_true(s[7] == 0x1p-149f && s[8] == -0x1.8p-140f); /* tanh(y) = y there */
    assert_true(s[9] == cap);
}

/* Lengths 0 .. 3 vectors + 1 at a guard page: the masked tail stays inside. */
static void test_softcap_tails(void **state)
{
    (void)state;
    const ta_kernels *k = tested();
    const int vl = k->attn_vl;
    for (int n = 0; n <= 3 * vl + 1; n++) {
        ta_guard g;
        float *s = ta_guard_floats(&g, (size_t)(n > 0 ? n : 1)), want[64];
        assert_non_null(s);
        assert_true(n <= 64);
        if (n == 0) s += 1; /* n = 0: s is the guard page itself, never touched */
        for (int i = 0; i < n; i++) {
            s[i] = (float)(i - n / 2) * 0.7f;
            want[i] = (float)(3.0 * tanh((double)s[i] / 3.0));
        }
        k->attn_softcap(s, n, 3.0f);
        for (int i = 0; i < n; i++)
            if (!(fabs((double)s[i] - (double)want[i]) <= 4.0 * ulp_of(want[i]) + 1e-30))
                fail_msg("%s n=%d: s[%d] = %.9g, want %.9g", k->name, n, i, (double)s[i],
                         (double)want[i]);
        ta_guard_release(&g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tanh_dense_sweep),
        cmocka_unit_test(test_softcap_dense_sweep),
        cmocka_unit_test(test_softcap_ends),
        cmocka_unit_test(test_softcap_tails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
