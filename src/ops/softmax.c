/* Numerically stable softmax over any axis (ta_softmax) and the row kernel the SDPA
 * paths share (ta_softmax_row). */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "ops/softmax.h"

#include <math.h>
#include <omp.h>

float ta_softmax_row(float *out, int64_t os, const float *x, int64_t xs, int64_t n)
{
    /* Pass 1: the max, and whether a NaN hides in the row (the max alone would skip it:
     * v > m is false for NaN). Both reductions are order independent. */
    float m = -INFINITY;
    int nan = 0;
    for (int64_t j = 0; j < n; j++) {
        float v = x[j * xs];
        m = v > m ? v : m;
        nan |= v != v;
    }
    if (nan || m == INFINITY) {
        for (int64_t j = 0; j < n; j++) out[j * os] = NAN;
        return NAN;
    }
    if (m == -INFINITY) {
        for (int64_t j = 0; j < n; j++) out[j * os] = 0.0f;
        return -INFINITY;
    }
    /* Pass 2: e = exp(x - max) <= 1 in double (x - max is exact there, so an entry far
     * below the max is as accurate as one near it), summed in double in index order:
     * with 100k terms a float sum would lose ~log2(1e5) bits. e is kept in out as a
     * float between the passes, so an entry sees two roundings (< 1 ulp). */
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double e = exp((double)x[j * xs] - (double)m);
        out[j * os] = (float)e;
        sum += e;
    }
    /* sum >= 1 (the max contributes exp(0)), so inv is finite. */
    double inv = 1.0 / sum;
    for (int64_t j = 0; j < n; j++) out[j * os] = (float)(out[j * os] * inv);
    return (float)(m + log(sum));
}

static bool same_view(const ta_tensor *a, const ta_tensor *b)
{
    if (a->data != b->data || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->stride[d] != b->stride[d]))
            return false;
    return true;
}

/* x, out: the same shape, any strides; softmax along dim. */
ta_status ta_softmax(ta_tensor *out, const ta_tensor *x, int dim)
{
    const char *fn = "ta_softmax";
    ta_status st = ta_tensor_check(fn, "out", out);
    if (!st) st = ta_tensor_check(fn, "x", x);
    if (st) return st;
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    bool same = out->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = out->shape[d] == x->shape[d];
    if (!same)
        return ta_error(TA_ESHAPE, "%s: out has shape %s but x has %s", fn,
                        ta_shape_str(s1, sizeof s1, out->ndim, out->shape),
                        ta_shape_str(s2, sizeof s2, x->ndim, x->shape));
    int nd = x->ndim;
    int rank = nd ? nd : 1; /* a scalar is one row of one element, as in PyTorch */
    if (dim < -rank || dim >= rank)
        return ta_error(TA_EINVAL, "%s: dim %d is out of range for %d dims", fn, dim, nd);
    if (dim < 0) dim += rank;
    if (!same_view(out, x)) {
        if (ta_tensors_overlap(out, x))
            return ta_error(TA_EINVAL, "%s: out overlaps x without being the same view; "
                            "pass the same tensor for in place", fn);
    }
    if ((st = ta_tensor_check_unaliased(fn, "out", out))) return st;
    int64_t numel = ta_tensor_numel(x);
    if (numel == 0) return TA_OK;

    /* Rows: every index over the dims other than dim (kept as a size-1 dim so one
     * multi-index walk serves both tensors). */
    int64_t n = nd ? x->shape[dim] : 1;
    int64_t xs = nd ? x->stride[dim] : 0, os = nd ? out->stride[dim] : 0;
    int64_t shape[TA_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = d == dim ? 1 : x->shape[d];
    int64_t rows = numel / n;
    int nt = ta_threads();
    if (rows * n < 32768) nt = 1; /* not worth waking threads */
#pragma omp parallel num_threads(nt)
    {
        /* Each thread takes one contiguous block of rows; rows are independent, so
         * the results do not depend on the split. */
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t r0 = rows * t / T, r1 = rows * (t + 1) / T;
        int64_t idx[TA_MAX_DIMS] = {0}, rem = r0;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = x->data;
            float *orow = out->data;
            for (int d = 0; d < nd; d++) {
                xr += idx[d] * x->stride[d];
                orow += idx[d] * out->stride[d];
            }
            ta_softmax_row(orow, os, xr, xs, n);
            ta_index_next(nd, shape, idx);
        }
    }
    return TA_OK;
}
