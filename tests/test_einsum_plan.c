/* ta-test: all-isas -- how ta_einsum runs a contraction, checked against the naive
 * float64 einsum of tests/support/einsum_oracle.c: the seed's four contractions as one
 * GEMM with no copy of the inputs in every layout; copies (packing, reduction) only where
 * the strides force them, and said so in the plan; one and two threads bitwise equal;
 * pre-allocated strided, negative-stride and scalar outputs (gaps untouched). */
#include "ta_test.h"
#include "einsum_oracle.h"
#include "ops/einsum.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------- (b) the seed's contractions */

static void seed_case(const char *spec, int nd, const int64_t *sa, const int64_t *sb,
                      int64_t batch, int64_t m, int64_t n, int64_t k, int layout)
{
    rtensor a, b;
    rtensor_make(&a, nd, sa, layout);
    rtensor_make(&b, nd, sb, layout);
    ta_test_einsum_check_alloc(spec, &a.t, &b.t, NULL);
    ta_einsum_plan_info info;
    ta_einsum_last_plan(&info);
    if (info.path != TA_EINSUM_PATH_GEMM || info.packed || info.reduced || info.gemm_calls != 1)
        fail_msg("%s (layout %d): path %d, packed %d, reduced %d, gemm calls %d", spec, layout,
                 info.path, info.packed, info.reduced, info.gemm_calls);
    assert_int_equal(ta_einsum_last_plan_packed(), 0);
    assert_int_equal(info.batch, batch);
    assert_int_equal(info.m, m);
    assert_int_equal(info.n, n);
    assert_int_equal(info.k, k);
    rtensor_free(&a);
    rtensor_free(&b);
}

static void test_seed_specs_zero_copy(void **state)
{
    (void)state;
    /* N=2, H=3, Lq=17, Lk=5, D=8, in every input layout but stride-0 expansion */
    int64_t q_nqhd[4] = {2, 17, 3, 8}, k_nkhd[4] = {2, 5, 3, 8};
    int64_t p_nhql[4] = {2, 3, 17, 5}, v_nlhd[4] = {2, 5, 3, 8};
    int64_t q_bhid[4] = {2, 3, 17, 8}, k_bhjd[4] = {2, 3, 5, 8};
    int64_t p_bhij[4] = {2, 3, 17, 5};
    for (int layout = L_CONTIG; layout < L_EXPANDED; layout++) {
        seed_case("nqhd,nkhd->nhqk", 4, q_nqhd, k_nkhd, 6, 17, 5, 8, layout);
        seed_case("nhql,nlhd->nqhd", 4, p_nhql, v_nlhd, 6, 17, 8, 5, layout);
        seed_case("bhid,bhjd->bhij", 4, q_bhid, k_bhjd, 6, 17, 5, 8, layout);
        seed_case("bhij,bhjd->bhid", 4, p_bhij, k_bhjd, 6, 17, 8, 5, layout);
    }
    /* contiguous [B,H,L,D]: batch and heads merge into one batch dim */
    rtensor a, b;
    rtensor_make(&a, 4, q_bhid, L_CONTIG);
    rtensor_make(&b, 4, k_bhjd, L_CONTIG);
    ta_tensor out = {0};
    TA_CHECK_OK(ta_einsum_alloc(&out, "bhid,bhjd->bhij", &a.t, &b.t));
    ta_einsum_plan_info info;
    ta_einsum_last_plan(&info);
    assert_int_equal(info.batch_ndim, 1);
    ta_tensor_free(&out);
    rtensor_free(&a);
    rtensor_free(&b);
}

/* The plan copies only when it must, and says so. */
static void test_plan_copies(void **state)
{
    (void)state;
    struct {
        const char *spec;
        int64_t sa[4], sb[4];
        int packed, reduced;
        ta_einsum_path path;
        int transposed;
    } cases[] = {
        /* (c, d) chain in a as c*D + d but in b as d*C*E*F + c*E*F: one must be packed */
        {"abcd,dcef->abef", {3, 4, 5, 6}, {6, 5, 7, 2}, 1, 0, TA_EINSUM_PATH_GEMM, 0},
        /* (c, d) merge into one K of 30 with no copy */
        {"abcd,cdef->abef", {3, 4, 5, 6}, {5, 6, 7, 2}, 0, 0, TA_EINSUM_PATH_GEMM, 0},
        /* i is summed in a alone: a is reduced first */
        {"ij,jk->k", {7, 5}, {5, 3}, 0, 1, TA_EINSUM_PATH_GEMM, 0},
        /* nothing contracted: a product loop */
        {"bi,bj->bij", {4, 5}, {4, 6}, 0, 0, TA_EINSUM_PATH_ELEMENTWISE, 0},
        /* only the output's M dim is unit stride: computed as C^T = B^T A^T */
        {"ij,jk->ki", {7, 5}, {5, 3}, 0, 0, TA_EINSUM_PATH_GEMM, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rtensor a, b;
        rtensor_make(&a, cases[c].sa[3] ? 4 : 2, cases[c].sa, L_CONTIG);
        rtensor_make(&b, cases[c].sb[3] ? 4 : 2, cases[c].sb, L_CONTIG);
        ta_test_einsum_check_alloc(cases[c].spec, &a.t, &b.t, NULL);
        ta_einsum_plan_info info;
        ta_einsum_last_plan(&info);
        if (info.packed != cases[c].packed || info.reduced != cases[c].reduced ||
            info.path != cases[c].path || info.transposed != cases[c].transposed)
            fail_msg("%s: packed %d reduced %d path %d transposed %d", cases[c].spec,
                     info.packed, info.reduced, info.path, info.transposed);
        rtensor_free(&a);
        rtensor_free(&b);
    }
}

/* -------------------------------------------------------- (c) threads */

static void test_threads_bitwise(void **state)
{
    (void)state;
    struct {
        const char *spec;
        int nops, nd[2];
        int64_t shape[2][4];
    } cases[] = {
        {"bhid,bhjd->bhij", 2, {4, 4}, {{2, 3, 65, 32}, {2, 3, 65, 32}}},
        {"nqhd,nkhd->nhqk", 2, {4, 4}, {{2, 65, 3, 32}, {2, 33, 3, 32}}},
        {"abcd,dcef->abef", 2, {4, 4}, {{3, 17, 9, 11}, {11, 9, 17, 3}}},
        {"ij,jk->k", 2, {2, 2}, {{300, 129}, {129, 65}}},
        {"bi,bj->bij", 2, {2, 2}, {{8, 129}, {8, 257}}},
        {"ij->i", 1, {2, 0}, {{300, 301}, {0}}},
        {"ij->j", 1, {2, 0}, {{300, 301}, {0}}},
        {"ij->", 1, {2, 0}, {{300, 301}, {0}}},
        {"ijk->kji", 1, {3, 0}, {{40, 41, 42}, {0}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rtensor op[2];
        for (int k = 0; k < cases[c].nops; k++)
            rtensor_make(&op[k], cases[c].nd[k], cases[c].shape[k], L_PERMUTED);
        ta_tensor r[2] = {{0}, {0}};
        for (int t = 0; t < 2; t++) {
            TA_CHECK_OK(ta_set_num_threads(t + 1));
            if (cases[c].nops == 2) TA_CHECK_OK(ta_einsum_alloc(&r[t], cases[c].spec, &op[0].t, &op[1].t));
            else TA_CHECK_OK(ta_einsum1_alloc(&r[t], cases[c].spec, &op[0].t));
        }
        int64_t n = ta_tensor_numel(&r[0]);
        if (memcmp(r[0].data, r[1].data, (size_t)n * sizeof(float)) != 0)
            fail_msg("%s: 1 and 2 threads differ", cases[c].spec);
        ta_tensor_free(&r[0]);
        ta_tensor_free(&r[1]);
        for (int k = 0; k < cases[c].nops; k++) rtensor_free(&op[k]);
    }
    TA_CHECK_OK(ta_set_num_threads(2));
}

/* ------------------------------------------------ (e) out and shapes */

static void test_preallocated_out(void **state)
{
    (void)state;
    int64_t sa[2] = {17, 3}, sb[2] = {3, 129};
    rtensor a, b;
    rtensor_make(&a, 2, sa, L_CONTIG);
    rtensor_make(&b, 2, sb, L_PERMUTED);
    const ta_tensor *ops[2] = {&a.t, &b.t};
    oracle_result ref;
    ta_test_einsum_oracle(&ref, "ij,jk->ik", 2, ops);
    /* out [17, 129] stored transposed with a gap after every element: strides (2, 34) */
    float *buf = malloc(2 * 17 * 129 * sizeof(float));
    for (int i = 0; i < 2 * 17 * 129; i++) buf[i] = -777.0f;
    int64_t oshape[2] = {17, 129}, ostride[2] = {2, 34};
    ta_tensor out;
    TA_CHECK_OK(ta_tensor_from_buffer(&out, buf, 2, oshape, ostride));
    TA_CHECK_OK(ta_einsum(&out, "ij,jk->ik", &a.t, &b.t));
    assert_ptr_equal(out.data, buf);
    assert_null(out.owned);
    ta_test_einsum_check(&out, &ref, "ij,jk->ik into a strided out");
    for (int i = 1; i < 2 * 17 * 129; i += 2) assert_true(buf[i] == -777.0f);
    /* negative strides on the output too: flip dim 0 */
    ta_tensor flipped = out;
    flipped.data = buf + 16 * 2;
    flipped.stride[0] = -2;
    TA_CHECK_OK(ta_einsum(&flipped, "ij,jk->ik", &a.t, &b.t));
    ta_test_einsum_check(&flipped, &ref, "ij,jk->ik into a flipped out");
    ta_test_einsum_oracle_free(&ref);

    /* a scalar out, pre-allocated (ndim 0) */
    ta_tensor scalar;
    TA_CHECK_OK(ta_tensor_full(&scalar, 0, NULL, 123.0f));
    TA_CHECK_OK(ta_einsum1(&scalar, "ij->", &a.t));
    ta_test_einsum_oracle(&ref, "ij->", 1, ops);
    ta_test_einsum_check(&scalar, &ref, "ij-> into a scalar");
    ta_test_einsum_oracle_free(&ref);
    ta_tensor_free(&scalar);
    /* the one-operand form into a strided out */
    for (int i = 0; i < 2 * 17 * 129; i++) buf[i] = -777.0f;
    int64_t tshape[2] = {129, 3}, tstride[2] = {6, 2};
    TA_CHECK_OK(ta_tensor_from_buffer(&out, buf, 2, tshape, tstride));
    TA_CHECK_OK(ta_einsum1(&out, "jk->kj", &b.t));
    const ta_tensor *opb[1] = {&b.t};
    ta_test_einsum_oracle(&ref, "jk->kj", 1, opb);
    ta_test_einsum_check(&out, &ref, "jk->kj into a strided out");
    for (int i = 1; i < 129 * 6; i += 2) assert_true(buf[i] == -777.0f);
    ta_test_einsum_oracle_free(&ref);
    free(buf);
    rtensor_free(&a);
    rtensor_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_specs_zero_copy),
        cmocka_unit_test(test_plan_copies),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_preallocated_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
