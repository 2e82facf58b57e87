/* Builds the kernel tables once and picks the active one (TA_ARCH may force one). */
#include "core/core.h"
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static ta_kernels tables[3];
static int supported[3];
static ta_isa active = TA_ISA_SCALAR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_tables(void)
{
    for (int i = 0; i < 3; i++) {
        ta_kernels_fill_scalar(&tables[i]);
        supported[i] = ta_cpu_supports((ta_isa)i);
    }
    /* The fillers live in files built with vector flags: call them only where the
     * CPU can run them. */
    if (supported[TA_ISA_AVX2]) ta_kernels_fill_avx2(&tables[TA_ISA_AVX2]);
    if (supported[TA_ISA_AVX512]) {
        ta_kernels_fill_avx2(&tables[TA_ISA_AVX512]); /* AVX-512 CPUs run AVX2 too */
        ta_kernels_fill_avx512(&tables[TA_ISA_AVX512]);
    }

    active = supported[TA_ISA_AVX512] ? TA_ISA_AVX512 : supported[TA_ISA_AVX2] ? TA_ISA_AVX2
                                                                               : TA_ISA_SCALAR;
    const char *want = getenv("TA_ARCH");
    if (want && *want) {
        for (int i = 0; i < 3; i++)
            if (strcmp(want, ta_isa_name((ta_isa)i)) == 0 && supported[i]) active = (ta_isa)i;
    }
}

const ta_kernels *ta_kernels_active(void)
{
    pthread_once(&once, init_tables);
    return &tables[active];
}

const ta_kernels *ta_kernels_for(ta_isa isa)
{
    pthread_once(&once, init_tables);
    if ((int)isa < 0 || (int)isa > 2 || !supported[isa]) return NULL;
    return &tables[isa];
}

ta_isa ta_active_isa(void) { return ta_kernels_active()->isa; }
