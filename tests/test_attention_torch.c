/* ta-test: all-isas
 * Attention layers against PyTorch, forward and backward, on the seed's SelfAttention
 * and nn.MultiheadAttention(batch_first=True):
 *  - tests/fixtures/layers.tafx (tools/fixtures_layers.py): torch 1.13 run with random
 *    parameters: inputs, masks, parameters by state_dict name, outputs (float32 and
 *    float64) and attention weights. Each case's parameters are written to a
 *    .safetensors file under their PyTorch names and loaded with ta_attention_load, then
 *    the forward must match torch within 1e-5 absolute.
 *  - tests/fixtures/layers_grad.tafx (tools/fixtures_layers_grad.py): float32 parameters
 *    and inputs, an upstream gradient dout, and every parameter and input gradient from
 *    float64 autograd on those values. ta_attention_backward must match each within 1e-4
 *    absolute (self attention: one gradient buffer passed three times gives the total
 *    d_queries). */
#include "ta_test.h"
#include "fixture_cases.h"
#include "layer_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORWARD_TOL 1e-5
#define BACKWARD_TOL 1e-4

/* ------------------------------------------------------------------ forward */

/* The layer of case c, through a .safetensors file with the PyTorch names. */
static ta_attention *load_case_layer(const ta_fixture_file *f, const char *c, ta_layout layout,
                                     int64_t heads)
{
    static const char *const seed[5] = {"values.weight", "keys.weight", "queries.weight",
                                        "fc_out.weight", "fc_out.bias"};
    static const char *const torch[4] = {"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                         "out_proj.bias"};
    const char *const *names = layout == TA_LAYOUT_SEED ? seed : torch;
    int n = layout == TA_LAYOUT_SEED ? 5 : 4;
    ta_tensor t[5];
    const ta_tensor *tp[5];
    for (int i = 0; i < n; i++) {
        char role[64];
        snprintf(role, sizeof role, "p.%s", names[i]);
        TA_CHECK_OK(ta_fixture_tensor(&t[i], ta_fixture_need(f, c, role)));
        tp[i] = &t[i];
    }
    char name[96];
    snprintf(name, sizeof name, "%s.safetensors", c);
    const char *path = ta_test_path(name);
    TA_CHECK_OK(ta_safetensors_save(path, n, names, tp));
    ta_attention *l;
    TA_CHECK_OK(ta_attention_load(&l, path, layout, heads));
    /* the loaded parameters are the fixture's, bit for bit */
    for (int i = 0; i < n; i++) {
        ta_tensor v;
        TA_CHECK_OK(ta_attention_param(&v, l, names[i]));
        assert_memory_equal(v.data, t[i].data, sizeof(float) * (size_t)ta_tensor_numel(&t[i]));
        ta_tensor_free(&t[i]);
    }
    return l;
}

/* One case: forward through the loaded layer, output (and weights when the case has
 * them) against torch in float64 and float32; worst errors into ctx (double[3]). */
static void forward_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    double *worst = ctx;
    ta_test_layer_case lc;
    ta_test_layer_case_load(&lc, f, c);
    ta_attention *l = load_case_layer(f, c, lc.layout, lc.H);
    char wk[16];
    ta_fixture_meta_get(lc.meta, "weights", wk, sizeof wk);
    ta_attention_opts o = lc.opts;
    const int64_t N = lc.q.shape[0], Lq = lc.q.shape[1], Lk = lc.k.shape[1];
    const int64_t os[3] = {N, Lq, lc.E};
    ta_tensor out, w = {0};
    TA_CHECK_OK(ta_tensor_full(&out, 3, os, NAN));
    if (!strcmp(wk, "avg")) {
        const int64_t ws[3] = {N, Lq, Lk};
        TA_CHECK_OK(ta_tensor_full(&w, 3, ws, NAN));
        o.weights = &w;
        o.average_weights = 1;
    } else if (!strcmp(wk, "heads")) {
        const int64_t ws[4] = {N, lc.H, Lq, Lk};
        TA_CHECK_OK(ta_tensor_full(&w, 4, ws, NAN));
        o.weights = &w;
    }
    /* self attention passes one tensor three times, as the seed's example does */
    const ta_tensor *kk = lc.self ? &lc.q : &lc.k, *vv = lc.self ? &lc.q : &lc.v;
    TA_CHECK_OK(ta_attention_forward(&out, l, &lc.q, kk, vv, &o));
    double e64 = ta_fixture_expect_close(c, "out (vs float64 torch)", &out, ta_fixture_need(f, c, "out64"), 0.0, FORWARD_TOL);
    double e32 = ta_fixture_expect_close(c, "out (vs float32 torch)", &out, ta_fixture_need(f, c, "out"), 0.0, FORWARD_TOL);
    double ew = 0.0;
    if (o.weights) {
        ew = ta_fixture_expect_close(c, "weights (vs float64 torch)", &w, ta_fixture_need(f, c, "weights64"), 0.0, FORWARD_TOL);
        ta_fixture_expect_close(c, "weights (vs float32 torch)", &w, ta_fixture_need(f, c, "weights"), 0.0, FORWARD_TOL);
    }
    worst[0] = ta_test_worse(worst[0], e64);
    worst[1] = ta_test_worse(worst[1], e32);
    worst[2] = ta_test_worse(worst[2], ew);
    ta_tensor_free(&out);
    ta_tensor_free(&w);
    ta_test_layer_case_free(&lc);
    ta_attention_free(l);
}

static void forward_kind(const char *kind, int min_cases)
{
    double worst[3] = {0, 0, 0};
    int ran = ta_test_layer_cases_run("layers.tafx", kind, min_cases, forward_case, worst);
    print_message("%s layout: %d cases, max |err| out vs f64 %.2e, vs f32 %.2e, weights %.2e\n",
                  kind, ran, worst[0], worst[1], worst[2]);
}

/* ----------------------------------------------------------------- backward */

/* One case: the fixture's parameters copied into a new layer, one backward, every
 * parameter and input gradient against autograd; worst errors into ctx (double[2]). */
static void backward_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    double *worst = ctx;
    ta_test_layer_case lc;
    ta_test_layer_case_load(&lc, f, c);
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, lc.layout, lc.E, lc.H, 0));
    for (int i = 0; i < ta_attention_param_count(l); i++) {
        const char *name = ta_attention_param_name(l, i);
        char role[64];
        ta_tensor p, src;
        snprintf(role, sizeof role, "p.%s", name);
        TA_CHECK_OK(ta_attention_param(&p, l, name));
        TA_CHECK_OK(ta_fixture_tensor(&src, ta_fixture_need(f, c, role)));
        TA_CHECK_OK(ta_tensor_copy(&p, &src));
        ta_tensor_free(&src);
    }
    ta_tensor dout, dq, dk, dv;
    TA_CHECK_OK(ta_fixture_tensor(&dout, ta_fixture_need(f, c, "dout")));
    TA_CHECK_OK(ta_tensor_zeros(&dq, lc.q.ndim, lc.q.shape));
    TA_CHECK_OK(ta_tensor_zeros(&dk, lc.k.ndim, lc.k.shape));
    TA_CHECK_OK(ta_tensor_zeros(&dv, lc.v.ndim, lc.v.shape));
    if (lc.self)
        TA_CHECK_OK(ta_attention_backward(&dq, &dq, &dq, l, &dout, &lc.q, &lc.q, &lc.q, &lc.opts));
    else
        TA_CHECK_OK(ta_attention_backward(&dq, &dk, &dv, l, &dout, &lc.q, &lc.k, &lc.v, &lc.opts));
    for (int i = 0; i < ta_attention_param_count(l); i++) {
        const char *name = ta_attention_param_name(l, i);
        char role[64];
        ta_tensor g;
        snprintf(role, sizeof role, "g.%s", name);
        TA_CHECK_OK(ta_attention_grad(&g, l, name));
        double e = ta_fixture_expect_close(c, role, &g, ta_fixture_need(f, c, role), 0.0, BACKWARD_TOL);
        worst[0] = ta_test_worse(worst[0], e);
    }
    double e = ta_fixture_expect_close(c, "d_queries", &dq, ta_fixture_need(f, c, "d_queries"), 0.0, BACKWARD_TOL);
    if (!lc.self) {
        e = ta_test_worse(e, ta_fixture_expect_close(c, "d_keys", &dk, ta_fixture_need(f, c, "d_keys"), 0.0, BACKWARD_TOL));
        e = ta_test_worse(e, ta_fixture_expect_close(c, "d_values", &dv, ta_fixture_need(f, c, "d_values"), 0.0, BACKWARD_TOL));
    }
    worst[1] = ta_test_worse(worst[1], e);
    ta_tensor *all[] = {&dout, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ta_tensor_free(all[i]);
    ta_test_layer_case_free(&lc);
    ta_attention_free(l);
}

static void backward_kind(const char *kind, int min_cases)
{
    double worst[2] = {0, 0};
    int ran = ta_test_layer_cases_run("layers_grad.tafx", kind, min_cases, backward_case, worst);
    print_message("%s layout: %d cases, max |err| parameter grads %.2e, input grads %.2e\n", kind,
                  ran, worst[0], worst[1]);
}

/* Each test runs one fixture file's cases of one layout, with the least count the file
 * must hold. */
typedef struct layer_test {
    void (*run)(const char *kind, int min_cases);
    const char *kind;
    int min_cases;
} layer_test;

static void run_layer_test(void **state)
{
    const layer_test *t = *state;
    t->run(t->kind, t->min_cases);
}

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_attn_torch");
}

int main(void)
{
    static layer_test runs[] = {
        {forward_kind, "seed", 6}, {forward_kind, "torch", 11},
        {backward_kind, "seed", 5}, {backward_kind, "torch", 5},
    };
    const struct CMUnitTest tests[] = {
        {"test_seed_layer_matches_torch", run_layer_test, NULL, NULL, &runs[0]},
        {"test_multihead_attention_matches_torch", run_layer_test, NULL, NULL, &runs[1]},
        {"test_seed_layer_gradients_match_autograd", run_layer_test, NULL, NULL, &runs[2]},
        {"test_multihead_attention_gradients_match_autograd", run_layer_test, NULL, NULL, &runs[3]},
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
