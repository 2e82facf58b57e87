/* The CLI under bad input: every failure exits 1 (bad input, failed computation) or 2
 * (usage), prints exactly one line "tensorattn: error: ..." on stderr, leaves an
 * existing output file byte-identical, creates no output file, and leaves no temporary
 * file behind. Inputs: truncated and corrupt .npy files, wrong dtypes, masks and key
 * lengths of the wrong shape, corrupt weights, output paths in missing directories,
 * out-of-range option values. */
#include "cli_run.h"
#include "ta_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* a path in the test's private directory (tests/support/cli_run.h) */
#define P(name) ta_test_path(name)

static void write_bytes(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(P(name), "wb");
    assert_non_null(f);
    fwrite(data, 1, n, f);
    fclose(f);
}

static void save(const char *name, int ndim, int64_t a, int64_t b, int64_t c, int64_t d, uint64_t seed)
{
    const int64_t shape[4] = {a, b, c, d};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_empty(&t, ndim, shape));
    TA_CHECK_OK(ta_randn(&t, seed));
    TA_CHECK_OK(ta_npy_save(P(name), &t));
    ta_tensor_free(&t);
}

static int setup(void **state)
{
    (void)state;
    if (ta_test_make_dir("ta_cli_faults")) return 1;
    save("q.npy", 4, 1, 2, 3, 4, 1);
    save("k.npy", 4, 1, 2, 5, 4, 2);
    save("v.npy", 4, 1, 2, 5, 4, 3);
    save("x.npy", 3, 1, 3, 8, 0, 4);
    save("mask_bad.npy", 2, 4, 4, 0, 0, 5);
    float buf[64] = {0};
    ta_npy_write_raw(P("trunc.npy"), "<f4", "(1, 2, 3, 4)", buf, 20);           /* 24 floats promised */
    ta_npy_write_raw(P("trailing.npy"), "<f4", "(1, 2, 3, 4)", buf, 24 * 4 + 3); /* extra bytes */
    ta_npy_write_raw(P("i2.npy"), "<i2", "(1, 2, 3, 4)", buf, 48);
    ta_npy_write_raw(P("be.npy"), ">f4", "(1, 2, 3, 4)", buf, 96);
    ta_npy_write_raw(P("obj.npy"), "|O", "(1, 2, 3, 4)", buf, 96);
    ta_npy_write_raw(P("badshape.npy"), "<f4", "(1, -2, 3, 4)", buf, 96);
    ta_npy_write_raw(P("hugeshape.npy"), "<f4", "(4611686018427387904, 4, 1, 1)", buf, 96);
    ta_npy_write_raw(P("klen_i4.npy"), "<i4", "(3,)", (int32_t[3]){5, 5, 5}, 12);
    ta_npy_write_raw(P("klen_range.npy"), "<i8", "(1,)", (int64_t[1]){6}, 8);
    ta_npy_write_raw(P("klen_f4.npy"), "<f4", "(1,)", (float[1]){5}, 4);
    write_bytes("empty.npy", "", 0);
    write_bytes("magic.npy", "\x93NUMPX\x01\x00\x10\x00{}              \n", 26);
    write_bytes("hdr.npy", "\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'\n", 26);
    write_bytes("hdrlen.npy", "\x93NUMPY\x01\x00\xff\xff{'descr'", 17);
    write_bytes("w_garbage.safetensors", "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": [1, 2]}  ", 24);
    write_bytes("w_hugelen.safetensors", "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    write_bytes("keep.npy", "precious contents", 17);
    /* a KV cache: q [1, 1, 2, 4], caches [1, 5, 1, 4] holding 2 keys, one new key */
    save("q4.npy", 4, 1, 1, 2, 4, 6);
    save("kc.npy", 4, 1, 5, 1, 4, 7);
    save("vc.npy", 4, 1, 5, 1, 4, 8);
    save("kn.npy", 4, 1, 1, 1, 4, 9);
    save("vn.npy", 4, 1, 1, 1, 4, 10);
    ta_npy_write_raw(P("cs.npy"), "<i4", "(1,)", (int32_t[1]){2}, 4);
    return 0;
}

/* Asserts the failure contract for one command line. */
static void expect_failure(int want, const char **argv)
{
    struct stat before;
    assert_int_equal(stat(P("keep.npy"), &before), 0);
    ta_cli_expect_error(argv, want, NULL);
    char cmdline[512] = "";
    for (int i = 1; argv[i]; i++) { /* truncated when long: room for " " and the NUL */
        const size_t used = strlen(cmdline);
        if (used + 2 >= sizeof cmdline) break;
        strncat(cmdline, argv[i], sizeof cmdline - used - 2);
        strcat(cmdline, " ");
    }
    /* the existing output is intact, no new output, no temporary left */
    FILE *f = fopen(P("keep.npy"), "rb");
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n != 17 || memcmp(buf, "precious contents", 17) != 0)
        fail_msg("'%s': the existing output file was changed", cmdline);
    if (access(P("new.npy"), F_OK) == 0) fail_msg("'%s': created an output file", cmdline);
    DIR *d = opendir(ta_test_dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) fail_msg("'%s': left a temporary file %s", cmdline, e->d_name);
    closedir(d);
}

#define FAIL(want, ...) expect_failure(want, (const char *[]){"", __VA_ARGS__, NULL})

static void test_corrupt_npy(void **s)
{
    (void)s;
    const char *bad[] = {"trunc.npy", "trailing.npy", "i2.npy", "be.npy", "obj.npy", "badshape.npy",
                         "hugeshape.npy", "empty.npy", "magic.npy", "hdr.npy", "hdrlen.npy",
                         "missing.npy", "/"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = bad[i][0] == '/' ? ta_test_dir : P(bad[i]);
        FAIL(1, "sdpa", "--q", p, "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("keep.npy"));
        FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", p, "-o", P("new.npy"));
        FAIL(1, "einsum", "ij->ji", p, "-o", P("keep.npy"));
        FAIL(1, "mha", "--weights", P("w_garbage.safetensors"), "--layout", "seed", "--heads", "2",
             "--input", p, "-o", P("keep.npy"));
    }
}

static void test_bad_shapes_and_values(void **s)
{
    (void)s;
    /* mask of the wrong shape, as float and as a wrong dtype */
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "--mask",
         P("mask_bad.npy"), "-o", P("keep.npy"));
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "--mask",
         P("i2.npy"), "-o", P("keep.npy"));
    /* key lengths: wrong shape, out of range, wrong dtype */
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "--key-lengths",
         P("klen_i4.npy"), "-o", P("keep.npy"));
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "--key-lengths",
         P("klen_range.npy"), "-o", P("keep.npy"));
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "--key-lengths",
         P("klen_f4.npy"), "-o", P("keep.npy"));
    /* shapes that do not fit together: Q and K head dims, rank-3 Q */
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("x.npy"), "--v", P("v.npy"), "-o", P("keep.npy"));
    FAIL(1, "sdpa", "--q", P("x.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("keep.npy"));
    FAIL(1, "einsum", "ij,jk->ik", P("q.npy"), P("k.npy"), "-o", P("keep.npy"));
    FAIL(1, "einsum", "ab->c", P("x.npy"), "-o", P("keep.npy"));
    /* weights files: corrupt, absurd header length, missing, wrong E for the input */
    FAIL(1, "mha", "--weights", P("w_garbage.safetensors"), "--layout", "torch", "--heads", "2",
         "--input", P("x.npy"), "-o", P("keep.npy"));
    FAIL(1, "mha", "--weights", P("w_hugelen.safetensors"), "--layout", "torch", "--heads", "2",
         "--input", P("x.npy"), "-o", P("keep.npy"));
    FAIL(1, "mha", "--weights", P("nope.safetensors"), "--layout", "seed", "--heads", "2",
         "--input", P("x.npy"), "-o", P("keep.npy"));
    FAIL(1, "mha", "--weights", P("q.npy"), "--layout", "seed", "--heads", "2", "--input",
         P("x.npy"), "-o", P("keep.npy"));
}

static void test_output_paths(void **s)
{
    (void)s;
    /* output in a missing directory: exit 1, nothing written anywhere */
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o",
         P("no/such/dir/o.npy"));
    FAIL(1, "einsum", "ij->ji", P("mask_bad.npy"), "-o", P("missing_dir/o.npy"));
    /* output path that is a directory */
    FAIL(1, "einsum", "ij->ji", P("mask_bad.npy"), "-o", ta_test_dir);
    /* a successful run replaces an existing file whole */
    write_bytes("replace.npy", "old", 3);
    assert_int_equal(ta_cli_run((const char *[]){"", "einsum", "ij->ji", P("mask_bad.npy"), "-o",
                                              P("replace.npy"), NULL}), 0);
    ta_tensor t = {0};
    TA_CHECK_OK(ta_npy_load(&t, P("replace.npy")));
    assert_int_equal(t.ndim, 2);
    ta_tensor_free(&t);
}

/* Several outputs are all written or none: a later one that cannot be written (its
 * directory is missing) leaves the earlier ones unwritten, new or existing. */
static void test_outputs_all_or_none(void **s)
{
    (void)s;
    char missing[256]; /* kept: P's buffers are a ring */
    snprintf(missing, sizeof missing, "%s", P("no/such/dir/x.npy"));
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--lse", missing);
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("keep.npy"),
         "--lse", P("new.npy"), "--weights", missing);
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("keep.npy"),
         "--grad-out", P("q.npy"), "--dq", P("new.npy"), "--dk", ta_test_dir, "--dv", missing);
    FAIL(1, "kvcache", "--q", P("q4.npy"), "--k-cache", P("kc.npy"), "--v-cache", P("vc.npy"),
         "--cache-seqlens", P("cs.npy"), "--k-new", P("kn.npy"), "--v-new", P("vn.npy"), "-o",
         P("keep.npy"), "--k-cache-out", P("new.npy"), "--v-cache-out", missing);
    /* the same command with every output writable: all of them written */
    assert_int_equal(ta_cli_run((const char *[]){"", "kvcache", "--q", P("q4.npy"), "--k-cache",
                                                 P("kc.npy"), "--v-cache", P("vc.npy"),
                                                 "--cache-seqlens", P("cs.npy"), "--k-new",
                                                 P("kn.npy"), "--v-new", P("vn.npy"), "-o",
                                                 P("o_all.npy"), "--k-cache-out", P("kc_all.npy"),
                                                 "--v-cache-out", P("vc_all.npy"), NULL}),
                     0);
    const char *made[] = {"o_all.npy", "kc_all.npy", "vc_all.npy"};
    for (int i = 0; i < 3; i++) {
        ta_tensor t;
        TA_CHECK_OK(ta_npy_load(&t, P(made[i])));
        ta_tensor_free(&t);
        unlink(P(made[i]));
    }
}

/* An output that names an input (the command line never writes its inputs), or two
 * outputs that name one file: usage errors, by the same string, by another spelling of
 * an existing file, or of a new one. */
static void test_outputs_apart(void **s)
{
    (void)s;
    char q_again[256], new_again[256];
    snprintf(q_again, sizeof q_again, "%s/./q.npy", ta_test_dir);
    snprintf(new_again, sizeof new_again, "%s/../%s/new.npy", ta_test_dir,
             strrchr(ta_test_dir, '/') + 1);
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("q.npy"));
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", q_again);
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--lse", new_again);
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("keep.npy"),
         "--lse", P("keep.npy"));
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--grad-out", P("q.npy"), "--dq", P("new2.npy"), "--dk", P("new3.npy"), "--dv",
         P("k.npy"));
    FAIL(2, "kvcache", "--q", P("q4.npy"), "--k-cache", P("kc.npy"), "--v-cache", P("vc.npy"),
         "--cache-seqlens", P("cs.npy"), "--k-new", P("kn.npy"), "--v-new", P("vn.npy"), "-o",
         P("new.npy"), "--k-cache-out", P("kc.npy"), "--v-cache-out", P("new2.npy"));
    FAIL(2, "kvcache", "--q", P("q4.npy"), "--k-cache", P("kc.npy"), "--v-cache", P("vc.npy"),
         "--cache-seqlens", P("cs.npy"), "-o", P("new.npy"), "--lse", P("new.npy"));
    assert_non_null(strstr(ta_cli_err, "-o and --lse name the same file"));
    FAIL(2, "einsum", "ij->ji", P("mask_bad.npy"), "-o", P("mask_bad.npy"));
    FAIL(2, "einsum", "bij,bjk->bik", P("x.npy"), P("q.npy"), "-o", P("q.npy"));
    FAIL(2, "mha", "--weights", P("w_garbage.safetensors"), "--layout", "seed", "--heads", "2",
         "--input", P("x.npy"), "-o", P("x.npy"));
    FAIL(2, "mha", "--weights", P("w_garbage.safetensors"), "--layout", "seed", "--heads", "2",
         "--input", P("x.npy"), "-o", P("w_garbage.safetensors"));
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v",
                                         P("v.npy"), "-o", q_again, NULL},
                        2, "is the input file of --q: the command line never writes its inputs");
    /* an empty output name: a usage error before any work (until session 37 exit 1 after
     * the computation, "cannot rename the written file to : ...") */
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v",
                                         P("v.npy"), "-o", "", NULL},
                        2, "-o needs a file name ('' given)");
    ta_cli_expect_error((const char *[]){"", "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v",
                                         P("v.npy"), "-o", P("new.npy"), "--lse", "", NULL},
                        2, "--lse needs a file name ('' given)");
    ta_cli_expect_error((const char *[]){"", "einsum", "ij->ji", P("mask_bad.npy"), "-o", "", NULL},
                        2, "-o needs a file name ('' given)");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--q", P("q4.npy"), "--k-cache",
                                         P("kc.npy"), "--v-cache", P("vc.npy"),
                                         "--cache-seqlens", P("cs.npy"), "-o", P("new.npy"),
                                         "--k-cache-out", "", "--v-cache-out", P("new2.npy"),
                                         NULL},
                        2, "--k-cache-out needs a file name ('' given)");
    ta_cli_expect_error((const char *[]){"", "mha", "--weights", P("w_garbage.safetensors"),
                                         "--layout", "seed", "--heads", "2", "--input",
                                         P("x.npy"), "-o", "", NULL},
                        2, "-o needs a file name ('' given)");
}

static void test_usage_errors(void **s)
{
    (void)s;
    /* a valid sdpa command line with one bad option value */
    static const char *const bad_values[][2] = {
        {"--scale", "1e39"},   {"--scale", "nan"},      {"--scale", ""},
        {"--threads", "0"},    {"--threads", "99999999999999999999"},
        {"--causal", "sideways"}, {"--mask-mode", "keep"},
    };
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++)
        FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
             bad_values[i][0], bad_values[i][1]);
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"),
         "-o", P("new.npy"));
    FAIL(2, "sdpa", "--bogus");
    FAIL(2, "mha", "--weights", P("w.safetensors"), "--layout", "diagonal", "--heads", "2",
         "--input", P("x.npy"), "-o", P("new.npy"));
    FAIL(2, "mha", "--weights", P("w.safetensors"), "--layout", "seed", "--heads", "-1",
         "--input", P("x.npy"), "-o", P("new.npy"));
    FAIL(2, "einsum", "ij->ji", "-o", P("new.npy"));
    FAIL(2, "frobnicate");
}

/* The error stays one line whatever it quotes: a control character in a file name or an
 * argument is written escaped (until session 35 a newline in a path split the line), and
 * a message longer than any buffer is written whole. */
static void test_error_is_one_line(void **s)
{
    (void)s;
    FAIL(1, "sdpa", "--q", P("no\nsuch.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o",
         P("new.npy"));
    assert_non_null(strstr(ta_cli_err, "no\\nsuch.npy: cannot open"));
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--causal", "top\n\tleft\x7f");
    assert_non_null(strstr(ta_cli_err, "got 'top\\n\\x09left\\x7f'"));
    FAIL(2, "mha", "--weights", P("w.safetensors"), "--layout", "seed\r", "--heads", "2",
         "--input", P("x.npy"), "-o", P("new.npy"));
    assert_non_null(strstr(ta_cli_err, "got 'seed\\x0d'"));
    /* a backslash is written doubled: a name holding a backslash and an n reads apart
     * from one holding a newline (both were "\n" until session 37) */
    FAIL(1, "sdpa", "--q", P("no\\nsuch.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o",
         P("new.npy"));
    assert_non_null(strstr(ta_cli_err, "no\\\\nsuch.npy: cannot open"));
    /* a 3000-byte value with a newline at its end: quoted whole, in one line */
    char value[3002];
    memset(value, 'x', 3000);
    strcpy(value + 3000, "\n");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--causal", value);
    value[3000] = '\0';
    assert_non_null(strstr(ta_cli_err, value));
    assert_non_null(strstr(ta_cli_err, "x\\n'\n"));
    /* paths of ~3000 bytes in a directory that does not exist, in and out: each quoted
     * whole (until session 37 the library's message and the writer's reason stopped at
     * 1024 bytes, mid-path) */
    char path[3200];
    int n = snprintf(path, sizeof path, "%s/nosuchdir", ta_test_dir);
    for (int i = 0; i < 14; i++) {
        path[n++] = '/';
        memset(path + n, 'a' + i, 200);
        n += 200;
    }
    strcpy(path + n, "/o.npy");
    FAIL(1, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", path);
    assert_non_null(strstr(ta_cli_err, path));
    assert_non_null(strstr(ta_cli_err, "No such file or directory"));
    FAIL(1, "sdpa", "--q", path, "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"));
    assert_non_null(strstr(ta_cli_err, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corrupt_npy),
        cmocka_unit_test(test_bad_shapes_and_values),
        cmocka_unit_test(test_output_paths),
        cmocka_unit_test(test_outputs_all_or_none),
        cmocka_unit_test(test_outputs_apart),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_error_is_one_line),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
