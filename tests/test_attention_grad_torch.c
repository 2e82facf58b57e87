/* ta-test: all-isas
 * Layer gradients against PyTorch autograd: tests/fixtures/layers_grad.tafx
 * (tools/fixtures_layers_grad.py) holds the seed's SelfAttention and
 * nn.MultiheadAttention(batch_first=True) with float32 parameters and inputs, an upstream
 * gradient dout, and every parameter and input gradient from float64 autograd on those
 * values. ta_attention_backward must match each within 1e-4 absolute (self attention:
 * one gradient buffer passed three times gives the total d_queries). */
#include "ta_test.h"
#include "fixtures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4

static const ta_fixture_record *need(const ta_fixture_file *f, const char *c, const char *role)
{
    const ta_fixture_record *r = ta_fixture_case_record(f, c, role);
    if (!r) fail_msg("%s: no record '%s'", c, role);
    return r;
}

static ta_mask_mode mode_of(const char *c, const char *s)
{
    if (!strcmp(s, "keep")) return TA_MASK_KEEP;
    if (!strcmp(s, "block")) return TA_MASK_BLOCK;
    if (!strcmp(s, "additive")) return TA_MASK_ADDITIVE;
    fail_msg("%s: unknown mask mode '%s'", c, s);
    return TA_MASK_KEEP;
}

static double compare(const char *c, const char *what, const ta_tensor *got,
                      const ta_fixture_record *want)
{
    int64_t n = ta_tensor_numel(got);
    if (want->ndim != got->ndim ||
        memcmp(want->shape, got->shape, sizeof(int64_t) * (size_t)got->ndim))
        fail_msg("%s: %s has a different shape from the fixture", c, what);
    double *ref = malloc(sizeof(double) * (size_t)(n + 1));
    TA_CHECK_OK(ta_fixture_to_f64(ref, (size_t)(n + 1), want));
    double err = ta_test_max_abs_diff(got->data, ref, (size_t)n);
    free(ref);
    if (!(err <= TOL)) fail_msg("%s: %s differs from torch autograd by %g (tolerance %g)", c, what, err, TOL);
    return err;
}

static void run_case(const ta_fixture_file *f, const char *c, double *worst)
{
    const char *meta = ta_fixture_case_meta(f, c);
    char kind[16], buf[32];
    ta_fixture_meta_get(meta, "kind", kind, sizeof kind);
    ta_fixture_meta_get(meta, "embed", buf, sizeof buf);
    int64_t E = atoll(buf);
    ta_fixture_meta_get(meta, "heads", buf, sizeof buf);
    int64_t H = atoll(buf);
    ta_fixture_meta_get(meta, "self", buf, sizeof buf);
    int self = atoi(buf);
    ta_fixture_meta_get(meta, "causal", buf, sizeof buf);
    int causal = atoi(buf);
    ta_layout layout = !strcmp(kind, "seed") ? TA_LAYOUT_SEED : TA_LAYOUT_TORCH;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, layout, E, H, 0));
    for (int i = 0; i < ta_attention_param_count(l); i++) {
        const char *name = ta_attention_param_name(l, i);
        char role[64];
        ta_tensor p, src;
        snprintf(role, sizeof role, "p.%s", name);
        TA_CHECK_OK(ta_attention_param(&p, l, name));
        TA_CHECK_OK(ta_fixture_tensor(&src, need(f, c, role)));
        TA_CHECK_OK(ta_tensor_copy(&p, &src));
        ta_tensor_free(&src);
    }
    ta_tensor q, k, v, dout, mask = {0}, kpm = {0}, dq, dk, dv;
    TA_CHECK_OK(ta_fixture_tensor(&q, need(f, c, "queries")));
    TA_CHECK_OK(ta_fixture_tensor(&k, need(f, c, "keys")));
    TA_CHECK_OK(ta_fixture_tensor(&v, need(f, c, "values")));
    TA_CHECK_OK(ta_fixture_tensor(&dout, need(f, c, "dout")));
    ta_attention_opts o = {0};
    const ta_fixture_record *r;
    char mm[16];
    if ((r = ta_fixture_case_record(f, c, "mask"))) {
        TA_CHECK_OK(ta_fixture_tensor(&mask, r));
        ta_fixture_meta_get(meta, "mask_mode", mm, sizeof mm);
        o.mask = &mask;
        o.mask_mode = mode_of(c, mm);
    }
    if ((r = ta_fixture_case_record(f, c, "key_padding_mask"))) {
        TA_CHECK_OK(ta_fixture_tensor(&kpm, r));
        ta_fixture_meta_get(meta, "kpm_mode", mm, sizeof mm);
        o.key_padding_mask = &kpm;
        o.key_padding_mode = mode_of(c, mm);
    }
    o.causal = causal ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE;
    TA_CHECK_OK(ta_tensor_zeros(&dq, q.ndim, q.shape));
    TA_CHECK_OK(ta_tensor_zeros(&dk, k.ndim, k.shape));
    TA_CHECK_OK(ta_tensor_zeros(&dv, v.ndim, v.shape));
    if (self)
        TA_CHECK_OK(ta_attention_backward(&dq, &dq, &dq, l, &dout, &q, &q, &q, &o));
    else
        TA_CHECK_OK(ta_attention_backward(&dq, &dk, &dv, l, &dout, &q, &k, &v, &o));
    for (int i = 0; i < ta_attention_param_count(l); i++) {
        const char *name = ta_attention_param_name(l, i);
        char role[64];
        ta_tensor g;
        snprintf(role, sizeof role, "g.%s", name);
        TA_CHECK_OK(ta_attention_grad(&g, l, name));
        double e = compare(c, role, &g, need(f, c, role));
        if (e > worst[0]) worst[0] = e;
    }
    double e = compare(c, "d_queries", &dq, need(f, c, "d_queries"));
    if (!self) {
        e = fmax(e, compare(c, "d_keys", &dk, need(f, c, "d_keys")));
        e = fmax(e, compare(c, "d_values", &dv, need(f, c, "d_values")));
    }
    if (e > worst[1]) worst[1] = e;
    ta_tensor *all[] = {&q, &k, &v, &dout, &mask, &kpm, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ta_tensor_free(all[i]);
    ta_attention_free(l);
}

static void run_kind(const char *kind, int min_cases)
{
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "layers_grad.tafx"));
    double worst[2] = {0, 0};
    int ran = 0;
    for (int i = 0; i < ta_fixture_case_count(f); i++) {
        const char *c = ta_fixture_case_name(f, i);
        char k[16];
        ta_fixture_meta_get(ta_fixture_case_meta(f, c), "kind", k, sizeof k);
        if (strcmp(k, kind)) continue;
        run_case(f, c, worst);
        ran++;
    }
    if (ran < min_cases)
        fail_msg("only %d %s cases in layers_grad.tafx (expected >= %d)", ran, kind, min_cases);
    print_message("%s layout: %d cases, max |err| parameter grads %.2e, input grads %.2e\n", kind,
                  ran, worst[0], worst[1]);
    ta_fixture_close(f);
}

static void test_seed_layer_gradients_match_autograd(void **state)
{
    (void)state;
    run_kind("seed", 5);
}

static void test_multihead_attention_gradients_match_autograd(void **state)
{
    (void)state;
    run_kind("torch", 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_layer_gradients_match_autograd),
        cmocka_unit_test(test_multihead_attention_gradients_match_autograd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
