/* The attention variants on the command line: `tensorattn sdpa ... --window L,R --softcap C
 * --alibi-slopes S.npy --sinks S.npy` with the backward's `--dsinks dS.npy`, end to end on
 * the torch fixtures (tests/fixtures/sdpa_variants.tafx): O and LSE within 5e-5, dQ, dK, dV
 * and dsinks within 2e-4. Bad values are usage errors (exit 2) with one error line; bad
 * files and shapes exit 1 with the library's message and write no output file. */
#include "ta_test.h"
#include "cli_run.h"
#include "fixture_cases.h"
#include "io_files.h"
#include "sdpa_variants_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The argv of case c with its variants and the backward (dsinks when the case has sinks). */
static int case_args(const ta_fixture_file *f, const char *c, const char **argv,
                     ta_test_variants *v, char *mode, char *causal, char *scale)
{
    int a = 1;
    argv[a++] = "sdpa";
    a = ta_cli_sdpa_inputs(argv, a, f, c, causal, mode, scale);
    ta_sdpa_opts unused = {0};
    ta_test_variants_load(v, f, c, &unused);
    a = ta_test_variants_cli_args(argv, a, v);
    ta_cli_save_record(ta_test_path("dout.npy"), ta_fixture_need(f, c, "dout"));
    const char *tail[] = {"-o", "o.npy", "--lse", "lse.npy", "--grad-out", "dout.npy", "--dq",
                          "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy"};
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++)
        argv[a++] = i % 2 ? ta_test_path(tail[i]) : tail[i];
    if (v->has_sinks) {
        argv[a++] = "--dsinks";
        argv[a++] = ta_test_path("ds.npy");
    }
    argv[a] = NULL;
    return a;
}

static void cli_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    int *with_sinks = ctx;
    char mode[32], causal[32], scale[64];
    const char *argv[64] = {0};
    ta_test_variants v;
    case_args(f, c, argv, &v, mode, causal, scale);
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("case %s: exit %d: %s", c, rc, ta_cli_err);
    const char *files[] = {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "ds.npy"};
    const char *roles[] = {"out", "lse", "dq", "dk", "dv", "dsinks"};
    /* absolute errors: the LSE's 5e-5 is relative to values up to ~10 */
    const double tol[] = {5e-5, 5e-4, 2e-4, 2e-4, 2e-4, 2e-4};
    for (int r = 0; r < (v.has_sinks ? 6 : 5); r++) {
        double d = ta_cli_compare_npy(ta_test_path(files[r]), ta_fixture_need(f, c, roles[r]));
        if (!(d <= tol[r])) fail_msg("case %s: %s differs by %g", c, roles[r], d);
    }
    *with_sinks += v.has_sinks;
    ta_test_variants_free(&v);
}

static void test_cli_variant_fixtures(void **state)
{
    (void)state;
    int with_sinks = 0;
    /* the CLI takes [B,H,L,D] files */
    int n = ta_fixture_cases_run("sdpa_variants.tafx", "layout", "bhld", cli_case, &with_sinks);
    assert_true(n >= 25);
    assert_true(with_sinks >= 10);
}

/* "<ta_test_dir>/<name>" in buf: the error test's own paths (ta_test_path's ring of 32
 * would reuse the slots case_args' argv points at). */
static const char *own_path(char buf[160], const char *name)
{
    snprintf(buf, 160, "%s/%s", ta_test_dir, name);
    return buf;
}

/* The index of flag's value in argv (a arguments). */
static int value_of(const char **argv, int a, const char *flag)
{
    for (int i = 1; i + 1 < a; i++)
        if (!strcmp(argv[i], flag)) return i + 1;
    fail_msg("no %s", flag);
    return -1;
}

static void test_cli_variant_errors(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "sdpa_variants.tafx"));
    const char *c = NULL;
    for (int i = 0; i < ta_fixture_case_count(f) && !c; i++) { /* window, softcap, ALiBi, sinks */
        const char *name = ta_fixture_case_name(f, i), *meta = ta_fixture_case_meta(f, name);
        if (strstr(meta, "window=") && strstr(meta, "softcap=") && strstr(meta, "layout=bhld") &&
            ta_fixture_case_record(f, name, "alibi") && ta_fixture_case_record(f, name, "sinks"))
            c = name;
    }
    assert_non_null(c);
    char mode[32], causal[32], scale[64];
    const char *argv[64] = {0}, *bad[64];
    ta_test_variants v;
    const int a = case_args(f, c, argv, &v, mode, causal, scale);
    assert_int_equal(ta_cli_run(argv), 0);

    /* --window syntax: exit 2, one line */
    const char *windows[] = {"3", "3,", ",3", "a,b", "-2,0", "0,-2", "1,2,3", " 1,2", "1, 2",
                             "+1,2", "1;2", "99999999999999999999,1", ""};
    const int wi = value_of(argv, a, "--window");
    for (size_t i = 0; i < sizeof windows / sizeof *windows; i++) {
        memcpy(bad, argv, sizeof bad);
        bad[wi] = windows[i];
        ta_cli_expect_error(bad, 2, "--window expects LEFT,RIGHT, two integers >= -1");
    }
    /* --softcap: > 0 when given */
    const char *caps[] = {"0", "-1", "-0", "nan", "inf", "x", "1e39"};
    const int ci = value_of(argv, a, "--softcap");
    for (size_t i = 0; i < sizeof caps / sizeof *caps; i++) {
        memcpy(bad, argv, sizeof bad);
        bad[ci] = caps[i];
        ta_cli_expect_error(bad, 2, "--softcap");
    }
    memcpy(bad, argv, sizeof bad);
    bad[ci] = "0";
    ta_cli_expect_error(bad, 2, "--softcap must be > 0 (leave it out for no softcap), got '0'");
    /* --dsinks without the backward, or without --sinks */
    char p[8][160];
    const char *fwd[] = {NULL, "sdpa", "--q", argv[value_of(argv, a, "--q")], "--k",
                         argv[value_of(argv, a, "--k")], "--v", argv[value_of(argv, a, "--v")],
                         "--sinks", argv[value_of(argv, a, "--sinks")], "-o",
                         own_path(p[0], "o2.npy"), "--dsinks", own_path(p[1], "ds2.npy"), NULL};
    ta_cli_expect_error(fwd, 2, "--dsinks needs the backward pass (--grad-out ...) and --sinks");
    memcpy(bad, argv, sizeof bad);
    bad[value_of(argv, a, "--sinks") - 1] = "--threads"; /* --sinks S.npy -> --threads 1 */
    bad[value_of(argv, a, "--sinks")] = "1";
    ta_cli_expect_error(bad, 2, "--dsinks needs the backward pass (--grad-out ...) and --sinks");

    /* bad files and shapes: exit 1, the library's message, no output file */
    const char *outs[] = {"--lse", "--dq", "--dk", "--dv", "--dsinks"};
    const char *out_files[6] = {argv[value_of(argv, a, "-o")]};
    for (int i = 0; i < 5; i++) out_files[i + 1] = argv[value_of(argv, a, outs[i])];
    for (int i = 0; i < 6; i++) unlink(out_files[i]);
    const int64_t s5[1] = {5};
    ta_tensor t5;
    TA_CHECK_OK(ta_tensor_zeros(&t5, 1, s5));
    TA_CHECK_OK(ta_npy_save(own_path(p[2], "bad5.npy"), &t5));
    ta_tensor_free(&t5);
    memcpy(bad, argv, sizeof bad);
    bad[value_of(argv, a, "--sinks")] = p[2];
    ta_cli_expect_error(bad, 1, "opts->sinks has shape [5]; expected [H]");
    memcpy(bad, argv, sizeof bad);
    bad[value_of(argv, a, "--alibi-slopes")] = p[2];
    ta_cli_expect_error(bad, 1, "opts->alibi_slopes has shape [5]");
    memcpy(bad, argv, sizeof bad);
    bad[value_of(argv, a, "--alibi-slopes")] = own_path(p[3], "missing.npy");
    ta_cli_expect_error(bad, 1, "reading --alibi-slopes");
    for (int i = 0; i < 6; i++) assert_false(ta_test_file_exists(out_files[i]));

    /* --help names every flag */
    const char *help[] = {NULL, "sdpa", "--help", NULL};
    assert_int_equal(ta_cli_run(help), 0);
    const char *flags[] = {"--window LEFT,RIGHT", "--softcap C", "--alibi-slopes S.npy",
                           "--sinks S.npy", "--dsinks dS.npy"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (!strstr(ta_cli_out, flags[i])) fail_msg("sdpa --help lacks %s", flags[i]);
    ta_test_variants_free(&v);
    ta_fixture_close(f);
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_cli_variants");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_variant_fixtures),
        cmocka_unit_test(test_cli_variant_errors),
    };
    return cmocka_run_group_tests_name("cli_variants", tests, setup, ta_test_teardown_dir);
}
