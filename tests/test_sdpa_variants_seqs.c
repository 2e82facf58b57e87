/* ta-test: all-isas
 * The attention variants with variable-length batches: a packed batch of sequences with
 * their own lengths under a window (bottom-right causal: each sequence its own delta),
 * softcap, ALiBi slopes [num_seqs, H] (a row per sequence) and sinks, forward and
 * backward on both paths, against each sequence run alone as a dense problem on the
 * reference path (its row of slopes as [H]): O and LSE within 5e-5, dQ, dK, dV within
 * 2e-4, and dsinks, which sums over the sequences, within 2e-4 of the sum of the dense
 * calls' dsinks. Also the [num_seqs, H] shape check. */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { NSEQ = 3, H = 4, HKV = 2, D = 16 };
static const int32_t LQ[NSEQ] = {5, 70, 1}, LK[NSEQ] = {9, 70, 40};

/* A [1, Hx, L, X] view of rows t0 .. t0 + L of a packed contiguous [T, Hx, X] tensor. */
static ta_tensor seq_view(const ta_tensor *packed, int64_t t0, int64_t L)
{
    const int64_t Hx = packed->shape[1], X = packed->shape[2];
    return (ta_tensor){.data = (float *)packed->data + t0 * Hx * X, .dtype = TA_F32,
                       .ndim = 4, .shape = {1, Hx, L, X}, .stride = {0, X, Hx * X, 1}};
}

static void expect_near(const char *what, int64_t b, const ta_tensor *got, const ta_tensor *want,
                        double tol)
{
    /* both rank 4 [1, Hx, L, X] (or rank 3 [1, H, L]) views */
    const int64_t X = got->ndim == 4 ? got->shape[3] : 1;
    for (int64_t h = 0; h < got->shape[1]; h++)
        for (int64_t i = 0; i < got->shape[2]; i++)
            for (int64_t x = 0; x < X; x++) {
                const int64_t og = h * got->stride[1] + i * got->stride[2] +
                                   (got->ndim == 4 ? x * got->stride[3] : 0);
                const int64_t ow = h * want->stride[1] + i * want->stride[2] +
                                   (want->ndim == 4 ? x * want->stride[3] : 0);
                const double g = ((const float *)got->data)[og], w = ((const float *)want->data)[ow];
                if (!(fabs(g - w) <= tol) && !(isinf(w) && g == w))
                    fail_msg("sequence %lld: %s[%lld, %lld, %lld] %.9g, dense %.9g", (long long)b,
                             what, (long long)h, (long long)i, (long long)x, g, w);
            }
}

static void run_path(ta_sdpa_path path)
{
    int32_t cq[NSEQ + 1] = {0}, ck[NSEQ + 1] = {0};
    for (int b = 0; b < NSEQ; b++) {
        cq[b + 1] = cq[b] + LQ[b];
        ck[b + 1] = ck[b] + LK[b];
    }
    const int64_t Tq = cq[NSEQ], Tk = ck[NSEQ];
    const int64_t qs[3] = {Tq, H, D}, ks[3] = {Tk, HKV, D}, ls[2] = {H, Tq}, as[2] = {NSEQ, H};
    const int64_t hs[1] = {H};
    ta_tensor q, k, v, dO, o, lse, dq, dk, dv, slopes, sinks, dsinks;
    TA_CHECK_OK(ta_tensor_empty(&q, 3, qs));
    TA_CHECK_OK(ta_tensor_empty(&k, 3, ks));
    TA_CHECK_OK(ta_tensor_empty(&v, 3, ks));
    TA_CHECK_OK(ta_tensor_empty(&dO, 3, qs));
    TA_CHECK_OK(ta_randn(&q, 21));
    TA_CHECK_OK(ta_randn(&k, 22));
    TA_CHECK_OK(ta_randn(&v, 23));
    TA_CHECK_OK(ta_randn(&dO, 24));
    TA_CHECK_OK(ta_tensor_full(&o, 3, qs, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&lse, 2, ls, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&dq, 3, qs, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&dk, 3, ks, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&dv, 3, ks, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&dsinks, 1, hs, 9.0f));
    TA_CHECK_OK(ta_tensor_empty(&slopes, 2, as));
    TA_CHECK_OK(ta_tensor_empty(&sinks, 1, hs));
    for (int64_t e = 0; e < NSEQ * H; e++) ((float *)slopes.data)[e] = 0.05f * (float)(e % 5 + 1);
    for (int64_t h = 0; h < H; h++) ((float *)sinks.data)[h] = 0.4f * (float)h - 0.7f;

    ta_sdpa_opts opts = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .has_window = 1, .window_left = 8,
                         .window_right = 0, .softcap = 4.0f, .alibi_slopes = &slopes,
                         .sinks = &sinks, .cu_seqlens_q = cq, .cu_seqlens_k = ck,
                         .num_seqs = NSEQ, .path = path};
    ta_sdpa_opts fo = opts;
    fo.lse = &lse;
    TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &fo));
    ta_sdpa_opts bo = opts;
    bo.dsinks = &dsinks;
    TA_CHECK_OK(ta_sdpa_backward(&dq, &dk, &dv, &dO, &q, &k, &v, &o, &lse, &bo));

    double dsum[H] = {0};
    for (int64_t b = 0; b < NSEQ; b++) {
        ta_tensor Q = seq_view(&q, cq[b], LQ[b]), K = seq_view(&k, ck[b], LK[b]);
        ta_tensor V = seq_view(&v, ck[b], LK[b]), G = seq_view(&dO, cq[b], LQ[b]);
        const int64_t os[4] = {1, H, LQ[b], D}, kk[4] = {1, HKV, LK[b], D}, l3[3] = {1, H, LQ[b]};
        ta_tensor O, L, DQ, DK, DV, DS;
        TA_CHECK_OK(ta_tensor_empty(&O, 4, os));
        TA_CHECK_OK(ta_tensor_empty(&L, 3, l3));
        TA_CHECK_OK(ta_tensor_empty(&DQ, 4, os));
        TA_CHECK_OK(ta_tensor_empty(&DK, 4, kk));
        TA_CHECK_OK(ta_tensor_empty(&DV, 4, kk));
        TA_CHECK_OK(ta_tensor_empty(&DS, 1, hs));
        ta_tensor row = {.data = (float *)slopes.data + b * H, .dtype = TA_F32, .ndim = 1,
                         .shape = {H}, .stride = {1}};
        ta_sdpa_opts d = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .has_window = 1, .window_left = 8,
                          .window_right = 0, .softcap = 4.0f, .alibi_slopes = &row,
                          .sinks = &sinks, .path = TA_SDPA_REFERENCE, .lse = &L};
        TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &d));
        d.lse = NULL;
        d.dsinks = &DS;
        TA_CHECK_OK(ta_sdpa_backward(&DQ, &DK, &DV, &G, &Q, &K, &V, &O, &L, &d));
        for (int64_t h = 0; h < H; h++) dsum[h] += ((float *)DS.data)[h];
        ta_tensor vo = seq_view(&o, cq[b], LQ[b]), vq = seq_view(&dq, cq[b], LQ[b]);
        ta_tensor vk = seq_view(&dk, ck[b], LK[b]), vv = seq_view(&dv, ck[b], LK[b]);
        ta_tensor vl = {.data = (float *)lse.data + cq[b], .dtype = TA_F32, .ndim = 3,
                        .shape = {1, H, LQ[b]}, .stride = {0, Tq, 1}};
        expect_near("O", b, &vo, &O, 5e-5);
        expect_near("LSE", b, &vl, &L, 5e-5);
        expect_near("dQ", b, &vq, &DQ, 2e-4);
        expect_near("dK", b, &vk, &DK, 2e-4);
        expect_near("dV", b, &vv, &DV, 2e-4);
        ta_tensor *all[] = {&O, &L, &DQ, &DK, &DV, &DS};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    }
    for (int64_t h = 0; h < H; h++)
        if (!(fabs(((float *)dsinks.data)[h] - dsum[h]) <= 2e-4))
            fail_msg("dsinks[%lld] %g, the sequences' sum %g", (long long)h,
                     (double)((float *)dsinks.data)[h], dsum[h]);

    /* slopes [num_seqs, H] of another num_seqs: refused */
    const int64_t bad[2] = {NSEQ + 1, H};
    ta_tensor wrong;
    TA_CHECK_OK(ta_tensor_full(&wrong, 2, bad, 0.1f));
    fo.alibi_slopes = &wrong;
    TA_CHECK_ERR(ta_sdpa(&o, &q, &k, &v, &fo), TA_EINVAL, "[num_seqs, H]");
    ta_tensor_free(&wrong);
    ta_tensor *all[] = {&q, &k, &v, &dO, &o, &lse, &dq, &dk, &dv, &slopes, &sinks, &dsinks};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static void test_varlen_variants(void **state)
{
    (void)state;
    run_path(TA_SDPA_FUSED);
    run_path(TA_SDPA_REFERENCE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_varlen_variants)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
