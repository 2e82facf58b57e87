/* ta_sdpa_backward's float64 oracle for the backward tests (sdpa_grad_oracle.h): the
 * forward with every option, and the analytic backward dS = P * (dP - D), written from
 * the definitions with plain loops. */
#include "sdpa_grad_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


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
void ta_test_grad_forward64(const prob *p, const double *q, const double *k, const double *v,
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
void ta_test_grad_backward64(const prob *p, const double *o, double *dq, double *dk, double *dv)
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

/* A new float32 tensor *t of shape s: with TA_TEST_GUARD, contiguous floats ending at a
 * guard page (one of p's mappings); else laid out as layout says in *store (4 dims), or
 * (store NULL) contiguous and owning. */
static void make(prob *p, ta_tensor *t, ta_tensor *store, int nd, const int64_t *s,
                 ta_test_layout layout)
{
    if (layout != TA_TEST_GUARD) {
        if (store) ta_test_tensor4(t, store, s, layout, NULL);
        else TA_CHECK_OK(ta_tensor_empty(t, nd, s));
        return;
    }
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    assert_true(p->nguard < (int)(sizeof p->guard / sizeof *p->guard));
    float *x = ta_guard_floats(&p->guard[p->nguard++], (size_t)(n ? n : 1));
    assert_non_null(x);
    TA_CHECK_OK(ta_tensor_from_buffer(t, n ? x : x + 1, nd, s, NULL));
}

void ta_test_grad_setup(prob *p, const cfg *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Lk, c->Dv}, os[4] = {c->B, c->H, c->Lq, c->Dv};
    make(p, &p->Q, &p->sQ, 4, qs, c->layout);
    make(p, &p->K, &p->sK, 4, ks, c->layout);
    make(p, &p->V, &p->sV, 4, vs, c->layout);
    make(p, &p->dO, &p->sdO, 4, os, c->layout);
    make(p, &p->O, &p->sO, 4, os, c->layout == TA_TEST_DLAST ? TA_TEST_BHLD : c->layout);
    make(p, &p->dQ, &p->sdQ, 4, qs, c->layout == TA_TEST_DLAST ? TA_TEST_BLHD : c->layout);
    make(p, &p->dK, &p->sdK, 4, ks, c->layout);
    make(p, &p->dV, &p->sdV, 4, vs, c->layout);
    TA_CHECK_OK(ta_randn(&p->Q, seed));
    TA_CHECK_OK(ta_randn(&p->K, seed + 1));
    TA_CHECK_OK(ta_randn(&p->V, seed + 2));
    TA_CHECK_OK(ta_randn(&p->dO, seed + 3));
    make(p, &p->L, NULL, 3, os, c->layout);
    p->q = ta_test_to_f64(&p->Q);
    p->k = ta_test_to_f64(&p->K);
    p->v = ta_test_to_f64(&p->V);
    p->dout = ta_test_to_f64(&p->dO);

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
        make(p, &p->M, NULL, nd, ms, c->layout);
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
        p->m = ta_test_to_f64(&p->M);
    }
    p->opts = (ta_sdpa_opts){.scale = c->scale, .causal = c->causal,
                             .mask = nd ? &p->M : NULL, .mask_mode = c->mode,
                             .key_lengths = c->use_kl ? c->kl : NULL};

    /* O and LSE: the float64 forward, rounded to float32 (independent of ta_sdpa) */
    int64_t no = c->B * c->H * c->Lq;
    double *o = malloc(sizeof(double) * (size_t)(no * c->Dv + 1)),
           *l = malloc(sizeof(double) * (size_t)(no + 1));
    ta_test_grad_forward64(p, p->q, p->k, p->v, o, l);
    ta_test_from_f64(&p->O, o);
    ta_test_from_f64(&p->L, l);
    free(o);
    free(l);
}

void ta_test_grad_teardown(prob *p)
{
    ta_tensor *t[] = {&p->sQ, &p->sK, &p->sV, &p->sdO, &p->sO, &p->sdQ, &p->sdK, &p->sdV, &p->L,
                      &p->M};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) ta_tensor_free(t[i]);
    free(p->q); free(p->k); free(p->v); free(p->dout); free(p->m);
    for (int i = 0; i < p->nguard; i++) ta_guard_release(&p->guard[i]);
}

ta_status ta_test_grad_run(prob *p, ta_sdpa_path path)
{
    ta_sdpa_opts o = p->opts;
    o.path = path;
    TA_CHECK_OK(ta_tensor_fill(&p->dQ, 9.0f));
    TA_CHECK_OK(ta_tensor_fill(&p->dK, 9.0f));
    TA_CHECK_OK(ta_tensor_fill(&p->dV, 9.0f));
    return ta_sdpa_backward(&p->dQ, &p->dK, &p->dV, &p->dO, &p->Q, &p->K, &p->V, &p->O, &p->L, &o);
}
