/* ta_softmax, ta_masked_fill, the causal/padding mask builders and the internal mask
 * plan, each against an independent float64 or plain-loop oracle written here. */
#include "ta_test.h"

#include "core/tensor_internal.h"
#include "guard.h"
#include "ops/mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Softmax of one row in double, with the documented special rows. */
static void softmax_ref(double *out, const float *x, int64_t xs, int64_t n)
{
    double m = -INFINITY;
    int nan = 0;
    for (int64_t j = 0; j < n; j++) {
        double v = x[j * xs];
        if (isnan(v)) nan = 1;
        else if (v > m) m = v;
    }
    if (nan || m == INFINITY) {
        for (int64_t j = 0; j < n; j++) out[j] = NAN;
        return;
    }
    if (m == -INFINITY) {
        for (int64_t j = 0; j < n; j++) out[j] = 0.0;
        return;
    }
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += exp((double)x[j * xs] - m);
    for (int64_t j = 0; j < n; j++) out[j] = exp((double)x[j * xs] - m) / s;
}

/* Checks every row of out (softmax of x along dim) against softmax_ref, entry error at
 * most rel * |ref| + abs_tol. NaN must match NaN exactly. */
static void check_softmax(const ta_tensor *out, const ta_tensor *x, int dim, double rel,
                          double abs_tol)
{
    int nd = x->ndim;
    int64_t n = x->shape[dim], rows = ta_tensor_numel(x) / (n ? n : 1);
    int64_t shape[TA_MAX_DIMS], idx[TA_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) shape[d] = d == dim ? 1 : x->shape[d];
    double *ref = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = ta_tensor_at_const(x, idx);
        const float *orow = ta_tensor_at_const(out, idx);
        softmax_ref(ref, xr, x->stride[dim], n);
        for (int64_t j = 0; j < n; j++) {
            double got = orow[j * out->stride[dim]];
            if (isnan(ref[j]) || isnan(got)) {
                if (!(isnan(ref[j]) && isnan(got)))
                    fail_msg("row %lld entry %lld: got %g, want %g", (long long)r, (long long)j,
                             got, ref[j]);
                continue;
            }
            if (fabs(got - ref[j]) > rel * fabs(ref[j]) + abs_tol)
                fail_msg("row %lld entry %lld: got %.9g, want %.9g", (long long)r, (long long)j,
                         got, ref[j]);
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    free(ref);
}

static void test_softmax_every_dim_matches_double(void **state)
{
    (void)state;
    const int64_t shape[3] = {5, 7, 9};
    ta_tensor x, out;
    TA_CHECK_OK(ta_tensor_empty(&x, 3, shape));
    TA_CHECK_OK(ta_rand_uniform(&x, -6.0f, 6.0f, 11));
    TA_CHECK_OK(ta_tensor_empty(&out, 3, shape));
    for (int dim = -3; dim < 3; dim++) {
        TA_CHECK_OK(ta_softmax(&out, &x, dim));
        check_softmax(&out, &x, dim < 0 ? dim + 3 : dim, 4e-7, 1e-12);
    }
    ta_tensor_free(&x);
    ta_tensor_free(&out);
}

/* 100k entries spread over e^-40..e^0: a float sum would be off by ~1e-5 relative;
 * the double sum keeps every entry within a few ulps. */
static void test_softmax_long_row_stays_accurate(void **state)
{
    (void)state;
    const int64_t shape[2] = {2, 100003};
    ta_tensor x;
    TA_CHECK_OK(ta_tensor_empty(&x, 2, shape));
    TA_CHECK_OK(ta_randn(&x, 5));
    float *p = x.data;
    for (int64_t i = 0; i < 2 * shape[1]; i++) p[i] *= 4.0f;
    TA_CHECK_OK(ta_softmax(&x, &x, 1));  /* in place */
    ta_tensor x0;
    TA_CHECK_OK(ta_tensor_empty(&x0, 2, shape));
    TA_CHECK_OK(ta_randn(&x0, 5));
    p = x0.data;
    for (int64_t i = 0; i < 2 * shape[1]; i++) p[i] *= 4.0f;
    /* relative 2e-6: expf's ulp plus the rounding of x - max (|x - max| <= ~40). */
    check_softmax(&x, &x0, 1, 2e-6, 1e-30);
    double sum = 0;
    for (int64_t j = 0; j < shape[1]; j++) sum += ((float *)x.data)[j];
    assert_true(fabs(sum - 1.0) < 1e-5);
    ta_tensor_free(&x);
    ta_tensor_free(&x0);
}

static void test_softmax_special_rows(void **state)
{
    (void)state;
    /* rows: normal, all -inf, NaN inside, +inf inside, -inf mixed with finite */
    const float inf = INFINITY;
    float data[5][4] = {{1, 2, 3, 4},
                        {-inf, -inf, -inf, -inf},
                        {1, NAN, 3, -inf},
                        {1, inf, 3, 4},
                        {-inf, 0, -inf, 0}};
    const int64_t shape[2] = {5, 4};
    ta_tensor x, out;
    TA_CHECK_OK(ta_tensor_from_buffer(&x, &data[0][0], 2, shape, NULL));
    TA_CHECK_OK(ta_tensor_empty(&out, 2, shape));
    TA_CHECK_OK(ta_softmax(&out, &x, -1));
    float *o = out.data;
    for (int j = 0; j < 4; j++) {
        assert_true(o[4 + j] == 0.0f);          /* all -inf -> 0, not NaN */
        assert_true(isnan(o[8 + j]));           /* NaN propagates to the whole row */
        assert_true(isnan(o[12 + j]));          /* +inf: undefined -> NaN, as PyTorch */
    }
    assert_true(o[16] == 0.0f && o[18] == 0.0f);
    assert_true(o[17] == 0.5f && o[19] == 0.5f);
    check_softmax(&out, &x, 1, 4e-7, 1e-12);
    ta_tensor_free(&out);
}

/* Strided views in and out (a step-2 slice, a permutation), and in place on a view
 * equal to the out-of-place result bit for bit. */
static void test_softmax_strided_and_in_place(void **state)
{
    (void)state;
    const int64_t shape[3] = {6, 10, 8};
    ta_tensor base, x, xs, out, outp;
    TA_CHECK_OK(ta_tensor_empty(&base, 3, shape));
    TA_CHECK_OK(ta_randn(&base, 21));
    TA_CHECK_OK(ta_tensor_slice(&xs, &base, 1, 1, 10, 2));   /* [6, 5, 8] */
    const int perm[3] = {2, 0, 1};
    TA_CHECK_OK(ta_tensor_permute(&x, &xs, perm));          /* [8, 6, 5] */
    const int64_t oshape[3] = {5, 6, 8};
    TA_CHECK_OK(ta_tensor_empty(&out, 3, oshape));
    const int operm[3] = {2, 1, 0};
    TA_CHECK_OK(ta_tensor_permute(&outp, &out, operm));     /* [8, 6, 5], transposed */
    for (int dim = 0; dim < 3; dim++) {
        TA_CHECK_OK(ta_softmax(&outp, &x, dim));
        check_softmax(&outp, &x, dim, 4e-7, 1e-12);
        ta_tensor copy;
        TA_CHECK_OK(ta_tensor_contiguous(&copy, &x));
        TA_CHECK_OK(ta_softmax(&copy, &copy, dim));
        for (int64_t a = 0; a < 8; a++)
            for (int64_t b = 0; b < 6; b++)
                for (int64_t c = 0; c < 5; c++) {
                    int64_t idx[3] = {a, b, c};
                    assert_true(*ta_tensor_at(&copy, idx) == *ta_tensor_at(&outp, idx));
                }
        ta_tensor_free(&copy);
    }
    /* in place on a non-contiguous view */
    ta_tensor ref;
    TA_CHECK_OK(ta_tensor_contiguous(&ref, &x));
    TA_CHECK_OK(ta_softmax(&x, &x, 1));
    check_softmax(&x, &ref, 1, 4e-7, 1e-12);
    ta_tensor_free(&ref);
    ta_tensor_free(&base);
    ta_tensor_free(&out);
}

static void test_softmax_threads_bitwise_identical(void **state)
{
    (void)state;
    const int64_t shape[2] = {300, 301};
    ta_tensor x, a, b;
    TA_CHECK_OK(ta_tensor_empty(&x, 2, shape));
    TA_CHECK_OK(ta_randn(&x, 3));
    TA_CHECK_OK(ta_tensor_empty(&a, 2, shape));
    TA_CHECK_OK(ta_tensor_empty(&b, 2, shape));
    int old = ta_get_num_threads();
    TA_CHECK_OK(ta_set_num_threads(1));
    TA_CHECK_OK(ta_softmax(&a, &x, 0));
    TA_CHECK_OK(ta_set_num_threads(3));
    TA_CHECK_OK(ta_softmax(&b, &x, 0));
    TA_CHECK_OK(ta_set_num_threads(old));
    assert_memory_equal(a.data, b.data, sizeof(float) * 300 * 301);
    ta_tensor_free(&x);
    ta_tensor_free(&a);
    ta_tensor_free(&b);
}

static void test_softmax_scalar_and_empty(void **state)
{
    (void)state;
    float v = 3.0f, o = 0.0f;
    ta_tensor x, out;
    TA_CHECK_OK(ta_tensor_from_buffer(&x, &v, 0, NULL, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&out, &o, 0, NULL, NULL));
    TA_CHECK_OK(ta_softmax(&out, &x, -1));
    assert_true(o == 1.0f);
    const int64_t shape[2] = {0, 4};
    ta_tensor e;
    TA_CHECK_OK(ta_tensor_empty(&e, 2, shape));
    TA_CHECK_OK(ta_softmax(&e, &e, 1));
    ta_tensor_free(&e);
}

/* Rows that end exactly at a PROT_NONE page: a pass that touches one element past the
 * row crashes instead of passing. */
static void test_softmax_guard_page_tails(void **state)
{
    (void)state;
    for (int64_t n = 1; n <= 37; n += 6) {
        ta_guard g = {0};
        float *p = ta_guard_floats(&g, (size_t)(3 * n));
        assert_non_null(p);
        for (int64_t e = 0; e < 3 * n; e++) p[e] = (float)((e * 7) % 11) - 5.0f;
        const int64_t shape[2] = {3, n};
        ta_tensor t, ref;
        TA_CHECK_OK(ta_tensor_from_buffer(&t, p, 2, shape, NULL));
        TA_CHECK_OK(ta_tensor_contiguous(&ref, &t));
        TA_CHECK_OK(ta_softmax(&t, &t, 1));
        check_softmax(&t, &ref, 1, 4e-7, 1e-12);
        ta_tensor_free(&ref);
        /* the mask plan's tile fill and apply, ending at the guard too */
        ta_mask_plan plan;
        TA_CHECK_OK(ta_mask_plan_init(&plan, "t", 1, 1, 1, n, TA_CAUSAL_NONE, NULL,
                                      TA_MASK_KEEP, NULL, true));
        ta_mask_row_bias(&plan, 0, 0, 0, 0, n, p + 2 * n);
        ta_mask_apply(&plan, 0, 0, 0, 0, n, 1.0f, p + 2 * n, 1);
        ta_guard_release(&g);
    }
}

static void test_softmax_errors(void **state)
{
    (void)state;
    const int64_t shape[2] = {3, 4}, other[2] = {4, 3};
    float buf[24] = {0};
    ta_tensor x, y, z, ov, zs;
    TA_CHECK_OK(ta_tensor_from_buffer(&x, buf, 2, shape, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&y, buf + 12, 2, other, NULL));
    TA_CHECK_ERR(ta_softmax(NULL, &x, 0), TA_EINVAL, "ta_softmax: out is NULL");
    TA_CHECK_ERR(ta_softmax(&x, NULL, 0), TA_EINVAL, "ta_softmax: x is NULL");
    TA_CHECK_ERR(ta_softmax(&y, &x, 0), TA_ESHAPE, "ta_softmax: out has shape [4, 3] but x has [3, 4]");
    TA_CHECK_ERR(ta_softmax(&x, &x, 2), TA_EINVAL, "ta_softmax: dim 2 is out of range for 2 dims");
    TA_CHECK_ERR(ta_softmax(&x, &x, -3), TA_EINVAL, "dim -3 is out of range");
    TA_CHECK_OK(ta_tensor_from_buffer(&ov, buf + 2, 2, shape, NULL));
    TA_CHECK_ERR(ta_softmax(&ov, &x, 1), TA_EINVAL, "ta_softmax: out overlaps x");
    TA_CHECK_OK(ta_tensor_from_buffer(&z, buf + 12, 2, shape, NULL));
    const int64_t st0[2] = {0, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&zs, buf + 12, 2, shape, st0));
    TA_CHECK_ERR(ta_softmax(&zs, &x, 1), TA_EINVAL, "ta_softmax: out has stride 0 in dim 0");
    x.dtype = TA_F64;
    TA_CHECK_ERR(ta_softmax(&z, &x, 1), TA_EUNSUPPORTED, "ta_softmax: x has dtype");
    /* outputs untouched on error */
    for (int i = 0; i < 24; i++) assert_true(buf[i] == 0.0f);
}

/* --------------------------------------------------------------- masked_fill */

static void test_masked_fill_broadcasts(void **state)
{
    (void)state;
    const int64_t tshape[4] = {2, 3, 4, 5};
    const int64_t mshapes[][4] = {{5}, {4, 1}, {3, 1, 5}, {2, 1, 1, 1}, {2, 3, 4, 5}, {1, 1}};
    const int mranks[] = {1, 2, 3, 4, 4, 2};
    for (int c = 0; c < 6; c++) {
        ta_tensor t, m;
        TA_CHECK_OK(ta_tensor_empty(&t, 4, tshape));
        TA_CHECK_OK(ta_randn(&t, 7));
        TA_CHECK_OK(ta_tensor_empty(&m, mranks[c], mshapes[c]));
        TA_CHECK_OK(ta_rand(&m, 100 + (uint64_t)c));
        float *mp = m.data;
        for (int64_t i = 0; i < ta_tensor_numel(&m); i++) mp[i] = mp[i] < 0.5f ? 0.0f : 1.0f;
        ta_tensor orig;
        TA_CHECK_OK(ta_tensor_contiguous(&orig, &t));
        TA_CHECK_OK(ta_masked_fill(&t, &m, -INFINITY));
        int lead = 4 - mranks[c];
        int64_t idx[4] = {0}, midx[4];
        for (int64_t e = 0; e < 120; e++) {
            for (int d = 0; d < mranks[c]; d++)
                midx[d] = mshapes[c][d] == 1 ? 0 : idx[d + lead];
            float want = *ta_tensor_at(&m, midx) != 0.0f ? -INFINITY : *ta_tensor_at(&orig, idx);
            assert_true(*ta_tensor_at(&t, idx) == want);
            ta_index_next(4, tshape, idx);
        }
        ta_tensor_free(&t);
        ta_tensor_free(&m);
        ta_tensor_free(&orig);
    }
}

static void test_masked_fill_strided_target(void **state)
{
    (void)state;
    const int64_t shape[2] = {4, 6};
    ta_tensor t, tt, m;
    TA_CHECK_OK(ta_tensor_zeros(&t, 2, shape));
    TA_CHECK_OK(ta_tensor_transpose(&tt, &t, 0, 1)); /* [6, 4] */
    const int64_t mshape[1] = {4};
    float mv[4] = {0, 1, 0, NAN};                     /* NaN counts as nonzero */
    TA_CHECK_OK(ta_tensor_from_buffer(&m, mv, 1, mshape, NULL));
    TA_CHECK_OK(ta_masked_fill(&tt, &m, 2.0f));
    const float *p = t.data;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) assert_true(p[i * 6 + j] == ((i == 1 || i == 3) ? 2.0f : 0.0f));
    ta_tensor_free(&t);
}

static void test_masked_fill_errors(void **state)
{
    (void)state;
    const int64_t tshape[4] = {2, 3, 4, 5}, bad[1] = {3}, big[5] = {1, 2, 3, 4, 5};
    ta_tensor t, m, mb;
    TA_CHECK_OK(ta_tensor_zeros(&t, 4, tshape));
    TA_CHECK_OK(ta_tensor_zeros(&m, 1, bad));
    TA_CHECK_OK(ta_tensor_zeros(&mb, 5, big));
    TA_CHECK_ERR(ta_masked_fill(NULL, &m, 0), TA_EINVAL, "ta_masked_fill: t is NULL");
    TA_CHECK_ERR(ta_masked_fill(&t, NULL, 0), TA_EINVAL, "ta_masked_fill: mask is NULL");
    TA_CHECK_ERR(ta_masked_fill(&t, &m, 0), TA_ESHAPE,
                 "ta_masked_fill: mask of shape [3] does not broadcast to t's shape [2, 3, 4, 5]");
    TA_CHECK_ERR(ta_masked_fill(&t, &mb, 0), TA_ESHAPE, "mask of shape [1, 2, 3, 4, 5] does not");
    ta_tensor_free(&t);
    ta_tensor_free(&m);
    ta_tensor_free(&mb);
}

/* ------------------------------------------------------------ mask builders */

/* The causal builder against torch.tril(ones(Lq, Lk), diagonal) built by tensor.c. */
static void test_causal_mask_matches_tril(void **state)
{
    (void)state;
    const int64_t sizes[][2] = {{5, 5}, {3, 7}, {7, 3}, {1, 4}, {4, 1}};
    for (int c = 0; c < 5; c++) {
        int64_t Lq = sizes[c][0], Lk = sizes[c][1];
        const int64_t shape[3] = {2, Lq, Lk};
        for (int a = 0; a < 3; a++) {
            ta_tensor m, ref;
            TA_CHECK_OK(ta_tensor_full(&m, 3, shape, 7.0f));
            TA_CHECK_OK(ta_tensor_ones(&ref, 3, shape));
            if (a == TA_CAUSAL_TOP_LEFT) TA_CHECK_OK(ta_tensor_tril(&ref, 0));
            if (a == TA_CAUSAL_BOTTOM_RIGHT) TA_CHECK_OK(ta_tensor_tril(&ref, Lk - Lq));
            TA_CHECK_OK(ta_causal_mask(&m, (ta_causal)a));
            assert_memory_equal(m.data, ref.data, sizeof(float) * (size_t)(2 * Lq * Lk));
            ta_tensor_free(&m);
            ta_tensor_free(&ref);
        }
    }
    ta_tensor m;
    const int64_t s1[1] = {4}, s2[2] = {2, 2};
    TA_CHECK_OK(ta_tensor_zeros(&m, 1, s1));
    TA_CHECK_ERR(ta_causal_mask(&m, TA_CAUSAL_TOP_LEFT), TA_ESHAPE,
                 "ta_causal_mask: mask must have at least 2 dims [..., Lq, Lk], got 1");
    ta_tensor_free(&m);
    TA_CHECK_OK(ta_tensor_zeros(&m, 2, s2));
    TA_CHECK_ERR(ta_causal_mask(&m, (ta_causal)9), TA_EINVAL, "ta_causal_mask: align = 9");
    TA_CHECK_ERR(ta_causal_mask(NULL, TA_CAUSAL_TOP_LEFT), TA_EINVAL, "ta_causal_mask: mask is NULL");
    ta_tensor_free(&m);
}

static void test_padding_mask(void **state)
{
    (void)state;
    const int64_t shape[4] = {3, 1, 1, 7};
    const int64_t len[3] = {0, 3, 7};
    ta_tensor m;
    TA_CHECK_OK(ta_tensor_full(&m, 4, shape, 5.0f));
    TA_CHECK_OK(ta_padding_mask(&m, len));
    const float *p = m.data;
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < 7; j++) assert_true(p[b * 7 + j] == (j < len[b] ? 1.0f : 0.0f));
    const int64_t badlen[3] = {0, 8, 1};
    TA_CHECK_ERR(ta_padding_mask(&m, badlen), TA_EINVAL,
                 "ta_padding_mask: lengths[1] = 8 is outside [0, 7]");
    TA_CHECK_ERR(ta_padding_mask(&m, NULL), TA_EINVAL, "ta_padding_mask: lengths is NULL");
    ta_tensor_free(&m);
}

/* Outputs that alias themselves or the mask are refused, nothing written: a [3, 3] mask
 * whose rows all sat on one row (row stride 0) came back TA_OK holding the last row's
 * values; masked_fill into t = buf[1..5] with the mask buf[0..4] read mask elements it
 * had already filled (1 1 1 1 1 1 for 1 1 1 1 0 1). torch refuses both in-place writes. */
static void test_mask_outputs_must_not_alias(void **state)
{
    (void)state;
    float buf[9] = {5, 5, 5, 5, 5, 5, 5, 5, 5};
    ta_tensor m, v;
    TA_CHECK_OK(ta_tensor_from_buffer(&m, buf, 2, (int64_t[]){3, 3}, (int64_t[]){0, 1}));
    TA_CHECK_ERR(ta_causal_mask(&m, TA_CAUSAL_TOP_LEFT), TA_EINVAL,
                 "ta_causal_mask: mask has stride 0 in dim 0");
    TA_CHECK_ERR(ta_padding_mask(&m, (int64_t[]){1, 2, 3}), TA_EINVAL,
                 "ta_padding_mask: mask has stride 0 in dim 0");
    float ones[3] = {1, 1, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&v, ones, 1, (int64_t[]){3}, NULL));
    TA_CHECK_ERR(ta_masked_fill(&m, &v, 0.0f), TA_EINVAL, "ta_masked_fill: t has stride 0 in dim 0");
    for (int e = 0; e < 9; e++) assert_true(buf[e] == 5.0f);
    float t[6] = {1, 0, 1, 0, 1, 0};
    TA_CHECK_OK(ta_tensor_from_buffer(&v, t + 1, 1, (int64_t[]){5}, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&m, t, 1, (int64_t[]){5}, NULL));
    TA_CHECK_ERR(ta_masked_fill(&v, &m, 1.0f), TA_EINVAL, "ta_masked_fill: mask overlaps t");
    for (int e = 0; e < 6; e++) assert_true(t[e] == (float)(e % 2 == 0));
    /* a broadcast (stride 0) mask is fine: it is only read; an empty t has nothing to alias */
    TA_CHECK_OK(ta_tensor_from_buffer(&m, ones, 2, (int64_t[]){2, 3}, (int64_t[]){0, 1}));
    float out[6] = {0};
    TA_CHECK_OK(ta_tensor_from_buffer(&v, out, 2, (int64_t[]){2, 3}, NULL));
    TA_CHECK_OK(ta_masked_fill(&v, &m, 4.0f));
    for (int e = 0; e < 6; e++) assert_true(out[e] == 4.0f);
    TA_CHECK_OK(ta_tensor_from_buffer(&v, out, 2, (int64_t[]){0, 3}, (int64_t[]){0, 0}));
    TA_CHECK_OK(ta_causal_mask(&v, TA_CAUSAL_TOP_LEFT));
}

/* ------------------------------------------------------------ the mask plan */

/* The plan's pair answers and its tile fills agree with rules written out here, for
 * every mode, causal alignment, key lengths and broadcast mask shape. */
static void test_mask_plan_matches_rules(void **state)
{
    (void)state;
    enum { B = 2, H = 3, Lq = 4, Lk = 6 };
    const int64_t mshapes[][4] = {{Lq, Lk}, {B, 1, 1, Lk}, {1, H, Lq, Lk}, {Lk}};
    const int mranks[] = {2, 4, 4, 1};
    const int64_t kl[B] = {5, 2};
    for (int c = 0; c < 4; c++)
        for (int mode = 0; mode < 3; mode++)
            for (int causal = 0; causal < 3; causal++) {
                ta_tensor m;
                TA_CHECK_OK(ta_tensor_empty(&m, mranks[c], mshapes[c]));
                TA_CHECK_OK(ta_randn(&m, 50 + (uint64_t)c));
                float *mp = m.data;
                if (mode != TA_MASK_ADDITIVE)
                    for (int64_t e = 0; e < ta_tensor_numel(&m); e++)
                        mp[e] = mp[e] > 0 ? 1.0f : 0.0f;
                ta_mask_plan p;
                TA_CHECK_OK(ta_mask_plan_init(&p, "t", B, H, Lq, Lk, (ta_causal)causal, &m,
                                              (ta_mask_mode)mode, kl, true));
                int lead = 4 - mranks[c];
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < H; h++)
                        for (int i = 0; i < Lq; i++) {
                            float tile[Lk], s[Lk];
                            ta_mask_row_bias(&p, b, h, i, 2, Lk - 2, tile);
                            for (int j = 0; j < Lk; j++) s[j] = 1.0f;
                            ta_mask_apply(&p, b, h, i, 0, Lk, 0.5f, s, 1);
                            for (int j = 0; j < Lk; j++) {
                                int64_t full[4] = {b, h, i, j}, mi[4];
                                for (int d = 0; d < mranks[c]; d++)
                                    mi[d] = mshapes[c][d] == 1 ? 0 : full[d + lead];
                                float v = *ta_tensor_at(&m, mi);
                                int blocked = j >= kl[b] ||
                                              (causal == 1 && j > i) ||
                                              (causal == 2 && j > i + Lk - Lq) ||
                                              (mode == 0 && v == 0) || (mode == 1 && v != 0);
                                float want = blocked ? -INFINITY : (mode == 2 ? v : 0.0f);
                                assert_true(ta_mask_bias(&p, b, h, i, j) == want);
                                assert_true(ta_mask_allowed(&p, b, h, i, j) == (want != -INFINITY));
                                if (j >= 2) assert_true(tile[j - 2] == want);
                                assert_true(s[j] == (blocked ? -INFINITY : 0.5f + want));
                            }
                        }
                ta_tensor_free(&m);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_every_dim_matches_double),
        cmocka_unit_test(test_softmax_long_row_stays_accurate),
        cmocka_unit_test(test_softmax_special_rows),
        cmocka_unit_test(test_softmax_strided_and_in_place),
        cmocka_unit_test(test_softmax_threads_bitwise_identical),
        cmocka_unit_test(test_softmax_scalar_and_empty),
        cmocka_unit_test(test_softmax_guard_page_tails),
        cmocka_unit_test(test_softmax_errors),
        cmocka_unit_test(test_masked_fill_broadcasts),
        cmocka_unit_test(test_masked_fill_strided_target),
        cmocka_unit_test(test_masked_fill_errors),
        cmocka_unit_test(test_causal_mask_matches_tril),
        cmocka_unit_test(test_padding_mask),
        cmocka_unit_test(test_mask_outputs_must_not_alias),
        cmocka_unit_test(test_mask_plan_matches_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
