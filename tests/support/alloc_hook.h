/* The allocation hook of the tests (installed with ta_set_allocator): it counts every
 * allocation the library asks for, can make all of them or the n-th one fail, and keeps
 * count of the blocks handed out and not yet freed. Blocks come from aligned_alloc and go
 * back to free. Used to prove that a call allocates nothing (or exactly what it should)
 * and that every allocation failure is handled. */
#ifndef TA_TEST_ALLOC_HOOK_H
#define TA_TEST_ALLOC_HOOK_H

extern long ta_test_alloc_count;       /* allocations asked for, failed ones included */
extern long ta_test_free_count;        /* blocks given back */
extern long ta_test_alloc_outstanding; /* blocks handed out and not given back */
extern long ta_test_alloc_injected;    /* allocations the hook made fail */

/* Each installs the hook (after releasing the scratch block the library keeps between
 * calls, so that a call needing scratch must show it) and sets the counts to 0.
 * Tensors made from now on must be freed before ta_test_stop_counting. */
void ta_test_count_allocations(void);   /* every allocation succeeds */
void ta_test_fail_allocations(void);    /* every allocation fails */
void ta_test_fail_allocation_at(long n); /* the n-th from now fails (1-based; 0: none) */
/* Releases the kept block (allocated by the hook) and restores the default allocator. */
void ta_test_stop_counting(void);

#endif
