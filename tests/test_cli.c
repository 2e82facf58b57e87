/* The command-line contract end to end: PyTorch fixture cases written to .npy /
 * .safetensors, run through build/tensorattn, outputs compared with the fixtures'
 * float64 references; exit codes, the one-line error, --help, and that a failed run
 * leaves no output file. */
#include "ta_test.h"
#include "cli_run.h"
#include "io_files.h"
#include "fixture_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One sdpa fixture case through `tensorattn sdpa`: output, LSE (-inf rows must match)
 * and, when the case has them, the weights against the fixture's float64 values. */
static void cli_sdpa_case(const ta_fixture_file *f, const char *name, void *ctx)
{
    (void)ctx;
    char causal[32], mode[32], scale[64];
    const char *argv[40] = {0};
    int a = 1;
    argv[a++] = "sdpa";
    a = ta_cli_sdpa_inputs(argv, a, f, name, causal, mode, scale);
    const ta_fixture_record *w = ta_fixture_case_record(f, name, "weights");
    argv[a++] = "-o";
    argv[a++] = ta_test_path("o.npy");
    argv[a++] = "--lse";
    argv[a++] = ta_test_path("lse.npy");
    if (w) {
        argv[a++] = "--weights";
        argv[a++] = ta_test_path("w.npy");
    }
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("case %s: exit %d: %s", name, rc, ta_cli_err);
    double d = ta_cli_compare_npy(ta_test_path("o.npy"), ta_fixture_need(f, name, "out"));
    if (d > 1e-5) fail_msg("case %s: output differs by %g", name, d);
    ta_tensor l;
    TA_CHECK_OK(ta_npy_load(&l, ta_test_path("lse.npy")));
    ta_fixture_expect_close(name, "lse", &l, ta_fixture_need(f, name, "lse"), 1.0, 1e-5);
    ta_tensor_free(&l);
    if (w) {
        d = ta_cli_compare_npy(ta_test_path("w.npy"), w);
        if (d > 1e-5) fail_msg("case %s: weights differ by %g", name, d);
    }
}

static void test_sdpa_fixtures(void **state)
{
    (void)state;
    /* the CLI takes [B,H,L,D] files */
    assert_true(ta_fixture_cases_run("sdpa.tafx", "layout", "bhld", cli_sdpa_case, NULL) >= 20);
}

/* One layer case through `tensorattn mha` (cases with a key padding mask, which has no
 * CLI flag, are passed over); the output against torch's float64 one. */
static void cli_mha_case(const ta_fixture_file *f, const char *name, void *ctx)
{
    int *ran = ctx;
    const char *meta = ta_fixture_case_meta(f, name);
    char kind[16], heads[16], mode[16], causal[8], self[8];
    ta_fixture_meta_get(meta, "kind", kind, sizeof kind);
    ta_fixture_meta_get(meta, "heads", heads, sizeof heads);
    int has_mode = ta_fixture_meta_get(meta, "mask_mode", mode, sizeof mode);
    int is_causal = ta_fixture_meta_get(meta, "causal", causal, sizeof causal) && causal[0] == '1';
    int is_self = ta_fixture_meta_get(meta, "self", self, sizeof self) && self[0] == '1';
    if (ta_fixture_case_record(f, name, "key_padding_mask")) return; /* not a CLI flag */
    /* parameters -> a .safetensors file by state_dict name */
    const char *names[8];
    ta_tensor params[8];
    const ta_tensor *pp[8];
    int np = 0;
    for (int r = 0; r < ta_fixture_record_count(f); r++) {
        const ta_fixture_record *rec = ta_fixture_record_at(f, r);
        size_t ln = strlen(name);
        if (strncmp(rec->name, name, ln) == 0 && strncmp(rec->name + ln, "/p.", 3) == 0) {
            assert_true(np < 8);
            names[np] = rec->name + ln + 3;
            TA_CHECK_OK(ta_fixture_tensor(&params[np], rec));
            pp[np] = &params[np];
            np++;
        }
    }
    TA_CHECK_OK(ta_safetensors_save(ta_test_path("w.safetensors"), np, names, pp));
    for (int i = 0; i < np; i++) ta_tensor_free(&params[i]);
    ta_cli_save_record(ta_test_path("x.npy"), ta_fixture_case_record(f, name, "queries"));
    const char *argv[32] = {0};
    int a = 1;
    argv[a++] = "mha";
    argv[a++] = "--weights";
    argv[a++] = ta_test_path("w.safetensors");
    argv[a++] = "--layout";
    argv[a++] = kind;
    argv[a++] = "--heads";
    argv[a++] = heads;
    argv[a++] = "--input";
    argv[a++] = ta_test_path("x.npy");
    if (!is_self) {
        ta_cli_save_record(ta_test_path("k.npy"), ta_fixture_case_record(f, name, "keys"));
        ta_cli_save_record(ta_test_path("v.npy"), ta_fixture_case_record(f, name, "values"));
        argv[a++] = "--keys";
        argv[a++] = ta_test_path("k.npy");
        argv[a++] = "--values";
        argv[a++] = ta_test_path("v.npy");
    }
    const ta_fixture_record *mask = ta_fixture_case_record(f, name, "mask");
    if (mask) {
        ta_cli_save_record(ta_test_path("m.npy"), mask);
        argv[a++] = "--mask";
        argv[a++] = ta_test_path("m.npy");
        if (has_mode) {
            argv[a++] = "--mask-mode";
            argv[a++] = mode;
        }
    }
    if (is_causal) argv[a++] = "--causal";
    argv[a++] = "-o";
    argv[a++] = ta_test_path("y.npy");
    /* argv[1] is the command */
    argv[1] = "mha";
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("case %s: exit %d: %s", name, rc, ta_cli_err);
    double d = ta_cli_compare_npy(ta_test_path("y.npy"), ta_fixture_case_record(f, name, "out64"));
    if (d > 1e-5) fail_msg("case %s: output differs by %g", name, d);
    (*ran)++;
}

static void test_mha_fixtures(void **state)
{
    (void)state;
    int ran = 0;
    ta_fixture_cases_run("layers.tafx", NULL, NULL, cli_mha_case, &ran);
    assert_true(ran >= 5);
}

/* One einsum case through `tensorattn einsum`: a spec torch rejects must fail cleanly
 * (exit 1, one error line, no file); the others within the bound of test_einsum_torch.c. */
static void cli_einsum_case(const ta_fixture_file *f, const char *name, void *ctx)
{
    int *ran = ctx;
    const char *meta = ta_fixture_case_meta(f, name);
    char spec[256];
    ta_fixture_meta_get(meta, "spec", spec, sizeof spec);
    char expect[16];
    ta_fixture_meta_get(meta, "expect", expect, sizeof expect);
    const ta_fixture_record *b = ta_fixture_case_record(f, name, "b");
    ta_cli_save_record(ta_test_path("a.npy"), ta_fixture_case_record(f, name, "a"));
    if (b) ta_cli_save_record(ta_test_path("b.npy"), b);
    const char *argv[10] = {0};
    int a = 1;
    argv[a++] = "einsum";
    argv[a++] = spec;
    argv[a++] = ta_test_path("a.npy");
    if (b) argv[a++] = ta_test_path("b.npy");
    argv[a++] = "-o";
    argv[a++] = ta_test_path("c.npy");
    unlink(ta_test_path("c.npy"));
    if (strcmp(expect, "error") == 0) { /* torch rejects it: so must we, cleanly */
        ta_cli_expect_error(argv, 1, NULL);
        assert_false(ta_test_file_exists(ta_test_path("c.npy")));
        return;
    }
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("case %s (%s): exit %d: %s", name, spec, rc, ta_cli_err);
    /* the bound of tests/test_einsum_torch.c: 1e-5 + 2 * terms * 2^-24 * einsum(|a|,|b|) */
    const ta_fixture_record *out = ta_fixture_case_record(f, name, "out");
    const ta_fixture_record *absout = ta_fixture_case_record(f, name, "absout");
    char terms_text[32];
    ta_fixture_meta_get(meta, "terms", terms_text, sizeof terms_text);
    double terms = fmax(1.0, strtod(terms_text, NULL));
    size_t n = (size_t)out->numel;
    double *want = malloc(sizeof(double) * (n ? n : 1)), *absw = malloc(sizeof(double) * (n ? n : 1));
    TA_CHECK_OK(ta_fixture_to_f64(want, n, out));
    TA_CHECK_OK(ta_fixture_to_f64(absw, n, absout));
    ta_tensor got;
    TA_CHECK_OK(ta_npy_load(&got, ta_test_path("c.npy")));
    assert_int_equal(ta_tensor_numel(&got), out->numel);
    for (size_t i = 0; i < n; i++) {
        double g = ((float *)got.data)[i];
        double tol = 1e-5 + 2.0 * terms * (1.0 / 16777216.0) * absw[i];
        if (!(fabs(g - want[i]) <= tol) && !(isnan(g) && isnan(want[i])))
            fail_msg("case %s (%s): element %zu = %g, want %g", name, spec, i, g, want[i]);
    }
    free(want);
    free(absw);
    ta_tensor_free(&got);
    (*ran)++;
}

static void test_einsum_fixtures(void **state)
{
    (void)state;
    int ran = 0;
    ta_fixture_cases_run("einsum.tafx", NULL, NULL, cli_einsum_case, &ran);
    assert_true(ran >= 30);
}

static void make_qkv(int64_t dq, int64_t dk)
{
    ta_tensor q, k;
    TA_CHECK_OK(ta_tensor_empty(&q, 4, (int64_t[]){1, 2, 3, dq}));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, (int64_t[]){1, 2, 5, dk}));
    ta_randn(&q, 1);
    ta_randn(&k, 2);
    TA_CHECK_OK(ta_npy_save(ta_test_path("eq.npy"), &q));
    TA_CHECK_OK(ta_npy_save(ta_test_path("ek.npy"), &k));
    ta_tensor_free(&q);
    ta_tensor_free(&k);
}

static void test_errors(void **state)
{
    (void)state;
    make_qkv(4, 8);
    const char *o = ta_test_path("never.npy");
    unlink(o);
    ta_cli_expect_error((const char *[]){"", NULL}, 2, "missing command");
    ta_cli_expect_error((const char *[]){"", "frobnicate", NULL}, 2, "unknown command 'frobnicate'");
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", ta_test_path("eq.npy"), NULL}, 2, "needs --q, --k, --v and -o");
    ta_cli_expect_error((const char *[]){"", "sdpa", "--bogus", NULL}, 2, "unknown option '--bogus'");
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", NULL}, 2, "needs a value");
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", ta_test_path("eq.npy"), "--k", ta_test_path("ek.npy"), "--v",
                                  ta_test_path("ek.npy"), "--causal", "sideways", "-o", o, NULL},
                 2, "top_left or bottom_right");
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", ta_test_path("eq.npy"), "--k", ta_test_path("ek.npy"), "--v",
                                  ta_test_path("ek.npy"), "--scale", "abc", "-o", o, NULL},
                 2, "--scale expects a finite number");
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", ta_test_path("eq.npy"), "--k", ta_test_path("ek.npy"), "--v",
                                  ta_test_path("ek.npy"), "--threads", "0", "-o", o, NULL},
                 2, "--threads expects an integer");
    /* bad input: exit 1 with the library's sentence; no output file */
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", ta_test_path("eq.npy"), "--k", ta_test_path("ek.npy"), "--v",
                                  ta_test_path("ek.npy"), "-o", o, NULL},
                 1, "head_dim");
    assert_false(ta_test_file_exists(o));
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", ta_test_path("missing.npy"), "--k", ta_test_path("ek.npy"),
                                  "--v", ta_test_path("ek.npy"), "-o", o, NULL},
                 1, "missing.npy");
    assert_false(ta_test_file_exists(o));
    ta_cli_expect_error((const char *[]){"", "einsum", "bhid,bhjd->bhij", ta_test_path("eq.npy"), ta_test_path("ek.npy"),
                                  "-o", o, NULL},
                 1, "'d'");
    assert_false(ta_test_file_exists(o));
    ta_cli_expect_error((const char *[]){"", "einsum", "ij->", NULL}, 2, "einsum needs SPEC");
    ta_cli_expect_error((const char *[]){"", "mha", "--weights", ta_test_path("nothing.safetensors"), "--layout", "seed",
                                  "--heads", "2", "--input", ta_test_path("eq.npy"), "-o", o, NULL},
                 1, "nothing.safetensors");
    ta_cli_expect_error((const char *[]){"", "mha", "--weights", "w", "--layout", "jax", "--heads", "2",
                                  "--input", "x", "-o", o, NULL},
                 2, "seed or torch");
    ta_cli_expect_error((const char *[]){"", "demo", "--seq", "-4", NULL}, 2, "--seq expects an integer");
    ta_cli_expect_error((const char *[]){"", "bench", "--frobnicate", NULL}, 2, "--frobnicate");
    assert_false(ta_test_file_exists(o));
}

static void test_help_and_version(void **state)
{
    (void)state;
    const char *cmds[] = {"demo", "sdpa", "mha", "einsum", "bench"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ta_cli_run((const char *[]){"", cmds[i], "--help", NULL}), 0);
        assert_non_null(strstr(ta_cli_out, "usage: tensorattn"));
        assert_non_null(strstr(ta_cli_out, cmds[i]));
    }
    assert_int_equal(ta_cli_run((const char *[]){"", "--help", NULL}), 0);
    assert_non_null(strstr(ta_cli_out, "sdpa"));
    assert_int_equal(ta_cli_run((const char *[]){"", "--version", NULL}), 0);
    assert_non_null(strstr(ta_cli_out, TA_VERSION_STRING));
}

/* Output that never reached stdout (/dev/full) is a failure: exit 1 and the error line
 * (until session 35 the help and the demo exited 0 with their text lost). */
static void test_stdout_write_error_fails(void **state)
{
    (void)state;
    static const char *const cmds[] = {
        "\"$0\" --help >/dev/full",
        "\"$0\" sdpa --help >/dev/full",
        "\"$0\" --version >/dev/full",
        "\"$0\" demo --batch 1 --heads 1 --seq 8 --dim 4 >/dev/full",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        const int rc = ta_cli_run_program("/bin/sh", (const char *[]){"sh", "-c", cmds[i], TA_CLI_PATH, NULL});
        if (rc != 1) fail_msg("%s: exit %d, expected 1 (stderr: %s)", cmds[i], rc, ta_cli_err);
        assert_non_null(strstr(ta_cli_err, "tensorattn: error: writing the standard output failed"));
        assert_non_null(strchr(ta_cli_err, '\n'));
        assert_null(strchr(strchr(ta_cli_err, '\n') + 1, '\n')); /* one line */
    }
    /* the same commands with a working stdout still succeed */
    assert_int_equal(ta_cli_run_program("/bin/sh", (const char *[]){"sh", "-c", "\"$0\" --help >/dev/null", TA_CLI_PATH, NULL}), 0);
}

static void test_demo_small(void **state)
{
    (void)state;
    int rc = ta_cli_run((const char *[]){"", "demo", "--batch", "2", "--heads", "2", "--seq", "64", "--dim", "16", NULL});
    if (rc) fail_msg("demo: exit %d: %s", rc, ta_cli_err);
    assert_non_null(strstr(ta_cli_out, "Output shape: [2, 2, 64, 16]"));
    assert_non_null(strstr(ta_cli_out, "Attention weights shape: [2, 2, 64, 64]"));
    assert_non_null(strstr(ta_cli_out, "weights[0,0,0,5] = 0 "));
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_cli");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_version), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_demo_small),       cmocka_unit_test(test_einsum_fixtures),
        cmocka_unit_test(test_stdout_write_error_fails),
        cmocka_unit_test(test_sdpa_fixtures),    cmocka_unit_test(test_mha_fixtures),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, ta_test_teardown_dir);
}
