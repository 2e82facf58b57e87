/* ta-test: all-isas
 * ta_sdpa beyond the case table both paths share (test_sdpa_cases.c): GQA without
 * copies of K and V on the reference path, rows with nothing to attend, NaN
 * propagation, weights and LSE written through strided views, bitwise equality over
 * thread counts with weights, NULL options, and every argument error. */
#include "ta_test.h"
#include "sdpa_oracle.h"

#include "ops/einsum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* GQA reads K and V in place: the reference path's einsums copy nothing for contiguous
 * inputs (seen through the plan of its last einsum, weights x V, which contracts over
 * Lk = 11; a transpose before it makes sure the plan read is this call's). */
static void test_gqa_does_not_copy_kv(void **state)
{
    (void)state;
    const int64_t qs[4] = {2, 6, 9, 16}, ks[4] = {2, 2, 11, 16};
    ta_tensor Q, K, V, O;
    TA_CHECK_OK(ta_tensor_empty(&Q, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&K, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&V, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&O, 4, qs));
    TA_CHECK_OK(ta_randn(&Q, 1)); TA_CHECK_OK(ta_randn(&K, 2)); TA_CHECK_OK(ta_randn(&V, 3));
    ta_tensor Kt;
    TA_CHECK_OK(ta_einsum1_alloc(&Kt, "bhjd->bhdj", &K));
    ta_einsum_plan_info info;
    ta_einsum_last_plan(&info);
    assert_int_equal(info.path, TA_EINSUM_PATH_GENERIC);
    ta_sdpa_opts o = {.path = TA_SDPA_REFERENCE};
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
    ta_einsum_last_plan(&info);
    assert_int_equal(info.path, TA_EINSUM_PATH_GEMM);
    assert_int_equal(info.k, 11);
    assert_int_equal(info.packed + info.reduced, 0);
    ta_tensor_free(&Kt);
    ta_tensor_free(&Q); ta_tensor_free(&K); ta_tensor_free(&V); ta_tensor_free(&O);
}

/* Rows that may attend to nothing: output 0 (not NaN), weights 0, LSE -inf, even when
 * V holds NaN (those rows never read V). */
static void test_fully_masked_rows(void **state)
{
    (void)state;
    const int64_t qs[4] = {1, 1, 4, 3}, ks[4] = {1, 1, 3, 3};
    ta_tensor Q, K, V, O, W, L, M;
    TA_CHECK_OK(ta_tensor_empty(&Q, 4, qs)); TA_CHECK_OK(ta_randn(&Q, 1));
    TA_CHECK_OK(ta_tensor_empty(&K, 4, ks)); TA_CHECK_OK(ta_randn(&K, 2));
    TA_CHECK_OK(ta_tensor_empty(&V, 4, ks)); TA_CHECK_OK(ta_randn(&V, 3));
    ((float *)V.data)[1 * 3 + 0] = NAN;     /* V[0,0,1,0] */
    TA_CHECK_OK(ta_tensor_full(&O, 4, qs, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&W, 4, qs, 9.0f)); /* [1, 1, Lq=4, Lk=3] */
    TA_CHECK_OK(ta_tensor_full(&L, 3, qs, 9.0f));
    const int64_t ms[2] = {4, 3};
    float mv[12] = {1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0}; /* keep: rows 1 and 3 empty */
    TA_CHECK_OK(ta_tensor_from_buffer(&M, mv, 2, ms, NULL));
    ta_sdpa_opts o = {.mask = &M, .mask_mode = TA_MASK_KEEP, .weights = &W, .lse = &L};
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
    const float *op = O.data, *wp = W.data, *lp = L.data;
    for (int r = 1; r < 4; r += 2) {
        for (int d = 0; d < 3; d++) assert_true(op[r * 3 + d] == 0.0f && !signbit(op[r * 3 + d]));
        for (int j = 0; j < 3; j++) assert_true(wp[r * 3 + j] == 0.0f);
        assert_true(lp[r] == -INFINITY);
    }
    assert_true(isfinite(lp[0]) && isfinite(lp[2]));
    assert_true(isnan(op[0]));                 /* row 0 attends key 1: V's NaN shows */
    /* causal bottom_right with Lq = 4 > Lk = 3: query i sees keys j <= i - 1, so row 0
     * sees none. */
    o.mask = NULL;
    o.causal = TA_CAUSAL_BOTTOM_RIGHT;
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
    for (int d = 0; d < 3; d++) assert_true(op[d] == 0.0f);
    for (int j = 0; j < 3; j++) assert_true(wp[j] == 0.0f);
    assert_true(lp[0] == -INFINITY && isfinite(lp[1]) && isfinite(lp[3]));
    /* Key length 0: every row empty. */
    int64_t kl[1] = {0};
    o.causal = TA_CAUSAL_NONE;
    o.key_lengths = kl;
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
    for (int e = 0; e < 12; e++) assert_true(op[e] == 0.0f && wp[e] == 0.0f);
    for (int r = 0; r < 4; r++) assert_true(lp[r] == -INFINITY);
    /* An additive mask of -inf everywhere: empty as well. */
    float minf[3] = {-INFINITY, -INFINITY, -INFINITY};
    const int64_t m1[1] = {3};
    ta_tensor Mi;
    TA_CHECK_OK(ta_tensor_from_buffer(&Mi, minf, 1, m1, NULL));
    ta_sdpa_opts oa = {.mask = &Mi, .mask_mode = TA_MASK_ADDITIVE, .lse = &L};
    TA_CHECK_OK(ta_tensor_fill(&O, 5.0f));
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &oa));
    for (int e = 0; e < 12; e++) assert_true(op[e] == 0.0f);
    for (int r = 0; r < 4; r++) assert_true(lp[r] == -INFINITY);
    /* Lk = 0: nothing to attend at all. */
    const int64_t s0[4] = {1, 1, 0, 3}, w0[4] = {1, 1, 4, 0};
    ta_tensor K0, V0, W0;
    TA_CHECK_OK(ta_tensor_empty(&K0, 4, s0));
    TA_CHECK_OK(ta_tensor_empty(&V0, 4, s0));
    TA_CHECK_OK(ta_tensor_empty(&W0, 4, w0));
    ta_sdpa_opts o0 = {.weights = &W0, .lse = &L};
    TA_CHECK_OK(ta_tensor_fill(&O, 5.0f));
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K0, &V0, &o0));
    for (int e = 0; e < 12; e++) assert_true(op[e] == 0.0f);
    for (int r = 0; r < 4; r++) assert_true(lp[r] == -INFINITY);
    ta_tensor_free(&Q); ta_tensor_free(&K); ta_tensor_free(&V); ta_tensor_free(&O);
    ta_tensor_free(&W); ta_tensor_free(&L); ta_tensor_free(&K0); ta_tensor_free(&V0);
    ta_tensor_free(&W0);
}

/* NaN in Q poisons its row only; NaN in K at an attended key poisons the rows that
 * attend to it; NaN in K at a padded key is masked away (masked_fill, as the seed). */
static void nan_propagates(ta_sdpa_path path)
{
    const int64_t s[4] = {2, 2, 5, 8};
    ta_tensor Q, K, V, O, L;
    TA_CHECK_OK(ta_tensor_empty(&Q, 4, s)); TA_CHECK_OK(ta_randn(&Q, 1));
    TA_CHECK_OK(ta_tensor_empty(&K, 4, s)); TA_CHECK_OK(ta_randn(&K, 2));
    TA_CHECK_OK(ta_tensor_empty(&V, 4, s)); TA_CHECK_OK(ta_randn(&V, 3));
    TA_CHECK_OK(ta_tensor_empty(&O, 4, s));
    TA_CHECK_OK(ta_tensor_empty(&L, 3, s));
    float *q = Q.data, *k = K.data, *v = V.data;
    q[(0 * 2 + 1) * 40 + 2 * 8 + 3] = NAN;  /* Q[0,1,2,3] */
    k[(1 * 2 + 0) * 40 + 3 * 8 + 0] = NAN;  /* K[1,0,3,0]: key 3 of batch 1 head 0 */
    k[(0 * 2 + 0) * 40 + 4 * 8 + 5] = NAN;  /* K[0,0,4,5]: key 4, padded in batch 0 */
    int64_t kl[2] = {4, 5};
    ta_sdpa_opts o = {.causal = TA_CAUSAL_TOP_LEFT, .key_lengths = kl, .lse = &L, .path = path};
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
    const float *op = O.data, *lp = L.data;
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 5; i++) {
                int want_nan = (b == 0 && h == 1 && i == 2) || (b == 1 && h == 0 && i >= 3);
                const float *row = op + ((b * 2 + h) * 5 + i) * 8;
                for (int d = 0; d < 8; d++)
                    if ((isnan(row[d]) != 0) != want_nan)
                        fail_msg("O[%d,%d,%d,%d] = %g", b, h, i, d, (double)row[d]);
                assert_true((isnan(lp[(b * 2 + h) * 5 + i]) != 0) == want_nan);
            }
    /* NaN in V at an attended key reaches every row that attends it. (Rows for which
     * the key is blocked get it too in the reference path, through weight 0 times NaN
     * in the weights x V einsum, as in PyTorch; that part is not a contract.) */
    TA_CHECK_OK(ta_randn(&K, 2));
    TA_CHECK_OK(ta_randn(&Q, 1));
    v[(0 * 2 + 1) * 40 + 2 * 8 + 6] = NAN;   /* V[0,1,2,6] */
    o.key_lengths = NULL;
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
    for (int i = 0; i < 5; i++) {
        const float *row = op + ((0 * 2 + 1) * 5 + i) * 8;
        if (i >= 2) assert_true(isnan(row[6]));   /* causal: rows i >= 2 see key 2 */
        assert_false(isnan(row[5]));
    }
    ta_tensor_free(&Q); ta_tensor_free(&K); ta_tensor_free(&V); ta_tensor_free(&O);
    ta_tensor_free(&L);
}

static void test_nan_propagates(void **state)
{
    (void)state;
    nan_propagates(TA_SDPA_REFERENCE);
    nan_propagates(TA_SDPA_FUSED);
}

/* Inputs and outputs as strided views: Q, K, V laid out [B, L, H, D] (the second seed's
 * nqhd layout) and permuted; O, weights and LSE written through permuted views. */
static void test_strided_views(void **state)
{
    (void)state;
    enum { B = 2, H = 4, Hkv = 2, Lq = 7, Lk = 9, D = 16 };
    const int64_t qs[4] = {B, Lq, H, D}, ks[4] = {B, Lk, Hkv, D}, os[4] = {B, Lq, H, D};
    const int perm[4] = {0, 2, 1, 3};
    ta_tensor q0, k0, v0, o0, Q, K, V, O, W0, W, L0, L;
    TA_CHECK_OK(ta_tensor_empty(&q0, 4, qs)); TA_CHECK_OK(ta_randn(&q0, 1));
    TA_CHECK_OK(ta_tensor_empty(&k0, 4, ks)); TA_CHECK_OK(ta_randn(&k0, 2));
    TA_CHECK_OK(ta_tensor_empty(&v0, 4, ks)); TA_CHECK_OK(ta_randn(&v0, 3));
    TA_CHECK_OK(ta_tensor_empty(&o0, 4, os));
    TA_CHECK_OK(ta_tensor_permute(&Q, &q0, perm));
    TA_CHECK_OK(ta_tensor_permute(&K, &k0, perm));
    TA_CHECK_OK(ta_tensor_permute(&V, &v0, perm));
    TA_CHECK_OK(ta_tensor_permute(&O, &o0, perm));
    const int64_t wts[4] = {Lk, Lq, H, B};          /* weights stored reversed */
    const int wperm[4] = {3, 2, 1, 0};
    TA_CHECK_OK(ta_tensor_empty(&W0, 4, wts));
    TA_CHECK_OK(ta_tensor_permute(&W, &W0, wperm));
    const int64_t lts[3] = {Lq, B, H};
    const int lperm[3] = {1, 2, 0};
    TA_CHECK_OK(ta_tensor_empty(&L0, 3, lts));
    TA_CHECK_OK(ta_tensor_permute(&L, &L0, lperm));
    ta_sdpa_opts o = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .weights = &W, .lse = &L};
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &o));
    double *rO = malloc(sizeof(double) * B * H * Lq * D), *rW = malloc(sizeof(double) * B * H * Lq * Lk),
           *rL = malloc(sizeof(double) * B * H * Lq);
    ta_sdpa_opts ro = {.causal = TA_CAUSAL_BOTTOM_RIGHT};
    ta_test_sdpa_f64(rO, rW, rL, &Q, &K, &V, &ro, 0.25, false);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                int64_t row = (b * H + h) * Lq + i;
                for (int64_t d = 0; d < D; d++)
                    assert_true(fabs(ta_test_at4(&O, b, h, i, d) - rO[row * D + d]) <= 1e-5);
                for (int64_t j = 0; j < Lk; j++)
                    assert_true(fabs(ta_test_at4(&W, b, h, i, j) - rW[row * Lk + j]) <= 1e-5);
                int64_t li[3] = {b, h, i};
                assert_true(fabs(*ta_tensor_at(&L, li) - rL[row]) <= 1e-5);
            }
    free(rO); free(rW); free(rL);
    ta_tensor_free(&q0); ta_tensor_free(&k0); ta_tensor_free(&v0); ta_tensor_free(&o0);
    ta_tensor_free(&W0); ta_tensor_free(&L0);
}

static void test_threads_bitwise_identical(void **state)
{
    (void)state;
    const int64_t s[4] = {2, 4, 65, 32};
    ta_tensor Q, K, V, O1, O2, W1, W2;
    const int64_t ws[4] = {2, 4, 65, 65};
    TA_CHECK_OK(ta_tensor_empty(&Q, 4, s)); TA_CHECK_OK(ta_randn(&Q, 1));
    TA_CHECK_OK(ta_tensor_empty(&K, 4, s)); TA_CHECK_OK(ta_randn(&K, 2));
    TA_CHECK_OK(ta_tensor_empty(&V, 4, s)); TA_CHECK_OK(ta_randn(&V, 3));
    TA_CHECK_OK(ta_tensor_empty(&O1, 4, s)); TA_CHECK_OK(ta_tensor_empty(&O2, 4, s));
    TA_CHECK_OK(ta_tensor_empty(&W1, 4, ws)); TA_CHECK_OK(ta_tensor_empty(&W2, 4, ws));
    int old = ta_get_num_threads();
    ta_sdpa_opts o = {.causal = TA_CAUSAL_TOP_LEFT, .weights = &W1};
    TA_CHECK_OK(ta_set_num_threads(1));
    TA_CHECK_OK(ta_sdpa(&O1, &Q, &K, &V, &o));
    o.weights = &W2;
    TA_CHECK_OK(ta_set_num_threads(3));
    TA_CHECK_OK(ta_sdpa(&O2, &Q, &K, &V, &o));
    TA_CHECK_OK(ta_set_num_threads(old));
    assert_memory_equal(O1.data, O2.data, sizeof(float) * 2 * 4 * 65 * 32);
    assert_memory_equal(W1.data, W2.data, sizeof(float) * 2 * 4 * 65 * 65);
    ta_tensor_free(&Q); ta_tensor_free(&K); ta_tensor_free(&V); ta_tensor_free(&O1);
    ta_tensor_free(&O2); ta_tensor_free(&W1); ta_tensor_free(&W2);
}

/* ------------------------------------------------------------------ errors */

typedef struct err_env {
    ta_tensor Q, K, V, O, W, L, M;
    float sentinel_o, sentinel_w, sentinel_l;
} err_env;

static void expect_untouched(const err_env *e)
{
    const float *o = e->O.data, *w = e->W.data, *l = e->L.data;
    for (int64_t i = 0; i < ta_tensor_numel(&e->O); i++) assert_true(o[i] == 3.0f);
    for (int64_t i = 0; i < ta_tensor_numel(&e->W); i++) assert_true(w[i] == 3.0f);
    for (int64_t i = 0; i < ta_tensor_numel(&e->L); i++) assert_true(l[i] == 3.0f);
}

static void test_errors_name_argument_and_shapes(void **state)
{
    (void)state;
    enum { B = 2, H = 8, Lq = 5, Lk = 9, D = 64 };
    const int64_t qs[4] = {B, H, Lq, D}, ks[4] = {B, 4, Lk, D}, os[4] = {B, H, Lq, D},
                  ws[4] = {B, H, Lq, Lk};
    err_env e;
    TA_CHECK_OK(ta_tensor_empty(&e.Q, 4, qs)); TA_CHECK_OK(ta_randn(&e.Q, 1));
    TA_CHECK_OK(ta_tensor_empty(&e.K, 4, ks)); TA_CHECK_OK(ta_randn(&e.K, 2));
    TA_CHECK_OK(ta_tensor_empty(&e.V, 4, ks)); TA_CHECK_OK(ta_randn(&e.V, 3));
    TA_CHECK_OK(ta_tensor_full(&e.O, 4, os, 3.0f));
    TA_CHECK_OK(ta_tensor_full(&e.W, 4, ws, 3.0f));
    TA_CHECK_OK(ta_tensor_full(&e.L, 3, ws, 3.0f));
    ta_tensor *O = &e.O, *Q = &e.Q, *K = &e.K, *V = &e.V;
    ta_sdpa_opts o = {.weights = &e.W, .lse = &e.L};

    TA_CHECK_ERR(ta_sdpa(NULL, Q, K, V, &o), TA_EINVAL, "ta_sdpa: O is NULL");
    TA_CHECK_ERR(ta_sdpa(O, NULL, K, V, &o), TA_EINVAL, "ta_sdpa: Q is NULL");
    TA_CHECK_ERR(ta_sdpa(O, Q, NULL, V, &o), TA_EINVAL, "ta_sdpa: K is NULL");
    TA_CHECK_ERR(ta_sdpa(O, Q, K, NULL, &o), TA_EINVAL, "ta_sdpa: V is NULL");

    ta_tensor t;
    TA_CHECK_OK(ta_tensor_reshape(&t, Q, 3, (const int64_t[]){B * H, Lq, D}));
    TA_CHECK_ERR(ta_sdpa(O, &t, K, V, &o), TA_ESHAPE,
                 "ta_sdpa: Q must have 4 dims [B, H, Lq, D], got 3 ([16, 5, 64])");

    ta_tensor Kd, Kb, Vb, Vh, Vl, Vd;
    TA_CHECK_OK(ta_tensor_slice(&Kd, K, 3, 0, 32, 1));
    TA_CHECK_ERR(ta_sdpa(O, Q, &Kd, V, &o), TA_ESHAPE, "ta_sdpa: K has head_dim 32 but Q has 64");
    TA_CHECK_OK(ta_tensor_slice(&Kb, K, 0, 0, 1, 1));
    TA_CHECK_ERR(ta_sdpa(O, Q, &Kb, V, &o), TA_ESHAPE, "ta_sdpa: K has batch 1 but Q has 2");
    TA_CHECK_OK(ta_tensor_slice(&Vb, V, 0, 0, 1, 1));
    TA_CHECK_ERR(ta_sdpa(O, Q, K, &Vb, &o), TA_ESHAPE, "ta_sdpa: V has batch 1 but Q has 2");
    TA_CHECK_OK(ta_tensor_slice(&Vh, V, 1, 0, 2, 1));
    TA_CHECK_ERR(ta_sdpa(O, Q, K, &Vh, &o), TA_ESHAPE, "ta_sdpa: V has 2 heads but K has 4");
    TA_CHECK_OK(ta_tensor_slice(&Vl, V, 2, 0, 7, 1));
    TA_CHECK_ERR(ta_sdpa(O, Q, K, &Vl, &o), TA_ESHAPE, "ta_sdpa: V has 7 keys but K has 9");
    ta_tensor K3, V3;
    TA_CHECK_OK(ta_tensor_slice(&K3, K, 1, 0, 3, 1));
    TA_CHECK_OK(ta_tensor_slice(&V3, V, 1, 0, 3, 1));
    TA_CHECK_ERR(ta_sdpa(O, Q, &K3, &V3, &o), TA_ESHAPE,
                 "ta_sdpa: Q has 8 heads, not a multiple of the 3 heads of K and V");
    TA_CHECK_OK(ta_tensor_slice(&Vd, V, 3, 0, 16, 1));
    TA_CHECK_ERR(ta_sdpa(O, Q, K, &Vd, &o), TA_ESHAPE,
                 "ta_sdpa: O has shape [2, 8, 5, 64], expected [B, H, Lq, Dv] = [2, 8, 5, 16]");

    ta_tensor Ws, Ls;
    TA_CHECK_OK(ta_tensor_slice(&Ws, &e.W, 3, 0, 8, 1));
    o.weights = &Ws;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_ESHAPE,
                 "ta_sdpa: opts->weights has shape [2, 8, 5, 8], expected [B, H, Lq, Lk] = [2, 8, 5, 9]");
    o.weights = &e.W;
    TA_CHECK_OK(ta_tensor_slice(&Ls, &e.L, 2, 0, 4, 1));
    o.lse = &Ls;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_ESHAPE,
                 "ta_sdpa: opts->lse has shape [2, 8, 4], expected [B, H, Lq] = [2, 8, 5]");
    o.lse = &e.L;

    /* mask broadcasting */
    const int64_t mbad[4] = {2, 1, 5, 7};
    TA_CHECK_OK(ta_tensor_zeros(&e.M, 4, mbad));
    o.mask = &e.M;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_ESHAPE,
                 "ta_sdpa: mask of shape [2, 1, 5, 7] does not broadcast to [2, 8, 5, 9]");
    ta_tensor_free(&e.M);
    const int64_t m5[5] = {1, 2, 1, 5, 9};
    TA_CHECK_OK(ta_tensor_zeros(&e.M, 5, m5));
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_ESHAPE, "ta_sdpa: mask of shape [1, 2, 1, 5, 9] does not");
    ta_tensor_free(&e.M);
    const int64_t mok[2] = {5, 9};
    TA_CHECK_OK(ta_tensor_zeros(&e.M, 2, mok));
    o.mask_mode = (ta_mask_mode)7;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: mask_mode = 7 is not");
    o.mask_mode = TA_MASK_KEEP;
    o.mask = NULL;

    /* key lengths */
    int64_t kl[2] = {9, 10};
    o.key_lengths = kl;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: key_lengths[1] = 10 is outside [0, 9]");
    kl[1] = -1;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: key_lengths[1] = -1 is outside [0, 9]");
    o.key_lengths = NULL;

    /* scale, enums */
    o.scale = INFINITY;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: opts->scale must be finite, got inf");
    o.scale = NAN;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: opts->scale must be finite");
    o.scale = 0;
    o.causal = (ta_causal)5;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: causal = 5 is not a ta_causal value");
    o.causal = TA_CAUSAL_NONE;
    o.path = (ta_sdpa_path)9;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: opts->path = 9 is not");
    o.path = TA_SDPA_FUSED;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EUNSUPPORTED, "ta_sdpa: the fused path (TA_SDPA_FUSED) never forms");
    o.path = TA_SDPA_AUTO;

    /* aliasing */
    ta_tensor Oq;
    TA_CHECK_OK(ta_tensor_from_buffer(&Oq, Q->data, 4, os, NULL));
    TA_CHECK_ERR(ta_sdpa(&Oq, Q, K, V, &o), TA_EINVAL, "ta_sdpa: O overlaps Q");
    ta_tensor Wv;
    const int64_t wv[4] = {B, H, Lq, Lk};
    TA_CHECK_OK(ta_tensor_from_buffer(&Wv, V->data, 4, wv, NULL));
    o.weights = &Wv;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: opts->weights overlaps V");
    o.weights = &e.W;
    ta_tensor Lo;
    TA_CHECK_OK(ta_tensor_from_buffer(&Lo, (float *)e.W.data + 5, 3, ws, NULL));
    o.lse = &Lo;
    TA_CHECK_ERR(ta_sdpa(O, Q, K, V, &o), TA_EINVAL, "ta_sdpa: opts->weights overlaps opts->lse");
    o.lse = &e.L;
    ta_tensor Oz;
    const int64_t zst[4] = {0, 320, 64, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&Oz, e.O.data, 4, os, zst));
    TA_CHECK_ERR(ta_sdpa(&Oz, Q, K, V, &o), TA_EINVAL, "ta_sdpa: O has stride 0 in dim 0");
    ta_tensor Qf = *Q;
    Qf.dtype = TA_F64; /* f16 and bf16 are storage types ta_sdpa takes */
    TA_CHECK_ERR(ta_sdpa(O, &Qf, K, V, &o), TA_EUNSUPPORTED, "ta_sdpa: Q has dtype");

    expect_untouched(&e);
    /* and a valid call still works afterwards */
    TA_CHECK_OK(ta_sdpa(O, Q, K, V, &o));
    ta_tensor_free(&e.Q); ta_tensor_free(&e.K); ta_tensor_free(&e.V); ta_tensor_free(&e.O);
    ta_tensor_free(&e.W); ta_tensor_free(&e.L); ta_tensor_free(&e.M);
}

static void test_null_opts_is_default(void **state)
{
    (void)state;
    const int64_t s[4] = {1, 2, 6, 8};
    ta_tensor Q, K, V, O1, O2;
    TA_CHECK_OK(ta_tensor_empty(&Q, 4, s)); TA_CHECK_OK(ta_randn(&Q, 1));
    TA_CHECK_OK(ta_tensor_empty(&K, 4, s)); TA_CHECK_OK(ta_randn(&K, 2));
    TA_CHECK_OK(ta_tensor_empty(&V, 4, s)); TA_CHECK_OK(ta_randn(&V, 3));
    TA_CHECK_OK(ta_tensor_empty(&O1, 4, s)); TA_CHECK_OK(ta_tensor_empty(&O2, 4, s));
    /* NULL options: the automatic path (fused, no weights wanted) with scale 1/sqrt(D) */
    TA_CHECK_OK(ta_sdpa(&O1, &Q, &K, &V, NULL));
    ta_sdpa_opts o = {.scale = (float)(1.0 / sqrt(8.0)), .path = TA_SDPA_FUSED};
    TA_CHECK_OK(ta_sdpa(&O2, &Q, &K, &V, &o));
    assert_memory_equal(O1.data, O2.data, sizeof(float) * 96);
    o.path = TA_SDPA_REFERENCE;
    TA_CHECK_OK(ta_sdpa(&O2, &Q, &K, &V, &o));
    for (int i = 0; i < 96; i++)
        assert_true(fabsf(((float *)O1.data)[i] - ((float *)O2.data)[i]) <= 1e-6f);
    /* empty problems succeed and write nothing */
    const int64_t e0[4] = {0, 2, 6, 8};
    ta_tensor Qe, Oe;
    TA_CHECK_OK(ta_tensor_empty(&Qe, 4, e0));
    TA_CHECK_OK(ta_tensor_empty(&Oe, 4, e0));
    ta_tensor Ke, Ve;
    TA_CHECK_OK(ta_tensor_empty(&Ke, 4, e0));
    TA_CHECK_OK(ta_tensor_empty(&Ve, 4, e0));
    TA_CHECK_OK(ta_sdpa(&Oe, &Qe, &Ke, &Ve, NULL));
    ta_tensor_free(&Q); ta_tensor_free(&K); ta_tensor_free(&V); ta_tensor_free(&O1);
    ta_tensor_free(&O2); ta_tensor_free(&Qe); ta_tensor_free(&Oe); ta_tensor_free(&Ke);
    ta_tensor_free(&Ve);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gqa_does_not_copy_kv),
        cmocka_unit_test(test_fully_masked_rows),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_strided_views),
        cmocka_unit_test(test_threads_bitwise_identical),
        cmocka_unit_test(test_errors_name_argument_and_shapes),
        cmocka_unit_test(test_null_opts_is_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
