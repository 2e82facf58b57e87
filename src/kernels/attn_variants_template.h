/* The kernels of the attention variants (window, softcap, ALiBi, sinks; DESIGN.md
 * "Inference and modern attention"), written once over the vector vocabulary of
 * vec_<isa>.h and instantiated by attn_variants_scalar.c, attn_variants_avx2.c and
 * attn_variants_avx512.c. Contracts: docs/kernels.md, "Attention variants".
 *
 * The including file defines VT, VL, V_SET1, V_LOADU, V_STOREU, V_LOADN, V_STOREN and
 * V_SOFTCAP(x, c, ic) = c tanh(x ic) (vec_<isa>.h), and the exported names NAME_SOFTCAP,
 * FILL_FN. */
#include "kernels/kernels.h"

#include <stdint.h>

/* s[i] = cap * tanh(s[i] * (1 / cap)) for i < n, in place (2^-126 <= cap <= 2^126, so
 * that 1 / cap is a normal float): Gemma 2's logit softcapping on a score tile. Whole
 * vectors, then one masked vector for the tail, so nothing past s[n - 1] is read or
 * written. */
static void NAME_SOFTCAP(float *s, int64_t n, float cap)
{
    const VT c = V_SET1(cap), ic = V_SET1(1.0f / cap);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) V_STOREU(s + i, V_SOFTCAP(V_LOADU(s + i), c, ic));
    if (i < n) {
        const int r = (int)(n - i);
        V_STOREN(s + i, V_SOFTCAP(V_LOADN(s + i, r), c, ic), r);
    }
}

void FILL_FN(ta_kernels *k)
{
    k->attn_softcap = NAME_SOFTCAP;
}
