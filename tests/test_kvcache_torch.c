/* ta-test: all-isas
 * ta_sdpa_kvcache against PyTorch: tests/fixtures/kvcache.tafx (tools/fixtures_kvcache.py)
 * holds FlashAttention's flash_attn_with_kvcache definition run in float64 torch on
 * contiguous and paged caches (blocks out of order, unused table entries -1, cache rows
 * without keys NaN), decode and chunked prefill, lengths 0 and caches filled to capacity,
 * with and without new keys, GQA, Dv != D, causal both ways and not, long caches that the
 * fused path splits. Every case runs on the reference and the fused path, with the
 * library's scratch and with a caller workspace, on contiguous tensors and on two other
 * memory layouts (a cache block's rows of one head together, and the head dim strided so
 * the fused path copies its K and V tiles); O and LSE must be within 1e-5 of the float64
 * reference and the caches after the append exactly the reference's. */
#include "ta_test.h"

#include "fixture_cases.h"
#include "kv_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

typedef struct tally {
    int checked, paged, split, empty_rows, full, no_new, prefill;
} tally;

static void count(tally *t, const char *meta)
{
    char tags[256], buf[32];
    ta_fixture_meta_get(meta, "tags", tags, sizeof tags);
    ta_fixture_meta_get(meta, "empty_rows", buf, sizeof buf);
    t->checked++;
    t->paged += strstr(tags, "paged") != NULL;
    t->split += strstr(tags, "split") != NULL;
    t->full += strstr(tags, "full") != NULL;
    t->no_new += strstr(tags, "no_new") != NULL;
    t->prefill += strstr(tags, "prefill") != NULL;
    t->empty_rows += atoi(buf) > 0;
}

static void run_variant(const ta_fixture_file *f, const char *c, ta_test_layout layout,
                        ta_sdpa_path path, int workspace)
{
    ta_test_kv t;
    ta_test_kv_load(&t, f, c, layout);
    ta_sdpa_opts o = t.opts;
    o.path = path;
    const ta_tensor *kn = t.has_new ? &t.kn : NULL, *vn = t.has_new ? &t.vn : NULL;
    void *ws = NULL;
    if (workspace) {
        size_t n;
        TA_CHECK_OK(ta_sdpa_kvcache_workspace_size(&n, &t.o, &t.q, &t.cache, kn, vn, &o));
        ws = malloc(n + 1);
        assert_non_null(ws);
        o.workspace = (ta_workspace){.data = ws, .size = n};
    }
    TA_CHECK_OK(ta_sdpa_kvcache(&t.o, &t.q, &t.cache, kn, vn, &o));
    char what[96];
    snprintf(what, sizeof what, "O (layout %d, %s, workspace %d)", (int)layout,
             path == TA_SDPA_REFERENCE ? "reference" : "auto", workspace);
    ta_fixture_expect_close(c, what, &t.o, ta_fixture_need(f, c, "out"), 0.0, TOL);
    ta_fixture_expect_close(c, "LSE", &t.lse, ta_fixture_need(f, c, "lse"), 1.0, TOL);
    ta_fixture_expect_close(c, "k cache", &t.kc, ta_fixture_need(f, c, "k_cache_out"), 0.0, 0.0);
    ta_fixture_expect_close(c, "v cache", &t.vc, ta_fixture_need(f, c, "v_cache_out"), 0.0, 0.0);
    free(ws);
    ta_test_kv_free(&t);
}

static void run_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    count(ctx, ta_fixture_case_meta(f, c));
    const ta_test_layout layouts[3] = {TA_TEST_BHLD, TA_TEST_BLHD, TA_TEST_DLAST};
    for (int l = 0; l < 3; l++)
        for (int path = 0; path < 2; path++)
            run_variant(f, c, layouts[l], path ? TA_SDPA_AUTO : TA_SDPA_REFERENCE, l == 1);
}

static void test_kvcache_matches_pytorch(void **state)
{
    (void)state;
    tally t = {0};
    ta_fixture_cases_run("kvcache.tafx", NULL, NULL, run_case, &t);
    if (t.checked < 13 || t.paged < 6 || t.split < 2 || t.empty_rows < 2 || t.full < 5 ||
        t.no_new < 3 || t.prefill < 5)
        fail_msg("kvcache.tafx holds %d cases: %d paged, %d split, %d with empty rows, %d full, "
                 "%d without new keys, %d prefill", t.checked, t.paged, t.split, t.empty_rows,
                 t.full, t.no_new, t.prefill);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_kvcache_matches_pytorch)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
