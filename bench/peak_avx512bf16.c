/* The avx512bf16 ISA's FMA peak loop: avx512's (its kernels are avx512's but for the
 * bfloat16 dot product of a decode's Q.K^T), built with the avx512bf16 row's flags. */
#include "kernels/vec_avx512.h"

#define CHAINS 12
#define NAME_PEAK bench_peak_loop_avx512bf16
#define NAME_READ bench_read_loop_avx512bf16

#include "peak_template.h"
