/* The SDPA forward's reference path, which follows the seed literally:
 *     scores  = einsum('bhid,bhjd->bhij', Q, K) * scale
 *     scores.masked_fill_(blocked, -inf)        (+ additive mask)
 *     weights = softmax(scores, dim=-1)
 *     O       = einsum('bhij,bhjd->bhid', weights, V)
 * with DESIGN.md's rule for rows that attend to nothing (weights 0, O 0, LSE -inf).
 * Scratch: the [B, H, Lq, Lk] scores (the caller's weights tensor when given), the LSE
 * of every row and the einsums' own scratch. Also the products both reference paths
 * share (ta_sdpa_product). */
#include "ops/sdpa.h"

#include "core/core.h"
#include "ops/einsum.h"
#include "ops/softmax.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------- products */

/* A 5-d view [B, Hkv, G, L, X] of a [B, H, L, X] tensor, splitting the head axis into
 * (kv head, group member): head h = k * G + g. Splitting one axis is always a view. */
static ta_tensor split_heads(const ta_tensor *t, int64_t G)
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

ta_sdpa_product ta_sdpa_product_of(const char *spec4, const char *spec5, const ta_tensor *C,
                                   const ta_tensor *A, const ta_tensor *B, int64_t G, int split)
{
    if (G == 1) return (ta_sdpa_product){.spec = spec4, .c = *C, .a = *A, .b = *B};
    return (ta_sdpa_product){
        .spec = spec5,
        .c = split & TA_SPLIT_C ? split_heads(C, G) : *C,
        .a = split & TA_SPLIT_A ? split_heads(A, G) : *A,
        .b = split & TA_SPLIT_B ? split_heads(B, G) : *B};
}

size_t ta_sdpa_product_scratch(const ta_sdpa_problem *p, const ta_sdpa_product *pr)
{
    size_t bytes;
    /* shapes were validated: only a size that overflows can fail here */
    return ta_einsum_scratch_bytes(&bytes, p->fn, &pr->c, pr->spec, &pr->a, &pr->b) ? SIZE_MAX
                                                                                   : bytes;
}

ta_status ta_sdpa_product_run(const ta_sdpa_problem *p, const ta_sdpa_product *pr,
                              ta_arena *scratch)
{
    ta_tensor c = pr->c;
    return ta_einsum_run(p->fn, &c, pr->spec, &pr->a, &pr->b, scratch);
}

/* --------------------------------------------------------- reference path */

/* The factor that turns a row's softmax w (of max score m) into the weights of the
 * denominator that holds the sink sigma: with l = sum exp(s - m) = 1 / max w (the
 * largest score's weight is exp(0) / l), w_j l / (l + e^(sigma - m)). Not exp(lse - LSE)
 * from the two float log-sum-exps: where |m| is huge (a row of scores -1e30 + s, as a
 * large finite additive mask leaves) both round to m and the factor came out 1, the sink
 * ignored (the fused path, which keeps m and l apart, was right). */
static double sink_factor(const float *w, int64_t ws, int64_t n, float m, float sigma)
{
    if (sigma == INFINITY) return NAN; /* a +inf logit: the row is NaN, as the fused path's */
    double wmax = 0.0; /* a NaN weight is passed over, as fmax would (a compare: gcc 12's
                          aarch64 vectoriser crashed on this fmax reduction) */
    for (int64_t j = 0; j < n; j++)
        if ((double)w[j * ws] > wmax) wmax = (double)w[j * ws];
    return 1.0 / (1.0 + exp((double)sigma - (double)m) * wmax);
}

/* Mask, softmax and LSE of every score row (b, h, i) of S, in place. Rows are
 * independent, so the thread split cannot change any result. With variants the scores
 * follow their definition (ta_sdpa_variant_row), and with sinks the weights are those of
 * the denominator that holds the sink: exp(s - LSE) with LSE = log(sum exp(s) + e^sigma)
 * (sink_factor). lse keeps the keys' log-sum-exp (-inf: the row attends to nothing). */
static void softmax_rows(const ta_sdpa_problem *p, ta_tensor *S, float *lse)
{
    int64_t H = p->H, Lq = p->Lq, Lk = p->Lk, rows = p->B * H * Lq;
    int nt = rows * Lk < 32768 ? 1 : ta_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
        float *s = (float *)S->data + b * S->stride[0] + h * S->stride[1] + i * S->stride[2];
        if (p->var.any)
            ta_sdpa_variant_row(p, b, h, i, s, S->stride[3]);
        else
            ta_mask_apply(&p->mask, b, h, i, 0, Lk, p->scale, s, S->stride[3]);
        float m = -INFINITY; /* the row's largest score, for the sink */
        if (p->var.sinks)
            for (int64_t j = 0; j < Lk; j++)
                if (s[j * S->stride[3]] > m) m = s[j * S->stride[3]]; /* NaN passed over */
        lse[r] = ta_softmax_row(s, S->stride[3], s, S->stride[3], Lk);
        if (p->var.sinks && isfinite(lse[r])) {
            double f = sink_factor(s, S->stride[3], Lk, m, ta_sdpa_sink(&p->var, h));
            for (int64_t j = 0; j < Lk; j++) s[j * S->stride[3]] = (float)(s[j * S->stride[3]] * f);
        }
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

/* The keys' log-sum-exp of every row, with the row's sink when there are sinks. */
static void store_lse(const ta_sdpa_problem *p, ta_tensor *out, const float *lse)
{
    int64_t H = p->H, Lq = p->Lq, rows = out->shape[0] * H * Lq;
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
        float v = p->var.sinks ? ta_sdpa_lse_with_sink(lse[r], ta_sdpa_sink(&p->var, h)) : lse[r];
        ((float *)out->data)[b * out->stride[0] + h * out->stride[1] + i * out->stride[2]] = v;
    }
}

/* The scratch of one call: per-row LSE, the scores (unless the caller's weights hold
 * them) and the larger of the two einsums' scratch (they run one after the other).
 * While measuring, the views have no data: einsum sizes from shapes and strides. */
typedef struct ref_plan {
    float *lse;
    ta_tensor S;
    ta_sdpa_product qk, pv;
    ta_arena einsum;
} ref_plan;

static void layout(ta_arena *a, ref_plan *r, const ta_sdpa_problem *p)
{
    const int64_t rows = p->B * p->H * p->Lq;
    r->lse = TA_ARENA_TAKE(a, float, rows);
    const int64_t shape[4] = {p->B, p->H, p->Lq, p->Lk};
    if (p->weights)
        r->S = *p->weights;
    else
        r->S = ta_tensor_view(TA_ARENA_TAKE(a, float, rows * p->Lk), 4, shape);
    r->qk = ta_sdpa_product_of("bhid,bhjd->bhij", "bkgid,bkjd->bkgij", &r->S, p->Q, p->K, p->G,
                               TA_SPLIT_C | TA_SPLIT_A);
    r->pv = ta_sdpa_product_of("bhij,bhjd->bhid", "bkgij,bkjd->bkgid", p->O, &r->S, p->V, p->G,
                               TA_SPLIT_C | TA_SPLIT_A);
    size_t e1 = p->D > 0 ? ta_sdpa_product_scratch(p, &r->qk) : 0;
    size_t e2 = p->Dv > 0 ? ta_sdpa_product_scratch(p, &r->pv) : 0;
    r->einsum = ta_arena_sub(a, TA_MAX(e1, e2));
}

size_t ta_sdpa_forward_reference_scratch(const ta_sdpa_problem *p)
{
    if (p->B * p->H * p->Lq == 0) return 0;
    ta_arena m = ta_arena_measure();
    ref_plan r;
    layout(&m, &r, p);
    return ta_arena_bytes(&m);
}

ta_status ta_sdpa_forward_reference(const ta_sdpa_problem *p, ta_arena *scratch)
{
    const int64_t rows = p->B * p->H * p->Lq;
    if (rows == 0) return TA_OK;
    ref_plan r;
    layout(scratch, &r, p);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", p->fn);
    ta_status st = TA_OK;
    if (p->Lk > 0) {
        /* 1. scores = Q K^T (an empty contraction D = 0 gives zeros) */
        ta_arena e = r.einsum;
        st = p->D > 0 ? ta_sdpa_product_run(p, &r.qk, &e) : ta_tensor_fill(&r.S, 0.0f);
        /* 2. scale, mask, softmax over the keys */
        if (!st) softmax_rows(p, &r.S, r.lse);
        /* 3. O = weights V */
        e = r.einsum;
        if (!st && p->Dv > 0) st = ta_sdpa_product_run(p, &r.pv, &e);
    } else {
        for (int64_t i = 0; i < rows; i++) r.lse[i] = -INFINITY; /* no keys at all */
    }
    if (st) return st;
    zero_empty_rows(p, r.lse);
    if (p->lse) store_lse(p, p->lse, r.lse);
    return TA_OK;
}
