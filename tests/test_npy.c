/* .npy reader and writer.
 *
 * Oracles: files written by numpy itself (tests/fixtures/io, tools/gen_io_fixtures.py)
 * with the values the reader must return stored beside them as raw float32 computed by
 * numpy (read here with fread, not with the code under test); numpy's exact header
 * bytes for our writer. Every error path is checked for its status, its message, and
 * for leaving outputs untouched; writes are atomic (a failed write leaves an existing
 * file whole and no temporary behind). */
#include "ta_test.h"
#include "io_files.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_test_npy");
}

/* ------------------------------------------------------------- npy reading */

static void test_npy_reads_numpy_files_and_converts(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        int ndim;
        int64_t shape[3];
    } cases[] = {
        {"f4_2x3x4.npy", 3, {2, 3, 4}}, {"f8_3x5.npy", 2, {3, 5}},  {"f2_12.npy", 1, {12}},
        {"f4_scalar.npy", 0, {0}},      {"f4_7.npy", 1, {7}},       {"b1_mask_2x5.npy", 2, {2, 5}},
        {"u1_3x4.npy", 2, {3, 4}},      {"i4_4.npy", 1, {4}},       {"i8_2x3.npy", 2, {2, 3}},
        {"f4_v2.npy", 2, {3, 2}},       {"f4_v3.npy", 2, {3, 2}},   {"f4_py2.npy", 2, {3, 2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ta_tensor t;
        TA_CHECK_OK(ta_npy_load(&t, ta_test_io_fixture(cases[i].file)));
        ta_test_assert_shape(&t, cases[i].ndim, cases[i].shape);
        ta_test_assert_matches_expected(&t, cases[i].file);
        ta_tensor_free(&t);
    }
}

static void test_npy_reads_zero_size_array(void **state)
{
    (void)state;
    ta_tensor t;
    TA_CHECK_OK(ta_npy_load(&t, ta_test_io_fixture("f4_empty_0x3.npy")));
    ta_test_assert_shape(&t, 2, (const int64_t[]){0, 3});
    assert_int_equal(ta_tensor_numel(&t), 0);
    ta_tensor_free(&t);
}

static void test_npy_load_int64_reads_i4_and_i8_exactly(void **state)
{
    (void)state;
    int64_t *v = NULL, shape[TA_MAX_DIMS];
    int ndim = -1;
    TA_CHECK_OK(ta_npy_load_int64(&v, &ndim, shape, ta_test_io_fixture("i4_4.npy")));
    assert_int_equal(ndim, 1);
    assert_int_equal(shape[0], 4);
    const int64_t want4[] = {5, 0, 17, 1 << 24};
    for (int i = 0; i < 4; i++) assert_int_equal(v[i], want4[i]);
    ta_npy_free(v);

    TA_CHECK_OK(ta_npy_load_int64(&v, &ndim, shape, ta_test_io_fixture("i8_2x3.npy")));
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 3);
    const int64_t want8[] = {-3, 1 << 24, 7, (int64_t)1 << 40, -((int64_t)1 << 62), 0};
    for (int i = 0; i < 6; i++) assert_int_equal(v[i], want8[i]);
    ta_npy_free(v);

    /* Values with no float32 twin: the int64 loader keeps them exact. */
    TA_CHECK_OK(ta_npy_load_int64(&v, &ndim, shape, ta_test_io_fixture("i8_inexact.npy")));
    assert_int_equal(v[1], (1 << 24) + 1);
    ta_npy_free(v);
    ta_npy_free(NULL);
}

static void test_npy_float_load_refuses_inexact_integers(void **state)
{
    (void)state;
    ta_tensor t;
    memset(&t, 0x5a, sizeof t);
    ta_tensor before = t;
    TA_CHECK_ERR(ta_npy_load(&t, ta_test_io_fixture("i8_inexact.npy")), TA_EUNSUPPORTED,
                 "element 1 (16777217) is not exactly representable as float32");
    assert_memory_equal(&t, &before, sizeof t);
}

static void test_npy_load_int64_refuses_floats(void **state)
{
    (void)state;
    int64_t *v = (int64_t *)&v, shape[TA_MAX_DIMS];
    int ndim = -7;
    TA_CHECK_ERR(ta_npy_load_int64(&v, &ndim, shape, ta_test_io_fixture("f4_7.npy")), TA_EUNSUPPORTED,
                 "unsupported dtype '<f4' (expected <i4 or <i8)");
    assert_ptr_equal(v, (int64_t *)&v);
    assert_int_equal(ndim, -7);
    TA_CHECK_ERR(ta_npy_load_int64(NULL, &ndim, shape, ta_test_io_fixture("i4_4.npy")), TA_EINVAL,
                 "ta_npy_load_int64: values is NULL");
}

/* ta_npy_load of path, *out untouched by the failure. */
static ta_status npy_load_untouched(const char *path)
{
    ta_tensor t;
    memset(&t, 0x5a, sizeof t);
    ta_tensor before = t;
    ta_status st = ta_npy_load(&t, path);
    assert_memory_equal(&t, &before, sizeof t);
    return st;
}

/* Each malformed or unsupported file: status, message, and *out untouched. */
static void test_npy_errors_name_the_file_and_the_problem(void **state)
{
    (void)state;
    static const ta_test_file_error cases[] = {
        {"f4_fortran.npy", TA_EUNSUPPORTED, "fortran_order True is not supported"},
        {"f4_bigendian.npy", TA_EUNSUPPORTED, "big-endian dtype '>f4' is not supported"},
        {"i2.npy", TA_EUNSUPPORTED,
         "unsupported dtype '<i2' (expected <f4, <f8, <f2, |b1, |u1, <i4 or <i8)"},
        {"structured.npy", TA_EUNSUPPORTED, "structured dtypes are not supported"},
        {"f4_9d.npy", TA_EUNSUPPORTED, "more than 8 dimensions are not supported"},
        {"bad_magic.npy", TA_EFORMAT, "not a .npy file (bad magic"},
        {"bad_version.npy", TA_EUNSUPPORTED, "unsupported .npy format version 4.0"},
        {"truncated_data.npy", TA_EFORMAT,
         "truncated data: the shape and dtype need 24 bytes after the 128-byte header but the "
         "file has 20"},
        {"truncated_header.npy", TA_EFORMAT,
         "truncated file: the header needs 118 bytes at offset 10 but the file ends after 40"},
        {"truncated_preamble.npy", TA_EFORMAT, "the preamble needs 10 bytes"},
        {"trailing_bytes.npy", TA_EFORMAT, "3 trailing bytes after the data"},
        {"header_too_long.npy", TA_EFORMAT, "header length 2147483647 is beyond the limit"},
        {"bad_syntax.npy", TA_EFORMAT, "malformed header at byte 16 (expected ',' or '}'"},
        {"missing_key.npy", TA_EFORMAT, "header lacks the key 'shape'"},
        {"unknown_key.npy", TA_EFORMAT, "unexpected key 'extra'"},
        {"duplicate_key.npy", TA_EFORMAT, "key 'descr' appears twice"},
        /* a NUL inside a string: read as a C string it was '<f4' and 'descr' (TA_OK) */
        {"nul_in_descr.npy", TA_EFORMAT, "(expected a quoted dtype string after 'descr')"},
        {"nul_in_key.npy", TA_EFORMAT, "(expected a quoted key or '}')"},
        {"negative_dim.npy", TA_EFORMAT, "shape has a negative dimension"},
        {"dim_too_big.npy", TA_EFORMAT, "shape dimension 0 does not fit in int64"},
        {"shape_overflow.npy", TA_EFORMAT,
         "shape [4611686018427387904, 4611686018427387904] has more bytes than size_t can count"},
        {"bytes_overflow.npy", TA_EFORMAT, "has more bytes than size_t can count"},
        {"huge_truncated.npy", TA_EFORMAT, "need 4398046511104 bytes"},
        {"wrap_truncated.npy", TA_EFORMAT, "need 18446744073709551608 bytes"},
        {"does_not_exist.npy", TA_EIO, "cannot open: No such file or directory"},
    };
    ta_test_expect_file_errors("ta_npy_load", cases, sizeof cases / sizeof cases[0],
                               npy_load_untouched);
}

static void test_npy_load_argument_errors(void **state)
{
    (void)state;
    ta_tensor t;
    TA_CHECK_ERR(ta_npy_load(NULL, ta_test_io_fixture("f4_7.npy")), TA_EINVAL, "ta_npy_load: out is NULL");
    TA_CHECK_ERR(ta_npy_load(&t, NULL), TA_EINVAL, "ta_npy_load: path is NULL or empty");
    TA_CHECK_ERR(ta_npy_load(&t, ""), TA_EINVAL, "path is NULL or empty");
    TA_CHECK_ERR(ta_npy_load(&t, ta_test_dir), TA_EIO, "Is a directory");
}

/* ------------------------------------------------------------- npy writing */

/* Our writer produces numpy's bytes exactly (header text, padding, data). */
static void test_npy_save_is_byte_identical_to_numpy(void **state)
{
    (void)state;
    const char *files[] = {"f4_2x3x4.npy", "f4_7.npy", "f4_scalar.npy", "f4_empty_0x3.npy"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        ta_tensor t;
        TA_CHECK_OK(ta_npy_load(&t, ta_test_io_fixture(files[i])));
        TA_CHECK_OK(ta_npy_save(ta_test_path("same.npy"), &t));
        size_t n1, n2;
        unsigned char *ours = ta_test_slurp(ta_test_path("same.npy"), &n1), *theirs = ta_test_slurp(ta_test_io_fixture(files[i]), &n2);
        assert_non_null(ours);
        assert_int_equal(n1, n2);
        if (memcmp(ours, theirs, n1) != 0) fail_msg("%s: bytes differ from numpy's", files[i]);
        free(ours);
        free(theirs);
        ta_tensor_free(&t);
    }
    ta_test_assert_no_temporaries();
}

/* Values of any view, in row-major order, through save and load. */
static void check_roundtrip(const ta_tensor *t, const char *what)
{
    TA_CHECK_OK(ta_npy_save(ta_test_path("rt.npy"), t));
    ta_tensor u;
    TA_CHECK_OK(ta_npy_load(&u, ta_test_path("rt.npy")));
    ta_test_assert_shape(&u, t->ndim, t->shape);
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(t);
    const float *got = u.data;
    for (int64_t i = 0; i < n; i++) {
        float want = *ta_tensor_at_const(t, idx);
        if (memcmp(&got[i], &want, 4) != 0)
            fail_msg("%s: element %lld is %g, expected %g", what, (long long)i, (double)got[i],
                     (double)want);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    /* The header keeps the data 64-byte aligned, as numpy's does. */
    size_t size;
    unsigned char *b = ta_test_slurp(ta_test_path("rt.npy"), &size);
    assert_int_equal((10 + (b[8] | b[9] << 8)) % 64, 0);
    assert_int_equal(size, 10 + (size_t)(b[8] | b[9] << 8) + 4 * (size_t)n);
    free(b);
    ta_tensor_free(&u);
}

static void test_npy_roundtrip_of_views_scalars_and_empty(void **state)
{
    (void)state;
    float buf[2 * 3 * 5];
    for (int i = 0; i < 30; i++) buf[i] = (float)i * 0.25f - 3.0f;
    buf[7] = -0.0f;
    buf[8] = INFINITY;
    buf[9] = NAN;
    ta_tensor a, v;
    TA_CHECK_OK(ta_tensor_from_buffer(&a, buf, 3, (const int64_t[]){2, 3, 5}, NULL));
    check_roundtrip(&a, "contiguous");
    TA_CHECK_OK(ta_tensor_permute(&v, &a, (const int[]){2, 0, 1}));
    check_roundtrip(&v, "permuted");
    TA_CHECK_OK(ta_tensor_slice(&v, &a, 2, 1, 5, 2));
    check_roundtrip(&v, "sliced with step 2");
    TA_CHECK_OK(ta_tensor_from_buffer(&v, buf + 29, 2, (const int64_t[]){3, 4},
                                      (const int64_t[]){-5, -1}));
    check_roundtrip(&v, "negative strides");
    TA_CHECK_OK(ta_tensor_from_buffer(&v, buf, 3, (const int64_t[]){4, 2, 3},
                                      (const int64_t[]){0, 1, 7}));
    check_roundtrip(&v, "broadcast (stride 0)");
    TA_CHECK_OK(ta_tensor_from_buffer(&v, buf + 3, 0, NULL, NULL));
    check_roundtrip(&v, "0-d");
    TA_CHECK_OK(ta_tensor_from_buffer(&v, buf, 3, (const int64_t[]){2, 0, 4}, NULL));
    check_roundtrip(&v, "zero-size");
    TA_CHECK_OK(ta_tensor_from_buffer(&v, buf, 8, (const int64_t[]){1, 2, 1, 3, 1, 1, 5, 1},
                                      NULL));
    check_roundtrip(&v, "8-d");
    /* More elements than the writer's gather buffer (4096), strided. */
    ta_tensor big, bt;
    TA_CHECK_OK(ta_tensor_empty(&big, 2, (const int64_t[]){70, 130}));
    TA_CHECK_OK(ta_randn(&big, 5));
    TA_CHECK_OK(ta_tensor_transpose(&bt, &big, 0, 1));
    check_roundtrip(&bt, "transposed 130x70");
    ta_tensor_free(&big);
    ta_test_assert_no_temporaries();
}

static void test_npy_save_overwrites_atomically_and_sets_mode(void **state)
{
    (void)state;
    float x = 1.5f;
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, &x, 1, (const int64_t[]){1}, NULL));
    TA_CHECK_OK(ta_npy_save(ta_test_path("over.npy"), &t));
    x = -2.0f;
    TA_CHECK_OK(ta_npy_save(ta_test_path("over.npy"), &t));
    ta_tensor u;
    TA_CHECK_OK(ta_npy_load(&u, ta_test_path("over.npy")));
    assert_true(((float *)u.data)[0] == -2.0f);
    ta_tensor_free(&u);
    /* Not mkstemp's 0600: what creat(path, 0666) would give under the umask. */
    mode_t mask = umask(022);
    umask(mask);
    struct stat sb;
    assert_int_equal(stat(ta_test_path("over.npy"), &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0666 & ~mask);
    /* a name of NAME_MAX (255) bytes, and of 250: too long for "<name>.tmp.XXXXXX", the
     * temporary is "<dir>/.tmp.XXXXXX" */
    for (int len = 250; len <= 255; len += 5) {
        char name[256];
        memset(name, 'n', (size_t)len - 4);
        memcpy(name + len - 4, ".npy", 5);
        char path[512]; /* not ta_test_path, whose buffers are shorter */
        snprintf(path, sizeof path, "%s/%s", ta_test_dir, name);
        assert_int_equal(strlen(strrchr(path, '/') + 1), len);
        TA_CHECK_OK(ta_npy_save(path, &t));
        TA_CHECK_OK(ta_npy_load(&u, path));
        assert_true(((float *)u.data)[0] == -2.0f);
        ta_tensor_free(&u);
        assert_int_equal(unlink(path), 0);
    }
    ta_test_assert_no_temporaries();
}

static void test_npy_save_errors_leave_no_file(void **state)
{
    (void)state;
    float x[6] = {0};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, x, 2, (const int64_t[]){2, 3}, NULL));
    const char *missing_dir = ta_test_path("no/such/dir/out.npy");
    TA_CHECK_ERR(ta_npy_save(missing_dir, &t), TA_EIO,
                 "cannot create a temporary file beside it: No such file or directory");
    assert_non_null(strstr(ta_last_error(), missing_dir));
    assert_false(ta_test_file_exists(missing_dir));
    TA_CHECK_ERR(ta_npy_save(NULL, &t), TA_EINVAL, "ta_npy_save: path is NULL or empty");
    TA_CHECK_ERR(ta_npy_save(ta_test_path("x.npy"), NULL), TA_EINVAL, "ta_npy_save: t is NULL");
    ta_tensor bad = t;
    bad.dtype = (ta_dtype)7;
    TA_CHECK_ERR(ta_npy_save(ta_test_path("x.npy"), &bad), TA_EINVAL,
                 "ta_npy_save: t has dtype 7, not a ta_dtype");
    assert_false(ta_test_file_exists(ta_test_path("x.npy")));
    /* Saving onto a directory fails at rename; the directory and no temporary stay. */
    assert_int_equal(mkdir(ta_test_path("adir"), 0755), 0);
    TA_CHECK_ERR(ta_npy_save(ta_test_path("adir"), &t), TA_EIO, "exists and is not a regular file");
    struct stat sb;
    assert_int_equal(stat(ta_test_path("adir"), &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    /* nor a pipe (or a device: the rename would replace /dev/null itself, as root) */
    assert_int_equal(mkfifo(ta_test_path("afifo"), 0644), 0);
    TA_CHECK_ERR(ta_npy_save(ta_test_path("afifo"), &t), TA_EIO, "exists and is not a regular file");
    TA_CHECK_ERR(ta_safetensors_save(ta_test_path("afifo"), 1, (const char *[]){"t"},
                                     (const ta_tensor *[]){&t}),
                 TA_EIO, "exists and is not a regular file");
    assert_int_equal(stat(ta_test_path("afifo"), &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    ta_test_assert_no_temporaries();
}

/* A write that fails half-way (the file size limit, EFBIG) keeps the old file intact. */
static void test_failed_write_does_not_clobber_existing_file(void **state)
{
    (void)state;
    float x[3] = {1, 2, 3};
    ta_tensor small, big;
    TA_CHECK_OK(ta_tensor_from_buffer(&small, x, 1, (const int64_t[]){3}, NULL));
    TA_CHECK_OK(ta_npy_save(ta_test_path("keep.npy"), &small));
    const char *names[] = {"w"};
    const ta_tensor *ts[] = {&small};
    TA_CHECK_OK(ta_safetensors_save(ta_test_path("keep.safetensors"), 1, names, ts));
    size_t n0, s0;
    unsigned char *npy0 = ta_test_slurp(ta_test_path("keep.npy"), &n0), *st0 = ta_test_slurp(ta_test_path("keep.safetensors"), &s0);

    TA_CHECK_OK(ta_tensor_zeros(&big, 2, (const int64_t[]){256, 256}));
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 100000; /* the big tensor needs 262 KB */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ta_status s1 = ta_npy_save(ta_test_path("keep.npy"), &big);
    char m1[1024];
    snprintf(m1, sizeof m1, "%s", ta_last_error());
    ts[0] = &big;
    ta_status s2 = ta_safetensors_save(ta_test_path("keep.safetensors"), 1, names, ts);
    char m2[1024];
    snprintf(m2, sizeof m2, "%s", ta_last_error());
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);

    assert_int_equal(s1, TA_EIO);
    assert_non_null(strstr(m1, "File too large"));
    assert_int_equal(s2, TA_EIO);
    assert_non_null(strstr(m2, "File too large"));
    size_t n1, s1b;
    unsigned char *npy1 = ta_test_slurp(ta_test_path("keep.npy"), &n1), *st1 = ta_test_slurp(ta_test_path("keep.safetensors"), &s1b);
    assert_int_equal(n0, n1);
    assert_memory_equal(npy0, npy1, n0);
    assert_int_equal(s0, s1b);
    assert_memory_equal(st0, st1, s0);
    ta_test_assert_no_temporaries();
    free(npy0), free(npy1), free(st0), free(st1);
    ta_tensor_free(&big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_reads_numpy_files_and_converts),
        cmocka_unit_test(test_npy_reads_zero_size_array),
        cmocka_unit_test(test_npy_load_int64_reads_i4_and_i8_exactly),
        cmocka_unit_test(test_npy_float_load_refuses_inexact_integers),
        cmocka_unit_test(test_npy_load_int64_refuses_floats),
        cmocka_unit_test(test_npy_errors_name_the_file_and_the_problem),
        cmocka_unit_test(test_npy_load_argument_errors),
        cmocka_unit_test(test_npy_save_is_byte_identical_to_numpy),
        cmocka_unit_test(test_npy_roundtrip_of_views_scalars_and_empty),
        cmocka_unit_test(test_npy_save_overwrites_atomically_and_sets_mode),
        cmocka_unit_test(test_npy_save_errors_leave_no_file),
        cmocka_unit_test(test_failed_write_does_not_clobber_existing_file),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
