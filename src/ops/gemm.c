/* PLACEHOLDER: naive strided GEMM so that other layers can build and test while the
 * blocked, packed engine is written. Replace wholesale. */
#include "core/core.h"
#include "ops/gemm.h"

static void gemm_one(float *C, int64_t rsc, int64_t csc, const float *A, int64_t rsa,
                     int64_t csa, const float *B, int64_t rsb, int64_t csb, int64_t M,
                     int64_t N, int64_t K, float alpha, float beta)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += A[i * rsa + k * csa] * B[k * rsb + j * csb];
            float *c = &C[i * rsc + j * csc];
            *c = beta == 0.0f ? alpha * s : alpha * s + beta * *c;
        }
}

ta_status ta_gemm_strided(float *C, int64_t rsc, int64_t csc, const float *A, int64_t rsa,
                          int64_t csa, const float *B, int64_t rsb, int64_t csb, int64_t M,
                          int64_t N, int64_t K, float alpha, float beta,
                          const ta_gemm_batch *batch)
{
    int64_t nb = 1;
    if (batch)
        for (int i = 0; i < batch->ndim; i++) nb *= batch->shape[i];
    for (int64_t p = 0; p < nb; p++) {
        int64_t oa = 0, ob = 0, oc = 0, rem = p;
        for (int i = batch ? batch->ndim - 1 : -1; i >= 0; i--) {
            int64_t x = rem % batch->shape[i];
            rem /= batch->shape[i];
            oa += x * batch->stride_a[i];
            ob += x * batch->stride_b[i];
            oc += x * batch->stride_c[i];
        }
        gemm_one(C + oc, rsc, csc, A + oa, rsa, csa, B + ob, rsb, csb, M, N, K, alpha, beta);
    }
    return TA_OK;
}

ta_status ta_sgemm_batched(float *C, int64_t bsc, int64_t rsc, int64_t csc, const float *A,
                           int64_t bsa, int64_t rsa, int64_t csa, const float *B, int64_t bsb,
                           int64_t rsb, int64_t csb, int64_t batch, int64_t M, int64_t N,
                           int64_t K, float alpha, float beta)
{
    ta_gemm_batch b = {.ndim = 1, .shape = {batch}, .stride_a = {bsa}, .stride_b = {bsb},
                       .stride_c = {bsc}};
    return ta_gemm_strided(C, rsc, csc, A, rsa, csa, B, rsb, csb, M, N, K, alpha, beta, &b);
}

ta_status ta_sgemm(float *C, int64_t rsc, int64_t csc, const float *A, int64_t rsa, int64_t csa,
                   const float *B, int64_t rsb, int64_t csb, int64_t M, int64_t N, int64_t K,
                   float alpha, float beta)
{
    return ta_gemm_strided(C, rsc, csc, A, rsa, csa, B, rsb, csb, M, N, K, alpha, beta, NULL);
}
