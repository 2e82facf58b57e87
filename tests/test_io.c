/* File formats: .npy and .safetensors readers and writers.
 *
 * Oracles: files written by numpy itself and .safetensors files assembled from the
 * format description by tools/gen_io_fixtures.py, with the values the reader must
 * return stored beside them as raw float32 computed by numpy/torch (read here with
 * fread, not with the code under test); numpy's exact header bytes for our writer;
 * a float64 ldexp formula for every float16 and bfloat16 bit pattern. Every error
 * path is checked for its status, its message, and for leaving outputs untouched. */
#include "ta_test.h"

#include "io/io_internal.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX TA_FIXTURE_DIR "/io/"

static char tmpdir[64];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static int setup_tmpdir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ta_test_io.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    return nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const char *tmp(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static const char *fix(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], FIX "%s", name);
    return buf[k];
}

static bool file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Whole file into a malloc'd buffer (NULL if missing). */
static unsigned char *slurp(const char *p, size_t *size)
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

/* No "<x>.tmp.XXXXXX" left behind in the temporary directory. */
static void assert_no_temporaries(void)
{
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) fail_msg("temporary file %s left behind", e->d_name);
    closedir(d);
}

/* Same float32 values: bitwise (so -0 and inf count), except NaN matches any NaN. */
static void assert_same_floats(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) && isnan(got[i])) continue;
        if (memcmp(&got[i], &want[i], 4) != 0)
            fail_msg("%s: element %zu is %.9g, expected %.9g", what, i, (double)got[i],
                     (double)want[i]);
    }
}

/* t equals the raw float32 file FIX<expected> (C order). */
static void assert_matches_expected(const ta_tensor *t, const char *expected)
{
    char p[512];
    snprintf(p, sizeof p, FIX "%s.expected.f32", expected);
    size_t size;
    float *want = (float *)slurp(p, &size);
    if (!want) fail_msg("missing %s (run tools/gen_io_fixtures.py)", p);
    assert_int_equal(size, (size_t)ta_tensor_numel(t) * 4);
    assert_true(ta_tensor_is_contiguous(t));
    assert_non_null(t->owned);
    assert_int_equal(t->dtype, TA_F32);
    assert_same_floats(t->data, want, size / 4, expected);
    free(want);
}

static void assert_shape(const ta_tensor *t, int ndim, const int64_t *shape)
{
    assert_int_equal(t->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(t->shape[i], shape[i]);
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
        TA_CHECK_OK(ta_npy_load(&t, fix(cases[i].file)));
        assert_shape(&t, cases[i].ndim, cases[i].shape);
        assert_matches_expected(&t, cases[i].file);
        ta_tensor_free(&t);
    }
}

static void test_npy_reads_zero_size_array(void **state)
{
    (void)state;
    ta_tensor t;
    TA_CHECK_OK(ta_npy_load(&t, fix("f4_empty_0x3.npy")));
    assert_shape(&t, 2, (const int64_t[]){0, 3});
    assert_int_equal(ta_tensor_numel(&t), 0);
    ta_tensor_free(&t);
}

static void test_npy_load_int64_reads_i4_and_i8_exactly(void **state)
{
    (void)state;
    int64_t *v = NULL, shape[TA_MAX_DIMS];
    int ndim = -1;
    TA_CHECK_OK(ta_npy_load_int64(&v, &ndim, shape, fix("i4_4.npy")));
    assert_int_equal(ndim, 1);
    assert_int_equal(shape[0], 4);
    const int64_t want4[] = {5, 0, 17, 1 << 24};
    for (int i = 0; i < 4; i++) assert_int_equal(v[i], want4[i]);
    ta_npy_free(v);

    TA_CHECK_OK(ta_npy_load_int64(&v, &ndim, shape, fix("i8_2x3.npy")));
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 3);
    const int64_t want8[] = {-3, 1 << 24, 7, (int64_t)1 << 40, -((int64_t)1 << 62), 0};
    for (int i = 0; i < 6; i++) assert_int_equal(v[i], want8[i]);
    ta_npy_free(v);

    /* Values with no float32 twin: the int64 loader keeps them exact. */
    TA_CHECK_OK(ta_npy_load_int64(&v, &ndim, shape, fix("i8_inexact.npy")));
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
    TA_CHECK_ERR(ta_npy_load(&t, fix("i8_inexact.npy")), TA_EUNSUPPORTED,
                 "element 1 (16777217) is not exactly representable as float32");
    assert_memory_equal(&t, &before, sizeof t);
}

static void test_npy_load_int64_refuses_floats(void **state)
{
    (void)state;
    int64_t *v = (int64_t *)&v, shape[TA_MAX_DIMS];
    int ndim = -7;
    TA_CHECK_ERR(ta_npy_load_int64(&v, &ndim, shape, fix("f4_7.npy")), TA_EUNSUPPORTED,
                 "unsupported dtype '<f4' (expected <i4 or <i8)");
    assert_ptr_equal(v, (int64_t *)&v);
    assert_int_equal(ndim, -7);
    TA_CHECK_ERR(ta_npy_load_int64(NULL, &ndim, shape, fix("i4_4.npy")), TA_EINVAL,
                 "ta_npy_load_int64: values is NULL");
}

/* Each malformed or unsupported file: status, message, and *out untouched. */
static void test_npy_errors_name_the_file_and_the_problem(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        ta_status code;
        const char *needle;
    } cases[] = {
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
        {"negative_dim.npy", TA_EFORMAT, "shape has a negative dimension"},
        {"dim_too_big.npy", TA_EFORMAT, "shape dimension 0 does not fit in int64"},
        {"shape_overflow.npy", TA_EFORMAT,
         "shape [4611686018427387904, 4611686018427387904] has more bytes than size_t can count"},
        {"bytes_overflow.npy", TA_EFORMAT, "has more bytes than size_t can count"},
        {"huge_truncated.npy", TA_EFORMAT, "need 4398046511104 bytes"},
        {"does_not_exist.npy", TA_EIO, "cannot open: No such file or directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ta_tensor t;
        memset(&t, 0x5a, sizeof t);
        ta_tensor before = t;
        const char *p = fix(cases[i].file);
        char prefix[600];
        snprintf(prefix, sizeof prefix, "ta_npy_load: %s: ", p);
        TA_CHECK_ERR(ta_npy_load(&t, p), cases[i].code, cases[i].needle);
        if (strncmp(ta_last_error(), prefix, strlen(prefix)) != 0)
            fail_msg("message '%s' does not start with '%s'", ta_last_error(), prefix);
        assert_memory_equal(&t, &before, sizeof t);
    }
}

static void test_npy_load_argument_errors(void **state)
{
    (void)state;
    ta_tensor t;
    TA_CHECK_ERR(ta_npy_load(NULL, fix("f4_7.npy")), TA_EINVAL, "ta_npy_load: out is NULL");
    TA_CHECK_ERR(ta_npy_load(&t, NULL), TA_EINVAL, "ta_npy_load: path is NULL or empty");
    TA_CHECK_ERR(ta_npy_load(&t, ""), TA_EINVAL, "path is NULL or empty");
    TA_CHECK_ERR(ta_npy_load(&t, tmpdir), TA_EIO, "Is a directory");
}

/* ------------------------------------------------------------- npy writing */

/* Our writer produces numpy's bytes exactly (header text, padding, data). */
static void test_npy_save_is_byte_identical_to_numpy(void **state)
{
    (void)state;
    const char *files[] = {"f4_2x3x4.npy", "f4_7.npy", "f4_scalar.npy", "f4_empty_0x3.npy"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        ta_tensor t;
        TA_CHECK_OK(ta_npy_load(&t, fix(files[i])));
        TA_CHECK_OK(ta_npy_save(tmp("same.npy"), &t));
        size_t n1, n2;
        unsigned char *ours = slurp(tmp("same.npy"), &n1), *theirs = slurp(fix(files[i]), &n2);
        assert_non_null(ours);
        assert_int_equal(n1, n2);
        if (memcmp(ours, theirs, n1) != 0) fail_msg("%s: bytes differ from numpy's", files[i]);
        free(ours);
        free(theirs);
        ta_tensor_free(&t);
    }
    assert_no_temporaries();
}

/* Values of any view, in row-major order, through save and load. */
static void check_roundtrip(const ta_tensor *t, const char *what)
{
    TA_CHECK_OK(ta_npy_save(tmp("rt.npy"), t));
    ta_tensor u;
    TA_CHECK_OK(ta_npy_load(&u, tmp("rt.npy")));
    assert_shape(&u, t->ndim, t->shape);
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
    unsigned char *b = slurp(tmp("rt.npy"), &size);
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
    assert_no_temporaries();
}

static void test_npy_save_overwrites_atomically_and_sets_mode(void **state)
{
    (void)state;
    float x = 1.5f;
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, &x, 1, (const int64_t[]){1}, NULL));
    TA_CHECK_OK(ta_npy_save(tmp("over.npy"), &t));
    x = -2.0f;
    TA_CHECK_OK(ta_npy_save(tmp("over.npy"), &t));
    ta_tensor u;
    TA_CHECK_OK(ta_npy_load(&u, tmp("over.npy")));
    assert_true(((float *)u.data)[0] == -2.0f);
    ta_tensor_free(&u);
    /* Not mkstemp's 0600: what creat(path, 0666) would give under the umask. */
    mode_t mask = umask(022);
    umask(mask);
    struct stat sb;
    assert_int_equal(stat(tmp("over.npy"), &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0666 & ~mask);
    assert_no_temporaries();
}

static void test_npy_save_errors_leave_no_file(void **state)
{
    (void)state;
    float x[6] = {0};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, x, 2, (const int64_t[]){2, 3}, NULL));
    const char *missing_dir = tmp("no/such/dir/out.npy");
    TA_CHECK_ERR(ta_npy_save(missing_dir, &t), TA_EIO,
                 "cannot create a temporary file beside it: No such file or directory");
    assert_non_null(strstr(ta_last_error(), missing_dir));
    assert_false(file_exists(missing_dir));
    TA_CHECK_ERR(ta_npy_save(NULL, &t), TA_EINVAL, "ta_npy_save: path is NULL or empty");
    TA_CHECK_ERR(ta_npy_save(tmp("x.npy"), NULL), TA_EINVAL, "ta_npy_save: t is NULL");
    ta_tensor bad = t;
    bad.dtype = TA_F64;
    TA_CHECK_ERR(ta_npy_save(tmp("x.npy"), &bad), TA_EUNSUPPORTED, "ta_npy_save: t has dtype");
    assert_false(file_exists(tmp("x.npy")));
    /* Saving onto a directory fails at rename; the directory and no temporary stay. */
    assert_int_equal(mkdir(tmp("adir"), 0755), 0);
    TA_CHECK_ERR(ta_npy_save(tmp("adir"), &t), TA_EIO, "rename failed");
    struct stat sb;
    assert_int_equal(stat(tmp("adir"), &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_no_temporaries();
}

/* A write that fails half-way (the file size limit, EFBIG) keeps the old file intact. */
static void test_failed_write_does_not_clobber_existing_file(void **state)
{
    (void)state;
    float x[3] = {1, 2, 3};
    ta_tensor small, big;
    TA_CHECK_OK(ta_tensor_from_buffer(&small, x, 1, (const int64_t[]){3}, NULL));
    TA_CHECK_OK(ta_npy_save(tmp("keep.npy"), &small));
    const char *names[] = {"w"};
    const ta_tensor *ts[] = {&small};
    TA_CHECK_OK(ta_safetensors_save(tmp("keep.safetensors"), 1, names, ts));
    size_t n0, s0;
    unsigned char *npy0 = slurp(tmp("keep.npy"), &n0), *st0 = slurp(tmp("keep.safetensors"), &s0);

    TA_CHECK_OK(ta_tensor_zeros(&big, 2, (const int64_t[]){256, 256}));
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 100000; /* the big tensor needs 262 KB */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ta_status s1 = ta_npy_save(tmp("keep.npy"), &big);
    char m1[1024];
    snprintf(m1, sizeof m1, "%s", ta_last_error());
    ts[0] = &big;
    ta_status s2 = ta_safetensors_save(tmp("keep.safetensors"), 1, names, ts);
    char m2[1024];
    snprintf(m2, sizeof m2, "%s", ta_last_error());
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);

    assert_int_equal(s1, TA_EIO);
    assert_non_null(strstr(m1, "File too large"));
    assert_int_equal(s2, TA_EIO);
    assert_non_null(strstr(m2, "File too large"));
    size_t n1, s1b;
    unsigned char *npy1 = slurp(tmp("keep.npy"), &n1), *st1 = slurp(tmp("keep.safetensors"), &s1b);
    assert_int_equal(n0, n1);
    assert_memory_equal(npy0, npy1, n0);
    assert_int_equal(s0, s1b);
    assert_memory_equal(st0, st1, s0);
    assert_no_temporaries();
    free(npy0), free(npy1), free(st0), free(st1);
    ta_tensor_free(&big);
}

/* ------------------------------------------------------ half precision */

/* Every bit pattern against the definition, in double: (-1)^s 2^(e-15) (1 + m/1024),
 * subnormals 2^-14 (m/1024). */
static void test_half_and_bfloat16_decode_every_pattern(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                       : ldexp(1024 + m, e - 25);
        if (s) want = -want;
        float got = ta_half_to_float((uint16_t)h);
        if (isnan(want)) {
            if (!isnan(got)) fail_msg("half 0x%04x: expected NaN, got %g", h, (double)got);
        } else if ((double)got != want || !signbit(got) != !signbit(want)) {
            fail_msg("half 0x%04x: got %.9g, expected %.9g", h, (double)got, want);
        }
    }
    for (uint32_t b = 0; b < 65536; b++) {
        int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
        double want = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY)
                                                         : ldexp(128 + m, e - 134);
        if (s) want = -want;
        float got = ta_bfloat16_to_float((uint16_t)b);
        if (isnan(want)) {
            if (!isnan(got)) fail_msg("bf16 0x%04x: expected NaN", b);
        } else if ((double)got != want || !signbit(got) != !signbit(want)) {
            fail_msg("bf16 0x%04x: got %.9g, expected %.9g", b, (double)got, want);
        }
    }
}

/* ------------------------------------------------------------- safetensors */

static void test_safetensors_reads_and_converts_every_float_dtype(void **state)
{
    (void)state;
    ta_safetensors *st = NULL;
    TA_CHECK_OK(ta_safetensors_open(&st, fix("mixed.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 7);
    const char *sorted[] = {"a.f32", "b.f16", "c.bf16", "d.f64", "e.scalar", "f.empty", "g.i64"};
    for (int i = 0; i < 7; i++) {
        assert_string_equal(ta_safetensors_name(st, i), sorted[i]);
        assert_int_equal(ta_safetensors_find(st, sorted[i]), i);
    }
    assert_null(ta_safetensors_name(st, 7));
    assert_null(ta_safetensors_name(st, -1));
    assert_int_equal(ta_safetensors_find(st, "__metadata__"), -1);
    static const struct {
        const char *name;
        int ndim;
        int64_t shape[2];
    } cases[] = {{"a.f32", 2, {2, 3}},  {"b.f16", 1, {12}},   {"c.bf16", 2, {3, 4}},
                 {"d.f64", 2, {2, 2}},  {"e.scalar", 0, {0}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ta_tensor t;
        TA_CHECK_OK(ta_safetensors_get(&t, st, cases[i].name));
        assert_shape(&t, cases[i].ndim, cases[i].shape);
        char exp[64];
        snprintf(exp, sizeof exp, "mixed.%s", cases[i].name);
        assert_matches_expected(&t, exp);
        ta_tensor_free(&t);
    }
    ta_tensor t;
    TA_CHECK_OK(ta_safetensors_get(&t, st, "f.empty"));
    assert_shape(&t, 2, (const int64_t[]){0, 4});
    ta_tensor_free(&t);

    memset(&t, 0x5a, sizeof t);
    ta_tensor before = t;
    TA_CHECK_ERR(ta_safetensors_get(&t, st, "g.i64"), TA_EUNSUPPORTED,
                 "tensor 'g.i64' has dtype I64; only F32, F16, BF16 and F64 can be read");
    char msg[600];
    snprintf(msg, sizeof msg, "ta_safetensors_get: no tensor named 'fc_out.bias' in %s",
             fix("mixed.safetensors"));
    TA_CHECK_ERR(ta_safetensors_get(&t, st, "fc_out.bias"), TA_EINVAL, msg);
    TA_CHECK_ERR(ta_safetensors_get(&t, st, NULL), TA_EINVAL, "name is NULL");
    TA_CHECK_ERR(ta_safetensors_get(&t, NULL, "a.f32"), TA_EINVAL, "st is NULL");
    TA_CHECK_ERR(ta_safetensors_get(NULL, st, "a.f32"), TA_EINVAL, "out is NULL");
    assert_memory_equal(&t, &before, sizeof t);
    ta_safetensors_free(st);
    ta_safetensors_free(NULL);

    TA_CHECK_OK(ta_safetensors_open(&st, fix("empty.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 0);
    ta_safetensors_free(st);
}

/* A file written by the safetensors package itself (torch.save_file). */
static void test_safetensors_reads_the_official_writer(void **state)
{
    (void)state;
    ta_safetensors *st;
    TA_CHECK_OK(ta_safetensors_open(&st, fix("official.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 4);
    static const struct {
        const char *name;
        int ndim;
        int64_t shape[2];
    } cases[] = {{"fc_out.bias", 1, {4}},   {"fc_out.weight", 2, {4, 3}},
                 {"keys.weight", 2, {3, 3}}, {"values.weight", 2, {2, 5}}};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(ta_safetensors_name(st, i), cases[i].name);
        ta_tensor t;
        TA_CHECK_OK(ta_safetensors_get(&t, st, cases[i].name));
        assert_shape(&t, cases[i].ndim, cases[i].shape);
        char exp[64];
        snprintf(exp, sizeof exp, "official.%s", cases[i].name);
        assert_matches_expected(&t, exp);
        ta_tensor_free(&t);
    }
    ta_safetensors_free(st);
}

static void test_safetensors_errors_name_the_file_and_the_problem(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        ta_status code;
        const char *needle;
    } cases[] = {
        {"st_short.safetensors", TA_EFORMAT, "file is 5 bytes, too short for the 8-byte header"},
        {"st_header_beyond.safetensors", TA_EFORMAT,
         "header length 1000 goes beyond the end of the file (24 bytes)"},
        {"st_bad_json.safetensors", TA_EFORMAT, "header is not valid JSON"},
        {"st_not_object.safetensors", TA_EFORMAT, "header is not a JSON object"},
        {"st_nul.safetensors", TA_EFORMAT, "header has a NUL byte at byte 2"},
        {"st_offsets_outside.safetensors", TA_EFORMAT,
         "tensor 'a': data_offsets [0, 64] lie outside the data area of 24 bytes"},
        {"st_size_mismatch.safetensors", TA_EFORMAT,
         "tensor 'a': data_offsets [0, 20] hold 20 bytes but shape [2, 3] of F32 needs a "
         "different size"},
        {"st_unknown_dtype.safetensors", TA_EFORMAT, "tensor 'a': unknown dtype 'Q7'"},
        {"st_overlap.safetensors", TA_EFORMAT, "tensors 'a' and 'b' overlap"},
        {"st_gap.safetensors", TA_EFORMAT, "bytes [8, 16) of the data area belong to no tensor"},
        {"st_trailing.safetensors", TA_EFORMAT,
         "bytes [8, 12) of the data area belong to no tensor"},
        {"st_shape_huge.safetensors", TA_EFORMAT, "shape entries must be integers in [0, 2^53]"},
        {"st_shape_overflow.safetensors", TA_EFORMAT, "needs more than 2^64"},
        {"st_negative_shape.safetensors", TA_EFORMAT, "shape entries must be integers"},
        {"st_missing_offsets.safetensors", TA_EFORMAT,
         "tensor 'a': 'data_offsets' must be [begin, end]"},
        {"st_duplicate.safetensors", TA_EFORMAT, "tensor name 'a' appears twice"},
        {"no_such.safetensors", TA_EIO, "cannot open: No such file or directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ta_safetensors *st = (ta_safetensors *)&st;
        const char *p = fix(cases[i].file);
        char prefix[600];
        snprintf(prefix, sizeof prefix, "ta_safetensors_open: %s: ", p);
        TA_CHECK_ERR(ta_safetensors_open(&st, p), cases[i].code, cases[i].needle);
        if (strncmp(ta_last_error(), prefix, strlen(prefix)) != 0)
            fail_msg("message '%s' does not start with '%s'", ta_last_error(), prefix);
        assert_ptr_equal(st, (ta_safetensors *)&st);
    }
    ta_safetensors *st;
    TA_CHECK_ERR(ta_safetensors_open(&st, tmpdir), TA_EIO, "not a regular file");
    TA_CHECK_ERR(ta_safetensors_open(NULL, "x"), TA_EINVAL, "st is NULL");
    TA_CHECK_ERR(ta_safetensors_open(&st, ""), TA_EINVAL, "path is NULL or empty");
    /* More dimensions than we hold: the file opens, that tensor is refused. */
    TA_CHECK_OK(ta_safetensors_open(&st, fix("st_9d.safetensors")));
    ta_tensor t;
    TA_CHECK_ERR(ta_safetensors_get(&t, st, "a"), TA_EUNSUPPORTED,
                 "tensor 'a' has 9 dimensions; at most 8 are supported");
    ta_safetensors_free(st);
}

static void test_safetensors_roundtrip_keeps_names_values_and_layout(void **state)
{
    (void)state;
    ta_tensor a, at, s, e, big;
    TA_CHECK_OK(ta_tensor_empty(&a, 3, (const int64_t[]){2, 3, 4}));
    TA_CHECK_OK(ta_randn(&a, 11));
    TA_CHECK_OK(ta_tensor_permute(&at, &a, (const int[]){2, 0, 1}));
    TA_CHECK_OK(ta_tensor_full(&s, 0, NULL, -1.25f));
    TA_CHECK_OK(ta_tensor_empty(&e, 2, (const int64_t[]){0, 5}));
    TA_CHECK_OK(ta_tensor_empty(&big, 2, (const int64_t[]){50, 101}));
    TA_CHECK_OK(ta_rand(&big, 3));
    const char *names[] = {"z.weight", "quote\"back\\slash\x01", "scal\xc3\xa4r", "empty",
                           "a.permuted"};
    const ta_tensor *ts[] = {&big, &a, &s, &e, &at};
    TA_CHECK_OK(ta_safetensors_save(tmp("rt.safetensors"), 5, names, ts));

    size_t size;
    unsigned char *b = slurp(tmp("rt.safetensors"), &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(size, 8 + hlen + 4 * (50 * 101 + 24 + 1 + 0 + 24));
    /* Data in the given order: the first tensor right after the header. */
    assert_memory_equal(b + 8 + hlen, big.data, 50 * 101 * 4);
    assert_non_null(memmem(b + 8, hlen, "\"__metadata__\":{\"format\":\"pt\"}", 30));
    free(b);

    ta_safetensors *st;
    TA_CHECK_OK(ta_safetensors_open(&st, tmp("rt.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 5);
    for (int i = 0; i < 5; i++) {
        ta_tensor u;
        assert_true(ta_safetensors_find(st, names[i]) >= 0);
        TA_CHECK_OK(ta_safetensors_get(&u, st, names[i]));
        assert_shape(&u, ts[i]->ndim, ts[i]->shape);
        ta_tensor want;
        TA_CHECK_OK(ta_tensor_contiguous(&want, ts[i]));
        assert_memory_equal(u.data, want.data, (size_t)ta_tensor_numel(&u) * 4);
        ta_tensor_free(&want);
        ta_tensor_free(&u);
    }
    ta_safetensors_free(st);
    /* n == 0 writes a valid empty file. */
    TA_CHECK_OK(ta_safetensors_save(tmp("none.safetensors"), 0, NULL, NULL));
    TA_CHECK_OK(ta_safetensors_open(&st, tmp("none.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 0);
    ta_safetensors_free(st);
    ta_tensor_free(&a), ta_tensor_free(&s), ta_tensor_free(&e), ta_tensor_free(&big);
    assert_no_temporaries();
}

static void test_safetensors_save_argument_errors_write_nothing(void **state)
{
    (void)state;
    float x[2] = {1, 2};
    ta_tensor t, bad;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, x, 1, (const int64_t[]){2}, NULL));
    bad = t;
    bad.dtype = TA_BF16;
    const char *p = tmp("bad.safetensors");
    const ta_tensor *two[] = {&t, &t};
    const ta_tensor *withbad[] = {&t, &bad};
    TA_CHECK_ERR(ta_safetensors_save(p, 2, (const char *[]){"a", "a"}, two), TA_EINVAL,
                 "names[0] and names[1] are both 'a'");
    TA_CHECK_ERR(ta_safetensors_save(p, 2, (const char *[]){"a", "__metadata__"}, two),
                 TA_EINVAL, "names[1] is the reserved key '__metadata__'");
    TA_CHECK_ERR(ta_safetensors_save(p, 2, (const char *[]){"a", ""}, two), TA_EINVAL,
                 "names[1] is NULL or empty");
    TA_CHECK_ERR(ta_safetensors_save(p, 2, (const char *[]){"a", "b\xff"}, two), TA_EINVAL,
                 "names[1] is not valid UTF-8");
    TA_CHECK_ERR(ta_safetensors_save(p, 2, (const char *[]){"a", "b"}, withbad),
                 TA_EUNSUPPORTED, "ta_safetensors_save: tensors[1] has dtype");
    TA_CHECK_ERR(ta_safetensors_save(p, -1, NULL, NULL), TA_EINVAL, "n must be >= 0");
    TA_CHECK_ERR(ta_safetensors_save(p, 1, NULL, two), TA_EINVAL, "names is NULL");
    TA_CHECK_ERR(ta_safetensors_save(tmp("no/dir/w.safetensors"), 1, (const char *[]){"a"}, two),
                 TA_EIO, "No such file or directory");
    assert_false(file_exists(p));
    assert_false(file_exists(tmp("no/dir/w.safetensors")));
    assert_no_temporaries();
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
        cmocka_unit_test(test_half_and_bfloat16_decode_every_pattern),
        cmocka_unit_test(test_safetensors_reads_and_converts_every_float_dtype),
        cmocka_unit_test(test_safetensors_reads_the_official_writer),
        cmocka_unit_test(test_safetensors_errors_name_the_file_and_the_problem),
        cmocka_unit_test(test_safetensors_roundtrip_keeps_names_values_and_layout),
        cmocka_unit_test(test_safetensors_save_argument_errors_write_nothing),
    };
    return cmocka_run_group_tests(tests, setup_tmpdir, remove_tmpdir);
}
