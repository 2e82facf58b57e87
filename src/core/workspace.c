/* The arena that lays out an operation's scratch, and the block it runs in (workspace.h). */
#include "core/workspace.h"

#include "core/core.h"
#include "core/tensor_internal.h" /* ta_tensor_byte_span */

#include <pthread.h>

void *ta_arena_take(ta_arena *a, size_t n, size_t elem)
{
    size_t bytes;
    if (!ta_mul_size(&bytes, n, elem) || bytes > SIZE_MAX - TA_ARENA_ALIGN - a->used) {
        a->overflow = true;
        return NULL;
    }
    size_t off = a->used;
    a->used += (bytes + TA_ARENA_ALIGN - 1) / TA_ARENA_ALIGN * TA_ARENA_ALIGN;
    if (!a->base) return NULL;
    if (a->used > a->size) { /* a layout that differs from its measurement: a bug */
        a->overflow = true;
        return NULL;
    }
    return a->base + off;
}

void *ta_arena_take2(ta_arena *a, int64_t n1, int64_t n2, size_t elem)
{
    int64_t n;
    if (n1 < 0 || n2 < 0 || __builtin_mul_overflow(n1, n2, &n)) {
        a->overflow = true;
        return NULL;
    }
    return ta_arena_take(a, (size_t)n, elem);
}

ta_arena ta_arena_sub(ta_arena *a, size_t bytes)
{
    unsigned char *p = ta_arena_take(a, bytes, 1);
    if (p) return ta_arena_over(p, bytes);
    return a->base ? (ta_arena){.overflow = true} : ta_arena_measure();
}

size_t ta_workspace_bytes(size_t needed)
{
    return needed == 0 ? 0 : needed > SIZE_MAX - TA_ARENA_ALIGN ? SIZE_MAX
                                                                : needed + TA_ARENA_ALIGN;
}

/* -------------------------------------------------------- the kept block */

/* One block is kept between calls: a call takes it (or allocates its own when another
 * call holds it, or it is too small) and gives back the larger. It comes from the
 * allocation hook; ta_set_allocator releases it before switching hooks. */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static void *kept_ptr;
static size_t kept_bytes;

void ta_scratch_cache_release(void)
{
    pthread_mutex_lock(&kept_lock);
    void *p = kept_ptr;
    kept_ptr = NULL;
    kept_bytes = 0;
    pthread_mutex_unlock(&kept_lock);
    ta_free(p);
}

static void *kept_take(size_t bytes, size_t *got)
{
    pthread_mutex_lock(&kept_lock);
    void *p = kept_ptr;
    size_t have = kept_bytes;
    kept_ptr = NULL;
    kept_bytes = 0;
    pthread_mutex_unlock(&kept_lock);
    if (p && have >= bytes) {
        *got = have;
        return p;
    }
    ta_free(p);
    *got = bytes;
    return ta_alloc(bytes);
}

static void kept_give(void *p, size_t bytes)
{
    pthread_mutex_lock(&kept_lock);
    if (kept_ptr && kept_bytes >= bytes) {
        pthread_mutex_unlock(&kept_lock);
        ta_free(p);
        return;
    }
    void *old = kept_ptr;
    kept_ptr = p;
    kept_bytes = bytes;
    pthread_mutex_unlock(&kept_lock);
    ta_free(old);
}

/* ------------------------------------------------------------- scratch */

/* Whether the bytes [lo, hi) meet the workspace's (an error naming what, one of the
 * call's `kind`, if they do). */
static ta_status ws_apart(const char *fn, const ta_workspace *ws, uintptr_t lo, uintptr_t hi,
                          const char *what, const char *kind)
{
    const uintptr_t wlo = (uintptr_t)ws->data, whi = wlo + ws->size;
    if (lo < whi && wlo < hi)
        return ta_error(TA_EINVAL, "%s: the workspace overlaps %s; it must not share memory "
                        "with the call's %s (the call writes its scratch there)", fn, what, kind);
    return TA_OK;
}

ta_status ta_workspace_check(const char *fn, const ta_workspace *ws, int n,
                             const ta_tensor *const *t, const char *const *names)
{
    if (!ws || !ws->data || ws->size == 0) return TA_OK;
    for (int i = 0; i < n; i++) {
        uintptr_t lo, hi;
        if (!t[i] || !t[i]->data || !ta_tensor_byte_span(t[i], &lo, &hi)) continue;
        ta_status st = ws_apart(fn, ws, lo, hi, names[i], "tensors");
        if (st) return st;
    }
    return TA_OK;
}

ta_status ta_workspace_check_bytes(const char *fn, const ta_workspace *ws, const void *p,
                                   size_t bytes, const char *name)
{
    if (!ws || !ws->data || ws->size == 0 || !p || bytes == 0) return TA_OK;
    return ws_apart(fn, ws, (uintptr_t)p, (uintptr_t)p + bytes, name, "arguments");
}

ta_status ta_scratch_acquire(ta_scratch *s, const char *fn, const ta_workspace *ws,
                             size_t bytes)
{
    *s = (ta_scratch){0};
    if (bytes == SIZE_MAX)
        return ta_error(TA_ENOMEM, "%s: the scratch for these shapes does not fit in memory",
                        fn);
    if (ws && ws->data) {
        size_t need = ta_workspace_bytes(bytes);
        if (ws->size < need)
            return ta_error(TA_EINVAL, "%s: the workspace has %zu bytes but this call needs "
                            "%zu (its _workspace_size query, for the current thread count)",
                            fn, ws->size, need);
        uintptr_t p = ((uintptr_t)ws->data + TA_ARENA_ALIGN - 1) & ~(uintptr_t)(TA_ARENA_ALIGN - 1);
        s->base = (void *)p;
        s->size = bytes;
        return TA_OK;
    }
    if (bytes == 0) return TA_OK;
    size_t got = bytes;
    void *p = bytes <= TA_SCRATCH_KEEP_MAX ? kept_take(bytes, &got) : ta_alloc(bytes);
    if (!p) return ta_error(TA_ENOMEM, "%s: cannot allocate %zu bytes of scratch", fn, bytes);
    *s = (ta_scratch){.base = p, .size = got, .alloc = p, .alloc_size = got};
    return TA_OK;
}

void ta_scratch_release(ta_scratch *s)
{
    if (s->alloc) {
        if (s->alloc_size <= TA_SCRATCH_KEEP_MAX) kept_give(s->alloc, s->alloc_size);
        else ta_free(s->alloc);
    }
    *s = (ta_scratch){0};
}
