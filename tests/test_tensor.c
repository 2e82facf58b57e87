/* Tensors: constructors, views (reshape/permute/transpose/slice), copies, tril/triu,
 * and their error messages. The oracle is index arithmetic written out here. */
#include "ta_test.h"

#include <math.h>
#include <stdlib.h>

static void fill_iota(ta_tensor *t)
{
    float *p = t->data;
    for (int64_t i = 0; i < ta_tensor_numel(t); i++) p[i] = (float)i;
}

static void test_constructors(void **state)
{
    (void)state;
    int64_t shape[3] = {2, 3, 4};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_full(&t, 3, shape, 2.5f));
    assert_int_equal(t.ndim, 3);
    assert_int_equal(t.stride[0], 12);
    assert_int_equal(t.stride[1], 4);
    assert_int_equal(t.stride[2], 1);
    assert_int_equal(ta_tensor_numel(&t), 24);
    assert_true(ta_tensor_is_contiguous(&t));
    for (int i = 0; i < 24; i++) assert_true(((float *)t.data)[i] == 2.5f);
    assert_non_null(t.owned);
    ta_tensor_free(&t);
    assert_null(t.data);
    TA_CHECK_OK(ta_tensor_zeros(&t, 3, shape));
    for (int i = 0; i < 24; i++) assert_true(((float *)t.data)[i] == 0.0f);
    ta_tensor_free(&t);
    TA_CHECK_OK(ta_tensor_ones(&t, 3, shape));
    for (int i = 0; i < 24; i++) assert_true(((float *)t.data)[i] == 1.0f);
    ta_tensor_free(&t);
    /* 0-d tensor holds one element; empty dims are fine */
    TA_CHECK_OK(ta_tensor_full(&t, 0, NULL, 7.0f));
    assert_int_equal(ta_tensor_numel(&t), 1);
    assert_true(*(float *)t.data == 7.0f);
    ta_tensor_free(&t);
    int64_t empty[2] = {0, 5};
    TA_CHECK_OK(ta_tensor_empty(&t, 2, empty));
    assert_int_equal(ta_tensor_numel(&t), 0);
    ta_tensor_free(&t);
    /* a 0 dimension beside dimensions whose product passes INT64_MAX: a valid empty
     * tensor; its strides stop growing (make sanitize: no signed overflow; the fuzzer
     * found this through a .npy header) */
    int64_t wide[3] = {0, INT64_C(1) << 62, 4};
    TA_CHECK_OK(ta_tensor_empty(&t, 3, wide));
    assert_int_equal(ta_tensor_numel(&t), 0);
    assert_true(t.stride[2] == 1 && t.stride[1] == 4 && t.stride[0] == 4);
    ta_tensor_free(&t);
    ta_tensor_free(NULL);
}

static void test_constructor_errors(void **state)
{
    (void)state;
    ta_tensor t = {0};
    int64_t neg[2] = {2, -1}, huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 8};
    TA_CHECK_ERR(ta_tensor_empty(&t, 2, neg), TA_EINVAL, "shape[1] is negative");
    TA_CHECK_ERR(ta_tensor_empty(&t, 3, huge), TA_EINVAL, "too many elements");
    TA_CHECK_ERR(ta_tensor_empty(&t, 9, neg), TA_EINVAL, "ndim must be in [0, 8]");
    TA_CHECK_ERR(ta_tensor_empty(NULL, 2, neg), TA_EINVAL, "t is NULL");
    TA_CHECK_ERR(ta_tensor_from_buffer(&t, NULL, 2, (int64_t[]){2, 2}, NULL), TA_EINVAL,
                 "data is NULL");
    assert_null(t.data);
}

static void test_from_buffer_and_at(void **state)
{
    (void)state;
    float buf[12];
    for (int i = 0; i < 12; i++) buf[i] = (float)i;
    ta_tensor t;
    int64_t shape[2] = {3, 2}, strides[2] = {4, 2}; /* every other element of rows of 4 */
    TA_CHECK_OK(ta_tensor_from_buffer(&t, buf, 2, shape, strides));
    assert_null(t.owned);
    assert_false(ta_tensor_is_contiguous(&t));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 2; j++)
            assert_true(*ta_tensor_at(&t, (int64_t[]){i, j}) == (float)(4 * i + 2 * j));
    ta_tensor_free(&t); /* a view: must not free buf */
    assert_true(buf[11] == 11.0f);
}

static void test_permute_transpose(void **state)
{
    (void)state;
    int64_t shape[3] = {2, 3, 4};
    ta_tensor t, p, tr;
    TA_CHECK_OK(ta_tensor_empty(&t, 3, shape));
    fill_iota(&t);
    TA_CHECK_OK(ta_tensor_permute(&p, &t, (int[]){2, 0, 1}));
    assert_int_equal(p.shape[0], 4);
    assert_int_equal(p.shape[1], 2);
    assert_int_equal(p.shape[2], 3);
    assert_null(p.owned);
    for (int64_t a = 0; a < 4; a++)
        for (int64_t b = 0; b < 2; b++)
            for (int64_t c = 0; c < 3; c++)
                assert_true(*ta_tensor_at(&p, (int64_t[]){a, b, c}) == (float)(b * 12 + c * 4 + a));
    TA_CHECK_OK(ta_tensor_transpose(&tr, &t, -1, 0));
    assert_int_equal(tr.shape[0], 4);
    assert_int_equal(tr.shape[2], 2);
    assert_true(*ta_tensor_at(&tr, (int64_t[]){3, 1, 1}) == (float)(1 * 12 + 1 * 4 + 3));
    TA_CHECK_ERR(ta_tensor_permute(&p, &t, (int[]){0, 0, 1}), TA_EINVAL, "repeats dim 0");
    TA_CHECK_ERR(ta_tensor_permute(&p, &t, (int[]){0, 3, 1}), TA_EINVAL, "perm[1] = 3");
    TA_CHECK_ERR(ta_tensor_transpose(&p, &t, 0, 5), TA_EINVAL, "out of range");
    ta_tensor_free(&t);
}

static void test_slice(void **state)
{
    (void)state;
    int64_t shape[2] = {5, 7};
    ta_tensor t, s;
    TA_CHECK_OK(ta_tensor_empty(&t, 2, shape));
    fill_iota(&t);
    TA_CHECK_OK(ta_tensor_slice(&s, &t, 1, 1, -1, 2)); /* columns 1, 3, 5 */
    assert_int_equal(s.shape[1], 3);
    for (int64_t i = 0; i < 5; i++)
        for (int64_t j = 0; j < 3; j++)
            assert_true(*ta_tensor_at(&s, (int64_t[]){i, j}) == (float)(i * 7 + 1 + 2 * j));
    TA_CHECK_OK(ta_tensor_slice(&s, &t, 0, 10, 20, 1)); /* clamped: empty */
    assert_int_equal(s.shape[0], 0);
    TA_CHECK_OK(ta_tensor_slice(&s, &t, 0, -2, 100, 1)); /* last two rows */
    assert_int_equal(s.shape[0], 2);
    assert_true(*(float *)s.data == 21.0f);
    TA_CHECK_ERR(ta_tensor_slice(&s, &t, 0, 0, 1, 0), TA_EINVAL, "step must be >= 1");
    TA_CHECK_ERR(ta_tensor_slice(&s, &t, 2, 0, 1, 1), TA_EINVAL, "dim 2 out of range");
    ta_tensor_free(&t);
}

static void test_reshape(void **state)
{
    (void)state;
    int64_t shape[3] = {2, 3, 4};
    ta_tensor t, r, p, c;
    TA_CHECK_OK(ta_tensor_empty(&t, 3, shape));
    fill_iota(&t);
    TA_CHECK_OK(ta_tensor_reshape(&r, &t, 2, (int64_t[]){6, -1}));
    assert_int_equal(r.shape[1], 4);
    assert_true(*ta_tensor_at(&r, (int64_t[]){5, 3}) == 23.0f);
    TA_CHECK_OK(ta_tensor_reshape(&r, &t, 4, (int64_t[]){2, 1, 12, 1}));
    assert_true(*ta_tensor_at(&r, (int64_t[]){1, 0, 11, 0}) == 23.0f);
    /* a permuted view that still allows merging the two trailing dims of the view */
    TA_CHECK_OK(ta_tensor_permute(&p, &t, (int[]){1, 0, 2})); /* [3, 2, 4] */
    TA_CHECK_OK(ta_tensor_reshape(&r, &p, 3, (int64_t[]){3, 2, 4}));
    TA_CHECK_ERR(ta_tensor_reshape(&r, &p, 2, (int64_t[]){6, 4}), TA_ESHAPE, "call ta_tensor_contiguous");
    /* split a dim of a permuted view: [3, 2, 4] -> [3, 2, 2, 2] is a view */
    TA_CHECK_OK(ta_tensor_reshape(&r, &p, 4, (int64_t[]){3, 2, 2, 2}));
    for (int64_t a = 0; a < 3; a++)
        for (int64_t b = 0; b < 2; b++)
            for (int64_t k = 0; k < 4; k++)
                assert_true(*ta_tensor_at(&r, (int64_t[]){a, b, k / 2, k % 2}) ==
                            (float)(b * 12 + a * 4 + k));
    /* the contiguous copy then reshapes freely */
    TA_CHECK_OK(ta_tensor_contiguous(&c, &p));
    TA_CHECK_OK(ta_tensor_reshape(&r, &c, 2, (int64_t[]){6, 4}));
    for (int64_t i = 0; i < 6; i++)
        for (int64_t k = 0; k < 4; k++)
            assert_true(*ta_tensor_at(&r, (int64_t[]){i, k}) == (float)((i % 2) * 12 + (i / 2) * 4 + k));
    TA_CHECK_ERR(ta_tensor_reshape(&r, &t, 2, (int64_t[]){5, 5}), TA_ESHAPE, "(25 elements)");
    TA_CHECK_ERR(ta_tensor_reshape(&r, &t, 2, (int64_t[]){-1, -1}), TA_EINVAL, "only one dimension");
    TA_CHECK_ERR(ta_tensor_reshape(&r, &t, 2, (int64_t[]){5, -1}), TA_ESHAPE, "cannot infer");
    ta_tensor_free(&c);
    ta_tensor_free(&t);
}

static void test_copy_fill(void **state)
{
    (void)state;
    int64_t shape[2] = {3, 5};
    ta_tensor a, b, at;
    TA_CHECK_OK(ta_tensor_empty(&a, 2, shape));
    fill_iota(&a);
    TA_CHECK_OK(ta_tensor_zeros(&b, 2, (int64_t[]){5, 3}));
    TA_CHECK_OK(ta_tensor_transpose(&at, &a, 0, 1));
    TA_CHECK_OK(ta_tensor_copy(&b, &at));
    for (int64_t i = 0; i < 5; i++)
        for (int64_t j = 0; j < 3; j++)
            assert_true(*ta_tensor_at(&b, (int64_t[]){i, j}) == (float)(j * 5 + i));
    TA_CHECK_ERR(ta_tensor_copy(&b, &a), TA_ESHAPE, "dst has shape [5, 3] but src has [3, 5]");
    /* strides whose offsets overflow the index range are refused before any access */
    ta_tensor huge;
    TA_CHECK_OK(ta_tensor_from_buffer(&huge, a.data, 2, (int64_t[]){3, 5},
                                      (int64_t[]){INT64_C(1) << 62, 1}));
    TA_CHECK_ERR(ta_tensor_fill(&huge, 0.0f), TA_EINVAL, "overflow the index range");
    TA_CHECK_OK(ta_tensor_from_buffer(&huge, a.data, 2, (int64_t[]){3, 5},
                                      (int64_t[]){INT64_MIN, 1}));
    TA_CHECK_ERR(ta_tensor_copy(&b, &huge), TA_EINVAL, "src's strides");
    TA_CHECK_OK(ta_tensor_fill(&at, -1.0f));
    for (int i = 0; i < 15; i++) assert_true(((float *)a.data)[i] == -1.0f);
    /* dst must not alias itself or src (session 34: both were copied with TA_OK; torch's
     * copy_ refuses them): a stride-0 dst kept only src's last row, and an overlapping
     * dst may read elements it has already written (an in-place transpose, a.copy_(a.t()),
     * is the classic case); the header always said they must not overlap */
    fill_iota(&a);
    ta_tensor row0, rows0, lo, hi;
    TA_CHECK_OK(ta_tensor_from_buffer(&rows0, a.data, 2, (int64_t[]){3, 5}, (int64_t[]){0, 1}));
    TA_CHECK_ERR(ta_tensor_copy(&rows0, &a), TA_EINVAL,
                 "dst has stride 0 in dim 0, so its elements alias");
    TA_CHECK_OK(ta_tensor_from_buffer(&lo, a.data, 1, (int64_t[]){4}, (int64_t[]){1}));
    TA_CHECK_OK(ta_tensor_from_buffer(&hi, (float *)a.data + 1, 1, (int64_t[]){4}, (int64_t[]){1}));
    TA_CHECK_ERR(ta_tensor_copy(&hi, &lo), TA_EINVAL, "dst overlaps src");
    for (int i = 0; i < 15; i++) assert_true(((float *)a.data)[i] == (float)i); /* untouched */
    TA_CHECK_OK(ta_tensor_copy(&a, &a)); /* the same view: nothing to do */
    TA_CHECK_OK(ta_tensor_from_buffer(&rows0, a.data, 2, (int64_t[]){3, 3}, (int64_t[]){3, 1}));
    TA_CHECK_OK(ta_tensor_transpose(&lo, &rows0, 0, 1));
    TA_CHECK_ERR(ta_tensor_copy(&rows0, &lo), TA_EINVAL, "dst overlaps src");
    TA_CHECK_OK(ta_tensor_from_buffer(&row0, a.data, 2, (int64_t[]){1, 5}, (int64_t[]){0, 1}));
    TA_CHECK_OK(ta_tensor_copy(&row0, &row0)); /* size-1 dim, stride 0 */
    ta_tensor_free(&a);
    ta_tensor_free(&b);
}

static void test_tril_triu(void **state)
{
    (void)state;
    int64_t shape[3] = {2, 4, 6};
    for (int64_t diag = -2; diag <= 3; diag++) {
        ta_tensor lo, up;
        TA_CHECK_OK(ta_tensor_ones(&lo, 3, shape));
        TA_CHECK_OK(ta_tensor_ones(&up, 3, shape));
        TA_CHECK_OK(ta_tensor_tril(&lo, diag));
        TA_CHECK_OK(ta_tensor_triu(&up, diag));
        for (int64_t b = 0; b < 2; b++)
            for (int64_t i = 0; i < 4; i++)
                for (int64_t j = 0; j < 6; j++) {
                    assert_true(*ta_tensor_at(&lo, (int64_t[]){b, i, j}) == (j <= i + diag ? 1.0f : 0.0f));
                    assert_true(*ta_tensor_at(&up, (int64_t[]){b, i, j}) == (j >= i + diag ? 1.0f : 0.0f));
                }
        ta_tensor_free(&lo);
        ta_tensor_free(&up);
    }
    ta_tensor v;
    TA_CHECK_OK(ta_tensor_zeros(&v, 1, (int64_t[]){4}));
    TA_CHECK_ERR(ta_tensor_tril(&v, 0), TA_ESHAPE, "at least 2 dims");
    ta_tensor_free(&v);
    /* an expanded matrix (rows all one row): element (0, 1) is (1, 1), kept by tril at
     * one index and zeroed at the other; refused and untouched */
    float row[3] = {1, 2, 3};
    ta_tensor ex;
    TA_CHECK_OK(ta_tensor_from_buffer(&ex, row, 2, (int64_t[]){3, 3}, (int64_t[]){0, 1}));
    TA_CHECK_ERR(ta_tensor_tril(&ex, 0), TA_EINVAL, "ta_tensor_tril: t has stride 0 in dim 0");
    TA_CHECK_ERR(ta_tensor_triu(&ex, 0), TA_EINVAL, "stride 0");
    assert_true(row[0] == 1 && row[1] == 2 && row[2] == 3);
}

static void test_status_names(void **state)
{
    (void)state;
    assert_string_equal(ta_status_name(TA_ENOMEM), "TA_ENOMEM");
    assert_string_equal(ta_version(), TA_VERSION_STRING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constructors),   cmocka_unit_test(test_constructor_errors),
        cmocka_unit_test(test_from_buffer_and_at), cmocka_unit_test(test_permute_transpose),
        cmocka_unit_test(test_slice),          cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_copy_fill),      cmocka_unit_test(test_tril_triu),
        cmocka_unit_test(test_status_names),
    };
    return cmocka_run_group_tests_name("tensor", tests, NULL, NULL);
}
