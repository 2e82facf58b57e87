/* The AVX-512 ISA's filler (isa_table.def): starts from the finished AVX2 table (its
 * parent) and overrides every kernel. Built with the row's flags; called only on CPUs
 * that have them. */
#include "kernels/kernels.h"

void ta_kernels_fill_avx512(ta_kernels *k)
{
    ta_gemm_fill_avx512(k); /* SGEMM micro-kernel 6x64: gemm_avx512.c */
    /* Cache blocks (this machine, Zen 4: L1d 32 KiB, L2 1 MiB, L3 32 MiB shared by the
     * CCX), measured with 1024^3 and 2048^3 on 1 core (KC 256..1024 and MC 48..288
     * within ~2% of each other, 512 x 144 among the best):
     *  KC = 512: the B micro-panel (KC x NR x 4 B = 128 KiB) lives in L2, not L1: with
     *            512-bit FMAs at half rate a k step takes ~24 cycles for 280 bytes of
     *            loads, far below L2 bandwidth, while a long KC halves the passes over
     *            C (each pass reads and writes the C tile from L3/DRAM);
     *  MC = 144: the packed A block (MC x KC x 4 B = 288 KiB) sits in L2 with the B
     *            micro-panel and C lines passing through;
     *  NC = 2048: the packed B panel (KC x NC x 4 B = 4 MiB per thread) stays in L3
     *            with room for the other core's panel and the A / C streams. */
    k->sgemm_kc = 512;
    k->sgemm_mc = 144;
    k->sgemm_nc = 2048;
    ta_attn_fill_avx512(k);     /* attention kernels: attn_avx512.c */
    ta_attn_bwd_fill_avx512(k); /* attention backward kernels: attn_bwd_avx512.c */
    ta_cvt_fill_avx512(k);      /* float16 / bfloat16 conversions: cvt_avx512.c */
    ta_attn_variants_fill_avx512(k); /* softcap's tanh: attn_variants_avx512.c */
    ta_attn_rows_fill_avx512(k); /* few-row kernels on typed rows: attn_rows_avx512.c */
}
