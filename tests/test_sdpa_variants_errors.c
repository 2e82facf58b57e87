/* The attention variants' argument checks at the front door (ta_sdpa, ta_sdpa_backward
 * and their workspace queries): every error with its status and message and every output
 * untouched; the values that are valid (softcap 0, window bounds of -1, a window ignored
 * without has_window); the path each call takes: the fused forward and backward implement
 * every variant (TA_SDPA_AUTO takes them: the same bits as TA_SDPA_FUSED, within 5e-5 and
 * 2e-4 of the reference), but a softcap outside the tanh kernel's range
 * (TA_SDPA_FUSED: TA_EUNSUPPORTED). */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 2, H = 4, HKV = 2, LQ = 5, LK = 6, D = 8 };

typedef struct fixture {
    ta_tensor q, k, v, o, lse, dO, dq, dk, dv;
    ta_tensor slopes, sinks, dsinks;
} fixture;

static void make(fixture *f)
{
    const int64_t qs[4] = {B, H, LQ, D}, ks[4] = {B, HKV, LK, D}, hs[1] = {H};
    TA_CHECK_OK(ta_tensor_empty(&f->q, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&f->k, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&f->v, 4, ks));
    TA_CHECK_OK(ta_randn(&f->q, 1));
    TA_CHECK_OK(ta_randn(&f->k, 2));
    TA_CHECK_OK(ta_randn(&f->v, 3));
    TA_CHECK_OK(ta_tensor_full(&f->o, 4, qs, 5.0f));
    TA_CHECK_OK(ta_tensor_full(&f->lse, 3, qs, 5.0f));
    TA_CHECK_OK(ta_tensor_empty(&f->dO, 4, qs));
    TA_CHECK_OK(ta_randn(&f->dO, 4));
    TA_CHECK_OK(ta_tensor_full(&f->dq, 4, qs, 5.0f));
    TA_CHECK_OK(ta_tensor_full(&f->dk, 4, ks, 5.0f));
    TA_CHECK_OK(ta_tensor_full(&f->dv, 4, ks, 5.0f));
    TA_CHECK_OK(ta_tensor_full(&f->slopes, 1, hs, 0.25f));
    TA_CHECK_OK(ta_tensor_full(&f->sinks, 1, hs, 0.5f));
    TA_CHECK_OK(ta_tensor_full(&f->dsinks, 1, hs, 5.0f));
}

static void release(fixture *f)
{
    ta_tensor *all[] = {&f->q, &f->k, &f->v, &f->o, &f->lse, &f->dO, &f->dq, &f->dk, &f->dv,
                        &f->slopes, &f->sinks, &f->dsinks};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

/* Every element of t still holds 5 (an output the failed call left untouched). */
static void expect_untouched(const ta_tensor *t, const char *what)
{
    int64_t n = ta_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (((const float *)t->data)[i] != 5.0f) fail_msg("%s was written by a failed call", what);
}

/* The forward, its workspace query and the backward all refuse o with code and needle. */
static void expect_refused(fixture *f, const ta_sdpa_opts *o, ta_status code, const char *needle)
{
    ta_sdpa_opts fo = *o;
    fo.lse = &f->lse;
    fo.dsinks = NULL;
    size_t bytes;
    if (!o->dsinks) {
        TA_CHECK_ERR(ta_sdpa(&f->o, &f->q, &f->k, &f->v, &fo), code, needle);
        TA_CHECK_ERR(ta_sdpa_workspace_size(&bytes, &f->o, &f->q, &f->k, &f->v, &fo), code,
                     needle);
    }
    ta_sdpa_opts bo = *o;
    TA_CHECK_ERR(ta_sdpa_backward(&f->dq, &f->dk, &f->dv, &f->dO, &f->q, &f->k, &f->v, &f->o,
                                  &f->lse, &bo), code, needle);
    TA_CHECK_ERR(ta_sdpa_backward_workspace_size(&bytes, &f->dq, &f->dk, &f->dv, &f->dO, &f->q,
                                                 &f->k, &f->v, &f->o, &f->lse, &bo), code, needle);
    expect_untouched(&f->o, "O");
    expect_untouched(&f->lse, "LSE");
    expect_untouched(&f->dq, "dQ");
    expect_untouched(&f->dk, "dK");
    expect_untouched(&f->dv, "dV");
    expect_untouched(&f->dsinks, "dsinks");
}

static void test_bad_values(void **state)
{
    (void)state;
    fixture f;
    make(&f);
    const ta_sdpa_opts bad[] = {
        {.softcap = -1.0f},
        {.softcap = NAN},
        {.softcap = INFINITY},
        {.has_window = 1, .window_left = -2, .window_right = 0},
        {.has_window = 1, .window_left = 3, .window_right = -7},
    };
    const char *needles[] = {"opts->softcap must be finite and >= 0 (0: off), got -1",
                             "opts->softcap must be finite and >= 0 (0: off), got nan",
                             "opts->softcap must be finite and >= 0 (0: off), got inf",
                             "opts->window_left = -2 is below -1",
                             "opts->window_right = -7 is below -1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_refused(&f, &bad[i], TA_EINVAL, needles[i]);
    release(&f);
}

static void test_bad_tensors(void **state)
{
    (void)state;
    fixture f;
    make(&f);
    const int64_t h1[1] = {H + 1}, bh[2] = {B, H}, hb[2] = {H, B}, bh1[3] = {B, H, 1};
    ta_tensor s_h1, s_hb, s_bh1, s_bh, f16 = f.slopes;
    TA_CHECK_OK(ta_tensor_zeros(&s_h1, 1, h1));
    TA_CHECK_OK(ta_tensor_zeros(&s_hb, 2, hb));
    TA_CHECK_OK(ta_tensor_zeros(&s_bh1, 3, bh1));
    TA_CHECK_OK(ta_tensor_zeros(&s_bh, 2, bh));
    f16.dtype = TA_F16;
    f16.owned = NULL;
    struct {
        ta_sdpa_opts o;
        const char *needle;
    } bad[] = {
        {{.alibi_slopes = &s_h1}, "opts->alibi_slopes has shape [5]; expected [H] = [4] or [B, H] = [2, 4]"},
        {{.alibi_slopes = &s_hb}, "opts->alibi_slopes has shape [4, 2]"},
        {{.alibi_slopes = &s_bh1}, "opts->alibi_slopes has shape [2, 4, 1]"},
        {{.alibi_slopes = &f16}, "opts->alibi_slopes has dtype 2; it must be float32"},
        {{.sinks = &s_h1}, "opts->sinks has shape [5]; expected [H] = [4]"},
        {{.sinks = &s_bh}, "opts->sinks has shape [2, 4]; expected [H] = [4]"},
        {{.sinks = &f16}, "opts->sinks has dtype 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_refused(&f, &bad[i].o, TA_EINVAL, bad[i].needle);
    /* NULL data in a non-empty slopes tensor */
    ta_tensor nodata = f.slopes;
    nodata.data = NULL;
    nodata.owned = NULL;
    ta_sdpa_opts o = {.alibi_slopes = &nodata};
    expect_refused(&f, &o, TA_EINVAL, "opts->alibi_slopes has NULL data");
    /* [B, H] slopes are valid */
    o.alibi_slopes = &s_bh;
    TA_CHECK_OK(ta_sdpa(&f.o, &f.q, &f.k, &f.v, &o));
    ta_tensor *all[] = {&s_h1, &s_hb, &s_bh1, &s_bh};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    release(&f);
}

static void test_dsinks(void **state)
{
    (void)state;
    fixture f;
    make(&f);
    /* in a forward call */
    ta_sdpa_opts o = {.sinks = &f.sinks, .dsinks = &f.dsinks};
    TA_CHECK_ERR(ta_sdpa(&f.o, &f.q, &f.k, &f.v, &o), TA_EINVAL,
                 "opts->dsinks is an output of ta_sdpa_backward");
    expect_untouched(&f.o, "O");
    expect_untouched(&f.dsinks, "dsinks");
    /* without sinks, of the wrong shape or dtype, repeating an element, overlapping */
    const int64_t h1[1] = {H + 1}, hs[1] = {H};
    ta_tensor d_h1, rep = f.dsinks, f16 = f.dsinks, in_q, over_sinks = f.sinks;
    TA_CHECK_OK(ta_tensor_full(&d_h1, 1, h1, 5.0f));
    rep.stride[0] = 0;
    rep.owned = NULL;
    f16.dtype = TA_F16;
    f16.owned = NULL;
    TA_CHECK_OK(ta_tensor_from_buffer(&in_q, (float *)f.q.data + 3, 1, hs, NULL));
    over_sinks.owned = NULL;
    struct {
        ta_sdpa_opts o;
        const char *needle;
    } bad[] = {
        {{.dsinks = &f.dsinks}, "opts->dsinks needs opts->sinks"},
        {{.sinks = &f.sinks, .dsinks = &d_h1}, "opts->dsinks has shape [5], expected [H]"},
        {{.sinks = &f.sinks, .dsinks = &f16}, "opts->dsinks has dtype 2"},
        {{.sinks = &f.sinks, .dsinks = &rep}, "opts->dsinks"},
        {{.sinks = &f.sinks, .dsinks = &in_q}, "opts->dsinks overlaps Q"},
        {{.sinks = &f.sinks, .dsinks = &over_sinks}, "opts->dsinks overlaps opts->sinks"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_refused(&f, &bad[i].o, TA_EINVAL, bad[i].needle);
    /* outputs over the variants' inputs: slopes and sinks inside an output's buffer */
    ta_tensor big, lbig, sl, sk;
    const int64_t qs[4] = {B, H, LQ, D};
    TA_CHECK_OK(ta_tensor_full(&big, 4, qs, 5.0f));
    TA_CHECK_OK(ta_tensor_full(&lbig, 3, qs, 5.0f));
    TA_CHECK_OK(ta_tensor_from_buffer(&sl, (float *)big.data + 7, 1, hs, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&sk, (float *)lbig.data + 3, 1, hs, NULL));
    ta_sdpa_opts ao = {.alibi_slopes = &sl};
    TA_CHECK_ERR(ta_sdpa(&big, &f.q, &f.k, &f.v, &ao), TA_EINVAL, "O overlaps opts->alibi_slopes");
    ta_sdpa_opts so = {.sinks = &sk, .lse = &lbig};
    TA_CHECK_ERR(ta_sdpa(&f.o, &f.q, &f.k, &f.v, &so), TA_EINVAL, "opts->lse overlaps opts->sinks");
    TA_CHECK_ERR(ta_sdpa_backward(&big, &f.dk, &f.dv, &f.dO, &f.q, &f.k, &f.v, &f.o, &f.lse,
                                  &ao), TA_EINVAL, "dQ overlaps opts->alibi_slopes");
    expect_untouched(&big, "O / dQ");
    expect_untouched(&lbig, "LSE");
    ta_tensor_free(&big);
    ta_tensor_free(&lbig);
    ta_tensor_free(&d_h1);
    release(&f);
}

/* Softcap 0 is off, window bounds of -1 are unbounded, and without has_window the bounds are
 * not read: each gives exactly the plain call's bits, on the path the plain call takes. */
static void test_neutral_values(void **state)
{
    (void)state;
    fixture f;
    make(&f);
    ta_tensor o0;
    const int64_t qs[4] = {B, H, LQ, D};
    TA_CHECK_OK(ta_tensor_empty(&o0, 4, qs));
    TA_CHECK_OK(ta_sdpa(&o0, &f.q, &f.k, &f.v, &(ta_sdpa_opts){.path = TA_SDPA_FUSED}));
    const ta_sdpa_opts neutral[] = {
        {.softcap = 0.0f, .path = TA_SDPA_FUSED},
        {.has_window = 1, .window_left = -1, .window_right = -1, .path = TA_SDPA_FUSED},
        {.has_window = 0, .window_left = -7, .window_right = 3, .path = TA_SDPA_FUSED},
    };
    for (size_t i = 0; i < sizeof neutral / sizeof *neutral; i++) {
        TA_CHECK_OK(ta_sdpa(&f.o, &f.q, &f.k, &f.v, &neutral[i]));
        assert_memory_equal(f.o.data, o0.data, sizeof(float) * (size_t)ta_tensor_numel(&o0));
    }
    ta_tensor_free(&o0);
    release(&f);
}

/* Phase 1 of issue 12: the fused paths refuse every variant, TA_SDPA_AUTO takes the
 * reference path (the same bits as TA_SDPA_REFERENCE). When the fused paths implement a
 * variant, this test changes with them. */
/* The backward of o on path into the fixture's dq, dk, dv (and dsinks with sinks). */
static void backward_on(fixture *f, const ta_sdpa_opts *vo, ta_sdpa_path path)
{
    ta_sdpa_opts o = *vo;
    o.path = path;
    o.dsinks = o.sinks ? &f->dsinks : NULL;
    TA_CHECK_OK(ta_sdpa_backward(&f->dq, &f->dk, &f->dv, &f->dO, &f->q, &f->k, &f->v, &f->o,
                                 &f->lse, &o));
}

static void expect_near(const char *what, const char *name, const ta_tensor *a,
                        const ta_tensor *b, float tol)
{
    const float *x = a->data, *y = b->data;
    for (int64_t e = 0; e < ta_tensor_numel(a); e++)
        if (!(fabsf(x[e] - y[e]) <= tol))
            fail_msg("%s %s: fused %g, reference %g at %lld", name, what, (double)x[e],
                     (double)y[e], (long long)e);
}

static void test_paths(void **state)
{
    (void)state;
    fixture f;
    make(&f);
    const ta_sdpa_opts variants[] = {
        {.has_window = 1, .window_left = 2, .window_right = 0},
        {.softcap = 3.0f},
        {.alibi_slopes = &f.slopes},
        {.sinks = &f.sinks},
    };
    const char *names[] = {"a window", "softcap", "ALiBi", "sinks"};
    const int64_t qs[4] = {B, H, LQ, D}, ks[4] = {B, HKV, LK, D}, hs[1] = {H};
    ta_tensor ref, fused, g[2][4]; /* [fused, reference] x dq, dk, dv, dsinks */
    TA_CHECK_OK(ta_tensor_empty(&ref, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&fused, 4, qs));
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        ta_sdpa_opts o = variants[i];
        o.path = TA_SDPA_FUSED;
        TA_CHECK_OK(ta_sdpa(&fused, &f.q, &f.k, &f.v, &o));
        o.path = TA_SDPA_REFERENCE;
        TA_CHECK_OK(ta_sdpa(&ref, &f.q, &f.k, &f.v, &o));
        o.path = TA_SDPA_AUTO;
        o.lse = &f.lse;
        TA_CHECK_OK(ta_sdpa(&f.o, &f.q, &f.k, &f.v, &o));
        o.lse = NULL;
        assert_memory_equal(f.o.data, fused.data, sizeof(float) * (size_t)ta_tensor_numel(&ref));
        expect_near("O", names[i], &fused, &ref, 5e-5f);
        /* the backward from the automatic forward's O and LSE: fused, reference, auto */
        const ta_sdpa_path paths[2] = {TA_SDPA_FUSED, TA_SDPA_REFERENCE};
        for (int p = 0; p < 2; p++) {
            backward_on(&f, &o, paths[p]);
            ta_tensor *src[4] = {&f.dq, &f.dk, &f.dv, &f.dsinks};
            const int64_t *shp[4] = {qs, ks, ks, hs};
            for (int t = 0; t < 4; t++) {
                TA_CHECK_OK(ta_tensor_empty(&g[p][t], t == 3 ? 1 : 4, shp[t]));
                TA_CHECK_OK(ta_tensor_copy(&g[p][t], src[t]));
            }
        }
        backward_on(&f, &o, TA_SDPA_AUTO);
        ta_tensor *got[4] = {&f.dq, &f.dk, &f.dv, &f.dsinks};
        const char *roles[4] = {"dQ", "dK", "dV", "dsinks"};
        for (int t = 0; t < (o.sinks ? 4 : 3); t++) {
            assert_memory_equal(got[t]->data, g[0][t].data,
                                sizeof(float) * (size_t)ta_tensor_numel(got[t]));
            expect_near(roles[t], names[i], &g[0][t], &g[1][t], 2e-4f);
        }
        for (int p = 0; p < 2; p++)
            for (int t = 0; t < 4; t++) ta_tensor_free(&g[p][t]);
        ta_tensor *all[] = {&f.o, &f.lse, &f.dq, &f.dk, &f.dv, &f.dsinks};
        for (size_t t = 0; t < sizeof all / sizeof *all; t++) TA_CHECK_OK(ta_tensor_fill(all[t], 5.0f));
    }
    /* a softcap outside the fused kernels' range: refused there, the reference on AUTO */
    ta_sdpa_opts o = {.softcap = 0x1p127f, .path = TA_SDPA_FUSED};
    TA_CHECK_ERR(ta_sdpa(&f.o, &f.q, &f.k, &f.v, &o), TA_EUNSUPPORTED,
                 "the fused path (TA_SDPA_FUSED) does not implement a softcap outside [2^-126, 2^126]");
    expect_refused(&f, &o, TA_EUNSUPPORTED, "does not implement a softcap outside");
    o.path = TA_SDPA_REFERENCE;
    TA_CHECK_OK(ta_sdpa(&ref, &f.q, &f.k, &f.v, &o));
    o.path = TA_SDPA_AUTO;
    TA_CHECK_OK(ta_sdpa(&f.o, &f.q, &f.k, &f.v, &o));
    assert_memory_equal(f.o.data, ref.data, sizeof(float) * (size_t)ta_tensor_numel(&ref));
    ta_tensor_free(&ref);
    ta_tensor_free(&fused);
    release(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_dsinks),
        cmocka_unit_test(test_neutral_values),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
