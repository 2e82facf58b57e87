/* A counting allocation hook for tests that prove a call allocates nothing (or exactly
 * what it should): every allocation the library makes through ta_set_allocator adds one
 * to ta_test_alloc_count; blocks come from aligned_alloc and go back to free. */
#ifndef TA_TEST_ALLOC_HOOK_H
#define TA_TEST_ALLOC_HOOK_H

extern long ta_test_alloc_count;

/* Releases the scratch block the library keeps between calls (so that a call needing
 * scratch must show it), installs the counting hook and sets the count to 0. Tensors
 * made from now on must be freed before ta_test_stop_counting. */
void ta_test_count_allocations(void);
/* Releases the kept block (allocated by the counting hook) and restores the default. */
void ta_test_stop_counting(void);

#endif
