/* The CLI under bad input: every failure exits 1 (bad input, failed computation) or 2
 * (usage), prints exactly one line "tensorattn: error: ..." on stderr, leaves an
 * existing output file byte-identical, creates no output file, and leaves no temporary
 * file behind. Inputs: truncated and corrupt .npy files, wrong dtypes, masks and key
 * lengths of the wrong shape, corrupt weights, output paths in missing directories,
 * out-of-range option values. */
#include "ta_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static char err_text[8192];

static int run_cli(const char **argv)
{
    char outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/stdout.txt", dir);
    snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
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
    FILE *f = fopen(errp, "r");
    size_t n = f ? fread(err_text, 1, sizeof err_text - 1, f) : 0;
    err_text[n] = '\0';
    if (f) fclose(f);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *P(const char *name)
{
    static char buf[32][160];
    static int next;
    char *p = buf[next++ % 32];
    snprintf(p, 160, "%s/%s", dir, name);
    return p;
}

/* A .npy v1.0 file with this descr and shape text ("(2, 3)") and raw data bytes. */
static void write_npy_raw(const char *name, const char *descr, const char *shape,
                          const void *data, size_t nbytes)
{
    char header[256];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(P(name), "wb");
    assert_non_null(f);
    uint16_t hl = (uint16_t)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hl, 2, 1, f);
    fwrite(header, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    if (nbytes) fwrite(data, 1, nbytes, f);
    fclose(f);
}

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
    snprintf(dir, sizeof dir, "/tmp/ta_cli_faults_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    save("q.npy", 4, 1, 2, 3, 4, 1);
    save("k.npy", 4, 1, 2, 5, 4, 2);
    save("v.npy", 4, 1, 2, 5, 4, 3);
    save("x.npy", 3, 1, 3, 8, 0, 4);
    save("mask_bad.npy", 2, 4, 4, 0, 0, 5);
    float buf[64] = {0};
    write_npy_raw("trunc.npy", "<f4", "(1, 2, 3, 4)", buf, 20);           /* 24 floats promised */
    write_npy_raw("trailing.npy", "<f4", "(1, 2, 3, 4)", buf, 24 * 4 + 3); /* extra bytes */
    write_npy_raw("i2.npy", "<i2", "(1, 2, 3, 4)", buf, 48);
    write_npy_raw("be.npy", ">f4", "(1, 2, 3, 4)", buf, 96);
    write_npy_raw("obj.npy", "|O", "(1, 2, 3, 4)", buf, 96);
    write_npy_raw("badshape.npy", "<f4", "(1, -2, 3, 4)", buf, 96);
    write_npy_raw("hugeshape.npy", "<f4", "(4611686018427387904, 4, 1, 1)", buf, 96);
    write_npy_raw("klen_i4.npy", "<i4", "(3,)", (int32_t[3]){5, 5, 5}, 12);
    write_npy_raw("klen_range.npy", "<i8", "(1,)", (int64_t[1]){6}, 8);
    write_npy_raw("klen_f4.npy", "<f4", "(1,)", (float[1]){5}, 4);
    write_bytes("empty.npy", "", 0);
    write_bytes("magic.npy", "\x93NUMPX\x01\x00\x10\x00{}              \n", 26);
    write_bytes("hdr.npy", "\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'\n", 26);
    write_bytes("hdrlen.npy", "\x93NUMPY\x01\x00\xff\xff{'descr'", 17);
    write_bytes("w_garbage.safetensors", "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": [1, 2]}  ", 24);
    write_bytes("w_hugelen.safetensors", "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    write_bytes("keep.npy", "precious contents", 17);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) != 0;
}

/* Asserts the failure contract for one command line. */
static void expect_failure(int want, const char **argv)
{
    struct stat before;
    assert_int_equal(stat(P("keep.npy"), &before), 0);
    int rc = run_cli(argv);
    char cmdline[512] = "";
    for (int i = 1; argv[i]; i++) {
        strncat(cmdline, argv[i], sizeof cmdline - strlen(cmdline) - 2);
        strcat(cmdline, " ");
    }
    if (rc != want) fail_msg("'%s' exited %d, expected %d; stderr: %s", cmdline, rc, want, err_text);
    if (strncmp(err_text, "tensorattn: error: ", 19) != 0)
        fail_msg("'%s': stderr does not start with 'tensorattn: error: ': %s", cmdline, err_text);
    char *nl = strchr(err_text, '\n');
    if (!nl || nl[1] != '\0') fail_msg("'%s': stderr is not exactly one line: %s", cmdline, err_text);
    /* the existing output is intact, no new output, no temporary left */
    FILE *f = fopen(P("keep.npy"), "rb");
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n != 17 || memcmp(buf, "precious contents", 17) != 0)
        fail_msg("'%s': the existing output file was changed", cmdline);
    if (access(P("new.npy"), F_OK) == 0) fail_msg("'%s': created an output file", cmdline);
    DIR *d = opendir(dir);
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
        const char *p = bad[i][0] == '/' ? dir : P(bad[i]);
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
    FAIL(1, "einsum", "ij->ji", P("mask_bad.npy"), "-o", dir);
    /* a successful run replaces an existing file whole */
    write_bytes("replace.npy", "old", 3);
    assert_int_equal(run_cli((const char *[]){"", "einsum", "ij->ji", P("mask_bad.npy"), "-o",
                                              P("replace.npy"), NULL}), 0);
    ta_tensor t = {0};
    TA_CHECK_OK(ta_npy_load(&t, P("replace.npy")));
    assert_int_equal(t.ndim, 2);
    ta_tensor_free(&t);
}

static void test_usage_errors(void **s)
{
    (void)s;
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--scale", "1e39");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--scale", "nan");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--scale", "");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--threads", "0");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--threads", "99999999999999999999");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--causal", "sideways");
    FAIL(2, "sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"), "-o", P("new.npy"),
         "--mask-mode", "keep");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corrupt_npy),
        cmocka_unit_test(test_bad_shapes_and_values),
        cmocka_unit_test(test_output_paths),
        cmocka_unit_test(test_usage_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
