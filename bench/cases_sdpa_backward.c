/* Kind "sdpa_backward": ta_sdpa_backward (dQ, dK, dV from dO, Q, K, V, O and the LSE of
 * an untimed forward call) on the reference and the fused path, as a pair like the
 * forward's. Checked on sampled rows of dQ and dV against float64 from the
 * definitions, dK and dV scanned for values never written, and the fused dQ against
 * the reference dQ of the same run. */
#include "cases_sdpa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* t[0..2] = Q, K, V as the forward's; t[3] = O and t[4] = LSE from a forward call
 * (inputs of the backward, not timed); t[5] = dO, N(0,1); t[6] = dQ (the output the
 * harness scans and hands to the fused twin), t[7] = dK, t[8] = dV, all NaN. With a
 * dtype, t[10..12] hold Q, K, V in it and t[13] dO (t[0..2] and t[5] their values). */
static int sdpa_bwd_setup(bench_case *c)
{
    if (bench_sdpa_setup(c)) return -1;
    const bench_sdpa *a = c->state;
    const int64_t q[4] = {a->B, a->H, a->Lq, a->D}, kv[4] = {a->B, a->Hkv, a->Lk, a->D};
    const int64_t lse[3] = {a->B, a->H, a->Lq};
    ta_status st = ta_tensor_empty(&c->t[4], 3, lse);
    if (st == TA_OK) st = ta_tensor_empty(&c->t[5], 4, q);
    if (st == TA_OK) st = ta_randn(&c->t[5], 17);
    if (st != TA_OK) return bench_lib_fail(c, "ta_tensor_empty", st);
    if (a->dtype != TA_F32) {
        st = ta_tensor_empty_dtype(&c->t[13], a->dtype, 4, q);
        if (st == TA_OK) st = ta_tensor_copy(&c->t[13], &c->t[5]);
        if (st == TA_OK) st = ta_tensor_copy(&c->t[5], &c->t[13]);
        if (st != TA_OK) return bench_lib_fail(c, "the half-precision dO", st);
    }
    ta_sdpa_opts fwd = {.causal = a->causal, .lse = &c->t[4]};
    st = ta_sdpa(&c->t[3], &c->t[0], &c->t[1], &c->t[2], &fwd);
    if (st != TA_OK) return bench_lib_fail(c, "ta_sdpa (the forward)", st);
    if (bench_new_output(c, &c->t[6], 4, q) || bench_new_output(c, &c->t[7], 4, kv) ||
        bench_new_output(c, &c->t[8], 4, kv))
        return -1;
    return 0;
}

static int sdpa_bwd_run(bench_case *c)
{
    const bench_sdpa *a = c->state;
    ta_sdpa_opts opts = {.causal = a->causal, .path = a->path};
    const int in = a->dtype == TA_F32 ? 0 : a->half_at, d = a->dtype == TA_F32 ? 5 : 13;
    ta_status st = ta_sdpa_backward(&c->t[6], &c->t[7], &c->t[8], &c->t[d], &c->t[in],
                                    &c->t[in + 1], &c->t[in + 2], &c->t[3], &c->t[4], &opts);
    if (st != TA_OK) return bench_lib_fail(c, "ta_sdpa_backward", st);
    return 0;
}

/* Softmax row (b, h, i) in float64 into p (the visible prefix of Lk doubles) and the
 * exact output row into o (D doubles). Returns the keys it sees. */
static int64_t row64(const bench_case *c, int64_t b, int64_t h, int64_t i, double *p, double *o)
{
    int64_t D = ((const bench_sdpa *)c->state)->D, n;
    double sum = bench_sdpa_exp_row(c, b, h, i, p, &n);
    const float *v = bench_sdpa_value_row(c, b, h, 0);
    for (int64_t j = 0; j < n; j++) p[j] /= sum;
    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++) acc += p[j] * (double)v[j * D + d];
        o[d] = acc;
    }
    return n;
}

/* Sampled rows of dQ (dQ_i = scale sum_j P_ij (dO_i.V_j - dO_i.O_i) K_j) and of dV
 * (dV_j = sum_i P_ij dO_i) in float64 from the definitions; dK and dV scanned for
 * values never written; dQ against the reference path's in the same run. */
static int sdpa_bwd_check(bench_case *c, double *max_err)
{
    const bench_sdpa *a = c->state;
    for (int t = 7; t <= 8; t++) {
        int64_t bad = bench_first_nonfinite(&c->t[t]);
        if (bad >= 0)
            return bench_fail(c, "result check failed: %s element %lld is not finite",
                              t == 7 ? "dK" : "dV", (long long)bad);
    }
    int64_t D = a->D, Lk = a->Lk, rows = a->B * a->H * a->Lq;
    double *p = malloc((size_t)(Lk > 0 ? Lk : 1) * sizeof *p);
    double *o = malloc((size_t)D * sizeof *o), *acc = malloc((size_t)D * sizeof *acc);
    if (!p || !o || !acc) {
        free(p), free(o), free(acc);
        return bench_fail(c, "bench: out of memory for the float64 check");
    }
    double scale = 1.0 / sqrt((double)D), worst = 0.0;
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    for (int n = 0; n < 2 + BENCH_SDPA_ROWS && rows > 0; n++) {
        int64_t r = n == 0 ? 0 : n == 1 ? rows - 1 : (int64_t)(bench_rand(&rng) % (uint64_t)rows);
        int64_t b = r / (a->H * a->Lq), h = r / a->Lq % a->H, i = r % a->Lq;
        int64_t kvh = h / (a->H / a->Hkv);
        const float *k = (const float *)c->t[1].data + (b * a->Hkv + kvh) * Lk * D;
        const float *v = bench_sdpa_value_row(c, b, h, 0);
        const float *dO = (const float *)c->t[5].data + r * D;
        const float *dQ = (const float *)c->t[6].data + r * D;
        int64_t nk = row64(c, b, h, i, p, o);
        double Di = 0.0;
        for (int64_t d = 0; d < D; d++) Di += (double)dO[d] * o[d], acc[d] = 0.0;
        for (int64_t j = 0; j < nk; j++) {
            double dp = 0.0;
            for (int64_t d = 0; d < D; d++) dp += (double)dO[d] * (double)v[j * D + d];
            double ds = p[j] * (dp - Di);
            for (int64_t d = 0; d < D; d++) acc[d] += ds * (double)k[j * D + d];
        }
        for (int64_t d = 0; d < D; d++) worst = bench_worse(worst, fabs(dQ[d] - scale * acc[d]));
    }
    /* dV rows: every query row of the (b, head) that sees key j contributes P_ij dO_i */
    for (int n = 0; n < 3 && a->Hkv == a->H && rows > 0; n++) {
        int64_t b = (int64_t)(bench_rand(&rng) % (uint64_t)a->B);
        int64_t h = (int64_t)(bench_rand(&rng) % (uint64_t)a->H);
        int64_t j = (int64_t)(bench_rand(&rng) % (uint64_t)Lk);
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0;
        for (int64_t i = 0; i < a->Lq; i++) {
            if (bench_sdpa_visible(a->causal, i, a->Lq, Lk) <= j) continue;
            row64(c, b, h, i, p, o);
            const float *dO = (const float *)c->t[5].data + ((b * a->H + h) * a->Lq + i) * D;
            for (int64_t d = 0; d < D; d++) acc[d] += p[j] * (double)dO[d];
        }
        const float *dV = (const float *)c->t[8].data + ((b * a->Hkv + h) * Lk + j) * D;
        for (int64_t d = 0; d < D; d++) worst = bench_worse(worst, fabs(dV[d] - acc[d]));
    }
    free(p), free(o), free(acc);
    if (c->ref_out) worst = bench_worse(worst, bench_diff_vs_reference(c));
    *max_err = worst;
    return 0;
}

static const bench_kind sdpa_backward_kind = {
    .name = "sdpa_backward", .abs_err = 1, .setup = sdpa_bwd_setup, .run = sdpa_bwd_run,
    .check = sdpa_bwd_check, .shape_text = bench_sdpa_shape_text,
    .shape_json = bench_sdpa_shape_json};

/* The backward of one self-attention shape on both paths. FLOPs: 2.5x the forward's
 * useful FLOPs (the recomputed Q K^T, dV, dP, dQ and dK products). The reference
 * materialises P and dP: at L = 8192 that is 4 GiB and half a minute a call, so it
 * runs only up to 1 GiB of them. */
void bench_add_sdpa_backward(bench_state *s, const char *name, int64_t B, int64_t H,
                             int64_t L, int64_t D, ta_causal causal)
{
    bench_add_sdpa_backward_dtype(s, name, B, H, L, D, causal, TA_F32, NULL);
}

void bench_add_sdpa_backward_dtype(bench_state *s, const char *name, int64_t B, int64_t H,
                                   int64_t L, int64_t D, ta_causal causal, ta_dtype dtype,
                                   const char *vs)
{
    bench_sdpa a = bench_sdpa_shape(B, H, H, L, L, D, causal);
    a.dtype = dtype;
    a.half_at = 10;
    double scratch = 2.0 * (double)B * (double)H * (double)L * (double)L * sizeof(float);
    char skip[160] = "";
    if (scratch > (double)(1LL << 30))
        snprintf(skip, sizeof skip,
                 "the reference backward's P and dP would take %.1f GiB (> 1 GiB)",
                 scratch / (double)(1LL << 30));
    bench_case proto = {.flops = 2.5 * (4.0 * a.pairs * (double)D), .output = 6};
    if (vs) { /* each path against the float32 case's */
        snprintf(proto.vs_case, sizeof proto.vs_case, "%s", vs);
        snprintf(proto.vs_key, sizeof proto.vs_key, "ratio_vs_f32");
        proto.vs_scale = 1.0;
    }
    bench_add_sdpa_pair(s, &sdpa_backward_kind, name, &a, &proto, skip);
}
