/* ta-test: all-isas
 * Numerical faults in ta_sdpa, each test stating the documented behaviour, checked on
 * the reference path and on the fused path (an error on either fails the test). The
 * oracle is a float64 loop.
 *   NaN in Q            -> that row's output and LSE are NaN, other rows unaffected
 *   +inf score          -> the row is NaN (inf - inf: the row overflowed, as PyTorch)
 *   -inf score          -> that key gets weight 0; the rest is ordinary softmax
 *   logits 1e4, 1e30    -> max-subtracted softmax: finite, equal to the oracle
 *                          (1e30: the weights are one-hot on the largest score)
 *   scores overflowing float (|q.k| > 3.4e38) -> +-inf scores: NaN or weight 0 as above
 *   every key masked    -> output 0, weights 0, LSE -inf
 *   Lk = 0 (no keys)    -> output 0, LSE -inf (the same "attends to nothing" rule)
 *   Lq = Lk = 1, D = 1  -> O = V, LSE = the single scaled score
 *   denormal inputs     -> kept (no flush to zero): results match the oracle to within
 *                          a few denormal steps */
#include "ta_test.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct prob {
    int64_t Lq, Lk, D, Dv;
    float *q, *k, *v;     /* [Lq, D], [Lk, D], [Lk, Dv] (B = H = 1) */
    const float *keep;    /* NULL or [Lq, Lk] keep mask */
    float *o, *lse, *w;   /* outputs */
} prob;

static void prob_init(prob *p, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->Lq = Lq; p->Lk = Lk; p->D = D; p->Dv = Dv;
    p->q = calloc((size_t)(Lq * D + 1), sizeof(float));
    p->k = calloc((size_t)(Lk * D + 1), sizeof(float));
    p->v = calloc((size_t)(Lk * Dv + 1), sizeof(float));
    p->o = calloc((size_t)(Lq * Dv + 1), sizeof(float));
    p->lse = calloc((size_t)Lq + 1, sizeof(float));
    p->w = calloc((size_t)(Lq * Lk + 1), sizeof(float));
    ta_tensor t;
    int64_t n;
    n = Lq * D; ta_tensor_from_buffer(&t, p->q, 1, &n, NULL); ta_randn(&t, seed);
    n = Lk * D; ta_tensor_from_buffer(&t, p->k, 1, &n, NULL); ta_randn(&t, seed + 1);
    n = Lk * Dv; ta_tensor_from_buffer(&t, p->v, 1, &n, NULL); ta_randn(&t, seed + 2);
}

static void prob_free(prob *p)
{
    free(p->q); free(p->k); free(p->v); free(p->o); free(p->lse); free(p->w);
}

/* Runs ta_sdpa on p along path (weights only on the reference path). */
static ta_status run(prob *p, ta_sdpa_path path)
{
    const int64_t sq[4] = {1, 1, p->Lq, p->D}, sk[4] = {1, 1, p->Lk, p->D};
    const int64_t sv[4] = {1, 1, p->Lk, p->Dv}, so[4] = {1, 1, p->Lq, p->Dv};
    const int64_t sw[4] = {1, 1, p->Lq, p->Lk}, sm[2] = {p->Lq, p->Lk};
    ta_tensor Q, K, V, O, L, W, M;
    ta_tensor_from_buffer(&Q, p->q, 4, sq, NULL);
    ta_tensor_from_buffer(&K, p->k, 4, sk, NULL);
    ta_tensor_from_buffer(&V, p->v, 4, sv, NULL);
    ta_tensor_from_buffer(&O, p->o, 4, so, NULL);
    ta_tensor_from_buffer(&L, p->lse, 3, sw, NULL);
    ta_tensor_from_buffer(&W, p->w, 4, sw, NULL);
    ta_sdpa_opts opts = {.path = path, .lse = &L};
    if (path == TA_SDPA_REFERENCE) opts.weights = &W;
    if (p->keep) {
        ta_tensor_from_buffer(&M, (float *)p->keep, 2, sm, NULL);
        opts.mask = &M;
    }
    return ta_sdpa(&O, &Q, &K, &V, &opts);
}

/* float64 oracle of row i: output into o[Dv], returns the LSE. Scores are formed in
 * double from the float inputs; a masked key is skipped. */
static double oracle_row(const prob *p, int64_t i, double *o)
{
    double scale = 1.0 / sqrt((double)p->D), m = -INFINITY;
    double *s = malloc(sizeof(double) * (size_t)(p->Lk + 1));
    for (int64_t j = 0; j < p->Lk; j++) {
        double acc = 0;
        for (int64_t d = 0; d < p->D; d++) acc += (double)p->q[i * p->D + d] * p->k[j * p->D + d];
        s[j] = (p->keep && p->keep[i * p->Lk + j] == 0.0f) ? -INFINITY : acc * scale;
        if (s[j] > m) m = s[j];
    }
    for (int64_t d = 0; d < p->Dv; d++) o[d] = 0;
    if (m == -INFINITY) {
        free(s);
        return -INFINITY;
    }
    double sum = 0;
    for (int64_t j = 0; j < p->Lk; j++) sum += exp(s[j] - m);
    for (int64_t j = 0; j < p->Lk; j++) {
        double w = exp(s[j] - m) / sum;
        if (w != 0)
            for (int64_t d = 0; d < p->Dv; d++) o[d] += w * p->v[j * p->Dv + d];
    }
    free(s);
    return m + log(sum);
}

/* Every row of p against the oracle: |err| <= atol + rtol * |ref|. */
static void check_oracle(const prob *p, const char *what, double atol, double rtol)
{
    double o[64];
    for (int64_t i = 0; i < p->Lq; i++) {
        double lse = oracle_row(p, i, o);
        for (int64_t d = 0; d < p->Dv; d++) {
            double got = p->o[i * p->Dv + d];
            if (!(fabs(got - o[d]) <= atol + rtol * fabs(o[d])))
                fail_msg("%s: O[%lld, %lld] = %.9g, oracle %.9g", what, (long long)i,
                         (long long)d, got, o[d]);
        }
        double gl = p->lse[i];
        if (isinf(lse) ? gl != lse : !(fabs(gl - lse) <= 1e-5 * fabs(lse) + 1e-5))
            fail_msg("%s: LSE[%lld] = %.9g, oracle %.9g", what, (long long)i, gl, lse);
    }
}

/* Runs body(path) on the reference path, then on the fused path. */
#define FOR_PATHS(body)                                                     \
    do {                                                                    \
        body(TA_SDPA_REFERENCE, "reference");                               \
        body(TA_SDPA_FUSED, "fused");                                       \
    } while (0)

/* ------------------------------------------------------------------- tests */

static void nan_in_q(ta_sdpa_path path, const char *name)
{
    prob p;
    prob_init(&p, 4, 6, 8, 5, 10);
    p.q[1 * 8 + 3] = NAN; /* row 1 */
    TA_CHECK_OK(run(&p, path));
    for (int64_t d = 0; d < 5; d++)
        if (!isnan(p.o[1 * 5 + d])) fail_msg("%s: NaN in Q row 1 did not reach O", name);
    assert_true(isnan(p.lse[1]));
    p.q[1 * 8 + 3] = 0.0f; /* the oracle for the other rows */
    double o[8];
    for (int64_t i = 0; i < 4; i++) {
        if (i == 1) continue;
        oracle_row(&p, i, o);
        for (int64_t d = 0; d < 5; d++) assert_true(fabs(p.o[i * 5 + d] - o[d]) < 1e-5);
    }
    prob_free(&p);
}
static void test_nan_in_q(void **s) { (void)s; FOR_PATHS(nan_in_q); }

static void inf_scores(ta_sdpa_path path, const char *name)
{
    prob p;
    prob_init(&p, 3, 5, 4, 3, 20);
    for (int d = 0; d < 4; d++) p.q[0 * 4 + d] = p.q[2 * 4 + d] = 1.0f; /* rows 0, 2 positive */
    for (int d = 0; d < 4; d++) p.k[2 * 4 + d] = 0.5f;
    p.k[2 * 4 + 1] = INFINITY;  /* key 2: score +inf for rows 0 and 2 */
    p.q[1 * 4 + 1] = 0.0f;      /* row 1: 0 * inf = NaN */
    TA_CHECK_OK(run(&p, path));
    for (int i = 0; i < 3; i++) {
        for (int d = 0; d < 3; d++)
            if (!isnan(p.o[i * 3 + d])) fail_msg("%s: row %d with a +inf/NaN score is not NaN", name, i);
        assert_true(isnan(p.lse[i]));
    }
    /* -inf: key 2 gets weight 0 where q > 0, the rest is ordinary */
    p.k[2 * 4 + 1] = -INFINITY;
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 4; d++) p.q[i * 4 + d] = 0.25f + 0.1f * (float)(i + d);
    TA_CHECK_OK(run(&p, path));
    check_oracle(&p, name, 1e-6, 1e-5);
    if (path == TA_SDPA_REFERENCE)
        for (int i = 0; i < 3; i++) assert_true(p.w[i * 5 + 2] == 0.0f);
    prob_free(&p);
}
static void test_inf_scores(void **s) { (void)s; FOR_PATHS(inf_scores); }

/* A sink logit +inf is a +inf score in the row's softmax: a row with keys is NaN (output
 * and LSE), a row whose keys are all blocked gets O = 0 and LSE = sigma = +inf. The
 * reference path gave O = 0 and LSE +inf on every row (the limit) while the fused path
 * gave NaN. */
static void inf_sink(ta_sdpa_path path, const char *name)
{
    prob p;
    prob_init(&p, 3, 4, 8, 3, 30);
    float keep[3 * 4], sink = INFINITY;
    for (int x = 0; x < 12; x++) keep[x] = x / 4 == 1 ? 0.0f : 1.0f; /* row 1: no key */
    const int64_t sq[4] = {1, 1, 3, 8}, sk[4] = {1, 1, 4, 8}, sv[4] = {1, 1, 4, 3};
    const int64_t so[4] = {1, 1, 3, 3}, sm[2] = {3, 4}, sh[1] = {1};
    ta_tensor Q, K, V, O, L, M, S;
    ta_tensor_from_buffer(&Q, p.q, 4, sq, NULL);
    ta_tensor_from_buffer(&K, p.k, 4, sk, NULL);
    ta_tensor_from_buffer(&V, p.v, 4, sv, NULL);
    ta_tensor_from_buffer(&O, p.o, 4, so, NULL);
    ta_tensor_from_buffer(&L, p.lse, 3, so, NULL);
    ta_tensor_from_buffer(&M, keep, 2, sm, NULL);
    ta_tensor_from_buffer(&S, &sink, 1, sh, NULL);
    ta_sdpa_opts opts = {.path = path, .lse = &L, .mask = &M, .sinks = &S};
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &opts));
    for (int i = 0; i < 3; i++) {
        const int empty = i == 1;
        for (int d = 0; d < 3; d++)
            if (empty ? p.o[i * 3 + d] != 0.0f : !isnan(p.o[i * 3 + d]))
                fail_msg("%s: sink +inf, row %d: O = %g", name, i, (double)p.o[i * 3 + d]);
        if (empty ? p.lse[i] != INFINITY : !isnan(p.lse[i]))
            fail_msg("%s: sink +inf, row %d: LSE = %g", name, i, (double)p.lse[i]);
    }
    prob_free(&p);
}
static void test_inf_sink(void **s) { (void)s; FOR_PATHS(inf_sink); }

static void large_logits(ta_sdpa_path path, const char *name)
{
    const float scales[2] = {1e4f, 1e30f};
    for (int k = 0; k < 2; k++) {
        prob p;
        prob_init(&p, 5, 9, 16, 4, 30 + (uint64_t)k);
        for (int i = 0; i < 5 * 16; i++) p.q[i] *= scales[k];
        TA_CHECK_OK(run(&p, path));
        char what[64];
        snprintf(what, sizeof what, "%s, Q * %g", name, (double)scales[k]);
        /* Scores ~1e4..1e30: float GEMM error is ~1e-6 relative, so the LSE is compared
         * relatively; the weights are near one-hot and O ~ V at the argmax. */
        double o[8];
        for (int64_t i = 0; i < 5; i++) {
            double lse = oracle_row(&p, i, o);
            assert_true(isfinite(p.lse[i]));
            if (!(fabs(p.lse[i] - lse) <= 1e-5 * fabs(lse))) fail_msg("%s: LSE %g vs %g", what, (double)p.lse[i], lse);
            for (int d = 0; d < 4; d++)
                if (!(fabs(p.o[i * 4 + d] - o[d]) < 1e-3)) fail_msg("%s: O %g vs %g", what, (double)p.o[i * 4 + d], o[d]);
        }
        prob_free(&p);
    }
    /* Scores beyond float: q.k ~ 1e40 overflows to +-inf in the GEMM: a row whose
     * largest score is +inf (or NaN from inf - inf inside the dot product) is NaN;
     * a row whose scores are all -inf attends to nothing. Nothing crashes, and no
     * row is silently finite-but-wrong: each row is NaN, or exactly 0 with LSE -inf. */
    prob p;
    prob_init(&p, 4, 6, 4, 3, 40);
    for (int i = 0; i < 4 * 4; i++) p.q[i] = (i / 4) % 2 ? -1e20f : 1e20f;
    for (int i = 0; i < 6 * 4; i++) p.k[i] = 1e20f;
    TA_CHECK_OK(run(&p, path));
    for (int i = 0; i < 4; i++) {
        if (i % 2 == 0) {
            for (int d = 0; d < 3; d++) assert_true(isnan(p.o[i * 3 + d]));
        } else {
            for (int d = 0; d < 3; d++) assert_true(p.o[i * 3 + d] == 0.0f);
            assert_true(p.lse[i] == -INFINITY);
        }
    }
    prob_free(&p);
}
static void test_large_logits(void **s) { (void)s; FOR_PATHS(large_logits); }

static void all_masked(ta_sdpa_path path, const char *name)
{
    prob p;
    prob_init(&p, 3, 4, 8, 5, 50);
    float keep[12];
    for (int i = 0; i < 12; i++) keep[i] = i / 4 == 1 ? 0.0f : 1.0f; /* row 1: nothing */
    p.keep = keep;
    p.v[0] = NAN; /* V's NaN must not reach a row that attends to nothing */
    for (int i = 0; i < 15; i++) p.o[i] = 77.0f;
    TA_CHECK_OK(run(&p, path));
    for (int d = 0; d < 5; d++) assert_true(p.o[1 * 5 + d] == 0.0f);
    assert_true(p.lse[1] == -INFINITY);
    if (path == TA_SDPA_REFERENCE)
        for (int j = 0; j < 4; j++) assert_true(p.w[1 * 4 + j] == 0.0f);
    (void)name;
    prob_free(&p);
}
static void test_all_masked(void **s) { (void)s; FOR_PATHS(all_masked); }

static void no_keys(ta_sdpa_path path, const char *name)
{
    prob p;
    prob_init(&p, 3, 0, 8, 5, 60);
    for (int i = 0; i < 15; i++) p.o[i] = 77.0f;
    for (int i = 0; i < 3; i++) p.lse[i] = 77.0f;
    ta_status st = run(&p, path);
    if (st != TA_OK) fail_msg("%s: Lk = 0 gave %s: %s", name, ta_status_name(st), ta_last_error());
    for (int i = 0; i < 15; i++) assert_true(p.o[i] == 0.0f);
    for (int i = 0; i < 3; i++) assert_true(p.lse[i] == -INFINITY);
    prob_free(&p);
}
static void test_no_keys(void **s) { (void)s; FOR_PATHS(no_keys); }

static void tiny_dims(ta_sdpa_path path, const char *name)
{
    /* L = 1: the weight is exactly 1, O = V, LSE = the scaled score */
    prob p;
    prob_init(&p, 1, 1, 7, 3, 70);
    TA_CHECK_OK(run(&p, path));
    for (int d = 0; d < 3; d++) assert_true(p.o[d] == p.v[d]);
    check_oracle(&p, name, 0, 1e-6);
    prob_free(&p);
    /* D = 1, Dv = 1 */
    prob_init(&p, 17, 13, 1, 1, 71);
    TA_CHECK_OK(run(&p, path));
    check_oracle(&p, name, 1e-6, 1e-5);
    prob_free(&p);
    /* Lq = 1 against many keys (decoding) */
    prob_init(&p, 1, 300, 8, 4, 72);
    TA_CHECK_OK(run(&p, path));
    check_oracle(&p, name, 1e-6, 1e-5);
    prob_free(&p);
}
static void test_tiny_dims(void **s) { (void)s; FOR_PATHS(tiny_dims); }

static void denormals(ta_sdpa_path path, const char *name)
{
    prob p;
    prob_init(&p, 4, 7, 8, 3, 80);
    /* denormal Q and K: scores ~1e-80 underflow to 0 -> uniform weights */
    for (int i = 0; i < 4 * 8; i++) p.q[i] *= 1e-40f;
    for (int i = 0; i < 7 * 8; i++) p.k[i] *= 1e-40f;
    assert_true(fpclassify(p.q[0]) == FP_SUBNORMAL || p.q[0] == 0.0f);
    TA_CHECK_OK(run(&p, path));
    check_oracle(&p, name, 1e-6, 1e-5);
    /* denormal V: O is a denormal average, not flushed to zero */
    for (int i = 0; i < 7 * 3; i++) p.v[i] = 1e-39f * (float)(1 + i % 5);
    TA_CHECK_OK(run(&p, path));
    double o[8];
    for (int i = 0; i < 4; i++) {
        oracle_row(&p, i, o);
        for (int d = 0; d < 3; d++) {
            float got = p.o[i * 3 + d];
            if (got == 0.0f) fail_msg("%s: a denormal output was flushed to zero", name);
            if (!(fabs(got - o[d]) <= 1e-44 * 16 + 1e-5 * o[d]))
                fail_msg("%s: denormal O %g vs %g", name, (double)got, o[d]);
        }
    }
    prob_free(&p);
}
static void test_denormals(void **s) { (void)s; FOR_PATHS(denormals); }

/* ta_softmax alone: the three special rows of its contract. */
static void test_softmax_special_rows(void **s)
{
    (void)s;
    float x[4][3] = {{-INFINITY, -INFINITY, -INFINITY}, {1, NAN, 2}, {1, INFINITY, 2}, {1e30f, -1e30f, 1e30f}};
    float y[4][3];
    const int64_t sh[2] = {4, 3};
    ta_tensor X, Y;
    ta_tensor_from_buffer(&X, &x[0][0], 2, sh, NULL);
    ta_tensor_from_buffer(&Y, &y[0][0], 2, sh, NULL);
    TA_CHECK_OK(ta_softmax(&Y, &X, 1));
    for (int j = 0; j < 3; j++) {
        assert_true(y[0][j] == 0.0f);
        assert_true(isnan(y[1][j]));
        assert_true(isnan(y[2][j]));
    }
    assert_true(y[3][0] == 0.5f && y[3][1] == 0.0f && y[3][2] == 0.5f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_in_q),     cmocka_unit_test(test_inf_scores),
        cmocka_unit_test(test_inf_sink),
        cmocka_unit_test(test_large_logits), cmocka_unit_test(test_all_masked),
        cmocka_unit_test(test_no_keys),      cmocka_unit_test(test_tiny_dims),
        cmocka_unit_test(test_denormals),    cmocka_unit_test(test_softmax_special_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
