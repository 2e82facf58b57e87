/* The AVX-512 FMA peak loop (peak_template.h): 12 independent 16-lane chains, enough to
 * cover FMA latency (4) x 2 pipes with room. Built with the avx512 row's flags. */
#include "kernels/vec_avx512.h"

#define CHAINS 12
#define NAME_PEAK bench_peak_loop_avx512
#define NAME_READ bench_read_loop_avx512

#include "peak_template.h"
