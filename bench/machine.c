/* The machine section: the FMA peaks the ratios divide by, for every ISA of the
 * library's table that the CPU supports, and the read bandwidth that memory-bound cases
 * (decoding) are set against, each on 1 thread and on the bench thread count, measured
 * before the cases and again after them (the larger value is kept). The measurements
 * themselves are bench_fma_peak and bench_read_bandwidth (peak.c). */
#include "bench_internal.h"
#include "peak.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One measurement of the float32 FMA peak of `isa` on `threads` threads, in GFLOP/s:
 * independent FMA chains held in registers, no memory traffic. Returns 0, or -1 after
 * saying why on stderr. */
static int fma_peak(bench_state *s, ta_isa isa, int threads, double *gflops)
{
    double g = 0.0;
    const char *why = bench_fma_peak(&g, isa, threads, s->cfg.peak_seconds);
    if (why || !(g > 0.0)) {
        bench_progress_clear(s);
        fprintf(stderr, "tensorattn: error: bench: FMA peak (%s, %d threads): %s\n",
                ta_isa_name(isa), threads, why ? why : "no result");
        return -1;
    }
    *gflops = g;
    return 0;
}

/* The peak of `isa` on `threads` threads, measured the first time it is asked for. */
int bench_peak_for(bench_state *s, ta_isa isa, int threads, double *gflops)
{
    for (int i = 0; i < s->npeaks; i++)
        if (s->peaks[i].isa == isa && s->peaks[i].threads == threads) {
            *gflops = s->peaks[i].gflops;
            return 0;
        }
    if (s->npeaks == (int)(sizeof s->peaks / sizeof s->peaks[0])) {
        fprintf(stderr, "tensorattn: error: bench: too many FMA peak measurements\n");
        return -1;
    }
    bench_progress(s, "measuring the FMA peak: %s, %d thread%s ...", ta_isa_name(isa), threads,
                   threads == 1 ? "" : "s");
    double g;
    if (fma_peak(s, isa, threads, &g)) return -1;
    s->peaks[s->npeaks++] = (bench_peak){isa, threads, g};
    *gflops = g;
    return 0;
}

/* The read bandwidth on 1 thread and on the bench threads: a streaming read (the active
 * ISA's vector loads) of a buffer far larger than the caches (1 GiB; --quick: 256 MiB)
 * from the library allocator (huge pages advised, as the cases' buffers), touched
 * before timing. Measured before and after the cases, like the peaks: the larger value
 * is kept, the change goes to read_spread. Then, in the same buffer, the latency of a
 * load that misses the caches (bench_read_latency, 1 thread; the smaller value is kept):
 * with the bandwidth it gives the lines a core keeps in flight (bandwidth x latency / 64
 * bytes), the limit a decode step's reads meet (docs/performance.md, "Session 9").
 * Without the memory both stay unknown (0: reported as null) and the run goes on. */
static void measure_bandwidth(bench_state *s)
{
    const int64_t n = s->cfg.read_bytes / (int64_t)sizeof(float);
    ta_tensor buf = {0};
    ta_status st = ta_tensor_full(&buf, 1, &n, 1.0f);
    const char *why = st == TA_OK ? NULL : ta_last_error();
    int counts[2] = {1, s->cfg.threads};
    double got[2] = {0.0, 0.0}, *have[2] = {&s->read_gbs_1thread, &s->read_gbs};
    for (int k = 0; k < 2 && !why; k++) {
        if (k == 1 && counts[1] == 1) { /* one measurement serves both */
            got[1] = got[0];
            break;
        }
        bench_progress(s, "measuring the read bandwidth%s: %d thread%s ...",
                       *have[k] > 0.0 ? " again" : "", counts[k], counts[k] == 1 ? "" : "s");
        why = bench_read_bandwidth(&got[k], ta_active_isa(), counts[k], buf.data, n,
                                   s->cfg.read_runs);
    }
    double lat = 0.0;
    if (!why) {
        bench_progress(s, "measuring the read latency: 1 thread ...");
        const char *lwhy = bench_read_latency(&lat, buf.data, n, s->cfg.latency_steps);
        if (lwhy) {
            bench_progress_clear(s);
            fprintf(stderr, "bench: warning: the read latency is not measured: %s\n", lwhy);
        } else if (s->read_latency_ns == 0.0 || lat < s->read_latency_ns) {
            s->read_latency_ns = lat;
        }
    }
    ta_tensor_free(&buf);
    if (why) {
        bench_progress_clear(s);
        fprintf(stderr, "bench: warning: the read bandwidth is not measured: %s\n", why);
        return;
    }
    for (int k = 0; k < 2; k++) {
        if (*have[k] > 0.0) {
            double d = fabs(got[k] - *have[k]) / fmax(got[k], *have[k]);
            if (d > s->read_spread) s->read_spread = d;
        }
        if (got[k] > *have[k]) *have[k] = got[k];
    }
}

/* The largest data or unified cache of cpu0 in bytes, from
 * /sys/devices/system/cpu/cpu0/cache/index<i>/{type,size} ("260M", "2048K"); 0 where
 * sysfs does not say (another OS, a container without it). */
static int64_t llc_bytes(void)
{
    int64_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], type[32] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        const int got = fscanf(f, "%31s", type) == 1;
        fclose(f);
        if (!got || strcmp(type, "Instruction") == 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) continue;
        long long n = 0;
        char unit = 0;
        const int k = fscanf(f, "%lld%c", &n, &unit);
        fclose(f);
        if (k < 1 || n <= 0) continue;
        const int64_t b = k == 2 && unit == 'K' ? n << 10 : k == 2 && unit == 'M' ? n << 20
                        : k == 2 && unit == 'G' ? n << 30 : n;
        if (b > best) best = b;
    }
    return best;
}

int bench_measure_machine(bench_state *s)
{
    s->llc_bytes = llc_bytes();
    for (int i = 0; i < TA_ISA_COUNT; i++) {
        if (!ta_cpu_supports((ta_isa)i)) continue;
        double g;
        if (bench_peak_for(s, (ta_isa)i, 1, &g) || bench_peak_for(s, (ta_isa)i, s->cfg.threads, &g))
            return -1;
    }
    measure_bandwidth(s);
    return 0;
}

/* The peak is what the hardware can do, and a measurement that shares the cores with
 * another process reads low (then fractions above 1 appear). So every peak, and the
 * read bandwidth, is measured again after the cases; the larger value is kept and the
 * spread reported as a sign of a busy machine. */
int bench_recheck_peaks(bench_state *s)
{
    for (int i = 0; i < s->npeaks; i++) {
        bench_peak *p = &s->peaks[i];
        bench_progress(s, "measuring the FMA peak again: %s, %d thread%s ...",
                       ta_isa_name(p->isa), p->threads, p->threads == 1 ? "" : "s");
        double g;
        if (fma_peak(s, p->isa, p->threads, &g)) return -1;
        double d = fabs(g - p->gflops) / fmax(g, p->gflops);
        if (d > s->peak_spread) s->peak_spread = d;
        if (g > p->gflops) p->gflops = g;
    }
    measure_bandwidth(s);
    bench_progress_clear(s);
    return 0;
}

double bench_known_peak(const bench_state *s, ta_isa isa, int threads)
{
    for (int i = 0; i < s->npeaks; i++)
        if (s->peaks[i].isa == isa && s->peaks[i].threads == threads) return s->peaks[i].gflops;
    return 0.0;
}

double bench_known_bandwidth(const bench_state *s, int threads)
{
    return threads == s->cfg.threads ? s->read_gbs : threads == 1 ? s->read_gbs_1thread : 0.0;
}
