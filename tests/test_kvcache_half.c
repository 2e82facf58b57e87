/* ta-test: all-isas
 * Half-precision KV caches: every case of tests/fixtures/kvcache.tafx (contiguous and
 * paged, decode and prefill, with and without new keys, NaN in rows without keys) runs
 * with its caches stored as float16 and as bfloat16 (the fixture's values rounded to
 * nearest-even, new keys and values kept float32: the append rounds them), and with q and
 * O in that dtype too, on the reference and the fused path. It must give
 *   - after the append, caches whose values equal the float32 run's caches rounded (the
 *     append's rounding is nearest-even, exactly ta_convert's);
 *   - the same O and LSE, within 1e-6, as the float32 cache holding those same rounded
 *     values with the rounded new keys (the widening is exact and the arithmetic float32
 *     in both), and for a half O the rounding of that O.
 * The float32 runs themselves are checked against torch by test_kvcache_torch, and the
 * widening kernels against PyTorch's rounding by test_sdpa_half and test_dtype. */
#include "ta_test.h"

#include "fixture_cases.h"
#include "kv_cases.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A new tensor of dtype dt with src's values rounded; *rounded (when non-NULL) a float32
 * tensor of the same rounded values. */
static void rounded_copy(ta_tensor *dst, ta_tensor *rounded, const ta_tensor *src, ta_dtype dt)
{
    ta_test_as_dtype(dst, src, dt);
    if (rounded) ta_test_as_dtype(rounded, dst, TA_F32);
}

/* max |a - b| over float32 views of two tensors of any dtypes (NaN must meet NaN). */
static double max_diff(const ta_tensor *a, const ta_tensor *b)
{
    ta_tensor x, y;
    TA_CHECK_OK(ta_tensor_empty(&x, a->ndim, a->shape));
    TA_CHECK_OK(ta_tensor_empty(&y, b->ndim, b->shape));
    TA_CHECK_OK(ta_tensor_copy(&x, a));
    TA_CHECK_OK(ta_tensor_copy(&y, b));
    double e = 0.0;
    const float *p = x.data, *q = y.data;
    for (int64_t i = 0; i < ta_tensor_numel(&x); i++) {
        if (isnan(p[i]) || isnan(q[i])) {
            if (!(isnan(p[i]) && isnan(q[i]))) e = INFINITY;
            continue;
        }
        e = fmax(e, fabs((double)p[i] - (double)q[i]));
    }
    ta_tensor_free(&x);
    ta_tensor_free(&y);
    return e;
}

static void run(const ta_fixture_file *f, const char *c, ta_dtype dt, bool half_qo,
                ta_sdpa_path path)
{
    ta_test_kv h, r; /* the half run, and the float32 run on rounded values */
    ta_test_kv_load(&h, f, c, TA_TEST_BHLD);
    ta_test_kv_load(&r, f, c, TA_TEST_BHLD);
    ta_tensor kc, vc, kr, vr, knr = {0}, vnr = {0}, kn_h = {0}, vn_h = {0}, q = {0}, o = {0};
    rounded_copy(&kc, &kr, &h.kc, dt);
    rounded_copy(&vc, &vr, &h.vc, dt);
    ta_kv_cache hc = h.cache, rc = r.cache;
    hc.k = &kc, hc.v = &vc, rc.k = &kr, rc.v = &vr;
    const ta_tensor *hkn = NULL, *hvn = NULL, *rkn = NULL, *rvn = NULL;
    if (h.has_new) { /* the half run appends float32 rows; the float32 run their roundings */
        rounded_copy(&kn_h, &knr, &h.kn, dt);
        rounded_copy(&vn_h, &vnr, &h.vn, dt);
        hkn = &h.kn, hvn = &h.vn, rkn = &knr, rvn = &vnr;
    }
    ta_tensor *hq = &h.q, *ho = &h.o;
    if (half_qo) { /* q rounded for both runs; O in dt */
        rounded_copy(&q, NULL, &h.q, dt);
        TA_CHECK_OK(ta_tensor_copy(&r.q, &q));
        TA_CHECK_OK(ta_tensor_empty_dtype(&o, dt, 4, h.o.shape));
        TA_CHECK_OK(ta_tensor_fill(&o, NAN));
        hq = &q, ho = &o;
    }
    ta_sdpa_opts oh = h.opts, orr = r.opts;
    oh.path = orr.path = path;
    TA_CHECK_OK(ta_sdpa_kvcache(ho, hq, &hc, hkn, hvn, &oh));
    TA_CHECK_OK(ta_sdpa_kvcache(&r.o, &r.q, &rc, rkn, rvn, &orr));
    for (int64_t i = 0; i < ta_tensor_numel(&r.o); i++) /* max_diff lets NaN meet NaN */
        if (!isfinite(((const float *)r.o.data)[i]))
            fail_msg("%s (%s): the float32 run's O[%lld] is %g", c, ta_dtype_name(dt), (long long)i,
                     (double)((const float *)r.o.data)[i]);
    double ek = max_diff(&kc, &kr), ev = max_diff(&vc, &vr);
    if (ek != 0.0 || ev != 0.0)
        fail_msg("%s (%s): the caches after the append differ from the rounded float32 run's "
                 "by %.3g (k) and %.3g (v)", c, ta_dtype_name(dt), ek, ev);
    if (half_qo) { /* the float32 O rounded to dt: what the half O must be, up to ties */
        ta_tensor want;
        rounded_copy(&want, NULL, &r.o, dt);
        double e = max_diff(&o, &want), scale = 0.0;
        const float *x = r.o.data;
        for (int64_t i = 0; i < ta_tensor_numel(&r.o); i++) scale = fmax(scale, fabs(x[i]));
        double ulp = dt == TA_BF16 ? 0x1p-7 : 0x1p-10; /* one unit of the largest binade */
        if (!(e <= ulp * fmax(scale, 1e-30)))
            fail_msg("%s (%s, q and O too, %s): O differs by %.3g", c, ta_dtype_name(dt),
                     path == TA_SDPA_REFERENCE ? "reference" : "fused", e);
        ta_tensor_free(&want);
    } else {
        double e = max_diff(&h.o, &r.o);
        if (!(e <= 1e-6))
            fail_msg("%s (%s, %s): O differs from the float32 cache of the same values by %.3g",
                     c, ta_dtype_name(dt), path == TA_SDPA_REFERENCE ? "reference" : "fused", e);
    }
    double el = max_diff(&h.lse, &r.lse);
    if (!(el <= 1e-6)) fail_msg("%s (%s): LSE differs by %.3g", c, ta_dtype_name(dt), el);
    ta_tensor *all[] = {&kc, &vc, &kr, &vr, &knr, &vnr, &kn_h, &vn_h, &q, &o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    ta_test_kv_free(&h);
    ta_test_kv_free(&r);
}

static void run_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    (*(int *)ctx)++;
    const ta_dtype dts[2] = {TA_F16, TA_BF16};
    for (int d = 0; d < 2; d++)
        for (int qo = 0; qo < 2; qo++)
            for (int path = 0; path < 2; path++)
                run(f, c, dts[d], qo, path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE);
}

static void test_half_caches(void **state)
{
    (void)state;
    int n = 0;
    ta_fixture_cases_run("kvcache.tafx", NULL, NULL, run_case, &n);
    assert_true(n >= 13);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_half_caches)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
