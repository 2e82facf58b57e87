/* nn.Linear over strided rows and its gradients (linear.h). Each operation describes its
 * GEMM once (a lin_gemm), and both its packing need and its run read that description,
 * so the size the caller lays out and the buffer the GEMM uses cannot disagree. */
#include "ops/linear.h"

#include "core/core.h"
#include "core/tensor_internal.h"
#include "ops/gemm.h"

#include <string.h>

/* One ta_gemm_strided problem: C = A B (+ C), element strides as in gemm.h. */
typedef struct lin_gemm {
    int64_t rsc, csc, rsa, csa, rsb, csb, M, N, K;
    ta_gemm_batch batch; /* batch.ndim == 0: one problem */
} lin_gemm;

static const ta_gemm_batch *batch_of(const lin_gemm *g) { return g->batch.ndim ? &g->batch : NULL; }

static void need(ta_linear_pack *pk, const lin_gemm *g)
{
    ta_arena m = ta_arena_measure();
    float *unused;
    ta_gemm_layout(&m, &unused, g->rsc, g->csc, g->M, g->N, g->K, batch_of(g));
    size_t bytes = ta_arena_bytes(&m);
    if (bytes > pk->bytes) pk->bytes = bytes;
}

static ta_status run(const lin_gemm *g, float *C, const float *A, const float *B, float beta,
                     const ta_linear_pack *pk)
{
    return ta_gemm_strided(C, g->rsc, g->csc, A, g->rsa, g->csa, B, g->rsb, g->csb, g->M, g->N,
                           g->K, 1.0f, beta, batch_of(g), pk->buf);
}

void ta_linear_layout(ta_arena *a, ta_linear_pack *pk)
{
    if (pk->bytes == SIZE_MAX) { /* a GEMM whose packing overflowed size_t */
        a->overflow = true;
        pk->buf = NULL;
        return;
    }
    /* bytes is a multiple of 64 (an arena measure), so a whole number of floats */
    pk->buf = TA_ARENA_TAKE(a, float, pk->bytes / sizeof(float));
}

/* ------------------------------------------------------------------ forward */

/* The GEMM of y = x W^T over rows; false when there are no rows. Extent-1 dims are
 * dropped, then dim d fuses into d+1 when it is evenly spaced over it in both x and y. */
static bool forward_gemm(lin_gemm *g, int64_t csy, int64_t csx, const ta_linear_rows *rows,
                         int64_t in_f, int64_t out_f)
{
    int64_t e[TA_MAX_DIMS], sx[TA_MAX_DIMS], sy[TA_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < rows->nd; d++) {
        if (rows->extent[d] == 0) return false;
        if (rows->extent[d] == 1) continue;
        e[n] = rows->extent[d];
        sx[n] = rows->sx[d];
        sy[n] = rows->sy[d];
        n++;
    }
    int m = 0; /* merged count */
    for (int d = 0; d < n; d++) {
        if (m > 0 && sx[m - 1] == e[d] * sx[d] && sy[m - 1] == e[d] * sy[d]) {
            e[m - 1] *= e[d];
            sx[m - 1] = sx[d];
            sy[m - 1] = sy[d];
        } else {
            e[m] = e[d];
            sx[m] = sx[d];
            sy[m] = sy[d];
            m++;
        }
    }
    memset(g, 0, sizeof *g);
    g->M = 1;
    g->rsa = in_f * csx;
    g->rsc = out_f * csy;
    if (m > 0) {
        m--;
        g->M = e[m];
        g->rsa = sx[m];
        g->rsc = sy[m];
    }
    g->csa = csx;
    g->csc = csy;
    /* B[k, j] = W[j, k]: row stride 1, column stride in_f (W^T without a copy) */
    g->rsb = 1;
    g->csb = in_f;
    g->N = out_f;
    g->K = in_f;
    g->batch.ndim = m;
    for (int d = 0; d < m; d++) {
        g->batch.shape[d] = e[d];
        g->batch.stride_a[d] = sx[d];
        g->batch.stride_b[d] = 0; /* one weight matrix for every row */
        g->batch.stride_c[d] = sy[d];
    }
    return true;
}

void ta_linear_need_forward(ta_linear_pack *pk, int64_t csy, int64_t csx,
                            const ta_linear_rows *rows, int64_t in_f, int64_t out_f)
{
    lin_gemm g;
    if (forward_gemm(&g, csy, csx, rows, in_f, out_f)) need(pk, &g);
}

/* y[r, :] = b for every row of the GEMM (before it accumulates x W^T). */
static void fill_bias(float *y, const lin_gemm *g, const float *b)
{
    const ta_gemm_batch *bt = &g->batch;
    int64_t idx[TA_MAX_DIMS] = {0}, nb = 1;
    for (int d = 0; d < bt->ndim; d++) nb *= bt->shape[d];
    for (int64_t p = 0; p < nb; p++) {
        float *yb = y;
        for (int d = 0; d < bt->ndim; d++) yb += idx[d] * bt->stride_c[d];
        for (int64_t r = 0; r < g->M; r++)
            for (int64_t j = 0; j < g->N; j++) yb[r * g->rsc + j * g->csc] = b[j];
        ta_index_next(bt->ndim, bt->shape, idx);
    }
}

ta_status ta_linear_forward(float *y, int64_t csy, const float *x, int64_t csx,
                            const ta_linear_rows *rows, const float *W, const float *b,
                            int64_t in_f, int64_t out_f, const ta_linear_pack *pk)
{
    /* y [rows, out_f] (strided) = x [rows, in_f] (strided) W^T [in_f, out_f] (+ b) */
    lin_gemm g;
    if (!forward_gemm(&g, csy, csx, rows, in_f, out_f)) return TA_OK;
    if (b) fill_bias(y, &g, b); /* bias first, then y = 1 * x W^T + 1 * y */
    return run(&g, y, x, W, b ? 1.0f : 0.0f, pk);
}

/* ---------------------------------------------------------------- gradients */

/* dW [out_f, in_f] += dY^T X: A = dY^T (dY [R, out_f] read by columns), B = X [R, in_f]. */
static lin_gemm weight_grad_gemm(int64_t R, int64_t in_f, int64_t out_f)
{
    return (lin_gemm){.rsc = in_f, .csc = 1, .rsa = 1, .csa = out_f, .rsb = in_f, .csb = 1,
                      .M = out_f, .N = in_f, .K = R};
}

/* dX [R, in_f] = dY [R, out_f] W [out_f, in_f]. */
static lin_gemm input_grad_gemm(int64_t R, int64_t in_f, int64_t out_f)
{
    return (lin_gemm){.rsc = in_f, .csc = 1, .rsa = out_f, .csa = 1, .rsb = in_f, .csb = 1,
                      .M = R, .N = in_f, .K = out_f};
}

void ta_linear_need_weight_grad(ta_linear_pack *pk, int64_t R, int64_t in_f, int64_t out_f)
{
    lin_gemm g = weight_grad_gemm(R, in_f, out_f);
    need(pk, &g);
}

void ta_linear_need_input_grad(ta_linear_pack *pk, int64_t R, int64_t in_f, int64_t out_f)
{
    lin_gemm g = input_grad_gemm(R, in_f, out_f);
    need(pk, &g);
}

ta_status ta_linear_weight_grad(float *dW, const float *dY, const float *X, int64_t R,
                                int64_t in_f, int64_t out_f, const ta_linear_pack *pk)
{
    lin_gemm g = weight_grad_gemm(R, in_f, out_f);
    return run(&g, dW, dY, X, 1.0f, pk);
}

ta_status ta_linear_input_grad(float *dX, const float *dY, const float *W, int64_t R,
                               int64_t in_f, int64_t out_f, const ta_linear_pack *pk)
{
    lin_gemm g = input_grad_gemm(R, in_f, out_f);
    return run(&g, dX, dY, W, 0.0f, pk);
}

void ta_linear_bias_grad(float *db, const float *dY, int64_t R, int64_t out_f)
{
    /* blocks of columns per thread; below 32k elements the fork costs more than the work */
    enum { CB = 64 };
    const int64_t F = out_f;
#pragma omp parallel for num_threads(ta_threads()) schedule(static) if (R * F > (1 << 15))
    for (int64_t j0 = 0; j0 < F; j0 += CB) {
        double acc[CB];
        const int64_t nj = TA_MIN((int64_t)CB, F - j0);
        for (int64_t j = 0; j < nj; j++) acc[j] = 0.0;
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < nj; j++) acc[j] += dY[r * F + j0 + j];
        for (int64_t j = 0; j < nj; j++) db[j0 + j] += (float)acc[j];
    }
}
