/* The command line under mpirun: `mpirun -np P tensorattn sdpa ... --context-parallel
 * ring|zigzag|ulysses` with --lse and the backward flags gives the files the
 * single-process ta_sdpa / ta_sdpa_backward would (1e-5), for P = 2, 3, 4, causal and not,
 * GQA, an odd length, the variants (window, softcap, ALiBi, sinks and dsinks); and on an
 * error every rank exits with the same non-zero code (2 for usage, 1 for input or
 * computation) while exactly one "tensorattn: error: ..." line reaches stderr (mpirun
 * adds its own notice), and no output file is written. */
#include "ta_test.h"
#include "cli_run.h"

#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs `tensorattn args...` on np ranks (tests/mpi/run.sh adds Open MPI's flags); stdout
 * and stderr into ta_cli_out and ta_cli_err. Returns the exit status. */
static int run_mpi(int np, const char **args)
{
    char nps[8];
    snprintf(nps, sizeof nps, "%d", np);
    const char *argv[64] = {"sh", TA_MPI_RUN, TA_MPIEXEC, nps, TA_CLI_PATH};
    int a = 5;
    for (int i = 0; args[i] && a < 63; i++) argv[a++] = args[i];
    argv[a] = NULL;
    return ta_cli_run_program("sh", argv);
}

/* Lines of text that start with prefix. */
static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        n += strncmp(p, prefix, strlen(prefix)) == 0;
    return n;
}

static const char *path(const char *name)
{
    static char ring[1024][256]; /* long enough for every path a test holds */
    static int next;
    char *p = ring[next++ % 1024];
    snprintf(p, sizeof ring[0], "%s", ta_test_path(name));
    return p;
}

/* B 1, H 8, Hkv 4 (GQA), L 13 (odd: uneven shards), D 8 */
static const int64_t SQ[4] = {1, 8, 13, 8}, SK[4] = {1, 4, 13, 8};

static int setup(void **state)
{
    (void)state;
    if (ta_test_make_dir("cli_cp")) return -1;
    const char *names[4] = {"q.npy", "k.npy", "v.npy", "dout.npy"};
    for (int i = 0; i < 4; i++) {
        ta_tensor t;
        if (ta_tensor_empty(&t, 4, i == 1 || i == 2 ? SK : SQ) || ta_randn(&t, 40 + (uint64_t)i) ||
            ta_npy_save(path(names[i]), &t))
            return -1;
        ta_tensor_free(&t);
    }
    const int64_t sl[4] = {1, 4, 14, 8};
    ta_tensor t;
    if (ta_tensor_zeros(&t, 4, sl) || ta_npy_save(path("k_long.npy"), &t)) return -1;
    ta_tensor_free(&t);
    /* key lengths [B]: one that ends inside a shard, and one beyond L */
    const int64_t klen = 6, too_long = 14;
    ta_npy_write_raw(path("klen.npy"), "<i8", "(1,)", &klen, 8);
    ta_npy_write_raw(path("klen_long.npy"), "<i8", "(1,)", &too_long, 8);
    /* the variants' files: slopes and sinks [H], and slopes of the wrong shape */
    const float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03f, 0.02f, 0.01f, 0.005f};
    const float sinks[8] = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 3.0f, 1.5f, 0.7f};
    ta_npy_write_raw(path("slopes.npy"), "<f4", "(8,)", slopes, sizeof slopes);
    ta_npy_write_raw(path("sinks.npy"), "<f4", "(8,)", sinks, sizeof sinks);
    ta_npy_write_raw(path("slopes_bad.npy"), "<f4", "(7,)", slopes, 7 * sizeof(float));
    return 0;
}

/* max |file - ref| / max(1, |ref|) */
static double file_err(const char *file, const ta_tensor *ref)
{
    ta_tensor t;
    TA_CHECK_OK(ta_npy_load(&t, file));
    assert_int_equal(t.ndim, ref->ndim);
    for (int d = 0; d < t.ndim; d++) assert_int_equal(t.shape[d], ref->shape[d]);
    double e = 0.0;
    const float *a = t.data, *b = ref->data;
    for (int64_t i = 0; i < ta_tensor_numel(ref); i++) {
        if (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) continue; /* -inf LSEs alike */
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        e = isnan(d) ? INFINITY : fmax(e, d); /* a NaN stays the worst */
    }
    ta_tensor_free(&t);
    return e;
}

/* The single-process results: o, lse, dq, dk, dv, and with the variants (window 3,1,
 * softcap 2.5, the slopes and sinks of setup) dsinks. */
static void reference(ta_tensor ref[6], bool causal, float scale, const int64_t *klen, bool var)
{
    ta_tensor in[4];
    const char *names[4] = {"q.npy", "k.npy", "v.npy", "dout.npy"};
    for (int i = 0; i < 4; i++) TA_CHECK_OK(ta_npy_load(&in[i], path(names[i])));
    const int64_t sl[3] = {SQ[0], SQ[1], SQ[2]};
    TA_CHECK_OK(ta_tensor_empty(&ref[0], 4, SQ));
    TA_CHECK_OK(ta_tensor_empty(&ref[1], 3, sl));
    TA_CHECK_OK(ta_tensor_empty(&ref[2], 4, SQ));
    TA_CHECK_OK(ta_tensor_empty(&ref[3], 4, SK));
    TA_CHECK_OK(ta_tensor_empty(&ref[4], 4, SK));
    ta_sdpa_opts o = {.scale = scale, .causal = causal ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE,
                      .key_lengths = klen, .lse = &ref[1]};
    ta_tensor slopes = {0}, sinks = {0};
    if (var) {
        TA_CHECK_OK(ta_npy_load(&slopes, path("slopes.npy")));
        TA_CHECK_OK(ta_npy_load(&sinks, path("sinks.npy")));
        TA_CHECK_OK(ta_tensor_empty(&ref[5], 1, &SQ[1]));
        o = (ta_sdpa_opts){.scale = o.scale, .causal = o.causal, .key_lengths = klen,
                           .lse = &ref[1], .has_window = 1, .window_left = 3,
                           .window_right = 1, .softcap = 2.5f, .alibi_slopes = &slopes,
                           .sinks = &sinks};
    }
    TA_CHECK_OK(ta_sdpa(&ref[0], &in[0], &in[1], &in[2], &o));
    o.lse = NULL;
    o.dsinks = var ? &ref[5] : NULL;
    TA_CHECK_OK(ta_sdpa_backward(&ref[2], &ref[3], &ref[4], &in[3], &in[0], &in[1], &in[2],
                                 &ref[0], &ref[1], &o));
    for (int i = 0; i < 4; i++) ta_tensor_free(&in[i]);
    ta_tensor_free(&slopes);
    ta_tensor_free(&sinks);
}

static const char *const outs[6] = {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy",
                                     "dsinks.npy"};

static void remove_outputs(void)
{
    for (int i = 0; i < 6; i++) unlink(path(outs[i]));
}

/* klen: NULL, or the length in klen.npy (B = 1); var: the variants of reference() */
static void check_run(int np, const char *scheme, bool causal, const char *scale,
                      const int64_t *klen, bool var)
{
    remove_outputs();
    const char *args[40] = {"sdpa", "--context-parallel", scheme, "--q", path("q.npy"), "--k",
                            path("k.npy"), "--v", path("v.npy"), "-o", path(outs[0]), "--lse",
                            path(outs[1]), "--grad-out", path("dout.npy"), "--dq", path(outs[2]),
                            "--dk", path(outs[3]), "--dv", path(outs[4])};
    int a = 21;
    if (causal) args[a++] = "--causal";
    if (scale) {
        args[a++] = "--scale";
        args[a++] = scale;
    }
    if (klen) {
        args[a++] = "--key-lengths";
        args[a++] = path("klen.npy");
    }
    if (var) {
        const char *flags[10] = {"--window", "3,1", "--softcap", "2.5", "--alibi-slopes",
                                 path("slopes.npy"), "--sinks", path("sinks.npy"), "--dsinks",
                                 path(outs[5])};
        for (int i = 0; i < 10; i++) args[a++] = flags[i];
    }
    int rc = run_mpi(np, args);
    if (rc != 0) fail_msg("P = %d %s exited %d; stderr: %s", np, scheme, rc, ta_cli_err);
    ta_tensor ref[6];
    reference(ref, causal, scale ? strtof(scale, NULL) : 0.0f, klen, var);
    for (int i = 0; i < (var ? 6 : 5); i++) {
        double e = file_err(path(outs[i]), &ref[i]);
        if (!(e <= 1e-5))
            fail_msg("P = %d %s %s: %s differs from the single process by %.3g", np, scheme,
                     causal ? "causal" : "", outs[i], e);
        ta_tensor_free(&ref[i]);
    }
}

static void test_cli_matches_single_process(void **state)
{
    (void)state;
    const int64_t klen = 6;
    check_run(2, "ring", true, NULL, NULL, false);
    check_run(2, "zigzag", true, "0.4", NULL, false);
    check_run(2, "ulysses", false, NULL, NULL, false);
    check_run(3, "zigzag", false, NULL, NULL, false);
    check_run(4, "ulysses", true, NULL, NULL, false);
    check_run(3, "ring", false, NULL, &klen, false);
    check_run(2, "zigzag", true, NULL, &klen, false);
    check_run(2, "ulysses", true, NULL, &klen, false);
    /* the variants */
    check_run(3, "ring", false, NULL, NULL, true);
    check_run(2, "zigzag", true, "0.4", &klen, true);
    check_run(4, "ulysses", false, NULL, NULL, true);
}

/* Exit code `code` from every rank (mpirun passes a failing rank's on), one error line
 * with the needle, no output file. */
static void expect_error(int np, const char **args, int code, const char *needle)
{
    remove_outputs();
    int rc = run_mpi(np, args);
    if (rc != code) fail_msg("exited %d, expected %d; stderr: %s", rc, code, ta_cli_err);
    if (count_lines(ta_cli_err, "tensorattn: error: ") != 1)
        fail_msg("expected exactly one error line, got: %s", ta_cli_err);
    if (!strstr(ta_cli_err, needle)) fail_msg("stderr lacks '%s': %s", needle, ta_cli_err);
    assert_int_equal(access(path(outs[0]), F_OK), -1);
}

static void test_cli_errors_agree(void **state)
{
    (void)state;
    const char *q = path("q.npy"), *k = path("k.npy"), *v = path("v.npy"), *o = path(outs[0]);
    /* H = 8 and Hkv = 4 do not split over 3 ranks */
    const char *uly[] = {"sdpa", "--context-parallel", "ulysses", "--q", q, "--k", k, "--v", v,
                         "-o", o, NULL};
    expect_error(3, uly, 1, "ulysses): H = 8 and Hkv = 4 must both be divisible");
    const char *mask[] = {"sdpa", "--context-parallel", "ring", "--q", q, "--k", k, "--v", v,
                          "-o", o, "--mask", q, NULL};
    expect_error(2, mask, 2, "--mask does not combine with --context-parallel");
    const char *bad[] = {"sdpa", "--context-parallel", "spiral", "--q", q, "--k", k, "--v", v,
                         "-o", o, NULL};
    expect_error(2, bad, 2, "ring, zigzag or ulysses");
    const char *missing[] = {"sdpa", "--context-parallel", "zigzag", "--q", path("none.npy"),
                             "--k", k, "--v", v, "-o", o, NULL};
    expect_error(2, missing, 1, "reading --q");
    /* K longer than Q: not self-attention */
    const char *cross[] = {"sdpa", "--context-parallel", "ring", "--q", q, "--k",
                           path("k_long.npy"), "--v", v, "-o", o, NULL};
    expect_error(2, cross, 1, "self-attention");
    const char *klen[] = {"sdpa", "--context-parallel", "zigzag", "--q", q, "--k", k, "--v", v,
                          "-o", o, "--key-lengths", path("klen_long.npy"), NULL};
    expect_error(2, klen, 1, "opts->key_lengths[0] = 14 is outside [0, L = 13]");
    /* the variants: a bad --window (usage), --dsinks without --sinks (usage), slopes of
     * the wrong shape (the library's message, once) */
    const char *win[] = {"sdpa", "--context-parallel", "ring", "--q", q, "--k", k, "--v", v,
                         "-o", o, "--window", "3", NULL};
    expect_error(2, win, 2, "--window expects LEFT,RIGHT");
    const char *ds[] = {"sdpa", "--context-parallel", "ring", "--q", q, "--k", k, "--v", v,
                        "-o", o, "--dsinks", path(outs[5]), NULL};
    expect_error(2, ds, 2, "--dsinks needs the backward pass");
    const char *sl[] = {"sdpa", "--context-parallel", "zigzag", "--q", q, "--k", k, "--v", v,
                        "-o", o, "--alibi-slopes", path("slopes_bad.npy"), NULL};
    expect_error(3, sl, 1, "opts->alibi_slopes has shape [7]");
    /* outputs all or none: -o is not written when --lse cannot be; an output naming an
     * input, or two outputs one file, is a usage error */
    const char *lse_missing[] = {"sdpa", "--context-parallel", "ring", "--q", q, "--k", k, "--v",
                                 v, "-o", o, "--lse", path("no/such/dir/lse.npy"), NULL};
    expect_error(2, lse_missing, 1, "writing --lse");
    const char *over_q[] = {"sdpa", "--context-parallel", "ring", "--q", q, "--k", k, "--v", v,
                            "-o", q, NULL};
    expect_error(2, over_q, 2, "is the input file of --q");
    const char *twice[] = {"sdpa", "--context-parallel", "zigzag", "--q", q, "--k", k, "--v", v,
                           "-o", o, "--lse", o, NULL};
    expect_error(2, twice, 2, "-o and --lse name the same file");
    const char *help[] = {"sdpa", "--context-parallel", "ring", "--help", NULL};
    assert_int_equal(run_mpi(2, help), 0);
    assert_int_equal(count_lines(ta_cli_out, "usage: mpirun -np P tensorattn sdpa"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_matches_single_process),
        cmocka_unit_test(test_cli_errors_agree),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
