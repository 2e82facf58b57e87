/* Internal tensor helpers. */
#ifndef TA_TENSOR_INTERNAL_H
#define TA_TENSOR_INTERNAL_H

#include "tensorattn.h"

#include <stdbool.h>

/* Validates a float32 tensor argument: not NULL, rank in range, shape valid, data set
 * when non-empty. The message names fn and the argument name. */
ta_status ta_tensor_check(const char *fn, const char *name, const ta_tensor *t);
/* ta_tensor_check, and t has exactly shape[0..ndim-1] ("X has shape [..], expected
 * <dims> = [..]", dims naming the extents, e.g. "[B, H, Lq, D]"); an output (output
 * set) must also not repeat an element through a stride 0 over an extent > 1. */
ta_status ta_tensor_check_shape(const char *fn, const char *name, const ta_tensor *t, int ndim,
                                const int64_t *shape, const char *dims, bool output);
/* C-contiguous element strides for shape. */
void ta_contiguous_strides(int64_t *stride, int ndim, const int64_t *shape);
/* Advances a row-major multi-index over shape (wraps to all zeros at the end). */
void ta_index_next(int ndim, const int64_t *shape, int64_t *idx);

#endif
