#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

char ta_test_dir[64];

int ta_test_make_dir(const char *tag)
{
    snprintf(ta_test_dir, sizeof ta_test_dir, "/tmp/%s_XXXXXX", tag);
    return mkdtemp(ta_test_dir) ? 0 : -1;
}

int ta_test_remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ta_test_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int ta_test_teardown_dir(void **state)
{
    (void)state;
    return ta_test_remove_dir();
}

char *ta_test_path(const char *name)
{
    static char buf[32][160];
    static int next;
    char *p = buf[next++ % 32];
    snprintf(p, sizeof buf[0], "%s/%s", ta_test_dir, name);
    return p;
}

double ta_test_worse(double worst, double e)
{
    return e <= worst ? worst : isnan(e) ? INFINITY : e;
}

void ta_test_next_index(int ndim, const int64_t *shape, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return;
        idx[d] = 0;
    }
}

double ta_test_max_err(const ta_tensor *t, const double *ref, double rel, double tol,
                       int64_t *first_bad)
{
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(t);
    double worst = 0;
    if (first_bad) *first_bad = -1;
    for (int64_t e = 0; e < n; e++) {
        double a = *ta_tensor_at_const(t, idx), b = ref[e], d;
        if (isnan(a) || isnan(b)) d = isnan(a) && isnan(b) ? 0 : INFINITY;
        else if (isinf(a) || isinf(b)) d = a == b ? 0 : INFINITY;
        else d = fabs(a - b) / fmax(1.0, rel * fabs(b));
        worst = ta_test_worse(worst, d);
        if (first_bad && *first_bad < 0 && !(d <= tol)) *first_bad = e;
        ta_test_next_index(t->ndim, t->shape, idx);
    }
    return worst;
}

double *ta_test_to_f64(const ta_tensor *t)
{
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(t);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(x);
    for (int64_t e = 0; e < n; e++) {
        x[e] = *ta_tensor_at_const(t, idx);
        ta_test_next_index(t->ndim, t->shape, idx);
    }
    return x;
}

void ta_test_as_dtype(ta_tensor *dst, const ta_tensor *src, ta_dtype dt)
{
    TA_CHECK_OK(ta_tensor_empty_dtype(dst, dt, src->ndim, src->shape));
    TA_CHECK_OK(ta_tensor_copy(dst, src));
}

void ta_test_from_f64(ta_tensor *t, const double *x)
{
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(t);
    for (int64_t e = 0; e < n; e++) {
        *ta_tensor_at(t, idx) = (float)x[e];
        ta_test_next_index(t->ndim, t->shape, idx);
    }
}

void ta_test_tensor4(ta_tensor *view, ta_tensor *store, const int64_t s[4],
                     ta_test_layout layout, const ta_tensor *src)
{
    assert_true(layout != TA_TEST_GUARD);
    if (layout == TA_TEST_BHLD) {
        TA_CHECK_OK(ta_tensor_empty(store, 4, s));
        *view = *store;
        view->owned = NULL;
    } else {
        const int blhd = layout == TA_TEST_BLHD;
        const int64_t m[4] = {s[0], blhd ? s[2] : s[1], blhd ? s[1] : s[3], blhd ? s[3] : s[2]};
        const int perm[2][4] = {{0, 1, 3, 2}, {0, 2, 1, 3}};
        TA_CHECK_OK(ta_tensor_empty(store, 4, m));
        TA_CHECK_OK(ta_tensor_permute(view, store, perm[blhd]));
    }
    if (src) TA_CHECK_OK(ta_tensor_copy(view, src));
}
