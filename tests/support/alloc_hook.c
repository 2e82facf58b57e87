/* The counting allocation hook of the tests (alloc_hook.h). */
#include "alloc_hook.h"

#include "core/workspace.h" /* ta_scratch_cache_release */
#include "tensorattn.h"

#include <stdlib.h>

long ta_test_alloc_count;

static void *counting_alloc(size_t bytes, size_t alignment, void *user)
{
    (void)user;
    __atomic_add_fetch(&ta_test_alloc_count, 1, __ATOMIC_SEQ_CST);
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    return rounded < bytes ? NULL : aligned_alloc(alignment, rounded ? rounded : alignment);
}

static void counting_free(void *p, void *user)
{
    (void)user;
    free(p);
}

void ta_test_count_allocations(void)
{
    ta_scratch_cache_release();
    ta_set_allocator(counting_alloc, counting_free, NULL);
    ta_test_alloc_count = 0;
}

void ta_test_stop_counting(void)
{
    ta_scratch_cache_release();
    ta_set_allocator(NULL, NULL, NULL);
}
