/* The allocation hook of the tests (alloc_hook.h). */
#include "alloc_hook.h"

#include "core/workspace.h" /* ta_scratch_cache_release */
#include "tensorattn.h"

#include <stdlib.h>

long ta_test_alloc_count, ta_test_free_count, ta_test_alloc_outstanding, ta_test_alloc_injected;
static long fail_at; /* the call to fail, 1-based; 0: none; -1: every call */

static void *hook_alloc(size_t bytes, size_t alignment, void *user)
{
    (void)user;
    long n = __atomic_add_fetch(&ta_test_alloc_count, 1, __ATOMIC_SEQ_CST);
    if (fail_at < 0 || n == fail_at) {
        __atomic_add_fetch(&ta_test_alloc_injected, 1, __ATOMIC_SEQ_CST);
        return NULL;
    }
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void *p = rounded < bytes ? NULL : aligned_alloc(alignment, rounded ? rounded : alignment);
    if (p) __atomic_add_fetch(&ta_test_alloc_outstanding, 1, __ATOMIC_SEQ_CST);
    return p;
}

static void hook_free(void *p, void *user)
{
    (void)user;
    if (!p) return;
    __atomic_add_fetch(&ta_test_free_count, 1, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&ta_test_alloc_outstanding, 1, __ATOMIC_SEQ_CST);
    free(p);
}

static void install(long fail)
{
    ta_scratch_cache_release();
    ta_set_allocator(hook_alloc, hook_free, NULL);
    fail_at = fail;
    ta_test_alloc_count = ta_test_free_count = ta_test_alloc_outstanding = 0;
    ta_test_alloc_injected = 0;
}

void ta_test_count_allocations(void) { install(0); }
void ta_test_fail_allocations(void) { install(-1); }
void ta_test_fail_allocation_at(long n) { install(n > 0 ? n : 0); }

void ta_test_stop_counting(void)
{
    ta_scratch_cache_release();
    ta_set_allocator(NULL, NULL, NULL);
    fail_at = 0;
}
