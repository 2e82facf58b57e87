/* SDPA's front door (sdpa.h): ta_sdpa, ta_sdpa_backward and their workspace queries.
 * Every public call goes the same way:
 *   1. prepare: check the arguments (shapes, strides, options, overlaps) and normalise
 *      them into one ta_sdpa_problem (scale resolved, masks as a ta_mask_plan, the path
 *      resolved: TA_SDPA_AUTO is fused unless the weights are wanted);
 *   2. plan: the chosen implementation's scratch bytes (shapes and thread count only);
 *   3. acquire one scratch block (the caller's workspace, or the library's) before any
 *      output is written, run the implementation in it, give the block back.
 * Validation errors and scratch errors therefore leave every output untouched. */
#include "ops/sdpa.h"

#include "core/core.h"

#include <math.h>

/* ------------------------------------------------------------ validation */

static ta_status check_tensor(const char *fn, const char *name, const ta_tensor *t,
                              ta_sdpa_check check)
{
    /* Q, K, V: float32, float16 or bfloat16 (storage types; sdpa_dtype.c) */
    return check == TA_SDPA_SHAPES_ONLY ? ta_tensor_check_layout(fn, name, t)
                                        : ta_tensor_check_storage(fn, name, t);
}

static ta_status check_rank4(const char *fn, const char *name, const ta_tensor *t,
                             const char *dims, ta_sdpa_check check)
{
    ta_status st = check_tensor(fn, name, t, check);
    if (st) return st;
    if (t->ndim != 4) {
        char s[TA_SHAPE_STR_MAX];
        return ta_error(TA_ESHAPE, "%s: %s must have 4 dims %s, got %d (%s)", fn, name, dims,
                        t->ndim, ta_shape_str(s, sizeof s, t->ndim, t->shape));
    }
    return TA_OK;
}

/* Q, K, V: ranks and the extents they share. */
ta_status ta_sdpa_check_qkv(const char *fn, const ta_tensor *Q, const ta_tensor *K,
                            const ta_tensor *V, ta_sdpa_check check)
{
    ta_status st = check_rank4(fn, "Q", Q, "[B, H, Lq, D]", check);
    if (!st) st = check_rank4(fn, "K", K, "[B, Hkv, Lk, D]", check);
    if (!st) st = check_rank4(fn, "V", V, "[B, Hkv, Lk, Dv]", check);
    if (st) return st;
    const int64_t B = Q->shape[0], H = Q->shape[1], D = Q->shape[3], Hkv = K->shape[1];
    if (K->shape[0] != B)
        return ta_error(TA_ESHAPE, "%s: K has batch %lld but Q has %lld", fn,
                        (long long)K->shape[0], (long long)B);
    if (V->shape[0] != B)
        return ta_error(TA_ESHAPE, "%s: V has batch %lld but Q has %lld", fn,
                        (long long)V->shape[0], (long long)B);
    if (K->shape[3] != D)
        return ta_error(TA_ESHAPE, "%s: K has head_dim %lld but Q has %lld", fn,
                        (long long)K->shape[3], (long long)D);
    if (V->shape[1] != Hkv)
        return ta_error(TA_ESHAPE, "%s: V has %lld heads but K has %lld", fn,
                        (long long)V->shape[1], (long long)Hkv);
    if (V->shape[2] != K->shape[2])
        return ta_error(TA_ESHAPE, "%s: V has %lld keys but K has %lld", fn,
                        (long long)V->shape[2], (long long)K->shape[2]);
    if (Hkv == 0 ? H != 0 : H % Hkv != 0)
        return ta_error(TA_ESHAPE, "%s: Q has %lld heads, not a multiple of the %lld heads of "
                        "K and V", fn, (long long)H, (long long)Hkv);
    return TA_OK;
}

/* Every output against every input and every other output (NULL entries are absent). */
static ta_status check_overlaps(const char *fn, int nout, ta_tensor *const *outs,
                                const char *const *out_names, int nin,
                                const ta_tensor *const *ins, const char *const *in_names)
{
    for (int o = 0; o < nout; o++) {
        if (!outs[o]) continue;
        for (int i = 0; i < nin; i++)
            if (ins[i] && ta_tensors_overlap(outs[o], ins[i]))
                return ta_error(TA_EINVAL, "%s: %s overlaps %s; outputs must not share memory "
                                "with inputs or other outputs", fn, out_names[o], in_names[i]);
        for (int o2 = o + 1; o2 < nout; o2++)
            if (outs[o2] && ta_tensors_overlap(outs[o], outs[o2]))
                return ta_error(TA_EINVAL, "%s: %s overlaps %s; outputs must not share memory "
                                "with inputs or other outputs", fn, out_names[o], out_names[o2]);
    }
    return TA_OK;
}

/* A caller's workspace apart from every tensor of the call (outputs, then inputs) and from
 * the key lengths the kernels read while it holds their scratch. */
static ta_status check_workspace(const char *fn, const ta_sdpa_opts *opts, int64_t B,
                                 int nout, ta_tensor *const *outs, const char *const *out_names,
                                 int nin, const ta_tensor *const *ins,
                                 const char *const *in_names)
{
    if (!opts) return TA_OK;
    const ta_workspace *w = &opts->workspace;
    ta_status st = ta_workspace_check(fn, w, nout, (const ta_tensor *const *)outs, out_names);
    if (!st) st = ta_workspace_check(fn, w, nin, ins, in_names);
    if (!st)
        st = ta_workspace_check_bytes(fn, w, opts->key_lengths, (size_t)B * sizeof(int64_t),
                                      "opts->key_lengths");
    return st;
}

ta_status ta_sdpa_check_rank4(const char *fn, const char *name, const ta_tensor *t,
                              const char *dims)
{
    return check_rank4(fn, name, t, dims, TA_SDPA_CHECK_ALL);
}

ta_status ta_sdpa_check_overlaps(const char *fn, int nout, ta_tensor *const *outs,
                                 const char *const *out_names, int nin,
                                 const ta_tensor *const *ins, const char *const *in_names)
{
    return check_overlaps(fn, nout, outs, out_names, nin, ins, in_names);
}

/* The part of a forward and a backward call they share: Q, K, V, O's shape (an output
 * or, in the backward, an input), the options. */
static ta_status prepare_common(ta_sdpa_problem *p, const char *fn, ta_tensor *O,
                                const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                                const ta_sdpa_opts *opts, bool o_is_output, ta_sdpa_check check)
{
    static const ta_sdpa_opts defaults = {0};
    if (!opts) opts = &defaults;
    if (ta_sdpa_seqs_given(opts)) /* the public entries hand these to sdpa_seqs.c */
        return ta_error(TA_EINVAL, "%s: variable-length batches (opts->cu_seqlens_q/k) are "
                        "not taken here", fn);
    ta_status st = ta_sdpa_check_qkv(fn, Q, K, V, check);
    if (st) return st;
    if (!O) return ta_error(TA_EINVAL, "%s: O is NULL", fn);

    const int64_t B = Q->shape[0], H = Q->shape[1], Lq = Q->shape[2], D = Q->shape[3];
    const int64_t Hkv = K->shape[1], Lk = K->shape[2], Dv = V->shape[3];
    /* With D = Dv = 0 every tensor is empty whatever B, H, Lq and Lk are, so their
     * products (rows, scores) are not bounded by any tensor's size: check them. */
    int64_t nscores;
    const int64_t problem[4] = {B, H, Lq, Lk > 0 ? Lk : 1};
    if (!ta_shape_numel(&nscores, 4, problem))
        return ta_error(TA_ESHAPE, "%s: B * H * Lq * Lk = %lld * %lld * %lld * %lld overflows",
                        fn, (long long)B, (long long)H, (long long)Lq, (long long)Lk);

    const int layout = check == TA_SDPA_SHAPES_ONLY ? TA_CHECK_LAYOUT_ONLY : 0;
    const int64_t oshape[4] = {B, H, Lq, Dv}, wshape[4] = {B, H, Lq, Lk};
    st = ta_tensor_check_shape(fn, "O", O, 4, oshape, "[B, H, Lq, Dv]",
                               layout | TA_CHECK_STORAGE | (o_is_output ? TA_CHECK_OUTPUT : 0));
    if (!st && opts->weights)
        st = ta_tensor_check_shape(fn, "opts->weights", opts->weights, 4, wshape,
                                   "[B, H, Lq, Lk]", layout | TA_CHECK_OUTPUT);
    if (!st && opts->lse)
        st = ta_tensor_check_shape(fn, "opts->lse", opts->lse, 3, wshape, "[B, H, Lq]",
                                   layout | TA_CHECK_OUTPUT);
    if (st) return st;

    if (!isfinite(opts->scale))
        return ta_error(TA_EINVAL, "%s: opts->scale must be finite, got %g", fn,
                        (double)opts->scale);
    if (opts->path != TA_SDPA_AUTO && opts->path != TA_SDPA_REFERENCE &&
        opts->path != TA_SDPA_FUSED)
        return ta_error(TA_EINVAL, "%s: opts->path = %d is not a ta_sdpa_path value", fn,
                        (int)opts->path);
    ta_mask_plan mp;
    st = ta_mask_plan_init(&mp, fn, B, H, Lq, Lk, opts->causal, opts->mask, opts->mask_mode,
                           opts->key_lengths, check == TA_SDPA_CHECK_ALL);
    if (st) return st;
    ta_sdpa_variants var;
    st = ta_sdpa_variants_init(&var, fn, opts, B, H, !o_is_output, check == TA_SDPA_CHECK_ALL);
    if (st) return st;
    var.delta = ta_sdpa_delta(&var, Lq, Lk);

    *p = (ta_sdpa_problem){
        .fn = fn, .B = B, .H = H, .Hkv = Hkv, .G = Hkv ? H / Hkv : 1, .Lq = Lq, .Lk = Lk,
        .D = D, .Dv = Dv, .mask = mp, .var = var, .Q = Q, .K = K, .V = V, .O = O,
        .weights = opts->weights, .lse = opts->lse};
    p->scale = opts->scale != 0.0f ? opts->scale
                                   : (D > 0 ? (float)(1.0 / sqrt((double)D)) : 1.0f);
    /* The fused path never forms the weights: AUTO takes it unless they are wanted (or
     * a variant it does not implement yet is set). */
    const char *gap = ta_sdpa_variants_fused_gap(&var);
    p->path = opts->path != TA_SDPA_AUTO ? opts->path
              : opts->weights || gap     ? TA_SDPA_REFERENCE
                                         : TA_SDPA_FUSED;
    if (p->path == TA_SDPA_FUSED && gap)
        return ta_error(TA_EUNSUPPORTED, "%s: the fused path (TA_SDPA_FUSED) does not implement "
                        "a %s; use TA_SDPA_REFERENCE or TA_SDPA_AUTO", fn, gap);
    return TA_OK;
}

ta_status ta_sdpa_prepare(ta_sdpa_problem *p, const char *fn, ta_tensor *O, const ta_tensor *Q,
                          const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts,
                          ta_sdpa_check check)
{
    ta_sdpa_problem q;
    ta_status st = prepare_common(&q, fn, O, Q, K, V, opts, true, check);
    if (st) return st;
    if (q.path == TA_SDPA_FUSED && q.weights)
        return ta_error(TA_EUNSUPPORTED, "%s: the fused path (TA_SDPA_FUSED) never forms the "
                        "[B, H, Lq, Lk] weights; request them with TA_SDPA_REFERENCE or "
                        "TA_SDPA_AUTO", fn);
    if (check == TA_SDPA_CHECK_ALL) {
        ta_tensor *outs[3] = {O, q.weights, q.lse};
        const char *out_names[3] = {"O", "opts->weights", "opts->lse"};
        const ta_tensor *ins[6] = {Q, K, V, opts ? opts->mask : NULL,
                                   opts ? opts->alibi_slopes : NULL, opts ? opts->sinks : NULL};
        const char *in_names[6] = {"Q", "K", "V", "opts->mask", "opts->alibi_slopes",
                                   "opts->sinks"};
        if ((st = check_overlaps(fn, 3, outs, out_names, 6, ins, in_names)) ||
            (st = check_workspace(fn, opts, q.B, 3, outs, out_names, 6, ins, in_names)))
            return st;
    }
    *p = q;
    return TA_OK;
}

ta_status ta_sdpa_prepare_backward(ta_sdpa_problem *p, const char *fn, ta_tensor *dQ,
                                   ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                                   const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                                   const ta_tensor *O, const ta_tensor *lse,
                                   const ta_sdpa_opts *opts, ta_sdpa_check check)
{
    if (opts && opts->weights)
        return ta_error(TA_EINVAL, "%s: opts->weights must be NULL (the backward has no "
                        "weights output)", fn);
    if (opts && opts->lse)
        return ta_error(TA_EINVAL, "%s: opts->lse must be NULL (pass the forward's LSE as the "
                        "lse argument)", fn);
    /* The forward's checks (Q, K, V, options, O's shape); O is an input here. */
    ta_sdpa_problem q;
    ta_status st = prepare_common(&q, fn, (ta_tensor *)O, Q, K, V, opts, false, check);
    if (st) return st;
    const int layout = check == TA_SDPA_SHAPES_ONLY ? TA_CHECK_LAYOUT_ONLY : 0;
    const int64_t qs[4] = {q.B, q.H, q.Lq, q.D}, os[4] = {q.B, q.H, q.Lq, q.Dv};
    const int64_t ks[4] = {q.B, q.Hkv, q.Lk, q.D}, vs[4] = {q.B, q.Hkv, q.Lk, q.Dv};
    st = ta_tensor_check_shape(fn, "dO", dO, 4, os, "[B, H, Lq, Dv]", layout | TA_CHECK_STORAGE);
    if (!st) st = ta_tensor_check_shape(fn, "lse", lse, 3, os, "[B, H, Lq]", layout);
    if (!st) st = ta_tensor_check_shape(fn, "dQ", dQ, 4, qs, "[B, H, Lq, D]", layout | TA_CHECK_STORAGE | TA_CHECK_OUTPUT);
    if (!st) st = ta_tensor_check_shape(fn, "dK", dK, 4, ks, "[B, Hkv, Lk, D]", layout | TA_CHECK_STORAGE | TA_CHECK_OUTPUT);
    if (!st) st = ta_tensor_check_shape(fn, "dV", dV, 4, vs, "[B, Hkv, Lk, Dv]", layout | TA_CHECK_STORAGE | TA_CHECK_OUTPUT);
    if (st) return st;
    if (check == TA_SDPA_CHECK_ALL) {
        ta_tensor *outs[4] = {dQ, dK, dV, q.var.dsinks};
        const char *out_names[4] = {"dQ", "dK", "dV", "opts->dsinks"};
        const ta_tensor *ins[9] = {Q, K, V, O, dO, lse, opts ? opts->mask : NULL,
                                   opts ? opts->alibi_slopes : NULL, opts ? opts->sinks : NULL};
        const char *in_names[9] = {"Q", "K", "V", "O", "dO", "lse", "opts->mask",
                                   "opts->alibi_slopes", "opts->sinks"};
        if ((st = check_overlaps(fn, 4, outs, out_names, 9, ins, in_names)) ||
            (st = check_workspace(fn, opts, q.B, 4, outs, out_names, 9, ins, in_names)))
            return st;
    }
    q.backward = true;
    q.dO = dO;
    q.fwd_lse = lse;
    q.dQ = dQ;
    q.dK = dK;
    q.dV = dV;
    *p = q;
    return TA_OK;
}

/* ------------------------------------------------------------- dispatch */

/* The implementation's own scratch (float32 tensors throughout, after staging). */
static size_t impl_scratch_bytes(const ta_sdpa_problem *p)
{
    if (p->backward)
        return p->path == TA_SDPA_REFERENCE ? ta_sdpa_backward_reference_scratch(p)
                                            : ta_sdpa_backward_fused_scratch(p);
    return p->path == TA_SDPA_REFERENCE ? ta_sdpa_forward_reference_scratch(p)
                                        : ta_sdpa_forward_fused_scratch(p);
}

static ta_status impl_run(const ta_sdpa_problem *p, ta_arena *scratch)
{
    if (p->pages.table && (p->backward || p->path == TA_SDPA_REFERENCE))
        return ta_error(TA_EINTERNAL, "%s: paged K and V reach the fused forward only", p->fn);
    if (p->backward)
        return p->path == TA_SDPA_REFERENCE ? ta_sdpa_backward_reference(p, scratch)
                                            : ta_sdpa_backward_fused(p, scratch);
    return p->path == TA_SDPA_REFERENCE ? ta_sdpa_forward_reference(p, scratch)
                                        : ta_sdpa_forward_fused(p, scratch);
}

size_t ta_sdpa_scratch_bytes(const ta_sdpa_problem *p)
{
    ta_sdpa_staging s;
    ta_sdpa_stage_plan(&s, p);
    return ta_size_sum(ta_sdpa_stage_bytes(&s), impl_scratch_bytes(&s.p));
}

ta_status ta_sdpa_run(const ta_sdpa_problem *p, ta_arena *scratch)
{
    ta_sdpa_staging s;
    ta_sdpa_stage_plan(&s, p);
    ta_status st = ta_sdpa_stage_in(&s, scratch);
    if (!st) st = impl_run(&s.p, scratch);
    if (!st) ta_sdpa_stage_out(&s);
    return st;
}

/* One scratch block for the call, the run, the block back. */
static ta_status run_with_scratch(const ta_sdpa_problem *p, const ta_workspace *ws)
{
    ta_scratch s;
    ta_status st = ta_scratch_acquire(&s, p->fn, ws, ta_sdpa_scratch_bytes(p));
    if (st) return st;
    ta_arena a = ta_arena_over(s.base, s.size);
    st = ta_sdpa_run(p, &a);
    ta_scratch_release(&s);
    return st;
}

static ta_status size_out(size_t *bytes, const char *fn, const ta_sdpa_problem *p)
{
    size_t n = ta_sdpa_scratch_bytes(p);
    if (n == SIZE_MAX)
        return ta_error(TA_ENOMEM, "%s: the scratch for these shapes does not fit in memory",
                        fn);
    *bytes = ta_workspace_bytes(n);
    return TA_OK;
}

/* ----------------------------------------------------------- public entries */

/* A dense forward, run; delta (may be NULL) replaces the window's and ALiBi's offset. */
static ta_status forward(ta_tensor *O, const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                         const ta_sdpa_opts *opts, const int64_t *delta)
{
    ta_sdpa_problem p;
    ta_status st = ta_sdpa_prepare(&p, "ta_sdpa", O, Q, K, V, opts, TA_SDPA_CHECK_ALL);
    if (st) return st;
    if (delta) p.var.delta = *delta;
    return run_with_scratch(&p, opts ? &opts->workspace : NULL);
}

/* Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv] -> O [B,H,Lq,Dv] */
ta_status ta_sdpa(ta_tensor *O, const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                  const ta_sdpa_opts *opts)
{
    if (ta_sdpa_seqs_given(opts)) return ta_sdpa_seqs_forward(NULL, "ta_sdpa", O, Q, K, V, opts);
    return forward(O, Q, K, V, opts, NULL);
}

ta_status ta_sdpa_at(ta_tensor *O, const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                     const ta_sdpa_opts *opts, int64_t delta)
{
    return forward(O, Q, K, V, opts, &delta);
}

ta_status ta_sdpa_workspace_size(size_t *bytes, const ta_tensor *O, const ta_tensor *Q,
                                 const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts)
{
    const char *fn = "ta_sdpa_workspace_size";
    if (!bytes) return ta_error(TA_EINVAL, "%s: bytes is NULL", fn);
    if (ta_sdpa_seqs_given(opts))
        return ta_sdpa_seqs_forward(bytes, fn, (ta_tensor *)O, Q, K, V, opts);
    ta_sdpa_problem p;
    ta_status st = ta_sdpa_prepare(&p, fn, (ta_tensor *)O, Q, K, V, opts, TA_SDPA_CHECK_ALL);
    return st ? st : size_out(bytes, fn, &p);
}

/* A dense backward, run; delta as forward's. */
static ta_status backward(ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                          const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                          const ta_tensor *O, const ta_tensor *lse, const ta_sdpa_opts *opts,
                          const int64_t *delta)
{
    ta_sdpa_problem p;
    ta_status st = ta_sdpa_prepare_backward(&p, "ta_sdpa_backward", dQ, dK, dV, dO, Q, K, V, O,
                                            lse, opts, TA_SDPA_CHECK_ALL);
    if (st) return st;
    if (delta) p.var.delta = *delta;
    return run_with_scratch(&p, opts ? &opts->workspace : NULL);
}

/* dO [B,H,Lq,Dv], Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv], O [B,H,Lq,Dv], lse [B,H,Lq]
 * -> dQ [B,H,Lq,D], dK [B,Hkv,Lk,D], dV [B,Hkv,Lk,Dv] */
ta_status ta_sdpa_backward(ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                           const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                           const ta_tensor *O, const ta_tensor *lse, const ta_sdpa_opts *opts)
{
    if (ta_sdpa_seqs_given(opts))
        return ta_sdpa_seqs_backward(NULL, "ta_sdpa_backward", dQ, dK, dV, dO, Q, K, V, O, lse,
                                     opts);
    return backward(dQ, dK, dV, dO, Q, K, V, O, lse, opts, NULL);
}

ta_status ta_sdpa_backward_at(ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                              const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                              const ta_tensor *O, const ta_tensor *lse, const ta_sdpa_opts *opts,
                              int64_t delta)
{
    return backward(dQ, dK, dV, dO, Q, K, V, O, lse, opts, &delta);
}

ta_status ta_sdpa_backward_workspace_size(size_t *bytes, const ta_tensor *dQ,
                                          const ta_tensor *dK, const ta_tensor *dV,
                                          const ta_tensor *dO, const ta_tensor *Q,
                                          const ta_tensor *K, const ta_tensor *V,
                                          const ta_tensor *O, const ta_tensor *lse,
                                          const ta_sdpa_opts *opts)
{
    const char *fn = "ta_sdpa_backward_workspace_size";
    if (!bytes) return ta_error(TA_EINVAL, "%s: bytes is NULL", fn);
    if (ta_sdpa_seqs_given(opts))
        return ta_sdpa_seqs_backward(bytes, fn, (ta_tensor *)dQ, (ta_tensor *)dK,
                                     (ta_tensor *)dV, dO, Q, K, V, O, lse, opts);
    ta_sdpa_problem p;
    ta_status st = ta_sdpa_prepare_backward(&p, fn, (ta_tensor *)dQ, (ta_tensor *)dK,
                                            (ta_tensor *)dV, dO, Q, K, V, O, lse, opts,
                                            TA_SDPA_CHECK_ALL);
    return st ? st : size_out(bytes, fn, &p);
}
