/* `tensorattn sdpa --kv-dtype f16|bf16`: K and V stored at that precision, rounded to
 * nearest-even, the computation in float32 from the stored values. On the half fixtures
 * (tests/fixtures/half.tafx) whose only half tensors are K and V (a bfloat16 and a
 * float16 cache, decode shapes), with their values
 *   - as torch rounded them: O and LSE within 1e-5 of the float64 reference;
 *   - nudged by 2^-13 of themselves (far below half a unit in the last place of either
 *     type): --kv-dtype rounds them back to the same values, so the same results, while
 *     the float32 run (no --kv-dtype) must differ from them — the flag did the rounding.
 * A bad --kv-dtype is a usage error (exit 2, one line, no output file). */
#include "ta_test.h"
#include "cli_run.h"
#include "fixture_cases.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *kept(const char *name)
{
    static char ring[64][256];
    static int next;
    char *p = ring[next++ % 64];
    snprintf(p, sizeof ring[0], "%s", ta_test_path(name));
    return p;
}

/* Multiplies every value of the .npy float32 file at path by (1 + eps). */
static void nudge(const char *path, float eps)
{
    ta_tensor t;
    TA_CHECK_OK(ta_npy_load(&t, path));
    float *x = t.data;
    for (int64_t i = 0; i < ta_tensor_numel(&t); i++) x[i] *= 1.0f + eps;
    TA_CHECK_OK(ta_npy_save(path, &t));
    ta_tensor_free(&t);
}

static void run_case(const ta_fixture_file *f, const char *c, const char *dtype, int *checked)
{
    const char *argv[40];
    char causal[32], mode[32], scale[64];
    int a = 1;
    argv[a++] = "sdpa";
    a = ta_cli_sdpa_inputs(argv, a, f, c, causal, mode, scale);
    const char *o = kept("o.npy"), *l = kept("lse.npy");
    argv[a++] = "-o";
    argv[a++] = o;
    argv[a++] = "--lse";
    argv[a++] = l;
    argv[a++] = "--kv-dtype";
    argv[a++] = dtype;
    argv[a] = NULL;
    const ta_fixture_record *wo = ta_fixture_need(f, c, "out"), *wl = ta_fixture_need(f, c, "lse");
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* nudged K and V: the flag rounds them back */
            nudge(ta_test_path("k.npy"), 0x1p-13f);
            nudge(ta_test_path("v.npy"), 0x1p-13f);
        }
        unlink(o);
        int rc = ta_cli_run(argv);
        if (rc != 0) fail_msg("%s --kv-dtype %s: exit %d: %s", c, dtype, rc, ta_cli_err);
        double eo = ta_cli_compare_npy(o, wo), el = ta_cli_compare_npy(l, wl);
        if (!(eo <= 1e-5 && el <= 1e-5))
            fail_msg("%s --kv-dtype %s (pass %d): O error %.3g, LSE error %.3g", c, dtype, pass,
                     eo, el);
    }
    /* without the flag the nudged values stay as they are: a visible difference */
    argv[a - 2] = NULL;
    unlink(o);
    assert_int_equal(ta_cli_run(argv), 0);
    double e32 = ta_cli_compare_npy(o, wo);
    if (!(e32 > 1e-5))
        fail_msg("%s: the float32 run of nudged K, V is within %.3g of the %s reference: the "
                 "test cannot see the rounding", c, e32, dtype);
    (*checked)++;
}

static void test_kv_dtype(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "half.tafx"));
    int checked = 0;
    for (int i = 0; i < ta_fixture_case_count(f); i++) {
        const char *c = ta_fixture_case_name(f, i);
        char dts[64];
        ta_fixture_meta_get(ta_fixture_case_meta(f, c), "dtypes", dts, sizeof dts);
        if (!strcmp(dts, "f32,bf16,f32,f32")) run_case(f, c, "bf16", &checked);
        if (!strcmp(dts, "f32,f16,f32,f32")) run_case(f, c, "f16", &checked);
    }
    assert_int_equal(checked, 2);
    ta_fixture_close(f);
}

static void test_kv_dtype_usage(void **state)
{
    (void)state;
    const char *o = kept("bad.npy");
    const char *argv[] = {NULL, "sdpa", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy",
                          "-o", o, "--kv-dtype", "f8", NULL};
    ta_cli_expect_error(argv, 2, "--kv-dtype expects f32, f16 or bf16, got 'f8'");
    assert_int_equal(access(o, F_OK), -1);
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_cli_half");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_dtype),
        cmocka_unit_test(test_kv_dtype_usage),
    };
    return cmocka_run_group_tests_name("cli_half", tests, setup, ta_test_teardown_dir);
}
