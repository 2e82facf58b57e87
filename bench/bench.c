/* tensorattn bench: times GEMM and einsum on this machine and states each result as a
 * fraction of the FMA peak measured in the same run (bench/README.md has the method and
 * the JSON schema). Uses only the public header.
 *
 * A case is one row of a table: a name, its shape fields, a flop count, and four
 * functions -- setup (allocate and touch every buffer once), run (one call of the code
 * under test), check (compare sampled outputs with a float64 oracle written here, not
 * with the library), and an optional cleanup. New kinds of case (attention: fused vs
 * reference, masks) add a builder that appends rows; the harness does not change. */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"
#include "tensorattn.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_TENSORS 6
#define BENCH_MAX_CASES 64
#define BENCH_MAX_RUNS 10000 /* a cap on timed runs of tiny cases */
#define BENCH_SAMPLES 64     /* random output elements checked per call ... */
#define BENCH_RUN 4096       /* ... plus a run of consecutive ones, the first and the last */
#define BENCH_TOLERANCE 1e-4

/* ------------------------------------------------------------------ types */

typedef enum bench_shape { BENCH_SHAPE_GEMM, BENCH_SHAPE_ATTN } bench_shape;

typedef struct bench_config {
    int quick;
    const char *json_path;
    const char *filter;
    int list;
    int threads;          /* the bench thread count (--threads, else the library's) */
    int min_runs;         /* timed runs: at least min_runs and at least min_seconds */
    double min_seconds;
    int warmup_runs;
    double peak_seconds;  /* per FMA peak measurement */
} bench_config;

typedef struct bench_case bench_case;
struct bench_case {
    char name[64];
    const char *kind; /* "sgemm", "sgemm_batched", "einsum" */
    const char *path; /* the code path timed: "gemm", "einsum" */
    bench_shape shape;
    /* BENCH_SHAPE_GEMM: C[batch][M,N] = A[batch][M,K] op(B)[batch][K,N];
     * layout "NN" (B stored [K,N]) or "NT" (B stored [N,K], as K in Q K^T). */
    int64_t M, N, K, batch;
    const char *layout;
    /* BENCH_SHAPE_ATTN: batch, heads, query and key lengths, head dim; an einsum spec
     * whose letters map to (B, H, Lq, Lk, D) in the order given by `letters`. */
    int64_t B, H, Lq, Lk, D;
    const char *spec;
    const char *letters;
    double flops;     /* floating-point operations of one run */
    int threads;      /* threads the case runs on */
    double tolerance; /* largest accepted max_rel_err */

    int (*setup)(bench_case *c);
    int (*run)(bench_case *c);
    int (*check)(bench_case *c, double *max_rel_err);
    void (*cleanup)(bench_case *c); /* optional: frees what setup made beyond t[] */
    void *user;                     /* optional: a case kind's own state */

    /* Buffers: owned between setup and teardown (t[] are freed by the harness);
     * t[output] is the result, contiguous, filled with NaN by setup. */
    ta_tensor t[BENCH_MAX_TENSORS];
    int output;
    int64_t bsa, rsa, csa, bsb, rsb, csb; /* GEMM operand strides */

    /* Results. */
    const char *status; /* "ok", "check_failed", "error", or NULL (not run) */
    char error[512];
    double cold_s, median_s, min_s, gflops, peak_gflops, peak_fraction, max_rel_err;
    int runs;
};

typedef struct bench_peak {
    ta_isa isa;
    int threads;
    double gflops;
} bench_peak;

typedef struct bench_state {
    bench_config cfg;
    int progress_tty;
    int progress_open; /* a \r progress line is on the terminal */
    bench_peak peaks[16];
    int npeaks;
    double peak_spread; /* largest relative change of a peak between its two measurements */
    bench_case cases[BENCH_MAX_CASES];
    int ncases;
    double *times; /* BENCH_MAX_RUNS timings, allocated once */
} bench_state;

/* ------------------------------------------------------------ small tools */

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tensorattn: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see tensorattn bench --help)\n", stderr);
    va_end(ap);
    return 2;
}

/* Records why a case failed; returns -1 so callers can `return case_fail(...)`. */
static int case_fail(bench_case *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* A library call failed: keep its status and sentence. */
static int case_lib_fail(bench_case *c, const char *what, ta_status st)
{
    return case_fail(c, "%s failed: %s: %s", what, ta_status_name(st), ta_last_error());
}

/* xorshift64*: the sampled check positions, independent of the library's RNG. */
static uint64_t bench_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* The checked output elements: the first, the last, BENCH_SAMPLES random ones, then
 * BENCH_RUN consecutive ones from a random start (whole rows, so every column of a
 * tile and its edges is seen). Fixed seeds: a failure reproduces. */
typedef struct bench_sampler {
    uint64_t rng;
    int64_t total, run_start;
    int n;
} bench_sampler;

static bench_sampler sampler_start(int64_t total, uint64_t seed)
{
    bench_sampler s = {seed, total, 0, 0};
    if (total > BENCH_RUN)
        s.run_start = (int64_t)(bench_rand(&s.rng) % (uint64_t)(total - BENCH_RUN));
    return s;
}

/* The next element to check, or -1 when done. */
static int64_t sampler_next(bench_sampler *s)
{
    int n = s->n++;
    if (s->total <= 0) return -1;
    if (n == 0) return 0;
    if (n == 1) return s->total - 1;
    if (n < 2 + BENCH_SAMPLES) return (int64_t)(bench_rand(&s->rng) % (uint64_t)s->total);
    int64_t e = s->run_start + (n - 2 - BENCH_SAMPLES);
    return n < 2 + BENCH_SAMPLES + BENCH_RUN && e < s->total ? e : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---------------------------------------------------------------- progress */

static void progress(bench_state *s, const char *fmt, ...)
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

/* Clears a \r progress line so that stdout rows do not land on it. */
static void progress_clear(bench_state *s)
{
    if (s->progress_open) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        s->progress_open = 0;
    }
}

/* ------------------------------------------------------------ FMA peaks */

/* The active ISA's peak on `threads` threads, measured once and remembered. */
static int peak_for(bench_state *s, ta_isa isa, int threads, double *gflops)
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
    progress(s, "measuring the FMA peak: %s, %d thread%s ...", ta_isa_name(isa), threads,
             threads == 1 ? "" : "s");
    double g = 0.0;
    ta_status st = ta_measure_fma_peak(&g, isa, threads, s->cfg.peak_seconds);
    if (st != TA_OK || !(g > 0.0)) {
        progress_clear(s);
        fprintf(stderr, "tensorattn: error: bench: ta_measure_fma_peak(%s, %d threads): %s\n",
                ta_isa_name(isa), threads, st != TA_OK ? ta_last_error() : "no result");
        return -1;
    }
    s->peaks[s->npeaks++] = (bench_peak){isa, threads, g};
    *gflops = g;
    return 0;
}

static const ta_isa all_isas[] = {TA_ISA_SCALAR, TA_ISA_AVX2, TA_ISA_AVX512};
#define N_ISAS ((int)(sizeof all_isas / sizeof all_isas[0]))

static int measure_machine(bench_state *s)
{
    for (int i = 0; i < N_ISAS; i++) {
        if (!ta_cpu_supports(all_isas[i])) continue;
        double g;
        if (peak_for(s, all_isas[i], 1, &g) || peak_for(s, all_isas[i], s->cfg.threads, &g))
            return -1;
    }
    return 0;
}

/* The peak is what the hardware can do, and a measurement that shares the cores with
 * another process reads low (then fractions above 1 appear). So every peak is measured
 * again after the cases; the larger value is kept and the spread reported as a sign
 * of a busy machine. */
static int recheck_peaks(bench_state *s)
{
    for (int i = 0; i < s->npeaks; i++) {
        bench_peak *p = &s->peaks[i];
        progress(s, "measuring the FMA peak again: %s, %d thread%s ...", ta_isa_name(p->isa),
                 p->threads, p->threads == 1 ? "" : "s");
        double g = 0.0;
        ta_status st = ta_measure_fma_peak(&g, p->isa, p->threads, s->cfg.peak_seconds);
        if (st != TA_OK) {
            progress_clear(s);
            fprintf(stderr, "tensorattn: error: bench: ta_measure_fma_peak(%s, %d threads): %s\n",
                    ta_isa_name(p->isa), p->threads, ta_last_error());
            return -1;
        }
        double d = fabs(g - p->gflops) / fmax(g, p->gflops);
        if (d > s->peak_spread) s->peak_spread = d;
        if (g > p->gflops) p->gflops = g;
    }
    progress_clear(s);
    return 0;
}

static double known_peak(const bench_state *s, ta_isa isa, int threads)
{
    for (int i = 0; i < s->npeaks; i++)
        if (s->peaks[i].isa == isa && s->peaks[i].threads == threads) return s->peaks[i].gflops;
    return 0.0;
}

/* ------------------------------------------------------------ GEMM cases */

/* Fills a new [n0, n1, n2] tensor (n0 == 0: rank 2) with U[-1, 1) from `seed`; this
 * also touches every page, so no first-touch fault lands in a timed run. */
static int new_input(bench_case *c, ta_tensor *t, int64_t n0, int64_t n1, int64_t n2,
                     uint64_t seed)
{
    int64_t shape3[3] = {n0, n1, n2};
    ta_status st = n0 ? ta_tensor_empty(t, 3, shape3) : ta_tensor_empty(t, 2, shape3 + 1);
    if (st != TA_OK) return case_lib_fail(c, "ta_tensor_empty", st);
    st = ta_rand_uniform(t, -1.0f, 1.0f, seed);
    if (st != TA_OK) return case_lib_fail(c, "ta_rand_uniform", st);
    return 0;
}

/* Outputs start as NaN: an element the code under test forgets to write fails the
 * check instead of passing as a stale value. */
static int new_output(bench_case *c, ta_tensor *t, int ndim, const int64_t *shape)
{
    ta_status st = ta_tensor_full(t, ndim, shape, NAN);
    if (st != TA_OK) return case_lib_fail(c, "ta_tensor_full", st);
    return 0;
}

/* t[0] = A [batch, M, K]; t[1] = B [batch, K, N] (NN) or [batch, N, K] (NT);
 * t[2] = C [batch, M, N]. The plain sgemm case has batch 1 and uses ta_sgemm. */
static int gemm_setup(bench_case *c)
{
    int nt = strcmp(c->layout, "NT") == 0;
    if (new_input(c, &c->t[0], c->batch, c->M, c->K, 1)) return -1;
    if (new_input(c, &c->t[1], c->batch, nt ? c->N : c->K, nt ? c->K : c->N, 2)) return -1;
    int64_t cshape[3] = {c->batch, c->M, c->N};
    if (new_output(c, &c->t[2], 3, cshape)) return -1;
    c->bsa = c->M * c->K;
    c->rsa = c->K;
    c->csa = 1;
    c->bsb = c->K * c->N;
    c->rsb = nt ? 1 : c->N;
    c->csb = nt ? c->K : 1;
    return 0;
}

static int gemm_run(bench_case *c)
{
    float *C = c->t[2].data;
    const float *A = c->t[0].data, *B = c->t[1].data;
    ta_status st;
    if (strcmp(c->kind, "sgemm") == 0) {
        st = ta_sgemm(C, c->N, 1, A, c->rsa, c->csa, B, c->rsb, c->csb, c->M, c->N, c->K, 1.0f,
                      0.0f);
        if (st != TA_OK) return case_lib_fail(c, "ta_sgemm", st);
    } else {
        st = ta_sgemm_batched(C, c->M * c->N, c->N, 1, A, c->bsa, c->rsa, c->csa, B, c->bsb,
                              c->rsb, c->csb, c->batch, c->M, c->N, c->K, 1.0f, 0.0f);
        if (st != TA_OK) return case_lib_fail(c, "ta_sgemm_batched", st);
    }
    return 0;
}

/* The error of an element relative to sum_k |a_k b_k|: the scale on which float32
 * rounding of a dot product is bounded, so cancellation cannot fake a failure. */
static double rel_err(double got, double ref, double scale)
{
    double e = fabs(got - ref) / (scale > DBL_MIN ? scale : DBL_MIN);
    return e == e ? e : INFINITY; /* NaN (an unwritten element) fails */
}

static int gemm_check(bench_case *c, double *max_rel_err)
{
    const float *A = c->t[0].data, *B = c->t[1].data, *C = c->t[2].data;
    int64_t per = c->M * c->N;
    bench_sampler smp = sampler_start(c->batch * per, 0x9e3779b97f4a7c15ULL);
    double worst = 0.0;
    for (int64_t e; (e = sampler_next(&smp)) >= 0;) {
        int64_t p = e / per, i = e % per / c->N, j = e % c->N;
        const float *a = A + p * c->bsa + i * c->rsa, *b = B + p * c->bsb + j * c->csb;
        double ref = 0.0, scale = 0.0;
        for (int64_t k = 0; k < c->K; k++) {
            double x = (double)a[k * c->csa] * (double)b[k * c->rsb];
            ref += x;
            scale += fabs(x);
        }
        double err = rel_err(C[e], ref, scale);
        if (err > worst) worst = err;
    }
    *max_rel_err = worst;
    return 0;
}

static void add_case(bench_state *s, const bench_case *c)
{
    if (s->ncases < BENCH_MAX_CASES)
        s->cases[s->ncases++] = *c;
    else /* a programming error, but say so rather than lose a row quietly */
        fprintf(stderr, "bench: warning: the case table is full; %s is left out\n", c->name);
}

static void add_gemm(bench_state *s, const char *name, const char *kind, int64_t batch,
                     int64_t M, int64_t N, int64_t K, const char *layout)
{
    bench_case c = {.kind = kind, .path = "gemm", .shape = BENCH_SHAPE_GEMM, .M = M, .N = N,
                    .K = K, .batch = batch, .layout = layout,
                    .flops = 2.0 * (double)batch * (double)M * (double)N * (double)K,
                    .threads = s->cfg.threads, .tolerance = BENCH_TOLERANCE,
                    .output = 2, .setup = gemm_setup, .run = gemm_run, .check = gemm_check};
    snprintf(c.name, sizeof c.name, "%s", name);
    add_case(s, &c);
}

/* ---------------------------------------------------------- einsum cases */

/* The einsum spec split in three letter strings; 0 if it has another form (the
 * oracle below handles two operands, explicit output, no ellipsis or repeats). */
static int split_spec(const char *spec, char a[16], char b[16], char out[16])
{
    char *parts[3] = {a, b, out};
    int part = 0, n = 0;
    for (const char *p = spec; *p; p++) {
        if (*p == ',' && part == 0) {
            parts[part++][n] = '\0', n = 0;
        } else if (p[0] == '-' && p[1] == '>' && part == 1) {
            parts[part++][n] = '\0', n = 0, p++;
        } else if (((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) && n < 15) {
            parts[part][n++] = *p;
        } else {
            return 0;
        }
    }
    parts[part][n] = '\0';
    return part == 2 && a[0] && b[0] && out[0];
}

/* Size of an einsum letter from the case's (B, H, Lq, Lk, D) and its letter map. */
static int64_t letter_size(const bench_case *c, char letter)
{
    const char *at = strchr(c->letters, letter);
    if (!at || !letter) return -1;
    const int64_t dims[5] = {c->B, c->H, c->Lq, c->Lk, c->D};
    return dims[at - c->letters];
}

static int letters_shape(bench_case *c, const char *letters, int64_t *shape)
{
    int n = (int)strlen(letters);
    if (n > TA_MAX_DIMS)
        return case_fail(c, "bench: einsum operand '%s' has too many dims", letters);
    for (int i = 0; i < n; i++)
        if ((shape[i] = letter_size(c, letters[i])) < 0)
            return case_fail(c, "bench: einsum letter '%c' of %s has no size", letters[i], c->spec);
    return 0;
}

/* t[0], t[1]: the operands, U[-1, 1); t[2]: the output, of the shape the spec names. */
static int einsum_setup(bench_case *c)
{
    char la[16], lb[16], lo[16];
    if (!split_spec(c->spec, la, lb, lo))
        return case_fail(c, "bench: cannot read einsum spec '%s'", c->spec);
    int64_t shape[TA_MAX_DIMS];
    const char *ops[2] = {la, lb};
    for (int i = 0; i < 2; i++) {
        if (letters_shape(c, ops[i], shape)) return -1;
        ta_status st = ta_tensor_empty(&c->t[i], (int)strlen(ops[i]), shape);
        if (st != TA_OK) return case_lib_fail(c, "ta_tensor_empty", st);
        st = ta_rand_uniform(&c->t[i], -1.0f, 1.0f, (uint64_t)i + 1);
        if (st != TA_OK) return case_lib_fail(c, "ta_rand_uniform", st);
    }
    if (letters_shape(c, lo, shape)) return -1;
    return new_output(c, &c->t[2], (int)strlen(lo), shape);
}

static int einsum_run(bench_case *c)
{
    ta_status st = ta_einsum(c->spec, &c->t[2], &c->t[0], &c->t[1]);
    if (st != TA_OK) return case_lib_fail(c, "ta_einsum", st);
    return 0;
}

/* One output element of a two-operand einsum in float64, straight from the
 * definition: sum over the letters absent from the output of a[...] * b[...]. */
static void einsum_element(const bench_case *c, const char *la, const char *lb, const char *lo,
                           int64_t val[128], double *ref, double *scale)
{
    char both[32], sum[16];
    int64_t size[16];
    int ns = 0;
    snprintf(both, sizeof both, "%s%s", la, lb);
    for (const char *p = both; *p; p++)
        if (!strchr(lo, *p) && !memchr(sum, *p, (size_t)ns)) {
            sum[ns] = *p;
            size[ns++] = letter_size(c, *p);
            val[(unsigned char)*p] = 0;
        }
    double acc = 0.0, abs_acc = 0.0;
    for (;;) {
        int64_t ia[TA_MAX_DIMS], ib[TA_MAX_DIMS];
        for (int i = 0; la[i]; i++) ia[i] = val[(unsigned char)la[i]];
        for (int i = 0; lb[i]; i++) ib[i] = val[(unsigned char)lb[i]];
        double x = (double)*ta_tensor_at(&c->t[0], ia) * (double)*ta_tensor_at(&c->t[1], ib);
        acc += x;
        abs_acc += fabs(x);
        int d = ns - 1; /* odometer over the summed letters */
        while (d >= 0 && ++val[(unsigned char)sum[d]] == size[d]) val[(unsigned char)sum[d--]] = 0;
        if (d < 0) break;
    }
    *ref = acc;
    *scale = abs_acc;
}

static int einsum_check(bench_case *c, double *max_rel_err)
{
    char la[16], lb[16], lo[16];
    if (!split_spec(c->spec, la, lb, lo))
        return case_fail(c, "bench: cannot read einsum spec '%s'", c->spec);
    const ta_tensor *out = &c->t[2];
    bench_sampler smp = sampler_start(ta_tensor_numel(out), 0x2545f4914f6cdd1dULL);
    double worst = 0.0;
    for (int64_t e; (e = sampler_next(&smp)) >= 0;) {
        int64_t idx[TA_MAX_DIMS], val[128] = {0};
        for (int d = out->ndim - 1; d >= 0; d--) { /* unravel in row-major order */
            idx[d] = e % out->shape[d];
            e /= out->shape[d];
            val[(unsigned char)lo[d]] = idx[d];
        }
        double ref, scale;
        einsum_element(c, la, lb, lo, val, &ref, &scale);
        double err = rel_err(*ta_tensor_at(out, idx), ref, scale);
        if (err > worst) worst = err;
    }
    *max_rel_err = worst;
    return 0;
}

/* letters: the spec's letters for (B, H, Lq, Lk, D), in that order. */
static void add_einsum(bench_state *s, const char *name, const char *spec, const char *letters,
                       int64_t B, int64_t H, int64_t L, int64_t D)
{
    bench_case c = {.kind = "einsum", .path = "einsum", .shape = BENCH_SHAPE_ATTN, .B = B,
                    .H = H, .Lq = L, .Lk = L, .D = D, .spec = spec, .letters = letters,
                    /* one multiply-add per (b, h, i, j, d) */
                    .flops = 2.0 * (double)B * (double)H * (double)L * (double)L * (double)D,
                    .threads = s->cfg.threads, .tolerance = BENCH_TOLERANCE,
                    .output = 2, .setup = einsum_setup, .run = einsum_run, .check = einsum_check};
    snprintf(c.name, sizeof c.name, "%s", name);
    add_case(s, &c);
}

/* ------------------------------------------------------------ case table */

static void build_cases(bench_state *s)
{
    int q = s->cfg.quick;
    /* Square SGEMM: the engine's own yardstick. */
    add_gemm(s, "sgemm_256", "sgemm", 1, 256, 256, 256, "NN");
    add_gemm(s, "sgemm_512", "sgemm", 1, 512, 512, 512, "NN");
    add_gemm(s, "sgemm_1024", "sgemm", 1, 1024, 1024, 1024, "NN");
    if (!q) add_gemm(s, "sgemm_2048", "sgemm", 1, 2048, 2048, 2048, "NN");
    /* The seed's attention GEMMs: B*H = 256 heads of Q K^T and P V. */
    int64_t L = q ? 128 : 512, D = 64, B = 32, H = 8;
    add_gemm(s, "sgemm_batched_qk", "sgemm_batched", B * H, L, L, D, "NT");
    add_gemm(s, "sgemm_batched_pv", "sgemm_batched", B * H, L, D, L, "NN");
    /* The seed's four einsums; the last two with Q, K, V laid out [N, L, H, D]. */
    add_einsum(s, "einsum_qk_bhid", "bhid,bhjd->bhij", "bhijd", B, H, L, D);
    add_einsum(s, "einsum_pv_bhij", "bhij,bhjd->bhid", "bhijd", B, H, L, D);
    add_einsum(s, "einsum_qk_nqhd", "nqhd,nkhd->nhqk", "nhqkd", B, H, L, D);
    add_einsum(s, "einsum_pv_nhql", "nhql,nlhd->nqhd", "nhqld", B, H, L, D);
}

/* ---------------------------------------------------------------- harness */

static void teardown(bench_case *c)
{
    if (c->cleanup) c->cleanup(c);
    for (int i = 0; i < BENCH_MAX_TENSORS; i++) ta_tensor_free(&c->t[i]);
}

/* Outputs start as NaN, so a non-finite element after the first call is one the code
 * under test never wrote (a missed tile or tail); the scan covers every element, where
 * the oracle covers a sample. */
static int64_t first_nonfinite(const ta_tensor *t)
{
    const float *x = t->data;
    int64_t n = ta_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

static int check_case(bench_case *c)
{
    int64_t bad = first_nonfinite(&c->t[c->output]);
    if (bad >= 0) {
        c->status = "check_failed";
        c->max_rel_err = INFINITY;
        return case_fail(c, "result check failed: output element %lld (row-major) is %g",
                         (long long)bad, (double)((const float *)c->t[c->output].data)[bad]);
    }
    double err = INFINITY;
    if (c->check(c, &err)) return -1;
    if (err > c->max_rel_err) c->max_rel_err = err;
    if (!(err <= c->tolerance)) {
        c->status = "check_failed";
        return case_fail(c, "result check failed: max relative error %.3g > %.3g", err,
                         c->tolerance);
    }
    return 0;
}

/* setup, cold call, check, warm-up, timed runs, check again. */
static int time_case(bench_state *s, bench_case *c)
{
    ta_status st = ta_set_num_threads(c->threads);
    if (st != TA_OK) return case_lib_fail(c, "ta_set_num_threads", st);
    if (c->setup(c)) return -1;
    double t0 = bench_now();
    if (c->run(c)) return -1;
    c->cold_s = bench_now() - t0;
    if (check_case(c)) return -1;
    for (int i = 0; i < s->cfg.warmup_runs; i++)
        if (c->run(c)) return -1;
    double start = bench_now();
    int n = 0;
    while (n < BENCH_MAX_RUNS &&
           (n < s->cfg.min_runs || bench_now() - start < s->cfg.min_seconds)) {
        t0 = bench_now();
        if (c->run(c)) return -1;
        s->times[n++] = bench_now() - t0;
    }
    /* The last output must be as right as the first (races, stale workspaces). */
    if (check_case(c)) return -1;
    c->runs = n;
    c->median_s = median_of(s->times, n); /* sorts: times[0] is the minimum */
    c->min_s = s->times[0];
    c->gflops = c->median_s > 0.0 ? c->flops / c->median_s * 1e-9 : 0.0;
    /* The ratio itself is set after the peaks are measured again (finish_ratios). */
    double peak;
    if (peak_for(s, ta_active_isa(), c->threads, &peak))
        return case_fail(c, "could not measure the FMA peak on %d threads", c->threads);
    return 0;
}

/* Denominator: the active ISA's peak on the case's thread count. */
static void finish_ratios(bench_state *s)
{
    int above = 0;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        if (!c->status || strcmp(c->status, "ok") != 0) continue;
        c->peak_gflops = known_peak(s, ta_active_isa(), c->threads);
        c->peak_fraction = c->peak_gflops > 0.0 ? c->gflops / c->peak_gflops : 0.0;
        above |= c->peak_fraction > 1.0;
    }
    if (s->peak_spread > 0.1 || above)
        fprintf(stderr,
                "bench: warning: the machine looks busy (an FMA peak moved by %.0f%% between "
                "the start and the end of the run%s); read the ratios with care\n",
                100.0 * s->peak_spread, above ? ", and a case ran above the peak" : "");
}

static void shape_str(const bench_case *c, char *buf, size_t n)
{
    if (c->shape == BENCH_SHAPE_GEMM && c->batch == 1)
        snprintf(buf, n, "%lldx%lldx%lld", (long long)c->M, (long long)c->N, (long long)c->K);
    else if (c->shape == BENCH_SHAPE_GEMM)
        snprintf(buf, n, "%lld*%lldx%lldx%lld %s", (long long)c->batch, (long long)c->M,
                 (long long)c->N, (long long)c->K, c->layout);
    else
        snprintf(buf, n, "%s B%lld H%lld L%lld D%lld", c->spec, (long long)c->B,
                 (long long)c->H, (long long)c->Lq, (long long)c->D);
}

static void print_header(void)
{
    printf("%-18s %-34s %3s %5s %10s %10s %10s %9s %6s %9s\n", "case", "shape (MxNxK)", "thr",
           "runs", "median ms", "min ms", "cold ms", "GFLOP/s", "%peak", "rel err");
}

static void print_row(const bench_case *c)
{
    char shape[96];
    shape_str(c, shape, sizeof shape);
    if (strcmp(c->status, "ok") == 0)
        printf("%-18s %-34s %3d %5d %10.3f %10.3f %10.3f %9.1f %5.1f%% %9.2e\n", c->name, shape,
               c->threads, c->runs, c->median_s * 1e3, c->min_s * 1e3, c->cold_s * 1e3,
               c->gflops, 100.0 * c->peak_fraction, c->max_rel_err);
    else
        printf("%-18s %-34s %3d  FAILED (%s): %s\n", c->name, shape, c->threads, c->status,
               c->error);
    fflush(stdout);
}

static void print_table(const bench_state *s)
{
    print_header();
    for (int i = 0; i < s->ncases; i++)
        if (s->cases[i].status) print_row(&s->cases[i]);
    fflush(stdout);
}

static void print_machine(const bench_state *s)
{
    ta_isa act = ta_active_isa();
    printf("tensorattn %s bench%s\n", ta_version(), s->cfg.quick ? " (quick)" : "");
    printf("machine: isa %s, %d thread%s\n", ta_isa_name(act), s->cfg.threads,
           s->cfg.threads == 1 ? "" : "s");
    printf("FMA peak (GFLOP/s, float32, measured now):\n");
    for (int i = 0; i < N_ISAS; i++) {
        if (!ta_cpu_supports(all_isas[i])) continue;
        printf("  %-8s %9.1f on 1 thread", ta_isa_name(all_isas[i]),
               known_peak(s, all_isas[i], 1));
        if (s->cfg.threads != 1)
            printf(", %9.1f on %d threads", known_peak(s, all_isas[i], s->cfg.threads),
                   s->cfg.threads);
        printf("%s\n", all_isas[i] == act ? "   <- ratios use this" : "");
    }
    printf("  (best of two measurements, before and after the cases; they differed by up to "
           "%.0f%%)\n\n", 100.0 * s->peak_spread);
    fflush(stdout);
}

/* ---------------------------------------------------------------- JSON */

static cJSON *case_json(const bench_case *c)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "kind", c->kind);
    cJSON_AddStringToObject(o, "path", c->path);
    if (c->shape == BENCH_SHAPE_GEMM) {
        cJSON_AddNumberToObject(o, "M", (double)c->M);
        cJSON_AddNumberToObject(o, "N", (double)c->N);
        cJSON_AddNumberToObject(o, "K", (double)c->K);
        cJSON_AddNumberToObject(o, "batch", (double)c->batch);
        cJSON_AddStringToObject(o, "layout", c->layout);
    } else {
        cJSON_AddNumberToObject(o, "B", (double)c->B);
        cJSON_AddNumberToObject(o, "H", (double)c->H);
        cJSON_AddNumberToObject(o, "Lq", (double)c->Lq);
        cJSON_AddNumberToObject(o, "Lk", (double)c->Lk);
        cJSON_AddNumberToObject(o, "D", (double)c->D);
        cJSON_AddStringToObject(o, "spec", c->spec);
    }
    cJSON_AddNumberToObject(o, "threads", c->threads);
    cJSON_AddNumberToObject(o, "flops", c->flops);
    cJSON_AddStringToObject(o, "status", c->status);
    int ok = strcmp(c->status, "ok") == 0;
    if (!ok) cJSON_AddStringToObject(o, "error", c->error);
    /* Unmeasured numbers are null, never a made-up 0. */
#define NUM(key, v, have) \
    ((have) ? cJSON_AddNumberToObject(o, key, v) : cJSON_AddNullToObject(o, key))
    NUM("median_s", c->median_s, ok);
    NUM("min_s", c->min_s, ok);
    NUM("cold_s", c->cold_s, c->cold_s > 0.0);
    NUM("runs", (double)c->runs, ok);
    NUM("gflops", c->gflops, ok);
    NUM("peak_gflops", c->peak_gflops, ok);
    NUM("peak_fraction", c->peak_fraction, ok);
    NUM("max_rel_err", c->max_rel_err, isfinite(c->max_rel_err) && c->max_rel_err >= 0.0);
    NUM("tolerance", c->tolerance, 1);
#undef NUM
    return o;
}

static cJSON *report_json(const bench_state *s)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    ta_isa act = ta_active_isa();
    char when[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "tensorattn", ta_version());
    cJSON_AddStringToObject(root, "created", when);
    cJSON_AddBoolToObject(root, "quick", s->cfg.quick);
    cJSON *m = cJSON_AddObjectToObject(root, "machine");
    cJSON *cases = cJSON_AddArrayToObject(root, "cases");
    if (!m || !cases) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(m, "isa", ta_isa_name(act));
    cJSON_AddNumberToObject(m, "threads", s->cfg.threads);
    cJSON_AddNumberToObject(m, "fma_peak_gflops", known_peak(s, act, s->cfg.threads));
    cJSON_AddNumberToObject(m, "fma_peak_gflops_1thread", known_peak(s, act, 1));
    cJSON_AddNumberToObject(m, "peak_spread", s->peak_spread);
    cJSON *peaks = cJSON_AddObjectToObject(m, "peaks");
    cJSON *peaks1 = cJSON_AddObjectToObject(m, "peaks_1thread");
    for (int i = 0; i < N_ISAS && peaks && peaks1; i++) {
        if (!ta_cpu_supports(all_isas[i])) continue;
        cJSON_AddNumberToObject(peaks, ta_isa_name(all_isas[i]),
                                known_peak(s, all_isas[i], s->cfg.threads));
        cJSON_AddNumberToObject(peaks1, ta_isa_name(all_isas[i]), known_peak(s, all_isas[i], 1));
    }
    for (int i = 0; i < s->ncases; i++) {
        if (!s->cases[i].status) continue; /* filtered out */
        cJSON *c = case_json(&s->cases[i]);
        if (!c) {
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddItemToArray(cases, c);
    }
    return root;
}

/* Writes the report whole: a temporary file beside `path`, then rename, so a reader
 * never sees half a file and a failed run leaves the old one in place. */
static int write_json(const bench_state *s, const char *path)
{
    errno = 0;
    cJSON *root = report_json(s);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "tensorattn: error: bench: out of memory building the JSON report\n");
        return -1;
    }
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    int rc = -1, fd = -1;
    FILE *f = NULL;
    if (!tmp) goto done;
    snprintf(tmp, n, "%s.tmpXXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0) goto done;
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0 || !(f = fdopen(fd, "w"))) goto done;
    fd = -1;
    int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF;
    bad |= fclose(f) != 0;
    f = NULL;
    if (bad || rename(tmp, path) != 0) goto done;
    rc = 0;
done:
    if (rc) {
        fprintf(stderr, "tensorattn: error: bench: cannot write %s: %s\n", path,
                errno ? strerror(errno) : "out of memory");
        if (f) fclose(f);
        if (fd >= 0) close(fd);
        if (tmp && tmp[0]) unlink(tmp);
    }
    free(tmp);
    cJSON_free(text);
    return rc;
}

/* ---------------------------------------------------------------- command line */

static void print_help(void)
{
    printf("usage: tensorattn bench [--quick] [--json FILE] [--threads N] [--filter SUBSTRING]\n"
           "                        [--list]\n"
           "\n"
           "Measures the float32 FMA peak of this machine for every ISA it supports, then\n"
           "times SGEMM (square 256..2048 and the seed's batched attention shapes) and the\n"
           "seed's four einsums (B=32 H=8 L=512 D=64). Each case is checked against a float64\n"
           "oracle before it is timed, warmed up, and run >= 5 times and >= 0.5 s; the table\n"
           "gives the median, the minimum, the first (cold) call, GFLOP/s and the fraction of\n"
           "the active ISA's measured peak on the case's thread count.\n"
           "\n"
           "  --quick            2 timed runs, smaller sizes (no 2048, L=128)\n"
           "  --json FILE        also write the results as JSON (schema: bench/README.md)\n"
           "  --threads N        threads for the library and the peak (default: all cores)\n"
           "  --filter SUBSTRING run only the cases whose name contains SUBSTRING\n"
           "  --list             print the case names and exit\n"
           "  --help             this text\n"
           "\n"
           "Exit status: 0 success, 1 a case failed (error or result check) or the JSON\n"
           "could not be written, 2 bad command line. Progress goes to stderr.\n");
}

/* Returns 0 to go on, 2 on a usage error, -1 when --help was printed. Options that
 * take a value accept "--opt VALUE" and "--opt=VALUE". */
static int parse_args(bench_config *cfg, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char key[32];
        const char *a = argv[i], *eq = strchr(a, '='), *val = NULL;
        size_t key_len = eq && a[0] == '-' ? (size_t)(eq - a) : strlen(a);
        if (key_len >= sizeof key) return usage_error("unknown option '%s' for bench", a);
        memcpy(key, a, key_len);
        key[key_len] = '\0';
        int takes = !strcmp(key, "--json") || !strcmp(key, "--threads") || !strcmp(key, "--filter");
        if (takes && eq && a[0] == '-') val = eq + 1;
        else if (takes && i + 1 < argc) val = argv[++i];
        else if (takes) return usage_error("%s needs a value", key);
        else if (key_len != strlen(a)) return usage_error("%s takes no value", key);

        if (!strcmp(key, "--help") || !strcmp(key, "-h")) {
            print_help();
            return -1;
        } else if (!strcmp(key, "--quick")) {
            cfg->quick = 1;
        } else if (!strcmp(key, "--list")) {
            cfg->list = 1;
        } else if (!strcmp(key, "--json")) {
            if (!*val) return usage_error("--json needs a file name");
            cfg->json_path = val;
        } else if (!strcmp(key, "--filter")) {
            cfg->filter = val;
        } else if (!strcmp(key, "--threads")) {
            char *end;
            errno = 0;
            long n = strtol(val, &end, 10);
            if (errno || end == val || *end || n < 1 || n > 4096)
                return usage_error("--threads must be an integer in [1, 4096], got '%s'", val);
            cfg->threads = (int)n;
        } else {
            return usage_error("unknown option '%s' for bench", a);
        }
    }
    return 0;
}

static int run_cases(bench_state *s)
{
    int selected = 0, done = 0, failed = 0;
    for (int i = 0; i < s->ncases; i++)
        selected += !s->cfg.filter || strstr(s->cases[i].name, s->cfg.filter) != NULL;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        if (s->cfg.filter && !strstr(c->name, s->cfg.filter)) continue;
        progress(s, "[%d/%d] %s ...", ++done, selected, c->name);
        c->max_rel_err = 0.0;
        c->status = "error"; /* until it succeeds */
        if (time_case(s, c) == 0) c->status = "ok";
        teardown(c);
        if (strcmp(c->status, "ok") != 0) {
            progress_clear(s);
            fprintf(stderr, "tensorattn: error: bench case %s: %s\n", c->name, c->error);
            failed++;
        }
    }
    ta_set_num_threads(s->cfg.threads);
    return failed ? -1 : 0;
}

int ta_bench_main(int argc, char **argv)
{
    bench_state *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "tensorattn: error: bench: out of memory\n");
        return 1;
    }
    int rc = parse_args(&s->cfg, argc, argv);
    if (rc) {
        free(s);
        return rc < 0 ? 0 : rc;
    }
    bench_config *cfg = &s->cfg;
    if (cfg->threads && ta_set_num_threads(cfg->threads) != TA_OK) {
        fprintf(stderr, "tensorattn: error: %s\n", ta_last_error());
        free(s);
        return 2;
    }
    cfg->threads = ta_get_num_threads();
    cfg->min_runs = cfg->quick ? 2 : 5;
    cfg->min_seconds = cfg->quick ? 0.0 : 0.5;
    cfg->warmup_runs = cfg->quick ? 1 : 2;
    cfg->peak_seconds = cfg->quick ? 0.1 : 0.3;
    build_cases(s);
    if (cfg->list) {
        for (int i = 0; i < s->ncases; i++) printf("%s\n", s->cases[i].name);
        free(s);
        return 0;
    }
    int any = 0;
    for (int i = 0; i < s->ncases && !any; i++)
        any = !cfg->filter || strstr(s->cases[i].name, cfg->filter) != NULL;
    if (!any) {
        rc = usage_error("--filter '%s' matches no case name",
                         cfg->filter);
        free(s);
        return rc;
    }
    s->progress_tty = isatty(fileno(stderr));
    s->times = malloc(BENCH_MAX_RUNS * sizeof *s->times);
    if (!s->times) {
        fprintf(stderr, "tensorattn: error: bench: out of memory\n");
        free(s);
        return 1;
    }
    rc = 0;
    /* The table is printed at the end: its ratios need the peaks measured after the
     * cases too. The progress line on stderr shows the way there. */
    if (measure_machine(s)) {
        rc = 1;
    } else {
        if (run_cases(s)) rc = 1;
        if (recheck_peaks(s)) rc = 1;
        finish_ratios(s);
        print_machine(s);
        print_table(s);
        if (cfg->json_path && write_json(s, cfg->json_path)) rc = 1;
    }
    progress_clear(s);
    free(s->times);
    free(s);
    return rc;
}
