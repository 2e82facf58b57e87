/* ta-test: all-isas -- .npy and .safetensors with float16, bfloat16 and float64 tensors:
 * ta_npy_load_dtype, ta_safetensors_get_dtype, and the writers in each tensor's dtype
 * (the conversions run on the TA_ARCH table's kernels).
 *
 * Oracles (tests/fixtures/io, tools/gen_io_fixtures.py): files written by numpy, and a
 * .safetensors file of tensors made by torch; beside them, as raw bits read with fread,
 * what reading into TA_F16 / TA_BF16 must give: numpy's float16 and torch's bfloat16
 * rounding of float32, an exact rational rounding of float64 (torch would round those
 * twice, through float32), the file's own bits where the types match. The writers are
 * checked byte for byte against numpy's files. */
#include "ta_test.h"
#include "dtype_oracle.h"
#include "io_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_test_io_dtype");
}

/* ---------------------------------------------------------------------- npy */

static void test_npy_load_dtype_rounds_each_value_once(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        ta_dtype dtype;
        bool nan_any; /* torch's expectation: any NaN */
    } cases[] = {
        {"f2_12.npy", TA_F16, false},  {"f2_12.npy", TA_BF16, true},
        {"f4_round.npy", TA_F16, false}, {"f4_round.npy", TA_BF16, true},
        {"f8_round.npy", TA_F16, false}, {"f8_round.npy", TA_BF16, false},
        {"i4_4.npy", TA_F16, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ta_tensor t, f;
        TA_CHECK_OK(ta_npy_load_dtype(&t, ta_test_io_fixture(cases[i].file), cases[i].dtype));
        ta_test_assert_matches_bits(&t, cases[i].file, cases[i].dtype, cases[i].nan_any);
        TA_CHECK_OK(ta_npy_load(&f, ta_test_io_fixture(cases[i].file)));
        ta_test_assert_shape(&t, f.ndim, f.shape);
        ta_tensor_free(&t);
        /* TA_F32 is ta_npy_load */
        TA_CHECK_OK(ta_npy_load_dtype(&t, ta_test_io_fixture(cases[i].file), TA_F32));
        ta_test_assert_same_floats(t.data, f.data, (size_t)ta_tensor_numel(&f), cases[i].file);
        ta_tensor_free(&t);
        ta_tensor_free(&f);
    }
    ta_tensor t;
    memset(&t, 0x5a, sizeof t);
    ta_tensor before = t;
    TA_CHECK_ERR(ta_npy_load_dtype(&t, ta_test_io_fixture("f2_12.npy"), TA_F64), TA_EUNSUPPORTED,
                 "ta_npy_load_dtype: dtype is f64; ta_npy_load_dtype takes f32, f16 or bf16");
    TA_CHECK_ERR(ta_npy_load_dtype(&t, ta_test_io_fixture("f2_12.npy"), (ta_dtype)9), TA_EINVAL,
                 "dtype = 9 is not a ta_dtype");
    TA_CHECK_ERR(ta_npy_load_dtype(&t, ta_test_io_fixture("i8_inexact.npy"), TA_F16),
                 TA_EUNSUPPORTED, "not exactly representable as float32");
    TA_CHECK_ERR(ta_npy_load_dtype(&t, ta_test_io_fixture("i2.npy"), TA_BF16), TA_EUNSUPPORTED,
                 "ta_npy_load_dtype: ");
    TA_CHECK_ERR(ta_npy_load_dtype(&t, ta_test_io_fixture("truncated_data.npy"), TA_F16),
                 TA_EFORMAT, "truncated");
    assert_memory_equal(&t, &before, sizeof t);
}

/* ours, saved from t, has exactly the bytes of the fixture file theirs */
static void assert_saves_as(const ta_tensor *t, const char *theirs)
{
    TA_CHECK_OK(ta_npy_save(ta_test_path("same.npy"), t));
    size_t n1, n2;
    unsigned char *a = ta_test_slurp(ta_test_path("same.npy"), &n1);
    unsigned char *b = ta_test_slurp(ta_test_io_fixture(theirs), &n2);
    assert_true(a && b);
    assert_int_equal(n1, n2);
    if (memcmp(a, b, n1) != 0) fail_msg("%s: bytes differ from numpy's", theirs);
    free(a);
    free(b);
}

static void test_npy_save_writes_f2_f8_and_bf16_as_f4_like_numpy(void **state)
{
    (void)state;
    /* float16: '<f2' */
    ta_tensor t;
    TA_CHECK_OK(ta_npy_load_dtype(&t, ta_test_io_fixture("f2_12.npy"), TA_F16));
    assert_saves_as(&t, "f2_12.npy");
    ta_tensor_free(&t);
    /* float64: '<f8', the data of numpy's own file as the tensor */
    size_t size;
    unsigned char *f8 = ta_test_slurp(ta_test_io_fixture("f8_3x5.npy"), &size);
    assert_non_null(f8);
    size_t data = 10 + (size_t)(f8[8] | f8[9] << 8);
    assert_int_equal(size - data, 15 * 8);
    double d[15];
    memcpy(d, f8 + data, sizeof d);
    free(f8);
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&t, d, TA_F64, 2, (const int64_t[]){3, 5}, NULL));
    assert_saves_as(&t, "f8_3x5.npy");
    /* bfloat16: '<f4', widened exactly */
    size_t n;
    uint16_t *bits = ta_test_expected_bits("bf16_save.npy", TA_BF16, &n);
    assert_int_equal(n, 63);
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&t, bits, TA_BF16, 2, (const int64_t[]){7, 9}, NULL));
    assert_saves_as(&t, "bf16_save.npy");
    /* a transposed view of it: the values in the view's order */
    ta_tensor v, back, want;
    TA_CHECK_OK(ta_tensor_transpose(&v, &t, 0, 1));
    TA_CHECK_OK(ta_npy_save(ta_test_path("t.npy"), &v));
    TA_CHECK_OK(ta_npy_load_dtype(&back, ta_test_path("t.npy"), TA_BF16));
    TA_CHECK_OK(ta_tensor_contiguous(&want, &v));
    ta_test_assert_shape(&back, 2, (const int64_t[]){9, 7});
    assert_memory_equal(back.data, want.data, 63 * 2);
    ta_tensor_free(&back);
    ta_tensor_free(&want);
    free(bits);
    ta_test_assert_no_temporaries();
}

/* -------------------------------------------------------------- safetensors */

static void test_safetensors_get_dtype_rounds_each_value_once(void **state)
{
    (void)state;
    ta_safetensors *st;
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_io_fixture("dtypes.safetensors")));
    static const char *names[] = {"b.bf16", "d.f64", "f.f32", "h.f16"};
    static const ta_dtype into[] = {TA_F16, TA_BF16};
    for (int i = 0; i < 4; i++) {
        char exp[64];
        snprintf(exp, sizeof exp, "dtypes.%s", names[i]);
        ta_tensor t, f;
        TA_CHECK_OK(ta_safetensors_get_dtype(&f, st, names[i], TA_F32));
        ta_test_assert_matches_expected(&f, exp);
        for (int k = 0; k < 2; k++) {
            TA_CHECK_OK(ta_safetensors_get_dtype(&t, st, names[i], into[k]));
            ta_test_assert_shape(&t, f.ndim, f.shape);
            ta_test_assert_matches_bits(&t, exp, into[k], false);
            ta_tensor_free(&t);
        }
        ta_tensor_free(&f);
    }
    ta_tensor t;
    memset(&t, 0x5a, sizeof t);
    ta_tensor before = t;
    TA_CHECK_ERR(ta_safetensors_get_dtype(&t, st, "h.f16", TA_F64), TA_EUNSUPPORTED,
                 "dtype is f64; ta_safetensors_get_dtype takes f32, f16 or bf16");
    TA_CHECK_ERR(ta_safetensors_get_dtype(&t, st, "h.f16", (ta_dtype)4), TA_EINVAL,
                 "dtype = 4 is not a ta_dtype");
    TA_CHECK_ERR(ta_safetensors_get_dtype(&t, st, "nope", TA_F16), TA_EINVAL,
                 "ta_safetensors_get_dtype: no tensor named 'nope'");
    assert_memory_equal(&t, &before, sizeof t);
    ta_safetensors_free(st);

    /* the official writer's float16 and bfloat16 tensors, read in their own type */
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_io_fixture("official.safetensors")));
    static const struct {
        const char *name;
        ta_dtype dtype;
    } own[] = {{"fc_out.bias", TA_F16}, {"values.weight", TA_BF16}};
    for (int i = 0; i < 2; i++) {
        ta_tensor f;
        TA_CHECK_OK(ta_safetensors_get_dtype(&t, st, own[i].name, own[i].dtype));
        TA_CHECK_OK(ta_safetensors_get(&f, st, own[i].name));
        uint16_t *h = t.data;
        const float *x = f.data;
        for (int64_t j = 0; j < ta_tensor_numel(&f); j++) /* the values exactly */
            assert_int_equal(h[j], ta_oracle_from_f32(x[j], own[i].dtype));
        ta_tensor_free(&t);
        ta_tensor_free(&f);
    }
    ta_safetensors_free(st);
}

static void test_safetensors_save_writes_each_tensor_in_its_dtype(void **state)
{
    (void)state;
    ta_safetensors *st;
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_io_fixture("dtypes.safetensors")));
    ta_tensor h, b, f, ht;
    TA_CHECK_OK(ta_safetensors_get_dtype(&h, st, "h.f16", TA_F16));
    TA_CHECK_OK(ta_safetensors_get_dtype(&b, st, "b.bf16", TA_BF16));
    TA_CHECK_OK(ta_safetensors_get_dtype(&f, st, "f.f32", TA_F32));
    ta_safetensors_free(st);
    TA_CHECK_OK(ta_tensor_transpose(&ht, &h, 0, 1));
    double d[3] = {0.1, -1e300, 1 + 0x1p-40};
    ta_tensor t64;
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&t64, d, TA_F64, 1, (const int64_t[]){3}, NULL));
    const char *names[] = {"h.t", "b", "d", "f"};
    const ta_tensor *ts[] = {&ht, &b, &t64, &f};
    TA_CHECK_OK(ta_safetensors_save(ta_test_path("dt.safetensors"), 4, names, ts));

    size_t size;
    unsigned char *raw = ta_test_slurp(ta_test_path("dt.safetensors"), &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
    assert_int_equal(size, 8 + hlen + 12 * 2 + 10 * 2 + 3 * 8 + 24 * 4);
    const char *dt[] = {"\"h.t\":{\"dtype\":\"F16\",\"shape\":[4,3],\"data_offsets\":[0,24]}",
                        "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,5],\"data_offsets\":[24,44]}",
                        "\"d\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[44,68]}",
                        "\"f\":{\"dtype\":\"F32\",\"shape\":[2,3,4],\"data_offsets\":[68,164]}"};
    for (int i = 0; i < 4; i++)
        if (!memmem(raw + 8, hlen, dt[i], strlen(dt[i]))) fail_msg("header lacks %s", dt[i]);
    assert_memory_equal(raw + 8 + hlen + 44, d, 24); /* float64 as it is */
    free(raw);

    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_path("dt.safetensors")));
    for (int i = 0; i < 4; i++) {
        if (ts[i]->dtype == TA_F64) continue; /* read back as float32 below */
        ta_tensor u, want;
        TA_CHECK_OK(ta_safetensors_get_dtype(&u, st, names[i], ts[i]->dtype));
        TA_CHECK_OK(ta_tensor_contiguous(&want, ts[i]));
        ta_test_assert_shape(&u, want.ndim, want.shape);
        assert_memory_equal(u.data, want.data, (size_t)ta_tensor_numel(&u) * ta_dtype_size(u.dtype));
        ta_tensor_free(&u);
        ta_tensor_free(&want);
    }
    ta_tensor u;
    TA_CHECK_OK(ta_safetensors_get_dtype(&u, st, "d", TA_BF16));
    for (int i = 0; i < 3; i++)
        assert_int_equal(((uint16_t *)u.data)[i], ta_oracle_from_f64(d[i], TA_BF16));
    ta_tensor_free(&u);
    ta_safetensors_free(st);
    ta_tensor_free(&h);
    ta_tensor_free(&b);
    ta_tensor_free(&f);
    ta_test_assert_no_temporaries();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_load_dtype_rounds_each_value_once),
        cmocka_unit_test(test_npy_save_writes_f2_f8_and_bf16_as_f4_like_numpy),
        cmocka_unit_test(test_safetensors_get_dtype_rounds_each_value_once),
        cmocka_unit_test(test_safetensors_save_writes_each_tensor_in_its_dtype),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
