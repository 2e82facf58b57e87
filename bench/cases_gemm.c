/* Kinds "sgemm" (ta_sgemm, square, row-major) and "sgemm_batched" (ta_sgemm_batched, the
 * seed's attention GEMMs): C[batch][M,N] = A[batch][M,K] op(B)[batch][K,N], layout "NN"
 * (B stored [K,N]) or "NT" (B stored [N,K], as K in Q K^T). Checked against float64 dot
 * products of sampled elements. */
#include "bench_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct gemm_case {
    int64_t batch, M, N, K;
    const char *layout;
    int64_t bsa, rsa, csa, bsb, rsb, csb; /* operand strides, set by setup */
} gemm_case;

/* Fills a new [n0, n1, n2] tensor (n0 == 0: rank 2) with U[-1, 1) from `seed`; this
 * also touches every page, so no first-touch fault lands in a timed run. */
static int new_input(bench_case *c, ta_tensor *t, int64_t n0, int64_t n1, int64_t n2,
                     uint64_t seed)
{
    int64_t shape3[3] = {n0, n1, n2};
    ta_status st = n0 ? ta_tensor_empty(t, 3, shape3) : ta_tensor_empty(t, 2, shape3 + 1);
    if (st != TA_OK) return bench_lib_fail(c, "ta_tensor_empty", st);
    st = ta_rand_uniform(t, -1.0f, 1.0f, seed);
    if (st != TA_OK) return bench_lib_fail(c, "ta_rand_uniform", st);
    return 0;
}

/* t[0] = A [batch, M, K]; t[1] = B [batch, K, N] (NN) or [batch, N, K] (NT);
 * t[2] = C [batch, M, N]. The plain sgemm case has batch 1. */
static int gemm_setup(bench_case *c)
{
    gemm_case *g = c->state;
    int nt = strcmp(g->layout, "NT") == 0;
    if (new_input(c, &c->t[0], g->batch, g->M, g->K, 1)) return -1;
    if (new_input(c, &c->t[1], g->batch, nt ? g->N : g->K, nt ? g->K : g->N, 2)) return -1;
    int64_t cshape[3] = {g->batch, g->M, g->N};
    if (bench_new_output(c, &c->t[2], 3, cshape)) return -1;
    g->bsa = g->M * g->K;
    g->rsa = g->K;
    g->csa = 1;
    g->bsb = g->K * g->N;
    g->rsb = nt ? 1 : g->N;
    g->csb = nt ? g->K : 1;
    return 0;
}

static int sgemm_run(bench_case *c)
{
    const gemm_case *g = c->state;
    ta_status st = ta_sgemm(c->t[2].data, g->N, 1, c->t[0].data, g->rsa, g->csa, c->t[1].data,
                            g->rsb, g->csb, g->M, g->N, g->K, 1.0f, 0.0f);
    if (st != TA_OK) return bench_lib_fail(c, "ta_sgemm", st);
    return 0;
}

static int sgemm_batched_run(bench_case *c)
{
    const gemm_case *g = c->state;
    ta_status st = ta_sgemm_batched(c->t[2].data, g->M * g->N, g->N, 1, c->t[0].data, g->bsa,
                                    g->rsa, g->csa, c->t[1].data, g->bsb, g->rsb, g->csb,
                                    g->batch, g->M, g->N, g->K, 1.0f, 0.0f);
    if (st != TA_OK) return bench_lib_fail(c, "ta_sgemm_batched", st);
    return 0;
}

static int gemm_check(bench_case *c, double *max_rel_err)
{
    const gemm_case *g = c->state;
    const float *A = c->t[0].data, *B = c->t[1].data, *C = c->t[2].data;
    int64_t per = g->M * g->N;
    bench_sampler smp = bench_sampler_start(g->batch * per, 0x9e3779b97f4a7c15ULL);
    double worst = 0.0;
    for (int64_t e; (e = bench_sampler_next(&smp)) >= 0;) {
        int64_t p = e / per, i = e % per / g->N, j = e % g->N;
        const float *a = A + p * g->bsa + i * g->rsa, *b = B + p * g->bsb + j * g->csb;
        double ref = 0.0, scale = 0.0;
        for (int64_t k = 0; k < g->K; k++) {
            double x = (double)a[k * g->csa] * (double)b[k * g->rsb];
            ref += x;
            scale += fabs(x);
        }
        double err = bench_rel_err(C[e], ref, scale);
        if (err > worst) worst = err;
    }
    *max_rel_err = worst;
    return 0;
}

static void gemm_shape_text(const bench_case *c, char *buf, size_t n)
{
    const gemm_case *g = c->state;
    if (g->batch == 1)
        snprintf(buf, n, "%lldx%lldx%lld", (long long)g->M, (long long)g->N, (long long)g->K);
    else
        snprintf(buf, n, "%lld*%lldx%lldx%lld %s", (long long)g->batch, (long long)g->M,
                 (long long)g->N, (long long)g->K, g->layout);
}

static void gemm_shape_json(const bench_case *c, cJSON *o)
{
    const gemm_case *g = c->state;
    static const char *const keys[4] = {"M", "N", "K", "batch"};
    bench_json_ints(o, 4, keys, (const int64_t[4]){g->M, g->N, g->K, g->batch});
    cJSON_AddStringToObject(o, "layout", g->layout);
}

static const bench_kind sgemm_kind = {
    .name = "sgemm", .setup = gemm_setup, .run = sgemm_run, .check = gemm_check,
    .shape_text = gemm_shape_text, .shape_json = gemm_shape_json};
static const bench_kind sgemm_batched_kind = {
    .name = "sgemm_batched", .setup = gemm_setup, .run = sgemm_batched_run,
    .check = gemm_check, .shape_text = gemm_shape_text, .shape_json = gemm_shape_json};

static void add_gemm(bench_state *s, const bench_kind *kind, const char *name, int64_t batch,
                     int64_t M, int64_t N, int64_t K, const char *layout)
{
    gemm_case g = {.batch = batch, .M = M, .N = N, .K = K, .layout = layout};
    bench_case c = {.kind = kind, .path = "gemm", .state = bench_state_dup(&g, sizeof g),
                    .flops = 2.0 * (double)batch * (double)M * (double)N * (double)K,
                    .threads = s->cfg.threads, .tolerance = BENCH_TOLERANCE, .twin = -1,
                    .output = 2};
    snprintf(c.name, sizeof c.name, "%s", name);
    bench_add_case(s, &c);
}

void bench_add_sgemm(bench_state *s, const char *name, int64_t M, int64_t N, int64_t K)
{
    add_gemm(s, &sgemm_kind, name, 1, M, N, K, "NN");
}

void bench_add_sgemm_batched(bench_state *s, const char *name, int64_t batch, int64_t M,
                             int64_t N, int64_t K, const char *layout)
{
    add_gemm(s, &sgemm_batched_kind, name, batch, M, N, K, layout);
}
