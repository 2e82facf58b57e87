/* The FMA peak, measured on the spot: the yardstick every benchmark ratio uses. */
#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>

ta_status ta_measure_fma_peak(double *gflops, ta_isa isa, int threads, double seconds)
{
    if (!gflops) return ta_error(TA_EINVAL, "ta_measure_fma_peak: gflops is NULL");
    if (!(seconds > 0.0) || seconds > 60.0)
        return ta_error(TA_EINVAL, "ta_measure_fma_peak: seconds must be in (0, 60], got %g",
                        seconds);
    if (threads < 0) return ta_error(TA_EINVAL, "ta_measure_fma_peak: threads is negative (%d)", threads);
    const ta_kernels *k = ta_kernels_for(isa);
    if (!k)
        return ta_error(TA_EUNSUPPORTED, "ta_measure_fma_peak: this CPU cannot run %s",
                        ta_isa_name(isa));
    int nt = threads ? threads : ta_threads();
    /* Calibrate: grow the iteration count until one run takes >= 20 ms. */
    int64_t iters = 1 << 16;
    for (;;) {
        double t0 = ta_now();
        k->fma_peak_loop(iters);
        if (ta_now() - t0 >= 0.02 || iters > ((int64_t)1 << 40)) break;
        iters *= 2;
    }
    /* Best of repeated parallel runs: the peak is what the hardware can do. */
    double best = 0.0, end = ta_now() + seconds;
    do {
        double flops = 0.0, t0 = ta_now();
        #pragma omp parallel num_threads(nt) reduction(+ : flops)
        flops += k->fma_peak_loop(iters);
        double dt = ta_now() - t0;
        if (flops / dt > best) best = flops / dt;
    } while (ta_now() < end);
    *gflops = best * 1e-9;
    return TA_OK;
}
