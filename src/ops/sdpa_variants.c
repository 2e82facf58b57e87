/* The attention variants (sdpa_variants.h): the front door's checks of their options,
 * and the per-score definitions the reference paths follow literally (they are the
 * oracle the fused path is tested against). */
#include "ops/sdpa_variants.h"

#include "core/core.h"
#include "core/dtype.h"
#include "core/tensor_internal.h"
#include "ops/sdpa.h"

#include <math.h>

/* ------------------------------------------------------------ validation */

/* A float32 [H] (or, when B > 0, also [B, H]) tensor of per-head values: *sb, *sh its
 * strides over (b, h) (sb 0 for [H]). */
static ta_status check_per_head(const char *fn, const char *name, const ta_tensor *t,
                                int64_t B, int64_t H, bool allow_bh, bool check_data,
                                int64_t *sb, int64_t *sh)
{
    char s[TA_SHAPE_STR_MAX];
    if (t->dtype != TA_F32)
        return ta_error(TA_EINVAL, "%s: %s has dtype %d; it must be float32 (TA_F32)", fn,
                        name, (int)t->dtype);
    ta_status st = check_data ? ta_tensor_check(fn, name, t) : ta_tensor_check_layout(fn, name, t);
    if (st) return st;
    if (t->ndim == 1 && t->shape[0] == H) {
        *sb = 0;
        *sh = t->stride[0];
        return TA_OK;
    }
    if (allow_bh && t->ndim == 2 && t->shape[0] == B && t->shape[1] == H) {
        *sb = t->stride[0];
        *sh = t->stride[1];
        return TA_OK;
    }
    ta_shape_str(s, sizeof s, t->ndim, t->shape);
    if (allow_bh)
        return ta_error(TA_EINVAL, "%s: %s has shape %s; expected [H] = [%lld] or [B, H] = "
                        "[%lld, %lld]", fn, name, s, (long long)H, (long long)B, (long long)H);
    return ta_error(TA_EINVAL, "%s: %s has shape %s; expected [H] = [%lld]", fn, name, s,
                    (long long)H);
}

ta_status ta_sdpa_variants_init(ta_sdpa_variants *v, const char *fn, const ta_sdpa_opts *opts,
                                int64_t B, int64_t H, bool backward, bool check_data)
{
    ta_sdpa_variants w = {.top_left = opts->causal == TA_CAUSAL_TOP_LEFT, .left = -1,
                          .right = -1};
    if (!isfinite(opts->softcap) || opts->softcap < 0.0f)
        return ta_error(TA_EINVAL, "%s: opts->softcap must be finite and >= 0 (0: off), got %g",
                        fn, (double)opts->softcap);
    w.softcap = opts->softcap;
    if (opts->has_window) {
        if (opts->window_left < -1)
            return ta_error(TA_EINVAL, "%s: opts->window_left = %lld is below -1 (-1: unbounded)",
                            fn, (long long)opts->window_left);
        if (opts->window_right < -1)
            return ta_error(TA_EINVAL, "%s: opts->window_right = %lld is below -1 (-1: "
                            "unbounded)", fn, (long long)opts->window_right);
        w.left = opts->window_left;
        w.right = opts->window_right;
        w.window = w.left >= 0 || w.right >= 0; /* (-1, -1) bounds nothing */
    }
    int64_t unused;
    ta_status st;
    if (opts->alibi_slopes) {
        st = check_per_head(fn, "opts->alibi_slopes", opts->alibi_slopes, B, H, true, check_data,
                            &w.alibi_sb, &w.alibi_sh);
        if (st) return st;
        w.alibi = opts->alibi_slopes->data;
    }
    if (opts->sinks) {
        st = check_per_head(fn, "opts->sinks", opts->sinks, B, H, false, check_data, &unused,
                            &w.sinks_s);
        if (st) return st;
        w.sinks = opts->sinks->data;
    }
    if (opts->dsinks) {
        if (!backward)
            return ta_error(TA_EINVAL, "%s: opts->dsinks is an output of ta_sdpa_backward; it "
                            "must be NULL here", fn);
        if (!opts->sinks)
            return ta_error(TA_EINVAL, "%s: opts->dsinks needs opts->sinks (the sinks of the "
                            "forward call)", fn);
        const int64_t hs[1] = {H};
        st = opts->dsinks->dtype != TA_F32
                 ? ta_error(TA_EINVAL, "%s: opts->dsinks has dtype %d; it must be float32 (TA_F32)",
                            fn, (int)opts->dsinks->dtype)
                 : ta_tensor_check_shape(fn, "opts->dsinks", opts->dsinks, 1, hs, "[H]",
                                         TA_CHECK_OUTPUT | (check_data ? 0 : TA_CHECK_LAYOUT_ONLY));
        if (st) return st == TA_ESHAPE ? TA_EINVAL : st; /* the header's contract: EINVAL */
        w.dsinks = opts->dsinks;
    }
    w.any = w.window || w.softcap > 0.0f || w.alibi || w.sinks;
    *v = w;
    return TA_OK;
}

const char *ta_sdpa_variants_fused_gap(const ta_sdpa_variants *v)
{
    /* the fused forward and backward implement every variant; attn_softcap takes 1 / cap
     * as a normal float */
    return v->softcap > 0.0f && (v->softcap < 0x1p-126f || v->softcap > 0x1p126f)
               ? "softcap outside [2^-126, 2^126] (its reciprocal is not a normal float)"
               : NULL;
}

/* -------------------------------------------------------------- scores */

float ta_sdpa_lse_with_sink(float lse, float sigma)
{
    if (isnan(lse) || isnan(sigma)) return NAN;
    if (lse == -INFINITY) return sigma;
    if (sigma == -INFINITY) return lse;
    /* a +inf logit beside finite ones: inf - inf, NaN, as a +inf score makes its row */
    if (lse == INFINITY || sigma == INFINITY) return NAN;
    double m = lse > sigma ? lse : sigma;
    return (float)(m + log(exp((double)lse - m) + exp((double)sigma - m)));
}

double ta_sdpa_variant_score(const ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                             int64_t j, float x, double *dcap)
{
    const ta_sdpa_variants *v = &p->var;
    const ta_mask_plan *mp = &p->mask;
    if (dcap) *dcap = 1.0;
    /* blocked: causal or key length (the row's end), window, keep/block mask */
    int64_t lo, hi;
    ta_sdpa_window_keys(v, v->delta, p->Lk, i, &lo, &hi);
    if (j >= ta_mask_row_end(mp, b, i) || j < lo || j >= hi) return -INFINITY;
    double add = 0.0;
    const float *m = ta_mask_row_ptr(mp, b, h, i);
    if (m) {
        float mv = m[j * mp->mstride[3]];
        if (ta_mask_value_blocks(mp->mode, mv)) return -INFINITY;
        if (mp->mode == TA_MASK_ADDITIVE) add = mv;
    }
    double s = (double)p->scale * (double)x;
    if (v->softcap > 0.0f) {
        double t = tanh(s / (double)v->softcap);
        s = (double)v->softcap * t;
        if (dcap) *dcap = 1.0 - t * t;
    }
    int64_t rel = j - (i + v->delta);
    s -= (double)ta_sdpa_alibi_slope(v, b, h) * (double)(rel < 0 ? -rel : rel);
    return s + add;
}

void ta_sdpa_variant_row(const ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i, float *s,
                         int64_t stride)
{
    for (int64_t j = 0; j < p->Lk; j++)
        s[j * stride] = (float)ta_sdpa_variant_score(p, b, h, i, j, s[j * stride], NULL);
}

/* ------------------------------------------------------------ gradients */

/* The raw product q_i . k_j of row (b, h, i) and key j, in double from the stored values
 * (any dtype), rounded to float: the x that ta_sdpa_variant_score takes. */
static float raw_product(const ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const ta_tensor *Q = p->Q, *K = p->K;
    const int64_t eq = (int64_t)ta_elem_size(Q->dtype), ek = (int64_t)ta_elem_size(K->dtype);
    const char *q = (const char *)Q->data +
                    (b * Q->stride[0] + h * Q->stride[1] + i * Q->stride[2]) * eq;
    const char *k = (const char *)K->data + ta_sdpa_kv_offset(p, false, b, h / p->G, j) * ek;
    double acc = 0.0;
    for (int64_t d = 0; d < p->D; d++)
        acc += (double)ta_dtype_load(q + d * Q->stride[3] * eq, Q->dtype) *
               (double)ta_dtype_load(k + d * K->stride[3] * ek, K->dtype);
    return (float)acc;
}

float ta_sdpa_lse_split(const ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i, float lse,
                        float *lo)
{
    *lo = 0.0f;
    if (!(fabsf(lse) >= TA_SDPA_LSE_SPLIT_MIN) || isinf(lse)) return lse;
    /* online log-sum-exp in double over the sink and the keys' float scores */
    const float sigma = ta_sdpa_sink(&p->var, h);
    double m = sigma, sum = sigma == -INFINITY ? 0.0 : 1.0;
    /* only the keys the row may see (its causal end, key length and window: what
     * ta_sdpa_variant_score blocks before any product), so that a causal row of a
     * left-padded batch costs its own keys' products, not Lk of them */
    int64_t j0, j1;
    ta_sdpa_window_keys(&p->var, p->var.delta, p->Lk, i, &j0, &j1);
    j0 = TA_MAX(j0, 0);
    j1 = TA_MIN(TA_MIN(j1, p->Lk), ta_mask_row_end(&p->mask, b, i));
    for (int64_t j = j0; j < j1; j++) {
        const float s = (float)ta_sdpa_variant_score(p, b, h, i, j, raw_product(p, b, h, i, j), NULL);
        if (s == -INFINITY) continue;
        if (!isfinite(s)) return lse; /* NaN or +inf: the row is NaN whatever is done */
        if (s > m) {
            sum = sum * exp(m - (double)s) + 1.0;
            m = s;
        } else {
            sum += exp((double)s - m);
        }
    }
    if (!isfinite(m)) return lse;
    /* Only the LSE of these very keys: an LSE the float rounded from m + log(sum). One of
     * a larger row (context parallelism passes the whole row's LSE with a shard of its
     * keys, src/dist) is taken as it is. */
    const double ulp = (double)nextafterf(fabsf(lse), INFINITY) - (double)fabsf(lse);
    if (!(fabs((double)m + log(sum) - (double)lse) <= 4.0 * ulp)) return lse;
    *lo = (float)log(sum);
    return (float)m;
}

/* Element (b, h, i, c) of a rank-4 tensor (c = 0 of a rank-3 one), of any storage dtype,
 * as double. */
static double at4(const ta_tensor *t, int64_t b, int64_t h, int64_t i, int64_t c)
{
    const int64_t off = b * t->stride[0] + h * t->stride[1] + i * t->stride[2] +
                        (t->ndim > 3 ? c * t->stride[3] : 0);
    return (double)ta_dtype_load((const char *)t->data + off * (int64_t)ta_elem_size(t->dtype),
                                 t->dtype);
}

/* ta_sdpa_sink_grad_head; with p (a problem whose Q and K are at hand) a row of a huge
 * LSE takes the sink's weight exp((sigma - hi) - lo) of ta_sdpa_lse_split. */
static double sink_grad_head(const ta_sdpa_problem *p, const ta_tensor *O, const ta_tensor *dO,
                             const ta_tensor *lse, int64_t h, double sigma)
{
    double acc = 0.0;
    for (int64_t b = 0; b < O->shape[0]; b++)
        for (int64_t i = 0; i < O->shape[2]; i++) {
            const double l = at4(lse, b, h, i, 0);
            if (l == -INFINITY) continue; /* attended to nothing, not even a sink */
            double d = 0.0; /* D_i = rowsum(dO_i * O_i) */
            for (int64_t c = 0; c < O->shape[3]; c++)
                d += at4(dO, b, h, i, c) * at4(O, b, h, i, c);
            float lo = 0.0f;
            const double hi = p ? ta_sdpa_lse_split(p, b, h, i, (float)l, &lo) : l;
            acc -= exp((sigma - hi) - lo) * d;
        }
    return acc;
}

double ta_sdpa_sink_grad_head(const ta_tensor *O, const ta_tensor *dO, const ta_tensor *lse,
                              int64_t h, double sigma)
{
    return sink_grad_head(NULL, O, dO, lse, h, sigma);
}

void ta_sdpa_sinks_grad(const ta_sdpa_problem *p)
{
    ta_tensor *ds = p->var.dsinks;
    if (!ds) return;
    for (int64_t h = 0; h < p->H; h++)
        ((float *)ds->data)[h * ds->stride[0]] =
            (float)sink_grad_head(p, p->O, p->dO, p->fwd_lse, h, ta_sdpa_sink(&p->var, h));
}
