/* ta_tensor element-wise writes: copies (converting between dtypes), contiguous copies,
 * fill, tril/triu. Every dtype (f32, f16, bf16, f64); rounding as in ta_convert. */
#include "core/core.h"
#include "core/tensor_internal.h"

#include <string.h>

/* Visits every element of an n-d index space in row-major order. */
void ta_index_next(int ndim, const int64_t *shape, int64_t *idx)
{
    for (int i = ndim - 1; i >= 0; i--) {
        if (++idx[i] < shape[i]) return;
        idx[i] = 0;
    }
}

/* Moves idx from the start of a row of the last dim to the start of the next one. */
static void next_row(int ndim, const int64_t *shape, int64_t *idx)
{
    if (!ndim) return;
    idx[ndim - 1] = shape[ndim - 1] - 1;
    ta_index_next(ndim, shape, idx);
}

/* The element offset of the first element of row r (rows: the last dim) of t. */
static int64_t row_offset(const ta_tensor *t, int64_t r)
{
    int64_t off = 0;
    for (int d = t->ndim - 2; d >= 0; d--) {
        off += (r % t->shape[d]) * t->stride[d];
        r /= t->shape[d];
    }
    return off;
}

#define TA_COPY_AHEAD 8 /* rows of src requested ahead when they lie apart */

void ta_tensor_copy_rows(ta_tensor *dst, const ta_tensor *src)
{
    const int nd = src->ndim;
    const int64_t n = ta_tensor_numel(src), inner = nd ? src->shape[nd - 1] : 1;
    if (n == 0) return;
    const int64_t rows = n / inner, ds = nd ? dst->stride[nd - 1] : 1, ss = nd ? src->stride[nd - 1] : 1;
    const size_t des = ta_dtype_size(dst->dtype), ses = ta_dtype_size(src->dtype);
    const int nt = n < ((int64_t)1 << 15) ? 1 : ta_threads();
    /* Rows of src that lie apart (a [B, H, L, D] view of [B, L, H, D] data: a head's rows
     * H D apart, out of the hardware prefetchers' reach) are requested TA_COPY_AHEAD rows
     * ahead: the backward's copies of Q, K and dO of such views (sdpa_backward_fused.c)
     * went 3% faster in all (two-port Xeon, B4 H8 L512 D64 causal, 1 thread). */
    const size_t row_bytes = (size_t)inner * ses;
    const bool ahead = nd >= 2 && ss == 1 && src->stride[nd - 2] != inner && row_bytes <= 4096;
    /* a row at a time: contiguous rows convert with the vector kernels */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        if (ahead && r + TA_COPY_AHEAD < rows) {
            const char *a = (const char *)src->data + (size_t)row_offset(src, r + TA_COPY_AHEAD) * ses;
            for (size_t c = 0; c < row_bytes; c += 64) __builtin_prefetch(a + c, 0, 3);
        }
        ta_convert_strided((char *)dst->data + (size_t)row_offset(dst, r) * des, dst->dtype, ds,
                           (const char *)src->data + (size_t)row_offset(src, r) * ses,
                           src->dtype, ss, inner);
    }
}

ta_status ta_tensor_copy(ta_tensor *dst, const ta_tensor *src)
{
    const char *fn = "ta_tensor_copy";
    ta_status st = ta_tensor_check_dtypes(fn, "dst", dst, TA_ACCEPT_ANY);
    if (!st) st = ta_tensor_check_dtypes(fn, "src", src, TA_ACCEPT_ANY);
    if (st) return st;
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    bool same = dst->ndim == src->ndim;
    for (int i = 0; same && i < dst->ndim; i++) same = dst->shape[i] == src->shape[i];
    if (!same)
        return ta_error(TA_ESHAPE, "%s: dst has shape %s but src has %s", fn,
                        ta_shape_str(s1, sizeof s1, dst->ndim, dst->shape),
                        ta_shape_str(s2, sizeof s2, src->ndim, src->shape));
    /* dst is written element by element: no two of its elements at one address, none
     * where src is still to be read (torch's copy_ refuses both; the very same view is
     * a copy onto itself: nothing to do). An empty dst has no element to alias. */
    if ((st = ta_tensor_check_unaliased(fn, "dst", dst))) return st;
    if (ta_tensors_overlap(dst, src)) {
        bool same_view = dst->data == src->data && dst->dtype == src->dtype;
        for (int d = 0; same_view && d < dst->ndim; d++)
            same_view = dst->stride[d] == src->stride[d] || dst->shape[d] == 1;
        if (same_view) return TA_OK;
        return ta_error(TA_EINVAL, "%s: dst overlaps src; they must not share memory", fn);
    }
    ta_tensor_copy_rows(dst, src);
    return TA_OK;
}

ta_status ta_tensor_contiguous(ta_tensor *out, const ta_tensor *t)
{
    const char *fn = "ta_tensor_contiguous";
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    if (st) return st;
    if (!out) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    ta_tensor c;
    st = ta_tensor_empty_dtype(&c, t->dtype, t->ndim, t->shape);
    if (st) return st;
    ta_tensor_copy(&c, t);
    *out = c;
    return TA_OK;
}

/* n elements of size bytes at p, p + stride, ...: each set to the bytes at value. */
static void fill_row(unsigned char *p, int64_t stride, int64_t n, const unsigned char *value,
                     size_t size)
{
    int64_t step = stride * (int64_t)size;
    uint16_t h;
    uint32_t w;
    uint64_t q;
    switch (size) {
    case 2:
        memcpy(&h, value, 2);
        for (int64_t j = 0; j < n; j++) memcpy(p + j * step, &h, 2);
        break;
    case 4:
        memcpy(&w, value, 4);
        for (int64_t j = 0; j < n; j++) memcpy(p + j * step, &w, 4);
        break;
    default:
        memcpy(&q, value, 8);
        for (int64_t j = 0; j < n; j++) memcpy(p + j * step, &q, 8);
        break;
    }
}

ta_status ta_tensor_fill(ta_tensor *t, float value)
{
    ta_status st = ta_tensor_check_dtypes("ta_tensor_fill", "t", t, TA_ACCEPT_ANY);
    if (st) return st;
    unsigned char v[8];
    ta_dtype_store(v, t->dtype, value); /* rounded once, to nearest-even */
    int64_t n = ta_tensor_numel(t);
    int nd = t->ndim;
    int64_t inner = nd ? t->shape[nd - 1] : 1, stride = nd ? t->stride[nd - 1] : 1;
    int64_t idx[TA_MAX_DIMS] = {0};
    for (int64_t done = 0; done < n; done += inner) {
        fill_row(ta_tensor_ptr(t, idx), stride, inner, v, ta_dtype_size(t->dtype));
        next_row(nd, t->shape, idx);
    }
    return TA_OK;
}

static ta_status tri(const char *fn, ta_tensor *t, int64_t diagonal, bool lower)
{
    ta_status st = ta_tensor_check_dtypes(fn, "t", t, TA_ACCEPT_ANY);
    /* an element kept at one index and zeroed at another would end as either */
    if (!st) st = ta_tensor_check_unaliased(fn, "t", t);
    if (st) return st;
    if (t->ndim < 2)
        return ta_error(TA_ESHAPE, "%s: t must have at least 2 dims, got %d", fn, t->ndim);
    int64_t n = ta_tensor_numel(t);
    int64_t idx[TA_MAX_DIMS] = {0};
    int r = t->ndim - 2, c = t->ndim - 1;
    size_t size = ta_dtype_size(t->dtype);
    for (int64_t e = 0; e < n; e++) {
        int64_t i = idx[r], j = idx[c];
        /* j - i, not i + diagonal: any int64 diagonal is legal (INT64_MAX keeps all) */
        bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
        if (!keep) memset(ta_tensor_ptr(t, idx), 0, size); /* +0 in every dtype */
        ta_index_next(t->ndim, t->shape, idx);
    }
    return TA_OK;
}

ta_status ta_tensor_tril(ta_tensor *t, int64_t diagonal)
{
    return tri("ta_tensor_tril", t, diagonal, true);
}

ta_status ta_tensor_triu(ta_tensor *t, int64_t diagonal)
{
    return tri("ta_tensor_triu", t, diagonal, false);
}
