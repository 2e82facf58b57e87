/* The online-softmax step's per-element forms, one definition for the two kernels that
 * must give the same bits: attn_softmax (attn_template.h) and attn_softmax_rows
 * (attn_rows_template.h; tested bitwise against the table's attn_softmax). Include from
 * a template, after vec_<isa>.h. The functions take SAFE, a constant: 1 where
 * ta_exp_denormal_assist (the exp that masks its tiny lanes), 0 the one-pass exp; the
 * two give the same bits. Natural vocabularies compute exp(x - u); those with V_EXP2
 * compute in base 2 (kernels.h, attn_softmax_exp2; docs/kernels.md, "The softmax in
 * base 2"). Header-only: it defines no library symbols. */
#ifndef TA_SOFTMAX_FORMS_H
#define TA_SOFTMAX_FORMS_H

#include "kernels/kernels.h"

#include <stdint.h>

#define SM_INLINE static inline __attribute__((always_inline))
/* The exp of a function instantiated twice, and 2^x where the vocabulary has it. */
#define SM_EXPF(v) (SAFE ? V_EXP(v) : V_EXP_ONEPASS(v))
#define SM_EXP2F(v) (SAFE ? V_EXP2(v) : V_EXP2_ONEPASS(v))

/* One vector of rows' shift: u (m', or 0 where m' = -inf), and in base 2 uL = fl(u L)
 * and the carry c = u L - uL (0 where |uL| >= TA_EXP2_BIG); mode: the form of its p (0
 * natural; base 2: 1, or 2 when a row < mq of the vector has |uL| >= TA_EXP2_BIG). */
typedef struct sm_shift {
    VT u, uL, c;
    int mode;
} sm_shift;

/* The shift of rows whose new shift is u and old max mo (bits: the lanes of rows < mq,
 * which alone choose the form), and their alpha in *a: exp(mo - u), or in base 2
 * 2^(fl(mo - u) L + c - c_mo), which carries the state from mo's carry to u's. */
SM_INLINE sm_shift sm_shift_of(VT u, VT mo, uint32_t bits, VT *a, const int SAFE)
{
    sm_shift sh = {u, u, u, 0};
#ifdef V_EXP2
    const VT LG = V_SET1(TA_LOG2E_F);
    sh.uL = V_MUL(u, LG);
    sh.c = V_EXP2_CARRY(u, sh.uL);
    *a = SM_EXP2F(V_ADD(V_MUL(V_SUB(mo, u), LG), V_SUB(sh.c, V_EXP2_CARRY(mo, V_MUL(mo, LG)))));
    sh.mode = V_EXP2_ANY_BIG(sh.uL, bits) ? 2 : 1;
#else
    (void)bits;
    *a = SM_EXPF(V_SUB(mo, u));
#endif
    return sh;
}

/* p of the score vector x by MODE (sh->mode, a constant after inlining): 0 exp(x - u);
 * base 2: 1 2^(fl(x L - uL)), 2 2^(fl(fl(x - u) L) + c). */
SM_INLINE VT sm_p(VT x, const sm_shift *sh, const int MODE, const int SAFE)
{
#ifdef V_EXP2
    if (MODE == 1) return SM_EXP2F(V_FMS(x, V_SET1(TA_LOG2E_F), sh->uL));
    if (MODE == 2) return SM_EXP2F(V_ADD(V_MUL(V_SUB(x, sh->u), V_SET1(TA_LOG2E_F)), sh->c));
#endif
    (void)MODE;
    return SM_EXPF(V_SUB(x, sh->u));
}

#endif
