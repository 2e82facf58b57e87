/* The GEMM engine (internal interface used by einsum, attention and the public
 * ta_sgemm / ta_sgemm_batched wrappers). */
#ifndef TA_GEMM_H
#define TA_GEMM_H

#include "core/workspace.h"
#include "tensorattn.h"

/* Batch dimensions of a strided GEMM: problem at batch multi-index b uses
 * A + sum b[i]*stride_a[i] (likewise B and C). A stride may be 0 (shared operand). */
typedef struct ta_gemm_batch {
    int ndim; /* 0 .. TA_MAX_DIMS */
    int64_t shape[TA_MAX_DIMS];
    int64_t stride_a[TA_MAX_DIMS], stride_b[TA_MAX_DIMS], stride_c[TA_MAX_DIMS];
} ta_gemm_batch;

/* C = alpha * A B + beta * C for every batch index, with element strides:
 *   A[i,k] = A[i*rsa + k*csa], B[k,j] = B[k*rsb + j*csb], C[i,j] = C[i*rsc + j*csc].
 * beta == 0: C is not read. batch may be NULL (one problem). Arguments are trusted
 * (public entry points validate). pack: the packing buffers laid out by ta_gemm_layout
 * for the same shapes (and thread count) in the caller's arena. Threads: OpenMP over
 * batch x macro-tiles; every C element is computed by one thread in a fixed order, so
 * results do not depend on the thread count. Never allocates. */
ta_status ta_gemm_strided(float *C, int64_t rsc, int64_t csc,
                          const float *A, int64_t rsa, int64_t csa,
                          const float *B, int64_t rsb, int64_t csb,
                          int64_t M, int64_t N, int64_t K, float alpha, float beta,
                          const ta_gemm_batch *batch, float *pack);

/* Lays out (or measures) in arena a the packing buffers of ta_gemm_strided for this
 * problem on the library's current thread count; *pack is NULL while measuring. */
void ta_gemm_layout(ta_arena *a, float **pack, int64_t rsc, int64_t csc, int64_t M, int64_t N,
                    int64_t K, const ta_gemm_batch *batch);

/* ta_gemm_strided with its own scratch (the library's block; errors name fn): the public
 * ta_sgemm entries. */
ta_status ta_gemm_run(const char *fn, float *C, int64_t rsc, int64_t csc,
                      const float *A, int64_t rsa, int64_t csa, const float *B, int64_t rsb,
                      int64_t csb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                      const ta_gemm_batch *batch);

/* How a problem that may share its column chunks' units (gemm.c, gemm_stealing) runs:
 * -1 (the default) by the recent calls' evidence of a busy core (gemm.c, steal_hold),
 * 0 never sharing, 1 always: for tests, which check that all three give the same bits. */
extern int ta_gemm_share_mode;

#endif
