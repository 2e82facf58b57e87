/* The linear map of nn.Linear, y = x W^T (+ b), over rows described by strides, and its
 * gradients: the attention layers' projections, forward and backward.
 *
 * W is a contiguous [out_f, in_f] matrix (PyTorch's weight layout), b [out_f]. Every
 * product is one ta_gemm_strided call (deterministic for any thread count) whose packing
 * buffer comes from the caller's arena: a caller adds each linear it will run to one
 * ta_linear_pack (the ta_linear_need_* calls, with the same arguments as the run), lays
 * it out once with ta_linear_layout, and the runs share it (they run one after another).
 * Nothing here allocates. */
#ifndef TA_OPS_LINEAR_H
#define TA_OPS_LINEAR_H

#include "core/workspace.h"
#include "tensorattn.h"

#include <stddef.h>
#include <stdint.h>

/* The rows of x and y: nd row dims (outermost first) with their extents and element
 * strides in x (sx) and y (sy). A row's features have stride csx in x and csy in y. */
typedef struct ta_linear_rows {
    int nd;
    int64_t extent[TA_MAX_DIMS], sx[TA_MAX_DIMS], sy[TA_MAX_DIMS];
} ta_linear_rows;

/* The packing buffer shared by a call's GEMMs: bytes, the most any of them needs (grown
 * by the ta_linear_need_* calls, from {0}); buf, carved by ta_linear_layout. */
typedef struct ta_linear_pack {
    size_t bytes;
    float *buf;
} ta_linear_pack;

/* Grow pk to what ta_linear_forward / _weight_grad / _input_grad need for these
 * arguments, on the library's current thread count. */
void ta_linear_need_forward(ta_linear_pack *pk, int64_t csy, int64_t csx,
                            const ta_linear_rows *rows, int64_t in_f, int64_t out_f);
void ta_linear_need_weight_grad(ta_linear_pack *pk, int64_t R, int64_t in_f, int64_t out_f);
void ta_linear_need_input_grad(ta_linear_pack *pk, int64_t R, int64_t in_f, int64_t out_f);

/* Lays out (or measures) pk's buffer in a; pk->buf is NULL while measuring. */
void ta_linear_layout(ta_arena *a, ta_linear_pack *pk);

/* y[r, j] = sum_k x[r, k] W[j, k] (+ b[j]) for every row r (b may be NULL). The row dims
 * are merged where both x's and y's strides allow; the innermost run becomes the GEMM's
 * M and the rest its batch, so a strided x is read in place. */
ta_status ta_linear_forward(float *y, int64_t csy, const float *x, int64_t csx,
                            const ta_linear_rows *rows, const float *W, const float *b,
                            int64_t in_f, int64_t out_f, const ta_linear_pack *pk);

/* dW [out_f, in_f] += dY^T X over R rows (dY [R, out_f], X [R, in_f], contiguous). */
ta_status ta_linear_weight_grad(float *dW, const float *dY, const float *X, int64_t R,
                                int64_t in_f, int64_t out_f, const ta_linear_pack *pk);

/* dX [R, in_f] = dY [R, out_f] W (contiguous; dX is overwritten). */
ta_status ta_linear_input_grad(float *dX, const float *dY, const float *W, int64_t R,
                               int64_t in_f, int64_t out_f, const ta_linear_pack *pk);

/* db [out_f] += column sums of dY [R, out_f] (contiguous): each column summed in double
 * in row order by one thread, then rounded once, so bitwise the same for any thread
 * count. */
void ta_linear_bias_grad(float *db, const float *dY, int64_t R, int64_t out_f);

#endif
