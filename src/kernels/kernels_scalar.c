/* The scalar ISA's filler (isa_table.def's root row): the portable reference kernels
 * every table starts from, and what TA_ARCH=scalar runs. Also holds its
 * FMA peak loop (fma_peak_loop, for ta_measure_fma_peak). */
#include "core/core.h"
#include "kernels/kernels.h"

/* Eight independent chains so a compiler cannot collapse them; scalar code measures
 * the scalar FMA rate. */
static double fma_peak_loop_scalar(int64_t iters)
{
    float a[8] = {1.0f, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f, 1.7f};
    const float m = 0.999999f, c = 1e-7f;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 8; j++) a[j] = a[j] * m + c;
    volatile float sink = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    (void)sink;
    return 2.0 * 8.0 * (double)iters;
}

void ta_kernels_fill_scalar(ta_kernels *k)
{
    k->fma_peak_loop = fma_peak_loop_scalar;
    /* Small tile: scalar code has few registers to hold accumulators in. */
    ta_gemm_fill_scalar(k); /* SGEMM micro-kernel 4x8: gemm_scalar.c */
    k->sgemm_kc = 256;
    k->sgemm_mc = 128;
    k->sgemm_nc = 2048;
    ta_attn_fill_scalar(k); /* attention kernels: attn_scalar.c */
    ta_attn_bwd_fill_scalar(k); /* attention backward kernels: attn_bwd_scalar.c */
}
