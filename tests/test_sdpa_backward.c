/* ta-test: all-isas
 * ta_sdpa_backward against independent float64 oracles written here:
 *  - a float64 SDPA forward (every option) and central finite differences of
 *    L = sum(dO * O): they check the float64 analytic backward below and the C
 *    reference backward (TA_SDPA_REFERENCE);
 *  - the float64 analytic backward: the fused path (TA_SDPA_AUTO / TA_SDPA_FUSED) and the
 *    reference path on every forward option, odd sizes, GQA, Dv != D, non-contiguous
 *    tensors, both of the fused path's plans, within 1e-4 absolute on unit-scale inputs;
 *  - bitwise identical results for 1, 2 and 3 threads;
 *  - every error path, with the message and untouched outputs. */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4

enum { MASK_NONE, MASK_LQLK, MASK_B11LK, MASK_1HLQLK, MASK_BHLQLK, MASK_H1LK, MASK_LK };
enum { LAYOUT_BHLD, LAYOUT_BLHD, LAYOUT_DLAST }; /* DLAST: the last dim strided */

typedef struct cfg {
    const char *name;
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    float scale;
    ta_causal causal;
    int mask;
    ta_mask_mode mode;
    int64_t kl[4]; /* key lengths, used when use_kl */
    int use_kl;
    int layout;
    int empty_rows; /* mask rows 1 and 3 keep nothing (keep mode) */
} cfg;

/* ------------------------------------------------------------ test tensors */

/* A [s0, s1, s2, s3] float32 tensor laid out as the layout says, in *store. */
static void make4(ta_tensor *view, ta_tensor *store, const int64_t *s, int layout)
{
    if (layout == LAYOUT_BLHD) {
        const int64_t m[4] = {s[0], s[2], s[1], s[3]};
        const int perm[4] = {0, 2, 1, 3};
        TA_CHECK_OK(ta_tensor_empty(store, 4, m));
        TA_CHECK_OK(ta_tensor_permute(view, store, perm));
    } else if (layout == LAYOUT_DLAST) {
        const int64_t m[4] = {s[0], s[1], s[3], s[2]};
        const int perm[4] = {0, 1, 3, 2};
        TA_CHECK_OK(ta_tensor_empty(store, 4, m));
        TA_CHECK_OK(ta_tensor_permute(view, store, perm));
    } else {
        TA_CHECK_OK(ta_tensor_empty(store, 4, s));
        *view = *store;
        view->owned = NULL;
    }
}

/* The values of t (any strides) in row-major order, as doubles. */
static double *to_f64(const ta_tensor *t)
{
    int64_t n = ta_tensor_numel(t), idx[TA_MAX_DIMS] = {0};
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t e = 0; e < n; e++) {
        x[e] = *ta_tensor_at_const(t, idx);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    return x;
}

static void from_f64(ta_tensor *t, const double *x)
{
    int64_t n = ta_tensor_numel(t), idx[TA_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        *ta_tensor_at(t, idx) = (float)x[e];
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* max |got - want| (row-major order of got); NaN / inf must match exactly. */
static double max_err(const ta_tensor *got, const double *want)
{
    double *g = to_f64(got), worst = 0;
    int64_t n = ta_tensor_numel(got);
    for (int64_t e = 0; e < n; e++) {
        double err;
        if (!isfinite(g[e]) || !isfinite(want[e]))
            err = (g[e] == want[e] || (isnan(g[e]) && isnan(want[e]))) ? 0 : INFINITY;
        else
            err = fabs(g[e] - want[e]);
        if (err > worst) worst = err;
    }
    free(g);
    return worst;
}

/* ------------------------------------------------------------- the oracle */

typedef struct prob {
    cfg c;
    ta_tensor Q, K, V, dO, O, L, M, dQ, dK, dV;     /* views the library sees */
    ta_tensor sQ, sK, sV, sdO, sO, sdQ, sdK, sdV;   /* their storage */
    double *q, *k, *v, *dout, *m;                   /* float32 values as doubles */
    int64_t mshape[4];                              /* the mask as [B?, H?, Lq?, Lk] (1 = bcast) */
    ta_sdpa_opts opts;
} prob;

static double mask_value(const prob *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const int64_t *s = p->mshape;
    int64_t idx = (((s[0] > 1 ? b : 0) * s[1] + (s[1] > 1 ? h : 0)) * s[2] +
                   (s[2] > 1 ? i : 0)) * s[3] + (s[3] > 1 ? j : 0);
    return p->m[idx];
}

/* The masked, scaled score's additive part: -inf (blocked), 0 or the additive value. */
static double bias64(const prob *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const cfg *c = &p->c;
    if (c->causal == TA_CAUSAL_TOP_LEFT && j > i) return -INFINITY;
    if (c->causal == TA_CAUSAL_BOTTOM_RIGHT && j > i + c->Lk - c->Lq) return -INFINITY;
    if (c->use_kl && j >= c->kl[b]) return -INFINITY;
    if (c->mask == MASK_NONE) return 0;
    double m = mask_value(p, b, h, i, j);
    if (c->mode == TA_MASK_KEEP) return m != 0 ? 0 : -INFINITY;
    if (c->mode == TA_MASK_BLOCK) return m != 0 ? -INFINITY : 0;
    return m;
}

static double scale_of(const cfg *c)
{
    return c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->D);
}

/* P [Lq, Lk] of head (b, h) and the LSE per row, from q, k (doubles). */
static void probs64(const prob *p, const double *q, const double *k, int64_t b, int64_t h,
                    double *P, double *lse)
{
    const cfg *c = &p->c;
    int64_t G = c->H / c->Hkv, hk = h / G;
    double sc = scale_of(c);
    for (int64_t i = 0; i < c->Lq; i++) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < c->Lk; j++) {
            double bias = bias64(p, b, h, i, j), s = 0;
            for (int64_t d = 0; d < c->D; d++)
                s += q[((b * c->H + h) * c->Lq + i) * c->D + d] *
                     k[((b * c->Hkv + hk) * c->Lk + j) * c->D + d];
            s = bias == -INFINITY ? -INFINITY : s * sc + bias;
            P[i * c->Lk + j] = s;
            if (s > mx) mx = s;
        }
        double sum = 0;
        for (int64_t j = 0; j < c->Lk; j++)
            sum += mx == -INFINITY ? 0 : exp(P[i * c->Lk + j] - mx);
        lse[i] = mx == -INFINITY ? -INFINITY : mx + log(sum);
        for (int64_t j = 0; j < c->Lk; j++)
            P[i * c->Lk + j] = mx == -INFINITY ? 0 : exp(P[i * c->Lk + j] - lse[i]);
    }
}

/* O [B,H,Lq,Dv] and LSE [B,H,Lq] in float64. */
static void forward64(const prob *p, const double *q, const double *k, const double *v,
                      double *o, double *lse)
{
    const cfg *c = &p->c;
    int64_t G = c->H / c->Hkv;
    double *P = malloc(sizeof(double) * (size_t)(c->Lq * c->Lk + 1));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            probs64(p, q, k, b, h, P, lse + (b * c->H + h) * c->Lq);
            for (int64_t i = 0; i < c->Lq; i++)
                for (int64_t e = 0; e < c->Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < c->Lk; j++)
                        acc += P[i * c->Lk + j] * v[((b * c->Hkv + h / G) * c->Lk + j) * c->Dv + e];
                    o[((b * c->H + h) * c->Lq + i) * c->Dv + e] = acc;
                }
        }
    free(P);
}

/* The analytic backward in float64 (o: the forward output the library was given). */
static void backward64(const prob *p, const double *o, double *dq, double *dk, double *dv)
{
    const cfg *c = &p->c;
    int64_t G = c->H / c->Hkv, Lq = c->Lq, Lk = c->Lk, D = c->D, Dv = c->Dv;
    double sc = scale_of(c);
    memset(dq, 0, sizeof(double) * (size_t)(c->B * c->H * Lq * D + 1));
    memset(dk, 0, sizeof(double) * (size_t)(c->B * c->Hkv * Lk * D + 1));
    memset(dv, 0, sizeof(double) * (size_t)(c->B * c->Hkv * Lk * Dv + 1));
    double *P = malloc(sizeof(double) * (size_t)(Lq * Lk + 1)), *lse = malloc(sizeof(double) * (size_t)(Lq + 1));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            int64_t hk = h / G;
            probs64(p, p->q, p->k, b, h, P, lse);
            for (int64_t i = 0; i < Lq; i++) {
                const double *dor = p->dout + ((b * c->H + h) * Lq + i) * Dv;
                const double *orow = o + ((b * c->H + h) * Lq + i) * Dv;
                double Di = 0;
                for (int64_t e = 0; e < Dv; e++) Di += dor[e] * orow[e];
                for (int64_t j = 0; j < Lk; j++) {
                    double pij = P[i * Lk + j];
                    if (pij == 0) continue;
                    const double *vr = p->v + ((b * c->Hkv + hk) * Lk + j) * Dv;
                    double dpij = 0;
                    for (int64_t e = 0; e < Dv; e++) {
                        dpij += dor[e] * vr[e];
                        dv[((b * c->Hkv + hk) * Lk + j) * Dv + e] += pij * dor[e];
                    }
                    double ds = pij * (dpij - Di) * sc;
                    for (int64_t d = 0; d < D; d++) {
                        dq[((b * c->H + h) * Lq + i) * D + d] +=
                            ds * p->k[((b * c->Hkv + hk) * Lk + j) * D + d];
                        dk[((b * c->Hkv + hk) * Lk + j) * D + d] +=
                            ds * p->q[((b * c->H + h) * Lq + i) * D + d];
                    }
                }
            }
        }
    free(P);
    free(lse);
}

/* ----------------------------------------------------------- problem set-up */

static void setup(prob *p, const cfg *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Lk, c->Dv}, os[4] = {c->B, c->H, c->Lq, c->Dv};
    make4(&p->Q, &p->sQ, qs, c->layout);
    make4(&p->K, &p->sK, ks, c->layout);
    make4(&p->V, &p->sV, vs, c->layout);
    make4(&p->dO, &p->sdO, os, c->layout);
    make4(&p->O, &p->sO, os, c->layout == LAYOUT_DLAST ? LAYOUT_BHLD : c->layout);
    make4(&p->dQ, &p->sdQ, qs, c->layout == LAYOUT_DLAST ? LAYOUT_BLHD : c->layout);
    make4(&p->dK, &p->sdK, ks, c->layout);
    make4(&p->dV, &p->sdV, vs, c->layout);
    TA_CHECK_OK(ta_randn(&p->Q, seed));
    TA_CHECK_OK(ta_randn(&p->K, seed + 1));
    TA_CHECK_OK(ta_randn(&p->V, seed + 2));
    TA_CHECK_OK(ta_randn(&p->dO, seed + 3));
    TA_CHECK_OK(ta_tensor_empty(&p->L, 3, os));
    p->q = to_f64(&p->Q);
    p->k = to_f64(&p->K);
    p->v = to_f64(&p->V);
    p->dout = to_f64(&p->dO);

    for (int d = 0; d < 4; d++) p->mshape[d] = 1;
    int nd = 0;
    int64_t ms[4];
    switch (c->mask) {
    case MASK_LQLK: nd = 2; ms[0] = c->Lq; ms[1] = c->Lk; p->mshape[2] = c->Lq; p->mshape[3] = c->Lk; break;
    case MASK_B11LK: nd = 4; ms[0] = c->B; ms[1] = 1; ms[2] = 1; ms[3] = c->Lk; p->mshape[0] = c->B; p->mshape[3] = c->Lk; break;
    case MASK_1HLQLK: nd = 4; ms[0] = 1; ms[1] = c->H; ms[2] = c->Lq; ms[3] = c->Lk; p->mshape[1] = c->H; p->mshape[2] = c->Lq; p->mshape[3] = c->Lk; break;
    case MASK_BHLQLK: nd = 4; ms[0] = c->B; ms[1] = c->H; ms[2] = c->Lq; ms[3] = c->Lk; p->mshape[0] = c->B; p->mshape[1] = c->H; p->mshape[2] = c->Lq; p->mshape[3] = c->Lk; break;
    case MASK_H1LK: nd = 3; ms[0] = c->H; ms[1] = 1; ms[2] = c->Lk; p->mshape[1] = c->H; p->mshape[3] = c->Lk; break;
    case MASK_LK: nd = 1; ms[0] = c->Lk; p->mshape[3] = c->Lk; break;
    default: break;
    }
    if (nd) {
        TA_CHECK_OK(ta_tensor_empty(&p->M, nd, ms));
        if (c->mode == TA_MASK_ADDITIVE) {
            TA_CHECK_OK(ta_randn(&p->M, seed + 4));
            float *m = p->M.data;
            for (int64_t e = 3; e < ta_tensor_numel(&p->M); e += 7) m[e] = -INFINITY;
        } else {
            TA_CHECK_OK(ta_rand(&p->M, seed + 4));
            float *m = p->M.data;
            float keep = c->mode == TA_MASK_KEEP ? 0.7f : 0.3f;
            for (int64_t e = 0; e < ta_tensor_numel(&p->M); e++) m[e] = m[e] < keep ? 1.0f : 0.0f;
            if (c->empty_rows && c->mask == MASK_LQLK)
                for (int64_t j = 0; j < c->Lk; j++) m[1 * c->Lk + j] = m[3 * c->Lk + j] = 0.0f;
        }
        p->m = to_f64(&p->M);
    }
    p->opts = (ta_sdpa_opts){.scale = c->scale, .causal = c->causal,
                             .mask = nd ? &p->M : NULL, .mask_mode = c->mode,
                             .key_lengths = c->use_kl ? c->kl : NULL};

    /* O and LSE: the float64 forward, rounded to float32 (independent of ta_sdpa) */
    int64_t no = c->B * c->H * c->Lq;
    double *o = malloc(sizeof(double) * (size_t)(no * c->Dv + 1)),
           *l = malloc(sizeof(double) * (size_t)(no + 1));
    forward64(p, p->q, p->k, p->v, o, l);
    from_f64(&p->O, o);
    from_f64(&p->L, l);
    free(o);
    free(l);
}

static void teardown(prob *p)
{
    ta_tensor *t[] = {&p->sQ, &p->sK, &p->sV, &p->sdO, &p->sO, &p->sdQ, &p->sdK, &p->sdV, &p->L,
                      &p->M};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) ta_tensor_free(t[i]);
    free(p->q); free(p->k); free(p->v); free(p->dout); free(p->m);
}

static ta_status run_bwd(prob *p, ta_sdpa_path path)
{
    ta_sdpa_opts o = p->opts;
    o.path = path;
    TA_CHECK_OK(ta_tensor_fill(&p->dQ, 9.0f));
    TA_CHECK_OK(ta_tensor_fill(&p->dK, 9.0f));
    TA_CHECK_OK(ta_tensor_fill(&p->dV, 9.0f));
    return ta_sdpa_backward(&p->dQ, &p->dK, &p->dV, &p->dO, &p->Q, &p->K, &p->V, &p->O, &p->L, &o);
}

/* -------------------------------------------------- (a) finite differences */

/* L = sum(dO * O(q, k, v)) in float64. */
static double loss64(const prob *p, const double *q, const double *k, const double *v)
{
    const cfg *c = &p->c;
    int64_t no = c->B * c->H * c->Lq * c->Dv;
    double *o = malloc(sizeof(double) * (size_t)(no + 1)),
           *l = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Lq + 1));
    forward64(p, q, k, v, o, l);
    double s = 0;
    for (int64_t e = 0; e < no; e++) s += p->dout[e] * o[e];
    free(o);
    free(l);
    return s;
}

/* Central differences of loss64 over every element of x (n values). */
static void fd_grad(prob *p, double *x, int64_t n, double *g)
{
    const double eps = 1e-6;
    for (int64_t e = 0; e < n; e++) {
        double x0 = x[e];
        x[e] = x0 + eps;
        double lp = loss64(p, p->q, p->k, p->v);
        x[e] = x0 - eps;
        double lm = loss64(p, p->q, p->k, p->v);
        x[e] = x0;
        g[e] = (lp - lm) / (2 * eps);
    }
}

static double rel_err(const double *got, const double *want, int64_t n)
{
    double worst = 0, mag = 1;
    for (int64_t e = 0; e < n; e++) mag = fmax(mag, fabs(want[e]));
    for (int64_t e = 0; e < n; e++) worst = fmax(worst, fabs(got[e] - want[e]) / mag);
    return worst;
}

static void test_finite_differences(void **state)
{
    (void)state;
    static const cfg cases[] = {
        {"plain", 1, 2, 2, 3, 4, 3, 2, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
        {"gqa+causal_br", 2, 2, 1, 4, 3, 3, 3, 0.7f, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, 0, 0},
        {"additive", 1, 2, 2, 3, 5, 2, 3, 0, TA_CAUSAL_TOP_LEFT, MASK_1HLQLK, TA_MASK_ADDITIVE, {0}, 0, 0, 0},
        {"lengths+keep", 2, 2, 1, 3, 4, 3, 2, 0, TA_CAUSAL_NONE, MASK_LQLK, TA_MASK_KEEP, {0, 3}, 1, 0, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        prob p;
        setup(&p, &cases[ci], 100 + ci * 10);
        const cfg *c = &p.c;
        int64_t nq = c->B * c->H * c->Lq * c->D, nk = c->B * c->Hkv * c->Lk * c->D,
                nv = c->B * c->Hkv * c->Lk * c->Dv;
        double *fq = malloc(sizeof(double) * (size_t)nq), *fk = malloc(sizeof(double) * (size_t)nk),
               *fv = malloc(sizeof(double) * (size_t)nv);
        fd_grad(&p, p.q, nq, fq);
        fd_grad(&p, p.k, nk, fk);
        fd_grad(&p, p.v, nv, fv);
        /* the float64 analytic oracle itself (with the float64 O) */
        double *o = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Lq * c->Dv)),
               *l = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Lq));
        forward64(&p, p.q, p.k, p.v, o, l);
        double *aq = malloc(sizeof(double) * (size_t)(nq + 1)), *ak = malloc(sizeof(double) * (size_t)(nk + 1)),
               *av = malloc(sizeof(double) * (size_t)(nv + 1));
        backward64(&p, o, aq, ak, av);
        double e64 = fmax(rel_err(aq, fq, nq), fmax(rel_err(ak, fk, nk), rel_err(av, fv, nv)));
        if (!(e64 < 1e-7)) fail_msg("%s: float64 analytic backward vs differences %.3g", c->name, e64);
        /* the C reference backward */
        TA_CHECK_OK(run_bwd(&p, TA_SDPA_REFERENCE));
        double *gq = to_f64(&p.dQ), *gk = to_f64(&p.dK), *gv = to_f64(&p.dV);
        double e = fmax(rel_err(gq, fq, nq), fmax(rel_err(gk, fk, nk), rel_err(gv, fv, nv)));
        if (!(e < 1e-4)) fail_msg("%s: reference backward vs differences %.3g", c->name, e);
        free(gq); free(gk); free(gv); free(aq); free(ak); free(av); free(o); free(l);
        free(fq); free(fk); free(fv);
        teardown(&p);
    }
}

/* ------------------------------------------- (b) fused and reference vs float64 */

static const cfg option_cases[] = {
    {"defaults", 2, 2, 2, 5, 7, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"scale", 2, 2, 2, 5, 7, 16, 16, 0.37f, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"scale_neg", 1, 2, 2, 5, 7, 16, 16, -1.5f, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"causal_tl_wide", 2, 2, 2, 5, 9, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"causal_tl_tall", 2, 2, 2, 9, 5, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"causal_br_wide", 2, 2, 2, 5, 9, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"causal_br_tall", 2, 2, 2, 9, 5, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"mask_lqlk_keep", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_LQLK, TA_MASK_KEEP, {0}, 0, 0, 0},
    {"mask_b11lk_block", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_B11LK, TA_MASK_BLOCK, {0}, 0, 0, 0},
    {"mask_1hlqlk_add", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_1HLQLK, TA_MASK_ADDITIVE, {0}, 0, 0, 0},
    {"mask_bhlqlk_keep", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_BHLQLK, TA_MASK_KEEP, {0}, 0, 0, 0},
    {"mask_h1lk_block", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_H1LK, TA_MASK_BLOCK, {0}, 0, 0, 0},
    {"mask_lk_add", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_LK, TA_MASK_ADDITIVE, {0}, 0, 0, 0},
    {"mask_empty_rows", 2, 2, 2, 6, 6, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_LQLK, TA_MASK_KEEP, {0}, 0, 0, 1},
    {"key_lengths", 4, 2, 2, 6, 11, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0, 3, 11, 1}, 1, 0, 0},
    {"key_lengths_br", 4, 2, 2, 6, 11, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {11, 0, 5, 2}, 1, 0, 0},
    {"gqa", 2, 4, 2, 9, 13, 32, 32, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"mqa_causal", 2, 4, 1, 9, 13, 32, 32, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"gqa_additive", 1, 4, 2, 9, 13, 16, 16, 0, TA_CAUSAL_NONE, MASK_1HLQLK, TA_MASK_ADDITIVE, {0}, 0, 0, 0},
    {"dv_wide", 1, 2, 2, 7, 10, 32, 48, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"dv_narrow", 1, 2, 2, 7, 10, 8, 3, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"size1", 1, 1, 1, 1, 1, 8, 8, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"size3", 3, 1, 1, 3, 3, 8, 8, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"size17", 1, 2, 1, 17, 17, 17, 17, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"l129_causal_split", 1, 2, 1, 129, 129, 64, 64, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"l129_group", 2, 4, 4, 129, 130, 24, 40, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"l129_mask_group", 4, 2, 2, 70, 129, 16, 16, 0, TA_CAUSAL_NONE, MASK_B11LK, TA_MASK_ADDITIVE, {0}, 0, 0, 0},
    {"decode", 1, 2, 2, 1, 129, 32, 32, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"one_key", 1, 1, 1, 129, 1, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"hd8", 1, 1, 1, 17, 19, 8, 8, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"hd32", 1, 1, 1, 17, 19, 32, 32, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"hd40", 1, 1, 1, 17, 19, 40, 40, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"hd80", 1, 1, 1, 17, 19, 80, 80, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"hd96", 1, 1, 1, 17, 19, 96, 96, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"hd128", 1, 2, 1, 67, 70, 128, 128, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
    {"blhd", 2, 4, 4, 7, 9, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, LAYOUT_BLHD, 0},
    {"dlast", 2, 4, 2, 7, 70, 16, 12, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_LQLK, TA_MASK_KEEP, {0}, 0, LAYOUT_DLAST, 0},
    {"combined", 3, 2, 1, 17, 19, 24, 40, 0.2f, TA_CAUSAL_BOTTOM_RIGHT, MASK_B11LK, TA_MASK_ADDITIVE, {19, 7, 0}, 1, 0, 0},
    {"no_keys", 2, 2, 1, 3, 0, 8, 8, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
    {"no_queries", 2, 2, 1, 0, 5, 8, 8, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0},
};

static void test_fused_and_reference_match_float64(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < sizeof option_cases / sizeof *option_cases; ci++) {
        prob p;
        setup(&p, &option_cases[ci], 1000 + ci * 10);
        const cfg *c = &p.c;
        double *o = to_f64(&p.O);
        double *wq = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Lq * c->D + 1)),
               *wk = malloc(sizeof(double) * (size_t)(c->B * c->Hkv * c->Lk * c->D + 1)),
               *wv = malloc(sizeof(double) * (size_t)(c->B * c->Hkv * c->Lk * c->Dv + 1));
        backward64(&p, o, wq, wk, wv);
        const ta_sdpa_path paths[3] = {TA_SDPA_REFERENCE, TA_SDPA_AUTO, TA_SDPA_FUSED};
        const char *names[3] = {"reference", "auto", "fused"};
        for (int pi = 0; pi < 3; pi++) {
            TA_CHECK_OK(run_bwd(&p, paths[pi]));
            double eq = max_err(&p.dQ, wq), ek = max_err(&p.dK, wk), ev = max_err(&p.dV, wv);
            if (!(eq <= TOL && ek <= TOL && ev <= TOL))
                fail_msg("%s (%s): max error dQ %.3g, dK %.3g, dV %.3g", c->name, names[pi], eq,
                         ek, ev);
        }
        free(o); free(wq); free(wk); free(wv);
        teardown(&p);
    }
}

/* NaN in dO of one row reaches that row's dQ and the dK / dV of the keys it attends,
 * on both paths; other batches stay finite. */
static void test_nan_propagates(void **state)
{
    (void)state;
    const cfg c = {"nan", 2, 2, 2, 5, 6, 8, 8, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0};
    for (int path = 0; path < 2; path++) {
        prob p;
        setup(&p, &c, 77);
        const int64_t at[4] = {0, 1, 3, 2}; /* batch 0, head 1, query 3: keys 0..3 */
        *ta_tensor_at(&p.dO, at) = NAN;
        TA_CHECK_OK(run_bwd(&p, path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE));
        for (int64_t d = 0; d < c.D; d++) {
            int64_t iq[4] = {0, 1, 3, d}, iq1[4] = {1, 1, 3, d}, ik[4] = {0, 1, 2, d},
                    ik1[4] = {1, 1, 2, d};
            assert_true(isnan(*ta_tensor_at(&p.dQ, iq)));
            assert_true(isfinite(*ta_tensor_at(&p.dQ, iq1)));
            assert_true(isnan(*ta_tensor_at(&p.dK, ik)));
            /* dV = P^T dO: only the NaN's column */
            assert_true(d == 2 ? isnan(*ta_tensor_at(&p.dV, ik)) : isfinite(*ta_tensor_at(&p.dV, ik)));
            assert_true(isfinite(*ta_tensor_at(&p.dK, ik1)));
        }
        teardown(&p);
    }
}

/* ------------------------------------------------ (c) any thread count, same bits */

static void test_bitwise_across_threads(void **state)
{
    (void)state;
    static const cfg cases[] = {
        /* plan "split" (one group, several key tiles) and plan "group" */
        {"split", 1, 2, 1, 150, 200, 32, 24, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, 0, 0},
        {"group", 3, 4, 4, 100, 150, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_LQLK, TA_MASK_ADDITIVE, {0}, 0, 0, 0},
    };
    int saved = ta_get_num_threads();
    for (size_t ci = 0; ci < 2; ci++)
        for (int path = 0; path < 2; path++) {
            prob p;
            setup(&p, &cases[ci], 500 + ci);
            float *ref[3] = {0};
            ta_tensor *outs[3] = {&p.sdQ, &p.sdK, &p.sdV};
            for (int nt = 1; nt <= 3; nt++) {
                TA_CHECK_OK(ta_set_num_threads(nt));
                TA_CHECK_OK(run_bwd(&p, path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE));
                for (int t = 0; t < 3; t++) {
                    size_t bytes = sizeof(float) * (size_t)ta_tensor_numel(outs[t]);
                    if (nt == 1) {
                        ref[t] = malloc(bytes);
                        memcpy(ref[t], outs[t]->data, bytes);
                    } else if (memcmp(ref[t], outs[t]->data, bytes) != 0) {
                        fail_msg("%s (%s): output %d differs between 1 and %d threads",
                                 cases[ci].name, path ? "fused" : "reference", t, nt);
                    }
                }
            }
            for (int t = 0; t < 3; t++) free(ref[t]);
            teardown(&p);
        }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* ----------------------------------------------------------- (d) error paths */

static void test_errors(void **state)
{
    (void)state;
    const cfg c = {"err", 2, 4, 2, 7, 7, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, 0, 0};
    prob p;
    setup(&p, &c, 9);
    const char *fn = "ta_sdpa_backward: ";
    ta_tensor *dQ = &p.dQ, *dK = &p.dK, *dV = &p.dV;
    const ta_tensor *dO = &p.dO, *Q = &p.Q, *K = &p.K, *V = &p.V, *O = &p.O, *L = &p.L;
    ta_sdpa_opts o = {0};
    TA_CHECK_OK(ta_tensor_fill(dQ, 5.0f));
    TA_CHECK_OK(ta_tensor_fill(dK, 5.0f));
    TA_CHECK_OK(ta_tensor_fill(dV, 5.0f));

    ta_tensor bad = {0}, bad2 = {0}, bad3 = {0};
    char msg[256];
#define EXPECT(call, code, needle)                                                     \
    do {                                                                               \
        TA_CHECK_ERR(call, code, needle);                                              \
        assert_non_null(strstr(ta_last_error(), fn));                                  \
    } while (0)

    EXPECT(ta_sdpa_backward(NULL, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dQ is NULL");
    EXPECT(ta_sdpa_backward(dQ, NULL, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dK is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, NULL, dO, Q, K, V, O, L, &o), TA_EINVAL, "dV is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, NULL, Q, K, V, O, L, &o), TA_EINVAL, "dO is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, NULL, K, V, O, L, &o), TA_EINVAL, "Q is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, NULL, L, &o), TA_EINVAL, "O is NULL");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, NULL, &o), TA_EINVAL, "lse is NULL");
    ta_tensor W = {0};
    o.weights = &W;
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "opts->weights must be NULL");
    o.weights = NULL;
    o.lse = &p.L;
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "opts->lse must be NULL");
    o.lse = NULL;
    o.path = (ta_sdpa_path)7;
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "opts->path = 7");
    o.path = TA_SDPA_AUTO;
    o.scale = INFINITY;
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "opts->scale must be finite");
    o.scale = 0;
    int64_t kl[2] = {3, 8};
    o.key_lengths = kl;
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "key_lengths[1] = 8");
    o.key_lengths = NULL;
    const int64_t ms[2] = {3, 7};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 2, ms));
    o.mask = &bad;
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, L, &o), TA_ESHAPE, "does not broadcast");
    o.mask = NULL;
    ta_tensor_free(&bad);

    /* shapes */
    const int64_t k32[4] = {2, 2, 7, 32};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, k32));
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, &bad, V, O, L, &o), TA_ESHAPE, "K has head_dim 32 but Q has 16");
    ta_tensor_free(&bad);
    const int64_t o8[4] = {2, 4, 7, 8};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, o8));
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, &bad, L, &o), TA_ESHAPE, "O has shape [2, 4, 7, 8]");
    EXPECT(ta_sdpa_backward(dQ, dK, dV, &bad, Q, K, V, O, L, &o), TA_ESHAPE,
           "dO has shape [2, 4, 7, 8], expected [B, H, Lq, Dv] = [2, 4, 7, 16]");
    ta_tensor_free(&bad);
    const int64_t l2[3] = {2, 4, 6};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 3, l2));
    EXPECT(ta_sdpa_backward(dQ, dK, dV, dO, Q, K, V, O, &bad, &o), TA_ESHAPE,
           "lse has shape [2, 4, 6], expected [B, H, Lq] = [2, 4, 7]");
    ta_tensor_free(&bad);
    const int64_t k4[4] = {2, 4, 7, 16};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, k4));
    EXPECT(ta_sdpa_backward(dQ, &bad, dV, dO, Q, K, V, O, L, &o), TA_ESHAPE,
           "dK has shape [2, 4, 7, 16], expected [B, Hkv, Lk, D] = [2, 2, 7, 16]");
    EXPECT(ta_sdpa_backward(dQ, dK, &bad, dO, Q, K, V, O, L, &o), TA_ESHAPE,
           "dV has shape [2, 4, 7, 16], expected [B, Hkv, Lk, Dv] = [2, 2, 7, 16]");
    ta_tensor_free(&bad);
    const int64_t q3[4] = {2, 4, 7, 3};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, q3));
    EXPECT(ta_sdpa_backward(&bad, dK, dV, dO, Q, K, V, O, L, &o), TA_ESHAPE,
           "dQ has shape [2, 4, 7, 3], expected [B, H, Lq, D] = [2, 4, 7, 16]");
    ta_tensor_free(&bad);

    /* aliasing and overlap */
    const int64_t one[4] = {1, 1, 1, 1};
    TA_CHECK_OK(ta_tensor_zeros(&bad, 4, one));
    bad2 = bad;
    bad2.owned = NULL;
    for (int d = 0; d < 4; d++) {
        bad2.shape[d] = p.dV.shape[d];
        bad2.stride[d] = 0;
    }
    EXPECT(ta_sdpa_backward(dQ, dK, &bad2, dO, Q, K, V, O, L, &o), TA_EINVAL, "dV has stride 0");
    ta_tensor_free(&bad);
    bad3 = p.sQ; /* dQ writing into Q's memory */
    bad3.owned = NULL;
    EXPECT(ta_sdpa_backward(&bad3, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dQ overlaps Q");
    bad3 = p.sdO;
    bad3.owned = NULL;
    EXPECT(ta_sdpa_backward(&bad3, dK, dV, dO, Q, K, V, O, L, &o), TA_EINVAL, "dQ overlaps dO");
    bad3 = p.dK;
    EXPECT(ta_sdpa_backward(dQ, dK, &bad3, dO, Q, K, V, O, L, &o), TA_EINVAL, "dK overlaps dV");
    snprintf(msg, sizeof msg, "%s", ta_last_error());

    /* every failure above left the outputs as they were */
    double *x = to_f64(dQ), *y = to_f64(dK), *z = to_f64(dV);
    for (int64_t e = 0; e < ta_tensor_numel(dQ); e++) assert_true(x[e] == 5.0);
    for (int64_t e = 0; e < ta_tensor_numel(dK); e++) assert_true(y[e] == 5.0 && z[e] == 5.0);
    free(x); free(y); free(z);
#undef EXPECT
    teardown(&p);
}

/* O is an input of the backward: a broadcast view of it (stride 0 over a batch whose
 * entries are equal) is accepted and gives the same gradients as the full tensor. */
static void test_broadcast_o_is_an_input(void **state)
{
    (void)state;
    const int64_t one[4] = {1, 2, 5, 8}, two[4] = {2, 2, 5, 8}, lshape[3] = {2, 2, 5};
    ta_tensor q1, k1, v1, q, k, v, o, lse, dO, g[6];
    TA_CHECK_OK(ta_tensor_empty(&q1, 4, one)); TA_CHECK_OK(ta_randn(&q1, 1));
    TA_CHECK_OK(ta_tensor_empty(&k1, 4, one)); TA_CHECK_OK(ta_randn(&k1, 2));
    TA_CHECK_OK(ta_tensor_empty(&v1, 4, one)); TA_CHECK_OK(ta_randn(&v1, 3));
    /* batch entries equal: views of the single-batch tensors with batch stride 0 */
    const int64_t bst[4] = {0, 40, 8, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&q, q1.data, 4, two, bst));
    TA_CHECK_OK(ta_tensor_from_buffer(&k, k1.data, 4, two, bst));
    TA_CHECK_OK(ta_tensor_from_buffer(&v, v1.data, 4, two, bst));
    TA_CHECK_OK(ta_tensor_empty(&o, 4, two));
    TA_CHECK_OK(ta_tensor_empty(&lse, 3, lshape));
    TA_CHECK_OK(ta_tensor_empty(&dO, 4, two)); TA_CHECK_OK(ta_randn(&dO, 4));
    ta_sdpa_opts fo = {.causal = TA_CAUSAL_TOP_LEFT, .lse = &lse};
    TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &fo));
    ta_tensor ob;
    TA_CHECK_OK(ta_tensor_from_buffer(&ob, o.data, 4, two, bst)); /* batch 0, broadcast */
    for (int i = 0; i < 6; i++) TA_CHECK_OK(ta_tensor_empty(&g[i], 4, two));
    ta_sdpa_opts bo = {.causal = TA_CAUSAL_TOP_LEFT};
    TA_CHECK_OK(ta_sdpa_backward(&g[0], &g[1], &g[2], &dO, &q, &k, &v, &o, &lse, &bo));
    TA_CHECK_OK(ta_sdpa_backward(&g[3], &g[4], &g[5], &dO, &q, &k, &v, &ob, &lse, &bo));
    for (int i = 0; i < 3; i++)
        assert_memory_equal(g[i].data, g[i + 3].data, sizeof(float) * 160);
    for (int i = 0; i < 6; i++) ta_tensor_free(&g[i]);
    ta_tensor_free(&q1); ta_tensor_free(&k1); ta_tensor_free(&v1); ta_tensor_free(&o);
    ta_tensor_free(&lse); ta_tensor_free(&dO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_fused_and_reference_match_float64),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_bitwise_across_threads),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_broadcast_o_is_an_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
