/* ta-test: all-isas
 * Attention layers (both layouts) beyond the per-layout oracle checks: strided inputs
 * and a strided output, scratch reuse across shapes, bitwise equality over thread
 * counts and in place, zero sizes (no keys, no batch), and the forward's argument
 * errors with the output untouched. */
#include "ta_test.h"
#include "layer_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ strides, workspace, threads */

static void test_strided_inputs_and_output(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        const int64_t N = 3, L = 5, E = 24, H = 3;
        ta_attention *l;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, E, H, 12));
        /* queries stored [L, N, E] and viewed [N, L, E]; keys a slice with a step */
        int64_t sp[3] = {L, N, E}, sk[3] = {N, 2 * L + 1, E};
        ta_tensor qs, qv, ks, kv;
        TA_CHECK_OK(ta_tensor_empty(&qs, 3, sp));
        TA_CHECK_OK(ta_randn(&qs, 91));
        TA_CHECK_OK(ta_tensor_transpose(&qv, &qs, 0, 1));
        TA_CHECK_OK(ta_tensor_empty(&ks, 3, sk));
        TA_CHECK_OK(ta_randn(&ks, 92));
        TA_CHECK_OK(ta_tensor_slice(&kv, &ks, 1, 0, 2 * L + 1, 2)); /* 6 keys */
        ta_tensor vv = ta_test_randn3(N, 6, E, 93);
        ta_test_layer_check(l, &qv, &kv, &vv, NULL, NULL, 1, 1e-5);
        /* out as a transposed view: compare with a contiguous out */
        ta_tensor o1, o2s, o2;
        int64_t os[3] = {N, L, E}, ost[3] = {L, N, E};
        TA_CHECK_OK(ta_tensor_empty(&o1, 3, os));
        TA_CHECK_OK(ta_tensor_empty(&o2s, 3, ost));
        TA_CHECK_OK(ta_tensor_transpose(&o2, &o2s, 0, 1));
        TA_CHECK_OK(ta_attention_forward(&o1, l, &qv, &kv, &vv, NULL));
        TA_CHECK_OK(ta_attention_forward(&o2, l, &qv, &kv, &vv, NULL));
        int64_t idx[3];
        for (idx[0] = 0; idx[0] < N; idx[0]++) for (idx[1] = 0; idx[1] < L; idx[1]++)
            for (idx[2] = 0; idx[2] < E; idx[2]++)
                assert_true(*ta_tensor_at(&o1, idx) == *ta_tensor_at(&o2, idx));
        ta_tensor_free(&o1); ta_tensor_free(&o2s);
        ta_tensor_free(&qs); ta_tensor_free(&ks); ta_tensor_free(&vv);
        ta_attention_free(l);
    }
}

static void test_workspace_reuse_and_thread_invariance(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *l, *fresh;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, 32, 4, 13));
        TA_CHECK_OK(ta_attention_create(&fresh, (ta_layout)layout, 32, 4, 13));
        const int64_t lens[4] = {3, 19, 2, 19};
        for (int c = 0; c < 4; c++) {
            ta_tensor x = ta_test_randn3(2, lens[c], 32, 100 + (uint64_t)c), o1, o2, o3;
            int64_t os[3] = {2, lens[c], 32};
            TA_CHECK_OK(ta_tensor_empty(&o1, 3, os));
            TA_CHECK_OK(ta_tensor_empty(&o2, 3, os));
            TA_CHECK_OK(ta_tensor_empty(&o3, 3, os));
            ta_attention_opts oc = {.causal = TA_CAUSAL_TOP_LEFT};
            int nt = ta_get_num_threads();
            TA_CHECK_OK(ta_attention_forward(&o1, l, &x, &x, &x, &oc));
            ta_attention *f2;
            TA_CHECK_OK(ta_attention_create(&f2, (ta_layout)layout, 32, 4, 13));
            TA_CHECK_OK(ta_set_num_threads(1));
            TA_CHECK_OK(ta_attention_forward(&o2, f2, &x, &x, &x, &oc));
            TA_CHECK_OK(ta_set_num_threads(3));
            TA_CHECK_OK(ta_attention_forward(&o3, fresh, &x, &x, &x, &oc));
            TA_CHECK_OK(ta_set_num_threads(nt));
            assert_memory_equal(o1.data, o2.data, sizeof(float) * (size_t)(2 * lens[c] * 32));
            assert_memory_equal(o1.data, o3.data, sizeof(float) * (size_t)(2 * lens[c] * 32));
            /* in place: out is the input */
            TA_CHECK_OK(ta_attention_forward(&x, l, &x, &x, &x, &oc));
            assert_memory_equal(o1.data, x.data, sizeof(float) * (size_t)(2 * lens[c] * 32));
            ta_attention_free(f2);
            ta_tensor_free(&x); ta_tensor_free(&o1); ta_tensor_free(&o2); ta_tensor_free(&o3);
        }
        ta_attention_free(l);
        ta_attention_free(fresh);
    }
}

static void test_zero_sizes(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 1));
    ta_tensor q = ta_test_randn3(2, 3, 8, 1), k = ta_test_randn3(2, 0, 8, 2), out;
    int64_t os[3] = {2, 3, 8};
    TA_CHECK_OK(ta_tensor_empty(&out, 3, os));
    /* no keys: the softmax is empty and the einsum sums nothing: out = fc_out.bias */
    TA_CHECK_OK(ta_attention_forward(&out, l, &q, &k, &k, NULL));
    ta_tensor b;
    TA_CHECK_OK(ta_attention_param(&b, l, "fc_out.bias"));
    for (int64_t r = 0; r < 6; r++)
        for (int64_t e = 0; e < 8; e++) assert_true(((float *)out.data)[r * 8 + e] == ((float *)b.data)[e]);
    ta_tensor q0 = ta_test_randn3(0, 3, 8, 1), o0;
    int64_t os0[3] = {0, 3, 8};
    TA_CHECK_OK(ta_tensor_empty(&o0, 3, os0));
    TA_CHECK_OK(ta_attention_forward(&o0, l, &q0, &q0, &q0, NULL));
    ta_tensor_free(&q0); ta_tensor_free(&o0);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&out);
    ta_attention_free(l);
}

static void test_forward_errors(void **state)
{
    (void)state;
    ta_attention *l, *t;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 0));
    TA_CHECK_OK(ta_attention_create(&t, TA_LAYOUT_TORCH, 8, 2, 0));
    ta_tensor q = ta_test_randn3(2, 4, 8, 1), k = ta_test_randn3(2, 5, 8, 2), v6 = ta_test_randn3(2, 6, 8, 3);
    ta_tensor bad = ta_test_randn3(2, 4, 7, 4), k3 = ta_test_randn3(3, 5, 8, 5), out, w;
    int64_t os[3] = {2, 4, 8};
    TA_CHECK_OK(ta_tensor_full(&out, 3, os, 123.0f));
    const char *fn = "ta_attention_forward: ";
    (void)fn;
    TA_CHECK_ERR(ta_attention_forward(&out, l, &bad, &k, &k, NULL), TA_ESHAPE,
                 "ta_attention_forward: queries has shape [2, 4, 7], expected [N, L, 8] (embed_size 8)");
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k, &v6, NULL), TA_ESHAPE,
                 "keys has shape [2, 5, 8] but values has [2, 6, 8]");
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k3, &k3, NULL), TA_ESHAPE,
                 "keys has shape [3, 5, 8] but queries has [2, 4, 8] (batch sizes differ)");
    TA_CHECK_ERR(ta_attention_forward(&k, l, &q, &k, &k, NULL), TA_ESHAPE,
                 "out has shape [2, 5, 8], expected [N, Lq, E] = [2, 4, 8]");
    TA_CHECK_ERR(ta_attention_forward(NULL, l, &q, &k, &k, NULL), TA_EINVAL, "out is NULL");
    TA_CHECK_ERR(ta_attention_forward(&out, NULL, &q, &k, &k, NULL), TA_EINVAL, "layer is NULL");
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, NULL, &k, NULL), TA_EINVAL, "keys is NULL");
    /* masks */
    int64_t s33[2] = {3, 3}, s3[3] = {3, 4, 5}, s45[2] = {4, 5}, sk[2] = {2, 4};
    ta_tensor m33, m3, m45, kbad;
    TA_CHECK_OK(ta_tensor_ones(&m33, 2, s33));
    TA_CHECK_OK(ta_tensor_ones(&m3, 3, s3));
    TA_CHECK_OK(ta_tensor_ones(&m45, 2, s45));
    TA_CHECK_OK(ta_tensor_ones(&kbad, 2, sk));
    ta_attention_opts o = {.mask = &m33};
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k, &k, &o), TA_ESHAPE,
                 "mask has shape [3, 3], which does not broadcast to [N, H, Lq, Lk] = [2, 2, 4, 5]");
    o.mask = &m3;
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &o), TA_ESHAPE,
                 "mask has shape [3, 4, 5], but a 3-D attn_mask must be [N*H, Lq, Lk] = [4, 4, 5]");
    o.mask = &m45;
    o.mask_mode = TA_MASK_ADDITIVE;
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k, &k, &o), TA_EINVAL,
                 "the seed layout's mask is boolean");
    o.mask_mode = (ta_mask_mode)9;
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &o), TA_EINVAL, "mask_mode 9 is not a ta_mask_mode");
    ta_attention_opts ok = {.key_padding_mask = &kbad, .key_padding_mode = TA_MASK_BLOCK};
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &ok), TA_ESHAPE,
                 "key_padding_mask has shape [2, 4], expected [N, Lk] = [2, 5]");
    /* weights */
    int64_t ws[4] = {2, 2, 4, 4};
    TA_CHECK_OK(ta_tensor_empty(&w, 4, ws));
    ta_attention_opts ow = {.weights = &w};
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &ow), TA_ESHAPE,
                 "weights has shape [2, 2, 4, 4], expected [N, H, Lq, Lk] = [2, 2, 4, 5]");
    ow.average_weights = 1;
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &ow), TA_ESHAPE,
                 "expected [N, Lq, Lk] (averaged over heads) = [2, 4, 5]");
    /* out untouched by every failure */
    for (int i = 0; i < 64; i++) assert_true(((float *)out.data)[i] == 123.0f);
    ta_tensor_free(&m33); ta_tensor_free(&m3); ta_tensor_free(&m45); ta_tensor_free(&kbad);
    ta_tensor_free(&w);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v6); ta_tensor_free(&bad);
    ta_tensor_free(&k3); ta_tensor_free(&out);
    ta_attention_free(l);
    ta_attention_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strided_inputs_and_output),
        cmocka_unit_test(test_workspace_reuse_and_thread_invariance),
        cmocka_unit_test(test_zero_sizes),
        cmocka_unit_test(test_forward_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
