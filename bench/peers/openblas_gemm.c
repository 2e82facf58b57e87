/* Square SGEMM: tensorattn (ta_sgemm) against OpenBLAS (cblas_sgemm), on 1 and 2
 * threads, as GFLOP/s and as a fraction of the FMA peak measured in the same run.
 * Both results are checked against each other before timing. Median of REPS timed
 * runs, in blocks of BLOCK runs of one library after an untimed warm-up call, the two
 * libraries' blocks alternating, each block after SETTLE_S of sleep. Idle threads
 * spin after a call (OpenBLAS's for about 2^28 cycles, its THREAD_TIMEOUT; libgomp's
 * for a while too): alternating single calls ran each library beside the other's
 * spinning threads (ours on 2 threads at 1024: ~100 GFLOP/s against ~210 with
 * OPENBLAS_THREAD_TIMEOUT=4, OpenBLAS ~120 against ~200 after a pause). In blocks,
 * each library is timed as in a loop of calls, its own threads awake and the
 * other's parked.
 *   bench_openblas [n ...]   (default: 1024 2048)
 * Run it with and without OPENBLAS_CORETYPE set to see OpenBLAS's kernel choice. */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include "peak.h" /* bench/peak.c: the FMA peak, as tensorattn bench measures it */
#include "tensorattn.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);
char *openblas_get_corename(void);

#define REPS 9
#define BLOCK 3 /* divides REPS */
#define SETTLE_S 0.1 /* > 2^28 cycles at 2.7 GHz and up */

/* C[n,n] = A[n,n] B[n,n], row-major. */
static void run_ours(float *C, const float *A, const float *B, int n)
{
    ta_status st = ta_sgemm(C, n, 1, A, n, 1, B, n, 1, n, n, n, 1.0f, 0.0f);
    if (st != TA_OK) {
        fprintf(stderr, "ta_sgemm: %s\n", ta_last_error());
        exit(1);
    }
}

static void run_openblas(float *C, const float *A, const float *B, int n)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C,
                n);
}

/* Sleeps SETTLE_S: the other library's idle threads stop spinning. */
static void settle(void)
{
    struct timespec ts = {0, (long)(SETTLE_S * 1e9)};
    nanosleep(&ts, NULL);
}

/* Median seconds of REPS runs of each, blocks of ours and OpenBLAS alternating so that
 * noise from other processes on this shared machine falls on both alike. */
static void median_seconds(double *ours, double *theirs, float *C1, float *C2, const float *A,
                           const float *B, int n)
{
    double t1[REPS], t2[REPS];
    for (int r = 0; r < REPS; r += BLOCK) {
        settle();
        run_ours(C1, A, B, n); /* warm-up: caches, thread pool awake */
        for (int i = r; i < r + BLOCK; i++) {
            double t0 = bench_seconds_now();
            run_ours(C1, A, B, n);
            t1[i] = bench_seconds_now() - t0;
        }
        settle();
        run_openblas(C2, A, B, n);
        for (int i = r; i < r + BLOCK; i++) {
            double t0 = bench_seconds_now();
            run_openblas(C2, A, B, n);
            t2[i] = bench_seconds_now() - t0;
        }
    }
    *ours = bench_median(t1, REPS);
    *theirs = bench_median(t2, REPS);
}

int main(int argc, char **argv)
{
    int sizes[8] = {1024, 2048}, nsizes = 2;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 8; i++) sizes[nsizes++] = atoi(argv[i]);
    }
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("tensorattn %s kernels; OpenBLAS %s, core %s (OPENBLAS_CORETYPE=%s)\n",
           ta_isa_name(ta_active_isa()), openblas_get_config(), openblas_get_corename(),
           ct ? ct : "(unset)");
    printf("%6s %3s %10s %12s %8s %12s %8s %10s\n", "n", "thr", "peak", "ours GF/s", "ours%",
           "openblas", "oblas%", "ours/obl");
    for (int threads = 1; threads <= 2; threads++) {
        double peak = 0.0;
        const char *why = bench_fma_peak(&peak, ta_active_isa(), threads, 0.3);
        if (why) {
            fprintf(stderr, "peak: %s\n", why);
            return 1;
        }
        ta_set_num_threads(threads);
        openblas_set_num_threads(threads);
        for (int s = 0; s < nsizes; s++) {
            const int n = sizes[s];
            const size_t nn = (size_t)n * (size_t)n;
            float *A = malloc(nn * sizeof *A), *B = malloc(nn * sizeof *B);
            float *C1 = malloc(nn * sizeof *C1), *C2 = malloc(nn * sizeof *C2);
            if (!A || !B || !C1 || !C2) return 1;
            for (size_t i = 0; i < nn; i++) {
                A[i] = (float)((i * 7919u) % 1000u) / 500.0f - 1.0f;
                B[i] = (float)((i * 104729u) % 997u) / 498.5f - 1.0f;
            }
            run_ours(C1, A, B, n);
            run_openblas(C2, A, B, n);
            double maxdiff = 0.0, maxc = 0.0;
            for (size_t i = 0; i < nn; i++) {
                maxdiff = fmax(maxdiff, fabs((double)C1[i] - (double)C2[i]));
                maxc = fmax(maxc, fabs((double)C2[i]));
            }
            if (!(maxdiff <= 1e-5 * sqrt((double)n) * maxc)) {
                fprintf(stderr, "n=%d: results differ: max |ours - openblas| = %g (max |C| %g)\n",
                        n, maxdiff, maxc);
                return 1;
            }
            const double flops = 2.0 * (double)n * (double)n * (double)n;
            double s1, s2;
            median_seconds(&s1, &s2, C1, C2, A, B, n);
            const double g1 = flops / s1 * 1e-9, g2 = flops / s2 * 1e-9;
            printf("%6d %3d %10.1f %12.1f %7.1f%% %12.1f %7.1f%% %10.2f\n", n, threads, peak, g1,
                   100.0 * g1 / peak, g2, 100.0 * g2 / peak, g1 / g2);
            fflush(stdout);
            free(A), free(B), free(C1), free(C2);
        }
    }
    return 0;
}
