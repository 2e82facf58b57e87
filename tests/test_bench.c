/* tensorattn bench: the command line and the JSON report (schema: bench/README.md).
 * Runs the real CLI on small cases (--quick --threads 1 --filter sgemm_256, then the
 * decode attention cases on both paths, then the seed's causal shape with opts.causal
 * and with its mask as a tensor; a few seconds each, much of it the FMA peak and
 * read-bandwidth measurements) and checks that the report is whole and
 * self-consistent, that the reference path's extra memory covers its [B, H, Lq, Lk]
 * scratch, that the fused path runs and matches the reference on the same inputs, that
 * decode cases count the bytes of the keys each sequence reads and set them against the
 * read bandwidth, and that the mask-tensor case does the causal case's work and is
 * timed against it. A CLI without `bench`, or a case whose status is not "ok" (a
 * TA_EUNSUPPORTED is an "error", exit 1), fails.
 * --torch-python runs against a fake python (a shell script): what the bench hands the
 * peer (its environment, the cases as JSON) and how it merges the rows, without torch. */
#define _POSIX_C_SOURCE 200809L

#include "ta_test.h"

#include "cli_run.h"
#include "io_files.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TUNABLES "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) fail_msg("JSON field \"%s\" is missing or not a number", key);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) fail_msg("JSON field \"%s\" is missing or not a string", key);
    return v->valuestring;
}

static int is_null(const cJSON *o, const char *key)
{
    return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, key));
}

static void assert_close(double got, double want, double rel)
{
    if (!(fabs(got - want) <= rel * fabs(want)))
        fail_msg("%.17g != %.17g (relative tolerance %g)", got, want, rel);
}

/* Runs `tensorattn bench ARGS... --json FILE` (expecting exit 0) and returns the report. */
#define BENCH_REPORT(...) bench_report((const char *[]){__VA_ARGS__, NULL})
static cJSON *bench_report(const char *const *args)
{
    const char *argv[16] = {NULL, "bench"}, *path = ta_test_path("report.json");
    int a = 2;
    while (*args && a < 13) argv[a++] = *args++;
    assert_null(*args);
    argv[a++] = "--json";
    argv[a++] = path;
    unlink(path);
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("tensorattn bench exited %d:\n%s%s", rc, ta_cli_out, ta_cli_err);
    size_t n = 0;
    char *text = (char *)ta_test_slurp(path, &n);
    assert_non_null(text);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    assert_non_null(root);
    return root;
}

static void test_json_report_is_whole_and_consistent(void **state)
{
    (void)state;
    cJSON *root = BENCH_REPORT("--quick", "--threads", "1", "--filter", "sgemm_256");

    assert_int_equal((int)num(root, "version"), 3);
    assert_string_equal(str(root, "tensorattn"), ta_version());
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "machine");
    assert_true(cJSON_IsObject(m));
    const char *isa = str(m, "isa");
    assert_int_equal((int)num(m, "threads"), 1);
    double peak = num(m, "fma_peak_gflops"), peak1 = num(m, "fma_peak_gflops_1thread");
    assert_true(peak > 0.0 && peak1 > 0.0);
    assert_true(num(m, "peak_spread") >= 0.0);
    /* One thread: the bench-thread peak is the 1-thread peak, and the per-ISA table
     * holds the active ISA's value. */
    assert_close(peak, peak1, 1e-12);
    const cJSON *peaks = cJSON_GetObjectItemCaseSensitive(m, "peaks");
    assert_true(cJSON_IsObject(peaks));
    assert_close(num(peaks, isa), peak, 1e-12);
    assert_true(num(peaks, "scalar") > 0.0);
    /* The read bandwidth: measured, and on one thread one measurement serves both. */
    double bw = num(m, "read_bandwidth_gbs"), bw1 = num(m, "read_bandwidth_gbs_1thread");
    assert_true(bw > 0.0 && bw1 > 0.0);
    assert_close(bw, bw1, 1e-12);
    assert_true(num(m, "read_bandwidth_spread") >= 0.0);
    /* The latency of a load that misses the caches: measured, and slower than an L1 hit
     * and than a second (a miss takes 50 - 200 ns; 1 ns is 4 cycles at 4 GHz). */
    const double lat = num(m, "read_latency_ns");
    assert_true(lat > 1.0 && lat < 1e9);
    /* The last-level cache: sysfs's size (at least an L1's 4 KiB, under 64 GiB), or null
     * where it gives none. */
    const cJSON *llc = cJSON_GetObjectItemCaseSensitive(m, "llc_bytes");
    assert_true(cJSON_IsNull(llc) || cJSON_IsNumber(llc));
    if (cJSON_IsNumber(llc)) assert_true(llc->valuedouble >= 4096.0 && llc->valuedouble < 68719476736.0);

    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    assert_true(cJSON_IsArray(cases));
    assert_int_equal(cJSON_GetArraySize(cases), 1); /* the filter kept only sgemm_256 */
    const cJSON *c = cJSON_GetArrayItem(cases, 0);
    assert_string_equal(str(c, "name"), "sgemm_256");
    assert_string_equal(str(c, "kind"), "sgemm");
    assert_string_equal(str(c, "path"), "gemm");
    assert_string_equal(str(c, "status"), "ok");
    assert_int_equal((int64_t)num(c, "M"), 256);
    assert_int_equal((int64_t)num(c, "N"), 256);
    assert_int_equal((int64_t)num(c, "K"), 256);
    assert_int_equal((int64_t)num(c, "batch"), 1);
    assert_int_equal((int)num(c, "threads"), 1);
    double flops = num(c, "flops"), median = num(c, "median_s"), min = num(c, "min_s");
    assert_close(flops, 2.0 * 256 * 256 * 256, 0.0);
    assert_true(median > 0.0 && min > 0.0 && min <= median);
    assert_true(num(c, "cold_s") > 0.0);
    assert_true(num(c, "runs") >= 2);
    double gflops = num(c, "gflops");
    assert_close(gflops, flops / median * 1e-9, 1e-9);
    assert_close(num(c, "peak_gflops"), peak, 1e-12);
    assert_close(num(c, "peak_fraction"), gflops / peak, 1e-9);
    double err = num(c, "max_rel_err");
    assert_true(err >= 0.0 && err <= num(c, "tolerance"));
    /* Not memory-bound, not a mask case: no bandwidth or causal-ratio fields. */
    assert_null(cJSON_GetObjectItemCaseSensitive(c, "bytes"));
    assert_null(cJSON_GetObjectItemCaseSensitive(c, "bandwidth_fraction"));
    assert_null(cJSON_GetObjectItemCaseSensitive(c, "fits_llc"));
    assert_null(cJSON_GetObjectItemCaseSensitive(c, "ratio_vs_causal"));
    cJSON_Delete(root);
}

static const cJSON *find_case(const cJSON *root, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases"))
        if (strcmp(str(c, "name"), name) == 0) return c;
    fail_msg("the report has no case %s", name);
    return NULL;
}

/* A memory-bound row: its bytes, and GB/s against the read bandwidth of the run. */
static void check_bandwidth(const cJSON *c, const cJSON *machine, double bytes)
{
    assert_close(num(c, "bytes"), bytes, 0.0);
    double gbs = num(c, "gbs"), bw = num(machine, "read_bandwidth_gbs");
    assert_close(gbs, bytes / num(c, "median_s") * 1e-9, 1e-9);
    assert_close(num(c, "read_bandwidth_gbs"), bw, 1e-12); /* one thread: the bench's */
    assert_close(num(c, "bandwidth_fraction"), gbs / bw, 1e-9);
    assert_true(gbs > 0.0);
    /* whether its bytes fit in the last-level cache: false when its size is unknown */
    const cJSON *fits = cJSON_GetObjectItemCaseSensitive(c, "fits_llc");
    const cJSON *llc = cJSON_GetObjectItemCaseSensitive(machine, "llc_bytes");
    assert_true(cJSON_IsBool(fits));
    assert_int_equal(cJSON_IsTrue(fits), cJSON_IsNumber(llc) && bytes <= llc->valuedouble);
    /* memory-bound: no fraction of the FMA peak in alternation (Method, 10) */
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, "peak_fraction_alternating")));
}

/* The fields every attention row carries, and its flop count from the shape. */
static void check_sdpa_shape(const cJSON *c, const char *path)
{
    assert_string_equal(str(c, "kind"), "sdpa");
    assert_string_equal(str(c, "path"), path);
    assert_string_equal(str(c, "mask"), "none");
    assert_null(cJSON_GetObjectItemCaseSensitive(c, "key_lengths"));
    assert_int_equal((int64_t)num(c, "B"), 1);
    assert_int_equal((int64_t)num(c, "H"), 32);
    assert_int_equal((int64_t)num(c, "Hkv"), 32);
    assert_int_equal((int64_t)num(c, "Lq"), 1);
    assert_int_equal((int64_t)num(c, "Lk"), 1024);
    assert_int_equal((int64_t)num(c, "D"), 128);
    /* One query row that sees every key (bottom-right): B*H*Lk pairs. */
    assert_string_equal(str(c, "causal"), "bottom_right");
    assert_close(num(c, "pairs"), 32.0 * 1024, 0.0);
    assert_close(num(c, "flops"), 4.0 * 32 * 1024 * 128, 0.0);
    assert_close(num(c, "tolerance"), 1e-4, 0.0);
}

/* The batched decode case with ragged key lengths (--quick: B 8, H 8, Lk 1024, lengths
 * 100 .. 1024 spread evenly): pairs, flops and bytes count only each sequence's keys,
 * and both paths pass the float64 check that respects the lengths. */
static void check_ragged_decode(const cJSON *root, const cJSON *m)
{
    const int64_t B = 8, H = 8, Lk = 1024, D = 128;
    double keys = 0.0;
    for (int64_t b = 0; b < B; b++) keys += (double)(100 + (Lk - 100) * b / (B - 1));
    const char *names[2] = {"sdpa_decode_ragged_reference", "sdpa_decode_ragged_fused"};
    for (int p = 0; p < 2; p++) {
        const cJSON *c = find_case(root, names[p]);
        assert_string_equal(str(c, "status"), "ok");
        assert_int_equal((int64_t)num(c, "B"), B);
        assert_int_equal((int64_t)num(c, "H"), H);
        assert_int_equal((int64_t)num(c, "Lq"), 1);
        assert_int_equal((int64_t)num(c, "Lk"), Lk);
        const cJSON *lens = cJSON_GetObjectItemCaseSensitive(c, "key_lengths");
        assert_int_equal(cJSON_GetArraySize(lens), (int)B);
        assert_int_equal((int64_t)cJSON_GetArrayItem(lens, 0)->valuedouble, 100);
        assert_int_equal((int64_t)cJSON_GetArrayItem(lens, (int)B - 1)->valuedouble, Lk);
        assert_close(num(c, "pairs"), (double)H * keys, 0.0);
        assert_close(num(c, "flops"), 4.0 * (double)H * keys * (double)D, 0.0);
        check_bandwidth(c, m, 4.0 * (double)D * (2.0 * (double)H * keys + 2.0 * (double)(B * H)));
        assert_true(num(c, "max_abs_err") <= 1e-4);
    }
    double diff = num(find_case(root, names[1]), "max_abs_diff_vs_reference");
    assert_true(diff >= 0.0 && diff <= 1e-4);
}

/* --filter with a comma-separated list: the cases that contain any part, in the bench's
 * order, and no other (sgemm_2 also matches sgemm_256 and sgemm_2048: --quick has no
 * 2048, so 256 alone; the empty part between two commas matches nothing). */
static void test_filter_list_selects_each_part(void **state)
{
    (void)state;
    cJSON *root = BENCH_REPORT("--quick", "--threads", "1", "--filter",
                               "einsum_qk_bhid,,sgemm_2");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    assert_true(cJSON_IsArray(cases));
    assert_int_equal(cJSON_GetArraySize(cases), 2);
    assert_string_equal(str(cJSON_GetArrayItem(cases, 0), "name"), "sgemm_256");
    assert_string_equal(str(cJSON_GetArrayItem(cases, 1), "name"), "einsum_qk_bhid");
    cJSON_Delete(root);
}

static void test_attention_cases_report_both_paths(void **state)
{
    (void)state;
    cJSON *root = BENCH_REPORT("--quick", "--threads", "1", "--filter", "sdpa_decode");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "machine");
    double peak = num(m, "fma_peak_gflops");
    /* sdpa_decode and sdpa_decode_ragged, each on both paths */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "cases")), 4);

    const cJSON *ref = find_case(root, "sdpa_decode_reference");
    check_sdpa_shape(ref, "reference");
    assert_string_equal(str(ref, "status"), "ok");
    double median = num(ref, "median_s");
    assert_true(median > 0.0 && num(ref, "cold_s") > 0.0);
    assert_close(num(ref, "gflops"), num(ref, "flops") / median * 1e-9, 1e-9);
    assert_close(num(ref, "peak_fraction"), num(ref, "gflops") / peak, 1e-9);
    double err = num(ref, "max_abs_err");
    assert_true(err >= 0.0 && err <= 1e-4);
    assert_close(num(ref, "speedup_vs_reference"), 1.0, 1e-12);
    assert_true(is_null(ref, "max_abs_diff_vs_reference"));
    /* The reference path's cold call takes its [B, H, Lq, Lk] score scratch (the bench
     * starts each case with no kept scratch): the counting allocator must see at least
     * that much, and not absurdly more. Warm calls reuse the block the library keeps
     * (scratch under 64 MiB): they allocate nothing. */
    double scratch = 32.0 * 1 * 1024 * sizeof(float);
    double extra = num(ref, "extra_bytes"), cold = num(ref, "extra_bytes_cold");
    if (!(cold >= scratch && cold < 64 * scratch && extra == 0.0))
        fail_msg("extra_bytes %.0f, extra_bytes_cold %.0f: expected 0 and >= the %.0f-byte "
                 "scratch", extra, cold, scratch);

    const cJSON *fused = find_case(root, "sdpa_decode_fused");
    check_sdpa_shape(fused, "fused");
    assert_string_equal(str(fused, "status"), "ok");
    /* Checked element by element against the reference run on the same inputs. */
    double diff = num(fused, "max_abs_diff_vs_reference");
    assert_true(diff >= 0.0 && diff <= 1e-4);
    assert_true(num(fused, "max_abs_err") <= 1e-4);
    assert_close(num(fused, "speedup_vs_reference"), median / num(fused, "median_s"), 1e-9);
    /* The fused path's cold call takes its (tile-sized) scratch, less than the
     * reference's score scratch; warm calls reuse the kept block: nothing. */
    double fextra = num(fused, "extra_bytes"), fcold = num(fused, "extra_bytes_cold");
    if (!(fextra == 0.0 && fcold > 0.0 && fcold < cold))
        fail_msg("fused: extra_bytes %.0f, extra_bytes_cold %.0f: expected 0 and in (0, %.0f), "
                 "the reference's cold scratch", fextra, fcold, cold);
    /* Decoding reads every key and value once: 32 heads x 1024 keys x 128 floats each,
     * plus one query row read and one output row written per head. */
    double bytes = 4.0 * 128 * (2.0 * 32 * 1024 + 2.0 * 32);
    check_bandwidth(ref, m, bytes);
    check_bandwidth(fused, m, bytes);
    check_ragged_decode(root, m); /* the filter kept it too: one bench run for both */
    cJSON_Delete(root);
}

/* The seed's causal mask as a tensor: the same pairs and flops as opts.causal, checked
 * like it, and timed against the opts.causal case of the same path. */
static void test_causal_mask_tensor_is_set_against_opts_causal(void **state)
{
    (void)state;
    cJSON *root = BENCH_REPORT("--quick", "--threads", "1", "--filter", "sdpa_seed_causal");
    /* and the bfloat16 pair, sdpa_seed_causal_bf16, checked below too */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "cases")), 6);
    const char *paths[2] = {"reference", "fused"};
    for (int p = 0; p < 2; p++) {
        char name[64];
        snprintf(name, sizeof name, "sdpa_seed_causal_bf16_%s", paths[p]);
        const cJSON *bf = find_case(root, name);
        snprintf(name, sizeof name, "sdpa_seed_causal_%s", paths[p]);
        const cJSON *causal = find_case(root, name);
        /* the seed's causal case with Q, K, V in bfloat16: the same pairs, checked against
         * float64 of the rounded values as tightly, timed against the float32 case */
        assert_string_equal(str(bf, "status"), "ok");
        assert_string_equal(str(bf, "qkv_dtype"), "bf16");
        assert_string_equal(str(causal, "qkv_dtype"), "f32");
        assert_close(num(bf, "pairs"), num(causal, "pairs"), 0.0);
        assert_true(num(bf, "max_abs_err") <= 1e-4);
        assert_close(num(bf, "ratio_vs_f32"), num(bf, "median_s") / num(causal, "median_s"), 1e-9);
        assert_true(num(bf, "ratio_vs_f32_alternating") > 0.0);
        snprintf(name, sizeof name, "sdpa_seed_causal_mask_%s", paths[p]);
        const cJSON *mask = find_case(root, name);
        assert_string_equal(str(causal, "status"), "ok");
        assert_string_equal(str(mask, "status"), "ok");
        assert_string_equal(str(causal, "causal"), "top_left");
        assert_string_equal(str(causal, "mask"), "none");
        assert_string_equal(str(mask, "causal"), "none"); /* the tensor does it */
        assert_string_equal(str(mask, "mask"), "triu");
        /* --quick: L = 128; row i sees i + 1 keys */
        assert_close(num(mask, "pairs"), 32.0 * 8 * (128.0 * 129 / 2), 0.0);
        assert_close(num(mask, "pairs"), num(causal, "pairs"), 0.0);
        assert_close(num(mask, "flops"), num(causal, "flops"), 0.0);
        assert_true(num(mask, "max_abs_err") <= 1e-4);
        assert_close(num(mask, "ratio_vs_causal"),
                     num(mask, "median_s") / num(causal, "median_s"), 1e-9);
        assert_true(num(mask, "ratio_vs_causal") > 0.0);
        assert_null(cJSON_GetObjectItemCaseSensitive(causal, "ratio_vs_causal"));
        /* the same ratio timed in alternating rounds (--quick: at least 3) */
        assert_true(num(mask, "ratio_vs_causal_alternating") > 0.0);
        assert_true(num(mask, "ratio_rounds") >= 3.0);
        assert_null(cJSON_GetObjectItemCaseSensitive(causal, "ratio_vs_causal_alternating"));
        /* the fraction of the peak from rounds of a short peak and a call (Method, 10):
         * fused cases only, of the order of peak_fraction */
        for (int k = 0; k < 2; k++) {
            const cJSON *c = k ? mask : causal;
            if (p == 0) {
                assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, "peak_fraction_alternating")));
                assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, "peak_rounds")));
                continue;
            }
            const double f = num(c, "peak_fraction_alternating");
            assert_true(f > 0.0 && f < 4.0 * num(c, "peak_fraction") + 0.5);
            assert_true(num(c, "peak_rounds") >= 3.0);
        }
    }
    double diff = num(find_case(root, "sdpa_seed_causal_mask_fused"), "max_abs_diff_vs_reference");
    assert_true(diff >= 0.0 && diff <= 1e-4);
    cJSON_Delete(root);
}

/* The seed's causal backward with Q, K, V and dO in bfloat16: the same pairs and flops
 * as the float32 case, checked against float64 of the rounded values as tightly, timed
 * against it per path (ratio_vs_f32, and in alternation). */
static void test_bf16_backward_is_set_against_float32(void **state)
{
    (void)state;
    cJSON *root = BENCH_REPORT("--quick", "--threads", "1", "--filter", "sdpa_bwd_seed_causal");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "cases")), 4);
    const char *paths[2] = {"reference", "fused"};
    for (int p = 0; p < 2; p++) {
        char name[64];
        snprintf(name, sizeof name, "sdpa_bwd_seed_causal_bf16_%s", paths[p]);
        const cJSON *bf = find_case(root, name);
        snprintf(name, sizeof name, "sdpa_bwd_seed_causal_%s", paths[p]);
        const cJSON *f32 = find_case(root, name);
        assert_string_equal(str(bf, "status"), "ok");
        assert_string_equal(str(f32, "status"), "ok");
        assert_string_equal(str(bf, "kind"), "sdpa_backward");
        assert_string_equal(str(bf, "qkv_dtype"), "bf16");
        assert_string_equal(str(f32, "qkv_dtype"), "f32");
        assert_close(num(bf, "pairs"), num(f32, "pairs"), 0.0);
        assert_close(num(bf, "flops"), num(f32, "flops"), 0.0);
        assert_true(num(bf, "max_abs_err") <= 1e-4);
        assert_close(num(bf, "ratio_vs_f32"), num(bf, "median_s") / num(f32, "median_s"), 1e-9);
        assert_true(num(bf, "ratio_vs_f32_alternating") > 0.0);
        assert_null(cJSON_GetObjectItemCaseSensitive(f32, "ratio_vs_f32"));
    }
    double diff = num(find_case(root, "sdpa_bwd_seed_causal_bf16_fused"), "max_abs_diff_vs_reference");
    assert_true(diff >= 0.0 && diff <= 1e-4);
    cJSON_Delete(root);
}

static void test_reference_too_big_is_skipped(void **state)
{
    (void)state;
    /* Full mode holds the long causal case: 2 heads of 32768^2 scores would be 8 GiB. */
    cJSON *root = BENCH_REPORT("--threads", "1", "--filter", "sdpa_long_causal_reference");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "cases")), 1);
    const cJSON *c = find_case(root, "sdpa_long_causal_reference");
    assert_string_equal(str(c, "status"), "skipped");
    assert_non_null(strstr(str(c, "error"), "4 GiB"));
    assert_true(is_null(c, "median_s") && is_null(c, "cold_s") && is_null(c, "extra_bytes"));
    cJSON_Delete(root);
}

static void test_bad_command_lines_exit_2_with_one_error_line(void **state)
{
    (void)state;
    const char *bad[][4] = {{"--no-such-flag"}, {"--threads", "0"}, {"--threads"},
                            {"--quick=yes"}, {"--filter", "no_case_has_this_name"},
                            {"--torch-python"}, {"--torch-python", "/nonexistent-ta-dir/python"},
                            {"--torch-python", "."}, {"--torch-python="},
                            /* each option once (until session 37 the last one won;
                             * --list: the old parser's exit 0 comes at once) */
                            {"--threads", "1", "--threads=2", "--list"},
                            {"--quick", "--quick", "--list"},
                            {"--filter", "sgemm_256", "--filter=sgemm_512", "--list"},
                            /* a newline in a value: escaped, one line (two until session 37) */
                            {"--filter", "no_such\ncase"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[7] = {NULL, "bench", bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL};
        /* The line is the bench's own (it points at `bench --help`), not the CLI's
         * "unknown command": a CLI without bench fails here. Nothing on stdout. */
        ta_cli_expect_error(argv, 2, "(see tensorattn bench --help)");
        if (ta_cli_out[0]) fail_msg("bench %s: stdout is not empty:\n%s", bad[i][0], ta_cli_out);
    }
}

/* A fake python for --torch-python: a shell script that saves its arguments (one a
 * line) and its GLIBC_TUNABLES beside it, then runs `body`. Returns its path. */
static const char *fake_python(const char *name, const char *body)
{
    char *path = ta_test_path(name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\nprintf '%%s\\n' \"$@\" > '%s'\nprintf '%%s' \"$GLIBC_TUNABLES\" > '%s'\n%s\n",
            ta_test_path("args.txt"), ta_test_path("env.txt"), body);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0755), 0);
    /* the script the fake is given: any readable file will do */
    assert_int_equal(setenv("TA_TORCH_SDPA_PEER", path, 1), 0);
    return path;
}

/* A file the fake wrote, as a string. */
static char *fake_output(const char *name)
{
    size_t n = 0;
    char *text = (char *)ta_test_slurp(ta_test_path(name), &n);
    if (!text) fail_msg("the fake python did not write %s", name);
    text[n] = '\0'; /* ta_test_slurp leaves room for it */
    return text;
}

/* The argument after `flag` in the fake's saved arguments (lines), or fail. */
static char *fake_arg_after(char *args, const char *flag)
{
    for (char *line = strtok(args, "\n"); line; line = strtok(NULL, "\n"))
        if (!strcmp(line, flag)) {
            char *next = strtok(NULL, "\n");
            if (next) return next;
        }
    fail_msg("the peer was not given %s", flag);
    return NULL;
}

static void test_torch_python_peer_gets_the_cases_and_is_merged(void **state)
{
    (void)state;
    /* Two rows: the decode shape at 2 s, and one the script refused. */
    const char *py = fake_python(
        "fake_python_ok",
        "echo '{\"name\": \"sdpa_decode\", \"kind\": \"sdpa\", \"status\": \"ok\", \"median_s\": 2.0}'\n"
        "echo '{\"name\": \"sdpa_other\", \"status\": \"skipped\", \"error\": \"unknown field\"}'");
    cJSON *root = BENCH_REPORT("--quick", "--threads", "1", "--filter", "sdpa_decode",
                               "--torch-python", py);
    /* The child's environment has the tunables, and its arguments name every case of the
     * shape once (the shape's name, the kind, the shape fields of the report). */
    char *env = fake_output("env.txt");
    assert_string_equal(env, TUNABLES);
    free(env);
    char *args = fake_output("args.txt");
    assert_non_null(strstr(args, "--jsonl\n"));
    assert_non_null(strstr(args, "--quick\n"));
    cJSON *given = cJSON_Parse(fake_arg_after(args, "--cases"));
    assert_true(cJSON_IsArray(given));
    /* the filter matches two shapes: sdpa_decode and sdpa_decode_ragged */
    assert_int_equal(cJSON_GetArraySize(given), 2);
    const cJSON *g = cJSON_GetArrayItem(given, 0), *fused = find_case(root, "sdpa_decode_fused");
    if (strcmp(str(g, "name"), "sdpa_decode")) g = cJSON_GetArrayItem(given, 1);
    assert_string_equal(str(g, "name"), "sdpa_decode");
    assert_string_equal(str(g, "kind"), "sdpa");
    assert_string_equal(str(g, "causal"), str(fused, "causal"));
    static const char *const dims[] = {"B", "H", "Hkv", "Lq", "Lk", "D", "pairs"};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        assert_close(num(g, dims[i]), num(fused, dims[i]), 0.0);
    cJSON_Delete(given);
    free(args);
    args = fake_output("args.txt");
    assert_string_equal(fake_arg_after(args, "--threads"), "1");
    free(args);

    const cJSON *torch = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "peers"), "torch");
    assert_string_equal(str(torch, "status"), "ok");
    assert_non_null(strstr(str(torch, "command"), "GLIBC_TUNABLES=" TUNABLES " '"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(torch, "cases")), 2);
    /* speedup_vs_torch: the peer's median over each path's */
    for (int p = 0; p < 2; p++) {
        const cJSON *c = find_case(root, p ? "sdpa_decode_fused" : "sdpa_decode_reference");
        assert_close(num(c, "speedup_vs_torch"), 2.0 / num(c, "median_s"), 1e-12);
    }
    assert_non_null(strstr(ta_cli_out, "sdpa_other"));
    cJSON_Delete(root);
    unsetenv("TA_TORCH_SDPA_PEER");
}

/* A python without torch >= 2.1: torch_sdpa.py says so in one line and exits 3. The
 * bench skips the peer with that line as the reason, and succeeds. */
static void test_torch_python_without_torch_skips_the_peer(void **state)
{
    (void)state;
    const char *why = "torch_sdpa.py: python has torch 1.13.0; the CPU flash kernel needs "
                      "torch >= 2.1";
    char body[256];
    snprintf(body, sizeof body, "echo '%s' >&2\nexit 3", why);
    const char *py = fake_python("fake_python_old", body);
    cJSON *root = BENCH_REPORT("--quick", "--threads", "1", "--filter", "sdpa_decode_fused",
                               "--torch-python", py);
    const cJSON *torch = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "peers"), "torch");
    assert_string_equal(str(torch, "status"), "skipped");
    assert_string_equal(str(torch, "reason"), why);
    assert_non_null(strstr(ta_cli_err, "the torch peer is skipped: torch_sdpa.py: "));
    assert_true(is_null(find_case(root, "sdpa_decode_fused"), "speedup_vs_torch"));
    cJSON_Delete(root);
    unsetenv("TA_TORCH_SDPA_PEER");
}

static void test_unwritable_json_path_fails_with_1(void **state)
{
    (void)state;
    int rc = ta_cli_run((const char *[]){NULL, "bench", "--quick", "--threads", "1", "--filter",
                                         "sgemm_256", "--json", "/nonexistent-ta-dir/report.json", NULL});
    if (rc != 1 || !strstr(ta_cli_err, "tensorattn: error: "))
        fail_msg("exit %d, stdout:\n%s\nstderr:\n%s", rc, ta_cli_out, ta_cli_err);
    /* a pipe (or a device: /dev/null itself, as root) would be replaced by the rename */
    const char *fifo = ta_test_path("report.fifo");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    ta_cli_expect_error((const char *[]){NULL, "bench", "--quick", "--filter", "sgemm_256",
                                         "--json", fifo, NULL},
                        2, "exists and is not a regular file");
    struct stat sb;
    assert_int_equal(stat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(remove(fifo), 0);
}

/* A report path whose name has NAME_MAX (255) bytes: written (its temporary is a short
 * name in the same directory), nothing else left there. */
static void test_json_path_of_the_longest_name(void **state)
{
    (void)state;
    char name[256];
    memset(name, 'r', 250);
    memcpy(name + 250, ".json", 6);
    char path[512]; /* not ta_test_path, whose buffers are shorter */
    snprintf(path, sizeof path, "%s/%s", ta_test_dir, name);
    assert_int_equal(strlen(strrchr(path, '/') + 1), 255);
    int rc = ta_cli_run((const char *[]){NULL, "bench", "--quick", "--threads", "1", "--filter",
                                         "sgemm_256", "--json", path, NULL});
    if (rc != 0) fail_msg("exit %d, stderr:\n%s", rc, ta_cli_err);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(remove(path), 0);
    DIR *d = opendir(ta_test_dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp")) fail_msg("temporary %s left behind", e->d_name);
    closedir(d);
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_test_bench");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_report_is_whole_and_consistent),
        cmocka_unit_test(test_filter_list_selects_each_part),
        cmocka_unit_test(test_attention_cases_report_both_paths),
        cmocka_unit_test(test_causal_mask_tensor_is_set_against_opts_causal),
        cmocka_unit_test(test_bf16_backward_is_set_against_float32),
        cmocka_unit_test(test_reference_too_big_is_skipped),
        cmocka_unit_test(test_bad_command_lines_exit_2_with_one_error_line),
        cmocka_unit_test(test_unwritable_json_path_fails_with_1),
        cmocka_unit_test(test_json_path_of_the_longest_name),
        cmocka_unit_test(test_torch_python_peer_gets_the_cases_and_is_merged),
        cmocka_unit_test(test_torch_python_without_torch_skips_the_peer),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
