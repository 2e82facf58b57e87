/* einsum internals: what the last call on this thread decided (for tests and the
 * benchmark, which must be able to prove that a contraction ran without copies). */
#ifndef TA_EINSUM_H
#define TA_EINSUM_H

#include "tensorattn.h"

/* How a call was executed. */
typedef enum ta_einsum_path {
    TA_EINSUM_PATH_NONE = 0,        /* no call yet, or the last call failed */
    TA_EINSUM_PATH_EMPTY = 1,       /* the result has no elements, or is all zeros
                                       because a summed index has extent 0 */
    TA_EINSUM_PATH_GEMM = 2,        /* one ta_gemm_strided call */
    TA_EINSUM_PATH_ELEMENTWISE = 3, /* two operands, nothing contracted: a strided
                                       product loop (outer / Hadamard / scaling) */
    TA_EINSUM_PATH_GENERIC = 4      /* one operand: permutation, diagonal, sums */
} ta_einsum_path;

typedef struct ta_einsum_plan_info {
    ta_einsum_path path;
    int packed;      /* operands copied into a packed layout because their contracted
                        indices could not be merged into one stride (0, 1 or 2) */
    int reduced;     /* operands first reduced over indices summed in them alone */
    int gemm_calls;  /* ta_gemm_strided calls made (0 or 1) */
    int transposed;  /* the GEMM computed C^T = B^T A^T (m, n below are its own) */
    int batch_ndim;  /* GEMM batch dims after merging */
    int64_t batch, m, n, k; /* GEMM problem: batch count and sizes */
} ta_einsum_plan_info;

/* The plan of the last successful ta_einsum / ta_einsum1 call on this thread. */
void ta_einsum_last_plan(ta_einsum_plan_info *info);
/* Operands the last call on this thread copied (packed or reduced into a temporary);
 * 0 means it read its inputs in place through their strides. */
int ta_einsum_last_plan_packed(void);

#endif
