/* einsum's internal interface: the entries for operations that nest einsum in their own
 * scratch, and what the last call on this thread decided (for tests and the benchmark,
 * which must be able to prove that a contraction ran without copies). */
#ifndef TA_EINSUM_H
#define TA_EINSUM_H

#include "core/workspace.h"
#include "tensorattn.h"

#include <stddef.h>

/* einsum inside another operation's scratch plan (the SDPA reference path runs its
 * products on views it lays out in its own arena). The caller sizes einsum's scratch
 * while measuring, takes a sub-arena of that size, and runs in it once carved:
 *
 *     size_t eb;                                             // both passes of the layout
 *     st = ta_einsum_scratch_bytes(&eb, fn, &S, "bhid,bhjd->bhij", Q, K);
 *     ta_arena sub = ta_arena_sub(arena, eb);
 *     ...                                                    // once carved:
 *     st = ta_einsum_run(fn, &S, "bhid,bhjd->bhij", Q, K, &sub);
 *
 * ta_einsum_scratch_bytes: the bytes of scratch ta_einsum_run needs for out = spec(a, b)
 * (b NULL: one operand), for the library's current thread count. Reads only shapes,
 * strides and the spec: data pointers may be NULL (views of a scratch not carved yet).
 * Validates as ta_einsum_ext does except data and overlaps (errors name fn); TA_ENOMEM
 * when the size overflows. 0 when the call needs no scratch.
 * ta_einsum_run: ta_einsum_ext on scratch carved from *scratch (a carving arena of at
 * least the bytes above, with the same shapes, strides and thread count; NULL when they
 * are 0). Validates everything but overlaps, which the caller checks on its own tensors
 * (errors name fn; out is untouched on every error) and
 * never allocates; TA_EINTERNAL if the scratch is missing or too small (a bug in the
 * caller's layout). Records its plan for ta_einsum_last_plan. */
ta_status ta_einsum_scratch_bytes(size_t *bytes, const char *fn, const ta_tensor *out,
                                  const char *spec, const ta_tensor *a, const ta_tensor *b);
ta_status ta_einsum_run(const char *fn, ta_tensor *out, const char *spec, const ta_tensor *a,
                        const ta_tensor *b, ta_arena *scratch);

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

/* The plan of the last successful einsum call on this thread (any entry: ta_einsum,
 * ta_einsum1, ta_einsum_ext, the _alloc variants, ta_einsum_run). */
void ta_einsum_last_plan(ta_einsum_plan_info *info);
/* Operands the last call on this thread copied (packed or reduced into a temporary);
 * 0 means it read its inputs in place through their strides. */
int ta_einsum_last_plan_packed(void);

#endif
