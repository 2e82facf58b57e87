/* Aligned allocation through one overridable hook.
 * Large buffers are 2 MiB aligned and advised for transparent huge pages: first touch
 * of fresh memory costs ~11 us per 4 KiB page on our machines, far less per huge page. */
#include "core/core.h"
#include "core/workspace.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TA_ALIGN 64
#define TA_HUGE (2u << 20)

static void *default_alloc(size_t bytes, size_t alignment, void *user)
{
    (void)user;
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (rounded < bytes) return NULL;
    return aligned_alloc(alignment, rounded ? rounded : alignment);
}

static void default_free(void *ptr, void *user)
{
    (void)user;
    free(ptr);
}

static ta_alloc_fn hook_alloc = default_alloc;
static ta_free_fn hook_free = default_free;
static void *hook_user = NULL;

void ta_set_allocator(ta_alloc_fn alloc, ta_free_fn release, void *user)
{
    /* the scratch block kept between calls goes back through the hook that allocated it */
    ta_scratch_cache_release();
    if (alloc && release) {
        hook_alloc = alloc;
        hook_free = release;
        hook_user = user;
    } else {
        hook_alloc = default_alloc;
        hook_free = default_free;
        hook_user = NULL;
    }
}

void *ta_alloc(size_t bytes)
{
    size_t alignment = bytes >= TA_HUGE ? TA_HUGE : TA_ALIGN;
    void *p = hook_alloc(bytes, alignment, hook_user);
    if (!p) {
        ta_error(TA_ENOMEM, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (bytes >= TA_HUGE && hook_alloc == default_alloc) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

void *ta_alloc_zeroed(size_t bytes)
{
    void *p = ta_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void ta_free(void *ptr)
{
    if (ptr) hook_free(ptr, hook_user);
}

bool ta_mul_size(size_t *out, size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

bool ta_shape_numel(int64_t *out, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return false;
        n *= shape[i];
    }
    *out = n;
    return true;
}
