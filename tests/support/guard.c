/* Guard-page buffers (see guard.h). */
#include "guard.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

void *ta_guard_bytes(ta_guard *g, size_t n)
{
    g->base = NULL;
    g->size = 0;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n == 0 || n > SIZE_MAX / 2 - page) return NULL;
    const size_t data = (n + page - 1) / page * page;
    void *base = mmap(NULL, data + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (base == MAP_FAILED) return NULL;
    if (mprotect((char *)base + data, page, PROT_NONE) != 0) {
        munmap(base, data + page);
        return NULL;
    }
    g->base = base;
    g->size = data + page;
    return (char *)base + data - n;
}

float *ta_guard_floats(ta_guard *g, size_t n)
{
    if (n > SIZE_MAX / sizeof(float)) {
        g->base = NULL;
        g->size = 0;
        return NULL;
    }
    return ta_guard_bytes(g, n * sizeof(float));
}

ta_workspace ta_guard_workspace(ta_guard *g, size_t bytes, size_t skew)
{
    const size_t layout = bytes > 64 ? (bytes - 64) / 64 * 64 : 0;
    const size_t lead = (64 - skew % 64) % 64; /* data .. data rounded up to 64 bytes */
    unsigned char *p = ta_guard_bytes(g, layout + lead ? layout + lead : 64);
    return (ta_workspace){.data = p, .size = p ? bytes : 0};
}

void ta_guard_release(ta_guard *g)
{
    if (g->base) munmap(g->base, g->size);
    g->base = NULL;
    g->size = 0;
}
