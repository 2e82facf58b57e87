/* Helpers of the file-format tests (io_files.h). */
#include "io_files.h"
#include "dtype_oracle.h"
#include "ta_test.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *ta_test_io_fixture(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], TA_TEST_IO_FIX "%s", name);
    return buf[k];
}

bool ta_test_file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

unsigned char *ta_test_slurp(const char *p, size_t *size)
{
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

void ta_test_assert_no_temporaries(void)
{
    DIR *d = opendir(ta_test_dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) fail_msg("temporary file %s left behind", e->d_name);
    closedir(d);
}

void ta_test_assert_same_floats(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) && isnan(got[i])) continue;
        if (memcmp(&got[i], &want[i], 4) != 0)
            fail_msg("%s: element %zu is %.9g, expected %.9g", what, i, (double)got[i],
                     (double)want[i]);
    }
}

void ta_test_assert_matches_expected(const ta_tensor *t, const char *expected)
{
    char p[512];
    snprintf(p, sizeof p, TA_TEST_IO_FIX "%s.expected.f32", expected);
    size_t size;
    float *want = (float *)ta_test_slurp(p, &size);
    if (!want) fail_msg("missing %s (run tools/gen_io_fixtures.py)", p);
    assert_int_equal(size, (size_t)ta_tensor_numel(t) * 4);
    assert_true(ta_tensor_is_contiguous(t));
    assert_non_null(t->owned);
    assert_int_equal(t->dtype, TA_F32);
    ta_test_assert_same_floats(t->data, want, size / 4, expected);
    free(want);
}

uint16_t *ta_test_expected_bits(const char *expected, ta_dtype dtype, size_t *n)
{
    char p[512];
    snprintf(p, sizeof p, TA_TEST_IO_FIX "%s.expected.%s", expected, ta_dtype_name(dtype));
    size_t size;
    uint16_t *want = (uint16_t *)ta_test_slurp(p, &size);
    if (!want) fail_msg("missing %s (run tools/gen_io_fixtures.py)", p);
    *n = size / 2;
    return want;
}

void ta_test_assert_matches_bits(const ta_tensor *t, const char *expected, ta_dtype dtype,
                                 bool nan_any)
{
    size_t n;
    uint16_t *want = ta_test_expected_bits(expected, dtype, &n);
    assert_int_equal(n, (size_t)ta_tensor_numel(t));
    assert_true(ta_tensor_is_contiguous(t));
    assert_non_null(t->owned);
    assert_int_equal(t->dtype, dtype);
    ta_oracle_assert_halves(t->data, want, n, dtype, nan_any, expected);
    free(want);
}

void ta_test_assert_shape(const ta_tensor *t, int ndim, const int64_t *shape)
{
    assert_int_equal(t->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(t->shape[i], shape[i]);
}

void ta_test_expect_file_errors(const char *fn, const ta_test_file_error *cases, size_t n,
                                ta_status (*try_open)(const char *path))
{
    for (size_t i = 0; i < n; i++) {
        const char *p = ta_test_io_fixture(cases[i].file);
        char prefix[600];
        snprintf(prefix, sizeof prefix, "%s: %s: ", fn, p);
        TA_CHECK_ERR(try_open(p), cases[i].code, cases[i].needle);
        if (strncmp(ta_last_error(), prefix, strlen(prefix)) != 0)
            fail_msg("message '%s' does not start with '%s'", ta_last_error(), prefix);
    }
}
