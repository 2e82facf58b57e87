/* Helpers of the file-format tests (test_npy.c, test_safetensors.c): the fixture files
 * of tests/fixtures/io (tools/gen_io_fixtures.py), whole files as bytes, exact float
 * comparisons, and a table of malformed files with the error each must give. */
#ifndef TA_TEST_IO_FILES_H
#define TA_TEST_IO_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorattn.h"

#define TA_TEST_IO_FIX TA_FIXTURE_DIR "/io/"

/* TA_TEST_IO_FIX "<name>", from a ring of 4 buffers. */
const char *ta_test_io_fixture(const char *name);
bool ta_test_file_exists(const char *path);
/* The whole file in a malloc'd buffer (NULL if it cannot be opened); *size its length. */
unsigned char *ta_test_slurp(const char *path, size_t *size);
/* No "<x>.tmp.XXXXXX" left behind in ta_test_dir. */
void ta_test_assert_no_temporaries(void);
/* Same float32 values: bitwise (so -0 and inf count), except NaN matches any NaN. */
void ta_test_assert_same_floats(const float *got, const float *want, size_t n, const char *what);
/* t is an owning contiguous float32 tensor equal to the raw float32 file
 * TA_TEST_IO_FIX "<expected>.expected.f32" (C order). */
void ta_test_assert_matches_expected(const ta_tensor *t, const char *expected);
/* t is an owning contiguous tensor of dtype (TA_F16 or TA_BF16) whose bits equal the raw
 * file TA_TEST_IO_FIX "<expected>.expected.f16" / ".bf16"; nan_any: a NaN matches any NaN
 * (expectations from torch, which makes every NaN 0x7fc0). */
void ta_test_assert_matches_bits(const ta_tensor *t, const char *expected, ta_dtype dtype,
                                 bool nan_any);
/* The raw expected bits of that file (malloc'd), *n their count. */
uint16_t *ta_test_expected_bits(const char *expected, ta_dtype dtype, size_t *n);
void ta_test_assert_shape(const ta_tensor *t, int ndim, const int64_t *shape);

/* A malformed fixture file and the error it must give. */
typedef struct ta_test_file_error {
    const char *file;
    ta_status code;
    const char *needle; /* in the message, which starts "<fn>: <path>: " */
} ta_test_file_error;
/* try_open(path of each case's file) must fail with the case's status and message
 * (try_open itself checks that its output was left untouched). */
void ta_test_expect_file_errors(const char *fn, const ta_test_file_error *cases, size_t n,
                                ta_status (*try_open)(const char *path));

#endif
