/* The AVX2 FMA peak loop (peak_template.h): 12 independent 8-lane chains, enough to
 * cover FMA latency (4) x 2 pipes with room. Built with the avx2 row's flags. */
#include "kernels/vec_avx2.h"

#define CHAINS 12
#define NAME_PEAK bench_peak_loop_avx2
#define NAME_READ bench_read_loop_avx2

#include "peak_template.h"
