/* ta-test: all-isas -- The SGEMM engine (ta_sgemm, ta_sgemm_batched, ta_gemm_strided)
 * against a float64 naive loop, on every kernel set.
 *
 * Error bound, per element: |ours - ref| <= 1e-5 * sqrt(K) * mag + 1e-30, where ref is
 * alpha * sum_k a*b + beta * c0 in float64 and mag = |alpha| * sum_k |a||b| + |beta||c0|
 * (the magnitude the rounding errors scale with, so cancellation cannot hide or fake an
 * error). Operands live against guard pages: a kernel or packing routine that reads
 * one element past the end crashes. */
#include "ta_test.h"

#include "alloc_hook.h"
#include "guard.h"
#include "kernels/kernels.h"
#include "ops/gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A matrix view [rows, cols] with element strides over a guard-page buffer. */
typedef struct mat {
    ta_guard g;
    float *data; /* the buffer (all of it) */
    size_t n;    /* its length in floats */
    float *at;   /* element [0, 0] */
    int64_t rows, cols, rs, cs;
} mat;

/* Layouts: row-major, column-major (the transpose), and "general": both strides
 * non-unit, rows padded. neg: the column stride is negative. */
enum layout { ROW, COL, GEN, NEG };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void mat_make(mat *m, int64_t rows, int64_t cols, enum layout lay)
{
    m->rows = rows, m->cols = cols;
    int64_t off = 0, r = rows ? rows : 1, c = cols ? cols : 1;
    switch (lay) {
    case ROW: m->rs = cols, m->cs = 1; break;
    case COL: m->rs = 1, m->cs = rows; break;
    case GEN: m->rs = 2 * cols + 3, m->cs = 2; break;
    case NEG:
        m->rs = 3 * cols + 1, m->cs = -3;
        off = 3 * (c - 1);
        break;
    }
    m->n = (size_t)(off + (r - 1) * m->rs + (c - 1) * (m->cs < 0 ? 0 : m->cs) + 1);
    m->data = ta_guard_floats(&m->g, m->n);
    assert_non_null(m->data);
    for (size_t i = 0; i < m->n; i++) m->data[i] = rnd();
    m->at = m->data + off;
}

static float *mat_el(const mat *m, int64_t i, int64_t j) { return m->at + i * m->rs + j * m->cs; }

/* Checks C (after) against the float64 oracle computed from A, B and c0 (C before). */
static void check_result(const mat *C, const float *c0, const mat *A, const mat *B, int64_t K,
                         float alpha, float beta)
{
    for (int64_t i = 0; i < C->rows; i++)
        for (int64_t j = 0; j < C->cols; j++) {
            double s = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = *mat_el(A, i, k), b = *mat_el(B, k, j);
                s += a * b;
                mag += fabs(a * b);
            }
            const size_t idx = (size_t)(mat_el(C, i, j) - C->data);
            double cold = beta == 0.0f ? 0.0 : (double)c0[idx];
            double ref = alpha * s + beta * cold;
            mag = fabs((double)alpha) * mag + fabs((double)beta * cold);
            double got = *mat_el(C, i, j);
            double tol = 1e-5 * sqrt((double)(K > 0 ? K : 1)) * mag + 1e-30;
            if (!(fabs(got - ref) <= tol))
                fail_msg("C[%lld,%lld] = %.9g, expected %.9g (tol %.3g; M %lld N %lld K %lld)",
                         (long long)i, (long long)j, got, ref, tol, (long long)C->rows,
                         (long long)C->cols, (long long)K);
        }
}

/* One ta_sgemm call on fresh operands of the given layouts, checked. Elements of C's
 * buffer outside the view must be left alone. */
static void run_case(int64_t M, int64_t N, int64_t K, enum layout la, enum layout lb,
                     enum layout lc, float alpha, float beta, int nan_c)
{
    mat A, B, C;
    mat_make(&A, M, K, la);
    mat_make(&B, K, N, lb);
    mat_make(&C, M, N, lc);
    if (nan_c)
        for (size_t i = 0; i < C.n; i++) C.data[i] = NAN;
    float *c0 = malloc(C.n * sizeof *c0);
    assert_non_null(c0);
    memcpy(c0, C.data, C.n * sizeof *c0);
    TA_CHECK_OK(ta_sgemm(C.at, C.rs, C.cs, A.at, A.rs, A.cs, B.at, B.rs, B.cs, M, N, K, alpha,
                         beta));
    check_result(&C, c0, &A, &B, K, alpha, beta);
    /* Untouched outside the view: mark the view's elements, then compare the rest. */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) c0[mat_el(&C, i, j) - C.data] = C.data[mat_el(&C, i, j) - C.data];
    if (memcmp(c0, C.data, C.n * sizeof *c0) != 0) fail_msg("C changed outside its view");
    free(c0);
    ta_guard_release(&A.g);
    ta_guard_release(&B.g);
    ta_guard_release(&C.g);
}

static const ta_kernels *kt(void) { return ta_kernels_active(); }

static void test_odd_sizes_row_major(void **state)
{
    (void)state;
    const int64_t s[] = {1, 3, 17, 129, 257};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            for (int k = 0; k < 5; k++)
                if (s[i] * s[j] * s[k] <= 257 * 129 * 17 || (i == j && j == k))
                    run_case(s[i], s[j], s[k], ROW, ROW, ROW, 1.0f, 0.0f, 0);
}

/* Sizes one below, at and one above each block of the active kernel: MR, NR (tile
 * edges), KC (a second pass over K with beta = 1), MC (a second A block). */
static void test_sizes_straddling_blocks(void **state)
{
    (void)state;
    const int64_t mr = kt()->sgemm_mr, nr = kt()->sgemm_nr, kc = kt()->sgemm_kc,
                  mc = kt()->sgemm_mc;
    for (int64_t d = -1; d <= 1; d++) {
        run_case(mr + d, nr + d, 5, ROW, ROW, ROW, 1.0f, 0.0f, 0);
        run_case(2 * mr + d, 3 * nr - d, 7, ROW, COL, ROW, 0.5f, 1.0f, 0);
        run_case(mr + 1, nr + 1, kc + d, ROW, ROW, ROW, 1.0f, 0.5f, 0);
        run_case(mc + d, nr + 3, 2 * kc + d, COL, ROW, ROW, -1.0f, 0.0f, 0);
    }
}

/* A read in place (gemm.c, read_a_in_place): a row-major A in blocks of C up to 512
 * columns wide, a block of NC columns cut into such blocks (1100 = 512 + 512 + 76: the
 * last one partly an edge panel), over two KC passes and two MC blocks, on 1 and 2
 * threads (2: the column chunks that share their units); a column-major A packed past
 * one panel and read in place for one. */
static void test_wide_blocks_read_a_in_place(void **state)
{
    (void)state;
    const int64_t mc = kt()->sgemm_mc, kc = kt()->sgemm_kc, nr = kt()->sgemm_nr;
    int saved = ta_get_num_threads();
    for (int threads = 1; threads <= 2; threads++) {
        TA_CHECK_OK(ta_set_num_threads(threads));
        run_case(mc + 7, 1100, kc + 3, ROW, ROW, ROW, 1.0f, 0.5f, 0);
        run_case(2 * mc + 1, 513, 37, ROW, COL, ROW, -0.5f, 0.0f, 1);
        run_case(mc + 3, 3 * nr + 5, kc + 1, COL, ROW, ROW, 1.0f, 1.0f, 0);
        run_case(mc + 3, nr, 41, COL, ROW, ROW, 1.0f, 0.0f, 0);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

static void test_transposes(void **state)
{
    (void)state;
    const enum layout ls[2] = {ROW, COL};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++) {
                run_case(37, 53, 71, ls[a], ls[b], ls[c], 1.0f, 0.0f, 0);
                run_case(129, 17, 257, ls[a], ls[b], ls[c], 0.75f, -0.5f, 0);
            }
}

static void test_general_strides(void **state)
{
    (void)state;
    /* Non-unit column strides on every operand, negative ones, and mixes. */
    run_case(29, 45, 33, GEN, GEN, GEN, 1.0f, 0.0f, 0);
    run_case(29, 45, 33, GEN, GEN, GEN, 1.5f, 2.0f, 0);
    run_case(40, 70, 300, NEG, GEN, NEG, 1.0f, 1.0f, 0);
    run_case(17, 3, 129, GEN, NEG, ROW, -2.0f, 0.5f, 0);
    run_case(65, 33, 19, COL, GEN, COL, 1.0f, 0.25f, 0);
}

static void test_alpha_beta(void **state)
{
    (void)state;
    const float alphas[] = {1.0f, -0.5f, 2.0f, 0.0f}, betas[] = {0.0f, 1.0f, -1.5f, 0.25f};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) run_case(31, 47, 23, ROW, ROW, ROW, alphas[a], betas[b], 0);
}

/* beta == 0: C is not read, so NaN (or garbage) in C must not reach the result, in
 * interior tiles, edge tiles, strided C, and after a second KC pass. */
static void test_beta_zero_ignores_nan_in_c(void **state)
{
    (void)state;
    const int64_t kc = kt()->sgemm_kc;
    run_case(50, 70, 20, ROW, ROW, ROW, 1.0f, 0.0f, 1);
    run_case(50, 70, kc + 9, ROW, COL, ROW, 2.0f, 0.0f, 1);
    run_case(23, 41, 13, GEN, GEN, GEN, 1.0f, 0.0f, 1);
    run_case(23, 41, 13, ROW, ROW, COL, 1.0f, 0.0f, 1);
    run_case(23, 41, 0, ROW, ROW, ROW, 1.0f, 0.0f, 1); /* K == 0: zeros */
}

static void test_empty_sizes(void **state)
{
    (void)state;
    float c[6] = {1, 2, 3, 4, 5, 6}, a[6] = {1, 1, 1, 1, 1, 1};
    /* M or N == 0: nothing is read or written; NULL operands are fine. */
    TA_CHECK_OK(ta_sgemm(c, 3, 1, NULL, 1, 1, NULL, 1, 1, 0, 3, 4, 1.0f, 0.0f));
    TA_CHECK_OK(ta_sgemm(c, 3, 1, NULL, 1, 1, NULL, 1, 1, 2, 0, 4, 1.0f, 0.0f));
    TA_CHECK_OK(ta_sgemm(NULL, 3, 1, a, 1, 1, a, 1, 1, 0, 0, 4, 1.0f, 0.0f));
    TA_CHECK_OK(ta_sgemm_batched(NULL, 0, 1, 1, NULL, 0, 1, 1, NULL, 0, 1, 1, 0, 3, 3, 3, 1.0f,
                                 0.0f));
    for (int i = 0; i < 6; i++) assert_true(c[i] == (float)(i + 1));
    /* K == 0: C = beta * C, and A, B may be NULL. */
    TA_CHECK_OK(ta_sgemm(c, 3, 1, NULL, 1, 1, NULL, 1, 1, 2, 3, 0, 1.0f, 2.0f));
    for (int i = 0; i < 6; i++) assert_true(c[i] == 2.0f * (float)(i + 1));
    run_case(7, 9, 0, ROW, ROW, GEN, 1.0f, -0.5f, 0);
}

/* Batched: each problem against the oracle; A (then B) shared through stride 0. */
static void test_batched_shared_operands(void **state)
{
    (void)state;
    const int64_t nb = 5, M = 19, N = 37, K = 45;
    for (int shared = 0; shared < 3; shared++) {
        mat A, B, C;
        mat_make(&A, (shared == 1 ? 1 : nb) * M, K, ROW);
        mat_make(&B, (shared == 2 ? 1 : nb) * K, N, ROW);
        mat_make(&C, nb * M, N, ROW);
        float *c0 = malloc(C.n * sizeof *c0);
        assert_non_null(c0);
        memcpy(c0, C.data, C.n * sizeof *c0);
        const int64_t bsa = shared == 1 ? 0 : M * K, bsb = shared == 2 ? 0 : K * N;
        TA_CHECK_OK(ta_sgemm_batched(C.at, M * N, N, 1, A.at, bsa, K, 1, B.at, bsb, N, 1, nb, M,
                                     N, K, 1.25f, 0.5f));
        for (int64_t p = 0; p < nb; p++) {
            mat a = A, b = B, c = C;
            a.at += p * bsa, a.rows = M;
            b.at += p * bsb, b.rows = K;
            c.at += p * M * N, c.rows = M;
            check_result(&c, c0, &a, &b, K, 1.25f, 0.5f);
        }
        free(c0);
        ta_guard_release(&A.g);
        ta_guard_release(&B.g);
        ta_guard_release(&C.g);
    }
}

/* ta_gemm_strided with a 2-D batch [2, 3] whose inner batch axis shares B (stride 0)
 * and with ndim 0: the form einsum uses. */
static void test_strided_multidim_batch(void **state)
{
    (void)state;
    const int64_t M = 13, N = 21, K = 34;
    mat A, B, C;
    mat_make(&A, 6 * M, K, ROW);
    mat_make(&B, 2 * K, N, ROW);
    mat_make(&C, 6 * M, N, ROW);
    ta_gemm_batch bt = {.ndim = 2, .shape = {2, 3}, .stride_a = {3 * M * K, M * K},
                        .stride_b = {K * N, 0}, .stride_c = {3 * M * N, M * N}};
    TA_CHECK_OK(ta_gemm_run("test", C.at, N, 1, A.at, K, 1, B.at, N, 1, M, N, K, 1.0f, 0.0f, &bt));
    for (int64_t p = 0; p < 6; p++) {
        mat a = A, b = B, c = C;
        a.at += p * M * K, a.rows = M;
        b.at += (p / 3) * K * N, b.rows = K;
        c.at += p * M * N, c.rows = M;
        check_result(&c, C.data, &a, &b, K, 1.0f, 0.0f);
    }
    ta_gemm_batch none = {.ndim = 0};
    TA_CHECK_OK(ta_gemm_run("test", C.at, N, 1, A.at, K, 1, B.at, N, 1, M, N, K, 1.0f, 0.0f, &none));
    C.rows = M, A.rows = M, B.rows = K;
    check_result(&C, C.data, &A, &B, K, 1.0f, 0.0f);
    ta_guard_release(&A.g);
    ta_guard_release(&B.g);
    ta_guard_release(&C.g);
}

/* The same call on 1, 2 and 3 threads gives the same bits: one big problem (split over
 * columns or rows), odd batches of small and of larger problems (split inside
 * problems); a problem that its threads may share (column chunks whose units a free
 * thread takes: gemm.c, gemm_stealing) whether the chunks run shared (ta_gemm_share_mode
 * 1), as plain items (0) or as the recent calls decide (-1, before and after the
 * others): several MC blocks (units) and KC passes, an edge panel, beta applied once. */
static void test_threads_bitwise_identical(void **state)
{
    (void)state;
    const int64_t kc = kt()->sgemm_kc, mc = kt()->sgemm_mc, nr = kt()->sgemm_nr;
    const struct { int64_t nb, M, N, K; } cs[] = {
        {1, 2 * mc + 5, 301, kc + 37}, {1, 517, 2 * mc + 7, 2 * kc + 1}, {3, 97, 143, kc + 2},
        {3, 3 * mc + 1, 3 * nr + 5, kc + 3}, {1, 3 * mc + 5, 4 * nr + 3, 2 * kc + 7}};
    const int modes[4] = {-1, 0, 1, -1}, saved_mode = ta_gemm_share_mode;
    for (int t = 0; t < 5; t++) {
        const int64_t nb = cs[t].nb, M = cs[t].M, N = cs[t].N, K = cs[t].K;
        mat A, B;
        mat_make(&A, nb * M, K, ROW);
        mat_make(&B, nb * K, N, ROW);
        const size_t nc = (size_t)(nb * M * N);
        float *c0 = malloc(nc * sizeof *c0), *c1 = malloc(nc * sizeof *c1),
              *c2 = malloc(nc * sizeof *c2);
        assert_non_null(c0);
        assert_non_null(c1);
        assert_non_null(c2);
        for (size_t i = 0; i < nc; i++) c0[i] = c1[i] = rnd();
        int saved = ta_get_num_threads();
        TA_CHECK_OK(ta_set_num_threads(1));
        TA_CHECK_OK(ta_sgemm_batched(c1, M * N, N, 1, A.at, M * K, K, 1, B.at, K * N, N, 1, nb,
                                     M, N, K, 0.7f, 0.3f));
        for (int threads = 2; threads <= 3; threads++)
            for (int m = 0; m < 4; m++) {
                ta_gemm_share_mode = modes[m];
                for (size_t i = 0; i < nc; i++) c2[i] = c0[i];
                TA_CHECK_OK(ta_set_num_threads(threads));
                TA_CHECK_OK(ta_sgemm_batched(c2, M * N, N, 1, A.at, M * K, K, 1, B.at, K * N, N,
                                             1, nb, M, N, K, 0.7f, 0.3f));
                if (memcmp(c1, c2, nc * sizeof *c1) != 0)
                    fail_msg("case %d: 1 and %d threads differ (share mode %d)", t, threads,
                             modes[m]);
            }
        ta_gemm_share_mode = saved_mode;
        TA_CHECK_OK(ta_set_num_threads(saved));
        free(c0);
        free(c1);
        free(c2);
        ta_guard_release(&A.g);
        ta_guard_release(&B.g);
    }
}

static void test_errors(void **state)
{
    (void)state;
    float a[16] = {0}, b[16] = {0}, c[16];
    for (int i = 0; i < 16; i++) c[i] = (float)i;
    TA_CHECK_ERR(ta_sgemm(c, 4, 1, a, 4, 1, b, 4, 1, -3, 4, 4, 1.0f, 0.0f), TA_EINVAL,
                 "ta_sgemm: M is negative (-3)");
    TA_CHECK_ERR(ta_sgemm(c, 4, 1, a, 4, 1, b, 4, 1, 4, -1, 4, 1.0f, 0.0f), TA_EINVAL,
                 "ta_sgemm: N is negative (-1)");
    TA_CHECK_ERR(ta_sgemm(c, 4, 1, a, 4, 1, b, 4, 1, 4, 4, -7, 1.0f, 0.0f), TA_EINVAL,
                 "ta_sgemm: K is negative (-7)");
    TA_CHECK_ERR(ta_sgemm_batched(c, 16, 4, 1, a, 16, 4, 1, b, 16, 4, 1, -2, 4, 4, 4, 1.0f,
                                  0.0f),
                 TA_EINVAL, "ta_sgemm_batched: batch is negative (-2)");
    TA_CHECK_ERR(ta_sgemm(NULL, 4, 1, a, 4, 1, b, 4, 1, 4, 4, 4, 1.0f, 0.0f), TA_EINVAL,
                 "ta_sgemm: C is NULL but C is 4 x 4");
    TA_CHECK_ERR(ta_sgemm(c, 4, 1, NULL, 4, 1, b, 4, 1, 4, 4, 2, 1.0f, 0.0f), TA_EINVAL,
                 "ta_sgemm: A is NULL but A is 4 x 2");
    TA_CHECK_ERR(ta_sgemm(c, 4, 1, a, 4, 1, NULL, 4, 1, 4, 4, 2, 1.0f, 0.0f), TA_EINVAL,
                 "ta_sgemm: B is NULL but B is 2 x 4");
    TA_CHECK_ERR(ta_sgemm_batched(c, 16, 4, 1, NULL, 16, 4, 1, b, 16, 4, 1, 1, 4, 4, 4, 1.0f,
                                  0.0f),
                 TA_EINVAL, "ta_sgemm_batched: A is NULL");
    /* Index arithmetic that overflows. */
    TA_CHECK_ERR(ta_sgemm(c, 4, 1, a, INT64_MAX / 2, 1, b, 4, 1, 4, 4, 4, 1.0f, 0.0f),
                 TA_ESHAPE, "ta_sgemm: A strides (batch 0, row 4611686018427387903, column 1)");
    TA_CHECK_ERR(ta_sgemm(c, 4, 1, a, 4, 1, b, 4, INT64_MIN, 4, 4, 4, 1.0f, 0.0f), TA_ESHAPE,
                 "ta_sgemm: B strides");
    TA_CHECK_ERR(ta_sgemm(c, (int64_t)1 << 61, 1, a, 4, 1, b, 4, 1, 4, 4, 4, 1.0f, 0.0f),
                 TA_ESHAPE, "overflow the index range");
    TA_CHECK_ERR(ta_sgemm_batched(c, INT64_MAX / 3, 4, 1, a, 0, 4, 1, b, 0, 4, 1, 4, 4, 4, 4,
                                  1.0f, 0.0f),
                 TA_ESHAPE, "ta_sgemm_batched: C strides (batch 3074457345618258602");
    /* C elements that alias each other. */
    TA_CHECK_ERR(ta_sgemm(c, 0, 1, a, 4, 1, b, 4, 1, 4, 4, 4, 1.0f, 0.0f), TA_ESHAPE,
                 "ta_sgemm: C has a zero stride (batch 0, row 0, column 1) over [1, 4, 4]");
    TA_CHECK_ERR(ta_sgemm_batched(c, 0, 4, 1, a, 0, 4, 1, b, 0, 4, 1, 2, 4, 4, 4, 1.0f, 0.0f),
                 TA_ESHAPE, "ta_sgemm_batched: C has a zero stride");
    /* Out of memory for the packing buffers (the cached block released first). */
    ta_test_fail_allocations();
    ta_status st = ta_sgemm(c, 4, 1, a, 4, 1, b, 4, 1, 4, 4, 4, 1.0f, 0.0f);
    ta_test_stop_counting();
    assert_int_equal(st, TA_ENOMEM);
    assert_non_null(strstr(ta_last_error(), "ta_sgemm: cannot allocate"));
    /* Outputs untouched on every error. */
    for (int i = 0; i < 16; i++) assert_true(c[i] == (float)i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_sizes_row_major),
        cmocka_unit_test(test_sizes_straddling_blocks),
        cmocka_unit_test(test_wide_blocks_read_a_in_place),
        cmocka_unit_test(test_transposes),
        cmocka_unit_test(test_general_strides),
        cmocka_unit_test(test_alpha_beta),
        cmocka_unit_test(test_beta_zero_ignores_nan_in_c),
        cmocka_unit_test(test_empty_sizes),
        cmocka_unit_test(test_batched_shared_operands),
        cmocka_unit_test(test_strided_multidim_batch),
        cmocka_unit_test(test_threads_bitwise_identical),
        cmocka_unit_test(test_errors),
    };
    char name[64];
    snprintf(name, sizeof name, "gemm %s", ta_isa_name(ta_active_isa()));
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}
