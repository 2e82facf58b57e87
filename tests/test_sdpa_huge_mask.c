/* ta-test: all-isas
 * Rows whose scores are all dominated by a huge finite additive mask (-1e30, -FLT_MAX: the
 * "finfo.min" padding masks of many models), on the reference and the fused path, against
 * a float64 oracle. Every score of such a row rounds to the same float, so its softmax is
 * exactly uniform over its keys (1/Lk each, or 1/(Lk+1) with a sink of the same size):
 * O = mean of V, and the gradients those of that uniform softmax, as PyTorch computes
 * them. Its log-sum-exp m + log(l) rounds to m in float32, so nothing may rebuild the
 * weights from the float LSE alone.
 *   Q [1, H, Lq, D], K [1, H, Lk, D], V [1, H, Lk, Dv], mask [Lq, Lk] (additive):
 *   row 0 plain; row 1 all -1e30; row 2 all -FLT_MAX; row 3 keys 0-2 -inf, the rest -1e30. */
#include "ta_test.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 2, LQ = 4, LK = 9, D = 17, DV = 5 };

typedef struct huge {
    float q[H * LQ * D], k[H * LK * D], v[H * LK * DV], mask[LQ * LK], sinks[H];
    bool with_sinks;
} huge;

static void huge_init(huge *p, bool with_sinks)
{
    memset(p, 0, sizeof *p);
    ta_tensor t;
    int64_t n;
    n = H * LQ * D; ta_tensor_from_buffer(&t, p->q, 1, &n, NULL); ta_randn(&t, 71);
    n = H * LK * D; ta_tensor_from_buffer(&t, p->k, 1, &n, NULL); ta_randn(&t, 72);
    n = H * LK * DV; ta_tensor_from_buffer(&t, p->v, 1, &n, NULL); ta_randn(&t, 73);
    for (int j = 0; j < LK; j++) {
        p->mask[1 * LK + j] = -1e30f;
        p->mask[2 * LK + j] = -FLT_MAX;
        p->mask[3 * LK + j] = j < 3 ? -INFINITY : -1e30f;
    }
    p->with_sinks = with_sinks;
    p->sinks[0] = -1e30f; /* as large as the masked rows' scores: it takes 1/(l+1) there */
    p->sinks[1] = 0.5f;
}

/* float64 oracle of row (h, i): the weights w[LK] and the sink's weight, returns the LSE.
 * Scores in double from the float inputs: scale q.k + mask. */
static double oracle_weights(const huge *p, int h, int i, double *w, double *wsink)
{
    const double scale = 1.0 / sqrt((double)D);
    double s[LK], m = -INFINITY;
    const double sig = p->with_sinks ? p->sinks[h] : -INFINITY;
    for (int j = 0; j < LK; j++) {
        double acc = 0.0;
        for (int d = 0; d < D; d++) acc += (double)p->q[(h * LQ + i) * D + d] * p->k[(h * LK + j) * D + d];
        s[j] = acc * scale + (double)p->mask[i * LK + j];
        m = fmax(m, s[j]);
    }
    m = fmax(m, sig);
    double sum = exp(sig - m);
    for (int j = 0; j < LK; j++) sum += exp(s[j] - m);
    for (int j = 0; j < LK; j++) w[j] = exp(s[j] - m) / sum;
    *wsink = exp(sig - m) / sum;
    return m + log(sum);
}

static void check(const char *what, const float *got, const double *ref, int64_t n, double tol)
{
    double big = 1.0;
    for (int64_t x = 0; x < n; x++) big = fmax(big, fabs(ref[x]));
    for (int64_t x = 0; x < n; x++)
        if (!(fabs((double)got[x] - ref[x]) <= tol * big))
            fail_msg("%s[%lld] = %.9g, oracle %.9g", what, (long long)x, (double)got[x], ref[x]);
}

/* The views of p's inputs with the output buffers o and lse, and the options of path. */
typedef struct views {
    ta_tensor Q, K, V, O, L, M, S;
    ta_sdpa_opts opts;
} views;

static const int64_t sq[4] = {1, H, LQ, D}, sk[4] = {1, H, LK, D}, sv[4] = {1, H, LK, DV};
static const int64_t so[4] = {1, H, LQ, DV}, sl[3] = {1, H, LQ}, sm[2] = {LQ, LK}, sh[1] = {H};

static void views_of(views *w, const huge *p, ta_sdpa_path path, float *o, float *lse)
{
    ta_tensor_from_buffer(&w->Q, (float *)p->q, 4, sq, NULL);
    ta_tensor_from_buffer(&w->K, (float *)p->k, 4, sk, NULL);
    ta_tensor_from_buffer(&w->V, (float *)p->v, 4, sv, NULL);
    ta_tensor_from_buffer(&w->O, o, 4, so, NULL);
    ta_tensor_from_buffer(&w->L, lse, 3, sl, NULL);
    ta_tensor_from_buffer(&w->M, (float *)p->mask, 2, sm, NULL);
    ta_tensor_from_buffer(&w->S, (float *)p->sinks, 1, sh, NULL);
    w->opts = (ta_sdpa_opts){.path = path, .mask = &w->M, .mask_mode = TA_MASK_ADDITIVE,
                             .sinks = p->with_sinks ? &w->S : NULL};
}

static void forward(const huge *p, ta_sdpa_path path, float *o, float *lse)
{
    views w;
    views_of(&w, p, path, o, lse);
    w.opts.lse = &w.L;
    TA_CHECK_OK(ta_sdpa(&w.O, &w.Q, &w.K, &w.V, &w.opts));
}

static void check_forward(bool with_sinks)
{
    huge p;
    huge_init(&p, with_sinks);
    double ro[H * LQ * DV] = {0}, w[LK], ws;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < LQ; i++) {
            oracle_weights(&p, h, i, w, &ws);
            for (int j = 0; j < LK; j++)
                for (int c = 0; c < DV; c++) ro[(h * LQ + i) * DV + c] += w[j] * p.v[(h * LK + j) * DV + c];
        }
    const ta_sdpa_path paths[2] = {TA_SDPA_REFERENCE, TA_SDPA_FUSED};
    for (int pi = 0; pi < 2; pi++) {
        float o[H * LQ * DV], lse[H * LQ];
        forward(&p, paths[pi], o, lse);
        check(pi ? "fused O" : "reference O", o, ro, H * LQ * DV, 2e-6);
    }
}

/* With a sink as large as the row's scores, the row's weights are 1/(Lk + 1): the
 * reference forward rebuilt the sink's share from the two float log-sum-exps, both
 * -1e30, and gave 1/Lk (O 10% off at Lk = 9), while the fused path was right. */
static void test_forward_sink_of_masked_rows(void **s)
{
    (void)s;
    check_forward(false);
    check_forward(true);
}

/* The backward of path: dQ, dK, dV (and dsinks) from dO and the path's own forward. */
static void backward(const huge *p, ta_sdpa_path path, const float *dout, float *dq, float *dk,
                     float *dv, float *dsinks)
{
    float o[H * LQ * DV], lse[H * LQ];
    forward(p, path, o, lse);
    views w;
    views_of(&w, p, path, o, lse);
    ta_tensor dO, dQ, dK, dV, dS;
    ta_tensor_from_buffer(&dO, (float *)dout, 4, so, NULL);
    ta_tensor_from_buffer(&dQ, dq, 4, sq, NULL);
    ta_tensor_from_buffer(&dK, dk, 4, sk, NULL);
    ta_tensor_from_buffer(&dV, dv, 4, sv, NULL);
    ta_tensor_from_buffer(&dS, dsinks, 1, sh, NULL);
    w.opts.dsinks = p->with_sinks ? &dS : NULL;
    TA_CHECK_OK(ta_sdpa_backward(&dQ, &dK, &dV, &dO, &w.Q, &w.K, &w.V, &w.O, &w.L, &w.opts));
}

static void check_backward(bool with_sinks)
{
    huge p;
    huge_init(&p, with_sinks);
    float dout[H * LQ * DV];
    int64_t n = H * LQ * DV;
    ta_tensor t;
    ta_tensor_from_buffer(&t, dout, 1, &n, NULL);
    ta_randn(&t, 74);
    /* the float64 oracle: dV_j += w_ij dO_i, dS_ij = w_ij (dO_i . v_j - D_i) with
     * D_i = sum_j w_ij dO_i . v_j, dQ_i = scale sum_j dS_ij k_j, dK_j += scale dS_ij q_i,
     * dsigma = -sum_i w_isink D_i */
    const double scale = 1.0 / sqrt((double)D);
    double rq[H * LQ * D] = {0}, rk[H * LK * D] = {0}, rv[H * LK * DV] = {0}, rs[H] = {0};
    for (int h = 0; h < H; h++)
        for (int i = 0; i < LQ; i++) {
            double w[LK], ws, dp[LK], Di = 0.0;
            oracle_weights(&p, h, i, w, &ws);
            const float *doi = dout + (h * LQ + i) * DV;
            for (int j = 0; j < LK; j++) {
                dp[j] = 0.0;
                for (int c = 0; c < DV; c++) dp[j] += (double)doi[c] * p.v[(h * LK + j) * DV + c];
                Di += w[j] * dp[j];
            }
            rs[h] -= ws * Di;
            for (int j = 0; j < LK; j++) {
                const double ds = w[j] * (dp[j] - Di);
                for (int c = 0; c < DV; c++) rv[(h * LK + j) * DV + c] += w[j] * doi[c];
                for (int d = 0; d < D; d++) {
                    rq[(h * LQ + i) * D + d] += scale * ds * p.k[(h * LK + j) * D + d];
                    rk[(h * LK + j) * D + d] += scale * ds * p.q[(h * LQ + i) * D + d];
                }
            }
        }
    const ta_sdpa_path paths[2] = {TA_SDPA_REFERENCE, TA_SDPA_FUSED};
    for (int pi = 0; pi < 2; pi++) {
        float dq[H * LQ * D], dk[H * LK * D], dv[H * LK * DV], ds[H];
        backward(&p, paths[pi], dout, dq, dk, dv, ds);
        check(pi ? "fused dQ" : "reference dQ", dq, rq, H * LQ * D, 1e-5);
        check(pi ? "fused dK" : "reference dK", dk, rk, H * LK * D, 1e-5);
        check(pi ? "fused dV" : "reference dV", dv, rv, H * LK * DV, 1e-5);
        if (with_sinks) check(pi ? "fused dsinks" : "reference dsinks", ds, rs, H, 1e-5);
    }
}

/* The backward rebuilt each weight as exp(s - LSE) from the forward's float32 LSE, which
 * for these rows is the score itself (-1e30: log(Lk) lost), so every key got weight 1
 * instead of 1/Lk: dQ, dK, dV (and the layers' gradients, a torch-layout float
 * attn_mask of -FLT_MAX rows) several times too large, on both paths and every ISA. */
static void test_backward_of_masked_rows(void **s)
{
    (void)s;
    check_backward(false);
    check_backward(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_sink_of_masked_rows),
        cmocka_unit_test(test_backward_of_masked_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
