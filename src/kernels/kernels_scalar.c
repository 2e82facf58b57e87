/* The scalar ISA's filler (isa_table.def's root row): the portable reference kernels
 * every table starts from, and what TA_ARCH=scalar runs. */
#include "kernels/kernels.h"

void ta_kernels_fill_scalar(ta_kernels *k)
{
    ta_gemm_fill_scalar(k); /* SGEMM micro-kernel 4x8: gemm_scalar.c */
    /* Small tile: scalar code has few registers to hold accumulators in. */
    k->sgemm_kc = 256;
    k->sgemm_mc = 128;
    k->sgemm_nc = 2048;
    ta_attn_fill_scalar(k);     /* attention kernels: attn_scalar.c */
    ta_attn_bwd_fill_scalar(k); /* attention backward kernels: attn_bwd_scalar.c */
    ta_cvt_fill_scalar(k);      /* float16 / bfloat16 conversions: cvt_scalar.c */
    ta_attn_variants_fill_scalar(k); /* softcap's tanh: attn_variants_scalar.c */
    ta_attn_rows_fill_scalar(k); /* few-row kernels on typed rows: attn_rows_scalar.c */
}
