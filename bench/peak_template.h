/* The machine's two limits, measured by loops written once over the vector vocabulary
 * of the library's kernel templates and instantiated by bench/peak_<isa>.c, each built
 * with its ISA's flags
 * (isa_table.def). src/kernels/vec_<isa>.h is header-only (a vector type, VL and
 * static inline operations): including it links no library symbol, so the bench still
 * uses only the public API.
 *
 * The including file includes vec_<isa>.h and defines CHAINS (independent FMA chains:
 * enough to cover FMA latency x pipes), NAME_PEAK (bench_peak_loop_<isa>) and NAME_READ
 * (bench_read_loop_<isa>).
 *
 * NAME_PEAK(iters) runs `iters` rounds of CHAINS chains a = a * m + c held in registers
 * (m = 0.999999, c = 1e-7: values stay finite and normal; one FMA per step, or a
 * multiply and an add in scalar code) and returns the floating-point operations done:
 * 2 per lane per step. No memory is touched inside the loop; the result goes to a
 * volatile so that the compiler keeps the work. */
#include <stdint.h>

#define READ_ACCS 8 /* independent sums: the loads, not the add latency, set the pace */

double NAME_PEAK(int64_t iters);
double NAME_PEAK(int64_t iters)
{
    const VT m = V_SET1(0.999999f), c = V_SET1(1e-7f);
    VT a[CHAINS];
#pragma GCC unroll 16
    for (int j = 0; j < CHAINS; j++) a[j] = V_SET1(1.0f + 0.1f * (float)j);
    for (int64_t i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int j = 0; j < CHAINS; j++) a[j] = V_FMA(a[j], m, c);
#pragma GCC unroll 16
    for (int j = 1; j < CHAINS; j++) a[0] = V_ADD(a[0], a[j]);
    float out[VL];
    V_STOREU(out, a[0]);
    volatile float sink = out[0];
    (void)sink;
    return 2.0 * VL * CHAINS * (double)iters;
}

/* NAME_READ(p, n): the sum of the n floats at p, read once front to back with vector
 * loads into READ_ACCS independent sums: the read-bandwidth loop (bench_read_bandwidth).
 * The sum is returned so that the compiler keeps the loads. */
double NAME_READ(const float *p, int64_t n);
double NAME_READ(const float *p, int64_t n)
{
    VT a[READ_ACCS];
#pragma GCC unroll 16
    for (int j = 0; j < READ_ACCS; j++) a[j] = V_ZERO();
    int64_t i = 0;
    for (; i + READ_ACCS * VL <= n; i += READ_ACCS * VL)
#pragma GCC unroll 16
        for (int j = 0; j < READ_ACCS; j++) a[j] = V_ADD(a[j], V_LOADU(p + i + j * VL));
#pragma GCC unroll 16
    for (int j = 1; j < READ_ACCS; j++) a[0] = V_ADD(a[0], a[j]);
    float lanes[VL];
    V_STOREU(lanes, a[0]);
    double sum = 0.0;
    for (int l = 0; l < VL; l++) sum += (double)lanes[l];
    for (; i < n; i++) sum += (double)p[i];
    return sum;
}
