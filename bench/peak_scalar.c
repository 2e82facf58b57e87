/* The scalar FMA peak loop (peak_template.h): eight independent chains so that a
 * compiler cannot collapse them; scalar code measures the scalar multiply-add rate. */
#include "kernels/vec_scalar.h"

#define CHAINS 8
#define NAME_PEAK bench_peak_loop_scalar
#define NAME_READ bench_read_loop_scalar

#include "peak_template.h"
