/* ta-test: all-isas
 * ta_sdpa_backward against independent float64 oracles (tests/support/sdpa_grad_oracle.c):
 *  - a float64 SDPA forward (every option) and central finite differences of
 *    L = sum(dO * O): they check the float64 analytic backward and the C reference
 *    backward (TA_SDPA_REFERENCE);
 *  - the float64 analytic backward: the fused path (TA_SDPA_AUTO / TA_SDPA_FUSED) and the
 *    reference path on every forward option, odd sizes, GQA, Dv != D, non-contiguous
 *    tensors, both of the fused path's plans, within 1e-4 absolute on unit-scale inputs;
 *    the guard cases put every tensor (inputs, LSE, mask, dQ, dK, dV) at the end of
 *    its own mapping, before a PROT_NONE page, so a read or write past any of them (a
 *    tile copy, a dK / dV store) crashes;
 *  - NaN propagation, and bitwise identical results for 1, 2 and 3 threads.
 * The argument errors are in test_sdpa_backward_errors.c. */
#include "ta_test.h"
#include "sdpa_grad_oracle.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4

/* -------------------------------------------------- (a) finite differences */

/* L = sum(dO * O(q, k, v)) in float64. */
static double loss64(const prob *p, const double *q, const double *k, const double *v)
{
    const cfg *c = &p->c;
    int64_t no = c->B * c->H * c->Lq * c->Dv;
    double *o = malloc(sizeof(double) * (size_t)(no + 1)),
           *l = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Lq + 1));
    ta_test_grad_forward64(p, q, k, v, o, l);
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
    for (int64_t e = 0; e < n; e++) worst = ta_test_worse(worst, fabs(got[e] - want[e]) / mag);
    return worst;
}

static void test_finite_differences(void **state)
{
    (void)state;
    static const cfg cases[] = {
        {"plain", 1, 2, 2, 3, 4, 3, 2, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
        {"gqa+causal_br", 2, 2, 1, 4, 3, 3, 3, 0.7f, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
        {"additive", 1, 2, 2, 3, 5, 2, 3, 0, TA_CAUSAL_TOP_LEFT, MASK_1HLQLK, TA_MASK_ADDITIVE, {0}, 0, TA_TEST_BHLD, 0},
        {"lengths+keep", 2, 2, 1, 3, 4, 3, 2, 0, TA_CAUSAL_NONE, MASK_LQLK, TA_MASK_KEEP, {0, 3}, 1, TA_TEST_BHLD, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        prob p;
        ta_test_grad_setup(&p, &cases[ci], 100 + ci * 10);
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
        ta_test_grad_forward64(&p, p.q, p.k, p.v, o, l);
        double *aq = malloc(sizeof(double) * (size_t)(nq + 1)), *ak = malloc(sizeof(double) * (size_t)(nk + 1)),
               *av = malloc(sizeof(double) * (size_t)(nv + 1));
        ta_test_grad_backward64(&p, o, aq, ak, av);
        double e64 = ta_test_worse(ta_test_worse(rel_err(aq, fq, nq), rel_err(ak, fk, nk)),
                                   rel_err(av, fv, nv));
        if (!(e64 < 1e-7)) fail_msg("%s: float64 analytic backward vs differences %.3g", c->name, e64);
        /* the C reference backward */
        TA_CHECK_OK(ta_test_grad_run(&p, TA_SDPA_REFERENCE));
        double *gq = ta_test_to_f64(&p.dQ), *gk = ta_test_to_f64(&p.dK), *gv = ta_test_to_f64(&p.dV);
        double e = ta_test_worse(ta_test_worse(rel_err(gq, fq, nq), rel_err(gk, fk, nk)),
                                 rel_err(gv, fv, nv));
        if (!(e < 1e-4)) fail_msg("%s: reference backward vs differences %.3g", c->name, e);
        free(gq); free(gk); free(gv); free(aq); free(ak); free(av); free(o); free(l);
        free(fq); free(fk); free(fv);
        ta_test_grad_teardown(&p);
    }
}

/* ------------------------------------------- (b) fused and reference vs float64 */

static const cfg option_cases[] = {
    {"defaults", 2, 2, 2, 5, 7, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"scale", 2, 2, 2, 5, 7, 16, 16, 0.37f, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"scale_neg", 1, 2, 2, 5, 7, 16, 16, -1.5f, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"causal_tl_wide", 2, 2, 2, 5, 9, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"causal_tl_tall", 2, 2, 2, 9, 5, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"causal_br_wide", 2, 2, 2, 5, 9, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"causal_br_tall", 2, 2, 2, 9, 5, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"mask_lqlk_keep", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_LQLK, TA_MASK_KEEP, {0}, 0, TA_TEST_BHLD, 0},
    {"mask_b11lk_block", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_B11LK, TA_MASK_BLOCK, {0}, 0, TA_TEST_BHLD, 0},
    {"mask_1hlqlk_add", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_1HLQLK, TA_MASK_ADDITIVE, {0}, 0, TA_TEST_BHLD, 0},
    {"mask_bhlqlk_keep", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_BHLQLK, TA_MASK_KEEP, {0}, 0, TA_TEST_BHLD, 0},
    {"mask_h1lk_block", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_H1LK, TA_MASK_BLOCK, {0}, 0, TA_TEST_BHLD, 0},
    {"mask_lk_add", 2, 3, 3, 5, 17, 8, 8, 0, TA_CAUSAL_NONE, MASK_LK, TA_MASK_ADDITIVE, {0}, 0, TA_TEST_BHLD, 0},
    {"mask_empty_rows", 2, 2, 2, 6, 6, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_LQLK, TA_MASK_KEEP, {0}, 0, TA_TEST_BHLD, 1},
    {"key_lengths", 4, 2, 2, 6, 11, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0, 3, 11, 1}, 1, TA_TEST_BHLD, 0},
    {"key_lengths_br", 4, 2, 2, 6, 11, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {11, 0, 5, 2}, 1, TA_TEST_BHLD, 0},
    {"gqa", 2, 4, 2, 9, 13, 32, 32, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"mqa_causal", 2, 4, 1, 9, 13, 32, 32, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"gqa_additive", 1, 4, 2, 9, 13, 16, 16, 0, TA_CAUSAL_NONE, MASK_1HLQLK, TA_MASK_ADDITIVE, {0}, 0, TA_TEST_BHLD, 0},
    {"dv_wide", 1, 2, 2, 7, 10, 32, 48, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"dv_narrow", 1, 2, 2, 7, 10, 8, 3, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"size1", 1, 1, 1, 1, 1, 8, 8, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"size3", 3, 1, 1, 3, 3, 8, 8, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"size17", 1, 2, 1, 17, 17, 17, 17, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"l129_causal_split", 1, 2, 1, 129, 129, 64, 64, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"l129_group", 2, 4, 4, 129, 130, 24, 40, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"l129_mask_group", 4, 2, 2, 70, 129, 16, 16, 0, TA_CAUSAL_NONE, MASK_B11LK, TA_MASK_ADDITIVE, {0}, 0, TA_TEST_BHLD, 0},
    {"decode", 1, 2, 2, 1, 129, 32, 32, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"one_key", 1, 1, 1, 129, 1, 16, 16, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"hd8", 1, 1, 1, 17, 19, 8, 8, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"hd32", 1, 1, 1, 17, 19, 32, 32, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"hd40", 1, 1, 1, 17, 19, 40, 40, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"hd80", 1, 1, 1, 17, 19, 80, 80, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"hd96", 1, 1, 1, 17, 19, 96, 96, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"hd128", 1, 2, 1, 67, 70, 128, 128, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"blhd", 2, 4, 4, 7, 9, 16, 16, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BLHD, 0},
    {"dlast", 2, 4, 2, 7, 70, 16, 12, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_LQLK, TA_MASK_KEEP, {0}, 0, TA_TEST_DLAST, 0},
    {"combined", 3, 2, 1, 17, 19, 24, 40, 0.2f, TA_CAUSAL_BOTTOM_RIGHT, MASK_B11LK, TA_MASK_ADDITIVE, {19, 7, 0}, 1, TA_TEST_BHLD, 0},
    /* 522 groups: plan "group" takes several a claim (ta_claim_bundle), the last claim short */
    {"many_groups", 261, 2, 2, 3, 5, 8, 8, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"no_keys", 2, 2, 1, 3, 0, 8, 8, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    {"no_queries", 2, 2, 1, 0, 5, 8, 8, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
    /* every tensor ending at a guard page, odd sizes, both fused plans */
    {"guard_odd", 2, 3, 1, 17, 19, 17, 13, 0, TA_CAUSAL_NONE, MASK_LQLK, TA_MASK_KEEP, {0}, 0, TA_TEST_GUARD, 0},
    {"guard_split", 1, 2, 1, 131, 133, 33, 31, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_GUARD, 0},
    {"guard_group", 3, 4, 4, 67, 131, 23, 9, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_B11LK, TA_MASK_ADDITIVE, {0}, 0, TA_TEST_GUARD, 0},
    {"guard_lengths", 3, 2, 2, 9, 70, 5, 3, 0.5f, TA_CAUSAL_NONE, MASK_LK, TA_MASK_BLOCK, {70, 1, 33}, 1, TA_TEST_GUARD, 0},
    {"guard_size1", 1, 1, 1, 1, 1, 1, 1, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_GUARD, 0},
    {"guard_no_keys", 2, 2, 1, 3, 0, 7, 5, 0, TA_CAUSAL_NONE, MASK_NONE, 0, {0}, 0, TA_TEST_GUARD, 0},
};

static void test_fused_and_reference_match_float64(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < sizeof option_cases / sizeof *option_cases; ci++) {
        prob p;
        ta_test_grad_setup(&p, &option_cases[ci], 1000 + ci * 10);
        const cfg *c = &p.c;
        double *o = ta_test_to_f64(&p.O);
        double *wq = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Lq * c->D + 1)),
               *wk = malloc(sizeof(double) * (size_t)(c->B * c->Hkv * c->Lk * c->D + 1)),
               *wv = malloc(sizeof(double) * (size_t)(c->B * c->Hkv * c->Lk * c->Dv + 1));
        ta_test_grad_backward64(&p, o, wq, wk, wv);
        const ta_sdpa_path paths[3] = {TA_SDPA_REFERENCE, TA_SDPA_AUTO, TA_SDPA_FUSED};
        const char *names[3] = {"reference", "auto", "fused"};
        for (int pi = 0; pi < 3; pi++) {
            TA_CHECK_OK(ta_test_grad_run(&p, paths[pi]));
            double eq = ta_test_max_err(&p.dQ, wq, 0.0, 0, NULL), ek = ta_test_max_err(&p.dK, wk, 0.0, 0, NULL), ev = ta_test_max_err(&p.dV, wv, 0.0, 0, NULL);
            if (!(eq <= TOL && ek <= TOL && ev <= TOL))
                fail_msg("%s (%s): max error dQ %.3g, dK %.3g, dV %.3g", c->name, names[pi], eq,
                         ek, ev);
        }
        free(o); free(wq); free(wk); free(wv);
        ta_test_grad_teardown(&p);
    }
}

/* NaN in dO of one row reaches that row's dQ and the dK / dV of the keys it attends,
 * on both paths; other batches stay finite. */
static void test_nan_propagates(void **state)
{
    (void)state;
    const cfg c = {"nan", 2, 2, 2, 5, 6, 8, 8, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0};
    for (int path = 0; path < 2; path++) {
        prob p;
        ta_test_grad_setup(&p, &c, 77);
        const int64_t at[4] = {0, 1, 3, 2}; /* batch 0, head 1, query 3: keys 0..3 */
        *ta_tensor_at(&p.dO, at) = NAN;
        TA_CHECK_OK(ta_test_grad_run(&p, path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE));
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
        ta_test_grad_teardown(&p);
    }
}

/* ------------------------------------------------ (c) any thread count, same bits */

static void test_bitwise_across_threads(void **state)
{
    (void)state;
    static const cfg cases[] = {
        /* plan "split" (one group, several key tiles) and plan "group" */
        {"split", 1, 2, 1, 150, 200, 32, 24, 0, TA_CAUSAL_TOP_LEFT, MASK_NONE, 0, {0}, 0, TA_TEST_BHLD, 0},
        {"group", 3, 4, 4, 100, 150, 16, 16, 0, TA_CAUSAL_BOTTOM_RIGHT, MASK_LQLK, TA_MASK_ADDITIVE, {0}, 0, TA_TEST_BHLD, 0},
    };
    int saved = ta_get_num_threads();
    for (size_t ci = 0; ci < 2; ci++)
        for (int path = 0; path < 2; path++) {
            prob p;
            ta_test_grad_setup(&p, &cases[ci], 500 + ci);
            float *ref[3] = {0};
            ta_tensor *outs[3] = {&p.sdQ, &p.sdK, &p.sdV};
            for (int nt = 1; nt <= 3; nt++) {
                TA_CHECK_OK(ta_set_num_threads(nt));
                TA_CHECK_OK(ta_test_grad_run(&p, path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE));
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
            ta_test_grad_teardown(&p);
        }
    TA_CHECK_OK(ta_set_num_threads(saved));
}


/* Whether the float32 values of view (any strides) are bit for bit those of the
 * contiguous tensor want of the same shape. */
static bool same_bits(const ta_tensor *view, const ta_tensor *want)
{
    ta_tensor back;
    TA_CHECK_OK(ta_tensor_empty(&back, want->ndim, want->shape));
    TA_CHECK_OK(ta_tensor_copy(&back, view));
    const bool same =
        memcmp(back.data, want->data, sizeof(float) * (size_t)ta_tensor_numel(&back)) == 0;
    ta_tensor_free(&back);
    return same;
}
/* Q, K, V, O, dO and the gradients as [B, H, L, D] views of [B, L, H, D] buffers (the
 * layers' head views, varlen's packed layout), whose rows alias in L1 so that the fused
 * backward reads Q, K and dO through contiguous copies (of each group's rows in plan
 * "group", this case's): the same dQ, dK, dV bit for bit as the contiguous tensors of the
 * same values, on 1 and 2 threads and through a caller's workspace of exactly the
 * queried size. */
static void test_bshd_layout_bitwise(void **state)
{
    (void)state;
    enum { B = 2, H = 8, HKV = 4, L = 150, D = 64, N = 9 };
    const int64_t heads[N] = {H, HKV, HKV, H, H, H, HKV, HKV, H}; /* q k v o dO dq dk dv lse */
    ta_tensor c[N], own[N], view[N];
    for (int t = 0; t < 8; t++) {
        TA_CHECK_OK(ta_tensor_empty(&c[t], 4, (int64_t[]){B, heads[t], L, D}));
        TA_CHECK_OK(ta_randn(&c[t], 40 + (uint64_t)t));
        TA_CHECK_OK(ta_tensor_empty(&own[t], 4, (int64_t[]){B, L, heads[t], D}));
        TA_CHECK_OK(ta_tensor_permute(&view[t], &own[t], (int[]){0, 2, 1, 3}));
        TA_CHECK_OK(ta_tensor_copy(&view[t], &c[t]));
    }
    TA_CHECK_OK(ta_tensor_empty(&c[8], 3, (int64_t[]){B, H, L}));
    ta_sdpa_opts fo = {.causal = TA_CAUSAL_TOP_LEFT, .lse = &c[8], .path = TA_SDPA_FUSED};
    TA_CHECK_OK(ta_sdpa(&c[3], &c[0], &c[1], &c[2], &fo)); /* O and LSE of the contiguous call */
    TA_CHECK_OK(ta_tensor_copy(&view[3], &c[3]));
    ta_sdpa_opts bo = {.causal = TA_CAUSAL_TOP_LEFT, .path = TA_SDPA_FUSED};
    TA_CHECK_OK(ta_sdpa_backward(&c[5], &c[6], &c[7], &c[4], &c[0], &c[1], &c[2], &c[3], &c[8],
                                 &bo));
    const int saved = ta_get_num_threads();
    for (int run = 0; run < 3; run++) { /* 1 thread, 2 threads, 2 threads in a workspace */
        TA_CHECK_OK(ta_set_num_threads(run == 0 ? 1 : 2));
        ta_sdpa_opts vo = bo;
        void *buf = NULL;
        if (run == 2) {
            size_t bytes = 0;
            TA_CHECK_OK(ta_sdpa_backward_workspace_size(&bytes, &view[5], &view[6], &view[7],
                                                        &view[4], &view[0], &view[1], &view[2],
                                                        &view[3], &c[8], &vo));
            buf = malloc(bytes ? bytes : 1);
            assert_non_null(buf);
            vo.workspace = (ta_workspace){.data = buf, .size = bytes};
        }
        for (int t = 5; t < 8; t++) memset(own[t].data, 0xff, sizeof(float) * (size_t)ta_tensor_numel(&own[t]));
        TA_CHECK_OK(ta_sdpa_backward(&view[5], &view[6], &view[7], &view[4], &view[0], &view[1],
                                     &view[2], &view[3], &c[8], &vo));
        for (int t = 5; t < 8; t++)
            if (!same_bits(&view[t], &c[t]))
                fail_msg("run %d gradient %d differs from the contiguous call's", run, t - 5);
        free(buf);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
    for (int t = 0; t < 8; t++) {
        ta_tensor_free(&c[t]);
        ta_tensor_free(&own[t]);
    }
    ta_tensor_free(&c[8]);
}

/* Packed layouts (FlashAttention's qkvpacked, GQA style): Q, K, V and O as slices of
 * one [B, L, H + 2 Hkv + H, D] buffer, and dQ, dK, dV as slices of one
 * [B, L, H + 2 Hkv, D] gradient: the slices interleave without a common element, so
 * the calls take them (until session 35 "dQ overlaps dK") and give the same bits as
 * separate tensors, on both paths and 1 and 2 threads. */
static void test_packed_slices_bitwise(void **state)
{
    (void)state;
    enum { B = 2, H = 4, HKV = 2, L = 70, D = 24, W = H + 2 * HKV };
    const int64_t heads[9] = {H, HKV, HKV, H, H, H, HKV, HKV, H}; /* q k v o dO dq dk dv lse */
    ta_tensor c[9], packed_in, packed_grad, view[8];
    TA_CHECK_OK(ta_tensor_empty(&packed_in, 4, (int64_t[]){B, L, W + H, D}));
    TA_CHECK_OK(ta_tensor_empty(&packed_grad, 4, (int64_t[]){B, L, W, D}));
    const int64_t first[8] = {0, H, H + HKV, W, 0, 0, H, H + HKV}; /* dO: its own tensor */
    for (int t = 0; t < 8; t++) {
        TA_CHECK_OK(ta_tensor_empty(&c[t], 4, (int64_t[]){B, heads[t], L, D}));
        TA_CHECK_OK(ta_randn(&c[t], 70 + (uint64_t)t));
        if (t == 4) continue;
        ta_tensor slice;
        TA_CHECK_OK(ta_tensor_slice(&slice, t < 5 ? &packed_in : &packed_grad, 2, first[t],
                                    first[t] + heads[t], 1));
        TA_CHECK_OK(ta_tensor_permute(&view[t], &slice, (int[]){0, 2, 1, 3}));
        if (t < 3) TA_CHECK_OK(ta_tensor_copy(&view[t], &c[t]));
    }
    view[4] = c[4];
    view[4].owned = NULL;
    TA_CHECK_OK(ta_tensor_empty(&c[8], 3, (int64_t[]){B, H, L}));
    const int saved = ta_get_num_threads();
    for (int path = 0; path < 2; path++)
        for (int threads = 1; threads <= 2; threads++) {
            TA_CHECK_OK(ta_set_num_threads(threads));
            const ta_sdpa_path pa = path ? TA_SDPA_REFERENCE : TA_SDPA_AUTO;
            ta_sdpa_opts fo = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .lse = &c[8], .path = pa};
            TA_CHECK_OK(ta_sdpa(&c[3], &c[0], &c[1], &c[2], &fo));
            TA_CHECK_OK(ta_sdpa(&view[3], &view[0], &view[1], &view[2], &fo));
            if (!same_bits(&view[3], &c[3])) fail_msg("path %d, %d threads: O differs", path, threads);
            ta_sdpa_opts bo = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .path = pa};
            TA_CHECK_OK(ta_sdpa_backward(&c[5], &c[6], &c[7], &c[4], &c[0], &c[1], &c[2], &c[3],
                                         &c[8], &bo));
            TA_CHECK_OK(ta_tensor_fill(&packed_grad, NAN));
            TA_CHECK_OK(ta_sdpa_backward(&view[5], &view[6], &view[7], &view[4], &view[0],
                                         &view[1], &view[2], &view[3], &c[8], &bo));
            for (int t = 5; t < 8; t++)
                if (!same_bits(&view[t], &c[t]))
                    fail_msg("path %d, %d threads: gradient %d differs", path, threads, t - 5);
        }
    /* a slice shifted into its neighbour's heads is still refused */
    ta_tensor slice, shifted;
    TA_CHECK_OK(ta_tensor_slice(&slice, &packed_grad, 2, 1, 1 + H, 1));
    TA_CHECK_OK(ta_tensor_permute(&shifted, &slice, (int[]){0, 2, 1, 3}));
    ta_sdpa_opts bo = {.causal = TA_CAUSAL_BOTTOM_RIGHT};
    TA_CHECK_ERR(ta_sdpa_backward(&shifted, &view[6], &view[7], &view[4], &view[0], &view[1],
                                  &view[2], &view[3], &c[8], &bo), TA_EINVAL, "dQ overlaps dK");
    TA_CHECK_OK(ta_set_num_threads(saved));
    for (int t = 0; t < 9; t++) ta_tensor_free(&c[t]);
    ta_tensor_free(&packed_in);
    ta_tensor_free(&packed_grad);
}

/* A varlen backward whose packed [T, H, D] tensors (H = 8, D = 64: rows 2 KiB apart)
 * run each sequence in plan "group" with each group's rows of Q and dO (and K, with
 * Hkv = 8) copied: Hkv = 8 and sequences of up to 130 keys (wider than a key tile), and
 * Hkv = 1, Dv = 32 with one sequence of 64 keys (one key tile: plan "group" for a single
 * group, whose copies on 2 threads outgrow the whole tensors' copies, so the whole's
 * bound must count them). Through a caller's workspace of exactly the queried size, the same dQ, dK,
 * dV bit for bit as the same values laid out head-major ([H, T, D] seen as [T, H, D]:
 * rows in place, no copy), on 1 and 2 threads. */
static void test_varlen_group_copies_bitwise(void **state)
{
    (void)state;
    enum { H = 8, D = 64 };
    const struct {
        int64_t hkv, dv, ns;
        int32_t cu[5];
    } cfg[2] = {{8, 64, 4, {0, 70, 70, 103, 233}}, {1, 32, 1, {0, 64}}};
    const int saved = ta_get_num_threads();
    for (int n = 0; n < 2; n++) {
        const int64_t T = cfg[n].cu[cfg[n].ns], hk = cfg[n].hkv;
        const int64_t heads[8] = {H, hk, hk, H, H, H, hk, hk}; /* q k v o dO dq dk dv */
        const int64_t dv = cfg[n].dv, cols[8] = {D, D, dv, dv, dv, D, D, dv};
        ta_tensor packed[8], own[8], hm[8];
        for (int t = 0; t < 8; t++) {
            TA_CHECK_OK(ta_tensor_empty(&packed[t], 3, (int64_t[]){T, heads[t], cols[t]}));
            TA_CHECK_OK(ta_randn(&packed[t], 70 + (uint64_t)t));
            TA_CHECK_OK(ta_tensor_empty(&own[t], 3, (int64_t[]){heads[t], T, cols[t]}));
            TA_CHECK_OK(ta_tensor_permute(&hm[t], &own[t], (int[]){1, 0, 2}));
        }
        ta_tensor lse;
        TA_CHECK_OK(ta_tensor_empty(&lse, 2, (int64_t[]){H, T}));
        ta_sdpa_opts o = {.causal = TA_CAUSAL_TOP_LEFT, .path = TA_SDPA_FUSED,
                          .cu_seqlens_q = cfg[n].cu, .cu_seqlens_k = cfg[n].cu,
                          .num_seqs = cfg[n].ns, .lse = &lse};
        TA_CHECK_OK(ta_sdpa(&packed[3], &packed[0], &packed[1], &packed[2], &o));
        o.lse = NULL;
        for (int t = 0; t < 5; t++) TA_CHECK_OK(ta_tensor_copy(&hm[t], &packed[t]));
        TA_CHECK_OK(ta_sdpa_backward(&hm[5], &hm[6], &hm[7], &hm[4], &hm[0], &hm[1], &hm[2],
                                     &hm[3], &lse, &o));
        for (int th = 1; th <= 2; th++) {
            TA_CHECK_OK(ta_set_num_threads(th));
            size_t bytes = 0;
            TA_CHECK_OK(ta_sdpa_backward_workspace_size(&bytes, &packed[5], &packed[6],
                                                        &packed[7], &packed[4], &packed[0],
                                                        &packed[1], &packed[2], &packed[3],
                                                        &lse, &o));
            void *buf = malloc(bytes ? bytes : 1);
            assert_non_null(buf);
            ta_sdpa_opts w = o;
            w.workspace = (ta_workspace){.data = buf, .size = bytes};
            for (int t = 5; t < 8; t++)
                memset(packed[t].data, 0xff, sizeof(float) * (size_t)ta_tensor_numel(&packed[t]));
            TA_CHECK_OK(ta_sdpa_backward(&packed[5], &packed[6], &packed[7], &packed[4],
                                         &packed[0], &packed[1], &packed[2], &packed[3], &lse, &w));
            for (int t = 5; t < 8; t++)
                if (!same_bits(&hm[t], &packed[t]))
                    fail_msg("case %d threads %d gradient %d differs from the head-major call's",
                             n, th, t - 5);
            free(buf);
        }
        for (int t = 0; t < 8; t++) {
            ta_tensor_free(&packed[t]);
            ta_tensor_free(&own[t]);
        }
        ta_tensor_free(&lse);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* Gradients of 16 MiB and more are written with non-temporal stores: the same bits as
 * the same call into gradients whose rows are not 16-byte aligned (stored plainly), for
 * a large dQ (Lq 4096) and a large dK and dV (Lk 4096), on 1 and 2 threads. */
static void test_large_gradients_bitwise(void **state)
{
    (void)state;
    const int64_t H = 32, D = 32, lens[2][2] = {{4096, 64}, {64, 4096}};
    int saved = ta_get_num_threads();
    for (int c = 0; c < 2; c++) {
        const int64_t Lq = lens[c][0], Lk = lens[c][1];
        const int64_t sq[4] = {1, H, Lq, D}, sk[4] = {1, H, Lk, D}, sl[3] = {1, H, Lq};
        ta_tensor q, k, v, o, lse, dout, g[3], u[3];
        TA_CHECK_OK(ta_tensor_empty(&q, 4, sq)); TA_CHECK_OK(ta_randn(&q, 61));
        TA_CHECK_OK(ta_tensor_empty(&k, 4, sk)); TA_CHECK_OK(ta_randn(&k, 62));
        TA_CHECK_OK(ta_tensor_empty(&v, 4, sk)); TA_CHECK_OK(ta_randn(&v, 63));
        TA_CHECK_OK(ta_tensor_empty(&dout, 4, sq)); TA_CHECK_OK(ta_randn(&dout, 64));
        TA_CHECK_OK(ta_tensor_empty(&o, 4, sq));
        TA_CHECK_OK(ta_tensor_empty(&lse, 3, sl));
        ta_sdpa_opts fwd = {.causal = TA_CAUSAL_TOP_LEFT, .path = TA_SDPA_FUSED, .lse = &lse};
        TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &fwd));
        ta_sdpa_opts bwd = fwd;
        bwd.lse = NULL;
        float *ubuf[3];
        for (int t = 0; t < 3; t++) {
            const int64_t *sh = t == 0 ? sq : sk;
            TA_CHECK_OK(ta_tensor_empty(&g[t], 4, sh));
            const size_t n = (size_t)ta_tensor_numel(&g[t]);
            ubuf[t] = malloc((n + 1) * sizeof(float));
            assert_non_null(ubuf[t]);
            TA_CHECK_OK(ta_tensor_from_buffer(&u[t], ubuf[t] + 1, 4, sh, g[t].stride));
        }
        for (int th = 1; th <= 2; th++) {
            TA_CHECK_OK(ta_set_num_threads(th));
            TA_CHECK_OK(ta_sdpa_backward(&g[0], &g[1], &g[2], &dout, &q, &k, &v, &o, &lse, &bwd));
            TA_CHECK_OK(ta_sdpa_backward(&u[0], &u[1], &u[2], &dout, &q, &k, &v, &o, &lse, &bwd));
            for (int t = 0; t < 3; t++)
                if (memcmp(g[t].data, u[t].data, (size_t)ta_tensor_numel(&g[t]) * sizeof(float)))
                    fail_msg("case %d gradient %d threads %d", c, t, th);
        }
        for (int t = 0; t < 3; t++) {
            ta_tensor_free(&g[t]);
            free(ubuf[t]);
        }
        ta_tensor_free(&q);
        ta_tensor_free(&k);
        ta_tensor_free(&v);
        ta_tensor_free(&o);
        ta_tensor_free(&lse);
        ta_tensor_free(&dout);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* No query rows and keys past one key tile (Lq 0, Lk 200), grouped heads, fused and
 * reference: dK and dV are zeros, written over whatever they held (a key tile's next-tile
 * requests divided by the query tiles, of which there are none: session 16's crash). */
static void test_empty_queries_many_keys(void **state)
{
    (void)state;
    const int64_t sq[4] = {2, 4, 0, 32}, sk[4] = {2, 2, 200, 32}, sl[3] = {2, 4, 0};
    const ta_sdpa_path paths[2] = {TA_SDPA_FUSED, TA_SDPA_REFERENCE};
    for (int pi = 0; pi < 2; pi++) {
        ta_tensor q, k, v, o, lse, dout, dq, dk, dv;
        TA_CHECK_OK(ta_tensor_empty(&q, 4, sq));
        TA_CHECK_OK(ta_tensor_empty(&o, 4, sq));
        TA_CHECK_OK(ta_tensor_empty(&dout, 4, sq));
        TA_CHECK_OK(ta_tensor_empty(&dq, 4, sq));
        TA_CHECK_OK(ta_tensor_empty(&lse, 3, sl));
        TA_CHECK_OK(ta_tensor_empty(&k, 4, sk)); TA_CHECK_OK(ta_randn(&k, 71));
        TA_CHECK_OK(ta_tensor_empty(&v, 4, sk)); TA_CHECK_OK(ta_randn(&v, 72));
        TA_CHECK_OK(ta_tensor_empty(&dk, 4, sk)); TA_CHECK_OK(ta_randn(&dk, 73));
        TA_CHECK_OK(ta_tensor_empty(&dv, 4, sk)); TA_CHECK_OK(ta_randn(&dv, 74));
        ta_sdpa_opts op = {.path = paths[pi]};
        TA_CHECK_OK(ta_sdpa_backward(&dq, &dk, &dv, &dout, &q, &k, &v, &o, &lse, &op));
        for (int64_t i = 0; i < ta_tensor_numel(&dk); i++) {
            if (((const float *)dk.data)[i] != 0.0f) fail_msg("path %d dK[%lld] not 0", pi, (long long)i);
            if (((const float *)dv.data)[i] != 0.0f) fail_msg("path %d dV[%lld] not 0", pi, (long long)i);
        }
        ta_tensor *all[] = {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv};
        for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) ta_tensor_free(all[t]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_fused_and_reference_match_float64),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_bitwise_across_threads),
        cmocka_unit_test(test_bshd_layout_bitwise),
        cmocka_unit_test(test_packed_slices_bitwise),
        cmocka_unit_test(test_varlen_group_copies_bitwise),
        cmocka_unit_test(test_large_gradients_bitwise),
        cmocka_unit_test(test_empty_queries_many_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
