/* The FMA peak and read-bandwidth measurements (peak.h). Built without vector flags: it
 * calls an ISA's loops (bench/peak_<isa>.c) only after ta_cpu_supports says the CPU runs
 * that ISA. */
#define _POSIX_C_SOURCE 200809L

#include "peak.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The loops, one per row of the library's ISA table (src/kernels/isa_table.def: a list
 * of rows and arch macros, no code), so that the bench keeps no ISA list of its own;
 * a row of another target (TA_ON_<arch>) has no loop here, as its file is not built. */
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    double bench_peak_loop_##name(int64_t iters);                                             \
    double bench_read_loop_##name(const float *p, int64_t n);
#include "kernels/isa_table.def"
#undef TA_ISA

static double (*const loops[TA_ISA_COUNT])(int64_t iters) = {
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    [isa] = TA_ON_##arch(bench_peak_loop_##name),
#include "kernels/isa_table.def"
#undef TA_ISA
};

static double (*const read_loops[TA_ISA_COUNT])(const float *p, int64_t n) = {
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    [isa] = TA_ON_##arch(bench_read_loop_##name),
#include "kernels/isa_table.def"
#undef TA_ISA
};

double bench_seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

uint64_t bench_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

const char *bench_fma_peak(double *gflops, ta_isa isa, int threads, double seconds)
{
    if (!gflops) return "gflops is NULL";
    if (!(seconds > 0.0) || seconds > 60.0) return "seconds must be in (0, 60]";
    if (threads < 0) return "threads is negative";
    if ((int)isa < 0 || (int)isa >= TA_ISA_COUNT) return "no such ISA";
    if (!ta_cpu_supports(isa) || !loops[isa]) return "this CPU cannot run that ISA";
    double (*loop)(int64_t) = loops[isa];
    int nt = threads ? threads : ta_get_num_threads();
    /* Calibrate: grow the iteration count until one run takes >= 20 ms. */
    int64_t iters = 1 << 16;
    for (;;) {
        double t0 = bench_seconds_now();
        loop(iters);
        if (bench_seconds_now() - t0 >= 0.02 || iters > ((int64_t)1 << 40)) break;
        iters *= 2;
    }
    /* Best of repeated parallel runs: the peak is what the hardware can do. */
    double best = 0.0, end = bench_seconds_now() + seconds;
    do {
        double flops = 0.0, t0 = bench_seconds_now();
#pragma omp parallel num_threads(nt) reduction(+ : flops)
        flops += loop(iters);
        double dt = bench_seconds_now() - t0;
        if (flops / dt > best) best = flops / dt;
    } while (bench_seconds_now() < end);
    *gflops = best * 1e-9;
    return NULL;
}

const char *bench_read_bandwidth(double *gbs, ta_isa isa, int threads, const float *p, int64_t n,
                                 int runs)
{
    if (!gbs || !p) return "gbs or p is NULL";
    if (n < 1) return "n must be positive";
    if (runs < 1 || runs > BENCH_READ_MAX_RUNS) return "runs out of range";
    if (threads < 0) return "threads is negative";
    if ((int)isa < 0 || (int)isa >= TA_ISA_COUNT) return "no such ISA";
    if (!ta_cpu_supports(isa) || !read_loops[isa]) return "this CPU cannot run that ISA";
    double (*loop)(const float *, int64_t) = read_loops[isa];
    int nt = threads ? threads : ta_get_num_threads();
    double t[BENCH_READ_MAX_RUNS];
    volatile double sink = 0.0;
    for (int r = 0; r < runs; r++) {
        double sum = 0.0, t0 = bench_seconds_now();
        /* Each thread reads one contiguous share, cut at 64-float (256-byte) bounds. */
#pragma omp parallel num_threads(nt) reduction(+ : sum)
        {
            int64_t id = omp_get_thread_num(), k = omp_get_num_threads();
            int64_t lo = id ? n * id / k / 64 * 64 : 0;
            int64_t hi = id + 1 < k ? n * (id + 1) / k / 64 * 64 : n;
            if (hi > lo) sum += loop(p + lo, hi - lo);
        }
        t[r] = bench_seconds_now() - t0;
        sink += sum;
    }
    (void)sink;
    /* The median: the rate the machine sustains, not its luckiest pass. */
    const double median = bench_median(t, runs);
    if (!(median > 0.0)) return "the clock did not advance";
    *gbs = (double)n * sizeof(float) / median * 1e-9;
    return NULL;
}

const char *bench_read_latency(double *ns, float *p, int64_t n, int64_t steps)
{
    if (!ns || !p) return "ns or p is NULL";
    if (n < 16384) return "n must be at least 16384";
    if (steps < 1000) return "steps must be at least 1000";
    const int64_t lines = n / 16, m = lines < BENCH_LATENCY_LINES ? lines : BENCH_LATENCY_LINES;
    const int64_t gap = lines / m * 16; /* floats between the lines visited */
    int64_t *next = malloc(sizeof *next * (size_t)m);
    if (!next) return "out of memory for the chase order";
    for (int64_t i = 0; i < m; i++) next[i] = i;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int64_t i = m - 1; i > 0; i--) { /* Sattolo: next[] is one cycle through all m */
        const int64_t j = (int64_t)(bench_xorshift64(&x) % (uint64_t)i), t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    for (int64_t i = 0; i < m; i++) {
        const int64_t to = next[i] * gap;
        memcpy(p + i * gap, &to, sizeof to);
    }
    free(next);
    int64_t at = 0;
    for (int64_t s = 0; s < m; s++) memcpy(&at, p + at, sizeof at); /* the TLB and page tables */
    const double t0 = bench_seconds_now();
    for (int64_t s = 0; s < steps; s++) memcpy(&at, p + at, sizeof at);
    const double dt = bench_seconds_now() - t0;
    volatile int64_t sink = at;
    (void)sink;
    if (!(dt > 0.0)) return "the clock did not advance";
    *ns = dt / (double)steps * 1e9;
    return NULL;
}
