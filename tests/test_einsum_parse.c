/* ta-test: all-isas -- ta_einsum's spec and argument checks: every error path with its
 * status and message, outputs untouched and nothing allocated by a failing call; and
 * ta_einsum_shape, implicit outputs in torch 1.13's order included. */
#include "ta_test.h"
#include "einsum_oracle.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------- (d) errors */

static ta_tensor zeros(int nd, const int64_t *shape)
{
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_zeros(&t, nd, shape));
    return t;
}

static void test_errors(void **state)
{
    (void)state;
    int64_t s23[2] = {2, 3}, s34[2] = {3, 4}, s45[2] = {4, 5}, s33[2] = {3, 3};
    int64_t s3[1] = {3}, s233[3] = {2, 3, 3}, s43[2] = {4, 3}, s11111[5] = {1, 1, 1, 1, 1};
    ta_tensor a23 = zeros(2, s23), a34 = zeros(2, s34), a45 = zeros(2, s45), a33 = zeros(2, s33);
    ta_tensor a3 = zeros(1, s3), a233 = zeros(3, s233), a43 = zeros(2, s43), o5 = zeros(5, s11111);
    ta_tensor out = {0};

    TA_CHECK_ERR(ta_einsum(&out, NULL, &a23, &a34), TA_EINVAL, "spec is NULL");
    TA_CHECK_ERR(ta_einsum(NULL, "ij,jk->ik", &a23, &a34), TA_EINVAL, "out is NULL");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", NULL, &a34), TA_EINVAL, "a is NULL");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &a23, NULL), TA_EINVAL, "b is NULL");
    TA_CHECK_ERR(ta_einsum1(&out, "ij->ji", NULL), TA_EINVAL, "a is NULL");
    /* sizes */
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &a23, &a45), TA_ESHAPE,
                 "index 'j' has size 3 in operand 0 but 4 in operand 1");
    TA_CHECK_ERR(ta_einsum(&out, "bhid,bhjd->bhij", &a233, &a233), TA_ESHAPE,
                 "operand 0 has 3 dims but the spec 'bhid' names 4");
    TA_CHECK_ERR(ta_einsum(&out, "bid,bhjd->bhij", &a233, &a233), TA_ESHAPE,
                 "operand 1 has 3 dims but the spec 'bhjd' names 4");
    TA_CHECK_ERR(ta_einsum1(&out, "ijk...->i", &a23), TA_ESHAPE, "names at least 3");
    TA_CHECK_ERR(ta_einsum1(&out, "ii->i", &a23), TA_ESHAPE, "index 'i' is repeated");
    TA_CHECK_ERR(ta_einsum(&out, "...i,...i", &a23, &a43), TA_ESHAPE, "under '...'");
    /* spec syntax */
    TA_CHECK_ERR(ta_einsum(&out, "ij,j?->i", &a23, &a34), TA_EINVAL, "invalid character '?'");
    TA_CHECK_ERR(ta_einsum(&out, "ij,j1->i", &a23, &a34), TA_EINVAL, "letters a-z or A-Z");
    TA_CHECK_ERR(ta_einsum1(&out, "i\tj", &a23), TA_EINVAL, "invalid character");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->il", &a23, &a34), TA_EINVAL,
                 "output index 'l' does not appear");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ii", &a23, &a34), TA_EINVAL,
                 "output index 'i' appears more than once");
    TA_CHECK_ERR(ta_einsum(&out, "...i...,j", &a23, &a34), TA_EINVAL, "more than one '...'");
    TA_CHECK_ERR(ta_einsum1(&out, "i->...i...", &a3), TA_EINVAL, "more than one '...'");
    TA_CHECK_ERR(ta_einsum(&out, "i.j,jk", &a23, &a34), TA_EINVAL, "not part of an ellipsis");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->i->k", &a23, &a34), TA_EINVAL, "more than one '->'");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->i,k", &a23, &a34), TA_EINVAL, "after '->'");
    TA_CHECK_ERR(ta_einsum1(&out, "ij- >i", &a23), TA_EINVAL, "invalid character '-'");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk,kl->il", &a23, &a34), TA_EINVAL, "more than two operands");
    /* operand count */
    TA_CHECK_ERR(ta_einsum(&out, "ij->ji", &a23, &a34), TA_EINVAL,
                 "names 1 operand but 2 were given");
    TA_CHECK_ERR(ta_einsum1(&out, "ij,jk->ik", &a23), TA_EINVAL,
                 "names 2 operands but 1 was given");
    /* dtype */
    ta_tensor f64 = a23;
    f64.dtype = TA_F64;
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &f64, &a34), TA_EUNSUPPORTED, "float32");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &a23, &f64), TA_EUNSUPPORTED, "b has dtype");
    /* too many result dims */
    TA_CHECK_ERR(ta_einsum(&out, "abcde,fghij", &o5, &o5), TA_EUNSUPPORTED,
                 "would have 10 dims");
    /* nothing was allocated by any failing call */
    assert_null(out.data);
    assert_null(out.owned);

    /* a pre-allocated out of the wrong shape, dtype or with a stride-0 dim: untouched */
    ta_tensor pre;
    TA_CHECK_OK(ta_tensor_full(&pre, 2, s33, 5.0f));
    TA_CHECK_ERR(ta_einsum(&pre, "ij,jk->ik", &a23, &a34), TA_ESHAPE,
                 "out has shape [3, 3] but the result of 'ij,jk->ik' has shape [2, 4]");
    ta_tensor bad = pre;
    bad.dtype = TA_F64;
    TA_CHECK_ERR(ta_einsum1(&bad, "ij->ji", &a33), TA_EUNSUPPORTED, "out has dtype");
    bad = pre;
    bad.stride[0] = 0;
    TA_CHECK_ERR(ta_einsum1(&bad, "ij->ji", &a33), TA_EINVAL, "stride 0 in dim 0");
    for (int i = 0; i < 9; i++) assert_true(((float *)pre.data)[i] == 5.0f);
    ta_tensor_free(&pre);

    /* ta_einsum_shape */
    int nd = -1;
    int64_t shape[TA_MAX_DIMS];
    TA_CHECK_ERR(ta_einsum_shape(NULL, shape, "ij,jk", &a23, &a34), TA_EINVAL, "ndim is NULL");
    TA_CHECK_ERR(ta_einsum_shape(&nd, NULL, "ij,jk", &a23, &a34), TA_EINVAL, "shape is NULL");
    TA_CHECK_ERR(ta_einsum_shape(&nd, shape, "ij,jk", &a23, NULL), TA_EINVAL,
                 "names 2 operands but 1 was given");
    TA_CHECK_ERR(ta_einsum_shape(&nd, shape, "ij,jk", &a23, &a45), TA_ESHAPE, "index 'j'");
    assert_int_equal(nd, -1);

    ta_tensor *all[] = {&a23, &a34, &a45, &a33, &a3, &a233, &a43, &o5};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static void expect_shape(const char *spec, const ta_tensor *a, const ta_tensor *b, int nd,
                         const int64_t *want)
{
    int got_nd;
    int64_t got[TA_MAX_DIMS];
    TA_CHECK_OK(ta_einsum_shape(&got_nd, got, spec, a, b));
    if (got_nd != nd) fail_msg("%s: ndim %d, expected %d", spec, got_nd, nd);
    for (int d = 0; d < nd; d++)
        if (got[d] != want[d])
            fail_msg("%s: dim %d is %lld, expected %lld", spec, d, (long long)got[d],
                     (long long)want[d]);
}

static void test_shape(void **state)
{
    (void)state;
    int64_t s2357[4] = {2, 3, 5, 7}, s2367[4] = {2, 3, 6, 7}, s23[2] = {2, 3};
    int64_t s234[3] = {2, 3, 4}, s345[3] = {3, 4, 5}, s1[1] = {1}, s4[1] = {4}, s33[2] = {3, 3};
    ta_tensor m33 = zeros(2, s33), q = zeros(4, s2357), k = zeros(4, s2367), m = zeros(2, s23);
    ta_tensor x = zeros(3, s234), y = zeros(3, s345), one = zeros(1, s1), four = zeros(1, s4);
    ta_tensor sc = zeros(0, NULL);
    expect_shape("bhid,bhjd->bhij", &q, &k, 4, (int64_t[]){2, 3, 5, 6});
    /* implicit outputs follow torch 1.13: character-code order, uppercase first */
    expect_shape("ba", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("bA", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("Ab", &m, NULL, 2, (int64_t[]){2, 3});
    expect_shape("aB", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("ii", &m33, NULL, 0, NULL);
    expect_shape("ii->i", &m33, NULL, 1, (int64_t[]){3});
    expect_shape("ij...", &x, NULL, 3, (int64_t[]){4, 2, 3});
    expect_shape("a...,...b", &x, &y, 4, (int64_t[]){3, 4, 2, 5});
    expect_shape("i...->i", &x, NULL, 1, (int64_t[]){2});
    expect_shape("ij->...ij", &m, NULL, 2, (int64_t[]){2, 3});
    expect_shape("i,i", &four, &one, 0, NULL);
    expect_shape("i,i->i", &one, &four, 1, (int64_t[]){4});
    expect_shape(" i j -> j i ", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("", &sc, NULL, 0, NULL);
    expect_shape(",", &sc, &sc, 0, NULL);
    ta_tensor *all[] = {&q, &k, &m, &x, &y, &one, &four, &sc, &m33};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
