/* Backward of the attention layers (both layouts): parameter gradients accumulated into
 * the layer's .grad buffers and input gradients accumulated into the caller's tensors.
 *
 * The backward recomputes the forward (the forward's stages, attention.c, keep the
 * projected Q, K, V, the attention output and its LSE in this call's arena) rather than
 * relying on a previous ta_attention_forward call: the API then has no hidden state to
 * get out of step, at the price of one extra forward (about a third of a training
 * step's work).
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
 * Every product is a linear gradient (src/ops/linear.h) on contiguous scratch, so the
 * gradients are bitwise identical for any thread count (the small elementwise loops here
 * go parallel only above 32k elements: below that the fork costs more than the work).
 * One arena holds the rerun forward's scratch and the backward's, acquired before
 * anything is written; everything is computed into it first and only then accumulated,
 * so a failure changes nothing, and the inputs and d_out may alias the input gradients. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "nn/attention_internal.h"
#include "ops/sdpa.h"

#include <math.h>
#include <string.h>

/* One backward call: the forward it reruns and its own scratch. */
typedef struct attn_bwd {
    ta_attention_fwd f;
    const ta_tensor *d_out;
    const ta_tensor *din[3];     /* d_queries, d_keys, d_values (NULL: not wanted) */
    bool dy_copy, x_copy[3];     /* strided d_out / inputs get a contiguous copy */
    /* carved from the call's arena */
    float *dy_buf, *dA, *dP[3], *x_buf[3], *dx[3];
    ta_arena sdpa;               /* ta_sdpa_backward's scratch */
} attn_bwd;

/* ---------------------------------------------------------------- helpers */

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

/* dx [N, L, E] (any strides; its data is written) += src [N, L, E] contiguous. */
static void add_rows(const ta_tensor *dx, const float *src)
{
    const int64_t N = dx->shape[0], L = dx->shape[1], E = dx->shape[2];
    float *dst = dx->data;
#pragma omp parallel for num_threads(ta_threads()) schedule(static) if (N * L * E > (1 << 15))
    for (int64_t r = 0; r < N * L; r++) {
        float *d = dst + (r / L) * dx->stride[0] + (r % L) * dx->stride[1];
        for (int64_t e = 0; e < E; e++) d[e * dx->stride[2]] += src[r * E + e];
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
    return ta_tensor_check_unaliased(fn, name, g); /* an empty one has nothing to alias */
}
/* --------------------------------------------------------------- validate */

static ta_status prepare(attn_bwd *b, const char *fn, const ta_tensor *d_queries,
                         const ta_tensor *d_keys, const ta_tensor *d_values,
                         const ta_attention *layer, const ta_tensor *d_out,
                         const ta_tensor *queries, const ta_tensor *keys,
                         const ta_tensor *values, const ta_attention_opts *opts)
{
    /* d_queries, queries, d_out [N, Lq, E]; d_keys, d_values, keys, values [N, Lk, E] */
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    const int64_t E = layer->E;
    ta_status st;
    if ((st = ta_attention_check_input(fn, "queries", queries, E))) return st;
    if ((st = ta_attention_check_input(fn, "keys", keys, E))) return st;
    if ((st = ta_attention_check_input(fn, "values", values, E))) return st;
    const int64_t yshape[3] = {queries->shape[0], queries->shape[1], E};
    if ((st = ta_tensor_check_shape(fn, "d_out", d_out, 3, yshape, "[N, Lq, E]", 0)))
        return st;
    if (d_queries && (st = check_grad(fn, "d_queries", d_queries, queries, "queries"))) return st;
    if (d_keys && (st = check_grad(fn, "d_keys", d_keys, keys, "keys"))) return st;
    if (d_values && (st = check_grad(fn, "d_values", d_values, values, "values"))) return st;
    /* the rest, as the forward validates it */
    if ((st = ta_attention_fwd_prepare(&b->f, fn, NULL, layer, queries, keys, values, opts, true)))
        return st;
    b->d_out = d_out;
    b->din[0] = d_queries;
    b->din[1] = d_keys;
    b->din[2] = d_values;
    b->dy_copy = !ta_tensor_is_contiguous(d_out);
    const ta_tensor *in[3] = {queries, keys, values};
    for (int i = 0; i < 3; i++) b->x_copy[i] = !ta_tensor_is_contiguous(in[i]);
    return TA_OK;
}

/* ------------------------------------------------------------------- plan */

/* The attention core's ta_sdpa_backward arguments: dO, Q, K, V, O, dQ, dK, dV as head
 * views [N, H, L, D] of the call's buffers (no data while the layout is measured), and
 * the forward's options without outputs (the LSE is an input). */
static void sdpa_backward_args(const attn_bwd *b, ta_tensor v[8], ta_sdpa_opts *so)
{
    const ta_attention_fwd *f = &b->f;
    const int64_t N = f->N, Lq = f->Lq, Lk = f->Lk, H = f->layer->H, D = f->layer->D;
    float *const data[8] = {b->dA, f->Qp, f->Kp, f->Vp, f->Ob, b->dP[0], b->dP[1], b->dP[2]};
    const int64_t len[8] = {Lq, Lq, Lk, Lk, Lq, Lq, Lk, Lk};
    for (int i = 0; i < 8; i++) ta_heads_view(&v[i], data[i], N, len[i], H, D);
    *so = f->so;
    so->weights = NULL;
    so->lse = NULL;
}

/* ta_sdpa_backward's scratch inside the layer's arena (shapes and options only; a call
 * SDPA refuses gets 0 here and its error from attend_backward). */
static size_t sdpa_backward_scratch_bytes(const attn_bwd *b)
{
    if (b->f.Lk == 0 || b->f.N * b->f.Lq == 0) return 0; /* attend_backward skips the core */
    ta_tensor v[8];
    ta_sdpa_opts so;
    sdpa_backward_args(b, v, &so);
    ta_sdpa_problem p;
    if (ta_sdpa_prepare_backward(&p, b->f.fn, &v[5], &v[6], &v[7], &v[0], &v[1],
                                 &v[2], &v[3], &v[4], &b->f.lse_t, &so, TA_SDPA_SHAPES_ONLY))
        return 0;
    return ta_sdpa_scratch_bytes(&p);
}

/* Rows of input i: N*L (torch) or N*L*H (seed) rows of its projection's F features. */
static int64_t proj_rows(const attn_bwd *b, const ta_attention_proj *p, int i)
{
    return b->f.N * (i == 0 ? b->f.Lq : b->f.Lk) * p->heads;
}

static void backward_layout(ta_arena *a, void *call)
{
    attn_bwd *b = call;
    const int64_t E = b->f.layer->E, R1 = b->f.N * b->f.Lq, nq = R1 * E, nk = b->f.N * b->f.Lk * E;
    const int64_t n[3] = {nq, nk, nk};
    ta_attention_fwd_layout(a, &b->f);
    b->dy_buf = TA_ARENA_TAKE(a, float, b->dy_copy ? nq : 0);
    b->dA = TA_ARENA_TAKE(a, float, nq);
    for (int i = 0; i < 3; i++) b->dP[i] = TA_ARENA_TAKE(a, float, n[i]);
    for (int i = 0; i < 3; i++) b->x_buf[i] = TA_ARENA_TAKE(a, float, b->x_copy[i] ? n[i] : 0);
    for (int i = 0; i < 3; i++) b->dx[i] = TA_ARENA_TAKE(a, float, b->din[i] ? n[i] : 0);
    /* the rerun forward's ta_sdpa and ta_sdpa_backward run one after the other: one
     * piece of the larger size serves both (sized once every view above is laid out) */
    size_t sdpa = TA_MAX(ta_attention_fwd_sdpa_bytes(&b->f), sdpa_backward_scratch_bytes(b));
    b->f.sdpa = b->sdpa = ta_arena_sub(a, sdpa);
    /* every GEMM of the call, the rerun forward's included, shares b->f.pack */
    ta_linear_need_input_grad(&b->f.pack, R1, E, E);
    ta_linear_need_weight_grad(&b->f.pack, R1, E, E);
    for (int i = 0; i < 3; i++) {
        ta_attention_proj p = ta_attention_input_proj(b->f.layer, i);
        if (b->din[i]) ta_linear_need_input_grad(&b->f.pack, proj_rows(b, &p, i), p.F, p.F);
        ta_linear_need_weight_grad(&b->f.pack, proj_rows(b, &p, i), p.F, p.F);
    }
    ta_linear_layout(a, &b->f.pack);
}

/* ----------------------------------------------------------------- stages */

/* Contiguous d_out and inputs: the caller's when they are, else copies. */
static void gather(attn_bwd *b, const float **dY, const float *X[3])
{
    const ta_tensor *in[3] = {b->f.queries, b->f.keys, b->f.values};
    *dY = b->d_out->data;
    if (b->dy_copy) {
        copy_rows(b->dy_buf, b->d_out);
        *dY = b->dy_buf;
    }
    for (int i = 0; i < 3; i++) {
        X[i] = in[i]->data;
        if (b->x_copy[i]) {
            copy_rows(b->x_buf[i], in[i]);
            X[i] = b->x_buf[i];
        }
    }
}

/* dQp, dKp, dVp [N, L, H, D] from dA [N, Lq, H, D] through the attention core. */
static ta_status attend_backward(attn_bwd *b)
{
    const ta_attention_fwd *f = &b->f;
    const int64_t N = f->N, Lq = f->Lq, Lk = f->Lk, H = f->layer->H, D = f->layer->D;
    if (Lk == 0 || N * Lq == 0) {
        /* nothing attended: the core passes no gradient */
        const int64_t n[3] = {N * Lq * H * D, N * Lk * H * D, N * Lk * H * D};
        for (int i = 0; i < 3; i++)
            if (n[i]) memset(b->dP[i], 0, sizeof(float) * (size_t)n[i]);
        return TA_OK;
    }
    ta_tensor v[8];
    ta_sdpa_opts so;
    sdpa_backward_args(b, v, &so);
    ta_sdpa_problem p;
    ta_status st = ta_sdpa_prepare_backward(&p, f->fn, &v[5], &v[6], &v[7], &v[0],
                                            &v[1], &v[2], &v[3], &v[4], &f->lse_t, &so,
                                            TA_SDPA_CHECK_ALL);
    ta_arena scratch = b->sdpa;
    if (!st) st = ta_sdpa_run(&p, &scratch);
    if (st) return st;
    if (f->layer->layout == TA_LAYOUT_SEED)
        seed_uniform_rows_backward(b->dP[2], b->dA, f->lse, N, H, Lq, Lk, D);
    return TA_OK;
}

/* Parameter gradients (output projection, then inputs), then the input gradients. */
static ta_status accumulate(attn_bwd *b, const float *dY, const float *const X[3])
{
    const ta_attention_fwd *f = &b->f;
    const ta_linear_pack *pk = &f->pack;
    ta_attention_proj o = ta_attention_output_proj(f->layer);
    const int64_t R1 = f->N * f->Lq;
    ta_status st = ta_linear_weight_grad(o.dW, dY, f->Ob, R1, o.F, o.F, pk);
    if (st) return st;
    ta_linear_bias_grad(o.db, dY, R1, o.F);
    for (int i = 0; i < 3; i++) {
        ta_attention_proj p = ta_attention_input_proj(f->layer, i);
        const int64_t R = proj_rows(b, &p, i);
        if ((st = ta_linear_weight_grad(p.dW, b->dP[i], X[i], R, p.F, p.F, pk))) return st;
        if (p.db) ta_linear_bias_grad(p.db, b->dP[i], R, p.F);
    }
    for (int i = 0; i < 3; i++)
        if (b->din[i]) add_rows(b->din[i], b->dx[i]);
    return TA_OK;
}

static ta_status run(attn_bwd *b)
{
    const ta_attention_fwd *f = &b->f;
    const ta_linear_pack *pk = &f->pack;
    ta_status st = ta_attention_fwd_run(&b->f); /* the forward again, into the arena */
    if (st) return st;
    const float *dY, *X[3];
    gather(b, &dY, X);
    /* dA = dY W_o */
    ta_attention_proj o = ta_attention_output_proj(f->layer);
    if ((st = ta_linear_input_grad(b->dA, dY, o.W, f->N * f->Lq, o.F, o.F, pk))) return st;
    if ((st = attend_backward(b))) return st;
    /* input gradients into scratch: dX = dP W */
    for (int i = 0; i < 3; i++) {
        if (!b->din[i]) continue;
        ta_attention_proj p = ta_attention_input_proj(f->layer, i);
        st = ta_linear_input_grad(b->dx[i], b->dP[i], p.W, proj_rows(b, &p, i), p.F, p.F, pk);
        if (st) return st;
    }
    return accumulate(b, dY, X);
}

/* ----------------------------------------------------------- entry points */

ta_status ta_attention_backward_workspace_size(size_t *bytes, const ta_tensor *d_queries,
                                               const ta_tensor *d_keys, const ta_tensor *d_values,
                                               const ta_attention *layer, const ta_tensor *d_out,
                                               const ta_tensor *queries, const ta_tensor *keys,
                                               const ta_tensor *values, const ta_attention_opts *opts)
{
    const char *fn = "ta_attention_backward_workspace_size";
    if (!bytes) return ta_error(TA_EINVAL, "%s: bytes is NULL", fn);
    attn_bwd b;
    ta_status st = prepare(&b, fn, d_queries, d_keys, d_values, layer, d_out, queries, keys,
                           values, opts);
    return st ? st : ta_attention_measure(bytes, fn, backward_layout, &b);
}

ta_status ta_attention_backward(ta_tensor *d_queries, ta_tensor *d_keys, ta_tensor *d_values,
                                ta_attention *layer, const ta_tensor *d_out,
                                const ta_tensor *queries, const ta_tensor *keys,
                                const ta_tensor *values, const ta_attention_opts *opts)
{
    /* d_queries, queries, d_out [N, Lq, E]; d_keys, d_values, keys, values [N, Lk, E] */
    const char *fn = "ta_attention_backward";
    attn_bwd b;
    ta_scratch s;
    ta_status st = prepare(&b, fn, d_queries, d_keys, d_values, layer, d_out, queries, keys,
                           values, opts);
    if (!st && opts) {
        const ta_tensor *t[9] = {d_queries, d_keys, d_values, d_out, queries, keys, values,
                                 opts->mask, opts->key_padding_mask};
        const char *names[9] = {"d_queries", "d_keys", "d_values", "d_out", "queries", "keys",
                                "values", "opts->mask", "opts->key_padding_mask"};
        st = ta_workspace_check(fn, &opts->workspace, 9, t, names);
    }
    if (st || (st = ta_attention_plan(&s, layer, fn, opts, backward_layout, &b))) return st;
    st = run(&b);
    ta_scratch_release(&s);
    return st;
}
