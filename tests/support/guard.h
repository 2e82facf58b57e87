/* Guard-page buffers for tests: memory whose last byte ends exactly where a PROT_NONE
 * page begins, so a SIMD tail that reads or writes one element too far, or a call that
 * uses more of a caller workspace than its size query measured, crashes instead of
 * passing quietly. */
#ifndef TA_TEST_GUARD_H
#define TA_TEST_GUARD_H

#include <stddef.h>

#include "tensorattn.h" /* ta_workspace */

typedef struct ta_guard {
    void *base;  /* the mapping (data pages + the guard page) */
    size_t size; /* its length in bytes */
} ta_guard;

/* n bytes (n >= 1) ending at the guard page; NULL on failure. Contents unspecified. */
void *ta_guard_bytes(ta_guard *g, size_t n);
/* n floats (n >= 1) ending at the guard page; NULL on failure. Contents unspecified. */
float *ta_guard_floats(ta_guard *g, size_t n);
/* A caller workspace of `bytes` whose start is `skew` bytes (0..63) past a 64-byte
 * boundary, placed so that what the library may use of it ends exactly at the guard
 * page. A _workspace_size answer is the layout's bytes (a multiple of 64) plus 64 to
 * align any pointer (ta_workspace_bytes): the library rounds data up to 64 bytes and
 * carves bytes - 64 (rounded down to a multiple of 64) from there, so any byte a call
 * touches past what its size query measured faults, however the start is aligned. The
 * declared end, data + bytes, lies skew bytes into the guard page (64 when skew is 0):
 * bytes the library never uses, since it aligns the start first. (A declared end at
 * the guard page itself would force a 64-byte aligned start, sizes being multiples of
 * 64, and leave 64 bytes the library does not use before the guard: room for a
 * slightly too small size to pass.) data is NULL on failure. */
ta_workspace ta_guard_workspace(ta_guard *g, size_t bytes, size_t skew);
/* Unmaps what ta_guard_bytes / _floats / _workspace mapped (a zeroed ta_guard is fine). */
void ta_guard_release(ta_guard *g);

#endif
