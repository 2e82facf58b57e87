/* The command-line contract end to end: PyTorch fixture cases written to .npy /
 * .safetensors, run through build/tensorattn, outputs compared with the fixtures'
 * float64 references; exit codes, the one-line error, --help, and that a failed run
 * leaves no output file. */
#include "ta_test.h"
#include "fixtures.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static char out_text[8192], err_text[8192];

/* Runs the CLI with argv (NULL-terminated, argv[0] ignored); returns its exit status
 * and leaves its stdout and stderr in out_text / err_text. */
static int run_cli(const char **argv)
{
    char outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/stdout", dir);
    snprintf(errp, sizeof errp, "%s/stderr", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        argv[0] = TA_CLI_PATH;
        execv(TA_CLI_PATH, (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    const char *paths[2] = {outp, errp};
    char *texts[2] = {out_text, err_text};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(paths[k], "r");
        size_t n = f ? fread(texts[k], 1, sizeof out_text - 1, f) : 0;
        texts[k][n] = '\0';
        if (f) fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *path_in(const char *name)
{
    static char buf[32][160]; /* a ring: enough for every path of one command line */
    static int next;
    char *p = buf[next++ % 32];
    snprintf(p, 160, "%s/%s", dir, name);
    return p;
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* One error line, "tensorattn: error: ...", containing needle. */
static void expect_error(const char **argv, int code, const char *needle)
{
    int rc = run_cli(argv);
    if (rc != code) fail_msg("exit %d, expected %d; stderr: %s", rc, code, err_text);
    if (strncmp(err_text, "tensorattn: error: ", 19) != 0)
        fail_msg("stderr does not start with 'tensorattn: error: ': %s", err_text);
    char *nl = strchr(err_text, '\n');
    if (!nl || nl[1] != '\0') fail_msg("stderr is not exactly one line: %s", err_text);
    if (!strstr(err_text, needle)) fail_msg("stderr lacks '%s': %s", needle, err_text);
}

static void save_record(const char *path, const ta_fixture_record *r)
{
    ta_tensor t;
    TA_CHECK_OK(ta_fixture_tensor(&t, r));
    TA_CHECK_OK(ta_npy_save(path, &t));
    ta_tensor_free(&t);
}

/* An '<i8' .npy written by hand (ta_npy_save writes float32 only). */
static void save_i64(const char *path, const ta_fixture_record *r)
{
    char header[128];
    int n = snprintf(header, sizeof header, "{'descr': '<i8', 'fortran_order': False, 'shape': (%lld,), }",
                     (long long)r->shape[0]);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned short hl = (unsigned short)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hl, 2, 1, f);
    fwrite(header, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(r->data, 8, (size_t)r->numel, f);
    fclose(f);
}

/* max |out - ref| where ref is an f64 record; NaN must match NaN. */
static double compare_npy(const char *path, const ta_fixture_record *ref)
{
    ta_tensor o;
    TA_CHECK_OK(ta_npy_load(&o, path));
    assert_int_equal(ta_tensor_numel(&o), ref->numel);
    double *want = malloc(sizeof(double) * (size_t)(ref->numel ? ref->numel : 1));
    TA_CHECK_OK(ta_fixture_to_f64(want, (size_t)ref->numel, ref));
    double d = ta_test_max_abs_diff(o.data, want, (size_t)ref->numel);
    free(want);
    ta_tensor_free(&o);
    return d;
}

static void test_sdpa_fixtures(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "sdpa.tafx"));
    int ran = 0;
    for (int c = 0; c < ta_fixture_case_count(f); c++) {
        const char *name = ta_fixture_case_name(f, c);
        const char *meta = ta_fixture_case_meta(f, name);
        char layout[32], causal[32], mode[32], scale[64];
        ta_fixture_meta_get(meta, "layout", layout, sizeof layout);
        if (strcmp(layout, "bhld") != 0) continue; /* the CLI takes [B,H,L,D] files */
        ta_fixture_meta_get(meta, "causal", causal, sizeof causal);
        ta_fixture_meta_get(meta, "scale", scale, sizeof scale);
        int has_mode = ta_fixture_meta_get(meta, "mask_mode", mode, sizeof mode);
        const char *argv[40] = {0};
        int a = 1;
        argv[a++] = "sdpa";
        const char *roles[3] = {"q", "k", "v"}, *flags[3] = {"--q", "--k", "--v"};
        for (int r = 0; r < 3; r++) {
            char file[16];
            snprintf(file, sizeof file, "%s.npy", roles[r]);
            char *p = path_in(file);
            save_record(p, ta_fixture_case_record(f, name, roles[r]));
            argv[a++] = flags[r];
            argv[a++] = p;
        }
        const ta_fixture_record *mask = ta_fixture_case_record(f, name, "mask");
        const ta_fixture_record *klen = ta_fixture_case_record(f, name, "key_lengths");
        const ta_fixture_record *w = ta_fixture_case_record(f, name, "weights");
        if (mask) {
            save_record(path_in("mask.npy"), mask);
            argv[a++] = "--mask";
            argv[a++] = path_in("mask.npy");
            argv[a++] = "--mask-mode";
            argv[a++] = has_mode ? mode : "keep";
        }
        if (klen) {
            save_i64(path_in("klen.npy"), klen);
            argv[a++] = "--key-lengths";
            argv[a++] = path_in("klen.npy");
        }
        if (strcmp(causal, "none") != 0 && !(mask && has_mode && strcmp(mode, "block") == 0 &&
                                              strncmp(name, "seed", 4) == 0)) {
            argv[a++] = "--causal";
            argv[a++] = causal;
        }
        if (strtod(scale, NULL) != 0.0) {
            argv[a++] = "--scale";
            argv[a++] = scale;
        }
        argv[a++] = "-o";
        argv[a++] = path_in("o.npy");
        argv[a++] = "--lse";
        argv[a++] = path_in("lse.npy");
        if (w) {
            argv[a++] = "--weights";
            argv[a++] = path_in("w.npy");
        }
        int rc = run_cli(argv);
        if (rc != 0) fail_msg("case %s: exit %d: %s", name, rc, err_text);
        double d = compare_npy(path_in("o.npy"), ta_fixture_case_record(f, name, "out"));
        if (d > 1e-5) fail_msg("case %s: output differs by %g", name, d);
        /* LSE: -inf rows must match; compare_npy treats inf - inf as NaN -> fail */
        ta_tensor l;
        TA_CHECK_OK(ta_npy_load(&l, path_in("lse.npy")));
        const ta_fixture_record *lr = ta_fixture_case_record(f, name, "lse");
        double *want = malloc(sizeof(double) * (size_t)lr->numel);
        TA_CHECK_OK(ta_fixture_to_f64(want, (size_t)lr->numel, lr));
        for (int64_t i = 0; i < lr->numel; i++) {
            float got = ((float *)l.data)[i];
            if (isinf(want[i]) || isnan(want[i])) {
                if (!(isnan(want[i]) ? isnan(got) : got == (float)want[i]))
                    fail_msg("case %s: lse[%lld] = %g, want %g", name, (long long)i, (double)got, want[i]);
            } else if (fabs(got - want[i]) > 1e-5 * fmax(1.0, fabs(want[i]))) {
                fail_msg("case %s: lse[%lld] = %g, want %g", name, (long long)i, (double)got, want[i]);
            }
        }
        free(want);
        ta_tensor_free(&l);
        if (w) {
            d = compare_npy(path_in("w.npy"), w);
            if (d > 1e-5) fail_msg("case %s: weights differ by %g", name, d);
        }
        ran++;
    }
    assert_true(ran >= 20);
    ta_fixture_close(f);
}

static void test_mha_fixtures(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "layers.tafx"));
    int ran = 0;
    for (int c = 0; c < ta_fixture_case_count(f); c++) {
        const char *name = ta_fixture_case_name(f, c);
        const char *meta = ta_fixture_case_meta(f, name);
        char kind[16], heads[16], mode[16], causal[8], self[8];
        ta_fixture_meta_get(meta, "kind", kind, sizeof kind);
        ta_fixture_meta_get(meta, "heads", heads, sizeof heads);
        int has_mode = ta_fixture_meta_get(meta, "mask_mode", mode, sizeof mode);
        int is_causal = ta_fixture_meta_get(meta, "causal", causal, sizeof causal) && causal[0] == '1';
        int is_self = ta_fixture_meta_get(meta, "self", self, sizeof self) && self[0] == '1';
        if (ta_fixture_case_record(f, name, "key_padding_mask")) continue; /* not a CLI flag */
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
        TA_CHECK_OK(ta_safetensors_save(path_in("w.safetensors"), np, names, pp));
        for (int i = 0; i < np; i++) ta_tensor_free(&params[i]);
        save_record(path_in("x.npy"), ta_fixture_case_record(f, name, "queries"));
        const char *argv[32] = {0};
        int a = 1;
        argv[a++] = "mha";
        argv[a++] = "--weights";
        argv[a++] = path_in("w.safetensors");
        argv[a++] = "--layout";
        argv[a++] = kind;
        argv[a++] = "--heads";
        argv[a++] = heads;
        argv[a++] = "--input";
        argv[a++] = path_in("x.npy");
        if (!is_self) {
            save_record(path_in("k.npy"), ta_fixture_case_record(f, name, "keys"));
            save_record(path_in("v.npy"), ta_fixture_case_record(f, name, "values"));
            argv[a++] = "--keys";
            argv[a++] = path_in("k.npy");
            argv[a++] = "--values";
            argv[a++] = path_in("v.npy");
        }
        const ta_fixture_record *mask = ta_fixture_case_record(f, name, "mask");
        if (mask) {
            save_record(path_in("m.npy"), mask);
            argv[a++] = "--mask";
            argv[a++] = path_in("m.npy");
            if (has_mode) {
                argv[a++] = "--mask-mode";
                argv[a++] = mode;
            }
        }
        if (is_causal) argv[a++] = "--causal";
        argv[a++] = "-o";
        argv[a++] = path_in("y.npy");
        /* argv[1] is the command */
        argv[1] = "mha";
        int rc = run_cli(argv);
        if (rc != 0) fail_msg("case %s: exit %d: %s", name, rc, err_text);
        double d = compare_npy(path_in("y.npy"), ta_fixture_case_record(f, name, "out64"));
        if (d > 1e-5) fail_msg("case %s: output differs by %g", name, d);
        ran++;
    }
    assert_true(ran >= 5);
    ta_fixture_close(f);
}

static void test_einsum_fixtures(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "einsum.tafx"));
    int ran = 0;
    for (int c = 0; c < ta_fixture_case_count(f); c++) {
        const char *name = ta_fixture_case_name(f, c);
        const char *meta = ta_fixture_case_meta(f, name);
        char spec[256];
        ta_fixture_meta_get(meta, "spec", spec, sizeof spec);
        char expect[16];
        ta_fixture_meta_get(meta, "expect", expect, sizeof expect);
        const ta_fixture_record *b = ta_fixture_case_record(f, name, "b");
        save_record(path_in("a.npy"), ta_fixture_case_record(f, name, "a"));
        if (b) save_record(path_in("b.npy"), b);
        const char *argv[10] = {0};
        int a = 1;
        argv[a++] = "einsum";
        argv[a++] = spec;
        argv[a++] = path_in("a.npy");
        if (b) argv[a++] = path_in("b.npy");
        argv[a++] = "-o";
        argv[a++] = path_in("c.npy");
        unlink(path_in("c.npy"));
        int rc = run_cli(argv);
        if (strcmp(expect, "error") == 0) { /* torch rejects it: so must we, cleanly */
            if (rc != 1 || strncmp(err_text, "tensorattn: error: ", 19) != 0)
                fail_msg("case %s (%s): exit %d, expected 1: %s", name, spec, rc, err_text);
            assert_false(exists(path_in("c.npy")));
            continue;
        }
        if (rc != 0) fail_msg("case %s (%s): exit %d: %s", name, spec, rc, err_text);
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
        TA_CHECK_OK(ta_npy_load(&got, path_in("c.npy")));
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
        ran++;
    }
    assert_true(ran >= 30);
    ta_fixture_close(f);
}

static void make_qkv(int64_t dq, int64_t dk)
{
    ta_tensor q, k;
    TA_CHECK_OK(ta_tensor_empty(&q, 4, (int64_t[]){1, 2, 3, dq}));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, (int64_t[]){1, 2, 5, dk}));
    ta_randn(&q, 1);
    ta_randn(&k, 2);
    TA_CHECK_OK(ta_npy_save(path_in("eq.npy"), &q));
    TA_CHECK_OK(ta_npy_save(path_in("ek.npy"), &k));
    ta_tensor_free(&q);
    ta_tensor_free(&k);
}

static void test_errors(void **state)
{
    (void)state;
    make_qkv(4, 8);
    const char *o = path_in("never.npy");
    unlink(o);
    expect_error((const char *[]){"", NULL}, 2, "missing command");
    expect_error((const char *[]){"", "frobnicate", NULL}, 2, "unknown command 'frobnicate'");
    expect_error((const char *[]){"", "sdpa", "--q", path_in("eq.npy"), NULL}, 2, "needs --q, --k, --v and -o");
    expect_error((const char *[]){"", "sdpa", "--bogus", NULL}, 2, "unknown option '--bogus'");
    expect_error((const char *[]){"", "sdpa", "--q", NULL}, 2, "needs a value");
    expect_error((const char *[]){"", "sdpa", "--q", path_in("eq.npy"), "--k", path_in("ek.npy"), "--v",
                                  path_in("ek.npy"), "--causal", "sideways", "-o", o, NULL},
                 2, "top_left or bottom_right");
    expect_error((const char *[]){"", "sdpa", "--q", path_in("eq.npy"), "--k", path_in("ek.npy"), "--v",
                                  path_in("ek.npy"), "--scale", "abc", "-o", o, NULL},
                 2, "--scale expects a finite number");
    expect_error((const char *[]){"", "sdpa", "--q", path_in("eq.npy"), "--k", path_in("ek.npy"), "--v",
                                  path_in("ek.npy"), "--threads", "0", "-o", o, NULL},
                 2, "--threads expects an integer");
    /* bad input: exit 1 with the library's sentence; no output file */
    expect_error((const char *[]){"", "sdpa", "--q", path_in("eq.npy"), "--k", path_in("ek.npy"), "--v",
                                  path_in("ek.npy"), "-o", o, NULL},
                 1, "head_dim");
    assert_false(exists(o));
    expect_error((const char *[]){"", "sdpa", "--q", path_in("missing.npy"), "--k", path_in("ek.npy"),
                                  "--v", path_in("ek.npy"), "-o", o, NULL},
                 1, "missing.npy");
    assert_false(exists(o));
    expect_error((const char *[]){"", "einsum", "bhid,bhjd->bhij", path_in("eq.npy"), path_in("ek.npy"),
                                  "-o", o, NULL},
                 1, "'d'");
    assert_false(exists(o));
    expect_error((const char *[]){"", "einsum", "ij->", NULL}, 2, "einsum needs SPEC");
    expect_error((const char *[]){"", "mha", "--weights", path_in("nothing.safetensors"), "--layout", "seed",
                                  "--heads", "2", "--input", path_in("eq.npy"), "-o", o, NULL},
                 1, "nothing.safetensors");
    expect_error((const char *[]){"", "mha", "--weights", "w", "--layout", "jax", "--heads", "2",
                                  "--input", "x", "-o", o, NULL},
                 2, "seed or torch");
    expect_error((const char *[]){"", "demo", "--seq", "-4", NULL}, 2, "--seq expects an integer");
    expect_error((const char *[]){"", "bench", "--frobnicate", NULL}, 2, "--frobnicate");
    assert_false(exists(o));
}

static void test_help_and_version(void **state)
{
    (void)state;
    const char *cmds[] = {"demo", "sdpa", "mha", "einsum", "bench"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(run_cli((const char *[]){"", cmds[i], "--help", NULL}), 0);
        assert_non_null(strstr(out_text, "usage: tensorattn"));
        assert_non_null(strstr(out_text, cmds[i]));
    }
    assert_int_equal(run_cli((const char *[]){"", "--help", NULL}), 0);
    assert_non_null(strstr(out_text, "sdpa"));
    assert_int_equal(run_cli((const char *[]){"", "--version", NULL}), 0);
    assert_non_null(strstr(out_text, TA_VERSION_STRING));
}

static void test_demo_small(void **state)
{
    (void)state;
    int rc = run_cli((const char *[]){"", "demo", "--batch", "2", "--heads", "2", "--seq", "64", "--dim", "16", NULL});
    if (rc) fail_msg("demo: exit %d: %s", rc, err_text);
    assert_non_null(strstr(out_text, "Output shape: [2, 2, 64, 16]"));
    assert_non_null(strstr(out_text, "Attention weights shape: [2, 2, 64, 64]"));
    assert_non_null(strstr(out_text, "weights[0,0,0,5] = 0 "));
}

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/ta_cli_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_version), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_demo_small),       cmocka_unit_test(test_einsum_fixtures),
        cmocka_unit_test(test_sdpa_fixtures),    cmocka_unit_test(test_mha_fixtures),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
