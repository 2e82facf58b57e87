/* Random numbers: Philox known answers (Random123's published vectors), independence
 * from strides and thread counts, and distribution moments. */
#include "ta_test.h"
#include "core/rng.h"

#include <math.h>
#include <stdlib.h>

static void test_philox_known_answers(void **state)
{
    (void)state;
    /* Random123 kat_vectors: philox4x32 10 rounds */
    uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
    ta_philox4 r = ta_philox4x32_10(c0, k0);
    assert_int_equal(r.v[0], 0x6627e8d5u);
    assert_int_equal(r.v[1], 0xe169c58du);
    assert_int_equal(r.v[2], 0xbc57ac4cu);
    assert_int_equal(r.v[3], 0x9b00dbd8u);
    uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    uint32_t k1[2] = {0xffffffffu, 0xffffffffu};
    r = ta_philox4x32_10(c1, k1);
    assert_int_equal(r.v[0], 0x408f276du);
    assert_int_equal(r.v[1], 0x41c83b0eu);
    assert_int_equal(r.v[2], 0xa20bc7c6u);
    assert_int_equal(r.v[3], 0x6d5451fdu);
    uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
    uint32_t k2[2] = {0xa4093822u, 0x299f31d0u};
    r = ta_philox4x32_10(c2, k2);
    assert_int_equal(r.v[0], 0xd16cfe09u);
    assert_int_equal(r.v[1], 0x94fdccebu);
    assert_int_equal(r.v[2], 0x5001e420u);
    assert_int_equal(r.v[3], 0x24126ea1u);
}

static void test_same_values_any_threads_and_strides(void **state)
{
    (void)state;
    int64_t shape[2] = {300, 701}; /* > 65536 elements: the parallel path */
    ta_tensor a, b, bt, c;
    TA_CHECK_OK(ta_tensor_empty(&a, 2, shape));
    TA_CHECK_OK(ta_tensor_empty(&c, 2, shape));
    TA_CHECK_OK(ta_tensor_empty(&b, 2, (int64_t[]){701, 300}));
    TA_CHECK_OK(ta_set_num_threads(1));
    TA_CHECK_OK(ta_randn(&a, 42));
    TA_CHECK_OK(ta_set_num_threads(2));
    TA_CHECK_OK(ta_randn(&c, 42));
    assert_memory_equal(a.data, c.data, sizeof(float) * 300 * 701);
    /* writing through a transposed view gives element (i, j) the same value */
    TA_CHECK_OK(ta_tensor_transpose(&bt, &b, 0, 1));
    TA_CHECK_OK(ta_randn(&bt, 42));
    for (int64_t i = 0; i < 300; i += 7)
        for (int64_t j = 0; j < 701; j += 5)
            assert_true(*ta_tensor_at(&a, (int64_t[]){i, j}) == *ta_tensor_at(&bt, (int64_t[]){i, j}));
    TA_CHECK_OK(ta_randn(&c, 43));
    assert_true(memcmp(a.data, c.data, sizeof(float) * 300 * 701) != 0);
    ta_tensor_free(&a);
    ta_tensor_free(&b);
    ta_tensor_free(&c);
}

static void moments(const ta_tensor *t, double *mean, double *var, double *lo, double *hi)
{
    const float *p = t->data;
    int64_t n = ta_tensor_numel(t);
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        s += p[i];
        s2 += (double)p[i] * p[i];
        if (p[i] < *lo) *lo = p[i];
        if (p[i] > *hi) *hi = p[i];
    }
    *mean = s / (double)n;
    *var = s2 / (double)n - *mean * *mean;
}

static void test_distributions(void **state)
{
    (void)state;
    int64_t n = 1 << 20;
    ta_tensor t;
    double mean, var, lo, hi;
    TA_CHECK_OK(ta_tensor_empty(&t, 1, &n));
    /* standard errors at n = 2^20: mean 0.001, variance ~0.0014 */
    TA_CHECK_OK(ta_randn(&t, 7));
    moments(&t, &mean, &var, &lo, &hi);
    assert_true(fabs(mean) < 0.005);
    assert_true(fabs(var - 1.0) < 0.01);
    assert_true(lo < -4.0 && hi > 4.0 && lo > -7.0 && hi < 7.0);
    TA_CHECK_OK(ta_rand(&t, 7));
    moments(&t, &mean, &var, &lo, &hi);
    assert_true(fabs(mean - 0.5) < 0.002);
    assert_true(fabs(var - 1.0 / 12.0) < 0.002);
    assert_true(lo >= 0.0 && hi < 1.0);
    TA_CHECK_OK(ta_rand_uniform(&t, -3.0f, 5.0f, 9));
    moments(&t, &mean, &var, &lo, &hi);
    assert_true(fabs(mean - 1.0) < 0.02);
    assert_true(lo >= -3.0 && hi < 5.0);
    TA_CHECK_ERR(ta_rand_uniform(&t, 1.0f, 1.0f, 9), TA_EINVAL, "low < high");
    TA_CHECK_ERR(ta_randn(NULL, 1), TA_EINVAL, "t is NULL");
    ta_tensor_free(&t);
    /* an expanded (stride-0) output: its elements alias, refused and untouched; an
     * empty one has none to alias */
    float cell[1] = {42.0f};
    ta_tensor ex;
    TA_CHECK_OK(ta_tensor_from_buffer(&ex, cell, 2, (int64_t[]){3, 1}, (int64_t[]){0, 1}));
    TA_CHECK_ERR(ta_randn(&ex, 1), TA_EINVAL, "ta_randn: t has stride 0 in dim 0");
    TA_CHECK_ERR(ta_rand_uniform(&ex, 0.0f, 1.0f, 1), TA_EINVAL, "stride 0 in dim 0");
    assert_true(cell[0] == 42.0f);
    TA_CHECK_OK(ta_tensor_from_buffer(&ex, cell, 2, (int64_t[]){3, 0}, (int64_t[]){0, 0}));
    TA_CHECK_OK(ta_randn(&ex, 1));
}

static void test_randint(void **state)
{
    (void)state;
    enum { N = 60000 };
    int64_t *v = malloc(sizeof(int64_t) * N), *w = malloc(sizeof(int64_t) * N);
    int counts[6] = {0};
    TA_CHECK_OK(ta_randint(v, N, -2, 4, 11));
    TA_CHECK_OK(ta_randint(w, N, -2, 4, 11));
    assert_memory_equal(v, w, sizeof(int64_t) * N);
    for (int i = 0; i < N; i++) {
        assert_true(v[i] >= -2 && v[i] < 4);
        counts[v[i] + 2]++;
    }
    for (int k = 0; k < 6; k++) assert_true(abs(counts[k] - N / 6) < 500); /* ~5 sigma */
    TA_CHECK_ERR(ta_randint(v, N, 4, 4, 1), TA_EINVAL, "low < high");
    free(v);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_same_values_any_threads_and_strides),
        cmocka_unit_test(test_distributions),
        cmocka_unit_test(test_randint),
    };
    return cmocka_run_group_tests_name("rng", tests, NULL, NULL);
}
