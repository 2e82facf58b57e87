/* Portable reference SGEMM micro-kernel (contract: docs/kernels.md). Every kernel
 * table starts from it; it is also what TA_ARCH=scalar runs. */
#include "kernels/kernels.h"

#define MR 4
#define NR 8

/* c: [MR, NR] tile, row stride rs_c, unit column stride; a: [MR, k] with strides
 * (rs_a, cs_a); b: [k, NR] packed panel. */
void ta_sgemm_scalar_4x8(int64_t k, float alpha, const float *a, int64_t rs_a, int64_t cs_a,
                         const float *b, float beta, float *c, int64_t rs_c)
{
    float acc[MR][NR] = {{0.0f}};
    for (int64_t p = 0; p < k; p++) {
        const float *ap = a + p * cs_a, *bp = b + p * NR;
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] += ap[i * rs_a] * bp[j];
    }
    /* beta == 0 must not read C: it may hold NaN or be uninitialised. */
    for (int i = 0; i < MR; i++) {
        float *ci = c + i * rs_c;
        if (beta == 0.0f)
            for (int j = 0; j < NR; j++) ci[j] = alpha * acc[i][j];
        else
            for (int j = 0; j < NR; j++) ci[j] = alpha * acc[i][j] + beta * ci[j];
    }
}
