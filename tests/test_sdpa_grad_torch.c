/* ta-test: all-isas
 * ta_sdpa_backward against PyTorch autograd: tests/fixtures/sdpa_grad.tafx
 * (tools/fixtures_sdpa_grad.py) holds, for every ta_sdpa option, float32 q, k, v, dO and
 * the float64 out, LSE and the gradients dq, dk, dv of sum(dO * out) that torch autograd
 * computed through explicit float64 attention math. Each case runs on the reference and
 * the fused (automatic) path, with the forward's out and LSE rounded to float32 as the
 * inputs, within 1e-4 absolute. */
#include "ta_test.h"

#include "fixture_cases.h"
#include "sdpa_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4

static void run_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    int *empty = ctx;
    const char *meta = ta_fixture_case_meta(f, c);
    char buf[64];
    ta_fixture_meta_get(meta, "empty_rows", buf, sizeof buf);
    *empty += atoi(buf) > 0;
    ta_test_sdpa_inputs in;
    ta_test_sdpa_inputs_load(&in, f, c);
    ta_tensor do0, o0, l0;
    TA_CHECK_OK(ta_fixture_tensor(&do0, ta_fixture_need(f, c, "dout")));
    TA_CHECK_OK(ta_fixture_tensor(&o0, ta_fixture_need(f, c, "out")));
    TA_CHECK_OK(ta_fixture_tensor(&l0, ta_fixture_need(f, c, "lse")));
    double *wq = ta_fixture_case_f64(f, c, "dq"), *wk = ta_fixture_case_f64(f, c, "dk"),
           *wv = ta_fixture_case_f64(f, c, "dv");
    assert_true(wq && wk && wv);

    /* dO and O in the case's layout, the gradients too */
    ta_tensor dO, O, dQ, dK, dV, sdO, sO, sdQ, sdK, sdV;
    ta_test_tensor4(&dO, &sdO, do0.shape, in.layout, &do0);
    ta_test_tensor4(&O, &sO, o0.shape, in.layout, &o0);
    ta_test_tensor4(&dQ, &sdQ, in.q.shape, in.layout, NULL);
    ta_test_tensor4(&dK, &sdK, in.k.shape, in.layout, NULL);
    ta_test_tensor4(&dV, &sdV, in.v.shape, in.layout, NULL);
    for (int path = 0; path < 2; path++) {
        ta_sdpa_opts o = in.opts;
        o.path = path ? TA_SDPA_AUTO : TA_SDPA_REFERENCE;
        TA_CHECK_OK(ta_tensor_fill(&dQ, 9.0f));
        TA_CHECK_OK(ta_tensor_fill(&dK, 9.0f));
        TA_CHECK_OK(ta_tensor_fill(&dV, 9.0f));
        TA_CHECK_OK(ta_sdpa_backward(&dQ, &dK, &dV, &dO, &in.q, &in.k, &in.v, &O, &l0, &o));
        double eq = ta_test_max_err(&dQ, wq, 0.0, 0, NULL), ek = ta_test_max_err(&dK, wk, 0.0, 0, NULL),
               ev = ta_test_max_err(&dV, wv, 0.0, 0, NULL);
        if (!(eq <= TOL && ek <= TOL && ev <= TOL))
            fail_msg("%s (%s, %s): max error dQ %.3g, dK %.3g, dV %.3g", c, meta,
                     path ? "auto" : "reference", eq, ek, ev);
    }
    free(wq); free(wk); free(wv);
    ta_tensor *all[] = {&do0, &o0, &l0, &sdO, &sO, &sdQ, &sdK, &sdV};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    ta_test_sdpa_inputs_free(&in);
}

/* The file holds what it claims: every option, rows with nothing to attend. */
static void test_sdpa_backward_matches_pytorch_autograd(void **state)
{
    (void)state;
    int empty = 0, n = ta_fixture_cases_run("sdpa_grad.tafx", NULL, NULL, run_case, &empty);
    assert_true(n >= 30);
    assert_true(empty >= 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdpa_backward_matches_pytorch_autograd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
