/* Variable-length batches on the command line: `tensorattn sdpa --q Q.npy --k K.npy
 * --v V.npy --cu-seqlens-q CQ.npy --cu-seqlens-k CK.npy ... -o O.npy --lse LSE.npy` with
 * the backward flags, on the PyTorch fixtures (tests/fixtures/varlen.tafx,
 * tools/fixtures_varlen.py; offsets as <i4 and <i8): O and LSE within 1e-5, gradients
 * within 1e-4. Usage errors (one offset flag, a mask, key lengths or weights with the
 * offsets) exit 2; bad input (offsets that do not fit int32, decrease, miss Tq, differ in
 * count, are not 1-d; unpacked Q) exits 1; each with one error line and no output file. */
#include "ta_test.h"
#include "cli_run.h"
#include "fixture_cases.h"
#include "io_files.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ta_test_path, kept: argv holds these while ta_test_path's own ring turns over. */
static const char *kept(const char *name)
{
    static char ring[128][256];
    static int next;
    char *p = ring[next++ % 128];
    snprintf(p, sizeof ring[0], "%s", ta_test_path(name));
    return p;
}

static const char *outs[6] = {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "w.npy"};

/* Offsets (an i32 record) as .npy: <i4, or widened to <i8. */
static void save_offsets(const char *path, const ta_fixture_record *r, int wide)
{
    assert_int_equal(r->dtype, TA_FIXTURE_I32);
    char shape[32];
    snprintf(shape, sizeof shape, "(%lld,)", (long long)r->numel);
    if (!wide) {
        ta_npy_write_raw(path, "<i4", shape, r->data, (size_t)r->numel * 4);
        return;
    }
    int64_t v[256];
    assert_true(r->numel <= 256);
    for (int64_t i = 0; i < r->numel; i++) v[i] = ((const int32_t *)r->data)[i];
    ta_npy_write_raw(path, "<i8", shape, v, (size_t)r->numel * 8);
}

/* The argv of a case with every output (inputs written into ta_test_dir). */
static int case_args(const ta_fixture_file *f, const char *c, const char **argv, char *causal,
                     char *scale, int wide)
{
    int a = 1;
    argv[a++] = "sdpa";
    const char *roles[4] = {"q", "k", "v", "dout"}, *flags[4] = {"--q", "--k", "--v", "--grad-out"};
    const char *files[4] = {"q.npy", "k.npy", "v.npy", "dout.npy"};
    for (int r = 0; r < 4; r++) {
        ta_cli_save_record(ta_test_path(files[r]), ta_fixture_need(f, c, roles[r]));
        argv[a++] = flags[r];
        argv[a++] = kept(files[r]);
    }
    save_offsets(ta_test_path("cq.npy"), ta_fixture_need(f, c, "cu_seqlens_q"), wide);
    save_offsets(ta_test_path("ck.npy"), ta_fixture_need(f, c, "cu_seqlens_k"), wide);
    argv[a++] = "--cu-seqlens-q";
    argv[a++] = kept("cq.npy");
    argv[a++] = "--cu-seqlens-k";
    argv[a++] = kept("ck.npy");
    const char *meta = ta_fixture_case_meta(f, c);
    ta_fixture_meta_get(meta, "causal", causal, 32);
    ta_fixture_meta_get(meta, "scale", scale, 64);
    if (strcmp(causal, "none")) {
        argv[a++] = "--causal";
        argv[a++] = causal;
    }
    if (strtod(scale, NULL) != 0.0) {
        argv[a++] = "--scale";
        argv[a++] = scale;
    }
    const char *oflags[5] = {"-o", "--lse", "--dq", "--dk", "--dv"};
    for (int i = 0; i < 5; i++) {
        argv[a++] = oflags[i];
        argv[a++] = kept(outs[i]);
    }
    return a;
}

static void cli_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    int *count = ctx;
    char causal[32], scale[64];
    const char *argv[48] = {0};
    case_args(f, c, argv, causal, scale, (*count)++ % 2);
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("case %s: exit %d: %s", c, rc, ta_cli_err);
    const char *roles[5] = {"out", "lse", "dq", "dk", "dv"};
    const double tol[5] = {1e-5, 1e-5, 1e-4, 1e-4, 1e-4};
    for (int r = 0; r < 5; r++) {
        double d = ta_cli_compare_npy(ta_test_path(outs[r]), ta_fixture_need(f, c, roles[r]));
        if (!(d <= tol[r])) fail_msg("case %s: %s differs by %g", c, roles[r], d);
    }
}

static void test_varlen_fixtures(void **state)
{
    (void)state;
    int count = 0;
    assert_true(ta_fixture_cases_run("varlen.tafx", NULL, NULL, cli_case, &count) >= 10);
}

/* argv with the flag `flag`'s value replaced (the flag must be there). */
static void set_flag(const char **argv, const char *flag, const char *value)
{
    for (int i = 1; argv[i] && argv[i + 1]; i++)
        if (!strcmp(argv[i], flag)) {
            argv[i + 1] = value;
            return;
        }
    fail_msg("no flag %s", flag);
}

/* Runs argv expecting one error line and no output file. */
static void expect_error(const char **argv, int code, const char *needle)
{
    for (int i = 0; i < 6; i++) unlink(ta_test_path(outs[i]));
    ta_cli_expect_error(argv, code, needle);
    for (int i = 0; i < 6; i++)
        if (ta_test_file_exists(ta_test_path(outs[i])))
            fail_msg("'%s': %s was written", needle, outs[i]);
}

static void test_varlen_errors(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "varlen.tafx"));
    const char *c = ta_fixture_case_name(f, 2); /* five sequences, Tq = 56, Tk = 67 */
    char causal[32], scale[64];
    const char *argv[48] = {0}, *bad[48];
    int a = case_args(f, c, argv, causal, scale, 0);

    /* usage: exit 2 */
    memcpy(bad, argv, sizeof bad);
    for (int i = 1; i < a; i++)
        if (!strcmp(bad[i], "--cu-seqlens-k")) {
            memmove(bad + i, bad + i + 2, sizeof(char *) * (size_t)(a - i - 2));
            bad[a - 2] = NULL;
            break;
        }
    expect_error(bad, 2, "--cu-seqlens-q and --cu-seqlens-k go together");
    const int64_t one[1] = {56};
    ta_tensor ones;
    TA_CHECK_OK(ta_tensor_ones(&ones, 1, one));
    TA_CHECK_OK(ta_npy_save(ta_test_path("m.npy"), &ones));
    ta_tensor_free(&ones);
    const char *extra[3][2] = {{"--mask", "m.npy"}, {"--key-lengths", "cq.npy"}, {"--weights", "w.npy"}};
    for (int e = 0; e < 3; e++) {
        memcpy(bad, argv, sizeof bad);
        bad[a] = extra[e][0];
        bad[a + 1] = kept(extra[e][1]);
        bad[a + 2] = NULL;
        char needle[96];
        snprintf(needle, sizeof needle, "%s does not combine with --cu-seqlens-q/-k", extra[e][0]);
        expect_error(bad, 2, needle);
    }

    /* bad input: exit 1 */
    const int64_t big[6] = {0, 5, 5, (int64_t)1 << 31, 23, 56};
    ta_npy_write_raw(ta_test_path("big.npy"), "<i8", "(6,)", big, sizeof big);
    memcpy(bad, argv, sizeof bad);
    set_flag(bad, "--cu-seqlens-q", kept("big.npy"));
    expect_error(bad, 1, "--cu-seqlens-q: offset 2147483648 at index 3 does not fit int32");
    const int32_t down[6] = {0, 5, 5, 4, 23, 56}, shortq[6] = {0, 5, 5, 22, 23, 55};
    const int32_t fewer[5] = {0, 5, 5, 22, 56}, flat[6] = {0, 5, 5, 22, 23, 56};
    ta_npy_write_raw(ta_test_path("down.npy"), "<i4", "(6,)", down, sizeof down);
    ta_npy_write_raw(ta_test_path("short.npy"), "<i4", "(6,)", shortq, sizeof shortq);
    ta_npy_write_raw(ta_test_path("fewer.npy"), "<i4", "(5,)", fewer, sizeof fewer);
    ta_npy_write_raw(ta_test_path("twod.npy"), "<i4", "(2, 3)", flat, sizeof flat);
    ta_npy_write_raw(ta_test_path("none.npy"), "<i4", "(0,)", flat, 0);
    const char *files[5] = {"down.npy", "short.npy", "fewer.npy", "twod.npy", "none.npy"};
    const char *needles[5] = {
        "ta_sdpa: opts->cu_seqlens_q[3] = 4 is below opts->cu_seqlens_q[2] = 5",
        "ta_sdpa: opts->cu_seqlens_q[5] = 55 but Q has Tq = 56 rows",
        "--cu-seqlens-q has 5 offsets but --cu-seqlens-k has 6",
        "--cu-seqlens-q must have shape [num_seqs + 1] with at least one offset, got 2 dims",
        "--cu-seqlens-q must have shape [num_seqs + 1] with at least one offset, got 1 dims of length 0"};
    for (int i = 0; i < 5; i++) {
        memcpy(bad, argv, sizeof bad);
        set_flag(bad, "--cu-seqlens-q", kept(files[i]));
        expect_error(bad, 1, needles[i]);
    }
    /* Q as [B,H,L,D]: the packed layout is [T,H,D] */
    const int64_t s4[4] = {1, 56, 4, 8};
    ta_tensor q4;
    TA_CHECK_OK(ta_tensor_zeros(&q4, 4, s4));
    TA_CHECK_OK(ta_npy_save(ta_test_path("q4.npy"), &q4));
    ta_tensor_free(&q4);
    memcpy(bad, argv, sizeof bad);
    set_flag(bad, "--q", kept("q4.npy"));
    expect_error(bad, 1, "must have 3 dims [T,H,D] with --cu-seqlens-q/-k, got 4, 3 and 3");
    ta_fixture_close(f);
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_cli_varlen");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varlen_fixtures),
        cmocka_unit_test(test_varlen_errors),
    };
    return cmocka_run_group_tests_name("cli_varlen", tests, setup, ta_test_teardown_dir);
}
