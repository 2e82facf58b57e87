/* The attention variants of current models (sliding window, logit softcapping, ALiBi,
 * attention sinks) inside the library: their validated options, as the front door
 * (sdpa.c) records them in ta_sdpa_problem, and the per-score definitions every path
 * follows (DESIGN.md "Inference and modern attention"; include/tensorattn.h
 * "Attention variants"). For query i and key j of a sequence of Lq queries and Lk keys:
 *     delta = 0 under TA_CAUSAL_TOP_LEFT, else Lk - Lq;   rel = j - (i + delta)
 *     s = scale q.k;  softcap c > 0: s = c tanh(s / c);  ALiBi: s -= a_h |rel|;
 *     additive mask: s += m;  blocked (causal rel > 0, window rel < -left or rel > right,
 *     keep/block mask, key length): s = -inf
 *     sinks: sigma_h joins the softmax denominator only (O = 0, LSE = sigma_h on a row
 *     with every key blocked).
 * The window is a per-row key range [lo, hi) (ta_sdpa_window_keys): the one place a
 * window bounds keys, for the reference path's blocking and the fused path's tile
 * skipping alike. */
#ifndef TA_OPS_SDPA_VARIANTS_H
#define TA_OPS_SDPA_VARIANTS_H

#include "tensorattn.h"

#include "core/core.h" /* TA_DIST_EXPORT */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

struct ta_sdpa_problem;

typedef struct ta_sdpa_variants {
    bool any;             /* some variant changes a score or the softmax */
    bool top_left;        /* delta = 0 (TA_CAUSAL_TOP_LEFT), else delta = Lk - Lq */
    int64_t delta;        /* the problem's diagonal offset: ta_sdpa_delta of its Lq and its
                             real key count (a KV cache's problem has Lk = the capacity),
                             set by whoever builds the problem */
    bool window;          /* a window that bounds at least one side */
    int64_t left, right;  /* keys left / right of the diagonal; -1: unbounded */
    float softcap;        /* 0: off */
    const float *alibi;   /* NULL, or the slope of (b, h) at alibi[b * alibi_sb + h * alibi_sh] */
    int64_t alibi_sb, alibi_sh;
    const float *sinks;   /* NULL, or sigma_h at sinks[h * sinks_s] */
    int64_t sinks_s;
    ta_tensor *dsinks;    /* backward: NULL or the output [H] */
} ta_sdpa_variants;

/* Validates opts' variant fields for a problem of B batches and H query heads into *v
 * (messages start with fn): softcap finite and >= 0; with has_window, bounds >= -1;
 * alibi_slopes float32 [H] or [B, H]; sinks float32 [H]; dsinks only when backward,
 * with sinks, float32 [H] and no element repeated. check_data false: data pointers are
 * neither checked nor read (a problem described before its memory exists). */
ta_status ta_sdpa_variants_init(ta_sdpa_variants *v, const char *fn, const ta_sdpa_opts *opts,
                                int64_t B, int64_t H, bool backward, bool check_data);

/* The diagonal offset of a sequence of Lq queries and Lk keys. */
static inline int64_t ta_sdpa_delta(const ta_sdpa_variants *v, int64_t Lq, int64_t Lk)
{
    return v->top_left ? 0 : Lk - Lq;
}

/* The keys [*lo, *hi) of 0 .. Lk-1 that the window lets query i see (all of them
 * without a window); *lo >= *hi: none. Compared before it is summed, so that bounds up
 * to INT64_MAX (a window wider than any sequence) do not overflow: the diagonal i +
 * delta lies in [-Lq, Lq + Lk). */
static inline void ta_sdpa_window_keys(const ta_sdpa_variants *v, int64_t delta, int64_t Lk,
                                       int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t a = 0, e = Lk;
    const int64_t diag = i + delta;
    if (v->window && v->left >= 0 && diag > v->left) a = diag - v->left;
    if (v->window && v->right >= 0 && v->right < Lk - 1 - diag) e = diag + v->right + 1;
    *lo = a;
    *hi = e;
}

/* ALiBi slope of batch b, head h (0 without slopes). */
static inline float ta_sdpa_alibi_slope(const ta_sdpa_variants *v, int64_t b, int64_t h)
{
    return v->alibi ? v->alibi[b * v->alibi_sb + h * v->alibi_sh] : 0.0f;
}

/* The sink logit of head h (-inf without sinks: exp(-inf) = 0 adds nothing). */
static inline float ta_sdpa_sink(const ta_sdpa_variants *v, int64_t h)
{
    return v->sinks ? v->sinks[h * v->sinks_s] : -INFINITY;
}

/* log(exp(lse) + exp(sigma)): a row's LSE with its sink from the LSE of its keys (-inf
 * for a row with every key blocked: sigma); NaN if either is NaN, or either is +inf and
 * the other is not -inf (a +inf logit: the row is NaN, as for a +inf score). */
TA_DIST_EXPORT
float ta_sdpa_lse_with_sink(float lse, float sigma);

/* The score of (b, h, i, j) of a prepared problem from its raw product x = q_i . k_j,
 * by the definition above, in double; -inf when blocked (whatever x is). dcap (may be
 * NULL) receives d s / d (scale x): 1 - tanh^2 with softcap, else 1. */
double ta_sdpa_variant_score(const struct ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                             int64_t j, float x, double *dcap);
/* ta_sdpa_variant_score over the keys 0 .. Lk-1 of row (b, h, i), in place: s[j * stride]
 * holds the raw product and receives the score (rounded to float). */
void ta_sdpa_variant_row(const struct ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                         float *s, int64_t stride);

/* A backward's view of a row's float32 LSE as hi + lo, so that its weights can be
 * rebuilt as P = exp((s - hi) - lo). Where |LSE| < TA_SDPA_LSE_SPLIT_MIN (or it is not
 * finite): hi = LSE, lo = 0 (P = exp(s - LSE), as the forward's LSE says). At and above
 * it, the float LSE m + log(l) has lost most of log(l) (all of it for a row of scores
 * -1e30 + s, which a large finite additive mask leaves: the LSE is -1e30 and exp(s - LSE)
 * gave every key weight 1 instead of 1/Lk), so the row's scores are formed again from Q
 * and K (in double, rounded to float as the paths round them, by ta_sdpa_variant_score,
 * with the sink): hi = their max, lo = log sum exp(s - hi) (in [0, log(Lk + 1)]), taken
 * when hi + lo rounds to LSE within 4 ulps (else the LSE is not of these keys alone: a
 * context-parallel shard's; hi = LSE, lo = 0). Such rows are those of huge scores only;
 * O(Lk D) each. Returns hi, *lo receives lo. */
#define TA_SDPA_LSE_SPLIT_MIN 0x1p12f
float ta_sdpa_lse_split(const struct ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                        float lse, float *lo);

/* The sinks' gradient of a prepared backward problem into p->var.dsinks (when set):
 * dsigma_h = -sum over b, i of exp(sigma_h - LSE_bhi) D_bhi with D = rowsum(dO * O), from
 * dO, O and the forward's LSE (any storage dtype); rows with LSE -inf contribute
 * nothing. Summed in double in a fixed order: the same bits for any thread count. */
void ta_sdpa_sinks_grad(const struct ta_sdpa_problem *p);
/* Its sum for head h before rounding: -sum over b, i of exp(sigma - LSE_bhi) D_bhi over
 * O, dO [B, H, Lq, Dv] and LSE [B, H, Lq] (any storage dtype; context parallelism sums
 * each rank's rows, src/dist). */
TA_DIST_EXPORT
double ta_sdpa_sink_grad_head(const ta_tensor *O, const ta_tensor *dO, const ta_tensor *lse,
                              int64_t h, double sigma);

/* NULL when the fused paths implement every variant v sets, else the name of one they do
 * not ("softcap": a softcap outside the tanh kernel's range 2^-126 .. 2^126). */
const char *ta_sdpa_variants_fused_gap(const ta_sdpa_variants *v);

#endif
