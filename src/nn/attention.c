/* Multi-head attention layers, the forward: the seed's SelfAttention and torch's
 * MultiheadAttention (layouts, semantics and initialisation are documented in
 * include/tensorattn.h; parameters in attention_params.c, masks in attention_masks.c).
 *
 * One call runs in stages, each a function below:
 *   validate  inputs, out, masks and options (ta_attention_fwd_prepare); touches nothing;
 *   plan      one arena layout of the whole call's scratch (ta_attention_fwd_layout:
 *             projections, LSE, key lengths and combined mask, per-head weights to
 *             average, the packing of every GEMM, ta_sdpa's scratch), measured, then
 *             carved from the caller's workspace or the layer's block (ta_attention_plan);
 *   project   Q, K, V: one strided linear per input (src/ops/linear.h), reading the
 *             caller's tensors through their strides into contiguous [N, L, H, D]
 *             buffers (the seed applies one D x D Linear to every head's slice: N*L*H
 *             rows; torch an E x E Linear plus bias: N*L rows);
 *   attend    ta_sdpa on the permuted views [N, H, L, D] of those buffers (no copies),
 *             its output written through a permuted view straight into the
 *             [N, Lq, H, D] = [N, Lq, E] layout that the output projection reads;
 *   fix up    the seed layout fills masked scores with -1e20 (finite) before the
 *             softmax, so a row whose keys are all masked gets uniform weights; ta_sdpa
 *             gives such a row zeros and LSE -inf instead, so the seed path asks for the
 *             LSE and rewrites exactly those rows (weights 1/Lk, output the mean of the
 *             projected values); then weights averaged over heads;
 *   output    the output projection into the caller's out (bias first, then the GEMM
 *             with beta = 1): the only stage that writes out, after all that can fail.
 * The backward (attention_backward.c) runs the same stages but the last inside its own
 * arena. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "nn/attention_internal.h"
#include "ops/sdpa.h"

#include <math.h>
#include <string.h>

/* --------------------------------------------------------------- validate */

ta_status ta_attention_check_input(const char *fn, const char *name, const ta_tensor *x, int64_t E)
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

/* queries [N, Lq, E]; keys, values [N, Lk, E] */
static ta_status check_inputs(const char *fn, const ta_attention *layer, const ta_tensor *queries,
                              const ta_tensor *keys, const ta_tensor *values)
{
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    ta_status st;
    if ((st = ta_attention_check_input(fn, "queries", queries, layer->E))) return st;
    if ((st = ta_attention_check_input(fn, "keys", keys, layer->E))) return st;
    if ((st = ta_attention_check_input(fn, "values", values, layer->E))) return st;
    if (keys->shape[0] != values->shape[0] || keys->shape[1] != values->shape[1])
        return ta_error(TA_ESHAPE, "%s: keys has shape %s but values has %s (they must match)", fn,
                        ta_shape_str(s1, sizeof s1, 3, keys->shape),
                        ta_shape_str(s2, sizeof s2, 3, values->shape));
    if (keys->shape[0] != queries->shape[0])
        return ta_error(TA_ESHAPE, "%s: keys has shape %s but queries has %s (batch sizes differ)",
                        fn, ta_shape_str(s1, sizeof s1, 3, keys->shape),
                        ta_shape_str(s2, sizeof s2, 3, queries->shape));
    return TA_OK;
}

/* weights [N, H, Lq, Lk] = target, or [N, Lq, Lk] when averaged over heads */
static ta_status check_weights(const char *fn, const ta_tensor *w, bool average,
                               const int64_t target[4])
{
    if (!average)
        return ta_tensor_check_shape(fn, "weights", w, 4, target, "[N, H, Lq, Lk]",
                                     TA_CHECK_OUTPUT);
    const int64_t ws[3] = {target[0], target[2], target[3]};
    return ta_tensor_check_shape(fn, "weights", w, 3, ws, "[N, Lq, Lk] (averaged over heads)",
                                 TA_CHECK_OUTPUT);
}

ta_status ta_attention_fwd_prepare(ta_attention_fwd *f, const char *fn, const ta_tensor *out,
                                   const ta_attention *layer, const ta_tensor *queries,
                                   const ta_tensor *keys, const ta_tensor *values,
                                   const ta_attention_opts *opts, bool for_backward)
{
    /* out [N, Lq, E]; queries [N, Lq, E]; keys, values [N, Lk, E];
     * opts: mask -> [N, H, Lq, Lk], key_padding_mask [N, Lk], weights [N, (H,) Lq, Lk] */
    static const ta_attention_opts none;
    if (!opts) opts = &none;
    if (!layer) return ta_error(TA_EINVAL, "%s: layer is NULL", fn);
    ta_status st = check_inputs(fn, layer, queries, keys, values);
    if (st) return st;
    const int64_t N = queries->shape[0], Lq = queries->shape[1], Lk = keys->shape[1];
    const int64_t oshape[3] = {N, Lq, layer->E}, target[4] = {N, layer->H, Lq, Lk};
    if (!out && !for_backward) return ta_error(TA_EINVAL, "%s: out is NULL", fn);
    if (out && (st = ta_tensor_check_shape(fn, "out", out, 3, oshape, "[N, Lq, E]",
                                           TA_CHECK_OUTPUT)))
        return st;
    ta_tensor *weights = for_backward ? NULL : opts->weights;
    /* the seed layout's fix-up reads the LSE; the backward needs it in both layouts */
    *f = (ta_attention_fwd){.fn = fn, .layer = layer, .queries = queries, .keys = keys,
                            .values = values, .out = out, .weights = weights,
                            .average = weights && opts->average_weights,
                            .want_lse = layer->layout == TA_LAYOUT_SEED || for_backward,
                            .causal = opts->causal, .N = N, .Lq = Lq, .Lk = Lk,
                            .for_backward = for_backward};
    if ((st = ta_attention_masks_check(&f->masks, fn, layer->layout, opts, target))) return st;
    if (weights && (st = check_weights(fn, weights, opts->average_weights, target))) return st;
    return TA_OK;
}

/* ------------------------------------------------------------------- plan */

/* The attend stage's ta_sdpa arguments: Q, K, V, O [N, H, L, D] as head views of the
 * projection buffers (no data while the layout is measured) and the options in f->so. */
static void sdpa_args(ta_attention_fwd *f, ta_tensor v[4])
{
    const int64_t N = f->N, Lq = f->Lq, Lk = f->Lk, H = f->layer->H, D = f->layer->D;
    ta_heads_view(&v[0], f->Qp, N, Lq, H, D);
    ta_heads_view(&v[1], f->Kp, N, Lk, H, D);
    ta_heads_view(&v[2], f->Vp, N, Lk, H, D);
    ta_heads_view(&v[3], f->Ob, N, Lq, H, D);
    f->w4 = f->weights;
    if (f->average) {
        const int64_t target[4] = {N, H, Lq, Lk};
        f->wheads_t = ta_tensor_view(f->wheads, 4, target);
        f->w4 = &f->wheads_t;
    }
    memset(&f->so, 0, sizeof f->so);
    f->so.causal = f->causal;
    f->so.mask = f->masks.sdpa_mask;
    f->so.mask_mode = f->masks.sdpa_mode;
    f->so.key_lengths = f->masks.key_lengths;
    f->so.weights = f->w4;
    if (f->want_lse) {
        const int64_t ls[3] = {N, H, Lq};
        f->lse_t = ta_tensor_view(f->lse, 3, ls);
        f->so.lse = &f->lse_t;
    }
}

/* The bytes of ta_sdpa's scratch inside the layer's arena, from shapes and options only
 * (SDPA's scratch depends on neither data nor which mask the data selects). A call that
 * SDPA refuses gets 0 here and its error from the attend stage. */
size_t ta_attention_fwd_sdpa_bytes(ta_attention_fwd *f)
{
    ta_tensor v[4];
    sdpa_args(f, v);
    ta_sdpa_problem p;
    if (ta_sdpa_prepare(&p, f->fn, &v[3], &v[0], &v[1], &v[2], &f->so, TA_SDPA_SHAPES_ONLY))
        return 0;
    return ta_sdpa_scratch_bytes(&p);
}

/* The rows of input x [N, L, E] through projection p: (n, l, h), F features each, into a
 * contiguous [N, L, heads, F] = [N, L, E] buffer. */
static void input_rows(ta_linear_rows *r, const ta_tensor *x, const ta_attention_proj *p)
{
    const int64_t L = x->shape[1], E = p->heads * p->F;
    *r = (ta_linear_rows){.nd = 3, .extent = {x->shape[0], L, p->heads},
                          .sx = {x->stride[0], x->stride[1], p->F * x->stride[2]},
                          .sy = {L * E, E, p->F}};
}

/* The rows of the attention output [N, Lq, E] (contiguous) into out [N, Lq, E]. */
static void output_rows(ta_linear_rows *r, const ta_tensor *out)
{
    const int64_t Lq = out->shape[1], E = out->shape[2];
    *r = (ta_linear_rows){.nd = 2, .extent = {out->shape[0], Lq}, .sx = {Lq * E, E},
                          .sy = {out->stride[0], out->stride[1]}};
}

void ta_attention_fwd_layout(ta_arena *a, ta_attention_fwd *f)
{
    const int64_t N = f->N, Lq = f->Lq, Lk = f->Lk, E = f->layer->E, H = f->layer->H;
    const int64_t nq = N * Lq * E, nk = N * Lk * E; /* fit: the inputs' sizes */
    const int64_t target[4] = {N, H, Lq, Lk};
    f->Qp = TA_ARENA_TAKE(a, float, nq);
    f->Kp = TA_ARENA_TAKE(a, float, nk);
    f->Vp = TA_ARENA_TAKE(a, float, nk);
    f->Ob = TA_ARENA_TAKE(a, float, nq);
    f->lse = TA_ARENA_TAKE(a, float, f->want_lse ? N * H * Lq : 0);
    int64_t nw = 0;
    if (f->average && !ta_shape_numel(&nw, 4, target)) a->overflow = true;
    f->wheads = TA_ARENA_TAKE(a, float, nw);
    ta_attention_masks_layout(a, &f->masks);
    if (!f->for_backward) f->sdpa = ta_arena_sub(a, ta_attention_fwd_sdpa_bytes(f));
    /* the GEMMs run one after another: one packing buffer, sized for the largest */
    f->pack = (ta_linear_pack){0};
    const ta_tensor *in[3] = {f->queries, f->keys, f->values};
    ta_linear_rows r;
    for (int i = 0; i < 3; i++) {
        ta_attention_proj p = ta_attention_input_proj(f->layer, i);
        input_rows(&r, in[i], &p);
        ta_linear_need_forward(&f->pack, 1, in[i]->stride[2], &r, p.F, p.F);
    }
    if (f->out) {
        output_rows(&r, f->out);
        ta_linear_need_forward(&f->pack, f->out->stride[2], 1, &r, E, E);
    }
}

ta_status ta_attention_scratch(ta_scratch *s, ta_attention *layer, const char *fn,
                               const ta_attention_opts *opts, size_t bytes)
{
    *s = (ta_scratch){0};
    if (bytes == SIZE_MAX)
        return ta_error(TA_ENOMEM, "%s: the scratch for these shapes overflows size_t", fn);
    if (opts && opts->workspace.data) return ta_scratch_acquire(s, fn, &opts->workspace, bytes);
    if (bytes > layer->scratch_bytes) {
        unsigned char *p = ta_alloc(bytes);
        if (!p) return ta_error(TA_ENOMEM, "%s: cannot allocate %zu bytes of scratch", fn, bytes);
        ta_free(layer->scratch);
        layer->scratch = p;
        layer->scratch_bytes = bytes;
    }
    s->base = layer->scratch; /* 64-byte aligned (ta_alloc) */
    s->size = layer->scratch_bytes;
    return TA_OK;
}

ta_status ta_attention_plan(ta_scratch *s, ta_attention *layer, const char *fn,
                            const ta_attention_opts *opts, ta_attention_layout_fn layout,
                            void *call)
{
    ta_arena m = ta_arena_measure();
    layout(&m, call);
    ta_status st = ta_attention_scratch(s, layer, fn, opts, ta_arena_bytes(&m));
    if (st) return st;
    ta_arena a = ta_arena_over(s->base, s->size);
    layout(&a, call);
    if (a.overflow) {
        ta_scratch_release(s);
        return ta_error(TA_EINTERNAL, "%s: the scratch layout differs from its measure (a bug)", fn);
    }
    return TA_OK;
}

ta_status ta_attention_measure(size_t *bytes, const char *fn, ta_attention_layout_fn layout,
                               void *call)
{
    ta_arena m = ta_arena_measure();
    layout(&m, call);
    if (m.overflow)
        return ta_error(TA_ENOMEM, "%s: the scratch for these shapes overflows size_t", fn);
    *bytes = ta_workspace_bytes(ta_arena_bytes(&m));
    return TA_OK;
}

/* ---------------------------------------------------------------- project */

static ta_status project_inputs(const ta_attention_fwd *f)
{
    /* Qp, Kp, Vp [N, L, E] contiguous = queries, keys, values [N, L, E] (strided) W^T + b */
    const ta_tensor *in[3] = {f->queries, f->keys, f->values};
    float *dst[3] = {f->Qp, f->Kp, f->Vp};
    ta_status st = TA_OK;
    for (int i = 0; i < 3 && !st; i++) {
        ta_attention_proj p = ta_attention_input_proj(f->layer, i);
        ta_linear_rows r;
        input_rows(&r, in[i], &p);
        st = ta_linear_forward(dst[i], 1, in[i]->data, in[i]->stride[2], &r, p.W, p.b, p.F, p.F,
                               &f->pack);
    }
    return st;
}

/* ----------------------------------------------------------------- attend */

static ta_status attend(ta_attention_fwd *f)
{
    /* Ob [N, Lq, H, D] = sdpa(Qp, Kp, Vp viewed [N, H, L, D]); weights [N, H, Lq, Lk]; lse [N, H, Lq] */
    ta_tensor v[4];
    sdpa_args(f, v);
    ta_sdpa_problem p;
    ta_status st = ta_sdpa_prepare(&p, f->fn, &v[3], &v[0], &v[1], &v[2], &f->so,
                                   TA_SDPA_CHECK_ALL);
    ta_arena scratch = f->sdpa;
    return st ? st : ta_sdpa_run(&p, &scratch);
}

/* ----------------------------------------------------------------- fix up */

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

static void fix_up(const ta_attention_fwd *f)
{
    const ta_attention *l = f->layer;
    if (l->layout == TA_LAYOUT_SEED && f->Lk > 0)
        seed_uniform_rows(f->Ob, f->w4, f->lse, f->Vp, f->N, l->H, f->Lq, f->Lk, l->D);
    if (f->average) average_heads(f->weights, &f->wheads_t);
}

/* ----------------------------------------------------------------- output */

static ta_status project_output(const ta_attention_fwd *f)
{
    /* out [N, Lq, E] (strided) = Ob [N, Lq, E] W_o^T + b_o */
    ta_attention_proj p = ta_attention_output_proj(f->layer);
    ta_linear_rows r;
    output_rows(&r, f->out);
    return ta_linear_forward(f->out->data, f->out->stride[2], f->Ob, 1, &r, p.W, p.b, p.F, p.F,
                             &f->pack);
}

ta_status ta_attention_fwd_run(ta_attention_fwd *f)
{
    ta_attention_masks_resolve(&f->masks);
    ta_status st = project_inputs(f);
    if (!st) st = attend(f);
    if (st) return st;
    fix_up(f);
    return f->out ? project_output(f) : TA_OK;
}

/* ----------------------------------------------------------- entry points */

static void forward_layout(ta_arena *a, void *call)
{
    ta_attention_fwd *f = call;
    ta_attention_fwd_layout(a, f);
    ta_linear_layout(a, &f->pack);
}

ta_status ta_attention_workspace_size(size_t *bytes, const ta_tensor *out,
                                      const ta_attention *layer, const ta_tensor *queries,
                                      const ta_tensor *keys, const ta_tensor *values,
                                      const ta_attention_opts *opts)
{
    /* as ta_attention_forward's arguments: the bytes its opts->workspace must hold */
    const char *fn = "ta_attention_workspace_size";
    if (!bytes) return ta_error(TA_EINVAL, "%s: bytes is NULL", fn);
    ta_attention_fwd f;
    ta_status st = ta_attention_fwd_prepare(&f, fn, out, layer, queries, keys, values, opts, false);
    return st ? st : ta_attention_measure(bytes, fn, forward_layout, &f);
}

ta_status ta_attention_forward(ta_tensor *out, ta_attention *layer, const ta_tensor *queries,
                               const ta_tensor *keys, const ta_tensor *values,
                               const ta_attention_opts *opts)
{
    /* out [N, Lq, E]; queries [N, Lq, E]; keys, values [N, Lk, E] */
    const char *fn = "ta_attention_forward";
    ta_attention_fwd f;
    ta_scratch s;
    ta_status st = ta_attention_fwd_prepare(&f, fn, out, layer, queries, keys, values, opts, false);
    if (!st && opts) {
        const ta_tensor *t[7] = {out, opts->weights, queries, keys, values, opts->mask,
                                 opts->key_padding_mask};
        const char *names[7] = {"out", "opts->weights", "queries", "keys", "values",
                                "opts->mask", "opts->key_padding_mask"};
        st = ta_workspace_check(fn, &opts->workspace, 7, t, names);
    }
    if (st || (st = ta_attention_plan(&s, layer, fn, opts, forward_layout, &f))) return st;
    st = ta_attention_fwd_run(&f);
    ta_scratch_release(&s);
    return st;
}

/* ------------------------------------------------------------------ views */

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
