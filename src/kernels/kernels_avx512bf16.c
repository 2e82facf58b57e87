/* The avx512bf16 ISA's filler (isa_table.def): avx512's finished table (its parent) and
 * the bfloat16 dot product's Q.K^T for a bfloat16 query (attn_rows_avx512bf16.c) and
 * the backward's S and dP products (attn_bwd_avx512bf16.c). Built
 * with the row's flags; called only on CPUs that have them. */
#include "kernels/kernels.h"

void ta_kernels_fill_avx512bf16(ta_kernels *k)
{
    ta_attn_rows_fill_avx512bf16(k); /* attn_qk_rows_bf16dot: attn_rows_avx512bf16.c */
    ta_attn_bwd_fill_avx512bf16(k); /* attn_bwd_gemm_bf16dot: attn_bwd_avx512bf16.c */
}
