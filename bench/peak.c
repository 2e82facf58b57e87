/* The FMA peak measurement (peak.h). Built without vector flags: it calls an ISA's loop
 * (bench/peak_<isa>.c) only after ta_cpu_supports says the CPU runs that ISA. */
#define _POSIX_C_SOURCE 200809L

#include "peak.h"

#include <stdint.h>
#include <time.h>

/* The loops, one per row of the library's ISA table (src/kernels/isa_table.def: a list
 * of rows and arch macros, no code), so that the bench keeps no ISA list of its own;
 * a row of another target (TA_ON_<arch>) has no loop here, as its file is not built. */
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    double bench_peak_loop_##name(int64_t iters);
#include "kernels/isa_table.def"
#undef TA_ISA

static double (*const loops[TA_ISA_COUNT])(int64_t iters) = {
#define TA_ISA(isa, name, parent, supported, fill, arch, cflags)                              \
    [isa] = TA_ON_##arch(bench_peak_loop_##name),
#include "kernels/isa_table.def"
#undef TA_ISA
};

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
        double t0 = seconds_now();
        loop(iters);
        if (seconds_now() - t0 >= 0.02 || iters > ((int64_t)1 << 40)) break;
        iters *= 2;
    }
    /* Best of repeated parallel runs: the peak is what the hardware can do. */
    double best = 0.0, end = seconds_now() + seconds;
    do {
        double flops = 0.0, t0 = seconds_now();
#pragma omp parallel num_threads(nt) reduction(+ : flops)
        flops += loop(iters);
        double dt = seconds_now() - t0;
        if (flops / dt > best) best = flops / dt;
    } while (seconds_now() < end);
    *gflops = best * 1e-9;
    return NULL;
}
