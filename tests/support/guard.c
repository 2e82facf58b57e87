/* Guard-page buffers (see guard.h). */
#include "guard.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

float *ta_guard_floats(ta_guard *g, size_t n)
{
    g->base = NULL;
    g->size = 0;
    if (n == 0 || n > SIZE_MAX / sizeof(float) / 2) return NULL;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t data = (n * sizeof(float) + page - 1) / page * page;
    void *base = mmap(NULL, data + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (base == MAP_FAILED) return NULL;
    if (mprotect((char *)base + data, page, PROT_NONE) != 0) {
        munmap(base, data + page);
        return NULL;
    }
    g->base = base;
    g->size = data + page;
    return (float *)((char *)base + data) - n;
}

void ta_guard_release(ta_guard *g)
{
    if (g->base) munmap(g->base, g->size);
    g->base = NULL;
    g->size = 0;
}
