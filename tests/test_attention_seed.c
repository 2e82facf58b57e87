/* ta-test: all-isas
 * The seed layout (the seed's SelfAttention: per-head Linear(D, D) without bias,
 * masked_fill(mask == 0, -1e20) before the 1/sqrt(D) scaling) against its float64
 * oracle: the seed's own example, cross attention, a tril mask as a tensor, as the
 * causal flag and in block mode, padding masks with fully masked rows (uniform weights),
 * key padding masks, and a mask with padding combined. */
#include "ta_test.h"
#include "layer_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------- seed */

static void test_seed_example_self_attention(void **state)
{
    (void)state;
    /* The seed's example: embed 8, heads 2, batch 1, seq 4, x used for all three. */
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 42));
    ta_tensor x;
    int64_t s[3] = {1, 4, 8};
    TA_CHECK_OK(ta_tensor_empty(&x, 3, s));
    TA_CHECK_OK(ta_rand(&x, 7)); /* torch.rand */
    ta_test_layer_check(l, &x, &x, &x, NULL, NULL, 0, 1e-6);
    ta_test_layer_check(l, &x, &x, &x, NULL, NULL, 1, 1e-6);
    ta_tensor_free(&x);
    ta_attention_free(l);
}

static void test_seed_large_cross_attention(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 64, 8, 3));
    ta_tensor q = ta_test_randn3(3, 7, 64, 11), k = ta_test_randn3(3, 13, 64, 12), v = ta_test_randn3(3, 13, 64, 13);
    ta_test_layer_check_weights(l, &q, &k, &v, NULL, NULL, 1e-5);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

static void test_seed_causal_tril_mask(void **state)
{
    (void)state;
    const int64_t N = 2, H = 8, Lq = 17, Lk = 17, E = 64;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, E, H, 5));
    ta_tensor x = ta_test_randn3(N, Lq, E, 21);
    /* mask = torch.tril(torch.ones(L, L)): nonzero = keep */
    int64_t ms[2] = {Lq, Lk};
    ta_tensor m;
    TA_CHECK_OK(ta_tensor_ones(&m, 2, ms));
    TA_CHECK_OK(ta_tensor_tril(&m, 0));
    double *b = ta_test_bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = i + 1; j < Lk; j++) B4(b, n, h, i, j) = -INFINITY;
    ta_attention_opts o = {.mask = &m, .mask_mode = TA_MASK_KEEP};
    ta_test_layer_check(l, &x, &x, &x, &o, b, 1, 1e-5);
    /* the same through the causal flag, and through the block convention (triu(1)) */
    ta_attention_opts oc = {.causal = TA_CAUSAL_TOP_LEFT};
    ta_test_layer_check(l, &x, &x, &x, &oc, b, 2, 1e-5);
    TA_CHECK_OK(ta_tensor_fill(&m, 1.0f));
    TA_CHECK_OK(ta_tensor_triu(&m, 1));
    ta_attention_opts ob = {.mask = &m, .mask_mode = TA_MASK_BLOCK};
    ta_test_layer_check(l, &x, &x, &x, &ob, b, 0, 1e-5);
    free(b);
    ta_tensor_free(&m);
    ta_tensor_free(&x);
    ta_attention_free(l);
}

static void test_seed_padding_mask_and_fully_masked_rows(void **state)
{
    (void)state;
    /* A padding mask [N, 1, 1, Lk] whose last batch masks every key: PyTorch's seed
     * layer then gives uniform weights 1/Lk over all keys (the -1e20 fill is finite). */
    const int64_t N = 3, H = 4, Lq = 5, Lk = 9, E = 32;
    const int64_t len[3] = {6, 9, 0};
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, E, H, 8));
    ta_tensor q = ta_test_randn3(N, Lq, E, 31), k = ta_test_randn3(N, Lk, E, 32), v = ta_test_randn3(N, Lk, E, 33);
    int64_t ms[4] = {N, 1, 1, Lk};
    ta_tensor m;
    TA_CHECK_OK(ta_tensor_zeros(&m, 4, ms));
    double *b = ta_test_bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < Lk; j++) {
            ((float *)m.data)[n * Lk + j] = j < len[n] ? 1.0f : 0.0f;
            for (int64_t h = 0; h < H; h++) for (int64_t i = 0; i < Lq; i++)
                B4(b, n, h, i, j) = j < len[n] ? 0.0 : -INFINITY;
        }
    ta_attention_opts o = {.mask = &m, .mask_mode = TA_MASK_KEEP};
    ta_test_layer_check(l, &q, &k, &v, &o, b, 1, 1e-5);
    ta_test_layer_check(l, &q, &k, &v, &o, b, 2, 1e-5);
    /* Check the uniform rows explicitly (not only through the oracle). */
    ta_tensor out, w;
    int64_t os[3] = {N, Lq, E}, ws[4] = {N, H, Lq, Lk};
    TA_CHECK_OK(ta_tensor_empty(&out, 3, os));
    TA_CHECK_OK(ta_tensor_empty(&w, 4, ws));
    o.weights = &w;
    TA_CHECK_OK(ta_attention_forward(&out, l, &q, &k, &v, &o));
    for (int64_t x = 0; x < H * Lq * Lk; x++)
        assert_true(fabsf(((float *)w.data)[2 * H * Lq * Lk + x] - 1.0f / 9.0f) <= 1e-7f);
    /* The same mask as a key_padding_mask [N, Lk] (a suffix pattern: key lengths), and
     * as a random keep pattern combined with a causal flag. */
    ta_tensor kpm;
    int64_t ks[2] = {N, Lk};
    TA_CHECK_OK(ta_tensor_empty(&kpm, 2, ks));
    memcpy(kpm.data, m.data, sizeof(float) * (size_t)(N * Lk));
    ta_attention_opts ok = {.key_padding_mask = &kpm, .key_padding_mode = TA_MASK_KEEP};
    ta_test_layer_check(l, &q, &k, &v, &ok, b, 1, 1e-5);
    ta_tensor x = ta_test_randn3(N, Lk, E, 34);
    int64_t pattern[3 * 9];
    TA_CHECK_OK(ta_randint(pattern, (size_t)(N * Lk), 0, 2, 99));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < Lk; j++) {
            int keep = n == 1 ? 0 : (int)pattern[n * Lk + j]; /* batch 1: all masked */
            ((float *)kpm.data)[n * Lk + j] = keep ? 0.0f : 1.0f; /* block mode */
        }
    const int64_t L = Lk, HL = H;
    double *bc = calloc((size_t)(N * HL * L * L), sizeof(double));
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < HL; h++)
        for (int64_t i = 0; i < L; i++) for (int64_t j = 0; j < L; j++)
            bc[((n * HL + h) * L + i) * L + j] =
                (j > i || ((float *)kpm.data)[n * L + j] != 0.0f) ? -INFINITY : 0.0;
    ta_attention_opts oc = {.key_padding_mask = &kpm, .key_padding_mode = TA_MASK_BLOCK, .causal = TA_CAUSAL_TOP_LEFT};
    ta_test_layer_check(l, &x, &x, &x, &oc, bc, 1, 1e-5);
    free(bc);
    ta_tensor_free(&x);
    ta_tensor_free(&kpm);
    ta_tensor_free(&out); ta_tensor_free(&w);
    free(b);
    ta_tensor_free(&m);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

static void test_seed_mask_and_padding_combined(void **state)
{
    (void)state;
    /* A tril mask plus a non-suffix key padding mask: the combined-mask path. */
    const int64_t N = 2, H = 2, Lq = 6, Lk = 6, E = 8;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, E, H, 9));
    ta_tensor x = ta_test_randn3(N, Lq, E, 41);
    int64_t ms[2] = {Lq, Lk}, ks[2] = {N, Lk};
    ta_tensor m, kpm;
    TA_CHECK_OK(ta_tensor_ones(&m, 2, ms));
    TA_CHECK_OK(ta_tensor_tril(&m, 0));
    TA_CHECK_OK(ta_tensor_ones(&kpm, 2, ks));
    float *kp = kpm.data;
    kp[0] = 0.0f; /* batch 0: key 0 masked, so row 0 (which sees key 0 only) is empty */
    kp[Lk + 2] = 0.0f;
    double *b = ta_test_bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = (j > i || kp[n * Lk + j] == 0.0f) ? -INFINITY : 0.0;
    ta_attention_opts o = {.mask = &m, .key_padding_mask = &kpm};
    ta_test_layer_check(l, &x, &x, &x, &o, b, 1, 1e-5);
    free(b);
    ta_tensor_free(&m); ta_tensor_free(&kpm); ta_tensor_free(&x);
    ta_attention_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_example_self_attention),
        cmocka_unit_test(test_seed_large_cross_attention),
        cmocka_unit_test(test_seed_causal_tril_mask),
        cmocka_unit_test(test_seed_padding_mask_and_fully_masked_rows),
        cmocka_unit_test(test_seed_mask_and_padding_combined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
