/* The FMA peak, measured on the spot: the yardstick every benchmark ratio uses
 * (bench/README.md). One loop per ISA, bench/peak_<isa>.c (bench/peak_template.h). */
#ifndef TA_BENCH_PEAK_H
#define TA_BENCH_PEAK_H

#include "tensorattn.h"

/* This machine's float32 FMA peak in GFLOP/s with the given ISA's widest FMA
 * (independent chains, no memory traffic) on `threads` threads (0 = the library's
 * thread count), running for about `seconds` (0 < seconds <= 60): the best rate of
 * repeated parallel runs, each calibrated to >= 20 ms. Runs an ISA's loop only when
 * ta_cpu_supports(isa). Returns NULL, or why nothing was measured (*gflops untouched). */
const char *bench_fma_peak(double *gflops, ta_isa isa, int threads, double seconds);

#endif
