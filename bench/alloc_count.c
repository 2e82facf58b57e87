/* The counting allocator behind extra_bytes: how much memory a call takes beyond its
 * inputs and outputs. The bench installs this hook (ta_set_allocator) once, first thing
 * in ta_bench_main, before the library has allocated anything, and never removes it: a
 * block must be released by the hook that allocated it, and a library may keep a
 * workspace alive between calls. It allocates as the default hook does (aligned_alloc,
 * huge pages advised from 2 MiB up; ta_alloc advises only for its own default), so
 * timings are unchanged; and it tracks the bytes outstanding and their high-water mark.
 * The hook may be called from several threads, hence the mutex (a handful of calls per
 * library call: no cost). A block the hook did not allocate (one made before it was
 * installed) is released with free(), as the default would, and not counted. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */

#include "bench_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define BENCH_HUGE ((size_t)2 << 20)

typedef struct bench_block {
    void *ptr;
    size_t bytes;
} bench_block;

static struct {
    pthread_mutex_t lock;
    bench_block *live; /* the blocks outstanding, in no order */
    size_t nlive, cap;
    size_t current, peak;
    int lost; /* the table could not grow: counts are unknown from then on */
} bench_mem = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, 0, 0};

static void *counting_alloc(size_t bytes, size_t alignment, void *user)
{
    (void)user;
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (rounded < bytes) return NULL;
    if (!rounded) rounded = alignment;
    void *p = aligned_alloc(alignment, rounded);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= BENCH_HUGE) madvise(p, rounded, MADV_HUGEPAGE);
#endif
    pthread_mutex_lock(&bench_mem.lock);
    if (bench_mem.nlive == bench_mem.cap) {
        size_t cap = bench_mem.cap ? 2 * bench_mem.cap : 256;
        bench_block *grown = realloc(bench_mem.live, cap * sizeof *grown);
        if (grown) {
            bench_mem.live = grown;
            bench_mem.cap = cap;
        }
    }
    if (bench_mem.nlive < bench_mem.cap) {
        bench_mem.live[bench_mem.nlive++] = (bench_block){p, rounded};
        bench_mem.current += rounded;
        if (bench_mem.current > bench_mem.peak) bench_mem.peak = bench_mem.current;
    } else {
        bench_mem.lost = 1;
    }
    pthread_mutex_unlock(&bench_mem.lock);
    return p;
}

static void counting_free(void *ptr, void *user)
{
    (void)user;
    pthread_mutex_lock(&bench_mem.lock);
    for (size_t i = bench_mem.nlive; i-- > 0;) /* the newest blocks go first, mostly */
        if (bench_mem.live[i].ptr == ptr) {
            bench_mem.current -= bench_mem.live[i].bytes;
            bench_mem.live[i] = bench_mem.live[--bench_mem.nlive];
            break;
        }
    pthread_mutex_unlock(&bench_mem.lock);
    free(ptr);
}

void bench_install_counting_allocator(void)
{
    ta_set_allocator(counting_alloc, counting_free, NULL);
}

size_t bench_mem_mark(void)
{
    pthread_mutex_lock(&bench_mem.lock);
    size_t now = bench_mem.current;
    bench_mem.peak = now;
    pthread_mutex_unlock(&bench_mem.lock);
    return now;
}

double bench_mem_extra_since(size_t base)
{
    pthread_mutex_lock(&bench_mem.lock);
    double extra = bench_mem.lost ? -1.0 : (double)(bench_mem.peak - base);
    pthread_mutex_unlock(&bench_mem.lock);
    return extra;
}
