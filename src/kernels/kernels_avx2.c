/* The AVX2+FMA ISA's filler (isa_table.def): overrides every kernel of the scalar
 * table it starts from. Built with the row's flags; called only on CPUs that have them. Also holds its
 * FMA peak loop (fma_peak_loop, for ta_measure_fma_peak). */
#include "kernels/kernels.h"

#include <immintrin.h>

/* 12 independent 8-lane chains: enough to cover FMA latency (4) x 2 pipes with room. */
static double fma_peak_loop_avx2(int64_t iters)
{
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f),
           a3 = _mm256_set1_ps(1.3f), a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f),
           a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f), a8 = _mm256_set1_ps(1.8f),
           a9 = _mm256_set1_ps(1.9f), a10 = _mm256_set1_ps(2.0f), a11 = _mm256_set1_ps(2.1f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c); a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c); a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c); a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    volatile float sink = out[0];
    (void)sink;
    return 2.0 * 8.0 * 12.0 * (double)iters;
}

void ta_kernels_fill_avx2(ta_kernels *k)
{
    k->fma_peak_loop = fma_peak_loop_avx2;
    ta_gemm_fill_avx2(k); /* SGEMM micro-kernel 6x16: gemm_avx2.c */
    /* Cache blocks (Zen 5: L1d 48 KiB, L2 1 MiB, L3 32 MiB shared by the CCX), measured
     * on this machine (KC 256..512 within noise, ~104 GFLOP/s on 1 core at 1024^3):
     *  KC = 384: the B micro-panel (KC x NR x 4 B = 24 KiB) fits L1 beside the A
     *            micro-panel (9 KiB); a long KC amortises the C tile's load and store;
     *  MC = 144: the packed A block (MC x KC x 4 B = 216 KiB) sits in L2;
     *  NC = 2048: the packed B panel (KC x NC x 4 B = 3 MiB per thread) stays in L3. */
    k->sgemm_kc = 384;
    k->sgemm_mc = 144;
    k->sgemm_nc = 2048;
    ta_attn_fill_avx2(k); /* attention kernels: attn_avx2.c */
    ta_attn_bwd_fill_avx2(k); /* attention backward kernels: attn_bwd_avx2.c */
}
