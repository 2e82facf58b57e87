/* ta-test: all-isas
 * The attention variants' gradients against finite differences: a float64 forward written
 * here from DESIGN.md's definitions in plain loops (independent of the library: scale,
 * softcap, ALiBi, additive mask, then causal / window / key-length blocking, the sinks in
 * the denominator), differentiated by central differences of L = sum(dO * O) for every
 * element of Q, K, V and the sinks (h = 1e-5: the error is ~1e-10), against
 * ta_sdpa_backward's dQ, dK, dV and dsinks (reference and automatic paths) within 2e-4.
 * In particular dsinks_h = -sum over b, i of exp(sigma_h - LSE_bhi) D_bhi, D = rowsum(dO
 * O), is checked here, not only against the torch fixtures. The library's forward must
 * agree with the float64 one within 5e-5 (O and LSE, empty rows included). */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vcase {
    const char *name;
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    float scale;
    ta_causal causal;
    int has_window;
    int64_t left, right;
    float softcap;
    int alibi;         /* 0 none, 1 [H], 2 [B, H] */
    int sinks;         /* 0 none, else sinks drawn + sink_shift */
    double sink_shift;
    int mask;          /* an additive [Lq, Lk] mask */
    int64_t kl[2];     /* key lengths of batches 0 and 1 when use_kl */
    int use_kl;
} vcase;

/* The problem's values as doubles (C order) and the options as the library sees them. */
typedef struct vprob {
    const vcase *c;
    double *q, *k, *v, *dout, *slope, *sink, *mask;
} vprob;

static uint64_t rng = 0x2545F4914F6CDD1Du;
static double drand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static double *draw(int64_t n, double scale, double shift)
{
    double *p = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) p[i] = (double)(float)(drand() * scale + shift);
    return p;
}

/* O [B,H,Lq,Dv] and LSE [B,H,Lq] of the definitions, in double; returns L = sum(dO * O). */
static double forward64(const vprob *p, double *O, double *lse)
{
    const vcase *c = p->c;
    const int64_t G = c->H / c->Hkv, delta = c->causal == TA_CAUSAL_TOP_LEFT ? 0 : c->Lk - c->Lq;
    const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)c->D);
    double s[64], loss = 0.0;
    assert_true(c->Lk <= 64);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++) {
                const int64_t row = (b * c->H + h) * c->Lq + i, kh = h / G;
                double mx = c->sinks ? p->sink[h] : -INFINITY;
                for (int64_t j = 0; j < c->Lk; j++) {
                    const int64_t rel = j - (i + delta);
                    int blocked = (c->causal != TA_CAUSAL_NONE && rel > 0) ||
                                  (c->use_kl && j >= c->kl[b]) ||
                                  (c->has_window && c->left >= 0 && rel < -c->left) ||
                                  (c->has_window && c->right >= 0 && rel > c->right);
                    if (blocked) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double x = 0.0;
                    for (int64_t d = 0; d < c->D; d++)
                        x += p->q[row * c->D + d] * p->k[((b * c->Hkv + kh) * c->Lk + j) * c->D + d];
                    x *= scale;
                    if (c->softcap > 0.0f) x = c->softcap * tanh(x / c->softcap);
                    if (c->alibi) x -= p->slope[c->alibi == 2 ? b * c->H + h : h] * fabs((double)rel);
                    if (c->mask) x += p->mask[i * c->Lk + j];
                    s[j] = x;
                    if (x > mx) mx = x;
                }
                double sum = c->sinks ? exp(p->sink[h] - mx) : 0.0;
                for (int64_t j = 0; j < c->Lk; j++) sum += exp(s[j] - mx);
                const int empty_nosink = mx == -INFINITY;
                lse[row] = empty_nosink ? -INFINITY : mx + log(sum);
                for (int64_t d = 0; d < c->Dv; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < c->Lk && !empty_nosink; j++)
                        if (s[j] != -INFINITY)
                            acc += exp(s[j] - lse[row]) * p->v[((b * c->Hkv + kh) * c->Lk + j) * c->Dv + d];
                    O[row * c->Dv + d] = acc;
                    loss += acc * p->dout[row * c->Dv + d];
                }
            }
    return loss;
}

/* Central differences of L over every element of x (n values) into g. */
static void fd(const vprob *p, double *x, int64_t n, double *g, double *O, double *lse)
{
    for (int64_t e = 0; e < n; e++) {
        const double x0 = x[e], hh = 1e-5;
        x[e] = x0 + hh;
        double up = forward64(p, O, lse);
        x[e] = x0 - hh;
        double dn = forward64(p, O, lse);
        x[e] = x0;
        g[e] = (up - dn) / (2 * hh);
    }
}

static ta_tensor tensor_of(const double *x, int ndim, const int64_t *shape)
{
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_empty(&t, ndim, shape));
    int64_t n = ta_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = (float)x[i];
    return t;
}

static void expect_close(const char *c, const char *what, const ta_tensor *t, const double *want,
                         double tol)
{
    int64_t bad;
    double e = ta_test_max_err(t, want, what[0] == 'L' ? 1.0 : 0.0, tol, &bad);
    if (!(e <= tol))
        fail_msg("%s: %s is %.3g off (tolerance %.3g; first bad element %lld)", c, what, e, tol,
                 (long long)bad);
}

static void run(const vcase *c)
{
    const int64_t nq = c->B * c->H * c->Lq * c->D, nk = c->B * c->Hkv * c->Lk * c->D;
    const int64_t nv = c->B * c->Hkv * c->Lk * c->Dv, no = c->B * c->H * c->Lq * c->Dv;
    const int64_t nl = c->B * c->H * c->Lq;
    vprob p = {.c = c, .q = draw(nq, 1.5, 0), .k = draw(nk, 1.5, 0), .v = draw(nv, 1, 0),
               .dout = draw(no, 1, 0), .slope = draw(c->B * c->H, 0.25, 0.3),
               .sink = draw(c->H, 1, c->sink_shift), .mask = draw(c->Lq * c->Lk, 1, 0)};
    double *O = malloc(sizeof(double) * (size_t)no), *L = malloc(sizeof(double) * (size_t)nl);
    double *gq = malloc(sizeof(double) * (size_t)nq), *gk = malloc(sizeof(double) * (size_t)nk);
    double *gv = malloc(sizeof(double) * (size_t)nv), gs[16];
    assert_true(O && L && gq && gk && gv && c->H <= 16);
    fd(&p, p.q, nq, gq, O, L);
    fd(&p, p.k, nk, gk, O, L);
    fd(&p, p.v, nv, gv, O, L);
    if (c->sinks) fd(&p, p.sink, c->H, gs, O, L);
    forward64(&p, O, L);

    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D};
    const int64_t vs[4] = {c->B, c->Hkv, c->Lk, c->Dv}, os[4] = {c->B, c->H, c->Lq, c->Dv};
    const int64_t ms[2] = {c->Lq, c->Lk}, ss[2] = {c->B, c->H};
    ta_tensor Q = tensor_of(p.q, 4, qs), K = tensor_of(p.k, 4, ks), V = tensor_of(p.v, 4, vs);
    ta_tensor dO = tensor_of(p.dout, 4, os), M = tensor_of(p.mask, 2, ms);
    ta_tensor S = tensor_of(p.sink, 1, &c->H);
    ta_tensor A = c->alibi == 2 ? tensor_of(p.slope, 2, ss) : tensor_of(p.slope, 1, &c->H);
    ta_tensor Of, Lf, dQ, dK, dV, dS;
    TA_CHECK_OK(ta_tensor_empty(&Of, 4, os));
    TA_CHECK_OK(ta_tensor_empty(&Lf, 3, os));
    TA_CHECK_OK(ta_tensor_empty(&dQ, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&dK, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&dV, 4, vs));
    TA_CHECK_OK(ta_tensor_empty(&dS, 1, &c->H));
    ta_sdpa_opts o = {.scale = c->scale, .causal = c->causal, .has_window = c->has_window,
                      .window_left = c->left, .window_right = c->right, .softcap = c->softcap,
                      .alibi_slopes = c->alibi ? &A : NULL, .sinks = c->sinks ? &S : NULL,
                      .mask = c->mask ? &M : NULL, .mask_mode = TA_MASK_ADDITIVE,
                      .key_lengths = c->use_kl ? c->kl : NULL};
    for (int path = 0; path < 2; path++) {
        ta_sdpa_opts fo = o;
        fo.path = path ? TA_SDPA_AUTO : TA_SDPA_REFERENCE;
        fo.lse = &Lf;
        TA_CHECK_OK(ta_sdpa(&Of, &Q, &K, &V, &fo));
        expect_close(c->name, "O", &Of, O, 5e-5);
        expect_close(c->name, "LSE", &Lf, L, 5e-5);
        ta_sdpa_opts bo = o;
        bo.path = fo.path;
        bo.dsinks = c->sinks ? &dS : NULL;
        TA_CHECK_OK(ta_sdpa_backward(&dQ, &dK, &dV, &dO, &Q, &K, &V, &Of, &Lf, &bo));
        expect_close(c->name, "dQ", &dQ, gq, 2e-4);
        expect_close(c->name, "dK", &dK, gk, 2e-4);
        expect_close(c->name, "dV", &dV, gv, 2e-4);
        if (c->sinks) expect_close(c->name, "dsinks", &dS, gs, 2e-4);
    }
    ta_tensor *all[] = {&Q, &K, &V, &dO, &M, &S, &A, &Of, &Lf, &dQ, &dK, &dV, &dS};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    double *mine[] = {p.q, p.k, p.v, p.dout, p.slope, p.sink, p.mask, O, L, gq, gk, gv};
    for (size_t i = 0; i < sizeof mine / sizeof *mine; i++) free(mine[i]);
}

static void test_variants_match_finite_differences(void **state)
{
    (void)state;
    const vcase cases[] = {
        /* everything at once: window both sides, softcap, ALiBi [H], sinks, additive mask,
         * key lengths, bottom-right causal, GQA, Lq < Lk */
        {"all", 2, 4, 2, 5, 7, 6, 5, 0, TA_CAUSAL_BOTTOM_RIGHT, 1, 2, 1, 1.3f, 1, 1, 0, 1,
         {7, 3}, 1},
        /* a window that blocks rows 0 and 1 entirely (delta = -3), with sinks */
        {"empty_rows_sinks", 1, 2, 1, 7, 4, 4, 3, 0, TA_CAUSAL_NONE, 1, 1, 1, 0, 0, 1, 0, 0,
         {0, 0}, 0},
        /* a strong softcap with ALiBi per batch and head, top-left causal, Lq > Lk */
        {"softcap_alibi", 2, 2, 2, 6, 5, 8, 4, 0.8f, TA_CAUSAL_TOP_LEFT, 0, 0, 0, 0.5f, 2, 0,
         0, 0, {0, 0}, 0},
        /* sinks that dominate the denominator, a left-only window */
        {"large_sinks", 1, 3, 3, 4, 9, 4, 4, 0, TA_CAUSAL_NONE, 1, 3, -1, 0, 0, 1, 3.0, 0,
         {0, 0}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run(&cases[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_variants_match_finite_differences)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
