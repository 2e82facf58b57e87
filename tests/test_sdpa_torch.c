/* ta-test: all-isas
 * ta_sdpa against PyTorch: tests/fixtures/sdpa.tafx (tools/fixtures_sdpa.py) holds the
 * first seed's scaled_dot_product_attention run verbatim in float64, and every ta_sdpa
 * option computed with explicit float64 torch math. Each case runs on the reference
 * path with every optional output, and on the automatic path without weights (the
 * path the fused kernel will take), within 1e-5 absolute. */
#include "ta_test.h"

#include "fixtures.h"
#include "sdpa_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

/* Every element within TOL (relative to max(1, |want|) for LSE-like values when rel),
 * infinities and NaN matching exactly. Returns the worst error, or +inf on a mismatch
 * of NaN / infinity, and reports the first bad index through *bad. */
static double compare(const ta_tensor *got, const double *want, int rel, int64_t *bad)
{
    int64_t n = ta_tensor_numel(got), idx[TA_MAX_DIMS] = {0};
    double worst = 0;
    *bad = -1;
    for (int64_t e = 0; e < n; e++) {
        double g = *ta_tensor_at_const(got, idx), w = want[e];
        double err;
        if (isnan(w) || isnan(g) || isinf(w) || isinf(g))
            err = (g == w || (isnan(g) && isnan(w))) ? 0 : INFINITY;
        else
            err = fabs(g - w) / (rel ? fmax(1.0, fabs(w)) : 1.0);
        if (err > worst) {
            worst = err;
            if (err > TOL && *bad < 0) *bad = e;
        }
        for (int d = got->ndim - 1; d >= 0; d--) {
            if (++idx[d] < got->shape[d]) break;
            idx[d] = 0;
        }
    }
    return worst;
}

static double *load_f64(const ta_fixture_file *f, const char *c, const char *role)
{
    const ta_fixture_record *r = ta_fixture_case_record(f, c, role);
    if (!r) return NULL;
    double *p = malloc(sizeof(double) * (size_t)(r->numel ? r->numel : 1));
    TA_CHECK_OK(ta_fixture_to_f64(p, (size_t)r->numel, r));
    return p;
}

/* A [B, H, L, X] tensor re-laid out as [B, L, H, X] in memory, returned as the permuted
 * [B, H, L, X] view of *store (the second seed's head split). */
static void relayout_blhd(ta_tensor *view, ta_tensor *store, const ta_tensor *src)
{
    const int64_t s[4] = {src->shape[0], src->shape[2], src->shape[1], src->shape[3]};
    const int perm[4] = {0, 2, 1, 3};
    TA_CHECK_OK(ta_tensor_empty(store, 4, s));
    TA_CHECK_OK(ta_tensor_permute(view, store, perm));
    if (src->data) TA_CHECK_OK(ta_tensor_copy(view, src));
}

static void run_sdpa_case(const ta_fixture_file *f, const char *c, int *checked)
{
    const char *meta = ta_fixture_case_meta(f, c);
    const ta_test_sdpa_meta cm = ta_test_sdpa_case_meta(meta);
    const int64_t *sh = cm.shape;
    int64_t B = sh[0], H = sh[1], Lq = sh[3], Lk = sh[4], Dv = sh[6];
    const float scale = cm.scale;
    const ta_causal causal = cm.causal;
    const ta_mask_mode mode = cm.mode;
    const int blhd = cm.blhd;
    int seed_case = !strncmp(c, "seed", 4);

    ta_tensor q0, k0, v0, M = {0};
    TA_CHECK_OK(ta_fixture_tensor(&q0, ta_fixture_case_record(f, c, "q")));
    TA_CHECK_OK(ta_fixture_tensor(&k0, ta_fixture_case_record(f, c, "k")));
    TA_CHECK_OK(ta_fixture_tensor(&v0, ta_fixture_case_record(f, c, "v")));
    const ta_fixture_record *mr = ta_fixture_case_record(f, c, "mask");
    if (mr) TA_CHECK_OK(ta_fixture_tensor(&M, mr));
    const ta_fixture_record *klr = ta_fixture_case_record(f, c, "key_lengths");
    int64_t *kl = NULL;
    if (klr) {
        assert_int_equal(klr->dtype, TA_FIXTURE_I64);
        kl = malloc(sizeof(int64_t) * (size_t)B);
        memcpy(kl, klr->data, sizeof(int64_t) * (size_t)B);
    }
    double *want_o = load_f64(f, c, "out"), *want_l = load_f64(f, c, "lse"),
           *want_w = load_f64(f, c, "weights");
    assert_non_null(want_o);
    assert_non_null(want_l);

    /* Q, K, V and O as the test lays them out */
    ta_tensor Q = q0, K = k0, V = v0, O, Os = {0}, Qs = {0}, Ks = {0}, Vs = {0};
    const int64_t os[4] = {B, H, Lq, Dv}, ws[4] = {B, H, Lq, Lk};
    if (blhd) {
        relayout_blhd(&Q, &Qs, &q0);
        relayout_blhd(&K, &Ks, &k0);
        relayout_blhd(&V, &Vs, &v0);
        ta_tensor oshape = {.ndim = 4, .shape = {B, H, Lq, Dv}};
        relayout_blhd(&O, &Os, &oshape);
    } else {
        TA_CHECK_OK(ta_tensor_empty(&Os, 4, os));
        O = Os;
    }
    ta_tensor W, L;
    TA_CHECK_OK(ta_tensor_full(&W, 4, ws, 7.0f));
    TA_CHECK_OK(ta_tensor_full(&L, 3, ws, 7.0f));

    /* The seed's causal mask is a block mask: run it both as opts.causal and as the
     * tensor itself. */
    int variants = seed_case && mr ? 2 : 1;
    for (int var = 0; var < variants; var++)
        for (int path = 0; path < 2; path++) {
            ta_sdpa_opts o = {.scale = scale, .causal = causal, .mask = mr ? &M : NULL,
                              .mask_mode = mode, .key_lengths = kl, .lse = &L};
            if (seed_case && mr) {
                if (var == 0) o.mask = NULL; /* causal only */
                else o.causal = TA_CAUSAL_NONE;
            }
            o.path = path == 0 ? TA_SDPA_REFERENCE : TA_SDPA_AUTO;
            if (path == 0 && want_w) o.weights = &W;
            TA_CHECK_OK(ta_tensor_fill(&O, 9.0f));
            TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
            int64_t bo, bw = -1, bl;
            double eo = compare(&O, want_o, 0, &bo);
            double el = compare(&L, want_l, 1, &bl);
            double ew = o.weights ? compare(&W, want_w, 0, &bw) : 0;
            if (!(eo <= TOL && el <= TOL && ew <= TOL))
                fail_msg("%s (%s, variant %d, %s): max error O %.3g (first bad %lld), "
                         "weights %.3g (%lld), lse %.3g (%lld)", c, meta, var,
                         path ? "auto" : "reference", eo, (long long)bo, ew, (long long)bw,
                         el, (long long)bl);
        }
    (*checked)++;
    free(kl); free(want_o); free(want_l); free(want_w);
    ta_tensor_free(&q0); ta_tensor_free(&k0); ta_tensor_free(&v0); ta_tensor_free(&M);
    ta_tensor_free(&Qs); ta_tensor_free(&Ks); ta_tensor_free(&Vs); ta_tensor_free(&Os);
    ta_tensor_free(&W); ta_tensor_free(&L);
}

static void test_sdpa_matches_pytorch(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "sdpa.tafx"));
    int n = ta_fixture_case_count(f), checked = 0, seeds = 0, empty = 0, nan = 0;
    for (int i = 0; i < n; i++) {
        const char *c = ta_fixture_case_name(f, i);
        const char *meta = ta_fixture_case_meta(f, c);
        char buf[256];
        seeds += !strncmp(c, "seed", 4);
        ta_fixture_meta_get(meta, "empty_rows", buf, sizeof buf);
        empty += atoi(buf) > 0;
        ta_fixture_meta_get(meta, "tags", buf, sizeof buf);
        nan += strstr(buf, "nan") != NULL;
        run_sdpa_case(f, c, &checked);
    }
    /* the file holds what it claims: the seed's function, empty rows, NaN */
    assert_true(checked >= 40);
    assert_true(seeds >= 3);
    assert_true(empty >= 3);
    assert_true(nan >= 1);
    ta_fixture_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdpa_matches_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
