/* ta-test: all-isas -- Tensors of float16, bfloat16 and float64: the _dtype constructors,
 * copies between dtypes (contiguous rows through the TA_ARCH table's converters, strided
 * ones through the scalar conversions), ta_tensor_contiguous, fill, views and overlap
 * checks with 2- and 8-byte elements, the random fills, and the float32-only operations'
 * refusals. The oracle: tests/support/dtype_oracle.c (double arithmetic, nearest value,
 * ties to even) and index arithmetic written out here. */
#include "ta_test.h"

#include "core/tensor_internal.h"
#include "dtype_oracle.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const ta_dtype all_dtypes[4] = {TA_F32, TA_F16, TA_BF16, TA_F64};

/* Element idx of t as a double (any dtype, any strides). */
static double get(const ta_tensor *t, const int64_t *idx)
{
    const void *p = ta_tensor_ptr(t, idx);
    uint16_t h;
    float f;
    double d;
    switch (t->dtype) {
    case TA_F16: memcpy(&h, p, 2); return ta_oracle_f16_value(h);
    case TA_BF16: memcpy(&h, p, 2); return ta_oracle_bf16_value(h);
    case TA_F64: memcpy(&d, p, 8); return d;
    default: memcpy(&f, p, 4); return f;
    }
}

static uint16_t get_half(const ta_tensor *t, const int64_t *idx)
{
    uint16_t h;
    memcpy(&h, ta_tensor_ptr(t, idx), 2);
    return h;
}

/* Every element of dst is src's rounded to dst's dtype (C order over the shape). */
static void assert_converted(const ta_tensor *dst, const ta_tensor *src, const char *what)
{
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(src);
    for (int64_t e = 0; e < n; e++, ta_test_next_index(src->ndim, src->shape, idx)) {
        double x = get(src, idx), y = get(dst, idx);
        if (dst->dtype == TA_F16 || dst->dtype == TA_BF16) {
            uint16_t want = ta_oracle_from_f64(x, dst->dtype), got = get_half(dst, idx);
            if (got != want && !(isnan(x) && ta_oracle_is_nan(got, dst->dtype)))
                fail_msg("%s: element %lld: 0x%04x, expected 0x%04x (%.17g)", what, (long long)e,
                         got, want, x);
        } else {
            double want = dst->dtype == TA_F32 ? (double)(float)x : x;
            if (isnan(want) ? !isnan(y) : (y != want || !signbit(y) != !signbit(want)))
                fail_msg("%s: element %lld: %.17g, expected %.17g", what, (long long)e, y, want);
        }
    }
}

/* A float32 [r, c] tensor of values that exercise rounding: ties of both half types,
 * neighbours of ties, overflow, subnormals, NaN, signed zeros, and plain values. */
static void make_tricky(ta_tensor *t, int64_t r, int64_t c)
{
    TA_CHECK_OK(ta_tensor_empty(t, 2, (const int64_t[]){r, c}));
    static const float special[] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 1.0f + 0x1p-8f,
                                    1.0f + 0x3p-8f, 65520.0f, 65519.0f, 1e30f, 0x1p-25f,
                                    0x1.8p-25f, 0x1p-130f, -0.0f, 0.0f, NAN, -INFINITY,
                                    0.1f, -2.5f, 1e-8f, 3.0e38f};
    float *p = t->data;
    for (int64_t i = 0; i < r * c; i++)
        p[i] = special[i % 18] * (i / 18 % 2 ? -1.0f : 1.0f);
}

/* ------------------------------------------------------------ constructors */

static void test_dtype_constructors_and_errors(void **state)
{
    (void)state;
    const int64_t shape[3] = {2, 3, 5};
    for (int i = 0; i < 4; i++) {
        ta_tensor t;
        TA_CHECK_OK(ta_tensor_zeros_dtype(&t, all_dtypes[i], 3, shape));
        assert_int_equal(t.dtype, all_dtypes[i]);
        assert_int_equal(t.stride[0], 15);
        assert_int_equal(t.stride[2], 1);
        assert_non_null(t.owned);
        const unsigned char *b = t.data;
        for (size_t k = 0; k < 30 * ta_dtype_size(t.dtype); k++) assert_int_equal(b[k], 0);
        ta_tensor_free(&t);
        TA_CHECK_OK(ta_tensor_empty_dtype(&t, all_dtypes[i], 0, NULL));
        assert_int_equal(ta_tensor_numel(&t), 1);
        ta_tensor_free(&t);
    }
    uint16_t buf[30];
    ta_tensor v;
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&v, buf, TA_BF16, 2, (const int64_t[]){5, 3},
                                            (const int64_t[]){1, 5}));
    assert_int_equal(v.dtype, TA_BF16);
    assert_null(v.owned);
    assert_ptr_equal(v.data, buf);
    assert_int_equal(v.stride[1], 5);

    ta_tensor t;
    memset(&t, 0x5a, sizeof t);
    ta_tensor before = t;
    TA_CHECK_ERR(ta_tensor_empty_dtype(&t, (ta_dtype)7, 3, shape), TA_EINVAL,
                 "ta_tensor_empty_dtype: dtype = 7 is not a ta_dtype");
    TA_CHECK_ERR(ta_tensor_zeros_dtype(&t, TA_F16, 3, (const int64_t[]){2, -1, 5}), TA_EINVAL,
                 "ta_tensor_zeros_dtype: shape[1] is negative (-1)");
    TA_CHECK_ERR(ta_tensor_zeros_dtype(NULL, TA_F16, 3, shape), TA_EINVAL, "t is NULL");
    /* 2^60 float64 elements are 2^63 bytes: refused before allocating; as float16 the
     * same count is a size the allocator is asked for (and refuses) */
    TA_CHECK_ERR(ta_tensor_empty_dtype(&t, TA_F64, 2, (const int64_t[]){1 << 30, 1 << 30}),
                 TA_EINVAL, "too many elements");
    TA_CHECK_ERR(ta_tensor_from_buffer_dtype(&t, NULL, TA_F16, 1, (const int64_t[]){3}, NULL),
                 TA_EINVAL, "ta_tensor_from_buffer_dtype: data is NULL");
    TA_CHECK_ERR(ta_tensor_from_buffer_dtype(&t, buf, (ta_dtype)-1, 1, (const int64_t[]){3}, NULL),
                 TA_EINVAL, "dtype = -1 is not a ta_dtype");
    assert_memory_equal(&t, &before, sizeof t);
}

/* ------------------------------------------------------------------ copies */

static void test_copy_converts_between_every_pair(void **state)
{
    (void)state;
    ta_tensor f32, f32t;
    make_tricky(&f32, 9, 13);
    TA_CHECK_OK(ta_tensor_transpose(&f32t, &f32, 0, 1)); /* [13, 9], strided rows */
    for (int i = 0; i < 4; i++) {
        /* from float32, contiguous and transposed, into each dtype */
        ta_tensor a, b;
        TA_CHECK_OK(ta_tensor_empty_dtype(&a, all_dtypes[i], 2, f32.shape));
        TA_CHECK_OK(ta_tensor_copy(&a, &f32));
        assert_converted(&a, &f32, "f32 -> contiguous");
        TA_CHECK_OK(ta_tensor_empty_dtype(&b, all_dtypes[i], 2, f32t.shape));
        TA_CHECK_OK(ta_tensor_copy(&b, &f32t));
        assert_converted(&b, &f32t, "f32 transposed -> contiguous");
        /* and from there into each dtype, into a transposed destination */
        for (int j = 0; j < 4; j++) {
            ta_tensor c, ct;
            TA_CHECK_OK(ta_tensor_empty_dtype(&c, all_dtypes[j], 2, f32t.shape));
            TA_CHECK_OK(ta_tensor_transpose(&ct, &c, 0, 1));
            TA_CHECK_OK(ta_tensor_copy(&ct, &a));
            assert_converted(&ct, &a, "pair, transposed destination");
            TA_CHECK_OK(ta_tensor_copy(&c, &b));
            assert_converted(&c, &b, "pair, contiguous");
            ta_tensor_free(&c);
        }
        ta_tensor_free(&a);
        ta_tensor_free(&b);
    }
    /* float64 rounds to float16 once: 1 + 2^-11 + 2^-40 is just above a tie, which
     * float32 would make exact and round down to 1 */
    double d[2] = {1.0 + 0x1p-11 + 0x1p-40, -(1.0 + 0x1p-8 + 0x1p-40)};
    ta_tensor t64, t16;
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&t64, d, TA_F64, 1, (const int64_t[]){2}, NULL));
    TA_CHECK_OK(ta_tensor_empty_dtype(&t16, TA_F16, 1, (const int64_t[]){2}));
    TA_CHECK_OK(ta_tensor_copy(&t16, &t64));
    assert_int_equal(((uint16_t *)t16.data)[0], 0x3c01);
    t16.dtype = TA_BF16;
    TA_CHECK_OK(ta_tensor_copy(&t16, &t64));
    assert_int_equal(((uint16_t *)t16.data)[1], 0xbf81);
    ta_tensor_free(&t16);
    ta_tensor_free(&f32);
}

static void test_contiguous_keeps_the_dtype(void **state)
{
    (void)state;
    ta_tensor f32, h, ht, c;
    make_tricky(&f32, 6, 7);
    TA_CHECK_OK(ta_tensor_empty_dtype(&h, TA_F16, 2, f32.shape));
    TA_CHECK_OK(ta_tensor_copy(&h, &f32));
    TA_CHECK_OK(ta_tensor_transpose(&ht, &h, 0, 1));
    TA_CHECK_OK(ta_tensor_contiguous(&c, &ht));
    assert_int_equal(c.dtype, TA_F16);
    assert_true(ta_tensor_is_contiguous(&c));
    assert_int_equal(c.shape[0], 7);
    int64_t idx[2] = {0};
    for (int e = 0; e < 42; e++, ta_test_next_index(2, c.shape, idx))
        assert_int_equal(get_half(&c, idx), get_half(&ht, idx));
    ta_tensor_free(&c);
    ta_tensor_free(&h);
    ta_tensor_free(&f32);
}

/* ---------------------------------------------------------- fill, tril, views */

static void test_fill_rounds_to_the_dtype(void **state)
{
    (void)state;
    static const float values[] = {0.1f, 70000.0f, 65519.0f, -1e-8f, 1.0f + 0x1p-8f, NAN, -0.0f};
    for (int i = 0; i < 4; i++) {
        /* a [3, 4] view (every other column) of a [3, 8] buffer: the others keep 9 */
        ta_tensor base, v;
        TA_CHECK_OK(ta_tensor_empty_dtype(&base, all_dtypes[i], 2, (const int64_t[]){3, 8}));
        TA_CHECK_OK(ta_tensor_slice(&v, &base, 1, 1, 8, 2));
        for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
            TA_CHECK_OK(ta_tensor_fill(&base, 9.0f));
            TA_CHECK_OK(ta_tensor_fill(&v, values[k]));
            int64_t idx[2] = {0};
            for (int e = 0; e < 24; e++, ta_test_next_index(2, base.shape, idx)) {
                double x = get(&base, idx);
                if (idx[1] % 2 == 0) {
                    assert_true(x == 9.0);
                } else if (all_dtypes[i] == TA_F16 || all_dtypes[i] == TA_BF16) {
                    assert_int_equal(get_half(&base, idx), ta_oracle_from_f32(values[k], all_dtypes[i]));
                } else {
                    assert_true(isnan(values[k]) ? isnan(x)
                                                 : x == values[k] && !signbit(x) == !signbit(values[k]));
                }
            }
        }
        /* tril keeps j <= i; the rest becomes +0 */
        TA_CHECK_OK(ta_tensor_fill(&base, 2.0f));
        TA_CHECK_OK(ta_tensor_tril(&v, 0));
        int64_t idx[2] = {0};
        for (int e = 0; e < 12; e++, ta_test_next_index(2, v.shape, idx)) {
            double x = get(&v, idx);
            assert_true(idx[1] <= idx[0] ? x == 2.0 : x == 0.0 && !signbit(x));
        }
        ta_tensor_free(&base);
    }
}

static void test_views_of_half_tensors_address_two_byte_elements(void **state)
{
    (void)state;
    ta_tensor t, s, p, r;
    TA_CHECK_OK(ta_tensor_empty_dtype(&t, TA_BF16, 3, (const int64_t[]){4, 6, 2}));
    uint16_t *h = t.data;
    for (int i = 0; i < 48; i++) h[i] = (uint16_t)i;
    /* t[2:, 1::2, :]: its first element is element 2*12 + 1*2 = 26 */
    TA_CHECK_OK(ta_tensor_slice(&s, &t, 0, 2, 4, 1));
    TA_CHECK_OK(ta_tensor_slice(&s, &s, 1, 1, 6, 2));
    assert_int_equal(s.dtype, TA_BF16);
    assert_ptr_equal(s.data, h + 26);
    assert_int_equal(s.stride[1], 4);
    TA_CHECK_OK(ta_tensor_permute(&p, &s, (const int[]){2, 0, 1})); /* [2, 2, 3] */
    TA_CHECK_OK(ta_tensor_transpose(&p, &p, 0, 2));                 /* [3, 2, 2] */
    assert_int_equal(p.dtype, TA_BF16);
    int64_t idx[3] = {0};
    for (int e = 0; e < 12; e++, ta_test_next_index(3, p.shape, idx)) {
        /* p[a, b, c] = s[b, a, c] = t[2 + b, 1 + 2a, c] */
        int64_t want = (2 + idx[1]) * 12 + (1 + 2 * idx[0]) * 2 + idx[2];
        assert_int_equal(get_half(&p, idx), want);
    }
    TA_CHECK_OK(ta_tensor_reshape(&r, &t, 2, (const int64_t[]){8, -1}));
    assert_int_equal(r.dtype, TA_BF16);
    assert_int_equal(r.shape[1], 6);
    TA_CHECK_ERR(ta_tensor_reshape(&r, &p, 1, (const int64_t[]){12}), TA_ESHAPE,
                 "do not allow a view");
    ta_tensor_free(&t);
}

static void test_overlap_counts_each_dtypes_bytes(void **state)
{
    (void)state;
    _Alignas(8) unsigned char buf[64];
    ta_tensor a, b;
    /* float16 [0, 8) and [8, 16): adjacent, disjoint (as float32 they would overlap) */
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&a, buf, TA_F16, 1, (const int64_t[]){8}, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&b, buf + 16, TA_F16, 1, (const int64_t[]){8}, NULL));
    assert_false(ta_tensors_overlap(&a, &b));
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&b, buf + 14, TA_F16, 1, (const int64_t[]){8}, NULL));
    assert_true(ta_tensors_overlap(&a, &b));
    /* float64 [0, 16 bytes) against float16 from byte 16 (disjoint) and 14 (not) */
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&a, buf, TA_F64, 1, (const int64_t[]){2}, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&b, buf + 16, TA_F16, 1, (const int64_t[]){1}, NULL));
    assert_false(ta_tensors_overlap(&a, &b));
    assert_false(ta_tensors_overlap(&b, &a));
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&b, buf + 14, TA_F16, 1, (const int64_t[]){1}, NULL));
    assert_true(ta_tensors_overlap(&a, &b));
    /* a negative stride: bfloat16 elements 7 down to 0 end at byte 16 */
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&a, buf + 14, TA_BF16, 1, (const int64_t[]){8},
                                            (const int64_t[]){-1}));
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&b, buf + 16, TA_F32, 1, (const int64_t[]){1}, NULL));
    assert_false(ta_tensors_overlap(&a, &b));
    TA_CHECK_OK(ta_tensor_from_buffer_dtype(&b, buf + 12, TA_F32, 1, (const int64_t[]){1}, NULL));
    assert_true(ta_tensors_overlap(&a, &b));
}

/* Views of one buffer that interleave without a common element (slices of a packed
 * buffer) do not overlap; ta_tensors_overlap against the sets of element offsets,
 * enumerated, for random layouts of equal strides (random shapes, signs, offsets). */
static void element_offsets(const ta_tensor *t, int64_t base, int64_t *out, int64_t *n)
{
    int64_t idx[TA_MAX_DIMS] = {0};
    const int64_t count = ta_tensor_numel(t);
    for (int64_t e = 0; e < count; e++) {
        int64_t off = base;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
        out[(*n)++] = off;
        ta_index_next(t->ndim, t->shape, idx);
    }
}

static void test_interleaved_views_do_not_overlap(void **state)
{
    (void)state;
    static float buf[4096];
    ta_tensor q, k, v;
    /* dQ, dK, dV of a packed [B 2, L 3, 3, H 4, D 5] gradient: strides [180, 60, 20, 5, 1] */
    const int64_t sh[4] = {2, 3, 4, 5}, st[4] = {180, 60, 5, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&q, buf, 4, sh, st));
    TA_CHECK_OK(ta_tensor_from_buffer(&k, buf + 20, 4, sh, st));
    TA_CHECK_OK(ta_tensor_from_buffer(&v, buf + 40, 4, sh, st));
    assert_false(ta_tensors_overlap(&q, &k) || ta_tensors_overlap(&k, &v) ||
                 ta_tensors_overlap(&v, &q) || ta_tensors_overlap(&k, &q));
    TA_CHECK_OK(ta_tensor_from_buffer(&k, buf + 19, 4, sh, st)); /* one element back */
    assert_true(ta_tensors_overlap(&q, &k) && ta_tensors_overlap(&k, &q));
    /* GQA packed [B 2, L 3, H 4 + 2 Hkv 2, D 5]: q heads 0..3, k 4..5, v 6..7 */
    const int64_t shq[4] = {2, 3, 4, 5}, shk[4] = {2, 3, 2, 5}, stg[4] = {120, 40, 5, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&q, buf, 4, shq, stg));
    TA_CHECK_OK(ta_tensor_from_buffer(&k, buf + 20, 4, shk, stg));
    TA_CHECK_OK(ta_tensor_from_buffer(&v, buf + 30, 4, shk, stg));
    assert_false(ta_tensors_overlap(&q, &k) || ta_tensors_overlap(&k, &v) ||
                 ta_tensors_overlap(&q, &v));
    TA_CHECK_OK(ta_tensor_from_buffer(&q, buf + 5, 4, shq, stg)); /* heads 1..4 meet k's 4 */
    assert_true(ta_tensors_overlap(&q, &k));
    /* random layouts of equal strides against the enumerated offsets */
    static int64_t ea[512], eb[512];
    uint64_t r = 12345;
    for (int trial = 0; trial < 20000; trial++) {
        int64_t sa[3], sb[3], str[3];
        const int nd = 1 + (int)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 62) % 3;
        for (int d = 0; d < nd; d++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            sa[d] = 1 + (int64_t)(r >> 33) % 4;
            sb[d] = 1 + (int64_t)(r >> 40) % 4;
            str[d] = ((int64_t)(r >> 47) % 13) - 6;
        }
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t delta = (int64_t)(r >> 35) % 61 - 30;
        ta_tensor a, b;
        TA_CHECK_OK(ta_tensor_from_buffer(&a, buf + 1024, nd, sa, str));
        TA_CHECK_OK(ta_tensor_from_buffer(&b, buf + 1024 + delta, nd, sb, str));
        int64_t na = 0, nb = 0;
        element_offsets(&a, 0, ea, &na);
        element_offsets(&b, delta, eb, &nb);
        bool common = false;
        for (int64_t i = 0; i < na && !common; i++)
            for (int64_t j = 0; j < nb && !common; j++) common = ea[i] == eb[j];
        if (ta_tensors_overlap(&a, &b) != common || ta_tensors_overlap(&b, &a) != common)
            fail_msg("trial %d: ndim %d, delta %lld: overlap %d, common element %d", trial, nd,
                     (long long)delta, (int)ta_tensors_overlap(&a, &b), (int)common);
    }
}

/* An output whose strides put two of its indices at one address is refused (ta_randn
 * stands for every output check: ta_tensor_check_unaliased), whatever the stride
 * pattern: random layouts (negative, equal and zero strides) against their enumerated
 * offsets; and the layouts a user meets, each way. */
static void test_self_aliased_outputs_refused(void **state)
{
    (void)state;
    static float buf[8192];
    static int64_t off[1024];
    uint64_t r = 987654321;
    int refused = 0;
    for (int trial = 0; trial < 20000; trial++) {
        int64_t sh[4], st[4];
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const int nd = 1 + (int)((r >> 60) % 4);
        for (int d = 0; d < nd; d++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            sh[d] = 1 + (int64_t)(r >> 33) % 5;
            st[d] = ((int64_t)(r >> 47) % 41) - 20;
        }
        ta_tensor t;
        TA_CHECK_OK(ta_tensor_from_buffer(&t, buf + 4096, nd, sh, st));
        int64_t n = 0;
        element_offsets(&t, 0, off, &n);
        bool dup = false;
        for (int64_t i = 0; i < n && !dup; i++)
            for (int64_t j = i + 1; j < n && !dup; j++) dup = off[i] == off[j];
        const ta_status got = ta_randn(&t, 1);
        if ((got == TA_EINVAL) != dup || (got != TA_OK && got != TA_EINVAL))
            fail_msg("trial %d: shape [%lld %lld %lld %lld], strides [%lld %lld %lld %lld] "
                     "(ndim %d): two elements at one address %d, ta_randn %d (%s)",
                     trial, (long long)sh[0], (long long)sh[1], (long long)sh[2],
                     (long long)sh[3], (long long)st[0], (long long)st[1], (long long)st[2],
                     (long long)st[3], nd, (int)dup, (int)got, ta_last_error());
        refused += dup;
    }
    assert_true(refused > 1000 && refused < 19000); /* both kinds well represented */
    /* [B 3, L 4, H 2, D 8] rows: a batch stride of one row's span less than the batch's
     * (sequence b's rows start inside sequence b - 1's) aliases; a larger one, or rows
     * interleaved without a common element ([3, 2] of strides [2, 3]), does not */
    const int64_t shr[4] = {3, 4, 2, 8};
    int64_t str[4] = {48, 16, 8, 1};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, buf, 4, shr, str));
    TA_CHECK_ERR(ta_randn(&t, 1), TA_EINVAL, "t's strides put two of its elements at one address");
    str[0] = 64;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, buf, 4, shr, str));
    TA_CHECK_OK(ta_randn(&t, 1));
    const int64_t shi[2] = {3, 2}, sti[2] = {2, 3};
    TA_CHECK_OK(ta_tensor_from_buffer(&t, buf, 2, shi, sti));
    TA_CHECK_OK(ta_randn(&t, 1));
    /* wide layouts whose overlap lies between two smaller strides: a review found these
     * taken (TA_OK) when one search budget went first to the largest stride's wide and
     * empty question */
    float *big = malloc(sizeof(float) * 110000);
    assert_non_null(big);
    const int64_t shw[2][3] = {{100, 100, 100}, {54, 59, 55}};
    const int64_t stw[2][3] = {{101, 100, 100}, {668, 621, 621}};
    for (int i = 0; i < 2; i++) {
        TA_CHECK_OK(ta_tensor_from_buffer(&t, big, 3, shw[i], stw[i]));
        TA_CHECK_ERR(ta_randn(&t, 1), TA_EINVAL, "strides put two of its elements at one address");
    }
    free(big);
}

/* ----------------------------------------------------------------- random */

/* A uniform fill of U[lo, hi) into a half type: each element the float32 draw rounded to
 * nearest-even, or, where that rounding reaches hi (or overflows to inf), the half type's
 * next value below it (independent oracle: dtype_oracle.c). */
static void assert_uniform_halves(const ta_tensor *dst, const ta_tensor *draw, double hi,
                                  const char *what)
{
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(draw);
    for (int64_t e = 0; e < n; e++, ta_test_next_index(draw->ndim, draw->shape, idx)) {
        uint16_t want = ta_oracle_from_f64(get(draw, idx), dst->dtype), got = get_half(dst, idx);
        if (ta_oracle_widen(want, dst->dtype) >= hi)
            want = want & 0x8000 ? (uint16_t)(want + 1) : (uint16_t)(want - 1);
        if (got != want || !(ta_oracle_widen(got, dst->dtype) < hi))
            fail_msg("%s: element %lld: 0x%04x, expected 0x%04x", what, (long long)e, got, want);
    }
}

/* The half-open ranges hold in half types: 10^5 draws of U[0, 1) into bfloat16 and
 * float16, where about 0.2% (bfloat16) of the float32 draws round to 1.0; and a range
 * wider than float's (-FLT_MAX, FLT_MAX), whose hi - lo is inf in float32, spreads its
 * draws (they all came out as lo until session 33). */
static void test_random_fills_stay_below_high(void **state)
{
    (void)state;
    const int64_t n[1] = {100000};
    for (int i = 1; i < 3; i++) {
        ta_tensor t, draw;
        TA_CHECK_OK(ta_tensor_empty_dtype(&t, all_dtypes[i], 1, n));
        TA_CHECK_OK(ta_tensor_empty(&draw, 1, n));
        TA_CHECK_OK(ta_rand(&t, 5));
        TA_CHECK_OK(ta_rand(&draw, 5));
        assert_uniform_halves(&t, &draw, 1.0, "U[0, 1) below 1");
        ta_tensor_free(&t);
        ta_tensor_free(&draw);
    }
    ta_tensor w;
    TA_CHECK_OK(ta_tensor_empty(&w, 1, n));
    TA_CHECK_OK(ta_rand_uniform(&w, -FLT_MAX, FLT_MAX, 7));
    const float *x = w.data;
    int64_t below = 0, above = 0;
    for (int64_t e = 0; e < n[0]; e++) {
        assert_true(x[e] >= -FLT_MAX && x[e] < FLT_MAX);
        below += x[e] < -0.5f * FLT_MAX;
        above += x[e] > 0.5f * FLT_MAX;
    }
    assert_true(below > 20000 && below < 30000 && above > 20000 && above < 30000);
    ta_tensor_free(&w);
}

static void test_random_fills_round_the_float32_draw(void **state)
{
    (void)state;
    const int64_t shape[3] = {3, 5, 7};
    for (int kind = 0; kind < 3; kind++) {
        ta_tensor ref;
        TA_CHECK_OK(ta_tensor_empty(&ref, 3, shape));
        if (kind == 0) TA_CHECK_OK(ta_randn(&ref, 42));
        if (kind == 1) TA_CHECK_OK(ta_rand(&ref, 42));
        if (kind == 2) TA_CHECK_OK(ta_rand_uniform(&ref, -3.0f, 70000.0f, 42));
        for (int i = 1; i < 4; i++) {
            /* into a permuted view: values follow the view's C order, not memory */
            ta_tensor t, v;
            TA_CHECK_OK(ta_tensor_empty_dtype(&t, all_dtypes[i], 3, (const int64_t[]){7, 3, 5}));
            TA_CHECK_OK(ta_tensor_permute(&v, &t, (const int[]){1, 2, 0}));
            if (kind == 0) TA_CHECK_OK(ta_randn(&v, 42));
            if (kind == 1) TA_CHECK_OK(ta_rand(&v, 42));
            if (kind == 2) TA_CHECK_OK(ta_rand_uniform(&v, -3.0f, 70000.0f, 42));
            if (kind > 0 && (all_dtypes[i] == TA_F16 || all_dtypes[i] == TA_BF16))
                assert_uniform_halves(&v, &ref, kind == 1 ? 1.0 : 70000.0, "random");
            else
                assert_converted(&v, &ref, "random");
            ta_tensor_free(&t);
        }
        ta_tensor_free(&ref);
    }
}

/* ------------------------------------------------------- float32-only calls */

static void test_float32_operations_refuse_other_dtypes(void **state)
{
    (void)state;
    ta_tensor a, b, out;
    TA_CHECK_OK(ta_tensor_zeros_dtype(&a, TA_F16, 2, (const int64_t[]){2, 3}));
    TA_CHECK_OK(ta_tensor_zeros(&b, 2, (const int64_t[]){3, 4}));
    TA_CHECK_OK(ta_tensor_zeros(&out, 2, (const int64_t[]){2, 4}));
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &a, &b), TA_EUNSUPPORTED,
                 "ta_einsum: a has dtype f16; ta_einsum takes float32");
    ta_tensor x = b, y;
    x.dtype = TA_BF16;
    TA_CHECK_OK(ta_tensor_zeros(&y, 2, (const int64_t[]){3, 4}));
    TA_CHECK_ERR(ta_softmax(&y, &x, 1), TA_EUNSUPPORTED,
                 "ta_softmax: x has dtype bf16; ta_softmax takes float32");
    /* the internal check SDPA takes: f32, f16, bf16 */
    assert_int_equal(ta_tensor_check_storage("ta_sdpa", "Q", &a), TA_OK);
    assert_int_equal(ta_tensor_check_storage("ta_sdpa", "Q", &x), TA_OK);
    assert_int_equal(ta_tensor_check_storage("ta_sdpa", "Q", &b), TA_OK);
    x.dtype = TA_F64;
    TA_CHECK_ERR(ta_tensor_check_storage("ta_sdpa", "Q", &x), TA_EUNSUPPORTED,
                 "ta_sdpa: Q has dtype f64; ta_sdpa takes f32, f16 or bf16");
    TA_CHECK_ERR(ta_tensor_check_shape("ta_sdpa", "K", &x, 2, b.shape, "[Lk, D]",
                                       TA_CHECK_STORAGE), TA_EUNSUPPORTED, "K has dtype f64");
    TA_CHECK_OK(ta_tensor_check_shape("ta_sdpa", "K", &a, 2, a.shape, "[Lk, D]",
                                      TA_CHECK_STORAGE | TA_CHECK_OUTPUT));
    TA_CHECK_ERR(ta_tensor_check_shape("ta_sdpa", "mask", &a, 2, a.shape, "[Lq, Lk]", 0),
                 TA_EUNSUPPORTED, "mask has dtype f16; ta_sdpa takes float32");
    x.dtype = (ta_dtype)5;
    TA_CHECK_ERR(ta_tensor_check_storage("ta_sdpa", "V", &x), TA_EINVAL,
                 "ta_sdpa: V has dtype 5, not a ta_dtype");
    ta_tensor_free(&a);
    ta_tensor_free(&b);
    ta_tensor_free(&out);
    ta_tensor_free(&y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_constructors_and_errors),
        cmocka_unit_test(test_copy_converts_between_every_pair),
        cmocka_unit_test(test_contiguous_keeps_the_dtype),
        cmocka_unit_test(test_fill_rounds_to_the_dtype),
        cmocka_unit_test(test_views_of_half_tensors_address_two_byte_elements),
        cmocka_unit_test(test_overlap_counts_each_dtypes_bytes),
        cmocka_unit_test(test_interleaved_views_do_not_overlap),
        cmocka_unit_test(test_self_aliased_outputs_refused),
        cmocka_unit_test(test_random_fills_round_the_float32_draw),
        cmocka_unit_test(test_random_fills_stay_below_high),
        cmocka_unit_test(test_float32_operations_refuse_other_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
