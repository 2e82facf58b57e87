/* Internal tensor helpers. */
#ifndef TA_TENSOR_INTERNAL_H
#define TA_TENSOR_INTERNAL_H

#include "core/dtype.h"
#include "tensorattn.h"

#include <stdbool.h>
#include <stdint.h>

/* Validates a float32 tensor argument: not NULL, rank in range, shape valid, strides
 * within the index range, data set when non-empty. The message names fn and the
 * argument name; another dtype is TA_EUNSUPPORTED ("ta_einsum: a has dtype f16;
 * ta_einsum takes f32"), a dtype outside the enum TA_EINVAL. */
ta_status ta_tensor_check(const char *fn, const char *name, const ta_tensor *t);
/* ta_tensor_check but for the data pointer (a tensor described before its memory exists). */
ta_status ta_tensor_check_layout(const char *fn, const char *name, const ta_tensor *t);
/* ta_tensor_check accepting the dtypes of mask accept (TA_ACCEPT_F32, TA_ACCEPT_STORAGE:
 * f32, f16 or bf16, TA_ACCEPT_ANY; core/dtype.h): "ta_sdpa: Q has dtype f64; ta_sdpa
 * takes f32, f16 or bf16". Index ranges are checked in elements of t's dtype. */
ta_status ta_tensor_check_dtypes(const char *fn, const char *name, const ta_tensor *t,
                                 unsigned accept);
/* ta_tensor_check for the storage types ta_sdpa takes (f32, f16, bf16). */
static inline ta_status ta_tensor_check_storage(const char *fn, const char *name,
                                                const ta_tensor *t)
{
    return ta_tensor_check_dtypes(fn, name, t, TA_ACCEPT_STORAGE);
}
/* Flags of ta_tensor_check_shape. */
enum { TA_CHECK_OUTPUT = 1, TA_CHECK_LAYOUT_ONLY = 2, TA_CHECK_STORAGE = 4 };
/* ta_tensor_check, and t has exactly shape[0..ndim-1] ("X has shape [..], expected
 * <dims> = [..]", dims naming the extents, e.g. "[B, H, Lq, D]"). TA_CHECK_OUTPUT: an
 * output must also not repeat an element through a stride 0 over an extent > 1;
 * TA_CHECK_LAYOUT_ONLY: the data pointer is not checked (ta_tensor_check_layout);
 * TA_CHECK_STORAGE: f16 and bf16 are accepted besides f32 (ta_tensor_check_storage). */
ta_status ta_tensor_check_shape(const char *fn, const char *name, const ta_tensor *t, int ndim,
                                const int64_t *shape, const char *dims, int flags);
/* TA_EINVAL when t, an output, has two of its elements at one address (an empty t has
 * none): a stride 0 over an extent > 1, or strides that overlap otherwise (an exact
 * search of the index differences, bounded: a layout past its budget is taken as
 * given); ta_tensor_check_shape's TA_CHECK_OUTPUT. */
ta_status ta_tensor_check_unaliased(const char *fn, const char *name, const ta_tensor *t);
/* A C-contiguous float32 view of data with shape (no checks; data may be NULL while a
 * scratch layout is being measured: only shapes and strides are read then). */
ta_tensor ta_tensor_view(void *data, int ndim, const int64_t *shape);
/* The same of another dtype (a float16 scratch row block, say). */
ta_tensor ta_tensor_view_dtype(void *data, ta_dtype dtype, int ndim, const int64_t *shape);
/* Address of element idx[0..ndim-1] of t in any dtype (no bounds check). */
static inline void *ta_tensor_ptr(const ta_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++) off += idx[i] * t->stride[i];
    return (char *)t->data + off * (int64_t)ta_elem_size(t->dtype);
}
/* C-contiguous element strides for shape. */
void ta_contiguous_strides(int64_t *stride, int ndim, const int64_t *shape);
/* Advances a row-major multi-index over shape (wraps to all zeros at the end). */
void ta_index_next(int ndim, const int64_t *shape, int64_t *idx);
/* ta_tensor_copy without its checks (same shapes, dtypes of ta_convert): row by row, in
 * parallel over rows when there are many elements. */
void ta_tensor_copy_rows(ta_tensor *dst, const ta_tensor *src);

/* The bytes [*lo, *hi) between t's first and last elements, in its dtype's size; false
 * when t has no element (before any product of an extent a checked layout need not
 * bound). Integers: comparing unrelated pointers is undefined. */
static inline bool ta_tensor_byte_span(const ta_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] == 0) return false;
    int64_t neg = 0, pos = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t span = (t->shape[d] - 1) * t->stride[d];
        if (span < 0) neg += span; else pos += span;
    }
    const uintptr_t base = (uintptr_t)t->data, size = ta_elem_size(t->dtype);
    *lo = base - (uintptr_t)(-neg) * size;
    *hi = base + (uintptr_t)(pos + 1) * size;
    return true;
}

/* Whether a and b may share memory: false when the byte ranges of their elements (each
 * in its own dtype's size) do not intersect, or when they interleave without a common
 * element (ta_tensors_interleave: the slices of one packed buffer, e.g. dQ, dK and dV of
 * a [B, L, 3, H, D] gradient); true otherwise (conservative where the layouts differ). */
bool ta_tensors_interleave(const ta_tensor *a, const ta_tensor *b);
static inline bool ta_tensors_overlap(const ta_tensor *a, const ta_tensor *b)
{
    uintptr_t lo[2], hi[2];
    if (!ta_tensor_byte_span(a, &lo[0], &hi[0]) || !ta_tensor_byte_span(b, &lo[1], &hi[1]))
        return false;
    return lo[0] < hi[1] && lo[1] < hi[0] && !ta_tensors_interleave(a, b);
}

#endif
