/* ta-test: all-isas
 * The torch layout (nn.MultiheadAttention(batch_first=True)) against its float64
 * oracle: self and cross attention with biases set, every attn_mask kind (bool 2-D and
 * 3-D, float additive), key padding masks (suffix, non-suffix, float) alone and combined
 * with masks and causal, causal top-left with a fully blocked row (output = out_proj.bias,
 * where PyTorch gives NaN), and bottom-right causal cross attention in both layouts. */
#include "ta_test.h"
#include "layer_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ torch */

static void test_torch_no_mask_self_and_cross(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, 64, 8, 4));
    /* give the zero-initialised biases values, so they are exercised */
    ta_tensor b;
    TA_CHECK_OK(ta_attention_param(&b, l, "in_proj_bias"));
    TA_CHECK_OK(ta_rand_uniform(&b, -0.5f, 0.5f, 77));
    TA_CHECK_OK(ta_attention_param(&b, l, "out_proj.bias"));
    TA_CHECK_OK(ta_rand_uniform(&b, -0.5f, 0.5f, 78));
    ta_tensor x = ta_test_randn3(2, 9, 64, 51), k = ta_test_randn3(2, 11, 64, 52), v = ta_test_randn3(2, 11, 64, 53);
    ta_test_layer_check(l, &x, &x, &x, NULL, NULL, 0, 1e-5);
    ta_test_layer_check_weights(l, &x, &k, &v, NULL, NULL, 1e-5);
    ta_tensor_free(&x); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

static void test_torch_every_mask_kind(void **state)
{
    (void)state;
    const int64_t N = 2, H = 4, Lq = 7, Lk = 10, E = 32;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, E, H, 6));
    ta_tensor pb;
    TA_CHECK_OK(ta_attention_param(&pb, l, "in_proj_bias"));
    TA_CHECK_OK(ta_rand_uniform(&pb, -0.2f, 0.2f, 79));
    ta_tensor q = ta_test_randn3(N, Lq, E, 61), k = ta_test_randn3(N, Lk, E, 62), v = ta_test_randn3(N, Lk, E, 63);
    double *b = ta_test_bias_new(N, H, Lq, Lk);
    int64_t bits[4 * 2 * 7 * 10];
    TA_CHECK_OK(ta_randint(bits, (size_t)(N * H * Lq * Lk), 0, 4, 5));

    /* bool attn_mask 2-D [Lq, Lk], True = blocked (about a quarter) */
    int64_t s2[2] = {Lq, Lk}, s3[3] = {N * H, Lq, Lk}, sk[2] = {N, Lk};
    ta_tensor m2, m3, mf, kpm;
    TA_CHECK_OK(ta_tensor_zeros(&m2, 2, s2));
    for (int64_t ij = 0; ij < Lq * Lk; ij++) ((float *)m2.data)[ij] = bits[ij] == 0;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = ((float *)m2.data)[i * Lk + j] != 0.0f ? -INFINITY : 0.0;
    ta_attention_opts o = {.mask = &m2, .mask_mode = TA_MASK_BLOCK};
    ta_test_layer_check(l, &q, &k, &v, &o, b, 1, 1e-5);

    /* bool attn_mask 3-D [N*H, Lq, Lk], batch-major */
    TA_CHECK_OK(ta_tensor_zeros(&m3, 3, s3));
    for (int64_t x = 0; x < N * H * Lq * Lk; x++) ((float *)m3.data)[x] = bits[x] == 1;
    for (int64_t x = 0; x < N * H * Lq * Lk; x++) b[x] = ((float *)m3.data)[x] != 0.0f ? -INFINITY : 0.0;
    o.mask = &m3;
    ta_test_layer_check(l, &q, &k, &v, &o, b, 2, 1e-5);

    /* float attn_mask, additive */
    TA_CHECK_OK(ta_tensor_empty(&mf, 2, s2));
    TA_CHECK_OK(ta_rand_uniform(&mf, -3.0f, 1.0f, 81));
    ((float *)mf.data)[3] = -INFINITY;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = ((float *)mf.data)[i * Lk + j];
    ta_attention_opts of = {.mask = &mf, .mask_mode = TA_MASK_ADDITIVE};
    ta_test_layer_check(l, &q, &k, &v, &of, b, 1, 1e-5);

    /* key_padding_mask bool [N, Lk], True = ignore: a suffix (key lengths) ... */
    TA_CHECK_OK(ta_tensor_zeros(&kpm, 2, sk));
    const int64_t len[2] = {4, 10};
    for (int64_t n = 0; n < N; n++) for (int64_t j = 0; j < Lk; j++) ((float *)kpm.data)[n * Lk + j] = j >= len[n];
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = j >= len[n] ? -INFINITY : 0.0;
    ta_attention_opts ok = {.key_padding_mask = &kpm, .key_padding_mode = TA_MASK_BLOCK};
    ta_test_layer_check(l, &q, &k, &v, &ok, b, 1, 1e-5);
    /* ... combined with the float attn_mask (torch: masked_fill(kpm, -inf)) ... */
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = j >= len[n] ? -INFINITY : ((float *)mf.data)[i * Lk + j];
    ok.mask = &mf;
    ok.mask_mode = TA_MASK_ADDITIVE;
    ta_test_layer_check(l, &q, &k, &v, &ok, b, 2, 1e-5);
    /* ... a non-suffix pattern with the 3-D bool mask (logical_or) and causal */
    ((float *)kpm.data)[1] = 1.0f;
    ((float *)kpm.data)[Lk + 5] = 1.0f;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++) {
            int blocked = ((float *)kpm.data)[n * Lk + j] != 0.0f ||
                          ((float *)m3.data)[((n * H + h) * Lq + i) * Lk + j] != 0.0f || j > i;
            B4(b, n, h, i, j) = blocked ? -INFINITY : 0.0;
        }
    ta_attention_opts oall = {.mask = &m3, .mask_mode = TA_MASK_BLOCK, .key_padding_mask = &kpm,
                              .key_padding_mode = TA_MASK_BLOCK, .causal = TA_CAUSAL_TOP_LEFT};
    ta_test_layer_check(l, &q, &k, &v, &oall, b, 1, 1e-5);
    /* float key_padding_mask, additive */
    TA_CHECK_OK(ta_rand_uniform(&kpm, -2.0f, 2.0f, 82));
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = ((float *)kpm.data)[n * Lk + j] + ((float *)mf.data)[i * Lk + j];
    ta_attention_opts oaf = {.mask = &mf, .mask_mode = TA_MASK_ADDITIVE, .key_padding_mask = &kpm,
                             .key_padding_mode = TA_MASK_ADDITIVE};
    ta_test_layer_check(l, &q, &k, &v, &oaf, b, 1, 1e-5);

    free(b);
    ta_tensor_free(&m2); ta_tensor_free(&m3); ta_tensor_free(&mf); ta_tensor_free(&kpm);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

/* Bottom-right causal cross attention (queries that continue a cached sequence): query i
 * sees keys j <= i + Lk - Lq, in both layouts. */
static void test_causal_bottom_right_cross(void **state)
{
    (void)state;
    const int64_t N = 2, H = 4, Lq = 5, Lk = 13, E = 32;
    ta_tensor q = ta_test_randn3(N, Lq, E, 91), k = ta_test_randn3(N, Lk, E, 92), v = ta_test_randn3(N, Lk, E, 93);
    double *b = ta_test_bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t j = i + Lk - Lq + 1; j < Lk; j++) B4(b, n, h, i, j) = -INFINITY;
    ta_attention_opts oc = {.causal = TA_CAUSAL_BOTTOM_RIGHT};
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *l;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, E, H, 94));
        ta_test_layer_check(l, &q, &k, &v, &oc, b, 1, 1e-5);
        ta_attention_free(l);
    }
    free(b);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
}

static void test_torch_causal_and_fully_blocked_rows(void **state)
{
    (void)state;
    const int64_t N = 2, H = 8, Lq = 13, Lk = 13, E = 64;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, E, H, 10));
    ta_tensor ob;
    TA_CHECK_OK(ta_attention_param(&ob, l, "out_proj.bias"));
    TA_CHECK_OK(ta_rand_uniform(&ob, -1.0f, 1.0f, 83));
    ta_tensor x = ta_test_randn3(N, Lq, E, 71);
    double *b = ta_test_bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = i + 1; j < Lk; j++) B4(b, n, h, i, j) = -INFINITY;
    ta_attention_opts oc = {.causal = TA_CAUSAL_TOP_LEFT};
    ta_test_layer_check(l, &x, &x, &x, &oc, b, 1, 1e-5);
    /* A row blocked everywhere: torch gives NaN, we give out_proj.bias and weights 0. */
    int64_t s2[2] = {Lq, Lk};
    ta_tensor m;
    TA_CHECK_OK(ta_tensor_zeros(&m, 2, s2));
    for (int64_t j = 0; j < Lk; j++) ((float *)m.data)[4 * Lk + j] = 1.0f;
    ta_attention_opts om = {.mask = &m, .mask_mode = TA_MASK_BLOCK};
    for (int64_t x2 = 0; x2 < N * H * Lq * Lk; x2++) b[x2] = 0.0;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t j = 0; j < Lk; j++) B4(b, n, h, 4, j) = -INFINITY;
    ta_test_layer_check(l, &x, &x, &x, &om, b, 1, 1e-5);
    ta_tensor out;
    int64_t os[3] = {N, Lq, E};
    TA_CHECK_OK(ta_tensor_empty(&out, 3, os));
    TA_CHECK_OK(ta_attention_forward(&out, l, &x, &x, &x, &om));
    for (int64_t n = 0; n < N; n++)
        for (int64_t e = 0; e < E; e++)
            assert_true(((float *)out.data)[(n * Lq + 4) * E + e] == ((float *)ob.data)[e]);
    ta_tensor_free(&out);
    ta_tensor_free(&m);
    free(b);
    ta_tensor_free(&x);
    ta_attention_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_no_mask_self_and_cross),
        cmocka_unit_test(test_torch_every_mask_kind),
        cmocka_unit_test(test_causal_bottom_right_cross),
        cmocka_unit_test(test_torch_causal_and_fully_blocked_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
