/* ta-test: all-isas
 * ta_sdpa_backward's argument checks: every error path with its status and message
 * (naming ta_sdpa_backward) and the gradient outputs untouched; and O as an input that
 * may be a broadcast view. */
#include "ta_test.h"
#include "sdpa_grad_oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- (d) error paths */

static void test_errors(void **state)
{
    (void)state;
    const cfg c = {"err", 2, 4, 2, 7, 7, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0};
    prob p;
    ta_test_grad_setup(&p, &c, 9);
    const char *fn = "ta_sdpa_backward: ";
    ta_tensor *dQ = &p.dQ, *dK = &p.dK, *dV = &p.dV;
    const ta_tensor *dO = &p.dO, *Q = &p.Q, *K = &p.K, *V = &p.V, *O = &p.O, *L = &p.L;
    ta_sdpa_opts o = {0};
    TA_CHECK_OK(ta_tensor_fill(dQ, 5.0f));
    TA_CHECK_OK(ta_tensor_fill(dK, 5.0f));
    TA_CHECK_OK(ta_tensor_fill(dV, 5.0f));

    ta_tensor bad = {0}, bad2 = {0}, bad3 = {0};
    char msg[256];
#define EXPECT(call, code, needle)                                                     \
    do {                                                                               \
        TA_CHECK_ERR(call, code, needle);                                              \
        assert_non_null(strstr(ta_last_error(), fn));                                  \
    } while (0)

    EXPECT(ta_sdpa_backward(NULL, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dQ is NULL");
    EXPECT(ta_sdpa_backward(dQ, NULL, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dK is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, NULL, dO, Q, K, V, O, L, &o), TA_EINVAL, "dV is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, NULL, Q, K, V, O, L, &o), TA_EINVAL, "dO is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, NULL, K, V, O, L, &o), TA_EINVAL, "Q is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, NULL, L, &o), TA_EINVAL, "O is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, NULL, &o), TA_EINVAL, "lse is NULL");
    /* options the backward refuses */
    ta_tensor W = {0};
    int64_t kl[2] = {3, 8};
    const int64_t ms[2] = {3, 7};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 2, ms));
    const struct {
        ta_sdpa_opts opts;
        ta_status code;
        const char *needle;
    } bad_opts[] = {
        {{.weights = &W}, TA_EINVAL, "opts->weights must be NULL"},
        {{.lse = &p.L}, TA_EINVAL, "opts->lse must be NULL"},
        {{.path = (ta_sdpa_path)7}, TA_EINVAL, "opts->path = 7"},
        {{.scale = INFINITY}, TA_EINVAL, "opts->scale must be finite"},
        {{.key_lengths = kl}, TA_EINVAL, "key_lengths[1] = 8"},
        {{.mask = &bad}, TA_ESHAPE, "does not broadcast"},
    };
    for (size_t i = 0; i < sizeof bad_opts / sizeof *bad_opts; i++)
        EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, L, &bad_opts[i].opts), bad_opts[i].code,
               bad_opts[i].needle);
    ta_tensor_free(&bad);

    /* shapes */
    const int64_t k32[4] = {2, 2, 7, 32};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, k32));
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, &bad, V, O, L, &o), TA_ESHAPE, "K has head_dim 32 but Q has 16");
    ta_tensor_free(&bad);
    const int64_t o8[4] = {2, 4, 7, 8};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, o8));
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, &bad, L, &o), TA_ESHAPE, "O has shape [2, 4, 7, 8]");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, &bad, Q, K, V, O, L, &o), TA_ESHAPE,
           "dO has shape [2, 4, 7, 8], expected [B, H, Lq, Dv] = [2, 4, 7, 16]");
    ta_tensor_free(&bad);
    const int64_t l2[3] = {2, 4, 6};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 3, l2));
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, &bad, &o), TA_ESHAPE,
           "lse has shape [2, 4, 6], expected [B, H, Lq] = [2, 4, 7]");
    ta_tensor_free(&bad);
    const int64_t k4[4] = {2, 4, 7, 16};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, k4));
    EXPECT(ta_sdpa_backward(dQ, &bad, dV, dO, Q, K, V, O, L, &o), TA_ESHAPE,
           "dK has shape [2, 4, 7, 16], expected [B, Hkv, Lk, D] = [2, 2, 7, 16]");
    EXPECT(ta_sdpa_backward(dQ, dK, &bad, dO, Q, K, V, O, L, &o), TA_ESHAPE,
           "dV has shape [2, 4, 7, 16], expected [B, Hkv, Lk, Dv] = [2, 2, 7, 16]");
    ta_tensor_free(&bad);
    const int64_t q3[4] = {2, 4, 7, 3};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, q3));
    EXPECT(ta_sdpa_backward(&bad, dK, dV, dO, Q, K, V, O, L, &o), TA_ESHAPE,
           "dQ has shape [2, 4, 7, 3], expected [B, H, Lq, D] = [2, 4, 7, 16]");
    ta_tensor_free(&bad);

    /* aliasing and overlap */
    const int64_t one[4] = {1, 1, 1, 1};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, one));
    bad2 = bad;
    bad2.owned = NULL;
    for (int d = 0; d < 4; d++) {
        bad2.shape[d] = p.dV.shape[d];
        bad2.stride[d] = 0;
    }
    EXPECT(ta_sdpa_backward(dQ, dK, &bad2, dO, Q, K, V, O, L, &o), TA_EINVAL, "dV has stride 0");
    ta_tensor_free(&bad);
    bad3 = p.sQ; /* dQ writing into Q's memory */
    bad3.owned = NULL;
    EXPECT(ta_sdpa_backward(&bad3, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dQ overlaps Q");
    bad3 = p.sdO;
    bad3.owned = NULL;
    EXPECT(ta_sdpa_backward(&bad3, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dQ overlaps dO");
    bad3 = p.dK;
    EXPECT(ta_sdpa_backward(dQ, dK, &bad3, dO, Q, K, V, O, L, &o), TA_EINVAL, "dK overlaps dV");
    snprintf(msg, sizeof msg, "%s", ta_last_error());

    /* every failure above left the outputs as they were */
    double *x = ta_test_to_f64(dQ), *y = ta_test_to_f64(dK), *z = ta_test_to_f64(dV);
    for (int64_t e = 0; e < ta_tensor_numel(dQ); e++) assert_true(x[e] == 5.0);
    for (int64_t e = 0; e < ta_tensor_numel(dK); e++) assert_true(y[e] == 5.0 && z[e] == 5.0);
    free(x); free(y); free(z);
#undef EXPECT
    ta_test_grad_teardown(&p);
}

/* O is an input of the backward: a broadcast view of it (stride 0 over a batch whose
 * entries are equal) is accepted and gives the same gradients as the full tensor. */
static void test_broadcast_o_is_an_input(void **state)
{
    (void)state;
    const int64_t one[4] = {1, 2, 5, 8}, two[4] = {2, 2, 5, 8}, lshape[3] = {2, 2, 5};
    ta_tensor q1, k1, v1, q, k, v, o, lse, dO, g[6];
    TA_CHECK_OK(ta_tensor_empty(&q1, 4, one)); TA_CHECK_OK(ta_randn(&q1, 1));
    TA_CHECK_OK(ta_tensor_empty(&k1, 4, one)); TA_CHECK_OK(ta_randn(&k1, 2));
    TA_CHECK_OK(ta_tensor_empty(&v1, 4, one)); TA_CHECK_OK(ta_randn(&v1, 3));
    /* batch entries equal: views of the single-batch tensors with batch stride 0 */
    const int64_t bst[4] = {0, 40, 8, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&q, q1.data, 4, two, bst));
    TA_CHECK_OK(ta_tensor_from_buffer(&k, k1.data, 4, two, bst));
    TA_CHECK_OK(ta_tensor_from_buffer(&v, v1.data, 4, two, bst));
    TA_CHECK_OK(ta_tensor_empty(&o, 4, two));
    TA_CHECK_OK(ta_tensor_empty(&lse, 3, lshape));
    TA_CHECK_OK(ta_tensor_empty(&dO, 4, two)); TA_CHECK_OK(ta_randn(&dO, 4));
    ta_sdpa_opts fo = {.causal = TA_CAUSAL_TOP_LEFT, .lse = &lse};
    TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &fo));
    ta_tensor ob;
    TA_CHECK_OK(ta_tensor_from_buffer(&ob, o.data, 4, two, bst)); /* batch 0, broadcast */
    for (int i = 0; i < 6; i++) TA_CHECK_OK(ta_tensor_empty(&g[i], 4, two));
    ta_sdpa_opts bo = {.causal = TA_CAUSAL_TOP_LEFT};
    TA_CHECK_OK(ta_sdpa_backward(&g[0], &g[1], &g[2], &dO, &q, &k, &v, &o, &lse, &bo));
    TA_CHECK_OK(ta_sdpa_backward(&g[3], &g[4], &g[5], &dO, &q, &k, &v, &ob, &lse, &bo));
    for (int i = 0; i < 3; i++)
        assert_memory_equal(g[i].data, g[i + 3].data, sizeof(float) * 160);
    for (int i = 0; i < 6; i++) ta_tensor_free(&g[i]);
    ta_tensor_free(&q1); ta_tensor_free(&k1); ta_tensor_free(&v1); ta_tensor_free(&o);
    ta_tensor_free(&lse); ta_tensor_free(&dO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_broadcast_o_is_an_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
