/* The attention variants' kernels for portable C (one-lane vectors, no fused multiply-adds): attn_variants_template.h
 * over vec_scalar.h (docs/kernels.md, "Attention variants"). */
#include "kernels/vec_scalar.h"

#define NAME_SOFTCAP ta_attn_softcap_scalar
#define FILL_FN ta_attn_variants_fill_scalar

#include "kernels/attn_variants_template.h"
