/* The report on stdout: the machine and its FMA peaks, then one row per case that ran
 * (bench/README.md). Printed at the end of the run: the ratios need the peaks measured
 * after the cases too. */
#include "bench_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void print_header(void)
{
    printf("%-32s %-34s %3s %5s %10s %10s %10s %9s %6s %7s %7s %9s %7s %9s\n", "case", "shape",
           "thr", "runs", "median ms", "min ms", "cold ms", "GFLOP/s", "%peak", "GB/s", "%bw",
           "err", "x ref", "scratch MiB");
}

static void print_row(const bench_case *c)
{
    char shape[160], speedup[16] = "-", extra[16] = "?", gbs[16] = "-", bw[16] = "-";
    c->kind->shape_text(c, shape, sizeof shape);
    if (isfinite(c->speedup_vs_reference))
        snprintf(speedup, sizeof speedup, "%.2f", c->speedup_vs_reference);
    /* the cold call's: each case starts with no scratch kept, warm calls reuse it */
    if (c->extra_bytes_cold >= 0.0)
        snprintf(extra, sizeof extra, "%.1f", c->extra_bytes_cold / (1 << 20));
    /* memory-bound cases: bytes moved per second, and that as a share of the read
     * bandwidth measured on the case's thread count */
    if (c->bytes > 0.0) snprintf(gbs, sizeof gbs, "%.1f", c->gbs);
    if (isfinite(c->bandwidth_fraction)) /* '*': its bytes fit in the last-level cache */
        snprintf(bw, sizeof bw, "%.1f%%%s", 100.0 * c->bandwidth_fraction, c->fits_llc ? "*" : "");
    if (strcmp(c->status, "ok") == 0)
        printf("%-32s %-34s %3d %5d %10.3f %10.3f %10.3f %9.1f %5.1f%% %7s %7s %9.2e %7s %9s\n",
               c->name, shape, c->threads, c->runs, c->median_s * 1e3, c->min_s * 1e3,
               c->cold_s * 1e3, c->gflops, 100.0 * c->peak_fraction, gbs, bw, c->max_rel_err,
               speedup, extra);
    else if (!strcmp(c->status, "skipped"))
        printf("%-32s %-34s %3d  %s: %s\n", c->name, shape, c->threads, c->status, c->error);
    else
        printf("%-32s %-34s %3d  FAILED (%s): %s\n", c->name, shape, c->threads, c->status,
               c->error);
    fflush(stdout);
}

void bench_print_table(const bench_state *s)
{
    print_header();
    int in_llc = 0;
    for (int i = 0; i < s->ncases; i++)
        if (s->cases[i].status) {
            print_row(&s->cases[i]);
            in_llc |= s->cases[i].fits_llc;
        }
    if (in_llc)
        printf("* the case's bytes fit in the last-level cache (%.0f MiB): its repeated calls may "
               "read them from there, not from memory\n", (double)s->llc_bytes / (1 << 20));
    for (int i = 0; i < s->ncases; i++) {
        const bench_case *c = &s->cases[i];
        char alt[96] = "";
        if (isfinite(c->ratio_alternating))
            snprintf(alt, sizeof alt, "; %.2fx in %d alternating rounds", c->ratio_alternating,
                     c->ratio_rounds);
        if (c->status && isfinite(c->ratio_vs_causal))
            printf("%s takes %.2fx the time of %s_%s (the same mask as opts.causal%s)\n", c->name,
                   c->ratio_vs_causal, c->vs_causal, c->path, c->vs_case[0] ? "" : alt);
        if (c->status && isfinite(c->ratio_vs)) {
            if (c->vs_scale == 1.0)
                printf("%s takes %.2fx the time of %s (%s%s)\n", c->name, c->ratio_vs, c->vs_case,
                       c->vs_key, alt);
            else
                printf("%s takes %.2fx %.3f of the time of %s (%s%s)\n", c->name, c->ratio_vs,
                       c->vs_scale, c->vs_case, c->vs_key, alt);
        }
    }
    int any = 0;
    for (int i = 0; i < s->ncases; i++) {
        const bench_case *c = &s->cases[i];
        if (!c->status || !isfinite(c->peak_fraction_alternating)) continue;
        if (!any++)
            printf("fractions of the FMA peak measured around the calls (median of rounds of "
                   "one call against the higher of the 20 ms peak measurements before and "
                   "after it):\n");
        printf("  %-32s %5.1f%% in %d rounds (%.1f%% against the run's peak)\n", c->name,
               100.0 * c->peak_fraction_alternating, c->peak_rounds, 100.0 * c->peak_fraction);
    }
    fflush(stdout);
}

void bench_print_machine(const bench_state *s)
{
    ta_isa act = ta_active_isa();
    printf("tensorattn %s bench%s\n", ta_version(), s->cfg.quick ? " (quick)" : "");
    printf("machine: isa %s, %d thread%s\n", ta_isa_name(act), s->cfg.threads,
           s->cfg.threads == 1 ? "" : "s");
    printf("FMA peak (GFLOP/s, float32, measured now):\n");
    for (int i = 0; i < TA_ISA_COUNT; i++) {
        if (!ta_cpu_supports((ta_isa)i)) continue;
        printf("  %-8s %9.1f on 1 thread", ta_isa_name((ta_isa)i),
               bench_known_peak(s, (ta_isa)i, 1));
        if (s->cfg.threads != 1)
            printf(", %9.1f on %d threads", bench_known_peak(s, (ta_isa)i, s->cfg.threads),
                   s->cfg.threads);
        printf("%s\n", (ta_isa)i == act ? "   <- ratios use this" : "");
    }
    printf("  (best of two measurements, before and after the cases; they differed by up to "
           "%.0f%%)\n", 100.0 * s->peak_spread);
    printf("read bandwidth (GB/s, streaming read of %lld MiB, median of %d passes, measured "
           "now):\n", (long long)(s->cfg.read_bytes >> 20), s->cfg.read_runs);
    if (s->read_gbs_1thread > 0.0) printf("  %-8s %9.1f on 1 thread", "read", s->read_gbs_1thread);
    else printf("  not measured");
    if (s->cfg.threads != 1 && s->read_gbs > 0.0)
        printf(", %9.1f on %d threads", s->read_gbs, s->cfg.threads);
    printf("   <- %%bw of memory-bound cases (decoding) uses this\n");
    printf("  (best of two measurements, before and after the cases; they differed by up to "
           "%.0f%%)\n", 100.0 * s->read_spread);
    if (s->read_latency_ns > 0.0 && s->read_gbs_1thread > 0.0)
        printf("read latency: %.0f ns a load that misses the caches (1 thread): %.0f lines of 64 "
               "bytes in flight at the 1-thread bandwidth\n\n",
               s->read_latency_ns, s->read_gbs_1thread * s->read_latency_ns / 64.0);
    else if (s->read_latency_ns > 0.0)
        printf("read latency: %.0f ns a load that misses the caches (1 thread)\n\n", s->read_latency_ns);
    else
        printf("read latency: not measured\n\n");
    fflush(stdout);
}
