/* The kernel table: one set of micro-kernels per ISA, filled from the scalar
 * reference kernels and then overridden per ISA (as BLIS does), chosen once from
 * cpuid. Contracts: docs/kernels.md. */
#ifndef TA_KERNELS_H
#define TA_KERNELS_H

#include "tensorattn.h"

#include <stdint.h>

typedef struct ta_kernels {
    ta_isa isa;
    const char *name;

    /* Runs `iters` rounds of independent FMA chains held in registers; returns the
     * number of floating-point operations done (2 per lane per FMA). */
    double (*fma_peak_loop)(int64_t iters);
} ta_kernels;

/* The table in use (the best supported, or TA_ARCH's choice). Never NULL. */
const ta_kernels *ta_kernels_active(void);
/* The table for isa, or NULL if this CPU cannot run it. */
const ta_kernels *ta_kernels_for(ta_isa isa);

/* Per-ISA fillers: each overrides the entries it has; the scalar one sets all. */
void ta_kernels_fill_scalar(ta_kernels *k);
void ta_kernels_fill_avx2(ta_kernels *k);
void ta_kernels_fill_avx512(ta_kernels *k);

#endif
