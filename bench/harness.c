/* The harness: the case table, and the life of one case -- setup, the cold call, the
 * check, warm-up, the timed runs, the check again -- then the ratios. It knows no kind
 * of case: each kind's functions come with the case (bench_internal.h). */
#define _POSIX_C_SOURCE 200809L

#include "bench_internal.h"
#include "peak.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_SAMPLES 64 /* random output elements checked per call ... */
#define BENCH_RUN 4096   /* ... plus a run of consecutive ones, the first and the last */

/* ------------------------------------------------------------ small tools */

int bench_fail(bench_case *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return -1;
}

int bench_lib_fail(bench_case *c, const char *what, ta_status st)
{
    return bench_fail(c, "%s failed: %s: %s", what, ta_status_name(st), ta_last_error());
}

uint64_t bench_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

bench_sampler bench_sampler_start(int64_t total, uint64_t seed)
{
    bench_sampler s = {seed, total, 0, 0};
    if (total > BENCH_RUN)
        s.run_start = (int64_t)(bench_rand(&s.rng) % (uint64_t)(total - BENCH_RUN));
    return s;
}

int64_t bench_sampler_next(bench_sampler *s)
{
    int n = s->n++;
    if (s->total <= 0) return -1;
    if (n == 0) return 0;
    if (n == 1) return s->total - 1;
    if (n < 2 + BENCH_SAMPLES) return (int64_t)(bench_rand(&s->rng) % (uint64_t)s->total);
    int64_t e = s->run_start + (n - 2 - BENCH_SAMPLES);
    return n < 2 + BENCH_SAMPLES + BENCH_RUN && e < s->total ? e : -1;
}

double bench_rel_err(double got, double ref, double scale)
{
    double e = fabs(got - ref) / (scale > DBL_MIN ? scale : DBL_MIN);
    return e == e ? e : INFINITY; /* NaN (an unwritten element) fails */
}

double bench_worse(double worst, double err)
{
    return err <= worst ? worst : err == err ? err : INFINITY; /* NaN fails */
}

int bench_new_output(bench_case *c, ta_tensor *t, int ndim, const int64_t *shape)
{
    ta_status st = ta_tensor_full(t, ndim, shape, NAN);
    if (st != TA_OK) return bench_lib_fail(c, "ta_tensor_full", st);
    return 0;
}

/* Outputs start as NaN, so a non-finite element after the first call is one the code
 * under test never wrote (a missed tile or tail); the scan covers every element, where
 * the oracle covers a sample. */
int64_t bench_first_nonfinite(const ta_tensor *t)
{
    const float *x = t->data;
    int64_t n = ta_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

double bench_diff_vs_reference(bench_case *c)
{
    const ta_tensor *out = &c->t[c->output];
    const float *o = out->data, *ref = c->ref_out->data;
    int64_t n = ta_tensor_numel(out);
    double diff = 0.0;
    for (int64_t e = 0; e < n; e++) diff = bench_worse(diff, fabs((double)o[e] - (double)ref[e]));
    if (!(diff <= c->max_abs_diff_ref)) c->max_abs_diff_ref = diff;
    return diff;
}

/* ---------------------------------------------------------------- progress */

void bench_progress(bench_state *s, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (s->progress_tty) {
        fprintf(stderr, "\rbench: %s\033[K", line);
        s->progress_open = 1;
    } else {
        fprintf(stderr, "bench: %s\n", line);
    }
    fflush(stderr);
}

void bench_progress_clear(bench_state *s)
{
    if (s->progress_open) { /* so that stdout rows do not land on the \r line */
        fputs("\r\033[K", stderr);
        fflush(stderr);
        s->progress_open = 0;
    }
}

/* ------------------------------------------------------------ the table */

void *bench_state_dup(const void *state, size_t n)
{
    void *p = malloc(n);
    if (p) memcpy(p, state, n);
    return p;
}

int bench_add_case(bench_state *s, const bench_case *c)
{
    /* a programming error or no memory, but say so rather than lose a row quietly */
    if (!c->state) {
        fprintf(stderr, "bench: warning: out of memory; %s is left out\n", c->name);
        return -1;
    }
    if (s->ncases == BENCH_MAX_CASES) {
        fprintf(stderr, "bench: warning: the case table is full; %s is left out\n", c->name);
        free(c->state);
        return -1;
    }
    s->cases[s->ncases] = *c;
    return s->ncases++;
}

void bench_cases_free(bench_state *s)
{
    for (int i = 0; i < s->ncases; i++) {
        free(s->cases[i].state);
        s->cases[i].state = NULL;
    }
}

/* --filter: a comma-separated list of substrings; a case runs when its name contains
 * any of them. */
int bench_selected(const bench_state *s, int i)
{
    if (!s->cfg.filter) return 1;
    const char *name = s->cases[i].name;
    for (const char *f = s->cfg.filter;;) {
        const char *comma = strchr(f, ',');
        size_t n = comma ? (size_t)(comma - f) : strlen(f);
        for (const char *c = name; n && strlen(c) >= n; c++)
            if (!strncmp(c, f, n)) return 1;
        if (!comma) return 0;
        f = comma + 1;
    }
}

int bench_case_ok(const bench_case *c)
{
    return c->status && strcmp(c->status, "ok") == 0;
}

/* ------------------------------------------------------------ one case */

static void teardown(bench_case *c)
{
    if (c->kind->cleanup) c->kind->cleanup(c);
    for (int i = 0; i < BENCH_MAX_TENSORS; i++) ta_tensor_free(&c->t[i]);
}

static int check_case(bench_case *c)
{
    int64_t bad = bench_first_nonfinite(&c->t[c->output]);
    if (bad >= 0) {
        c->status = "check_failed";
        c->max_rel_err = INFINITY;
        return bench_fail(c, "result check failed: output element %lld (row-major) is %g",
                          (long long)bad, (double)((const float *)c->t[c->output].data)[bad]);
    }
    double err = INFINITY;
    if (c->kind->check(c, &err)) return -1;
    if (err > c->max_rel_err) c->max_rel_err = err;
    if (!(err <= c->tolerance)) {
        c->status = "check_failed";
        return bench_fail(c, "result check failed: max %s error %.3g > %.3g",
                          c->kind->abs_err ? "absolute" : "relative", err, c->tolerance);
    }
    return 0;
}

/* setup, cold call, check, warm-up, timed runs, check again. Returns 0 when timed, -1
 * on failure (every case the bench lists must run: a TA_EUNSUPPORTED is an error too).
 * Every call's extra memory is measured: the counting hook's peak above what was
 * outstanding when the call began. */
static int time_case(bench_state *s, bench_case *c)
{
    ta_status st = ta_set_num_threads(c->threads);
    if (st != TA_OK) return bench_lib_fail(c, "ta_set_num_threads", st);
    if (c->kind->setup(c)) return -1;
    /* Installing the hook again releases the scratch the library keeps between calls
     * (ta_set_allocator), so the cold call starts from none: extra_bytes_cold is this
     * case's own scratch, whatever case ran before. */
    bench_install_counting_allocator();
    size_t base = bench_mem_mark();
    double t0 = bench_seconds_now();
    if (c->kind->run(c)) return -1;
    c->cold_s = bench_seconds_now() - t0;
    c->extra_bytes_cold = bench_mem_extra_since(base);
    if (check_case(c)) return -1;
    /* A slow case (the reference path at the big sizes takes seconds) gets fewer runs
     * so that the whole bench stays within minutes: its cold call warmed it up. */
    int warmup = s->cfg.warmup_runs, min_runs = s->cfg.min_runs;
    double min_seconds = s->cfg.min_seconds;
    if (!s->cfg.quick && c->cold_s >= 1.0)
        warmup = 0, min_runs = 2, min_seconds = 0.0;
    else if (!s->cfg.quick && c->cold_s >= 0.25)
        warmup = 1, min_runs = 3, min_seconds = 0.0;
    for (int i = 0; i < warmup; i++)
        if (c->kind->run(c)) return -1;
    double start = bench_seconds_now(), extra = 0.0;
    int n = 0;
    while (n < BENCH_MAX_RUNS && (n < min_runs || bench_seconds_now() - start < min_seconds)) {
        base = bench_mem_mark();
        t0 = bench_seconds_now();
        if (c->kind->run(c)) return -1;
        s->times[n++] = bench_seconds_now() - t0;
        double e = bench_mem_extra_since(base);
        extra = e < 0.0 || extra < 0.0 ? -1.0 : fmax(extra, e);
    }
    c->extra_bytes = extra;
    /* The last output must be as right as the first (races, stale workspaces). */
    if (check_case(c)) return -1;
    c->runs = n;
    c->median_s = bench_median(s->times, n); /* sorts: times[0] is the minimum */
    c->min_s = s->times[0];
    c->gflops = c->median_s > 0.0 ? c->flops / c->median_s * 1e-9 : 0.0;
    /* The ratio itself is set after the peaks are measured again (finish_ratios). */
    double peak;
    if (bench_peak_for(s, ta_active_isa(), c->threads, &peak))
        return bench_fail(c, "could not measure the FMA peak on %d threads", c->threads);
    return 0;
}

/* A reference output that its twin (run next, same inputs) will be checked against
 * changes hands from the case to s->kept, so that teardown keeps it. */
static void keep_reference_output(bench_state *s, bench_case *c)
{
    if (!c->is_reference || !bench_case_ok(c) || c->twin <= (int)(c - s->cases) ||
        !bench_selected(s, c->twin) || s->cases[c->twin].skip_reason[0])
        return;
    ta_tensor_free(&s->kept);
    s->kept = c->t[c->output];
    memset(&c->t[c->output], 0, sizeof c->t[c->output]);
    s->kept_for = c->twin;
}

/* ------------------------------------------------- ratios in alternation */

static const bench_case *same_path_case(const bench_state *s, const bench_case *c,
                                        const char *shape);

/* The case c's ratio is against (vs_case, else vs_causal's same-path case), when both ran
 * on the same thread count; else NULL. */
static bench_case *ratio_partner(bench_state *s, const bench_case *c)
{
    const bench_case *o = NULL;
    if (!bench_case_ok(c)) return NULL;
    if (c->vs_case[0]) {
        for (int j = 0; j < s->ncases; j++)
            if (!strcmp(s->cases[j].name, c->vs_case) && bench_case_ok(&s->cases[j])) o = &s->cases[j];
    } else if (c->vs_causal[0]) {
        o = same_path_case(s, c, c->vs_causal);
    }
    return o && o != c && o->threads == c->threads ? (bench_case *)o : NULL;
}

/* Whether another alternating round is due after n of them, started at `start`: at
 * least 11 rounds (3 with --quick or when `slow`: a cold call of 0.25 s or more) and,
 * unless slow, the bench's min_seconds twice over; at most BENCH_MAX_RUNS. */
static int more_rounds(const bench_state *s, int n, int slow, double start)
{
    const int min_rounds = s->cfg.quick || slow ? 3 : 11;
    const double min_seconds = slow ? 0.0 : 2.0 * s->cfg.min_seconds;
    return n < BENCH_MAX_RUNS && (n < min_rounds || bench_seconds_now() - start < min_seconds);
}

/* c and its partner o set up side by side, a warm-up call each, then rounds of one call
 * of each (the first of the two alternating) until at least 11 rounds (--quick, or a
 * case whose cold call took 0.25 s or more: 3) and the bench's min_seconds twice over
 * have passed, at most BENCH_MAX_RUNS; then both outputs are checked again. Returns 0,
 * or -1 on a failure (said by run_pairs). */
static int time_pair(bench_state *s, bench_case *c, bench_case *o)
{
    ta_status st = ta_set_num_threads(c->threads);
    if (st != TA_OK) return bench_lib_fail(c, "ta_set_num_threads", st);
    c->ref_out = o->ref_out = NULL;
    int rc = 0;
    if (c->kind->setup(c) || o->kind->setup(o)) rc = -1;
    if (!rc && (c->kind->run(c) || o->kind->run(o))) rc = -1;
    /* slow cases (the reference path at the big sizes) as few rounds as time_case allows */
    const int slow = !s->cfg.quick && (c->cold_s >= 0.25 || o->cold_s >= 0.25);
    const double start = bench_seconds_now();
    int n = 0;
    while (!rc && more_rounds(s, n, slow, start)) {
        double t[2];
        for (int k = 0; k < 2 && !rc; k++) {
            bench_case *x = (k ^ (n & 1)) ? o : c; /* c first in even rounds */
            const double t0 = bench_seconds_now();
            if (x->kind->run(x)) rc = -1;
            t[x == o] = bench_seconds_now() - t0;
        }
        if (!rc) s->times[n++] = t[1] > 0.0 ? t[0] / t[1] : NAN;
    }
    if (!rc && (check_case(c) || check_case(o))) rc = -1;
    if (!rc && n > 0) {
        c->ratio_alternating = bench_median(s->times, n) / (c->vs_case[0] ? c->vs_scale : 1.0);
        c->ratio_rounds = n;
    }
    teardown(c);
    teardown(o);
    return rc;
}

/* Every ratio again, in alternation (time_pair). */
static int run_pairs(bench_state *s)
{
    int failed = 0;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i], *o = ratio_partner(s, c);
        if (!o) continue;
        bench_progress(s, "%s against %s, alternating ...", c->name, o->name);
        if (time_pair(s, c, o)) {
            bench_progress_clear(s);
            fprintf(stderr, "tensorattn: error: bench case %s against %s: %s\n", c->name,
                    o->name, c->error[0] ? c->error : o->error);
            failed++;
        }
    }
    bench_progress_clear(s);
    return failed ? -1 : 0;
}

/* ------------------------------------ fractions of the peak in alternation */

/* Whether c gets peak_fraction_alternating: a compute case that ran (not the reference
 * path, which the seed's algorithm bounds, nor a memory-bound case). */
static int peak_alternates(const bench_case *c)
{
    return bench_case_ok(c) && c->flops > 0.0 && !(c->bytes > 0.0) && !c->is_reference &&
           c->median_s > 0.0;
}

/* c set up, a warm-up call, then a peak measurement on c's thread count and ISA and
 * rounds of one timed call and another peak measurement, as many as time_pair's rounds;
 * then the output is checked again. Returns 0, or -1 on a failure (said by run_peaks). */
static int time_against_peak(bench_state *s, bench_case *c)
{
    ta_status st = ta_set_num_threads(c->threads);
    if (st != TA_OK) return bench_lib_fail(c, "ta_set_num_threads", st);
    c->ref_out = NULL;
    int rc = 0;
    if (c->kind->setup(c) || c->kind->run(c)) rc = -1;
    const int slow = !s->cfg.quick && c->cold_s >= 0.25;
    const double start = bench_seconds_now();
    /* call n runs between peak measurements n and n + 1, and is set against the higher
     * of the two: a measurement that another guest cut short does not count */
    int n = 0;
    double before = 0.0;
    const char *why = bench_fma_peak(&before, ta_active_isa(), c->threads, 0.02);
    while (!rc && !why && more_rounds(s, n, slow, start)) {
        const double t0 = bench_seconds_now();
        if (c->kind->run(c)) rc = -1;
        const double t = bench_seconds_now() - t0;
        double after = 0.0;
        if (!rc && !(why = bench_fma_peak(&after, ta_active_isa(), c->threads, 0.02))) {
            const double rate = t > 0.0 ? c->flops / t * 1e-9 : NAN;
            const double peak = after > before ? after : before;
            s->times[n++] = peak > 0.0 ? rate / peak : NAN;
            before = after;
        }
    }
    if (why) {
        snprintf(c->error, sizeof c->error, "the FMA peak: %s", why);
        rc = -1;
    }
    if (!rc && check_case(c)) rc = -1;
    if (!rc && n > 0) {
        c->peak_fraction_alternating = bench_median(s->times, n);
        c->peak_rounds = n;
    }
    teardown(c);
    return rc;
}

/* Every compute case's fraction of the peak again, in alternation (time_against_peak). */
static int run_peaks(bench_state *s)
{
    int failed = 0;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        if (!peak_alternates(c)) continue;
        bench_progress(s, "%s against the FMA peak, alternating ...", c->name);
        if (time_against_peak(s, c)) {
            bench_progress_clear(s);
            fprintf(stderr, "tensorattn: error: bench case %s against the FMA peak: %s\n",
                    c->name, c->error);
            failed++;
        }
    }
    bench_progress_clear(s);
    return failed ? -1 : 0;
}

/* ------------------------------------------------------------ every case */

int bench_run_cases(bench_state *s)
{
    int nselected = 0, done = 0, failed = 0;
    for (int i = 0; i < s->ncases; i++) nselected += bench_selected(s, i);
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        if (!bench_selected(s, i)) continue;
        bench_progress(s, "[%d/%d] %s ...", ++done, nselected, c->name);
        c->max_rel_err = 0.0;
        c->max_abs_diff_ref = NAN;
        c->speedup_vs_reference = NAN;
        c->speedup_vs_torch = NAN;
        c->bandwidth_fraction = c->ratio_vs_causal = c->ratio_vs = c->ratio_alternating = NAN;
        c->ratio_rounds = 0;
        c->peak_fraction_alternating = NAN;
        c->peak_rounds = 0;
        c->extra_bytes = c->extra_bytes_cold = -1.0;
        if (c->skip_reason[0]) { /* decided when the case was built */
            c->status = "skipped";
            /* memcpy: gcc -O0 misreads snprintf between two fields as overlapping
             * (-Wrestrict); skip_reason is a terminated string shorter than error */
            memcpy(c->error, c->skip_reason, sizeof c->skip_reason);
            continue;
        }
        c->ref_out = s->kept_for == i ? &s->kept : NULL;
        c->status = "error"; /* until it succeeds */
        int r = time_case(s, c);
        if (r == 0) c->status = "ok";
        keep_reference_output(s, c);
        teardown(c);
        if (s->kept_for == i) { /* its twin has used it */
            ta_tensor_free(&s->kept);
            s->kept_for = -1;
            c->ref_out = NULL;
        }
        if (r < 0) {
            bench_progress_clear(s);
            fprintf(stderr, "tensorattn: error: bench case %s: %s\n", c->name, c->error);
            failed++;
        }
    }
    ta_tensor_free(&s->kept); /* a twin that was filtered out or failed before using it */
    s->kept_for = -1;
    failed += run_pairs(s) ? 1 : 0;
    failed += run_peaks(s) ? 1 : 0;
    ta_set_num_threads(s->cfg.threads);
    return failed ? -1 : 0;
}

/* The case named "<shape>_<path>" with c's path that ran, or NULL. */
static const bench_case *same_path_case(const bench_state *s, const bench_case *c,
                                        const char *shape)
{
    char name[sizeof c->name];
    snprintf(name, sizeof name, "%s_%s", shape, c->path);
    for (int i = 0; i < s->ncases; i++)
        if (bench_case_ok(&s->cases[i]) && !strcmp(s->cases[i].name, name)) return &s->cases[i];
    return NULL;
}

/* Denominators: the active ISA's peak on the case's thread count, and for a
 * memory-bound case the read bandwidth on it. A case with a twin is also set against
 * the reference path on the same shape, when both ran; a causal-mask-tensor case
 * against its opts.causal case. */
void bench_finish_ratios(bench_state *s)
{
    int above = 0;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        if (!bench_case_ok(c)) continue;
        c->peak_gflops = bench_known_peak(s, ta_active_isa(), c->threads);
        c->peak_fraction = c->peak_gflops > 0.0 ? c->gflops / c->peak_gflops : 0.0;
        above |= c->peak_fraction > 1.0;
        if (c->bytes > 0.0) {
            c->gbs = c->median_s > 0.0 ? c->bytes / c->median_s * 1e-9 : 0.0;
            c->read_gbs = bench_known_bandwidth(s, c->threads);
            if (c->read_gbs > 0.0) c->bandwidth_fraction = c->gbs / c->read_gbs;
            above |= c->bandwidth_fraction > 1.0;
            c->fits_llc = s->llc_bytes > 0 && c->bytes <= (double)s->llc_bytes;
        }
        if (c->twin >= 0) {
            const bench_case *ref = c->is_reference ? c : &s->cases[c->twin];
            if (bench_case_ok(ref) && c->median_s > 0.0)
                c->speedup_vs_reference = ref->median_s / c->median_s;
        }
        const bench_case *causal = c->vs_causal[0] ? same_path_case(s, c, c->vs_causal) : NULL;
        if (causal && causal->median_s > 0.0) c->ratio_vs_causal = c->median_s / causal->median_s;
        for (int j = 0; c->vs_case[0] && j < s->ncases; j++) {
            const bench_case *o = &s->cases[j];
            if (!strcmp(o->name, c->vs_case) && bench_case_ok(o) && o->median_s > 0.0)
                c->ratio_vs = c->median_s / (c->vs_scale * o->median_s);
        }
    }
    if (s->peak_spread > 0.1 || s->read_spread > 0.1 || above)
        fprintf(stderr,
                "bench: warning: the machine looks busy (an FMA peak moved by %.0f%% and the "
                "read bandwidth by %.0f%% between the start and the end of the run%s); read "
                "the ratios with care\n",
                100.0 * s->peak_spread, 100.0 * s->read_spread,
                above ? ", and a case ran above the peak or the read bandwidth" : "");
}
