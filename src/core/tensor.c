/* ta_tensor: constructors, argument checks and views (copies: tensor_copy.c). */
#include "core/core.h"
#include "core/tensor_internal.h"

#include <stddef.h>
#include <string.h>

static ta_status check_shape(const char *fn, int ndim, const int64_t *shape, size_t size,
                             int64_t *numel)
{
    if (ndim < 0 || ndim > TA_MAX_DIMS)
        return ta_error(TA_EINVAL, "%s: ndim must be in [0, %d], got %d", fn, TA_MAX_DIMS, ndim);
    if (ndim > 0 && !shape) return ta_error(TA_EINVAL, "%s: shape is NULL", fn);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return ta_error(TA_EINVAL, "%s: shape[%d] is negative (%lld)", fn, i, (long long)shape[i]);
    int64_t n;
    size_t bytes;
    if (!ta_shape_numel(&n, ndim, shape) || !ta_mul_size(&bytes, (size_t)n, size) ||
        bytes > (size_t)PTRDIFF_MAX) {
        char s[TA_SHAPE_STR_MAX];
        return ta_error(TA_EINVAL, "%s: shape %s has too many elements", fn,
                        ta_shape_str(s, sizeof s, ndim, shape));
    }
    *numel = n;
    return TA_OK;
}

/* Row-major strides, a dimension of 0 counted as 1 (as PyTorch does). The product can
 * pass INT64_MAX only for a tensor with a 0 dimension (check_shape bounds the others),
 * whose strides never address memory: there it stops growing instead of overflowing. */
void ta_contiguous_strides(int64_t *stride, int ndim, const int64_t *shape)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        int64_t d = shape[i] > 0 ? shape[i] : 1;
        if (s <= INT64_MAX / d) s *= d;
    }
}

/* The allocating constructors; fn names the public function in messages. zeroed: all
 * bits 0, which is +0 in every dtype. */
static ta_status make(const char *fn, ta_tensor *t, ta_dtype dtype, int ndim,
                      const int64_t *shape, bool zeroed)
{
    if (!t) return ta_error(TA_EINVAL, "%s: t is NULL", fn);
    ta_status st = ta_dtype_check(fn, "dtype", dtype, TA_ACCEPT_ANY);
    if (st) return st;
    int64_t n;
    size_t size = ta_dtype_size(dtype);
    if ((st = check_shape(fn, ndim, shape, size, &n))) return st;
    size_t bytes = (size_t)(n ? n : 1) * size;
    void *data = zeroed ? ta_alloc_zeroed(bytes) : ta_alloc(bytes);
    if (!data) return TA_ENOMEM;
    memset(t, 0, sizeof *t);
    t->data = data;
    t->owned = data;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    ta_contiguous_strides(t->stride, ndim, shape);
    return TA_OK;
}

ta_status ta_tensor_empty(ta_tensor *t, int ndim, const int64_t *shape)
{
    return make("ta_tensor_empty", t, TA_F32, ndim, shape, false);
}

ta_status ta_tensor_empty_dtype(ta_tensor *t, ta_dtype dtype, int ndim, const int64_t *shape)
{
    return make("ta_tensor_empty_dtype", t, dtype, ndim, shape, false);
}

ta_status ta_tensor_zeros_dtype(ta_tensor *t, ta_dtype dtype, int ndim, const int64_t *shape)
{
    return make("ta_tensor_zeros_dtype", t, dtype, ndim, shape, true);
}

static ta_status make_full(const char *fn, ta_tensor *t, int ndim, const int64_t *shape,
                           float value)
{
    ta_status st = make(fn, t, TA_F32, ndim, shape, false);
    if (st) return st;
    float *p = t->data;
    int64_t n = ta_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) p[i] = value;
    return TA_OK;
}

ta_status ta_tensor_full(ta_tensor *t, int ndim, const int64_t *shape, float value)
{
    return make_full("ta_tensor_full", t, ndim, shape, value);
}

ta_status ta_tensor_zeros(ta_tensor *t, int ndim, const int64_t *shape)
{
    return make_full("ta_tensor_zeros", t, ndim, shape, 0.0f);
}

ta_status ta_tensor_ones(ta_tensor *t, int ndim, const int64_t *shape)
{
    return make_full("ta_tensor_ones", t, ndim, shape, 1.0f);
}

static ta_status from_buffer(const char *fn, ta_tensor *t, void *data, ta_dtype dtype,
                             int ndim, const int64_t *shape, const int64_t *strides)
{
    if (!t) return ta_error(TA_EINVAL, "%s: t is NULL", fn);
    ta_status st = ta_dtype_check(fn, "dtype", dtype, TA_ACCEPT_ANY);
    if (st) return st;
    int64_t n;
    if ((st = check_shape(fn, ndim, shape, ta_dtype_size(dtype), &n))) return st;
    if (!data && n > 0) return ta_error(TA_EINVAL, "%s: data is NULL", fn);
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    if (strides)
        for (int i = 0; i < ndim; i++) t->stride[i] = strides[i];
    else
        ta_contiguous_strides(t->stride, ndim, shape);
    return TA_OK;
}

ta_status ta_tensor_from_buffer(ta_tensor *t, float *data, int ndim, const int64_t *shape,
                                const int64_t *strides)
{
    return from_buffer("ta_tensor_from_buffer", t, data, TA_F32, ndim, shape, strides);
}

ta_status ta_tensor_from_buffer_dtype(ta_tensor *t, void *data, ta_dtype dtype, int ndim,
                                      const int64_t *shape, const int64_t *strides)
{
    return from_buffer("ta_tensor_from_buffer_dtype", t, data, dtype, ndim, shape, strides);
}

void ta_tensor_free(ta_tensor *t)
{
    if (!t) return;
    ta_free(t->owned);
    memset(t, 0, sizeof *t);
}

int64_t ta_tensor_numel(const ta_tensor *t)
{
    if (!t) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int ta_tensor_is_contiguous(const ta_tensor *t)
{
    if (!t) return 0;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 0) return 1;
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

const float *ta_tensor_at_const(const ta_tensor *t, const int64_t *idx)
{
    const float *p = t->data;
    for (int i = 0; i < t->ndim; i++) p += idx[i] * t->stride[i];
    return p;
}

float *ta_tensor_at(ta_tensor *t, const int64_t *idx)
{
    float *p = t->data;
    for (int i = 0; i < t->ndim; i++) p += idx[i] * t->stride[i];
    return p;
}

static ta_status check(const char *fn, const char *name, const ta_tensor *t, bool data,
                       unsigned accept)
{
    if (!t) return ta_error(TA_EINVAL, "%s: %s is NULL", fn, name);
    if (t->ndim < 0 || t->ndim > TA_MAX_DIMS)
        return ta_error(TA_EINVAL, "%s: %s has ndim %d, must be in [0, %d]", fn, name, t->ndim,
                        TA_MAX_DIMS);
    if (!ta_dtype_valid(t->dtype))
        return ta_error(TA_EINVAL, "%s: %s has dtype %d, not a ta_dtype", fn, name, (int)t->dtype);
    if (!(accept >> t->dtype & 1u))
        return ta_error(TA_EUNSUPPORTED, "%s: %s has dtype %s; %s takes %s", fn, name,
                        ta_dtype_name(t->dtype), fn, ta_dtype_list(accept));
    const ptrdiff_t size = (ptrdiff_t)ta_dtype_size(t->dtype);
    int64_t n;
    if (!ta_shape_numel(&n, t->ndim, t->shape)) {
        char s[TA_SHAPE_STR_MAX];
        return ta_error(TA_EINVAL, "%s: %s has an invalid shape %s", fn, name,
                        ta_shape_str(s, sizeof s, t->ndim, t->shape));
    }
    if (data && n > 0 && !t->data) return ta_error(TA_EINVAL, "%s: %s has NULL data", fn, name);
    /* Every element offset sum(idx[d] * stride[d]) must fit a ptrdiff_t of elements, so
     * that no pointer arithmetic downstream can overflow, whatever the caller's strides. */
    int64_t span = 0;
    for (int d = 0; n > 0 && d < t->ndim; d++) {
        int64_t s = t->stride[d], part;
        if (s == INT64_MIN || __builtin_mul_overflow(t->shape[d] - 1, s < 0 ? -s : s, &part) ||
            __builtin_add_overflow(span, part, &span) ||
            span > (int64_t)(PTRDIFF_MAX / size)) {
            char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
            return ta_error(TA_EINVAL, "%s: %s's strides %s over shape %s overflow the index range",
                            fn, name, ta_shape_str(s1, sizeof s1, t->ndim, t->stride),
                            ta_shape_str(s2, sizeof s2, t->ndim, t->shape));
        }
    }
    return TA_OK;
}

ta_tensor ta_tensor_view(void *data, int ndim, const int64_t *shape)
{
    return ta_tensor_view_dtype(data, TA_F32, ndim, shape);
}

ta_tensor ta_tensor_view_dtype(void *data, ta_dtype dtype, int ndim, const int64_t *shape)
{
    ta_tensor t = {.data = data, .dtype = dtype, .ndim = ndim};
    for (int d = 0; d < ndim; d++) t.shape[d] = shape[d];
    ta_contiguous_strides(t.stride, ndim, shape);
    return t;
}

ta_status ta_tensor_check(const char *fn, const char *name, const ta_tensor *t)
{
    return check(fn, name, t, true, TA_ACCEPT_F32);
}

ta_status ta_tensor_check_layout(const char *fn, const char *name, const ta_tensor *t)
{
    return check(fn, name, t, false, TA_ACCEPT_F32);
}

ta_status ta_tensor_check_dtypes(const char *fn, const char *name, const ta_tensor *t,
                                 unsigned accept)
{
    return check(fn, name, t, true, accept);
}

ta_status ta_tensor_check_shape(const char *fn, const char *name, const ta_tensor *t, int ndim,
                                const int64_t *shape, const char *dims, int flags)
{
    const bool output = flags & TA_CHECK_OUTPUT;
    ta_status st = check(fn, name, t, !(flags & TA_CHECK_LAYOUT_ONLY),
                         flags & TA_CHECK_STORAGE ? TA_ACCEPT_STORAGE : TA_ACCEPT_F32);
    if (st) return st;
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
        return ta_error(TA_ESHAPE, "%s: %s has shape %s, expected %s = %s", fn, name,
                        ta_shape_str(s1, sizeof s1, t->ndim, t->shape), dims,
                        ta_shape_str(s2, sizeof s2, ndim, shape));
    }
    return output ? ta_tensor_check_unaliased(fn, name, t) : TA_OK;
}

/* One dim of the search below: b's element at index j of the dim lies d = i_a - j
 * strides from a's element at i_a, d in [lo, hi] (lo = -(n_b - 1), hi = n_a - 1). */
typedef struct overlap_dim {
    int64_t stride, lo, hi;
} overlap_dim;

/* Whether rem = sum of d_k * dim[k].stride for some d_k in [lo_k, hi_k] (k < n), the
 * dims in decreasing stride; below[k]: the least and greatest sum of dims k + 1 ..
 * Bounded: past `*budget` visits the answer is "yes" (conservative). */
static bool offset_reachable(const overlap_dim *dim, int64_t (*below)[2], int n,
                             int64_t rem, int64_t *budget)
{
    if (n == 0) return rem == 0;
    if (--*budget < 0) return true;
    const int64_t s = dim[0].stride, lo_sum = below[0][0], hi_sum = below[0][1];
    /* d with rem - d s in [lo_sum, hi_sum] (floor and ceiling of exact quotients) */
    const int64_t a = rem - hi_sum, b = rem - lo_sum;
    int64_t dmin = a / s + (a % s != 0 && a > 0), dmax = b / s - (b % s != 0 && b < 0);
    if (dmin < dim[0].lo) dmin = dim[0].lo;
    if (dmax > dim[0].hi) dmax = dim[0].hi;
    for (int64_t d = dmin; d <= dmax; d++)
        if (offset_reachable(dim + 1, below + 1, n - 1, rem - d * s, budget)) return true;
    return false;
}

/* dim[0 .. n) by decreasing stride, the order offset_reachable searches in (n <=
 * TA_MAX_DIMS: an insertion sort). */
static void sort_by_stride(overlap_dim *dim, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && dim[j].stride > dim[j - 1].stride; j--) {
            const overlap_dim t = dim[j];
            dim[j] = dim[j - 1], dim[j - 1] = t;
        }
}

bool ta_tensors_interleave(const ta_tensor *a, const ta_tensor *b)
{
    /* the same dtype and strides (shapes may differ: dQ and dK of a packed GQA buffer),
     * bases a whole number of elements apart; else no claim */
    const int64_t size = (int64_t)ta_elem_size(a->dtype);
    if (a->ndim != b->ndim || ta_elem_size(b->dtype) != (size_t)size) return false;
    const intptr_t delta = (intptr_t)((uintptr_t)b->data - (uintptr_t)a->data);
    if (delta % size != 0) return false;
    overlap_dim dim[TA_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (a->stride[d] != b->stride[d]) return false;
        if (a->shape[d] == 0 || b->shape[d] == 0) return true; /* empty: no element */
        const int64_t s = a->stride[d];
        if (s == 0 || (a->shape[d] == 1 && b->shape[d] == 1)) continue; /* adds nothing */
        /* a negative stride: the same sums with the index differences negated */
        dim[n++] = s > 0 ? (overlap_dim){s, -(b->shape[d] - 1), a->shape[d] - 1}
                         : (overlap_dim){-s, -(a->shape[d] - 1), b->shape[d] - 1};
    }
    /* a's element at index i_a and b's at i_b are the same when
     * sum_k (i_a,k - i_b,k) stride_k = delta / size: search the differences, largest
     * stride first (strides and extents of checked tensors: their spans fit in int64, so
     * these sums do, with a margin kept below) */
    sort_by_stride(dim, n);
    int64_t below[TA_MAX_DIMS][2];
    int64_t lo_sum = 0, hi_sum = 0;
    for (int k = n - 1; k >= 0; k--) {
        below[k][0] = lo_sum, below[k][1] = hi_sum;
        if (dim[k].stride > ((int64_t)1 << 60) / (dim[k].hi - dim[k].lo + 1)) return false;
        lo_sum += dim[k].lo * dim[k].stride;
        hi_sum += dim[k].hi * dim[k].stride;
        if (lo_sum < -((int64_t)1 << 61) || hi_sum > ((int64_t)1 << 61)) return false;
    }
    int64_t budget = 1 << 12;
    return !offset_reachable(dim, below, n, (int64_t)(delta / size), &budget);
}

/* Whether two distinct indices of t (no stride 0 over an extent > 1, no empty dim, a
 * checked layout) address one element: the index differences d_k in [-(n_k - 1), n_k -
 * 1], not all 0, with sum d_k |stride_k| = 0. Each stride above the span of the smaller
 * ones (any C-ordered, permuted or sliced view) answers no at once; two dims that meet
 * by themselves answer yes at once; else a bounded search per dim p (dims by decreasing
 * stride): the first nonzero difference d_p > 0, the rest by offset_reachable. A search
 * past its budget decides nothing (a layout no search settles is taken as given). */
static bool self_overlaps(const ta_tensor *t)
{
    overlap_dim dim[TA_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1) {
            const int64_t s = t->stride[d] < 0 ? -t->stride[d] : t->stride[d];
            dim[n++] = (overlap_dim){s, -(t->shape[d] - 1), t->shape[d] - 1};
        }
    sort_by_stride(dim, n); /* largest stride first */
    int64_t span = 0; /* of the dims with smaller strides */
    bool nested = true;
    for (int k = n - 1; k >= 0; k--) {
        /* a checked layout's span fits int64; kept below 2^61 for the search's sums */
        if (dim[k].stride > ((int64_t)1 << 60) / dim[k].hi) return false;
        nested = nested && dim[k].stride > span;
        span += dim[k].stride * dim[k].hi;
        if (span > ((int64_t)1 << 61)) return false;
    }
    if (nested) return false;
    /* two dims alone: d_i s_i = d_j s_j has its least solution at d_i = s_j / g, d_j =
     * s_i / g (g their gcd): equal strides, multiples, any pair within reach, at once */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            int64_t a = dim[i].stride, b = dim[j].stride;
            while (b) {
                const int64_t r = a % b;
                a = b, b = r;
            }
            if (dim[j].stride / a <= dim[i].hi && dim[i].stride / a <= dim[j].hi) return true;
        }
    int64_t below[TA_MAX_DIMS][2];
    int64_t lo_sum = 0, hi_sum = 0;
    for (int k = n - 1; k >= 0; k--) {
        below[k][0] = lo_sum, below[k][1] = hi_sum;
        lo_sum += dim[k].lo * dim[k].stride;
        hi_sum += dim[k].hi * dim[k].stride;
    }
    /* each p (the first nonzero difference) its own question with its own budget: one
     * that runs out leaves that p undecided (no claim), not the others */
    for (int p = n - 1; p >= 0; p--) {
        int64_t budget = 1 << 12;
        for (int64_t d = 1; d <= dim[p].hi; d++) {
            /* the rest must cancel d strides of dim p: beyond their reach, no larger d is
             * in it either */
            if (d * dim[p].stride > below[p][1]) break;
            const bool hit = offset_reachable(dim + p + 1, below + p + 1, n - p - 1,
                                              -d * dim[p].stride, &budget);
            if (budget < 0) break;
            if (hit) return true;
        }
    }
    return false;
}

ta_status ta_tensor_check_unaliased(const char *fn, const char *name, const ta_tensor *t)
{
    /* an output is written element by element: distinct indices need distinct addresses
     * (an empty one has none: NumPy gives [2, 2, 0, 4] the strides [0, 0, 4, 1]) */
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] == 0) return TA_OK; /* before any product of extents */
    for (int d = 0; d < t->ndim; d++)
        if (t->stride[d] == 0 && t->shape[d] > 1)
            return ta_error(TA_EINVAL, "%s: %s has stride 0 in dim %d, so its elements alias",
                            fn, name, d);
    if (self_overlaps(t))
        return ta_error(TA_EINVAL,
                        "%s: %s's strides put two of its elements at one address, so they "
                        "alias", fn, name);
    return TA_OK;
}

/* Strides for viewing t as shape ns without a copy (PyTorch's view rule): old dims
 * are taken in chunks whose elements are evenly spaced; each chunk must map onto a run
 * of new dims with the same element count. Returns false when no view exists. */
static bool view_strides(int64_t *nst, const ta_tensor *t, int ndim, const int64_t *ns)
{
    int od = t->ndim;
    int64_t one = 1;
    const int64_t *oshape = od ? t->shape : &one, *ostride = od ? t->stride : &one;
    if (!od) od = 1;
    int vd = ndim - 1;
    int64_t base = ostride[od - 1], tnumel = 1, vnumel = 1;
    for (int d = od - 1; d >= 0; d--) {
        tnumel *= oshape[d];
        if (d == 0 || (oshape[d - 1] != 1 && ostride[d - 1] != tnumel * base)) {
            while (vd >= 0 && (vnumel < tnumel || ns[vd] == 1)) {
                nst[vd] = vnumel * base;
                vnumel *= ns[vd];
                vd--;
            }
            if (vnumel != tnumel) return false;
            if (d > 0) {
                base = ostride[d - 1];
                tnumel = 1;
                vnumel = 1;
            }
        }
    }
    return vd == -1;
}

/* Reshape as a view (see view_strides). */
ta_status ta_tensor_reshape(ta_tensor *view, const ta_tensor *t, int ndim, const int64_t *shape)
{
    const char *fn = "ta_tensor_reshape";
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    if (st) return st;
    if (!view) return ta_error(TA_EINVAL, "%s: view is NULL", fn);
    if (ndim < 0 || ndim > TA_MAX_DIMS)
        return ta_error(TA_EINVAL, "%s: ndim must be in [0, %d], got %d", fn, TA_MAX_DIMS, ndim);
    if (ndim > 0 && !shape) return ta_error(TA_EINVAL, "%s: shape is NULL", fn);
    int64_t numel = ta_tensor_numel(t), known = 1;
    int infer = -1;
    int64_t ns[TA_MAX_DIMS];
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    for (int i = 0; i < ndim; i++) {
        ns[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) return ta_error(TA_EINVAL, "%s: only one dimension can be -1", fn);
            infer = i;
        } else if (shape[i] < 0) {
            return ta_error(TA_EINVAL, "%s: shape[%d] is negative (%lld)", fn, i, (long long)shape[i]);
        } else {
            if (shape[i] != 0 && known > INT64_MAX / shape[i])
                return ta_error(TA_EINVAL, "%s: shape overflows", fn);
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return ta_error(TA_ESHAPE, "%s: cannot infer -1 reshaping %s (%lld elements) to %s", fn,
                            ta_shape_str(s1, sizeof s1, t->ndim, t->shape), (long long)numel,
                            ta_shape_str(s2, sizeof s2, ndim, shape));
        ns[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return ta_error(TA_ESHAPE, "%s: cannot reshape %s (%lld elements) to %s (%lld elements)", fn,
                        ta_shape_str(s1, sizeof s1, t->ndim, t->shape), (long long)numel,
                        ta_shape_str(s2, sizeof s2, ndim, ns), (long long)known);
    int64_t nst[TA_MAX_DIMS];
    if (numel == 0) {
        ta_contiguous_strides(nst, ndim, ns);
    } else if (!view_strides(nst, t, ndim, ns)) {
        return ta_error(TA_ESHAPE, "%s: the strides of %s do not allow a view of shape %s; "
                        "call ta_tensor_contiguous first", fn,
                        ta_shape_str(s1, sizeof s1, t->ndim, t->shape),
                        ta_shape_str(s2, sizeof s2, ndim, ns));
    }
    ta_tensor v = *t;
    v.owned = NULL;
    v.ndim = ndim;
    for (int i = 0; i < ndim; i++) { v.shape[i] = ns[i]; v.stride[i] = nst[i]; }
    *view = v;
    return TA_OK;
}

ta_status ta_tensor_permute(ta_tensor *view, const ta_tensor *t, const int *perm)
{
    const char *fn = "ta_tensor_permute";
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    if (st) return st;
    if (!view) return ta_error(TA_EINVAL, "%s: view is NULL", fn);
    if (!perm && t->ndim > 0) return ta_error(TA_EINVAL, "%s: perm is NULL", fn);
    int seen[TA_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= t->ndim)
            return ta_error(TA_EINVAL, "%s: perm[%d] = %d is out of range for %d dims", fn, i,
                            perm[i], t->ndim);
        if (seen[perm[i]]++)
            return ta_error(TA_EINVAL, "%s: perm repeats dim %d", fn, perm[i]);
    }
    ta_tensor v = *t;
    v.owned = NULL;
    for (int i = 0; i < t->ndim; i++) {
        v.shape[i] = t->shape[perm[i]];
        v.stride[i] = t->stride[perm[i]];
    }
    *view = v;
    return TA_OK;
}

ta_status ta_tensor_transpose(ta_tensor *view, const ta_tensor *t, int dim0, int dim1)
{
    const char *fn = "ta_tensor_transpose";
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    if (st) return st;
    if (dim0 < 0) dim0 += t->ndim;
    if (dim1 < 0) dim1 += t->ndim;
    if (dim0 < 0 || dim0 >= t->ndim || dim1 < 0 || dim1 >= t->ndim)
        return ta_error(TA_EINVAL, "%s: dims (%d, %d) out of range for %d dims", fn, dim0, dim1,
                        t->ndim);
    int perm[TA_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[dim0] = dim1;
    perm[dim1] = dim0;
    return ta_tensor_permute(view, t, perm);
}

ta_status ta_tensor_slice(ta_tensor *view, const ta_tensor *t, int dim, int64_t start,
                          int64_t stop, int64_t step)
{
    const char *fn = "ta_tensor_slice";
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    if (st) return st;
    if (!view) return ta_error(TA_EINVAL, "%s: view is NULL", fn);
    if (dim < 0) dim += t->ndim;
    if (dim < 0 || dim >= t->ndim)
        return ta_error(TA_EINVAL, "%s: dim %d out of range for %d dims", fn, dim, t->ndim);
    if (step < 1) return ta_error(TA_EINVAL, "%s: step must be >= 1, got %lld", fn, (long long)step);
    int64_t n = t->shape[dim];
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    start = TA_MIN(TA_MAX(start, 0), n);
    stop = TA_MIN(TA_MAX(stop, 0), n);
    /* (stop - start - 1) / step + 1, not (stop - start + step - 1) / step: a huge step
     * must not overflow. With one element or none the stride is never used, so it
     * keeps t's instead of a product that could overflow. */
    int64_t len = stop > start ? (stop - start - 1) / step + 1 : 0;
    ta_tensor v = *t;
    v.owned = NULL;
    if (len > 0) v.data = (char *)t->data + start * t->stride[dim] * (int64_t)ta_dtype_size(t->dtype);
    v.shape[dim] = len;
    if (len > 1) v.stride[dim] = t->stride[dim] * step; /* |stride * step| < the span of t */
    *view = v;
    return TA_OK;
}

