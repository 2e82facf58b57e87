/* ta-test: all-isas
 * ta_sdpa against PyTorch: tests/fixtures/sdpa.tafx (tools/fixtures_sdpa.py) holds the
 * first seed's scaled_dot_product_attention run verbatim in float64, and every ta_sdpa
 * option computed with explicit float64 torch math. Each case runs on the reference
 * path with every optional output, and on the automatic path without weights (the
 * path the fused kernel will take), within 1e-5 absolute. */
#include "ta_test.h"

#include "fixture_cases.h"
#include "sdpa_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

/* What the file must hold: the seed's function, rows with nothing to attend, NaN. */
typedef struct tally {
    int checked, seeds, empty, nan;
} tally;

static void run_sdpa_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    tally *t = ctx;
    const char *meta = ta_fixture_case_meta(f, c);
    char buf[256];
    ta_fixture_meta_get(meta, "empty_rows", buf, sizeof buf);
    t->empty += atoi(buf) > 0;
    ta_fixture_meta_get(meta, "tags", buf, sizeof buf);
    t->nan += strstr(buf, "nan") != NULL;
    const int seed_case = !strncmp(c, "seed", 4);
    t->seeds += seed_case;

    ta_test_sdpa_inputs in;
    ta_test_sdpa_inputs_load(&in, f, c);
    const int64_t *sh = in.m.shape;
    const int64_t B = sh[0], H = sh[1], Lq = sh[3], Lk = sh[4], Dv = sh[6];
    double *want_o = ta_fixture_case_f64(f, c, "out"), *want_l = ta_fixture_case_f64(f, c, "lse"),
           *want_w = ta_fixture_case_f64(f, c, "weights");
    assert_non_null(want_o);
    assert_non_null(want_l);
    ta_tensor O, Os, W, L;
    const int64_t os[4] = {B, H, Lq, Dv}, ws[4] = {B, H, Lq, Lk};
    ta_test_tensor4(&O, &Os, os, in.layout, NULL);
    TA_CHECK_OK(ta_tensor_full(&W, 4, ws, 7.0f));
    TA_CHECK_OK(ta_tensor_full(&L, 3, ws, 7.0f));

    /* The seed's causal mask is a block mask: run it both as opts.causal and as the
     * tensor itself. */
    const int seed_mask = seed_case && in.opts.mask;
    for (int var = 0; var < (seed_mask ? 2 : 1); var++)
        for (int path = 0; path < 2; path++) {
            ta_sdpa_opts o = in.opts;
            o.lse = &L;
            if (seed_mask) {
                if (var == 0) o.mask = NULL; /* causal only */
                else o.causal = TA_CAUSAL_NONE;
            }
            o.path = path == 0 ? TA_SDPA_REFERENCE : TA_SDPA_AUTO;
            if (path == 0 && want_w) o.weights = &W;
            TA_CHECK_OK(ta_tensor_fill(&O, 9.0f));
            TA_CHECK_OK(ta_sdpa(&O, &in.q, &in.k, &in.v, &o));
            int64_t bo, bw = -1, bl;
            double eo = ta_test_max_err(&O, want_o, 0.0, TOL, &bo);
            double el = ta_test_max_err(&L, want_l, 1.0, TOL, &bl);
            double ew = o.weights ? ta_test_max_err(&W, want_w, 0.0, TOL, &bw) : 0;
            if (!(eo <= TOL && el <= TOL && ew <= TOL))
                fail_msg("%s (%s, variant %d, %s): max error O %.3g (first bad %lld), "
                         "weights %.3g (%lld), lse %.3g (%lld)", c, meta, var,
                         path ? "auto" : "reference", eo, (long long)bo, ew, (long long)bw,
                         el, (long long)bl);
        }
    t->checked++;
    free(want_o); free(want_l); free(want_w);
    ta_tensor_free(&Os); ta_tensor_free(&W); ta_tensor_free(&L);
    ta_test_sdpa_inputs_free(&in);
}

static void test_sdpa_matches_pytorch(void **state)
{
    (void)state;
    tally t = {0};
    ta_fixture_cases_run("sdpa.tafx", NULL, NULL, run_sdpa_case, &t);
    if (t.checked < 40 || t.seeds < 3 || t.empty < 3 || t.nan < 1)
        fail_msg("sdpa.tafx holds %d cases, %d of the seed, %d with empty rows, %d with NaN",
                 t.checked, t.seeds, t.empty, t.nan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sdpa_matches_pytorch)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
