/* The AVX2+FMA ISA's filler (isa_table.def): overrides every kernel of the scalar
 * table it starts from. Built with the row's flags; called only on CPUs that have them. */
#include "kernels/kernels.h"

void ta_kernels_fill_avx2(ta_kernels *k)
{
    ta_gemm_fill_avx2(k); /* SGEMM micro-kernel 6x16: gemm_avx2.c */
    /* Cache blocks (Zen 4: L1d 32 KiB, L2 1 MiB, L3 32 MiB shared by the CCX), measured
     * on this machine (KC 256..512 within noise, ~104 GFLOP/s on 1 core at 1024^3):
     *  KC = 384: the B micro-panel (KC x NR x 4 B = 24 KiB) fits L1 beside the A
     *            micro-panel (9 KiB); a long KC amortises the C tile's load and store;
     *  MC = 144: the packed A block (MC x KC x 4 B = 216 KiB) sits in L2;
     *  NC = 2048: the packed B panel (KC x NC x 4 B = 3 MiB per thread) stays in L3. */
    k->sgemm_kc = 384;
    k->sgemm_mc = 144;
    k->sgemm_nc = 2048;
    ta_attn_fill_avx2(k);     /* attention kernels: attn_avx2.c */
    ta_attn_bwd_fill_avx2(k); /* attention backward kernels: attn_bwd_avx2.c */
    ta_cvt_fill_avx2(k);      /* float16 / bfloat16 conversions: cvt_avx2.c */
    ta_attn_variants_fill_avx2(k); /* softcap's tanh: attn_variants_avx2.c */
    ta_attn_rows_fill_avx2(k); /* few-row kernels on typed rows: attn_rows_avx2.c */
}
