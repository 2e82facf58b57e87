/* .safetensors reader and writer (the float16 and bfloat16 conversions: test_dtype.c).
 *
 * Oracles: .safetensors files assembled from the format description and one from the
 * official writer (tests/fixtures/io, tools/gen_io_fixtures.py), with the values the
 * reader must return stored beside them as raw float32 computed by torch (read here with
 * fread). Every error path is checked for its status, its message, and for leaving
 * outputs untouched. */
#include "ta_test.h"
#include "io_files.h"

#include "io/io_internal.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int setup(void **state)
{
    (void)state;
    return ta_test_make_dir("ta_test_safetensors");
}

/* ------------------------------------------------------------- safetensors */

static void test_safetensors_reads_and_converts_every_float_dtype(void **state)
{
    (void)state;
    ta_safetensors *st = NULL;
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_io_fixture("mixed.safetensors")));
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
        ta_test_assert_shape(&t, cases[i].ndim, cases[i].shape);
        char exp[64];
        snprintf(exp, sizeof exp, "mixed.%s", cases[i].name);
        ta_test_assert_matches_expected(&t, exp);
        ta_tensor_free(&t);
    }
    ta_tensor t;
    TA_CHECK_OK(ta_safetensors_get(&t, st, "f.empty"));
    ta_test_assert_shape(&t, 2, (const int64_t[]){0, 4});
    ta_tensor_free(&t);

    memset(&t, 0x5a, sizeof t);
    ta_tensor before = t;
    TA_CHECK_ERR(ta_safetensors_get(&t, st, "g.i64"), TA_EUNSUPPORTED,
                 "tensor 'g.i64' has dtype I64; only F32, F16, BF16 and F64 can be read");
    char msg[600];
    snprintf(msg, sizeof msg, "ta_safetensors_get: no tensor named 'fc_out.bias' in %s",
             ta_test_io_fixture("mixed.safetensors"));
    TA_CHECK_ERR(ta_safetensors_get(&t, st, "fc_out.bias"), TA_EINVAL, msg);
    TA_CHECK_ERR(ta_safetensors_get(&t, st, NULL), TA_EINVAL, "name is NULL");
    TA_CHECK_ERR(ta_safetensors_get(&t, NULL, "a.f32"), TA_EINVAL, "st is NULL");
    TA_CHECK_ERR(ta_safetensors_get(NULL, st, "a.f32"), TA_EINVAL, "out is NULL");
    assert_memory_equal(&t, &before, sizeof t);
    ta_safetensors_free(st);
    ta_safetensors_free(NULL);

    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_io_fixture("empty.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 0);
    ta_safetensors_free(st);
}

/* A file written by the safetensors package itself (torch.save_file). */
static void test_safetensors_reads_the_official_writer(void **state)
{
    (void)state;
    ta_safetensors *st;
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_io_fixture("official.safetensors")));
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
        ta_test_assert_shape(&t, cases[i].ndim, cases[i].shape);
        char exp[64];
        snprintf(exp, sizeof exp, "official.%s", cases[i].name);
        ta_test_assert_matches_expected(&t, exp);
        ta_tensor_free(&t);
    }
    ta_safetensors_free(st);
}

/* ta_safetensors_open of path, *st untouched by the failure. */
static ta_status safetensors_open_untouched(const char *path)
{
    ta_safetensors *st = (ta_safetensors *)&st;
    ta_status status = ta_safetensors_open(&st, path);
    assert_ptr_equal(st, (ta_safetensors *)&st);
    return status;
}

static void test_safetensors_errors_name_the_file_and_the_problem(void **state)
{
    (void)state;
    static const ta_test_file_error cases[] = {
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
    ta_test_expect_file_errors("ta_safetensors_open", cases, sizeof cases / sizeof cases[0],
                               safetensors_open_untouched);
    ta_safetensors *st;
    TA_CHECK_ERR(ta_safetensors_open(&st, ta_test_dir), TA_EIO, "not a regular file");
    TA_CHECK_ERR(ta_safetensors_open(NULL, "x"), TA_EINVAL, "st is NULL");
    TA_CHECK_ERR(ta_safetensors_open(&st, ""), TA_EINVAL, "path is NULL or empty");
    /* More dimensions than we hold: the file opens, that tensor is refused. */
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_io_fixture("st_9d.safetensors")));
    ta_tensor t;
    TA_CHECK_ERR(ta_safetensors_get(&t, st, "a"), TA_EUNSUPPORTED,
                 "tensor 'a' has 9 dimensions; at most 8 are supported");
    ta_safetensors_free(st);
}

static void on_alarm(int sig) { (void)sig; }

/* A FIFO that no process writes is refused at once, like a directory (until session 35
 * open() waited for a writer, forever; here the alarm interrupts such a wait, so the old
 * code fails with "Interrupted system call" instead of hanging the test). */
static void test_safetensors_fifo_is_refused_without_waiting(void **state)
{
    (void)state;
    const char *path = ta_test_path("st_fifo.safetensors");
    unlink(path);
    assert_int_equal(mkfifo(path, 0644), 0);
    struct sigaction sa = {.sa_handler = on_alarm}, old; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
    alarm(5);
    ta_safetensors *st = NULL;
    const ta_status status = ta_safetensors_open(&st, path);
    alarm(0);
    assert_int_equal(sigaction(SIGALRM, &old, NULL), 0);
    TA_CHECK_ERR(status, TA_EIO, "not a regular file");
    assert_null(st);
    ta_attention *layer = NULL;
    TA_CHECK_ERR(ta_attention_load(&layer, path, TA_LAYOUT_TORCH, 2), TA_EIO, "not a regular file");
    assert_null(layer);
    unlink(path);
}

/* A file whose header is the JSON text `header` and whose data area is one float32
 * 1.5, in the test's directory. */
static const char *file_with_header(const char *name, const char *header)
{
    const char *path = ta_test_path(name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const uint64_t n = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    const float x = 1.5f;
    assert_int_equal(fwrite(len, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, n, f), n);
    assert_int_equal(fwrite(&x, 1, 4, f), 4);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* A file_with_header file opens, and its tensor `name` holds the 1.5 written after the
 * header. */
static void assert_reads_value(const char *path, const char *name)
{
    ta_safetensors *st;
    TA_CHECK_OK(ta_safetensors_open(&st, path));
    ta_tensor t;
    TA_CHECK_OK(ta_safetensors_get(&t, st, name));
    assert_true(((const float *)t.data)[0] == 1.5f);
    ta_tensor_free(&t);
    ta_safetensors_free(st);
}

/* cJSON decodes an escaped NUL into a NUL that ends the name it hands over: "a\u0000x"
 * would be read as "a" (two such names as one name twice), so a header with one is
 * refused; an escaped backslash before "u0000" is an ordinary name. */
static void test_safetensors_escaped_nul_is_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"a\\u0000x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"a\": {\"dtype\": \"F32\\u0000\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        ("{\"__metadata__\": {\"k\": \"\\u0000\"}, \"a\": {\"dtype\": \"F32\", \"shape\": [1], "
         "\"data_offsets\": [0, 4]}}")};
    for (int i = 0; i < 3; i++)
        TA_CHECK_ERR(safetensors_open_untouched(file_with_header("st_esc_nul.safetensors", bad[i])),
                     TA_EFORMAT, "escaped NUL (\\u0000)");
    /* the name a\u0000 (a backslash, then the letters): read, and found by that name */
    const char *ok = file_with_header(
        "st_esc_backslash.safetensors",
        "{\"a\\\\u0000\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}");
    assert_reads_value(ok, "a\\u0000");
}

/* A header that is not UTF-8 (JSON is UTF-8; the official reader refuses such a file) is
 * refused, a name in any well-formed UTF-8 read (until session 37 a name of stray bytes
 * was read as given). */
static void test_safetensors_header_must_be_utf8(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"a\xff\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"a\xc3\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"a\xed\xa0\x80\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"a\xc0\xaf\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        ("{\"__metadata__\": {\"k\": \"\xfe\"}, \"a\": {\"dtype\": \"F32\", \"shape\": [1], "
         "\"data_offsets\": [0, 4]}}")};
    for (int i = 0; i < 5; i++)
        TA_CHECK_ERR(safetensors_open_untouched(file_with_header("st_utf8.safetensors", bad[i])),
                     TA_EFORMAT, "header is not valid UTF-8 (at byte ");
    const char *ok = file_with_header(
        "st_utf8_ok.safetensors",
        "{\"caf\xc3\xa9.\xe2\x82\xac.\xf0\x9f\x98\x80\": {\"dtype\": \"F32\", \"shape\": [1], "
        "\"data_offsets\": [0, 4]}}");
    assert_reads_value(ok, "caf\xc3\xa9.\xe2\x82\xac.\xf0\x9f\x98\x80");
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
    TA_CHECK_OK(ta_safetensors_save(ta_test_path("rt.safetensors"), 5, names, ts));

    size_t size;
    unsigned char *b = ta_test_slurp(ta_test_path("rt.safetensors"), &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(size, 8 + hlen + 4 * (50 * 101 + 24 + 1 + 0 + 24));
    /* Data in the given order: the first tensor right after the header. */
    assert_memory_equal(b + 8 + hlen, big.data, 50 * 101 * 4);
    assert_non_null(memmem(b + 8, hlen, "\"__metadata__\":{\"format\":\"pt\"}", 30));
    free(b);

    ta_safetensors *st;
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_path("rt.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 5);
    for (int i = 0; i < 5; i++) {
        ta_tensor u;
        assert_true(ta_safetensors_find(st, names[i]) >= 0);
        TA_CHECK_OK(ta_safetensors_get(&u, st, names[i]));
        ta_test_assert_shape(&u, ts[i]->ndim, ts[i]->shape);
        ta_tensor want;
        TA_CHECK_OK(ta_tensor_contiguous(&want, ts[i]));
        assert_memory_equal(u.data, want.data, (size_t)ta_tensor_numel(&u) * 4);
        ta_tensor_free(&want);
        ta_tensor_free(&u);
    }
    ta_safetensors_free(st);
    /* n == 0 writes a valid empty file. */
    TA_CHECK_OK(ta_safetensors_save(ta_test_path("none.safetensors"), 0, NULL, NULL));
    TA_CHECK_OK(ta_safetensors_open(&st, ta_test_path("none.safetensors")));
    assert_int_equal(ta_safetensors_count(st), 0);
    ta_safetensors_free(st);
    ta_tensor_free(&a), ta_tensor_free(&s), ta_tensor_free(&e), ta_tensor_free(&big);
    ta_test_assert_no_temporaries();
}

static void test_safetensors_save_argument_errors_write_nothing(void **state)
{
    (void)state;
    float x[2] = {1, 2};
    ta_tensor t, bad;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, x, 1, (const int64_t[]){2}, NULL));
    bad = t;
    bad.dtype = (ta_dtype)7;
    const char *p = ta_test_path("bad.safetensors");
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
                 TA_EINVAL, "ta_safetensors_save: tensors[1] has dtype 7, not a ta_dtype");
    TA_CHECK_ERR(ta_safetensors_save(p, -1, NULL, NULL), TA_EINVAL, "n must be >= 0");
    TA_CHECK_ERR(ta_safetensors_save(p, 1, NULL, two), TA_EINVAL, "names is NULL");
    TA_CHECK_ERR(ta_safetensors_save(ta_test_path("no/dir/w.safetensors"), 1, (const char *[]){"a"}, two),
                 TA_EIO, "No such file or directory");
    assert_false(ta_test_file_exists(p));
    assert_false(ta_test_file_exists(ta_test_path("no/dir/w.safetensors")));
    ta_test_assert_no_temporaries();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_reads_and_converts_every_float_dtype),
        cmocka_unit_test(test_safetensors_reads_the_official_writer),
        cmocka_unit_test(test_safetensors_errors_name_the_file_and_the_problem),
        cmocka_unit_test(test_safetensors_fifo_is_refused_without_waiting),
        cmocka_unit_test(test_safetensors_escaped_nul_is_refused),
        cmocka_unit_test(test_safetensors_header_must_be_utf8),
        cmocka_unit_test(test_safetensors_roundtrip_keeps_names_values_and_layout),
        cmocka_unit_test(test_safetensors_save_argument_errors_write_nothing),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
