/* The CLI's backward pass end to end: `tensorattn sdpa ... --grad-out dO.npy --dq dQ.npy
 * --dk dK.npy --dv dV.npy` on the PyTorch autograd fixtures (tests/fixtures/sdpa_grad.tafx,
 * tools/fixtures_sdpa_grad.py), gradients within 1e-4 of torch's float64 ones; the usage
 * error for an incomplete flag set, and that a failed backward writes no file. */
#include "ta_test.h"
#include "cli_run.h"
#include "io_files.h"
#include "fixture_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The argv of one case (inputs written into ta_test_dir); returns the argument count. */
static int case_args(const ta_fixture_file *f, const char *name, const char **argv,
                     char *mode, char *causal, char *scale)
{
    int a = 1;
    argv[a++] = "sdpa";
    a = ta_cli_sdpa_inputs(argv, a, f, name, causal, mode, scale);
    ta_cli_save_record(ta_test_path("dout.npy"), ta_fixture_case_record(f, name, "dout"));
    argv[a++] = "--grad-out";
    argv[a++] = ta_test_path("dout.npy");
    argv[a++] = "-o";
    argv[a++] = ta_test_path("o.npy");
    argv[a++] = "--dq";
    argv[a++] = ta_test_path("dq.npy");
    argv[a++] = "--dk";
    argv[a++] = ta_test_path("dk.npy");
    argv[a++] = "--dv";
    argv[a++] = ta_test_path("dv.npy");
    return a;
}

/* One case: the forward output within 1e-5, dQ, dK, dV within 1e-4 of autograd. */
static void cli_grad_case(const ta_fixture_file *f, const char *name, void *ctx)
{
    (void)ctx;
    char mode[32], causal[32], scale[64];
    const char *argv[48] = {0};
    case_args(f, name, argv, mode, causal, scale);
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("case %s: exit %d: %s", name, rc, ta_cli_err);
    double d = ta_cli_compare_npy(ta_test_path("o.npy"), ta_fixture_need(f, name, "out"));
    if (d > 1e-5) fail_msg("case %s: output differs by %g", name, d);
    const char *files[3] = {"dq.npy", "dk.npy", "dv.npy"}, *roles[3] = {"dq", "dk", "dv"};
    for (int r = 0; r < 3; r++) {
        d = ta_cli_compare_npy(ta_test_path(files[r]), ta_fixture_need(f, name, roles[r]));
        if (d > 1e-4) fail_msg("case %s: %s differs by %g", name, roles[r], d);
    }
}

static void test_grad_fixtures(void **state)
{
    (void)state;
    /* the CLI takes [B,H,L,D] files */
    assert_true(ta_fixture_cases_run("sdpa_grad.tafx", "layout", "bhld", cli_grad_case, NULL) >= 25);
}

static void test_grad_errors(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "sdpa_grad.tafx"));
    const char *name = ta_fixture_case_name(f, 1);
    char mode[32], causal[32], scale[64];
    const char *argv[48] = {0};
    int a = case_args(f, name, argv, mode, causal, scale);
    const char *o = ta_test_path("o.npy"), *dq = ta_test_path("dq.npy"), *dk = ta_test_path("dk.npy"),
               *dv = ta_test_path("dv.npy");

    /* all four flags or none */
    const char *partial[48];
    memcpy(partial, argv, sizeof partial);
    partial[a - 2] = NULL; /* drop --dv */
    ta_cli_expect_error(partial, 2, "needs all of --grad-out, --dq, --dk and --dv");

    /* a dO of the wrong shape: exit 1, the library's message, and no file at all */
    unlink(o); unlink(dq); unlink(dk); unlink(dv);
    const int64_t bad_shape[4] = {1, 1, 1, 1};
    ta_tensor bad;
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, bad_shape));
    TA_CHECK_OK(ta_npy_save(ta_test_path("bad.npy"), &bad));
    ta_tensor_free(&bad);
    for (int i = 0; i < a; i++)
        if (argv[i] && !strcmp(argv[i], "--grad-out")) argv[i + 1] = ta_test_path("bad.npy");
    ta_cli_expect_error(argv, 1, "ta_sdpa_backward: dO has shape [1, 1, 1, 1]");
    assert_false(ta_test_file_exists(o) || ta_test_file_exists(dq) || ta_test_file_exists(dk) || ta_test_file_exists(dv));
    ta_fixture_close(f);
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_cli_grad");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_fixtures),
        cmocka_unit_test(test_grad_errors),
    };
    return cmocka_run_group_tests_name("cli_grad", tests, setup, ta_test_teardown_dir);
}
