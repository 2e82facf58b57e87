/* The attention variants' kernels for AVX2 + FMA (8 lanes): attn_variants_template.h
 * over vec_avx2.h (docs/kernels.md, "Attention variants"). */
#include "kernels/vec_avx2.h"

#define NAME_SOFTCAP ta_attn_softcap_avx2
#define FILL_FN ta_attn_variants_fill_avx2

#include "kernels/attn_variants_template.h"
