/* Internal tensor helpers. */
#ifndef TA_TENSOR_INTERNAL_H
#define TA_TENSOR_INTERNAL_H

#include "tensorattn.h"

/* Validates a float32 tensor argument: not NULL, rank in range, shape valid, data set
 * when non-empty. The message names fn and the argument name. */
ta_status ta_tensor_check(const char *fn, const char *name, const ta_tensor *t);
/* C-contiguous element strides for shape. */
void ta_contiguous_strides(int64_t *stride, int ndim, const int64_t *shape);
/* Advances a row-major multi-index over shape (wraps to all zeros at the end). */
void ta_index_next(int ndim, const int64_t *shape, int64_t *idx);

#endif
