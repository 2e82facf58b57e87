/* How fast one core reads rows that the hardware prefetchers cannot follow, the case of a
 * decode step's K and V rows in a KV cache [B, L, Hkv, D] (docs/performance.md,
 * "Session 9"). Built with the project (build/prefetch_ceiling), with the bench's
 * bench/peak.c for the latency.
 *
 *   build/prefetch_ceiling [MiB]        (default 1024; huge pages advised)
 *
 * Prints, on the calling thread:
 *   - the latency of a load that misses the caches (bench_read_latency, in the same
 *     buffer);
 *   - the rate of a sequential read of 256-byte rows (what the hardware streamer gives);
 *   - the rate of reading the same rows in a random order with a software prefetch
 *     (__builtin_prefetch, into L2) of every line of the row D rows ahead, for several D,
 *     and the lines that rate keeps in flight at the measured latency (Little's law:
 *     rate x latency / 64 bytes).
 * The random order with prefetching and no work per row is the ceiling of any decode
 * kernel that reads rows the hardware prefetchers do not follow (work per row only lowers
 * it): on the two-port Xeon of session 9 it levels off at about 28 lines in flight
 * (10.6 GB/s at 170 ns) against 46 for the sequential read (16 GB/s). */
#define _GNU_SOURCE
#include "peak.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ROW 256 /* bytes: a bfloat16 row of 128, a float32 row of 64 */

/* The sum of the first word of each of a row's lines: every line is loaded, with as
 * little work as can be (the fewer instructions per row, the more rows the core's
 * out-of-order window holds in flight). */
static inline uint64_t row_sum(const unsigned char *r)
{
    uint64_t s = 0;
    for (int c = 0; c < ROW; c += 64) {
        uint64_t w;
        memcpy(&w, r + c, sizeof w);
        s += w;
    }
    return s;
}

int main(int argc, char **argv)
{
    const size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 1024;
    if (mib < 64) {
        fprintf(stderr, "prefetch_ceiling: use at least 64 MiB (far larger than the caches)\n");
        return 2;
    }
    const size_t bytes = mib << 20, rows = bytes / ROW;
    unsigned char *buf = aligned_alloc((size_t)2 << 20, bytes);
    uint32_t *order = malloc(sizeof *order * rows);
    if (!buf || !order) {
        fprintf(stderr, "prefetch_ceiling: out of memory\n");
        return 1;
    }
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    memset(buf, 1, bytes);

    double lat = 0.0;
    const char *why = bench_read_latency(&lat, (float *)(void *)buf,
                                         (int64_t)(bytes / sizeof(float)), 2000000);
    if (why) {
        fprintf(stderr, "prefetch_ceiling: the latency is not measured: %s\n", why);
        return 1;
    }
    printf("latency of a load that misses the caches: %.0f ns\n", lat);

    /* A random permutation of the rows for the prefetched reads (Fisher-Yates). */
    uint64_t rng = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < rows; i++) order[i] = (uint32_t)i;
    for (size_t i = rows - 1; i > 0; i--) {
        const size_t j = (size_t)(bench_xorshift64(&rng) % (i + 1));
        const uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    uint64_t sink = 0;
    const size_t n = rows / 2; /* rows read per measurement */
    double t0 = bench_seconds_now();
    for (size_t i = 0; i < n; i++) sink += row_sum(buf + i * ROW);
    double dt = bench_seconds_now() - t0;
    printf("sequential rows:                       %5.1f GB/s (%3.0f lines in flight)\n",
           (double)n * ROW / dt * 1e-9, (double)n * ROW / dt * lat * 1e-9 / 64.0);
    static const int ahead[] = {0, 2, 4, 8, 16, 32, 64};
    for (size_t a = 0; a < sizeof ahead / sizeof ahead[0]; a++) {
        const size_t d = (size_t)ahead[a];
        t0 = bench_seconds_now();
        for (size_t i = 0; i < n; i++) {
            if (d) {
                const unsigned char *p = buf + (size_t)order[i + d] * ROW;
                for (int c = 0; c < ROW; c += 64) __builtin_prefetch(p + c, 0, 2);
            }
            sink += row_sum(buf + (size_t)order[i] * ROW);
        }
        dt = bench_seconds_now() - t0;
        printf("random rows, prefetch %2zu rows ahead:   %5.1f GB/s (%3.0f lines in flight)\n", d,
               (double)n * ROW / dt * 1e-9, (double)n * ROW / dt * lat * 1e-9 / 64.0);
    }
    free(order);
    free(buf);
    return sink == 42 ? 3 : 0; /* keeps the sums */
}
