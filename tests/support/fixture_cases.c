/* Test-side helpers over fixture cases (see fixture_cases.h). */
#include "fixture_cases.h"
#include "ta_test.h"

#include <stdlib.h>
#include <string.h>

const ta_fixture_record *ta_fixture_need(const ta_fixture_file *f, const char *c,
                                         const char *role)
{
    const ta_fixture_record *r = ta_fixture_case_record(f, c, role);
    if (!r) fail_msg("%s: no record '%s'", c, role);
    return r;
}

double *ta_fixture_case_f64(const ta_fixture_file *f, const char *c, const char *role)
{
    const ta_fixture_record *r = ta_fixture_case_record(f, c, role);
    if (!r) return NULL;
    double *p = malloc(sizeof(double) * (size_t)(r->numel ? r->numel : 1));
    assert_non_null(p);
    TA_CHECK_OK(ta_fixture_to_f64(p, (size_t)r->numel, r));
    return p;
}

int64_t *ta_fixture_case_i64(const ta_fixture_file *f, const char *c, const char *role)
{
    const ta_fixture_record *r = ta_fixture_case_record(f, c, role);
    if (!r) return NULL;
    assert_int_equal(r->dtype, TA_FIXTURE_I64);
    int64_t *p = malloc(sizeof(int64_t) * (size_t)(r->numel ? r->numel : 1));
    assert_non_null(p);
    memcpy(p, r->data, sizeof(int64_t) * (size_t)r->numel);
    return p;
}

/* Element e (C order) of t. */
static float got_at(const ta_tensor *t, int64_t e)
{
    int64_t idx[TA_MAX_DIMS] = {0};
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = e % t->shape[d];
        e /= t->shape[d];
    }
    return *ta_tensor_at_const(t, idx);
}

int ta_fixture_cases_run(const char *file, const char *key, const char *value,
                         void (*fn)(const ta_fixture_file *f, const char *name, void *ctx),
                         void *ctx)
{
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, file));
    int ran = 0;
    for (int i = 0; i < ta_fixture_case_count(f); i++) {
        const char *c = ta_fixture_case_name(f, i);
        char v[64];
        if (key && (!ta_fixture_meta_get(ta_fixture_case_meta(f, c), key, v, sizeof v) ||
                    strcmp(v, value) != 0))
            continue;
        fn(f, c, ctx);
        ran++;
    }
    ta_fixture_close(f);
    return ran;
}

double ta_fixture_expect_close(const char *c, const char *what, const ta_tensor *got,
                               const ta_fixture_record *want, double rel, double tol)
{
    if (want->ndim != got->ndim ||
        memcmp(want->shape, got->shape, sizeof(int64_t) * (size_t)got->ndim) != 0)
        fail_msg("%s: %s has a different shape from the fixture", c, what);
    int64_t n = ta_tensor_numel(got);
    double *ref = malloc(sizeof(double) * (size_t)(n + 1));
    assert_non_null(ref);
    TA_CHECK_OK(ta_fixture_to_f64(ref, (size_t)(n + 1), want));
    int64_t bad;
    double err = ta_test_max_err(got, ref, rel, tol, &bad);
    if (!(err <= tol))
        fail_msg("%s: %s differs from the fixture by %g (tolerance %g; element %lld: %g, want %g)",
                 c, what, err, tol, (long long)bad, (double)got_at(got, bad), ref[bad]);
    free(ref);
    return err;
}
