/* ta_sdpa: argument validation, path dispatch, and the reference path, which follows
 * the seed literally:
 *     scores  = einsum('bhid,bhjd->bhij', Q, K) * scale
 *     scores.masked_fill_(blocked, -inf)        (+ additive mask)
 *     weights = softmax(scores, dim=-1)
 *     O       = einsum('bhij,bhjd->bhid', weights, V)
 * with DESIGN.md's rule for rows that attend to nothing (weights 0, O 0, LSE -inf). */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "ops/sdpa.h"

#include <math.h>
#include <string.h>

/* -------------------------------------------------------------- validation */

static ta_status check_rank4(const char *fn, const char *name, const ta_tensor *t,
                             const char *dims)
{
    ta_status st = ta_tensor_check(fn, name, t);
    if (st) return st;
    if (t->ndim != 4) {
        char s[TA_SHAPE_STR_MAX];
        return ta_error(TA_ESHAPE, "%s: %s must have 4 dims %s, got %d (%s)", fn, name, dims,
                        t->ndim, ta_shape_str(s, sizeof s, t->ndim, t->shape));
    }
    return TA_OK;
}

static ta_status check_no_overlap(const char *fn, const char *out_name, const ta_tensor *out,
                                  const char *in_name, const ta_tensor *in)
{
    if (out && in && ta_tensors_overlap(out, in))
        return ta_error(TA_EINVAL, "%s: %s overlaps %s; outputs must not share memory with "
                        "inputs or other outputs", fn, out_name, in_name);
    return TA_OK;
}

ta_status ta_sdpa_validate(ta_sdpa_problem *p, const char *fn, ta_tensor *O, const ta_tensor *Q,
                           const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts)
{
    return ta_sdpa_validate_ext(p, fn, O, Q, K, V, opts, true);
}

ta_status ta_sdpa_validate_ext(ta_sdpa_problem *p, const char *fn, ta_tensor *O,
                               const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                               const ta_sdpa_opts *opts, bool o_is_output)
{
    static const ta_sdpa_opts defaults = {0};
    if (!opts) opts = &defaults;
    ta_status st = check_rank4(fn, "Q", Q, "[B, H, Lq, D]");
    if (!st) st = check_rank4(fn, "K", K, "[B, Hkv, Lk, D]");
    if (!st) st = check_rank4(fn, "V", V, "[B, Hkv, Lk, Dv]");
    if (st) return st;
    if (!O) return ta_error(TA_EINVAL, "%s: O is NULL", fn);

    int64_t B = Q->shape[0], H = Q->shape[1], Lq = Q->shape[2], D = Q->shape[3];
    int64_t Hkv = K->shape[1], Lk = K->shape[2], Dv = V->shape[3];
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
    if (V->shape[2] != Lk)
        return ta_error(TA_ESHAPE, "%s: V has %lld keys but K has %lld", fn,
                        (long long)V->shape[2], (long long)Lk);
    if (Hkv == 0 ? H != 0 : H % Hkv != 0)
        return ta_error(TA_ESHAPE, "%s: Q has %lld heads, not a multiple of the %lld heads of "
                        "K and V", fn, (long long)H, (long long)Hkv);
    /* With D = Dv = 0 every tensor is empty whatever B, H, Lq and Lk are, so their
     * products (rows, scores) are not bounded by any tensor's size: check them. */
    int64_t nscores;
    const int64_t problem[4] = {B, H, Lq, Lk > 0 ? Lk : 1};
    if (!ta_shape_numel(&nscores, 4, problem))
        return ta_error(TA_ESHAPE, "%s: B * H * Lq * Lk = %lld * %lld * %lld * %lld overflows",
                        fn, (long long)B, (long long)H, (long long)Lq, (long long)Lk);

    const int64_t oshape[4] = {B, H, Lq, Dv}, wshape[4] = {B, H, Lq, Lk};
    st = ta_tensor_check_shape(fn, "O", O, 4, oshape, "[B, H, Lq, Dv]", o_is_output);
    if (!st && opts->weights)
        st = ta_tensor_check_shape(fn, "opts->weights", opts->weights, 4, wshape, "[B, H, Lq, Lk]", true);
    if (!st && opts->lse)
        st = ta_tensor_check_shape(fn, "opts->lse", opts->lse, 3, wshape, "[B, H, Lq]", true);
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
                           opts->key_lengths);
    if (st) return st;

    /* Outputs may not share memory with the inputs or with each other. */
    const ta_tensor *ins[4] = {Q, K, V, opts->mask};
    const char *in_names[4] = {"Q", "K", "V", "opts->mask"};
    ta_tensor *outs[3] = {o_is_output ? O : NULL, opts->weights, opts->lse};
    const char *out_names[3] = {"O", "opts->weights", "opts->lse"};
    for (int o = 0; o < 3 && !st; o++) {
        for (int i = 0; i < 4 && !st; i++)
            st = check_no_overlap(fn, out_names[o], outs[o], in_names[i], ins[i]);
        for (int o2 = o + 1; o2 < 3 && !st; o2++)
            st = check_no_overlap(fn, out_names[o], outs[o], out_names[o2], outs[o2]);
    }
    if (st) return st;

    *p = (ta_sdpa_problem){
        .O = O, .Q = Q, .K = K, .V = V, .B = B, .H = H, .Hkv = Hkv, .Lq = Lq, .Lk = Lk,
        .D = D, .Dv = Dv, .mask = mp, .weights = opts->weights, .lse = opts->lse,
        .path = opts->path};
    p->scale = opts->scale != 0.0f ? opts->scale
                                   : (D > 0 ? (float)(1.0 / sqrt((double)D)) : 1.0f);
    return TA_OK;
}

/* ----------------------------------------------------------- reference path */

/* A 5-d view [B, Hkv, G, L, X] of a [B, H, L, X] tensor, splitting the head axis into
 * (kv head, group member): head h = k * G + g. Splitting one axis is always a view. */
ta_tensor ta_sdpa_split_heads(const ta_tensor *t, int64_t G)
{
    ta_tensor v = *t;
    v.owned = NULL;
    v.ndim = 5;
    v.shape[0] = t->shape[0];
    v.shape[1] = G ? t->shape[1] / G : 0;
    v.shape[2] = G;
    v.shape[3] = t->shape[2];
    v.shape[4] = t->shape[3];
    v.stride[0] = t->stride[0];
    v.stride[1] = t->stride[1] * G;
    v.stride[2] = t->stride[1];
    v.stride[3] = t->stride[2];
    v.stride[4] = t->stride[3];
    return v;
}

/* C = einsum(A x B) over heads, where A has all H heads and B only Hkv: with groups
 * (G > 1) A and C are split into [B, Hkv, G, ., .] views and B is shared across the
 * group by the einsum itself (its 'g' index is absent from B), so K and V are never
 * repeated in memory. */
ta_status ta_sdpa_group_einsum(const char *spec4, const char *spec5, ta_tensor *C,
                               const ta_tensor *A, const ta_tensor *Bt, int64_t G)
{
    if (G == 1) return ta_einsum(C, spec4, A, Bt);
    ta_tensor a5 = ta_sdpa_split_heads(A, G), c5 = ta_sdpa_split_heads(C, G);
    return ta_einsum(&c5, spec5, &a5, Bt);
}

/* Mask, softmax and LSE of every score row (b, h, i) of S, in place. Rows are
 * independent, so the thread split cannot change any result. */
static void softmax_rows(const ta_sdpa_problem *p, ta_tensor *S, float *lse)
{
    int64_t H = p->H, Lq = p->Lq, Lk = p->Lk, rows = p->B * H * Lq;
    int nt = rows * Lk < 32768 ? 1 : ta_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
        float *s = (float *)S->data + b * S->stride[0] + h * S->stride[1] + i * S->stride[2];
        ta_mask_apply(&p->mask, b, h, i, 0, Lk, p->scale, s, S->stride[3]);
        lse[r] = ta_softmax_row(s, S->stride[3], s, S->stride[3], Lk);
    }
}

/* O rows whose LSE is -inf attend to nothing: O = 0 there, whatever V holds. */
static void zero_empty_rows(const ta_sdpa_problem *p, const float *lse)
{
    const ta_tensor *O = p->O;
    int64_t H = p->H, Lq = p->Lq, rows = p->B * H * Lq;
    for (int64_t r = 0; r < rows; r++) {
        if (lse[r] != -INFINITY) continue;
        int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
        float *o = (float *)O->data + b * O->stride[0] + h * O->stride[1] + i * O->stride[2];
        for (int64_t d = 0; d < p->Dv; d++) o[d * O->stride[3]] = 0.0f;
    }
}

static void store_lse(ta_tensor *out, const float *lse, int64_t H, int64_t Lq)
{
    int64_t rows = out->shape[0] * H * Lq;
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
        ((float *)out->data)[b * out->stride[0] + h * out->stride[1] + i * out->stride[2]] = lse[r];
    }
}

ta_status ta_sdpa_reference_run(const ta_sdpa_problem *p)
{
    int64_t B = p->B, H = p->H, Lq = p->Lq, Lk = p->Lk;
    int64_t rows = B * H * Lq, G = p->Hkv ? H / p->Hkv : 1;
    if (rows == 0) return TA_OK;

    /* Scratch, all allocated before any output is written: the score/weight matrix
     * (unless the caller's weights tensor can hold it) and the per-row LSE. */
    size_t nlse, nscore;
    if (!ta_mul_size(&nlse, (size_t)rows, sizeof(float)) ||
        !ta_mul_size(&nscore, (size_t)rows, (size_t)Lk) ||
        !ta_mul_size(&nscore, nscore, sizeof(float)))
        return ta_error(TA_ENOMEM, "ta_sdpa: the [B, H, Lq, Lk] score scratch is too large");
    float *lse = ta_alloc(nlse);
    if (!lse) return TA_ENOMEM;
    ta_tensor S = {0};
    float *scratch = NULL;
    if (p->weights) {
        S = *p->weights;
    } else if (Lk > 0) {
        scratch = ta_alloc(nscore);
        if (!scratch) {
            ta_free(lse);
            return TA_ENOMEM;
        }
        const int64_t shape[4] = {B, H, Lq, Lk};
        ta_tensor_from_buffer(&S, scratch, 4, shape, NULL);
    }

    ta_status st = TA_OK;
    if (Lk > 0) {
        /* 1. scores = Q K^T (an empty contraction D = 0 gives zeros) */
        if (p->D > 0)
            st = ta_sdpa_group_einsum("bhid,bhjd->bhij", "bkgid,bkjd->bkgij", &S, p->Q, p->K, G);
        else
            st = ta_tensor_fill(&S, 0.0f);
        /* 2. scale, mask, softmax over the keys */
        if (!st) softmax_rows(p, &S, lse);
        /* 3. O = weights V */
        if (!st && p->Dv > 0)
            st = ta_sdpa_group_einsum("bhij,bhjd->bhid", "bkgij,bkjd->bkgid", p->O, &S, p->V, G);
    } else {
        for (int64_t r = 0; r < rows; r++) lse[r] = -INFINITY; /* no keys at all */
    }
    if (!st) {
        zero_empty_rows(p, lse);
        if (p->lse) store_lse(p->lse, lse, H, Lq);
    }
    ta_free(scratch);
    ta_free(lse);
    return st;
}

/* ----------------------------------------------------------------- dispatch */

/* Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv] -> O [B,H,Lq,Dv] */
ta_status ta_sdpa(ta_tensor *O, const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                  const ta_sdpa_opts *opts)
{
    ta_sdpa_problem p;
    ta_status st = ta_sdpa_validate(&p, "ta_sdpa", O, Q, K, V, opts);
    if (st) return st;
    switch (p.path) {
    case TA_SDPA_FUSED:
        return ta_sdpa_fused_run(&p); /* refuses weights: it never forms them */
    case TA_SDPA_AUTO: /* fused unless the weights are wanted */
        return p.weights ? ta_sdpa_reference_run(&p) : ta_sdpa_fused_run(&p);
    case TA_SDPA_REFERENCE:
    default:
        return ta_sdpa_reference_run(&p);
    }
}
