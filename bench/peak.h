/* The FMA peak and the read bandwidth, measured on the spot: the yardsticks every
 * benchmark ratio uses (bench/README.md). One loop of each per ISA, bench/peak_<isa>.c
 * (bench/peak_template.h). */
#ifndef TA_BENCH_PEAK_H
#define TA_BENCH_PEAK_H

#include "tensorattn.h"

#include <stdint.h>

#define BENCH_READ_MAX_RUNS 32

/* Seconds on the monotonic clock: the bench's one timer. */
double bench_seconds_now(void);

/* One step of xorshift64 (13, 7, 17) on *state (nonzero): the fixed-seed random orders
 * of the bench and its tools. */
uint64_t bench_xorshift64(uint64_t *state);

/* The median of the n (>= 1) values at v, which it sorts in place (an even n: the mean of
 * the middle two): the bench's and its tools' one statistic. */
double bench_median(double *v, int n);

/* This machine's float32 FMA peak in GFLOP/s with the given ISA's widest FMA
 * (independent chains, no memory traffic) on `threads` threads (0 = the library's
 * thread count), running for about `seconds` (0 < seconds <= 60): the best rate of
 * repeated parallel runs, each calibrated to >= 20 ms. Runs an ISA's loop only when
 * ta_cpu_supports(isa). Returns NULL, or why nothing was measured (*gflops untouched). */
const char *bench_fma_peak(double *gflops, ta_isa isa, int threads, double seconds);

/* The rate in GB/s (1e9 bytes/s) at which `threads` threads (0 = the library's thread
 * count) read the n floats at p with the given ISA's vector loads, each thread one
 * contiguous share, summed into independent accumulators: the median of `runs` (1 ..
 * BENCH_READ_MAX_RUNS) passes over the whole buffer. The caller allocates and touches p
 * (so no page fault is timed) and makes it far larger than the caches. Returns NULL, or
 * why nothing was measured (*gbs untouched). */
const char *bench_read_bandwidth(double *gbs, ta_isa isa, int threads, const float *p, int64_t n,
                                 int runs);

/* The lines a latency chase visits at most (bench_read_latency): spread over the buffer,
 * one every n / 16 / BENCH_LATENCY_LINES lines. */
#define BENCH_LATENCY_LINES ((int64_t)1 << 20)

/* The latency in ns of a load that misses every cache, on the calling thread: a chase
 * through `steps` (>= 1000) loads, each reading the index of the next from a 64-byte line
 * of the n floats at p (n >= 16384), over up to BENCH_LATENCY_LINES lines spread across
 * the buffer in a random cyclic order (Sattolo's shuffle, fixed seed), so that no
 * prefetcher can predict the next line; timed after a first pass over the cycle. The
 * caller makes p far larger than the caches and touches it (huge pages advised keep the
 * TLB out of it). Writes the first 8 bytes of each visited line. Returns NULL, or why
 * nothing was measured (*ns untouched). */
const char *bench_read_latency(double *ns, float *p, int64_t n, int64_t steps);

#endif
