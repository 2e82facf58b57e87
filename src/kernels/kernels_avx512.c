/* The AVX-512 ISA's filler (isa_table.def): starts from the finished AVX2 table (its
 * parent) and overrides every kernel. Built with the row's flags; called only on CPUs
 * that have them. Also holds its
 * FMA peak loop (fma_peak_loop, for ta_measure_fma_peak). */
#include "kernels/kernels.h"

#include <immintrin.h>

/* 12 independent 16-lane chains: enough to cover FMA latency (4) x 2 pipes with room. */
static double fma_peak_loop_avx512(int64_t iters)
{
    __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(1.0f), a1 = _mm512_set1_ps(1.1f), a2 = _mm512_set1_ps(1.2f),
           a3 = _mm512_set1_ps(1.3f), a4 = _mm512_set1_ps(1.4f), a5 = _mm512_set1_ps(1.5f),
           a6 = _mm512_set1_ps(1.6f), a7 = _mm512_set1_ps(1.7f), a8 = _mm512_set1_ps(1.8f),
           a9 = _mm512_set1_ps(1.9f), a10 = _mm512_set1_ps(2.0f), a11 = _mm512_set1_ps(2.1f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm512_fmadd_ps(a0, m, c); a1 = _mm512_fmadd_ps(a1, m, c);
        a2 = _mm512_fmadd_ps(a2, m, c); a3 = _mm512_fmadd_ps(a3, m, c);
        a4 = _mm512_fmadd_ps(a4, m, c); a5 = _mm512_fmadd_ps(a5, m, c);
        a6 = _mm512_fmadd_ps(a6, m, c); a7 = _mm512_fmadd_ps(a7, m, c);
        a8 = _mm512_fmadd_ps(a8, m, c); a9 = _mm512_fmadd_ps(a9, m, c);
        a10 = _mm512_fmadd_ps(a10, m, c); a11 = _mm512_fmadd_ps(a11, m, c);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    float out[16];
    _mm512_storeu_ps(out, s);
    volatile float sink = out[0];
    (void)sink;
    return 2.0 * 16.0 * 12.0 * (double)iters;
}

void ta_kernels_fill_avx512(ta_kernels *k)
{
    k->fma_peak_loop = fma_peak_loop_avx512;
    ta_gemm_fill_avx512(k); /* SGEMM micro-kernel 12x32: gemm_avx512.c */
    /* Cache blocks (Zen 5: L1d 48 KiB, L2 1 MiB, L3 32 MiB shared by the CCX), measured
     * on this machine with 1024^3 and 2048^3 (GFLOP/s on 1 core: KC 256 -> ~99-102,
     * 512 -> ~103-105):
     *  KC = 512: the B micro-panel (KC x NR x 4 B = 64 KiB) lives in L2, not L1: with
     *            512-bit FMAs at half rate a k step takes ~24 cycles for 176 bytes of
     *            loads, far below L2 bandwidth, while a long KC halves the passes over
     *            C (each pass reads and writes the C tile from L3/DRAM);
     *  MC = 144: the packed A block (MC x KC x 4 B = 288 KiB) sits in L2 with the B
     *            micro-panel and C lines passing through (96..240 measured the same);
     *  NC = 2048: the packed B panel (KC x NC x 4 B = 4 MiB per thread) stays in L3
     *            with room for the other core's panel and the A / C streams. */
    k->sgemm_kc = 512;
    k->sgemm_mc = 144;
    k->sgemm_nc = 2048;
    ta_attn_fill_avx512(k); /* attention kernels: attn_avx512.c */
    ta_attn_bwd_fill_avx512(k); /* attention backward kernels: attn_bwd_avx512.c */
}
