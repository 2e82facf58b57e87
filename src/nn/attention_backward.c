/* Backward of the attention layers (both layouts): parameter gradients accumulated into
 * the layer's .grad buffers and input gradients accumulated into the caller's tensors.
 *
 * The backward recomputes the forward (ta_attention_run keeps the projected Q, K, V, the
 * attention output and its LSE in the layer's forward scratch) rather than relying on a
 * previous ta_attention_forward call: the API then has no hidden state to get out of
 * step, at the price of one extra forward (about a third of a training step's work).
 *
 * With Y = out, A = the attention output [N*Lq, E] (heads merged), P = a projection:
 *   output projection  Y = A W_o^T + b_o:   dW_o += dY^T A, db_o += colsum dY, dA = dY W_o
 *   attention core     ta_sdpa_backward(dA) -> dQp, dKp, dVp (per head, FlashAttention-2)
 *   seed uniform rows  (every key masked: the seed's -1e20 fill makes the row's softmax
 *                      uniform and masked_fill passes no gradient to the scores) dVp[k] +=
 *                      dA_row / Lk for every key k; nothing to dQp or dKp
 *   input projections  P = X W^T (+ b):     dW += dP^T X, db += colsum dP, dX += dP W
 *     seed: one D x D W shared by the heads, rows (n, l, h); torch: E x E slices of
 *     in_proj_weight / in_proj_bias, rows (n, l).
 * Every product is a ta_gemm_strided call on contiguous scratch (deterministic for any
 * thread count), every column sum a fixed-order loop in double, so the gradients are
 * bitwise identical for any thread count (the small elementwise loops here go parallel
 * only above 32k elements: below that the fork costs more than the work). Everything is computed into scratch first and
 * only then accumulated, so a failure before that point changes nothing, and the
 * inputs and d_out may alias the input gradients. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "nn/attention_internal.h"
#include "ops/gemm.h"

#include <math.h>
#include <string.h>

/* Offsets (in floats) of the backward scratch. */
typedef struct bws_plan {
    size_t dy, dob, dq, dk, dv, xq, xk, xv, gq, gk, gv, total;
} bws_plan;

static bool plan_add(size_t *off, size_t *total, int64_t count)
{
    /* 16 floats = 64 bytes: every chunk stays 64-byte aligned */
    size_t n = ((size_t)count + 15) & ~(size_t)15;
    *off = *total;
    if (*total > SIZE_MAX / sizeof(float) - n) return false;
    *total += n;
    return true;
}

static ta_status ensure_bws(ta_attention *l, size_t bytes)
{
    if (bytes <= l->bws_bytes) return TA_OK;
    unsigned char *p = ta_alloc(bytes);
    if (!p)
        return ta_error(TA_ENOMEM, "ta_attention_backward: cannot allocate %zu bytes of scratch", bytes);
    ta_free(l->bws);
    l->bws = p;
    l->bws_bytes = bytes;
    return TA_OK;
}

/* dst [N, L, E] contiguous = x (any strides). */
static void copy_rows(float *dst, const ta_tensor *x)
{
    const int64_t N = x->shape[0], L = x->shape[1], E = x->shape[2];
    const float *src = x->data;
#pragma omp parallel for num_threads(ta_threads()) schedule(static) if (N * L * E > (1 << 15))
    for (int64_t r = 0; r < N * L; r++) {
        const float *s = src + (r / L) * x->stride[0] + (r % L) * x->stride[1];
        for (int64_t e = 0; e < E; e++) dst[r * E + e] = s[e * x->stride[2]];
    }
}

/* dx [N, L, E] (any strides) += src [N, L, E] contiguous. */
static void add_rows(ta_tensor *dx, const float *src)
{
    const int64_t N = dx->shape[0], L = dx->shape[1], E = dx->shape[2];
    float *dst = dx->data;
#pragma omp parallel for num_threads(ta_threads()) schedule(static) if (N * L * E > (1 << 15))
    for (int64_t r = 0; r < N * L; r++) {
        float *d = dst + (r / L) * dx->stride[0] + (r % L) * dx->stride[1];
        for (int64_t e = 0; e < E; e++) d[e * dx->stride[2]] += src[r * E + e];
    }
}

/* db[j] += sum_r a[r * F + j] for a [R, F] contiguous: each column summed in double in
 * row order by one thread (blocks of columns per thread), then rounded once. */
static void colsum_add(float *db, const float *a, int64_t R, int64_t F)
{
    enum { CB = 64 };
#pragma omp parallel for num_threads(ta_threads()) schedule(static) if (R * F > (1 << 15))
    for (int64_t j0 = 0; j0 < F; j0 += CB) {
        double acc[CB];
        const int64_t nj = TA_MIN((int64_t)CB, F - j0);
        for (int64_t j = 0; j < nj; j++) acc[j] = 0.0;
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < nj; j++) acc[j] += a[r * F + j0 + j];
        for (int64_t j = 0; j < nj; j++) db[j0 + j] += (float)acc[j];
    }
}

/* Seed layout: the uniform rows (LSE -inf) of each (n, h) send dA_row / Lk to every key's
 * dVp; sdpa's backward gave them nothing. Parallel over (n, h): each writes its own slice. */
static void seed_uniform_rows_backward(float *dVp, const float *dA, const float *lse, int64_t N,
                                       int64_t H, int64_t Lq, int64_t Lk, int64_t D)
{
    const int64_t E = H * D;
#pragma omp parallel for num_threads(ta_threads()) schedule(static) if (N * H * Lq * D > (1 << 15))
    for (int64_t nh = 0; nh < N * H; nh++) {
        const int64_t n = nh / H, h = nh % H;
        const float *l = lse + nh * Lq;
        double sum[256];
        for (int64_t d0 = 0; d0 < D; d0 += 256) {
            const int64_t nd = TA_MIN((int64_t)256, D - d0);
            int any = 0;
            for (int64_t d = 0; d < nd; d++) sum[d] = 0.0;
            for (int64_t q = 0; q < Lq; q++) {
                if (!(isinf(l[q]) && l[q] < 0)) continue;
                any = 1;
                const float *a = dA + (n * Lq + q) * E + h * D + d0;
                for (int64_t d = 0; d < nd; d++) sum[d] += a[d];
            }
            if (!any) break;
            /* the forward's weight is the float 1/Lk; its gradient path is w * sum dA */
            const double wk = (double)(1.0f / (float)Lk);
            for (int64_t k = 0; k < Lk; k++) {
                float *v = dVp + (n * Lk + k) * E + h * D + d0;
                for (int64_t d = 0; d < nd; d++) v[d] += (float)(wk * sum[d]);
            }
        }
    }
}

static ta_status check_grad(const char *fn, const char *name, const ta_tensor *g,
                            const ta_tensor *x, const char *xname)
{
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    ta_status st = ta_tensor_check(fn, name, g);
    if (st) return st;
    int ok = g->ndim == x->ndim;
    for (int d = 0; ok && d < x->ndim; d++) ok = g->shape[d] == x->shape[d];
    if (!ok)
        return ta_error(TA_ESHAPE, "%s: %s has shape %s but %s has %s (they must match)", fn, name,
                        ta_shape_str(s1, sizeof s1, g->ndim, g->shape), xname,
                        ta_shape_str(s2, sizeof s2, x->ndim, x->shape));
    for (int d = 0; d < g->ndim; d++)
        if (g->shape[d] > 1 && g->stride[d] == 0)
            return ta_error(TA_EINVAL, "%s: %s has stride 0 in dimension %d: its elements overlap",
                            fn, name, d);
    return TA_OK;
}

/* gw [F, F] += dP^T X over R rows (both [R, F] contiguous). */
static ta_status weight_grad(float *gw, const float *dP, const float *X, int64_t R, int64_t F)
{
    return ta_gemm_run("ta_attention_backward", NULL, gw, F, 1, dP, 1, F, X, F, 1, F, F, R, 1.0f, 1.0f, NULL);
}

/* dX [R, F] = dP [R, F] W [F, F] (W as stored: [out, in] of the Linear). */
static ta_status input_grad(float *dX, const float *dP, const float *W, int64_t R, int64_t F)
{
    return ta_gemm_run("ta_attention_backward", NULL, dX, F, 1, dP, F, 1, W, F, 1, R, F, F, 1.0f, 0.0f, NULL);
}

ta_status ta_attention_backward(ta_tensor *d_queries, ta_tensor *d_keys, ta_tensor *d_values,
                                ta_attention *layer, const ta_tensor *d_out,
                                const ta_tensor *queries, const ta_tensor *keys,
                                const ta_tensor *values, const ta_attention_opts *opts)
{
    /* d_queries, queries, d_out [N, Lq, E]; d_keys, d_values, keys, values [N, Lk, E] */
    const char *fn = "ta_attention_backward";
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    const int64_t E = layer->E, H = layer->H, D = layer->D;
    const ta_layout layout = layer->layout;
    ta_status st;
    if ((st = ta_attention_check_input(fn, "queries", queries, E))) return st;
    if ((st = ta_attention_check_input(fn, "keys", keys, E))) return st;
    if ((st = ta_attention_check_input(fn, "values", values, E))) return st;
    const int64_t yshape[3] = {queries->shape[0], queries->shape[1], E};
    if ((st = ta_tensor_check_shape(fn, "d_out", d_out, 3, yshape, "[N, Lq, E]", false)))
        return st;
    if (d_queries && (st = check_grad(fn, "d_queries", d_queries, queries, "queries"))) return st;
    if (d_keys && (st = check_grad(fn, "d_keys", d_keys, keys, "keys"))) return st;
    if (d_values && (st = check_grad(fn, "d_values", d_values, values, "values"))) return st;

    /* 1. the forward again, keeping its intermediates (validates the rest) */
    ta_attention_fwd f;
    if ((st = ta_attention_run(&f, fn, NULL, layer, queries, keys, values, opts))) return st;
    const int64_t N = f.N, Lq = f.Lq, Lk = f.Lk;
    const int64_t nq = N * Lq * E, nk = N * Lk * E;

    /* 2. scratch */
    const ta_tensor *in[3] = {queries, keys, values};
    ta_tensor *din[3] = {d_queries, d_keys, d_values};
    bws_plan w;
    memset(&w, 0, sizeof w);
    const int dy_copy = !ta_tensor_is_contiguous(d_out);
    int x_copy[3];
    for (int i = 0; i < 3; i++) x_copy[i] = !ta_tensor_is_contiguous(in[i]);
    bool ok = plan_add(&w.dy, &w.total, dy_copy ? nq : 0) && plan_add(&w.dob, &w.total, nq) &&
              plan_add(&w.dq, &w.total, nq) && plan_add(&w.dk, &w.total, nk) &&
              plan_add(&w.dv, &w.total, nk) && plan_add(&w.xq, &w.total, x_copy[0] ? nq : 0) &&
              plan_add(&w.xk, &w.total, x_copy[1] ? nk : 0) &&
              plan_add(&w.xv, &w.total, x_copy[2] ? nk : 0) &&
              plan_add(&w.gq, &w.total, d_queries ? nq : 0) &&
              plan_add(&w.gk, &w.total, d_keys ? nk : 0) &&
              plan_add(&w.gv, &w.total, d_values ? nk : 0);
    if (!ok || w.total > SIZE_MAX / sizeof(float))
        return ta_error(TA_ENOMEM, "%s: the scratch for these shapes overflows size_t", fn);
    if ((st = ensure_bws(layer, w.total * sizeof(float)))) return st;
    float *ws = (float *)layer->bws;
    const float *dY = dy_copy ? ws + w.dy : d_out->data;
    float *dA = ws + w.dob, *dP[3] = {ws + w.dq, ws + w.dk, ws + w.dv};
    const float *X[3];
    const size_t xo[3] = {w.xq, w.xk, w.xv}, go[3] = {w.gq, w.gk, w.gv};
    if (dy_copy) copy_rows(ws + w.dy, d_out);
    for (int i = 0; i < 3; i++) {
        X[i] = in[i]->data;
        if (x_copy[i]) {
            copy_rows(ws + xo[i], in[i]);
            X[i] = ws + xo[i];
        }
    }

    ta_attention_param_slot *p = layer->p;
    const int pw = layout == TA_LAYOUT_SEED ? TA_SEED_FC_W : TA_TORCH_OUT_W;
    const int pb = layout == TA_LAYOUT_SEED ? TA_SEED_FC_B : TA_TORCH_OUT_B;
    const int64_t R1 = N * Lq;
    /* 3. dA = dY W_o */
    if ((st = input_grad(dA, dY, p[pw].value.data, R1, E))) return st;

    /* 4. the attention core */
    if (Lk > 0 && R1 > 0) {
        ta_tensor dO4, Q4, K4, V4, O4, dQ4, dK4, dV4, lse3;
        ta_heads_view(&dO4, dA, N, Lq, H, D);
        ta_heads_view(&Q4, f.Qp, N, Lq, H, D);
        ta_heads_view(&K4, f.Kp, N, Lk, H, D);
        ta_heads_view(&V4, f.Vp, N, Lk, H, D);
        ta_heads_view(&O4, f.Ob, N, Lq, H, D);
        ta_heads_view(&dQ4, dP[0], N, Lq, H, D);
        ta_heads_view(&dK4, dP[1], N, Lk, H, D);
        ta_heads_view(&dV4, dP[2], N, Lk, H, D);
        const int64_t ls[3] = {N, H, Lq};
        if ((st = ta_tensor_from_buffer(&lse3, f.lse, 3, ls, NULL))) return st;
        st = ta_sdpa_backward(&dQ4, &dK4, &dV4, &dO4, &Q4, &K4, &V4, &O4, &lse3, &f.so);
        if (st) return st;
        if (layout == TA_LAYOUT_SEED) seed_uniform_rows_backward(dP[2], dA, f.lse, N, H, Lq, Lk, D);
    } else {
        /* nothing attended: the core passes no gradient */
        memset(dP[0], 0, sizeof(float) * (size_t)nq);
        memset(dP[1], 0, sizeof(float) * (size_t)nk);
        memset(dP[2], 0, sizeof(float) * (size_t)nk);
    }

    /* 5. input gradients into scratch (dX = dP W) */
    const int64_t L[3] = {Lq, Lk, Lk};
    for (int i = 0; i < 3; i++) {
        if (!din[i]) continue;
        if (layout == TA_LAYOUT_SEED) {
            static const int which[3] = {TA_SEED_QUERIES, TA_SEED_KEYS, TA_SEED_VALUES};
            st = input_grad(ws + go[i], dP[i], p[which[i]].value.data, N * L[i] * H, D);
        } else {
            st = input_grad(ws + go[i], dP[i], (const float *)p[TA_TORCH_IN_W].value.data + i * E * E,
                            N * L[i], E);
        }
        if (st) return st;
    }

    /* 6. accumulate: parameters, then inputs */
    if ((st = weight_grad(p[pw].grad.data, dY, f.Ob, R1, E))) return st;
    colsum_add(p[pb].grad.data, dY, R1, E);
    for (int i = 0; i < 3; i++) {
        if (layout == TA_LAYOUT_SEED) {
            static const int which[3] = {TA_SEED_QUERIES, TA_SEED_KEYS, TA_SEED_VALUES};
            st = weight_grad(p[which[i]].grad.data, dP[i], X[i], N * L[i] * H, D);
        } else {
            st = weight_grad((float *)p[TA_TORCH_IN_W].grad.data + i * E * E, dP[i], X[i], N * L[i], E);
            colsum_add((float *)p[TA_TORCH_IN_B].grad.data + i * E, dP[i], N * L[i], E);
        }
        if (st) return st;
    }
    for (int i = 0; i < 3; i++)
        if (din[i]) add_rows(din[i], ws + go[i]);
    return TA_OK;
}
