/* Guard-page buffers for tests: n floats whose last element ends exactly where a
 * PROT_NONE page begins, so a SIMD tail that reads or writes one element too far
 * crashes instead of passing quietly. */
#ifndef TA_TEST_GUARD_H
#define TA_TEST_GUARD_H

#include <stddef.h>

typedef struct ta_guard {
    void *base;  /* the mapping (data pages + the guard page) */
    size_t size; /* its length in bytes */
} ta_guard;

/* n floats (n >= 1) ending at the guard page; NULL on failure. Contents unspecified. */
float *ta_guard_floats(ta_guard *g, size_t n);
/* Unmaps what ta_guard_floats mapped (a zeroed ta_guard is fine). */
void ta_guard_release(ta_guard *g);

#endif
