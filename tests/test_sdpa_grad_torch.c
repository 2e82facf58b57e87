/* ta-test: all-isas
 * ta_sdpa_backward against PyTorch autograd: tests/fixtures/sdpa_grad.tafx
 * (tools/fixtures_sdpa_grad.py) holds, for every ta_sdpa option, float32 q, k, v, dO and
 * the float64 out, LSE and the gradients dq, dk, dv of sum(dO * out) that torch autograd
 * computed through explicit float64 attention math. Each case runs on the reference and
 * the fused (automatic) path, with the forward's out and LSE rounded to float32 as the
 * inputs, within 1e-4 absolute. */
#include "ta_test.h"

#include "fixtures.h"
#include "sdpa_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4

/* max |got - want| in row-major order of got; NaN / inf must match exactly. */
static double compare(const ta_tensor *got, const double *want)
{
    int64_t n = ta_tensor_numel(got), idx[TA_MAX_DIMS] = {0};
    double worst = 0;
    for (int64_t e = 0; e < n; e++) {
        double g = *ta_tensor_at_const(got, idx), w = want[e], err;
        if (!isfinite(g) || !isfinite(w))
            err = (g == w || (isnan(g) && isnan(w))) ? 0 : INFINITY;
        else
            err = fabs(g - w);
        if (err > worst) worst = err;
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
    assert_non_null(r);
    double *p = malloc(sizeof(double) * (size_t)(r->numel ? r->numel : 1));
    TA_CHECK_OK(ta_fixture_to_f64(p, (size_t)r->numel, r));
    return p;
}

/* A [B, H, L, X] tensor of shape s laid out as [B, L, H, X] (blhd) or contiguous, in
 * *store; *view is the [B, H, L, X] view; values copied from src when given. */
static void place(ta_tensor *view, ta_tensor *store, const int64_t *s, int blhd,
                  const ta_tensor *src)
{
    if (blhd) {
        const int64_t m[4] = {s[0], s[2], s[1], s[3]};
        const int perm[4] = {0, 2, 1, 3};
        TA_CHECK_OK(ta_tensor_empty(store, 4, m));
        TA_CHECK_OK(ta_tensor_permute(view, store, perm));
    } else {
        TA_CHECK_OK(ta_tensor_empty(store, 4, s));
        *view = *store;
        view->owned = NULL;
    }
    if (src) TA_CHECK_OK(ta_tensor_copy(view, src));
}

static void run_case(const ta_fixture_file *f, const char *c)
{
    const char *meta = ta_fixture_case_meta(f, c);
    const ta_test_sdpa_meta cm = ta_test_sdpa_case_meta(meta);
    const int64_t *sh = cm.shape;
    int64_t B = sh[0], H = sh[1], Hkv = sh[2], Lq = sh[3], Lk = sh[4], D = sh[5], Dv = sh[6];
    const float scale = cm.scale;
    const ta_causal causal = cm.causal;
    const ta_mask_mode mode = cm.mode;
    const int blhd = cm.blhd;

    ta_tensor q0, k0, v0, do0, o0, l0, M = {0};
    TA_CHECK_OK(ta_fixture_tensor(&q0, ta_fixture_case_record(f, c, "q")));
    TA_CHECK_OK(ta_fixture_tensor(&k0, ta_fixture_case_record(f, c, "k")));
    TA_CHECK_OK(ta_fixture_tensor(&v0, ta_fixture_case_record(f, c, "v")));
    TA_CHECK_OK(ta_fixture_tensor(&do0, ta_fixture_case_record(f, c, "dout")));
    TA_CHECK_OK(ta_fixture_tensor(&o0, ta_fixture_case_record(f, c, "out")));
    TA_CHECK_OK(ta_fixture_tensor(&l0, ta_fixture_case_record(f, c, "lse")));
    const ta_fixture_record *mr = ta_fixture_case_record(f, c, "mask");
    if (mr) TA_CHECK_OK(ta_fixture_tensor(&M, mr));
    const ta_fixture_record *klr = ta_fixture_case_record(f, c, "key_lengths");
    int64_t *kl = NULL;
    if (klr) {
        assert_int_equal(klr->dtype, TA_FIXTURE_I64);
        kl = malloc(sizeof(int64_t) * (size_t)B);
        memcpy(kl, klr->data, sizeof(int64_t) * (size_t)B);
    }
    double *wq = load_f64(f, c, "dq"), *wk = load_f64(f, c, "dk"), *wv = load_f64(f, c, "dv");

    const int64_t qs[4] = {B, H, Lq, D}, ks[4] = {B, Hkv, Lk, D}, vs[4] = {B, Hkv, Lk, Dv},
                  os[4] = {B, H, Lq, Dv};
    ta_tensor Q, K, V, dO, O, dQ, dK, dV, sQ, sK, sV, sdO, sO, sdQ, sdK, sdV;
    place(&Q, &sQ, qs, blhd, &q0);
    place(&K, &sK, ks, blhd, &k0);
    place(&V, &sV, vs, blhd, &v0);
    place(&dO, &sdO, os, blhd, &do0);
    place(&O, &sO, os, blhd, &o0);
    place(&dQ, &sdQ, qs, blhd, NULL);
    place(&dK, &sdK, ks, blhd, NULL);
    place(&dV, &sdV, vs, blhd, NULL);

    for (int path = 0; path < 2; path++) {
        ta_sdpa_opts o = {.scale = scale, .causal = causal, .mask = mr ? &M : NULL,
                          .mask_mode = mode, .key_lengths = kl,
                          .path = path ? TA_SDPA_AUTO : TA_SDPA_REFERENCE};
        TA_CHECK_OK(ta_tensor_fill(&dQ, 9.0f));
        TA_CHECK_OK(ta_tensor_fill(&dK, 9.0f));
        TA_CHECK_OK(ta_tensor_fill(&dV, 9.0f));
        TA_CHECK_OK(ta_sdpa_backward(&dQ, &dK, &dV, &dO, &Q, &K, &V, &O, &l0, &o));
        double eq = compare(&dQ, wq), ek = compare(&dK, wk), ev = compare(&dV, wv);
        if (!(eq <= TOL && ek <= TOL && ev <= TOL))
            fail_msg("%s (%s, %s): max error dQ %.3g, dK %.3g, dV %.3g", c, meta,
                     path ? "auto" : "reference", eq, ek, ev);
    }
    free(kl); free(wq); free(wk); free(wv);
    ta_tensor *all[] = {&q0, &k0, &v0, &do0, &o0, &l0, &M, &sQ, &sK, &sV, &sdO, &sO, &sdQ,
                        &sdK, &sdV};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static void test_sdpa_backward_matches_pytorch_autograd(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "sdpa_grad.tafx"));
    int n = ta_fixture_case_count(f), empty = 0;
    for (int i = 0; i < n; i++) {
        const char *c = ta_fixture_case_name(f, i);
        char buf[64];
        ta_fixture_meta_get(ta_fixture_case_meta(f, c), "empty_rows", buf, sizeof buf);
        empty += atoi(buf) > 0;
        run_case(f, c);
    }
    /* the file holds what it claims: every option, rows with nothing to attend */
    assert_true(n >= 30);
    assert_true(empty >= 3);
    ta_fixture_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdpa_backward_matches_pytorch_autograd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
