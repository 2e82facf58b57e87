/* ta-test: all-isas
 * Attention layers against PyTorch: tests/fixtures/layers.tafx (tools/fixtures_layers.py)
 * holds the seed's SelfAttention and nn.MultiheadAttention(batch_first=True) run by
 * torch 1.13 with random parameters: inputs, masks, parameters by state_dict name,
 * outputs (float32 and float64) and attention weights. Each case's parameters are
 * written to a .safetensors file under their PyTorch names and loaded with
 * ta_attention_load, then the forward must match torch within 1e-5 absolute. */
#include "ta_test.h"
#include "fixtures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL 1e-5

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/ta_attn_torch_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

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

/* Max |got - want| of a float32 tensor against a record (f32 or f64), same shape. */
static double compare(const char *c, const char *what, const ta_tensor *got,
                      const ta_fixture_record *want)
{
    int64_t n = ta_tensor_numel(got);
    if (want->ndim != got->ndim || memcmp(want->shape, got->shape, sizeof(int64_t) * (size_t)got->ndim))
        fail_msg("%s: %s has a different shape from the fixture", c, what);
    double *ref = malloc(sizeof(double) * (size_t)(n + 1));
    TA_CHECK_OK(ta_fixture_to_f64(ref, (size_t)(n + 1), want));
    double err = ta_test_max_abs_diff(got->data, ref, (size_t)n);
    free(ref);
    if (!(err <= TOL)) fail_msg("%s: %s differs from torch by %g (tolerance %g)", c, what, err, TOL);
    return err;
}

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
        TA_CHECK_OK(ta_fixture_tensor(&t[i], need(f, c, role)));
        tp[i] = &t[i];
    }
    char path[160];
    snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, c);
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

static void run_case(const ta_fixture_file *f, const char *c, double *worst)
{
    const char *meta = ta_fixture_case_meta(f, c);
    char kind[16], mm[16], km[16], wk[16], buf[32];
    ta_fixture_meta_get(meta, "kind", kind, sizeof kind);
    ta_fixture_meta_get(meta, "weights", wk, sizeof wk);
    ta_fixture_meta_get(meta, "embed", buf, sizeof buf);
    int64_t E = atoll(buf);
    ta_fixture_meta_get(meta, "heads", buf, sizeof buf);
    int64_t H = atoll(buf);
    ta_fixture_meta_get(meta, "self", buf, sizeof buf);
    int self = atoi(buf);
    ta_fixture_meta_get(meta, "causal", buf, sizeof buf);
    int causal = atoi(buf);
    ta_layout layout = !strcmp(kind, "seed") ? TA_LAYOUT_SEED : TA_LAYOUT_TORCH;
    ta_attention *l = load_case_layer(f, c, layout, H);

    ta_tensor q, k, v, mask = {0}, kpm = {0}, out, w = {0};
    TA_CHECK_OK(ta_fixture_tensor(&q, need(f, c, "queries")));
    TA_CHECK_OK(ta_fixture_tensor(&k, need(f, c, "keys")));
    TA_CHECK_OK(ta_fixture_tensor(&v, need(f, c, "values")));
    ta_attention_opts o = {0};
    const ta_fixture_record *r;
    if ((r = ta_fixture_case_record(f, c, "mask"))) {
        TA_CHECK_OK(ta_fixture_tensor(&mask, r));
        ta_fixture_meta_get(meta, "mask_mode", mm, sizeof mm);
        o.mask = &mask;
        o.mask_mode = mode_of(c, mm);
    }
    if ((r = ta_fixture_case_record(f, c, "key_padding_mask"))) {
        TA_CHECK_OK(ta_fixture_tensor(&kpm, r));
        ta_fixture_meta_get(meta, "kpm_mode", km, sizeof km);
        o.key_padding_mask = &kpm;
        o.key_padding_mode = mode_of(c, km);
    }
    o.causal = causal ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE;
    const int64_t N = q.shape[0], Lq = q.shape[1], Lk = k.shape[1];
    int64_t os[3] = {N, Lq, E};
    TA_CHECK_OK(ta_tensor_full(&out, 3, os, NAN));
    if (!strcmp(wk, "avg")) {
        int64_t ws[3] = {N, Lq, Lk};
        TA_CHECK_OK(ta_tensor_full(&w, 3, ws, NAN));
        o.weights = &w;
        o.average_weights = 1;
    } else if (!strcmp(wk, "heads")) {
        int64_t ws[4] = {N, H, Lq, Lk};
        TA_CHECK_OK(ta_tensor_full(&w, 4, ws, NAN));
        o.weights = &w;
    }
    /* self attention passes one tensor three times, as the seed's example does */
    const ta_tensor *kk = self ? &q : &k, *vv = self ? &q : &v;
    TA_CHECK_OK(ta_attention_forward(&out, l, &q, kk, vv, &o));
    double e64 = compare(c, "out (vs float64 torch)", &out, need(f, c, "out64"));
    double e32 = compare(c, "out (vs float32 torch)", &out, need(f, c, "out"));
    double ew = 0.0;
    if (o.weights) {
        ew = compare(c, "weights (vs float64 torch)", &w, need(f, c, "weights64"));
        compare(c, "weights (vs float32 torch)", &w, need(f, c, "weights"));
    }
    if (e64 > worst[0]) worst[0] = e64;
    if (e32 > worst[1]) worst[1] = e32;
    if (ew > worst[2]) worst[2] = ew;
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_tensor_free(&mask); ta_tensor_free(&kpm); ta_tensor_free(&out); ta_tensor_free(&w);
    ta_attention_free(l);
}

static void run_kind(const char *kind, int min_cases)
{
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "layers.tafx"));
    double worst[3] = {0, 0, 0};
    int ran = 0;
    for (int i = 0; i < ta_fixture_case_count(f); i++) {
        const char *c = ta_fixture_case_name(f, i);
        char k[16];
        ta_fixture_meta_get(ta_fixture_case_meta(f, c), "kind", k, sizeof k);
        if (strcmp(k, kind)) continue;
        run_case(f, c, worst);
        ran++;
    }
    /* the fixture must not silently lose its cases */
    if (ran < min_cases) fail_msg("only %d %s cases in layers.tafx (expected >= %d)", ran, kind, min_cases);
    print_message("%s layout: %d cases, max |err| out vs f64 %.2e, vs f32 %.2e, weights %.2e\n",
                  kind, ran, worst[0], worst[1], worst[2]);
    ta_fixture_close(f);
}

static void test_seed_layer_matches_torch(void **state)
{
    (void)state;
    run_kind("seed", 6);
}

static void test_multihead_attention_matches_torch(void **state)
{
    (void)state;
    run_kind("torch", 11);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_layer_matches_torch),
        cmocka_unit_test(test_multihead_attention_matches_torch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
