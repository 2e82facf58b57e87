/* The materialised SDPA backward: the oracle the fused backward is tested against. It
 * follows the textbook derivation on whole [B, H, Lq, Lk] tensors, with the products on
 * einsum (strided batched GEMM, no copies of Q, K, V):
 *     S  = einsum('bhid,bhjd->bhij', Q, K) * scale, masked     (as the forward)
 *     P  = exp(S - LSE)                                          (0 on empty rows)
 *     dV = einsum('bhij,bhid->bhjd', P, dO)                      (summed over a GQA group)
 *     dP = einsum('bhid,bhjd->bhij', dO, V)
 *     D  = rowsum(dO * O),  dS = scale * P * (dP - D)
 *     dQ = einsum('bhij,bhjd->bhid', dS, K),  dK = einsum('bhij,bhid->bhjd', dS, Q)
 * With GQA (G = H / Hkv > 1) the head axis of the [B, H, ...] tensors is split into
 * (kv head, group member) views, so K and V are shared by the einsum itself and the
 * group sum of dK and dV is part of the contraction. */
#include "ops/sdpa.h"

#include "core/core.h"

#include <math.h>

static float *row_ptr(const ta_tensor *t, int64_t b, int64_t h, int64_t i)
{
    return (float *)t->data + b * t->stride[0] + h * t->stride[1] + i * t->stride[2];
}

/* The scratch: P and dP as [B, H, Lq, Lk] and the largest of the five einsums' scratch
 * (they run one after the other). */
typedef struct bref_plan {
    ta_tensor P, dP;
    ta_sdpa_product s, dp, dv, dk, dq;
    ta_arena einsum;
} bref_plan;

static void layout(ta_arena *a, bref_plan *r, const ta_sdpa_problem *p)
{
    const int64_t shape[4] = {p->B, p->H, p->Lq, p->Lk}, n = p->B * p->H * p->Lq * p->Lk;
    const int64_t G = p->G;
    r->P = ta_tensor_view(TA_ARENA_TAKE(a, float, n), 4, shape);
    r->dP = ta_tensor_view(TA_ARENA_TAKE(a, float, n), 4, shape);
    /* S = Q K^T, dP = dO V^T; dV = P^T dO, dK = dS^T Q (group sums); dQ = dS K */
    r->s = ta_sdpa_product_of("bhid,bhjd->bhij", "bkgid,bkjd->bkgij", &r->P, p->Q, p->K, G,
                              TA_SPLIT_C | TA_SPLIT_A);
    r->dp = ta_sdpa_product_of("bhid,bhjd->bhij", "bkgid,bkjd->bkgij", &r->dP, p->dO, p->V, G,
                               TA_SPLIT_C | TA_SPLIT_A);
    r->dv = ta_sdpa_product_of("bhij,bhid->bhjd", "bkgij,bkgid->bkjd", p->dV, &r->P, p->dO, G,
                               TA_SPLIT_A | TA_SPLIT_B);
    r->dk = ta_sdpa_product_of("bhij,bhid->bhjd", "bkgij,bkgid->bkjd", p->dK, &r->dP, p->Q, G,
                               TA_SPLIT_A | TA_SPLIT_B);
    r->dq = ta_sdpa_product_of("bhij,bhjd->bhid", "bkgij,bkjd->bkgid", p->dQ, &r->dP, p->K, G,
                               TA_SPLIT_C | TA_SPLIT_A);
    const ta_sdpa_product *all[5] = {&r->s, &r->dp, &r->dv, &r->dk, &r->dq};
    size_t most = 0;
    for (int i = 0; i < 5; i++) most = TA_MAX(most, ta_sdpa_product_scratch(p, all[i]));
    r->einsum = ta_arena_sub(a, most);
}

size_t ta_sdpa_backward_reference_scratch(const ta_sdpa_problem *p)
{
    if (p->B * p->H * p->Lq == 0 || p->Lk == 0) return 0;
    ta_arena m = ta_arena_measure();
    bref_plan r;
    layout(&m, &r, p);
    return ta_arena_bytes(&m);
}

/* A product into an output that has elements (the einsum of an empty output is a no-op). */
static ta_status product(const ta_sdpa_problem *p, const ta_sdpa_product *pr,
                         const bref_plan *r)
{
    ta_arena e = r->einsum;
    return ta_sdpa_product_run(p, pr, &e);
}

/* One row with variants, from the definitions: raw products s -> P = exp(score - LSE)
 * (exp((score - hi) - lo), ta_sdpa_lse_split),
 * dP -> dS = scale P (dP - D) (1 - tanh^2 with softcap: d score / d (scale q.k)). The
 * LSE holds the sink, so P is the weight of the forward's denominator; a row that
 * attended to nothing (every key blocked: P = 0; or LSE -inf) contributes nothing. */
static void variant_row_backward(const ta_sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                 float *s, float *dp, double lse, double lo, double d)
{
    for (int64_t j = 0; j < p->Lk; j++) {
        double dcap, sc = ta_sdpa_variant_score(p, b, h, i, j, s[j], &dcap);
        if (lse == -INFINITY) {
            s[j] = dp[j] = 0.0f;
            continue;
        }
        /* the score as the forward rounded it (ta_sdpa_variant_row): the LSE is of those */
        double P = exp(((double)(float)sc - lse) - lo);
        s[j] = (float)P;
        dp[j] = (float)((double)p->scale * P * ((double)dp[j] - d) * dcap);
    }
}

/* S -> P = exp(scale S masked - LSE), dP -> dS = scale P (dP - D), row by row. */
static void softmax_backward_rows(const ta_sdpa_problem *p, bref_plan *r)
{
    const int64_t H = p->H, Lq = p->Lq, Lk = p->Lk, rows = p->B * H * Lq;
    const ta_tensor *L = p->fwd_lse;
    int nt = rows * Lk < 32768 ? 1 : ta_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t x = 0; x < rows; x++) {
        int64_t b = x / (H * Lq), h = x / Lq % H, i = x % Lq;
        float *s = (float *)r->P.data + x * Lk, *dp = (float *)r->dP.data + x * Lk;
        const float *lp = (const float *)L->data + b * L->stride[0] + h * L->stride[1] +
                          i * L->stride[2];
        const float *o = row_ptr(p->O, b, h, i), *dout = row_ptr(p->dO, b, h, i);
        double d = 0.0; /* D_i = rowsum(dO_i * O_i) */
        for (int64_t c = 0; c < p->Dv; c++)
            d += (double)dout[c * p->dO->stride[3]] * (double)o[c * p->O->stride[3]];
        float lo; /* lse + lo: the row's LSE (lo 0 but where |LSE| is huge) */
        const double lse = ta_sdpa_lse_split(p, b, h, i, *lp, &lo);
        if (p->var.any) {
            variant_row_backward(p, b, h, i, s, dp, lse, lo, d);
            continue;
        }
        ta_mask_apply(&p->mask, b, h, i, 0, Lk, p->scale, s, 1);
        for (int64_t j = 0; j < Lk; j++) {
            if (lse == -INFINITY) { /* attended to nothing: contributes nothing */
                s[j] = dp[j] = 0.0f;
                continue;
            }
            s[j] = (float)exp(((double)s[j] - lse) - lo);
            dp[j] = (float)((double)p->scale * s[j] * ((double)dp[j] - d));
        }
    }
}

ta_status ta_sdpa_backward_reference(const ta_sdpa_problem *p, ta_arena *scratch)
{
    if (p->B * p->H * p->Lq == 0 || p->Lk == 0) { /* no key attended: dQ, dK, dV are 0 */
        ta_tensor_fill(p->dQ, 0.0f);
        ta_tensor_fill(p->dK, 0.0f);
        ta_tensor_fill(p->dV, 0.0f);
        ta_sdpa_sinks_grad(p); /* from dO, O and the LSE, as always */
        return TA_OK;
    }
    bref_plan r;
    layout(scratch, &r, p);
    if (scratch->overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", p->fn);
    ta_status st = p->D > 0 ? product(p, &r.s, &r) : ta_tensor_fill(&r.P, 0.0f);
    if (!st) st = p->Dv > 0 ? product(p, &r.dp, &r) : ta_tensor_fill(&r.dP, 0.0f);
    if (st) return st;
    softmax_backward_rows(p, &r);
    if (ta_tensor_numel(p->dV) > 0) st = product(p, &r.dv, &r);
    if (!st && ta_tensor_numel(p->dK) > 0) st = product(p, &r.dk, &r);
    if (!st && ta_tensor_numel(p->dQ) > 0) st = product(p, &r.dq, &r);
    if (!st) ta_sdpa_sinks_grad(p);
    return st;
}
