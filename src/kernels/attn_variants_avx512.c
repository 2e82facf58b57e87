/* The attention variants' kernels for AVX-512 (16 lanes): attn_variants_template.h
 * over vec_avx512.h (docs/kernels.md, "Attention variants"). */
#include "kernels/vec_avx512.h"

#define NAME_SOFTCAP ta_attn_softcap_avx512
#define FILL_FN ta_attn_variants_fill_avx512

#include "kernels/attn_variants_template.h"
