/* `tensorattn kvcache` end to end: the KV-cache fixture cases (kvcache.tafx) written to
 * .npy files (lengths and block tables as '<i4' and '<i8'), run through build/tensorattn,
 * O, LSE and the updated caches compared with the PyTorch references, the input files
 * unchanged byte for byte; hostile inputs (bad lengths, a block index out of range, a
 * sequence longer than its cache, integers that do not fit int32) exit 1 with one error
 * line and write no output file; usage errors exit 2; --help. The variants' flags
 * (--window, --softcap, --alibi-slopes [B, H], --sinks) on a paged case against the
 * library's reference path on the same inputs, and their errors. */
#include "ta_test.h"
#include "cli_run.h"
#include "fixture_cases.h"
#include "io_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes an integer record (i32, 1 or 2 dims) as '<i4' (wide 0) or '<i8' (wide 1). */
static void save_int(const char *path, const ta_fixture_record *r, int wide)
{
    assert_int_equal(r->dtype, TA_FIXTURE_I32);
    char shape[64];
    if (r->ndim == 1) snprintf(shape, sizeof shape, "(%lld,)", (long long)r->shape[0]);
    else snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)r->shape[0], (long long)r->shape[1]);
    const int32_t *v = r->data;
    int64_t *w = malloc(sizeof(int64_t) * (size_t)(r->numel + 1));
    assert_non_null(w);
    for (int64_t i = 0; i < r->numel; i++) w[i] = v[i];
    if (wide) ta_npy_write_raw(path, "<i8", shape, w, (size_t)r->numel * 8);
    else ta_npy_write_raw(path, "<i4", shape, v, (size_t)r->numel * 4);
    free(w);
}

/* The case's inputs as files and their flags in argv from position a; returns the next
 * position. scale keeps the string argv points at. */
static int case_inputs(const char **argv, int a, const ta_fixture_file *f, const char *c,
                       int wide, char *scale)
{
    static const char *roles[] = {"q", "k_cache", "v_cache", "k_new", "v_new"};
    static const char *flags[] = {"--q", "--k-cache", "--v-cache", "--k-new", "--v-new"};
    for (int r = 0; r < 5; r++) {
        const ta_fixture_record *rec = ta_fixture_case_record(f, c, roles[r]);
        if (!rec) continue;
        char file[32];
        snprintf(file, sizeof file, "%s.npy", roles[r]);
        ta_cli_save_record(ta_test_path(file), rec);
        argv[a++] = flags[r];
        argv[a++] = ta_test_path(file);
    }
    save_int(ta_test_path("cs.npy"), ta_fixture_need(f, c, "cache_seqlens"), wide);
    argv[a++] = "--cache-seqlens";
    argv[a++] = ta_test_path("cs.npy");
    const ta_fixture_record *bt = ta_fixture_case_record(f, c, "block_table");
    if (bt) {
        save_int(ta_test_path("bt.npy"), bt, !wide);
        argv[a++] = "--block-table";
        argv[a++] = ta_test_path("bt.npy");
    }
    const char *meta = ta_fixture_case_meta(f, c);
    char causal[32];
    ta_fixture_meta_get(meta, "causal", causal, sizeof causal);
    if (!strcmp(causal, "bottom_right")) argv[a++] = "--causal";
    ta_fixture_meta_get(meta, "scale", scale, 64);
    if (strtod(scale, NULL) != 0.0) {
        argv[a++] = "--scale";
        argv[a++] = scale;
    }
    return a;
}

static const char *out_files[] = {"o.npy", "lse.npy", "kc2.npy", "vc2.npy"};

static int add_outputs(const char **argv, int a)
{
    static const char *flags[] = {"-o", "--lse", "--k-cache-out", "--v-cache-out"};
    for (int i = 0; i < 4; i++) {
        argv[a++] = flags[i];
        argv[a++] = ta_test_path(out_files[i]);
    }
    return a;
}

static void remove_outputs(void)
{
    for (int i = 0; i < 4; i++) unlink(ta_test_path(out_files[i]));
}

static void cli_kv_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    int *ran = ctx;
    char causal[32], scale[64];
    ta_fixture_meta_get(ta_fixture_case_meta(f, c), "causal", causal, sizeof causal);
    if (!strcmp(causal, "top_left")) return; /* --causal is bottom right */
    const char *argv[40] = {"", "kvcache"};
    int a = case_inputs(argv, 2, f, c, *ran % 2, scale);
    add_outputs(argv, a);
    size_t n0, n1;
    unsigned char *before = ta_test_slurp(ta_test_path("k_cache.npy"), &n0);
    remove_outputs();
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("case %s: exit %d: %s", c, rc, ta_cli_err);
    double d = ta_cli_compare_npy(ta_test_path("o.npy"), ta_fixture_need(f, c, "out"));
    if (d > 1e-5) fail_msg("case %s: O differs by %g", c, d);
    ta_tensor l;
    TA_CHECK_OK(ta_npy_load(&l, ta_test_path("lse.npy")));
    ta_fixture_expect_close(c, "lse", &l, ta_fixture_need(f, c, "lse"), 1.0, 1e-5);
    ta_tensor_free(&l);
    if (ta_cli_compare_npy(ta_test_path("kc2.npy"), ta_fixture_need(f, c, "k_cache_out")) != 0 ||
        ta_cli_compare_npy(ta_test_path("vc2.npy"), ta_fixture_need(f, c, "v_cache_out")) != 0)
        fail_msg("case %s: the updated caches differ from the reference", c);
    unsigned char *after = ta_test_slurp(ta_test_path("k_cache.npy"), &n1);
    if (!before || !after || n0 != n1 || memcmp(before, after, n0))
        fail_msg("case %s: the input cache file changed", c);
    free(before);
    free(after);
    (*ran)++;
}

/* The .npy float32 file at path rounded to dt in place (ties to even: ta_tensor_copy,
 * checked against torch's rounding by test_dtype). */
static void round_file(const char *path, ta_dtype dt)
{
    ta_tensor t, h;
    TA_CHECK_OK(ta_npy_load(&t, path));
    TA_CHECK_OK(ta_tensor_empty_dtype(&h, dt, t.ndim, t.shape));
    TA_CHECK_OK(ta_tensor_copy(&h, &t));
    TA_CHECK_OK(ta_tensor_copy(&t, &h));
    TA_CHECK_OK(ta_npy_save(path, &t));
    ta_tensor_free(&h);
    ta_tensor_free(&t);
}

/* The outputs of the last run (o, lse, kc2, vc2), loaded. */
static void load_outputs(ta_tensor out[4])
{
    for (int i = 0; i < 4; i++) TA_CHECK_OK(ta_npy_load(&out[i], ta_test_path(out_files[i])));
}

/* --kv-dtype f16 | bf16 on a fixture case: the same caches out, bit for bit, and the same
 * O and LSE (within 1e-5: a half cache runs its own kernels) as the float32 command on
 * inputs rounded to that dtype beforehand (the caches and the new keys and values) -
 * and caches out that differ from the float32 run's reference: the flag rounded. */
static void cli_kv_dtype_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    int *ran = ctx;
    char causal[32], scale[64];
    ta_fixture_meta_get(ta_fixture_case_meta(f, c), "causal", causal, sizeof causal);
    if (!strcmp(causal, "top_left")) return;
    static const char *const names[] = {"f16", "bf16"};
    static const ta_dtype dts[] = {TA_F16, TA_BF16};
    for (int d = 0; d < 2; d++) {
        const char *argv[44] = {"", "kvcache"};
        int a = add_outputs(argv, case_inputs(argv, 2, f, c, *ran % 2, scale));
        /* argv's paths point into ta_test_path's ring, which the calls below reuse */
        static char pinned[44][256];
        for (int i = 2; i < a; i++) argv[i] = strcpy(pinned[i], argv[i]);
        argv[a] = "--kv-dtype";
        argv[a + 1] = names[d];
        remove_outputs();
        int rc = ta_cli_run(argv);
        if (rc != 0) fail_msg("case %s, --kv-dtype %s: exit %d: %s", c, names[d], rc, ta_cli_err);
        ta_tensor flag[4], pre[4];
        load_outputs(flag);
        static const char *const rounded[] = {"k_cache.npy", "v_cache.npy", "k_new.npy", "v_new.npy"};
        for (int i = 0; i < 4; i++)
            if (ta_fixture_case_record(f, c, i < 2 ? (i ? "v_cache" : "k_cache")
                                                   : (i == 2 ? "k_new" : "v_new")))
                round_file(ta_test_path(rounded[i]), dts[d]);
        argv[a] = NULL; /* the same command without the flag, on the rounded files */
        remove_outputs();
        rc = ta_cli_run(argv);
        if (rc != 0) fail_msg("case %s, rounded inputs: exit %d: %s", c, rc, ta_cli_err);
        load_outputs(pre);
        for (int i = 2; i < 4; i++)
            if (ta_tensor_numel(&flag[i]) != ta_tensor_numel(&pre[i]) ||
                memcmp(flag[i].data, pre[i].data, sizeof(float) * (size_t)ta_tensor_numel(&pre[i])))
                fail_msg("case %s, --kv-dtype %s: %s differs from the rounded inputs' run", c,
                         names[d], out_files[i]);
        for (int i = 0; i < 2; i++) {
            const float *x = flag[i].data, *y = pre[i].data;
            for (int64_t e = 0; e < ta_tensor_numel(&pre[i]); e++)
                if (!(fabsf(x[e] - y[e]) <= 1e-5f * (1.0f + fabsf(y[e]))) && !(isnan(x[e]) && isnan(y[e])) &&
                    x[e] != y[e])
                    fail_msg("case %s, --kv-dtype %s: %s[%lld] = %g, %g with rounded inputs", c,
                             names[d], out_files[i], (long long)e, (double)x[e], (double)y[e]);
        }
        if (ta_cli_compare_npy(ta_test_path("kc2.npy"), ta_fixture_need(f, c, "k_cache_out")) == 0)
            fail_msg("case %s, --kv-dtype %s: the cache out is the float32 run's: nothing rounded",
                     c, names[d]);
        for (int i = 0; i < 4; i++) {
            ta_tensor_free(&flag[i]);
            ta_tensor_free(&pre[i]);
        }
    }
    (*ran)++;
}

static void test_kv_dtype(void **state)
{
    (void)state;
    int ran = 0;
    ta_fixture_cases_run("kvcache.tafx", NULL, NULL, cli_kv_dtype_case, &ran);
    if (ran < 12) fail_msg("only %d kvcache cases ran with --kv-dtype", ran);
    const char *q = ta_test_path("q.npy"), *kc = ta_test_path("k_cache.npy");
    const char *vc = ta_test_path("v_cache.npy"), *cs = ta_test_path("cs.npy");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--q", q, "--k-cache", kc, "--v-cache", vc,
                                         "--cache-seqlens", cs, "-o", ta_test_path("o.npy"),
                                         "--kv-dtype", "f64", NULL},
                        2, "--kv-dtype expects f32, f16 or bf16, got 'f64'");
}

static void test_kvcache_fixtures(void **state)
{
    (void)state;
    int ran = 0;
    ta_fixture_cases_run("kvcache.tafx", NULL, NULL, cli_kv_case, &ran);
    if (ran < 12) fail_msg("only %d kvcache cases ran through the CLI", ran);
}

/* Runs case kv004 (paged decode) with the seqlens and block table given (NULL: the
 * case's) and expects exit code `code` with needle; no output file may exist, and the
 * cache input file is unchanged. */
static void expect_bad(const int32_t *seqlens, int nseq, const int32_t *table, int code,
                       const char *needle)
{
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "kvcache.tafx"));
    const char *argv[40] = {"", "kvcache"};
    char scale[64];
    int a = case_inputs(argv, 2, f, "kv004", 0, scale);
    const ta_fixture_record *bt = ta_fixture_need(f, "kv004", "block_table");
    char shape[32];
    if (seqlens) {
        snprintf(shape, sizeof shape, "(%d,)", nseq);
        ta_npy_write_raw(ta_test_path("cs.npy"), "<i4", shape, seqlens, (size_t)nseq * 4);
    }
    if (table) {
        snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)bt->shape[0], (long long)bt->shape[1]);
        ta_npy_write_raw(ta_test_path("bt.npy"), "<i4", shape, table, (size_t)bt->numel * 4);
    }
    add_outputs(argv, a);
    size_t n0, n1;
    unsigned char *before = ta_test_slurp(ta_test_path("k_cache.npy"), &n0);
    remove_outputs();
    ta_cli_expect_error(argv, code, needle);
    for (int i = 0; i < 4; i++)
        if (ta_test_file_exists(ta_test_path(out_files[i])))
            fail_msg("a failed run (%s) left %s behind", needle, out_files[i]);
    unsigned char *after = ta_test_slurp(ta_test_path("k_cache.npy"), &n1);
    assert_true(before && after && n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
    ta_fixture_close(f);
}

static void test_hostile_inputs(void **state)
{
    (void)state;
    /* kv004: B = 3, blocks of 4, max_blocks 5, 12 blocks, seqlens {0, 10, 19}, Lnew 1 */
    const int32_t neg[3] = {0, -1, 19}, over[3] = {0, 10, 20}, big[2] = {0, 10};
    expect_bad(neg, 3, NULL, 1, "is negative");
    expect_bad(over, 3, NULL, 1, "more than its cache holds");
    expect_bad(big, 2, NULL, 1, "--cache-seqlens must have shape [B]");
    int32_t table[15];
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "kvcache.tafx"));
    memcpy(table, ta_fixture_need(f, "kv004", "block_table")->data, sizeof table);
    ta_fixture_close(f);
    table[5 + 2] = 12; /* sequence 1 uses 3 blocks: its third is out of range */
    expect_bad(NULL, 0, table, 1, "outside [0, 12)");
    table[5 + 2] = -1;
    expect_bad(NULL, 0, table, 1, "outside [0, 12)");
    /* an int64 length that does not fit int32, a float file */
    const int64_t huge[3] = {0, (int64_t)1 << 40, 0};
    ta_npy_write_raw(ta_test_path("cs64.npy"), "<i8", "(3,)", huge, sizeof huge);
    const float fl[3] = {0, 1, 2};
    ta_npy_write_raw(ta_test_path("csf.npy"), "<f4", "(3,)", fl, sizeof fl);
    const char *files[2] = {"cs64.npy", "csf.npy"}, *needles[2] = {"does not fit int32", "reading --cache-seqlens"};
    for (int i = 0; i < 2; i++) {
        TA_CHECK_OK(ta_fixture_open(&f, "kvcache.tafx"));
        const char *argv[40] = {"", "kvcache"};
        char scale[64];
        int a = case_inputs(argv, 2, f, "kv004", 0, scale);
        for (int k = 2; k < a; k++)
            if (!strcmp(argv[k], "--cache-seqlens")) argv[k + 1] = ta_test_path(files[i]);
        add_outputs(argv, a);
        remove_outputs();
        ta_cli_expect_error(argv, 1, needles[i]);
        assert_false(ta_test_file_exists(ta_test_path("o.npy")));
        ta_fixture_close(f);
    }
}

/* The kv004 inputs with the variants' flags appended (slopes of shape [nb, H]); returns
 * the next position of argv. */
static int variant_inputs(const char **argv, const ta_fixture_file *f, char *scale,
                          const char *window, const char *softcap, int64_t nb)
{
    int a = case_inputs(argv, 2, f, "kv004", 0, scale);
    const ta_fixture_record *qr = ta_fixture_need(f, "kv004", "q");
    const int64_t H = qr->shape[2];
    float slopes[64], sinks[16];
    assert_true(nb * H <= 64 && H <= 16);
    for (int64_t e = 0; e < nb * H; e++) slopes[e] = 0.1f * (float)(e % 4 + 1);
    for (int64_t h = 0; h < H; h++) sinks[h] = 0.5f * (float)h - 0.25f;
    char shape[32];
    snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)nb, (long long)H);
    ta_npy_write_raw(ta_test_path("slopes.npy"), "<f4", shape, slopes, sizeof(float) * (size_t)(nb * H));
    snprintf(shape, sizeof shape, "(%lld,)", (long long)H);
    ta_npy_write_raw(ta_test_path("sinks.npy"), "<f4", shape, sinks, sizeof(float) * (size_t)H);
    const char *extra[8] = {"--window", window, "--softcap", softcap, "--alibi-slopes",
                            ta_test_path("slopes.npy"), "--sinks", ta_test_path("sinks.npy")};
    for (int i = 0; i < 8; i++) argv[a++] = extra[i];
    return add_outputs(argv, a);
}

static void test_variants(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "kvcache.tafx"));
    const char *argv[48] = {"", "kvcache"};
    char scale[64];
    const int64_t B = ta_fixture_need(f, "kv004", "q")->shape[0];
    variant_inputs(argv, f, scale, "3,0", "2.5", B);
    remove_outputs();
    int rc = ta_cli_run(argv);
    if (rc != 0) fail_msg("exit %d: %s", rc, ta_cli_err);
    /* the library's reference path on the same inputs */
    ta_tensor q, kc, vc, kn, vn, o, lse, slopes, sinks, got_o, got_l;
    const char *roles[5] = {"q", "k_cache", "v_cache", "k_new", "v_new"};
    ta_tensor *ts[5] = {&q, &kc, &vc, &kn, &vn};
    for (int r = 0; r < 5; r++) TA_CHECK_OK(ta_fixture_tensor(ts[r], ta_fixture_need(f, "kv004", roles[r])));
    TA_CHECK_OK(ta_npy_load(&slopes, ta_test_path("slopes.npy")));
    TA_CHECK_OK(ta_npy_load(&sinks, ta_test_path("sinks.npy")));
    const ta_fixture_record *cs = ta_fixture_need(f, "kv004", "cache_seqlens");
    const ta_fixture_record *bt = ta_fixture_need(f, "kv004", "block_table");
    ta_kv_cache cache = {.k = &kc, .v = &vc, .seqlens = cs->data, .block_table = bt->data,
                         .max_blocks = bt->shape[1]};
    const int64_t os[4] = {q.shape[0], q.shape[1], q.shape[2], vc.shape[3]};
    const int64_t ls[3] = {q.shape[0], q.shape[2], q.shape[1]};
    TA_CHECK_OK(ta_tensor_empty(&o, 4, os));
    TA_CHECK_OK(ta_tensor_empty(&lse, 3, ls));
    char causal[32];
    ta_fixture_meta_get(ta_fixture_case_meta(f, "kv004"), "causal", causal, sizeof causal);
    ta_sdpa_opts so = {.causal = strcmp(causal, "bottom_right") ? TA_CAUSAL_NONE
                                                                 : TA_CAUSAL_BOTTOM_RIGHT,
                       .scale = (float)strtod(scale, NULL), .has_window = 1,
                       .window_left = 3, .window_right = 0, .softcap = 2.5f,
                       .alibi_slopes = &slopes, .sinks = &sinks, .lse = &lse,
                       .path = TA_SDPA_REFERENCE};
    TA_CHECK_OK(ta_sdpa_kvcache(&o, &q, &cache, &kn, &vn, &so));
    TA_CHECK_OK(ta_npy_load(&got_o, ta_test_path("o.npy")));
    TA_CHECK_OK(ta_npy_load(&got_l, ta_test_path("lse.npy")));
    const ta_tensor *pairs[2][2] = {{&got_o, &o}, {&got_l, &lse}};
    for (int p = 0; p < 2; p++) {
        assert_int_equal(ta_tensor_numel(pairs[p][0]), ta_tensor_numel(pairs[p][1]));
        for (int64_t e = 0; e < ta_tensor_numel(pairs[p][1]); e++) {
            const float g = ((float *)pairs[p][0]->data)[e], w = ((float *)pairs[p][1]->data)[e];
            if (!(fabsf(g - w) <= 1e-5f))
                fail_msg("%s[%lld]: the command %g, the library %g", p ? "LSE" : "O",
                         (long long)e, (double)g, (double)w);
        }
    }
    ta_tensor *all[] = {&q, &kc, &vc, &kn, &vn, &o, &lse, &slopes, &sinks, &got_o, &got_l};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    /* errors: bad window syntax, softcap 0 (usage, 2); slopes of another batch (1, no
     * output file) */
    const char *bad[2][2] = {{"3", "2.5"}, {"3,0", "0"}};
    const char *needles[2] = {"--window expects LEFT,RIGHT", "--softcap must be > 0"};
    for (int i = 0; i < 2; i++) {
        const char *bv[48] = {"", "kvcache"};
        variant_inputs(bv, f, scale, bad[i][0], bad[i][1], B);
        ta_cli_expect_error(bv, 2, needles[i]);
    }
    const char *bv[48] = {"", "kvcache"};
    variant_inputs(bv, f, scale, "3,0", "2.5", B + 1);
    remove_outputs();
    ta_cli_expect_error(bv, 1, "opts->alibi_slopes has shape");
    for (int i = 0; i < 4; i++) assert_false(ta_test_file_exists(ta_test_path(out_files[i])));
    ta_fixture_close(f);
}

static void test_usage(void **state)
{
    (void)state;
    const char *q = ta_test_path("q.npy"), *kc = ta_test_path("k_cache.npy");
    const char *vc = ta_test_path("v_cache.npy"), *cs = ta_test_path("cs.npy");
    const char *o = ta_test_path("o.npy");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--q", q, NULL}, 2, "kvcache needs --q");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--q", q, "--k-cache", kc, "--v-cache", vc,
                                         "--cache-seqlens", cs, "-o", o, "--k-new", q, NULL},
                        2, "--k-new and --v-new go together");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--q", q, "--k-cache", kc, "--v-cache", vc,
                                         "--cache-seqlens", cs, "-o", o, "--v-cache-out", o, NULL},
                        2, "--k-cache-out and --v-cache-out go together");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--q", q, "--k-cache", kc, "--v-cache", vc,
                                         "--cache-seqlens", cs, "-o", o, "--causal=top_left", NULL},
                        2, "takes no value");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--q", q, "--k-cache", kc, "--v-cache", vc,
                                         "--cache-seqlens", cs, "-o", o, "--scale", "0", NULL},
                        2, "--scale must be nonzero");
    ta_cli_expect_error((const char *[]){"", "kvcache", "--bogus", NULL}, 2, "unknown option '--bogus'");
    assert_int_equal(ta_cli_run((const char *[]){"", "kvcache", "--help", NULL}), 0);
    assert_non_null(strstr(ta_cli_out, "usage: tensorattn kvcache"));
    assert_int_equal(ta_cli_run((const char *[]){"", "--help", NULL}), 0);
    assert_non_null(strstr(ta_cli_out, "kvcache"));
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_cli_kvcache");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvcache_fixtures),
        cmocka_unit_test(test_hostile_inputs),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_kv_dtype),
    };
    return cmocka_run_group_tests_name("cli_kvcache", tests, setup, ta_test_teardown_dir);
}
