/* ta-test: all-isas
 * Attention layer parameters: initialisation against PyTorch's defaults (uniform bounds,
 * moments, zero biases, distinct streams per seed and parameter), save/load round trips
 * under the state_dict names, load errors (missing or misshapen tensors, bad heads,
 * missing file), and create/param errors. */
#include "ta_test.h"
#include "layer_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ initialisation */

static void check_uniform(const ta_attention *l, const char *name, double bound)
{
    int64_t n;
    double *p = ta_test_layer_param_f64(l, name, &n);
    double mean = 0.0, var = 0.0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) { /* each inside the bounds: a NaN fails here */
        if (!(fabs(p[i]) <= bound))
            fail_msg("%s[%lld] = %g: outside +-%g", name, (long long)i, p[i], bound);
        mean += p[i];
        if (p[i] < lo) lo = p[i];
        if (p[i] > hi) hi = p[i];
    }
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) var += (p[i] - mean) * (p[i] - mean);
    var /= (double)n;
    if (bound == 0.0) { /* zeros: the loop's bound */
        free(p);
        return;
    }
    /* U(-b, b): inside the bounds, reaching near them, mean 0 (sd b/sqrt(3n)), variance
     * b^2/3 (relative sd about sqrt(0.8/n)); 5 sigma limits. */
    if (lo > -bound * (1 - 20.0 / (double)n) || hi < bound * (1 - 20.0 / (double)n))
        fail_msg("%s: range [%g, %g] does not reach +-%g", name, lo, hi, bound);
    double sd_mean = bound / sqrt(3.0 * (double)n);
    if (!(fabs(mean) <= 5 * sd_mean)) fail_msg("%s: mean %g (bound %g, n %lld)", name, mean, bound, (long long)n);
    double want = bound * bound / 3.0;
    if (!(fabs(var / want - 1.0) <= 5 * sqrt(0.8 / (double)n)))
        fail_msg("%s: variance %g, expected %g", name, var, want);
    free(p);
}

static void test_init_matches_pytorch_defaults(void **state)
{
    (void)state;
    ta_attention *s, *t, *s2, *s3;
    TA_CHECK_OK(ta_attention_create(&s, TA_LAYOUT_SEED, 256, 4, 1234)); /* D = 64 */
    check_uniform(s, "values.weight", 1.0 / sqrt(64.0));
    check_uniform(s, "keys.weight", 1.0 / sqrt(64.0));
    check_uniform(s, "queries.weight", 1.0 / sqrt(64.0));
    check_uniform(s, "fc_out.weight", 1.0 / sqrt(256.0));
    assert_int_equal(ta_attention_param_count(s), 5);
    TA_CHECK_OK(ta_attention_create(&t, TA_LAYOUT_TORCH, 256, 8, 1234));
    check_uniform(t, "in_proj_weight", sqrt(6.0 / (256.0 + 3 * 256.0)));
    check_uniform(t, "in_proj_bias", 0.0);
    check_uniform(t, "out_proj.weight", 1.0 / sqrt(256.0));
    check_uniform(t, "out_proj.bias", 0.0);
    assert_int_equal(ta_attention_param_count(t), 4);
    assert_string_equal(ta_attention_param_name(t, 2), "out_proj.weight");
    assert_null(ta_attention_param_name(t, 4));
    /* fc_out.bias has only E values: bounds only */
    int64_t n;
    double *b = ta_test_layer_param_f64(s, "fc_out.bias", &n);
    for (int64_t i = 0; i < n; i++) assert_true(fabs(b[i]) <= 1.0 / 16.0);
    free(b);
    /* same seed, same layer; another seed, another; parameters are distinct streams */
    TA_CHECK_OK(ta_attention_create(&s2, TA_LAYOUT_SEED, 256, 4, 1234));
    TA_CHECK_OK(ta_attention_create(&s3, TA_LAYOUT_SEED, 256, 4, 1235));
    ta_tensor a, c, d;
    TA_CHECK_OK(ta_attention_param(&a, s, "keys.weight"));
    TA_CHECK_OK(ta_attention_param(&c, s2, "keys.weight"));
    TA_CHECK_OK(ta_attention_param(&d, s3, "keys.weight"));
    assert_memory_equal(a.data, c.data, sizeof(float) * 64 * 64);
    assert_memory_not_equal(a.data, d.data, sizeof(float) * 64 * 64);
    TA_CHECK_OK(ta_attention_param(&c, s, "values.weight"));
    assert_memory_not_equal(a.data, c.data, sizeof(float) * 64 * 64);
    ta_attention_free(s); ta_attention_free(t); ta_attention_free(s2); ta_attention_free(s3);
}

/* -------------------------------------------------------------- save / load */

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_attn");
}

static void test_save_load_round_trip(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *l, *m;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, 48, 6, 21));
        if (layout == TA_LAYOUT_TORCH) {
            ta_tensor b;
            TA_CHECK_OK(ta_attention_param(&b, l, "in_proj_bias"));
            TA_CHECK_OK(ta_rand_uniform(&b, -1.0f, 1.0f, 22));
        }
        const char *path = ta_test_path(layout ? "torch.safetensors" : "seed.safetensors");
        TA_CHECK_OK(ta_attention_save(path, l));
        TA_CHECK_OK(ta_attention_load(&m, path, (ta_layout)layout, 6));
        assert_int_equal(ta_attention_embed_size(m), 48);
        assert_int_equal(ta_attention_heads(m), 6);
        assert_int_equal(ta_attention_layout(m), layout);
        for (int i = 0; i < ta_attention_param_count(l); i++) {
            ta_tensor a, b;
            const char *name = ta_attention_param_name(l, i);
            TA_CHECK_OK(ta_attention_param(&a, l, name));
            TA_CHECK_OK(ta_attention_param(&b, m, name));
            assert_int_equal(a.ndim, b.ndim);
            assert_memory_equal(a.shape, b.shape, sizeof(int64_t) * (size_t)a.ndim);
            assert_memory_equal(a.data, b.data, sizeof(float) * (size_t)ta_tensor_numel(&a));
        }
        /* the file holds exactly the state_dict names */
        ta_safetensors *sf;
        TA_CHECK_OK(ta_safetensors_open(&sf, path));
        assert_int_equal(ta_safetensors_count(sf), ta_attention_param_count(l));
        for (int i = 0; i < ta_attention_param_count(l); i++)
            assert_true(ta_safetensors_find(sf, ta_attention_param_name(l, i)) >= 0);
        ta_safetensors_free(sf);
        /* same forward */
        ta_tensor x = ta_test_randn3(2, 5, 48, 23), o1, o2;
        int64_t os[3] = {2, 5, 48};
        TA_CHECK_OK(ta_tensor_empty(&o1, 3, os));
        TA_CHECK_OK(ta_tensor_empty(&o2, 3, os));
        TA_CHECK_OK(ta_attention_forward(&o1, l, &x, &x, &x, NULL));
        TA_CHECK_OK(ta_attention_forward(&o2, m, &x, &x, &x, NULL));
        assert_memory_equal(o1.data, o2.data, sizeof(float) * 2 * 5 * 48);
        /* another head count reads the same file (E from the file, D from heads) */
        ta_attention *m2;
        if (layout == TA_LAYOUT_TORCH) {
            TA_CHECK_OK(ta_attention_load(&m2, path, TA_LAYOUT_TORCH, 4));
            ta_attention_free(m2);
        }
        ta_tensor_free(&x); ta_tensor_free(&o1); ta_tensor_free(&o2);
        ta_attention_free(l);
        ta_attention_free(m);
    }
}

/* Writes a seed-layout file with tensors given as (name, shape) pairs. */
static void write_file(const char *path, int n, const char *const *names, int64_t (*shapes)[2],
                       const int *ndims)
{
    ta_tensor t[8];
    const ta_tensor *tp[8];
    for (int i = 0; i < n; i++) {
        TA_CHECK_OK(ta_tensor_zeros(&t[i], ndims[i], shapes[i]));
        tp[i] = &t[i];
    }
    TA_CHECK_OK(ta_safetensors_save(path, n, names, tp));
    for (int i = 0; i < n; i++) ta_tensor_free(&t[i]);
}

static void test_load_errors(void **state)
{
    (void)state;
    ta_attention *l = (ta_attention *)&l; /* sentinel: must stay untouched */
    ta_attention *const sentinel = l;
    const char *names[5] = {"values.weight", "keys.weight", "queries.weight", "fc_out.weight", "fc_out.bias"};
    int64_t shapes[5][2] = {{4, 4}, {4, 4}, {4, 4}, {8, 8}, {8, 0}};
    int nd[5] = {2, 2, 2, 2, 1};
    /* missing fc_out.bias */
    const char *p1 = ta_test_path("missing.safetensors");
    write_file(p1, 4, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p1, TA_LAYOUT_SEED, 2), TA_EFORMAT,
                 "has no tensor 'fc_out.bias' (seed layout)");
    assert_ptr_equal(l, sentinel);
    /* a torch file read as seed, and the other way round */
    TA_CHECK_ERR(ta_attention_load(&l, p1, TA_LAYOUT_TORCH, 2), TA_EFORMAT,
                 "has no tensor 'in_proj_weight' (torch layout)");
    /* wrong shape of fc_out.weight */
    const char *p2 = ta_test_path("shape.safetensors");
    shapes[3][1] = 4;
    write_file(p2, 5, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p2, TA_LAYOUT_SEED, 2), TA_ESHAPE,
                 "fc_out.weight has shape [8, 4], expected [8, 8]");
    /* wrong shape of keys.weight (D = 4 for E 8, heads 2) */
    const char *p3 = ta_test_path("keys.safetensors");
    shapes[3][1] = 8;
    shapes[1][0] = 3;
    write_file(p3, 5, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p3, TA_LAYOUT_SEED, 2), TA_ESHAPE,
                 "keys.weight has shape [3, 4], expected [4, 4]");
    /* heads not dividing E, heads invalid, a missing file */
    shapes[1][0] = 4;
    const char *p4 = ta_test_path("ok.safetensors");
    write_file(p4, 5, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p4, TA_LAYOUT_SEED, 3), TA_EINVAL,
                 "embed_size 8 is not divisible by heads 3");
    TA_CHECK_ERR(ta_attention_load(&l, p4, TA_LAYOUT_SEED, 0), TA_EINVAL, "heads must be >= 1");
    TA_CHECK_ERR(ta_attention_load(&l, ta_test_path("nope.safetensors"), TA_LAYOUT_SEED, 2), TA_EIO,
                 "nope.safetensors");
    TA_CHECK_ERR(ta_attention_load(NULL, p4, TA_LAYOUT_SEED, 2), TA_EINVAL, "layer is NULL");
    TA_CHECK_ERR(ta_attention_load(&l, NULL, TA_LAYOUT_SEED, 2), TA_EINVAL, "path is NULL");
    TA_CHECK_ERR(ta_attention_load(&l, p4, (ta_layout)7, 2), TA_EINVAL, "layout 7");
    assert_ptr_equal(l, sentinel);
    TA_CHECK_OK(ta_attention_load(&l, p4, TA_LAYOUT_SEED, 2));
    ta_attention_free(l);
    TA_CHECK_ERR(ta_attention_save(p4, NULL), TA_EINVAL, "layer is NULL");
    /* nn.MultiheadAttention(add_bias_kv=True)'s state_dict: bias_k / bias_v [1, 1, E] would
     * be ignored (the output was 0.27 off torch's for E 8, TA_OK); refused instead */
    const char *tnames[6] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias",
                             "bias_k", "bias_v"};
    int64_t tshapes[6][2] = {{24, 8}, {24, 0}, {8, 8}, {8, 0}, {1, 8}, {1, 8}};
    int tnd[6] = {2, 1, 2, 1, 2, 2};
    const char *p5 = ta_test_path("bias_kv.safetensors");
    write_file(p5, 6, tnames, tshapes, tnd);
    l = sentinel;
    TA_CHECK_ERR(ta_attention_load(&l, p5, TA_LAYOUT_TORCH, 2), TA_EUNSUPPORTED,
                 "holds 'bias_k' (nn.MultiheadAttention with add_bias_kv=True)");
    assert_ptr_equal(l, sentinel);
    write_file(p5, 4, tnames, tshapes, tnd);
    TA_CHECK_OK(ta_attention_load(&l, p5, TA_LAYOUT_TORCH, 2));
    ta_attention_free(l);
    /* a non-square out_proj.weight is named itself (E was taken from its rows, and the
     * error blamed in_proj_weight: "[24, 8], expected [12, 4]") */
    tshapes[2][0] = 4;
    write_file(p5, 4, tnames, tshapes, tnd);
    l = sentinel;
    TA_CHECK_ERR(ta_attention_load(&l, p5, TA_LAYOUT_TORCH, 2), TA_ESHAPE,
                 "out_proj.weight has shape [4, 8], expected [4, 4]");
    assert_ptr_equal(l, sentinel);
}

static void test_create_and_param_errors(void **state)
{
    (void)state;
    ta_attention *l = NULL;
    TA_CHECK_ERR(ta_attention_create(&l, TA_LAYOUT_SEED, 10, 3, 0), TA_EINVAL,
                 "ta_attention_create: embed_size 10 is not divisible by heads 3");
    TA_CHECK_ERR(ta_attention_create(&l, TA_LAYOUT_TORCH, 8, 0, 0), TA_EINVAL, "heads must be >= 1, got 0");
    TA_CHECK_ERR(ta_attention_create(&l, TA_LAYOUT_TORCH, 0, 1, 0), TA_EINVAL, "embed_size must be >= 1");
    TA_CHECK_ERR(ta_attention_create(&l, (ta_layout)2, 8, 2, 0), TA_EINVAL, "layout 2");
    TA_CHECK_ERR(ta_attention_create(NULL, TA_LAYOUT_SEED, 8, 2, 0), TA_EINVAL, "layer is NULL");
    assert_null(l);
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 0));
    ta_tensor v;
    TA_CHECK_ERR(ta_attention_param(&v, l, "in_proj_weight"), TA_EINVAL,
                 "the seed layout has no parameter 'in_proj_weight'");
    TA_CHECK_ERR(ta_attention_param(NULL, l, "fc_out.bias"), TA_EINVAL, "view is NULL");
    TA_CHECK_OK(ta_attention_param(&v, l, "fc_out.weight"));
    assert_int_equal(v.ndim, 2);
    assert_int_equal(v.shape[0], 8);
    assert_null(v.owned);
    ta_tensor_free(&v); /* a view: releases nothing */
    TA_CHECK_OK(ta_attention_param(&v, l, "fc_out.weight"));
    assert_non_null(v.data);
    ta_attention_free(l);
    ta_attention_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_matches_pytorch_defaults),
        cmocka_unit_test(test_save_load_round_trip),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_create_and_param_errors),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
