/* Multi-head attention layers: the seed's SelfAttention and torch's MultiheadAttention
 * (layouts, semantics and initialisation are documented in include/tensorattn.h;
 * parameters, load and save in attention_params.c).
 *
 * forward, both layouts:
 *   1. projections: one strided GEMM per input (ta_gemm_strided), reading the caller's
 *      tensors through their strides into contiguous [N, L, H, D] buffers (the seed
 *      applies one D x D Linear to every head's slice: a GEMM with N*L*H rows; torch
 *      applies an E x E Linear plus bias: N*L rows);
 *   2. the attention core: ta_sdpa on the permuted views [N, H, L, D] of those buffers
 *      (no copies), its output written through a permuted view straight into the
 *      [N, Lq, H, D] = [N, Lq, E] layout that the output projection reads;
 *   3. output projection into the caller's out (bias first, then GEMM with beta = 1).
 * The seed layout fills masked scores with -1e20 (finite) before the softmax, so a row
 * whose keys are all masked gets uniform weights; ta_sdpa gives such a row zeros and
 * LSE -inf instead, so the seed path asks for the LSE and rewrites exactly those rows
 * (weights 1/Lk, output the mean of the projected values).
 *
 * Scratch lives in the layer (grown, never shrunk) so steady-state calls allocate
 * nothing here; ta_sdpa's reference path still allocates its own score scratch. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "nn/attention_internal.h"
#include "ops/gemm.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

/* Parameter indices (the state_dict order documented in the header). */
enum { SEED_VALUES = TA_SEED_VALUES, SEED_KEYS = TA_SEED_KEYS, SEED_QUERIES = TA_SEED_QUERIES,
       SEED_FC_W = TA_SEED_FC_W, SEED_FC_B = TA_SEED_FC_B };
enum { TORCH_IN_W = TA_TORCH_IN_W, TORCH_IN_B = TA_TORCH_IN_B, TORCH_OUT_W = TA_TORCH_OUT_W,
       TORCH_OUT_B = TA_TORCH_OUT_B };

/* ------------------------------------------------------------------ forward */

/* Rows of a linear map: nd row dims (outermost first) with extents and element strides
 * in the input A and the output C; a row's features have stride csa in A and csc in C. */
typedef struct rows_desc {
    int nd;
    int64_t extent[TA_MAX_DIMS], sa[TA_MAX_DIMS], sc[TA_MAX_DIMS];
} rows_desc;

/* C[r, j] = sum_k A[r, k] W[j, k] (+ bias[j]) for every row r: x W^T + b, as nn.Linear.
 * W is a contiguous [out_f, in_f] matrix. The row dims are merged where both A's and C's
 * strides allow, the innermost run becomes the GEMM's M and the rest its batch, so any
 * strided input is read in place. */
static ta_status linear_rows(float *C, int64_t csc, const float *A, int64_t csa,
                             const rows_desc *rows, const float *W, int64_t in_f, int64_t out_f,
                             const float *bias)
{
    /* Merge: drop extent-1 dims, then fuse dim d into d+1 when evenly spaced in both. */
    int64_t e[TA_MAX_DIMS], sa[TA_MAX_DIMS], sc[TA_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < rows->nd; d++) {
        if (rows->extent[d] == 0) return TA_OK;
        if (rows->extent[d] == 1) continue;
        e[n] = rows->extent[d];
        sa[n] = rows->sa[d];
        sc[n] = rows->sc[d];
        n++;
    }
    int m = 0; /* merged count */
    for (int d = 0; d < n; d++) {
        if (m > 0 && sa[m - 1] == e[d] * sa[d] && sc[m - 1] == e[d] * sc[d]) {
            e[m - 1] *= e[d];
            sa[m - 1] = sa[d];
            sc[m - 1] = sc[d];
        } else {
            e[m] = e[d];
            sa[m] = sa[d];
            sc[m] = sc[d];
            m++;
        }
    }
    int64_t M = 1, rsa = in_f * csa, rsc = out_f * csc;
    if (m > 0) {
        M = e[m - 1];
        rsa = sa[m - 1];
        rsc = sc[m - 1];
        m--;
    }
    ta_gemm_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.ndim = m;
    for (int d = 0; d < m; d++) {
        batch.shape[d] = e[d];
        batch.stride_a[d] = sa[d];
        batch.stride_b[d] = 0; /* one weight matrix for every row */
        batch.stride_c[d] = sc[d];
    }
    if (bias) {
        /* Bias first, then accumulate: C = 1 * x W^T + 1 * C. */
        int64_t idx[TA_MAX_DIMS] = {0}, nb = 1;
        for (int d = 0; d < m; d++) nb *= e[d];
        for (int64_t b = 0; b < nb; b++) {
            float *cb = C;
            for (int d = 0; d < m; d++) cb += idx[d] * sc[d];
            for (int64_t r = 0; r < M; r++)
                for (int64_t j = 0; j < out_f; j++) cb[r * rsc + j * csc] = bias[j];
            ta_index_next(m, e, idx);
        }
    }
    /* B[k, j] = W[j, k]: row stride 1, column stride in_f (W^T without a copy). */
    return ta_gemm_run("ta_attention_forward", NULL, C, rsc, csc, A, rsa, csa, W, 1, in_f, M, out_f, in_f, 1.0f,
                           bias ? 1.0f : 0.0f, m ? &batch : NULL);
}

/* Rows of an input x [N, L, E] for the seed layout: (n, l, h), features d. */
static void seed_rows(rows_desc *r, const ta_tensor *x, int64_t H, int64_t D)
{
    r->nd = 3;
    r->extent[0] = x->shape[0];
    r->extent[1] = x->shape[1];
    r->extent[2] = H;
    r->sa[0] = x->stride[0];
    r->sa[1] = x->stride[1];
    r->sa[2] = D * x->stride[2];
    /* the output buffer is contiguous [N, L, H, D] */
    r->sc[0] = x->shape[1] * H * D;
    r->sc[1] = H * D;
    r->sc[2] = D;
}

/* Rows of an input x [N, L, E] for the torch layout: (n, l), features e. */
static void torch_rows(rows_desc *r, const ta_tensor *x, int64_t E)
{
    r->nd = 2;
    r->extent[0] = x->shape[0];
    r->extent[1] = x->shape[1];
    r->sa[0] = x->stride[0];
    r->sa[1] = x->stride[1];
    r->sc[0] = x->shape[1] * E;
    r->sc[1] = E;
}

/* A view of a contiguous [N, L, H, D] buffer as [N, H, L, D] (the head axis moves: the
 * seed's "nqhd -> nhqd", a strided view, not a copy). */
void ta_heads_view(ta_tensor *t, float *buf, int64_t N, int64_t L, int64_t H, int64_t D)
{
    memset(t, 0, sizeof *t);
    t->data = buf;
    t->dtype = TA_F32;
    t->ndim = 4;
    t->shape[0] = N;
    t->shape[1] = H;
    t->shape[2] = L;
    t->shape[3] = D;
    t->stride[0] = L * H * D;
    t->stride[1] = D;
    t->stride[2] = H * D;
    t->stride[3] = 1;
}

static void contiguous_view(ta_tensor *t, float *buf, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->data = buf;
    t->dtype = TA_F32;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    ta_contiguous_strides(t->stride, ndim, shape);
}

/* The mask as a rank-4 view over (n, h, i, j): right-aligned broadcasting (PyTorch's
 * rule), except that the torch layout reads a rank-3 mask as [N*H, Lq, Lk] split
 * batch-major, as MultiheadAttention does. Extents must be 1 or the target's. */
static ta_status mask_view4(ta_tensor *v, const char *fn, const char *name, const ta_tensor *m,
                            ta_layout layout, const int64_t target[4])
{
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    ta_status st = ta_tensor_check(fn, name, m);
    if (st) return st;
    if (m->ndim > 4)
        return ta_error(TA_ESHAPE, "%s: %s has shape %s, which does not broadcast to [N, H, Lq, Lk] = %s",
                        fn, name, ta_shape_str(s1, sizeof s1, m->ndim, m->shape),
                        ta_shape_str(s2, sizeof s2, 4, target));
    memset(v, 0, sizeof *v);
    v->data = m->data;
    v->dtype = TA_F32;
    v->ndim = 4;
    if (layout == TA_LAYOUT_TORCH && m->ndim == 3) {
        if (m->shape[0] != target[0] * target[1] || m->shape[1] != target[2] ||
            m->shape[2] != target[3]) {
            int64_t want[3] = {target[0] * target[1], target[2], target[3]};
            return ta_error(TA_ESHAPE, "%s: %s has shape %s, but a 3-D attn_mask must be [N*H, Lq, Lk] = %s",
                            fn, name, ta_shape_str(s1, sizeof s1, 3, m->shape),
                            ta_shape_str(s2, sizeof s2, 3, want));
        }
        v->shape[0] = target[0];
        v->shape[1] = target[1];
        v->stride[0] = target[1] * m->stride[0];
        v->stride[1] = m->stride[0];
        v->shape[2] = m->shape[1];
        v->stride[2] = m->stride[1];
        v->shape[3] = m->shape[2];
        v->stride[3] = m->stride[2];
    } else {
        int pad = 4 - m->ndim;
        for (int d = 0; d < 4; d++) {
            v->shape[d] = d < pad ? 1 : m->shape[d - pad];
            v->stride[d] = d < pad ? 0 : m->stride[d - pad];
        }
    }
    for (int d = 0; d < 4; d++) {
        if (v->shape[d] != 1 && v->shape[d] != target[d])
            return ta_error(TA_ESHAPE, "%s: %s has shape %s, which does not broadcast to [N, H, Lq, Lk] = %s",
                            fn, name, ta_shape_str(s1, sizeof s1, m->ndim, m->shape),
                            ta_shape_str(s2, sizeof s2, 4, target));
        if (v->shape[d] == 1) v->stride[d] = 0;
    }
    return TA_OK;
}

static int mask_mode_ok(ta_mask_mode m)
{
    return m == TA_MASK_KEEP || m == TA_MASK_BLOCK || m == TA_MASK_ADDITIVE;
}

/* Whether a boolean mask element blocks. */
static int blocks(float v, ta_mask_mode mode)
{
    return mode == TA_MASK_KEEP ? v == 0.0f : v != 0.0f;
}

/* If the [N, Lk] boolean key padding mask is a suffix pattern (keys 0..len-1 visible,
 * the rest blocked, per batch), its lengths into len and 1; otherwise 0. */
static int padding_lengths(int64_t *len, const ta_tensor *kpm, ta_mask_mode mode)
{
    if (mode == TA_MASK_ADDITIVE) return 0;
    const float *p = kpm->data;
    for (int64_t n = 0; n < kpm->shape[0]; n++) {
        int64_t j = 0, Lk = kpm->shape[1];
        const float *row = p + n * kpm->stride[0];
        while (j < Lk && !blocks(row[j * kpm->stride[1]], mode)) j++;
        len[n] = j;
        for (; j < Lk; j++)
            if (!blocks(row[j * kpm->stride[1]], mode)) return 0;
    }
    return 1;
}

/* One value of a mask as an additive term: 0 or -inf for boolean modes. */
static float additive(float v, ta_mask_mode mode)
{
    if (mode == TA_MASK_ADDITIVE) return v;
    return blocks(v, mode) ? -INFINITY : 0.0f;
}

/* comb [N, Hm, Lqm, Lk] = mask (4-D view, broadcast) + key padding mask [N, Lk], both as
 * additive terms (0 / -inf for boolean modes). */
static void combine_masks(ta_tensor *comb, const ta_tensor *m4, ta_mask_mode mmode,
                          const ta_tensor *kpm, ta_mask_mode kmode)
{
    float *c = comb->data;
    const int64_t N = comb->shape[0], Hm = comb->shape[1], Lqm = comb->shape[2], Lk = comb->shape[3];
    const float *mp = m4->data, *kp = kpm->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < Hm; h++)
            for (int64_t i = 0; i < Lqm; i++)
                for (int64_t j = 0; j < Lk; j++) {
                    float a = additive(mp[n * m4->stride[0] + h * m4->stride[1] + i * m4->stride[2] +
                                          j * m4->stride[3]],
                                       mmode);
                    float b = additive(kp[n * kpm->stride[0] + j * kpm->stride[1]], kmode);
                    *c++ = a + b;
                }
}

/* The seed layout's rows with nothing to attend (LSE -inf from ta_sdpa): the seed fills
 * masked scores with a finite -1e20, so such a row's softmax is uniform over all Lk keys:
 * weights 1/Lk and output the mean of the projected values of its (n, h). */
static void seed_uniform_rows(float *O, ta_tensor *w, const float *lse, const float *Vp,
                              int64_t N, int64_t H, int64_t Lq, int64_t Lk, int64_t D)
{
    const int64_t E = H * D;
#pragma omp parallel for num_threads(ta_threads()) schedule(static)
    for (int64_t nh = 0; nh < N * H; nh++) {
        int64_t n = nh / H, h = nh % H;
        const float *l = lse + nh * Lq;
        int64_t q0 = 0;
        while (q0 < Lq && !(isinf(l[q0]) && l[q0] < 0)) q0++;
        if (q0 == Lq) continue;
        /* The attention output of a uniform row: sum_k (1/Lk) v[k], as the seed's einsum
         * would compute it (accumulated in double here). It is the same for every uniform
         * row of this (n, h): computed once, 256 dims at a time, then copied. */
        const float wk = 1.0f / (float)Lk;
        for (int64_t d0 = 0; d0 < D; d0 += 256) {
            const int64_t nd = TA_MIN(256, D - d0);
            double acc[256];
            for (int64_t d = 0; d < nd; d++) acc[d] = 0.0;
            for (int64_t k = 0; k < Lk; k++) {
                const float *v = Vp + (n * Lk + k) * E + h * D + d0;
                for (int64_t d = 0; d < nd; d++) acc[d] += (double)wk * v[d];
            }
            for (int64_t q = q0; q < Lq; q++)
                if (isinf(l[q]) && l[q] < 0)
                    for (int64_t d = 0; d < nd; d++)
                        O[(n * Lq + q) * E + h * D + d0 + d] = (float)acc[d];
        }
        for (int64_t q = q0; q < Lq; q++) {
            if (!(isinf(l[q]) && l[q] < 0)) continue;
            if (w) {
                float *wr = (float *)w->data + n * w->stride[0] + h * w->stride[1] + q * w->stride[2];
                for (int64_t k = 0; k < Lk; k++) wr[k * w->stride[3]] = wk;
            }
        }
    }
}

/* out [N, Lq, Lk] = sum over h of w [N, H, Lq, Lk], divided by H (torch's
 * sum(dim=1) / num_heads, in that order). */
static void average_heads(ta_tensor *out, const ta_tensor *w)
{
    const int64_t N = w->shape[0], H = w->shape[1], Lq = w->shape[2], Lk = w->shape[3];
    const float *wp = w->data;
    float *op = out->data;
#pragma omp parallel for num_threads(ta_threads()) schedule(static)
    for (int64_t nq = 0; nq < N * Lq; nq++) {
        int64_t n = nq / Lq, q = nq % Lq;
        for (int64_t k = 0; k < Lk; k++) {
            float s = 0.0f;
            for (int64_t h = 0; h < H; h++)
                s += wp[n * w->stride[0] + h * w->stride[1] + q * w->stride[2] + k * w->stride[3]];
            op[n * out->stride[0] + q * out->stride[1] + k * out->stride[2]] = s / (float)H;
        }
    }
}

/* Byte offsets of the forward scratch, each chunk 64-byte aligned. */
typedef struct ws_plan {
    size_t q, k, v, o, lse, w, mask, lens, total;
} ws_plan;

static bool ws_add(size_t *off, size_t *total, int64_t count, size_t elem)
{
    size_t bytes;
    if (count < 0 || !ta_mul_size(&bytes, (size_t)count, elem)) return false;
    bytes = (bytes + 63) & ~(size_t)63;
    *off = *total;
    if (*total > SIZE_MAX - bytes) return false;
    *total += bytes;
    return true;
}

static ta_status ensure_ws(ta_attention *l, size_t bytes, const char *fn)
{
    if (bytes <= l->ws_bytes) return TA_OK;
    unsigned char *p = ta_alloc(bytes);
    if (!p) return ta_error(TA_ENOMEM, "%s: cannot allocate %zu bytes of scratch", fn, bytes);
    ta_free(l->ws);
    l->ws = p;
    l->ws_bytes = bytes;
    return TA_OK;
}

static ta_status check_input(const char *fn, const char *name, const ta_tensor *x, int64_t E)
{
    ta_status st = ta_tensor_check(fn, name, x);
    if (st) return st;
    if (x->ndim != 3 || x->shape[2] != E) {
        char s[TA_SHAPE_STR_MAX];
        return ta_error(TA_ESHAPE, "%s: %s has shape %s, expected [N, L, %lld] (embed_size %lld)",
                        fn, name, ta_shape_str(s, sizeof s, x->ndim, x->shape), (long long)E,
                        (long long)E);
    }
    return TA_OK;
}

ta_status ta_attention_check_input(const char *fn, const char *name, const ta_tensor *x, int64_t E)
{
    return check_input(fn, name, x, E);
}

ta_status ta_attention_run(ta_attention_fwd *keep, const char *fn, ta_tensor *out,
                           ta_attention *layer, const ta_tensor *queries, const ta_tensor *keys,
                           const ta_tensor *values, const ta_attention_opts *opts)
{
    /* out [N, Lq, E]; queries [N, Lq, E]; keys, values [N, Lk, E];
     * opts: mask -> [N, H, Lq, Lk], key_padding_mask [N, Lk], weights [N, (H,) Lq, Lk] */
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    ta_attention_opts none;
    memset(&none, 0, sizeof none);
    if (!opts) opts = &none;
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    const int64_t E = layer->E, H = layer->H, D = layer->D;
    const ta_layout layout = layer->layout;
    ta_status st;
    if ((st = check_input(fn, "queries", queries, E))) return st;
    if ((st = check_input(fn, "keys", keys, E))) return st;
    if ((st = check_input(fn, "values", values, E))) return st;
    if (keys->shape[0] != values->shape[0] || keys->shape[1] != values->shape[1])
        return ta_error(TA_ESHAPE, "%s: keys has shape %s but values has %s (they must match)", fn,
                        ta_shape_str(s1, sizeof s1, 3, keys->shape),
                        ta_shape_str(s2, sizeof s2, 3, values->shape));
    if (keys->shape[0] != queries->shape[0])
        return ta_error(TA_ESHAPE, "%s: keys has shape %s but queries has %s (batch sizes differ)",
                        fn, ta_shape_str(s1, sizeof s1, 3, keys->shape),
                        ta_shape_str(s2, sizeof s2, 3, queries->shape));
    const int64_t N = queries->shape[0], Lq = queries->shape[1], Lk = keys->shape[1];
    const int64_t oshape[3] = {N, Lq, E};
    if (!out && !keep) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    if (out && (st = ta_tensor_check_shape(fn, "out", out, 3, oshape, "[N, Lq, E]", true))) return st;
    /* the backward needs the LSE of every layout (and no weights) */
    const int want_lse = layout == TA_LAYOUT_SEED || keep;

    /* masks */
    const int64_t target[4] = {N, H, Lq, Lk};
    ta_attention_fwd local;
    ta_attention_fwd *f = keep ? keep : &local;
    const ta_tensor *mask = NULL, *kpm = opts->key_padding_mask;
    if (!mask_mode_ok(opts->mask_mode))
        return ta_error(TA_EINVAL, "%s: mask_mode %d is not a ta_mask_mode", fn, (int)opts->mask_mode);
    if (opts->causal != TA_CAUSAL_NONE && opts->causal != TA_CAUSAL_TOP_LEFT &&
        opts->causal != TA_CAUSAL_BOTTOM_RIGHT)
        return ta_error(TA_EINVAL, "%s: causal %d is not a ta_causal", fn, (int)opts->causal);
    if (!mask_mode_ok(opts->key_padding_mode))
        return ta_error(TA_EINVAL, "%s: key_padding_mode %d is not a ta_mask_mode", fn,
                        (int)opts->key_padding_mode);
    if (layout == TA_LAYOUT_SEED && opts->mask && opts->mask_mode == TA_MASK_ADDITIVE)
        return ta_error(TA_EINVAL, "%s: the seed layout's mask is boolean (TA_MASK_KEEP or "
                        "TA_MASK_BLOCK); TA_MASK_ADDITIVE is for the torch layout", fn);
    if (layout == TA_LAYOUT_SEED && kpm && opts->key_padding_mode == TA_MASK_ADDITIVE)
        return ta_error(TA_EINVAL, "%s: the seed layout's key_padding_mask is boolean (TA_MASK_KEEP "
                        "or TA_MASK_BLOCK); TA_MASK_ADDITIVE is for the torch layout", fn);
    if (opts->mask) {
        if ((st = mask_view4(&f->m4, fn, "mask", opts->mask, layout, target))) return st;
        mask = &f->m4;
    }
    if (kpm) {
        if ((st = ta_tensor_check(fn, "key_padding_mask", kpm))) return st;
        if (kpm->ndim != 2 || kpm->shape[0] != N || kpm->shape[1] != Lk) {
            int64_t want[2] = {N, Lk};
            return ta_error(TA_ESHAPE, "%s: key_padding_mask has shape %s, expected [N, Lk] = %s", fn,
                            ta_shape_str(s1, sizeof s1, kpm->ndim, kpm->shape),
                            ta_shape_str(s2, sizeof s2, 2, want));
        }
    }
    /* weights */
    ta_tensor *wout = keep ? NULL : opts->weights;
    if (wout) {
        if (opts->average_weights) {
            const int64_t ws[3] = {N, Lq, Lk};
            st = ta_tensor_check_shape(fn, "weights", wout, 3, ws, "[N, Lq, Lk] (averaged over heads)", true);
        } else {
            st = ta_tensor_check_shape(fn, "weights", wout, 4, target, "[N, H, Lq, Lk]", true);
        }
        if (st) return st;
    }

    /* How the masks reach ta_sdpa: at most one mask tensor plus key lengths. */
    int use_lengths = 0, combine = 0;
    ta_mask_mode sdpa_mode = opts->mask_mode;
    const ta_tensor *sdpa_mask = mask;
    int64_t comb_shape[4] = {0, 0, 0, 0};
    ws_plan w;
    memset(&w, 0, sizeof w);
    const int64_t nq = N * Lq * E, nk = N * Lk * E; /* fit: shapes validated, E <= 2^24 */
    bool ok = ws_add(&w.q, &w.total, nq, sizeof(float)) && ws_add(&w.k, &w.total, nk, sizeof(float)) &&
              ws_add(&w.v, &w.total, nk, sizeof(float)) && ws_add(&w.o, &w.total, nq, sizeof(float)) &&
              ws_add(&w.lse, &w.total, want_lse ? N * H * Lq : 0, sizeof(float)) &&
              ws_add(&w.lens, &w.total, N, sizeof(int64_t));
    int64_t nw = 0;
    if (ok && wout && opts->average_weights)
        ok = ta_shape_numel(&nw, 4, target) && ws_add(&w.w, &w.total, nw, sizeof(float));
    if (ok && kpm) {
        if (!mask) {
            /* [N, Lk] as [N, 1, 1, Lk]: ta_sdpa broadcasts it. */
            memset(&f->kpm4, 0, sizeof f->kpm4);
            f->kpm4.data = kpm->data;
            f->kpm4.dtype = TA_F32;
            f->kpm4.ndim = 4;
            f->kpm4.shape[0] = N;
            f->kpm4.shape[1] = f->kpm4.shape[2] = 1;
            f->kpm4.shape[3] = Lk;
            f->kpm4.stride[0] = N > 1 ? kpm->stride[0] : 0;
            f->kpm4.stride[3] = Lk > 1 ? kpm->stride[1] : 0;
            sdpa_mask = &f->kpm4;
            sdpa_mode = opts->key_padding_mode;
        } else {
            combine = 1; /* decided below once the lengths are known */
            for (int d = 0; d < 4; d++) comb_shape[d] = mask->shape[d];
            comb_shape[0] = N;
            comb_shape[3] = Lk;
            int64_t nc;
            ok = ta_shape_numel(&nc, 4, comb_shape) && ws_add(&w.mask, &w.total, nc, sizeof(float));
        }
    }
    if (!ok) return ta_error(TA_ENOMEM, "%s: the scratch for these shapes overflows size_t", fn);
    if ((st = ensure_ws(layer, w.total, fn))) return st;
    unsigned char *ws = layer->ws;
    float *Qp = (float *)(ws + w.q), *Kp = (float *)(ws + w.k), *Vp = (float *)(ws + w.v);
    float *Ob = (float *)(ws + w.o), *lse = (float *)(ws + w.lse);
    int64_t *lens = (int64_t *)(ws + w.lens);
    if (combine) {
        if (padding_lengths(lens, kpm, opts->key_padding_mode)) {
            use_lengths = 1; /* suffix padding: key lengths, no combined mask */
        } else {
            contiguous_view(&f->comb, (float *)(ws + w.mask), 4, comb_shape);
            combine_masks(&f->comb, mask, opts->mask_mode, kpm, opts->key_padding_mode);
            sdpa_mask = &f->comb;
            sdpa_mode = TA_MASK_ADDITIVE;
        }
    }

    /* 1. projections into [N, L, H, D] buffers */
    rows_desc r;
    const ta_attention_param_slot *p = layer->p;
    const ta_tensor *in[3] = {queries, keys, values};
    float *dst[3] = {Qp, Kp, Vp};
    for (int i = 0; i < 3 && !st; i++) {
        if (layout == TA_LAYOUT_SEED) {
            static const int which[3] = {SEED_QUERIES, SEED_KEYS, SEED_VALUES};
            seed_rows(&r, in[i], H, D);
            st = linear_rows(dst[i], 1, in[i]->data, in[i]->stride[2], &r,
                             p[which[i]].value.data, D, D, NULL);
        } else {
            torch_rows(&r, in[i], E);
            st = linear_rows(dst[i], 1, in[i]->data, in[i]->stride[2], &r,
                             (const float *)p[TORCH_IN_W].value.data + i * E * E, E, E,
                             (const float *)p[TORCH_IN_B].value.data + i * E);
        }
    }
    if (st) return st;

    /* 2. attention core on the head views */
    ta_tensor Qv, Kv, Vv, Ov, lse_t, wtmp;
    ta_heads_view(&Qv, Qp, N, Lq, H, D);
    ta_heads_view(&Kv, Kp, N, Lk, H, D);
    ta_heads_view(&Vv, Vp, N, Lk, H, D);
    ta_heads_view(&Ov, Ob, N, Lq, H, D);
    ta_sdpa_opts so;
    memset(&so, 0, sizeof so);
    so.causal = opts->causal;
    so.mask = sdpa_mask;
    so.mask_mode = sdpa_mode;
    so.key_lengths = use_lengths ? lens : NULL;
    ta_tensor *w4 = NULL;
    if (wout) {
        if (opts->average_weights) {
            contiguous_view(&wtmp, (float *)(ws + w.w), 4, target);
            w4 = &wtmp;
        } else {
            w4 = wout;
        }
    }
    so.weights = w4;
    if (want_lse) {
        const int64_t ls[3] = {N, H, Lq};
        contiguous_view(&lse_t, lse, 3, ls);
        so.lse = &lse_t;
    }
    if ((st = ta_sdpa(&Ov, &Qv, &Kv, &Vv, &so))) return st;
    if (layout == TA_LAYOUT_SEED && Lk > 0) seed_uniform_rows(Ob, w4, lse, Vp, N, H, Lq, Lk, D);
    if (wout && opts->average_weights) average_heads(wout, &wtmp);
    if (keep) {
        keep->N = N;
        keep->Lq = Lq;
        keep->Lk = Lk;
        keep->Qp = Qp;
        keep->Kp = Kp;
        keep->Vp = Vp;
        keep->Ob = Ob;
        keep->lse = lse;
        keep->so = so;
        keep->so.weights = NULL;
        keep->so.lse = NULL;
        /* so.key_lengths points into layer->ws, which stays put until the next call */
        if (!out) return TA_OK;
    }

    /* 3. output projection into the caller's out */
    const ta_tensor *ow = layout == TA_LAYOUT_SEED ? &p[SEED_FC_W].value : &p[TORCH_OUT_W].value;
    const ta_tensor *ob = layout == TA_LAYOUT_SEED ? &p[SEED_FC_B].value : &p[TORCH_OUT_B].value;
    r.nd = 2;
    r.extent[0] = N;
    r.extent[1] = Lq;
    r.sa[0] = Lq * E;
    r.sa[1] = E;
    r.sc[0] = out->stride[0];
    r.sc[1] = out->stride[1];
    return linear_rows(out->data, out->stride[2], Ob, 1, &r, ow->data, E, E, ob->data);
}

ta_status ta_attention_forward(ta_tensor *out, ta_attention *layer, const ta_tensor *queries,
                               const ta_tensor *keys, const ta_tensor *values,
                               const ta_attention_opts *opts)
{
    /* out [N, Lq, E]; queries [N, Lq, E]; keys, values [N, Lk, E] */
    return ta_attention_run(NULL, "ta_attention_forward", out, layer, queries, keys, values, opts);
}
