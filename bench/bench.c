/* tensorattn bench: times GEMM, einsum and scaled dot-product attention (fused and
 * reference paths) on this machine and states each result as a fraction of the FMA peak
 * measured in the same run, and each fused attention case against the reference path
 * on the same inputs (bench/README.md has the method and the JSON schema). Uses only
 * the public header.
 *
 * A case is one row of a table: a name, its shape fields, a flop count, and four
 * functions -- setup (allocate and touch every buffer once), run (one call of the code
 * under test), check (compare sampled outputs with a float64 oracle written here, not
 * with the library), and an optional cleanup. A new kind of case adds a builder that
 * appends rows; the harness does not change. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */

#include "bench.h"
#include "peak.h"
#include "tensorattn.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_TENSORS 10
#define BENCH_MAX_CASES 96
#define BENCH_MAX_RUNS 10000 /* a cap on timed runs of tiny cases */
#define BENCH_SAMPLES 64     /* random output elements checked per call ... */
#define BENCH_RUN 4096       /* ... plus a run of consecutive ones, the first and the last */
#define BENCH_TOLERANCE 1e-4

/* ------------------------------------------------------------------ types */

typedef enum bench_shape { BENCH_SHAPE_GEMM, BENCH_SHAPE_ATTN, BENCH_SHAPE_SDPA } bench_shape;

typedef struct bench_config {
    int quick;
    const char *json_path;
    const char *filter;
    int list;
    int peers;            /* --peers: time the seed's PyTorch code on the seed shapes */
    int threads;          /* the bench thread count (--threads, else the library's) */
    int min_runs;         /* timed runs: at least min_runs and at least min_seconds */
    double min_seconds;
    int warmup_runs;
    double peak_seconds;  /* per FMA peak measurement */
} bench_config;

typedef struct bench_case bench_case;
struct bench_case {
    char name[64];
    const char *kind; /* "sgemm", "sgemm_batched", "einsum", "sdpa" */
    const char *path; /* the code path timed: "gemm", "einsum", "fused", "reference" */
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
    /* BENCH_SHAPE_SDPA: Q [B,H,Lq,D], K and V [B,Hkv,Lk,D], O [B,H,Lq,D]; the causal
     * alignment, the ta_sdpa path, the unmasked (query, key) pairs, and the index of
     * the same shape's case on the other path (-1: none). */
    int64_t Hkv;
    ta_causal causal;
    ta_sdpa_path sdpa_path;
    double pairs;
    int pair;
    const ta_tensor *ref_out; /* the reference path's output on the same inputs, or NULL */
    char skip_reason[160];    /* non-empty: not run, status "skipped" */
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

    ta_status last_status; /* of the last library call that failed (TA_EUNSUPPORTED:
                              the path is not built: status "unavailable") */

    /* Results. */
    const char *status; /* "ok", "check_failed", "error", "unavailable", "skipped", or
                           NULL (filtered out) */
    char error[512];
    double cold_s, median_s, min_s, gflops, peak_gflops, peak_fraction, max_rel_err;
    int runs;
    double max_abs_diff_ref;     /* sdpa fused: max |O - O_reference| (NaN: not compared) */
    double speedup_vs_reference; /* sdpa: reference median / this median (NaN: unknown) */
    /* Library memory beyond the live buffers when the call started: the peak during a
     * timed call (largest over the timed runs) and during the cold call; -1: unknown. */
    double extra_bytes, extra_bytes_cold;
    double speedup_vs_torch; /* sdpa: the torch peer's median / this median (NaN: unknown) */
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
    /* A reference sdpa output kept for its fused twin, which runs next on the same
     * inputs (kept_for: that case's index, -1: none). */
    ta_tensor kept;
    int kept_for;
    /* --peers: what the torch peer reported (JSON lines, parsed), or why it did not run. */
    struct {
        const char *status; /* NULL (not asked), "ok", "skipped" */
        char reason[512];
        char command[4096];
        cJSON *rows; /* an array of the peer's JSON objects */
    } torch;
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
    c->last_status = st;
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

/* ------------------------------------------------------ counting allocator */

/* extra_bytes: how much memory a call takes beyond its inputs and outputs. The bench
 * installs this hook (ta_set_allocator) once, first thing in ta_bench_main, before the
 * library has allocated anything, and never removes it: a block must be released by
 * the hook that allocated it, and a library may keep a workspace alive between calls.
 * It allocates as the default hook does (aligned_alloc, huge pages advised from 2 MiB
 * up; ta_alloc advises only for its own default), so timings are unchanged; and it
 * tracks the bytes outstanding and their high-water mark. The hook may be called from
 * several threads, hence the mutex (a handful of calls per library call: no cost). A
 * block the hook did not allocate (one made before it was installed) is released with
 * free(), as the default would, and not counted. */
#define BENCH_HUGE ((size_t)2 << 20)

typedef struct bench_block {
    void *ptr;
    size_t bytes;
} bench_block;

static struct {
    pthread_mutex_t lock;
    bench_block *live; /* the blocks outstanding, in no order */
    size_t nlive, cap;
    size_t current, peak;
    int lost; /* the table could not grow: counts are unknown from then on */
} bench_mem = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, 0, 0};

static void *counting_alloc(size_t bytes, size_t alignment, void *user)
{
    (void)user;
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (rounded < bytes) return NULL;
    if (!rounded) rounded = alignment;
    void *p = aligned_alloc(alignment, rounded);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= BENCH_HUGE) madvise(p, rounded, MADV_HUGEPAGE);
#endif
    pthread_mutex_lock(&bench_mem.lock);
    if (bench_mem.nlive == bench_mem.cap) {
        size_t cap = bench_mem.cap ? 2 * bench_mem.cap : 256;
        bench_block *grown = realloc(bench_mem.live, cap * sizeof *grown);
        if (grown) {
            bench_mem.live = grown;
            bench_mem.cap = cap;
        }
    }
    if (bench_mem.nlive < bench_mem.cap) {
        bench_mem.live[bench_mem.nlive++] = (bench_block){p, rounded};
        bench_mem.current += rounded;
        if (bench_mem.current > bench_mem.peak) bench_mem.peak = bench_mem.current;
    } else {
        bench_mem.lost = 1;
    }
    pthread_mutex_unlock(&bench_mem.lock);
    return p;
}

static void counting_free(void *ptr, void *user)
{
    (void)user;
    pthread_mutex_lock(&bench_mem.lock);
    for (size_t i = bench_mem.nlive; i-- > 0;) /* the newest blocks go first, mostly */
        if (bench_mem.live[i].ptr == ptr) {
            bench_mem.current -= bench_mem.live[i].bytes;
            bench_mem.live[i] = bench_mem.live[--bench_mem.nlive];
            break;
        }
    pthread_mutex_unlock(&bench_mem.lock);
    free(ptr);
}

/* Starts a measurement: returns the bytes outstanding now and resets the peak to it. */
static size_t mem_mark(void)
{
    pthread_mutex_lock(&bench_mem.lock);
    size_t now = bench_mem.current;
    bench_mem.peak = now;
    pthread_mutex_unlock(&bench_mem.lock);
    return now;
}

/* The peak outstanding bytes since mem_mark() returned `base`, above base; -1 if the
 * counts are unknown. */
static double mem_extra_since(size_t base)
{
    pthread_mutex_lock(&bench_mem.lock);
    double extra = bench_mem.lost ? -1.0 : (double)(bench_mem.peak - base);
    pthread_mutex_unlock(&bench_mem.lock);
    return extra;
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
    const char *why = bench_fma_peak(&g, isa, threads, s->cfg.peak_seconds);
    if (why || !(g > 0.0)) {
        progress_clear(s);
        fprintf(stderr, "tensorattn: error: bench: FMA peak (%s, %d threads): %s\n",
                ta_isa_name(isa), threads, why ? why : "no result");
        return -1;
    }
    s->peaks[s->npeaks++] = (bench_peak){isa, threads, g};
    *gflops = g;
    return 0;
}

#define N_ISAS ((int)TA_ISA_COUNT) /* the library's ISAs are 0 .. TA_ISA_COUNT-1 */

static int measure_machine(bench_state *s)
{
    for (int i = 0; i < N_ISAS; i++) {
        if (!ta_cpu_supports((ta_isa)i)) continue;
        double g;
        if (peak_for(s, (ta_isa)i, 1, &g) || peak_for(s, (ta_isa)i, s->cfg.threads, &g))
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
        const char *why = bench_fma_peak(&g, p->isa, p->threads, s->cfg.peak_seconds);
        if (why) {
            progress_clear(s);
            fprintf(stderr, "tensorattn: error: bench: FMA peak (%s, %d threads): %s\n",
                    ta_isa_name(p->isa), p->threads, why);
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
    ta_status st = ta_einsum(&c->t[2], c->spec, &c->t[0], &c->t[1]);
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
        double x = (double)*ta_tensor_at_const(&c->t[0], ia) * (double)*ta_tensor_at_const(&c->t[1], ib);
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
        double err = rel_err(*ta_tensor_at_const(out, idx), ref, scale);
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

/* ------------------------------------------------------------ sdpa cases */

#define BENCH_SDPA_ROWS 14       /* random query rows checked in float64 per call ... */
#define BENCH_SDPA_RUN_ROWS 8    /* ... plus a run of consecutive ones, the first and the last */
#define BENCH_REF_SCRATCH_MAX ((double)(4LL << 30)) /* the reference's [B,H,Lq,Lk] floats */

/* The keys query row i may see: a prefix [0, n) of the Lk keys. */
static int64_t sdpa_visible(ta_causal causal, int64_t i, int64_t Lq, int64_t Lk)
{
    int64_t n = causal == TA_CAUSAL_TOP_LEFT ? i + 1
                : causal == TA_CAUSAL_BOTTOM_RIGHT ? i + Lk - Lq + 1 : Lk;
    return n < 0 ? 0 : n > Lk ? Lk : n;
}

/* The unmasked (query, key) pairs of one (batch, head): the work a path that skips
 * masked keys does, and the only work GFLOP/s counts. */
static double sdpa_pairs(ta_causal causal, int64_t Lq, int64_t Lk)
{
    double pairs = 0.0;
    for (int64_t i = 0; i < Lq; i++) pairs += (double)sdpa_visible(causal, i, Lq, Lk);
    return pairs;
}

static const char *causal_name(ta_causal causal)
{
    return causal == TA_CAUSAL_TOP_LEFT ? "top_left"
           : causal == TA_CAUSAL_BOTTOM_RIGHT ? "bottom_right" : "none";
}

/* t[0] = Q [B,H,Lq,D], t[1] = K, t[2] = V [B,Hkv,Lk,D]: N(0,1) as the seed's
 * torch.randn, from fixed seeds, so both paths of a shape see the same inputs;
 * t[3] = O [B,H,Lq,D], NaN. */
static int sdpa_setup(bench_case *c)
{
    const int64_t q[4] = {c->B, c->H, c->Lq, c->D}, kv[4] = {c->B, c->Hkv, c->Lk, c->D};
    const int64_t *shapes[3] = {q, kv, kv};
    for (int i = 0; i < 3; i++) {
        ta_status st = ta_tensor_empty(&c->t[i], 4, shapes[i]);
        if (st != TA_OK) return case_lib_fail(c, "ta_tensor_empty", st);
        st = ta_randn(&c->t[i], (uint64_t)i + 11);
        if (st != TA_OK) return case_lib_fail(c, "ta_randn", st);
    }
    return new_output(c, &c->t[3], 4, q);
}

static int sdpa_run(bench_case *c)
{
    ta_sdpa_opts opts = {0}; /* scale 1/sqrt(D), no mask tensor, no weights */
    opts.causal = c->causal;
    opts.path = c->sdpa_path;
    ta_status st = ta_sdpa(&c->t[3], &c->t[0], &c->t[1], &c->t[2], &opts);
    if (st != TA_OK) return case_lib_fail(c, "ta_sdpa", st);
    return 0;
}

/* Row (b, h, i) of softmax(Q K^T / sqrt(D)) V in float64, straight from the
 * definition, over the keys the causal alignment lets it see (none: zeros, as ta_sdpa
 * gives). w: Lk doubles of scratch. Returns the largest |O[b,h,i,d] - exact|. */
static double sdpa_row_error(const bench_case *c, int64_t b, int64_t h, int64_t i, double *w)
{
    int64_t D = c->D, Lk = c->Lk, kvh = h / (c->H / c->Hkv);
    const float *q = (const float *)c->t[0].data + ((b * c->H + h) * c->Lq + i) * D;
    const float *k = (const float *)c->t[1].data + (b * c->Hkv + kvh) * Lk * D;
    const float *v = (const float *)c->t[2].data + (b * c->Hkv + kvh) * Lk * D;
    const float *o = (const float *)c->t[3].data + ((b * c->H + h) * c->Lq + i) * D;
    int64_t n = sdpa_visible(c->causal, i, c->Lq, Lk);
    double scale = 1.0 / sqrt((double)D), top = -INFINITY, sum = 0.0, worst = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double dot = 0.0;
        for (int64_t d = 0; d < D; d++) dot += (double)q[d] * (double)k[j * D + d];
        w[j] = dot * scale;
        if (w[j] > top) top = w[j];
    }
    for (int64_t j = 0; j < n; j++) sum += (w[j] = exp(w[j] - top));
    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++) acc += w[j] * (double)v[j * D + d];
        double err = fabs((double)o[d] - (n ? acc / sum : 0.0));
        if (!(err <= worst)) worst = err == err ? err : INFINITY; /* NaN fails */
    }
    return worst;
}

/* Sampled rows against float64 (first, last, random ones and a run of consecutive
 * ones: every path); and, when the reference path ran on the same inputs in this run,
 * every element against its output. Both are absolute errors: the outputs are
 * weighted means of N(0,1) values, of order 1. */
static int sdpa_check(bench_case *c, double *max_err)
{
    int64_t rows = c->B * c->H * c->Lq;
    double *w = malloc((size_t)(c->Lk > 0 ? c->Lk : 1) * sizeof *w);
    if (!w) return case_fail(c, "bench: out of memory for the float64 check");
    uint64_t rng = 0x853c49e6748fea9bULL;
    int64_t run_start = rows > BENCH_SDPA_RUN_ROWS
                            ? (int64_t)(bench_rand(&rng) % (uint64_t)(rows - BENCH_SDPA_RUN_ROWS))
                            : 0;
    double worst = 0.0;
    for (int n = 0; n < 2 + BENCH_SDPA_ROWS + BENCH_SDPA_RUN_ROWS && rows > 0; n++) {
        int64_t r = n == 0 ? 0
                    : n == 1 ? rows - 1
                    : n < 2 + BENCH_SDPA_ROWS ? (int64_t)(bench_rand(&rng) % (uint64_t)rows)
                    : run_start + (n - 2 - BENCH_SDPA_ROWS);
        if (r >= rows) break;
        double err = sdpa_row_error(c, r / (c->H * c->Lq), r / c->Lq % c->H, r % c->Lq, w);
        if (!(err <= worst)) worst = err;
    }
    free(w);
    if (c->ref_out) {
        const float *o = c->t[3].data, *ref = c->ref_out->data;
        int64_t n = ta_tensor_numel(&c->t[3]);
        double diff = 0.0;
        for (int64_t e = 0; e < n; e++) {
            double d = fabs((double)o[e] - (double)ref[e]);
            if (!(d <= diff)) diff = d == d ? d : INFINITY;
        }
        if (!(diff <= c->max_abs_diff_ref)) c->max_abs_diff_ref = diff;
        if (!(diff <= worst)) worst = diff;
    }
    *max_err = worst;
    return 0;
}

/* Appends the shape's reference case, then its fused twin (the reference runs first,
 * so the fused case can be checked against its output). The reference is skipped
 * where its [B, H, Lq, Lk] scratch would exceed 4 GiB. */
static void add_sdpa(bench_state *s, const char *name, int64_t B, int64_t H, int64_t Hkv,
                     int64_t Lq, int64_t Lk, int64_t D, ta_causal causal)
{
    static const struct {
        ta_sdpa_path path;
        const char *name;
    } paths[2] = {{TA_SDPA_REFERENCE, "reference"}, {TA_SDPA_FUSED, "fused"}};
    double pairs = (double)B * (double)H * sdpa_pairs(causal, Lq, Lk);
    double scratch = (double)B * (double)H * (double)Lq * (double)Lk * sizeof(float);
    int first = s->ncases;
    for (int p = 0; p < 2; p++) {
        bench_case c = {.kind = "sdpa", .path = paths[p].name, .shape = BENCH_SHAPE_SDPA,
                        .B = B, .H = H, .Hkv = Hkv, .Lq = Lq, .Lk = Lk, .D = D,
                        .causal = causal, .sdpa_path = paths[p].path, .pairs = pairs,
                        /* Q K^T and P V: two multiply-adds per (pair, d) */
                        .flops = 4.0 * pairs * (double)D, .threads = s->cfg.threads,
                        .tolerance = BENCH_TOLERANCE, .output = 3, .setup = sdpa_setup,
                        .run = sdpa_run, .check = sdpa_check, .pair = first + 1 - p};
        snprintf(c.name, sizeof c.name, "%s_%s", name, paths[p].name);
        if (paths[p].path == TA_SDPA_REFERENCE && scratch > BENCH_REF_SCRATCH_MAX)
            snprintf(c.skip_reason, sizeof c.skip_reason,
                     "the reference path's [B, H, Lq, Lk] scratch would take %.1f GiB (> 4 GiB)",
                     scratch / (double)(1LL << 30));
        add_case(s, &c);
    }
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

/* ------------------------------------------------------ attention backward */

/* t[0..2] = Q, K, V as sdpa_setup; t[3] = O and t[4] = LSE from a forward call (inputs
 * of the backward, not timed); t[5] = dO, N(0,1); t[6] = dQ (the output the harness
 * scans and hands to the fused twin), t[7] = dK, t[8] = dV, all NaN. */
static int sdpa_bwd_setup(bench_case *c)
{
    if (sdpa_setup(c)) return -1;
    const int64_t q[4] = {c->B, c->H, c->Lq, c->D}, kv[4] = {c->B, c->Hkv, c->Lk, c->D};
    const int64_t lse[3] = {c->B, c->H, c->Lq};
    ta_status st = ta_tensor_empty(&c->t[4], 3, lse);
    if (st == TA_OK) st = ta_tensor_empty(&c->t[5], 4, q);
    if (st == TA_OK) st = ta_randn(&c->t[5], 17);
    if (st != TA_OK) return case_lib_fail(c, "ta_tensor_empty", st);
    ta_sdpa_opts fwd = {.causal = c->causal, .lse = &c->t[4]};
    st = ta_sdpa(&c->t[3], &c->t[0], &c->t[1], &c->t[2], &fwd);
    if (st != TA_OK) return case_lib_fail(c, "ta_sdpa (the forward)", st);
    if (new_output(c, &c->t[6], 4, q) || new_output(c, &c->t[7], 4, kv) ||
        new_output(c, &c->t[8], 4, kv))
        return -1;
    return 0;
}

static int sdpa_bwd_run(bench_case *c)
{
    ta_sdpa_opts opts = {.causal = c->causal, .path = c->sdpa_path};
    ta_status st = ta_sdpa_backward(&c->t[6], &c->t[7], &c->t[8], &c->t[5], &c->t[0], &c->t[1],
                                    &c->t[2], &c->t[3], &c->t[4], &opts);
    if (st != TA_OK) return case_lib_fail(c, "ta_sdpa_backward", st);
    return 0;
}

/* Softmax row (b, h, i) in float64 into p (n entries; the visible prefix), and the
 * exact output row into o (D doubles). Returns n. */
static int64_t sdpa_row64(const bench_case *c, int64_t b, int64_t h, int64_t i, double *p,
                          double *o)
{
    int64_t D = c->D, Lk = c->Lk, kvh = h / (c->H / c->Hkv);
    const float *q = (const float *)c->t[0].data + ((b * c->H + h) * c->Lq + i) * D;
    const float *k = (const float *)c->t[1].data + (b * c->Hkv + kvh) * Lk * D;
    const float *v = (const float *)c->t[2].data + (b * c->Hkv + kvh) * Lk * D;
    int64_t n = sdpa_visible(c->causal, i, c->Lq, Lk);
    double scale = 1.0 / sqrt((double)D), top = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double dot = 0.0;
        for (int64_t d = 0; d < D; d++) dot += (double)q[d] * (double)k[j * D + d];
        p[j] = dot * scale;
        if (p[j] > top) top = p[j];
    }
    for (int64_t j = 0; j < n; j++) sum += (p[j] = exp(p[j] - top));
    for (int64_t j = 0; j < n; j++) p[j] /= sum;
    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++) acc += p[j] * (double)v[j * D + d];
        o[d] = acc;
    }
    return n;
}

static double worse(double worst, double err)
{
    return err <= worst ? worst : err == err ? err : INFINITY; /* NaN fails */
}

/* Sampled rows of dQ (dQ_i = scale sum_j P_ij (dO_i.V_j - dO_i.O_i) K_j) and of dV
 * (dV_j = sum_i P_ij dO_i) in float64 from the definitions; dK and dV scanned for
 * values never written; dQ against the reference path's in the same run. */
static int sdpa_bwd_check(bench_case *c, double *max_err)
{
    for (int t = 7; t <= 8; t++) {
        int64_t bad = first_nonfinite(&c->t[t]);
        if (bad >= 0)
            return case_fail(c, "result check failed: %s element %lld is not finite",
                             t == 7 ? "dK" : "dV", (long long)bad);
    }
    int64_t D = c->D, Lk = c->Lk, rows = c->B * c->H * c->Lq;
    double *p = malloc((size_t)(Lk > 0 ? Lk : 1) * sizeof *p);
    double *o = malloc((size_t)D * sizeof *o), *acc = malloc((size_t)D * sizeof *acc);
    if (!p || !o || !acc) {
        free(p), free(o), free(acc);
        return case_fail(c, "bench: out of memory for the float64 check");
    }
    double scale = 1.0 / sqrt((double)D), worst = 0.0;
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    for (int n = 0; n < 2 + BENCH_SDPA_ROWS && rows > 0; n++) {
        int64_t r = n == 0 ? 0 : n == 1 ? rows - 1 : (int64_t)(bench_rand(&rng) % (uint64_t)rows);
        int64_t b = r / (c->H * c->Lq), h = r / c->Lq % c->H, i = r % c->Lq;
        int64_t kvh = h / (c->H / c->Hkv);
        const float *k = (const float *)c->t[1].data + (b * c->Hkv + kvh) * Lk * D;
        const float *v = (const float *)c->t[2].data + (b * c->Hkv + kvh) * Lk * D;
        const float *dO = (const float *)c->t[5].data + r * D;
        const float *dQ = (const float *)c->t[6].data + r * D;
        int64_t nk = sdpa_row64(c, b, h, i, p, o);
        double Di = 0.0;
        for (int64_t d = 0; d < D; d++) Di += (double)dO[d] * o[d], acc[d] = 0.0;
        for (int64_t j = 0; j < nk; j++) {
            double dp = 0.0;
            for (int64_t d = 0; d < D; d++) dp += (double)dO[d] * (double)v[j * D + d];
            double ds = p[j] * (dp - Di);
            for (int64_t d = 0; d < D; d++) acc[d] += ds * (double)k[j * D + d];
        }
        for (int64_t d = 0; d < D; d++) worst = worse(worst, fabs(dQ[d] - scale * acc[d]));
    }
    /* dV rows: every query row of the (b, head) that sees key j contributes P_ij dO_i */
    for (int n = 0; n < 3 && c->Hkv == c->H && rows > 0; n++) {
        int64_t b = (int64_t)(bench_rand(&rng) % (uint64_t)c->B);
        int64_t h = (int64_t)(bench_rand(&rng) % (uint64_t)c->H);
        int64_t j = (int64_t)(bench_rand(&rng) % (uint64_t)Lk);
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0;
        for (int64_t i = 0; i < c->Lq; i++) {
            if (sdpa_visible(c->causal, i, c->Lq, Lk) <= j) continue;
            sdpa_row64(c, b, h, i, p, o);
            const float *dO = (const float *)c->t[5].data + ((b * c->H + h) * c->Lq + i) * D;
            for (int64_t d = 0; d < D; d++) acc[d] += p[j] * (double)dO[d];
        }
        const float *dV = (const float *)c->t[8].data + ((b * c->Hkv + h) * Lk + j) * D;
        for (int64_t d = 0; d < D; d++) worst = worse(worst, fabs(dV[d] - acc[d]));
    }
    free(p), free(o), free(acc);
    if (c->ref_out) {
        const float *g = c->t[6].data, *ref = c->ref_out->data;
        double diff = 0.0;
        for (int64_t e = 0; e < ta_tensor_numel(&c->t[6]); e++)
            diff = worse(diff, fabs((double)g[e] - (double)ref[e]));
        if (!(diff <= c->max_abs_diff_ref)) c->max_abs_diff_ref = diff;
        worst = worse(worst, diff);
    }
    *max_err = worst;
    return 0;
}

/* The backward of one shape on both paths (reference first, as add_sdpa). FLOPs: 2.5x
 * the forward's useful FLOPs (the recomputed Q K^T, dV, dP, dQ and dK products). */
static void add_sdpa_backward(bench_state *s, const char *name, int64_t B, int64_t H,
                              int64_t L, int64_t D, ta_causal causal)
{
    int first = s->ncases;
    add_sdpa(s, name, B, H, H, L, L, D, causal);
    for (int i = first; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        c->kind = "sdpa_backward";
        c->flops *= 2.5;
        c->output = 6;
        c->setup = sdpa_bwd_setup;
        c->run = sdpa_bwd_run;
        c->check = sdpa_bwd_check;
        if (c->sdpa_path == TA_SDPA_REFERENCE) {
            /* P and dP materialised: at L = 8192 that is 4 GiB and half a minute a
             * call, so the reference backward runs only up to 1 GiB of scratch */
            double scratch = 2.0 * (double)B * (double)H * (double)L * (double)L * sizeof(float);
            if (scratch > (double)(1LL << 30))
                snprintf(c->skip_reason, sizeof c->skip_reason,
                         "the reference backward's P and dP would take %.1f GiB (> 1 GiB)",
                         scratch / (double)(1LL << 30));
        }
    }
}

/* The attention shapes: the seed's, a sweep of L at constant work, GQA, decoding, and a
 * long causal sequence only the fused path can hold. */
static void build_sdpa_cases(bench_state *s)
{
    int q = s->cfg.quick;
    char name[64];
    /* The seed: B=32, H=8, L=512, D=64 (B*H*L^2 = 2^26), with and without its causal
     * mask (torch.triu(ones, diagonal=1) == top-left causal). */
    int64_t L0 = q ? 128 : 512;
    add_sdpa(s, "sdpa_seed", 32, 8, 8, L0, L0, 64, TA_CAUSAL_NONE);
    add_sdpa(s, "sdpa_seed_causal", 32, 8, 8, L0, L0, 64, TA_CAUSAL_TOP_LEFT);
    /* L at constant B*H*L^2 (2^26; --quick: 2^20): the same flops per call at every L,
     * so the curve shows how each path scales with the sequence alone. H = 8 heads
     * while B*H allows. The seed is the D=64 point at L=512. */
    double work = q ? (double)(1 << 20) : (double)(1 << 26);
    for (int64_t D = 64; D <= 128; D *= 2)
        for (int64_t L = 128; L <= (q ? 256 : 8192); L *= 2) {
            int64_t BH = (int64_t)(work / ((double)L * (double)L));
            int64_t H = BH >= 8 ? 8 : BH, B = BH / H;
            int causal_too = !q && D == 64 && (L == 128 || L == 2048 || L == 8192);
            if (!q && D == 64 && L == 512) continue; /* the seed cases */
            snprintf(name, sizeof name, "sdpa_L%lld_D%lld", (long long)L, (long long)D);
            add_sdpa(s, name, B, H, H, L, L, D, TA_CAUSAL_NONE);
            if (causal_too) {
                snprintf(name, sizeof name, "sdpa_L%lld_D%lld_causal", (long long)L,
                         (long long)D);
                add_sdpa(s, name, B, H, H, L, L, D, TA_CAUSAL_TOP_LEFT);
            }
        }
    /* Grouped-query attention: 32 query heads over 8 key/value heads. */
    add_sdpa(s, "sdpa_gqa", 1, 32, 8, q ? 256 : 1024, q ? 256 : 1024, 128, TA_CAUSAL_NONE);
    /* Decoding one token against a KV cache: Lq = 1 sees every key (bottom-right). */
    add_sdpa(s, "sdpa_decode", 1, 32, 32, 1, q ? 1024 : 4096, 128, TA_CAUSAL_BOTTOM_RIGHT);
    /* The memory goal's shape: B=1, H=8, L=8192, D=64 (extra memory under 8 MiB). */
    if (!q) add_sdpa(s, "sdpa_L8192_H8_causal", 1, 8, 8, 8192, 8192, 64, TA_CAUSAL_TOP_LEFT);
    /* A long causal sequence: the reference's scratch would be 8 GiB. */
    if (!q) add_sdpa(s, "sdpa_long_causal", 1, 2, 2, 32768, 32768, 64, TA_CAUSAL_TOP_LEFT);
    /* Training: the backward of the seed's causal attention, and a long sequence whose
     * extra memory must stay O(L). */
    add_sdpa_backward(s, "sdpa_bwd_seed_causal", 32, 8, L0, 64, TA_CAUSAL_TOP_LEFT);
    if (!q) add_sdpa_backward(s, "sdpa_bwd_L8192_causal", 1, 8, 8192, 64, TA_CAUSAL_TOP_LEFT);
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
    build_sdpa_cases(s);
}

/* ---------------------------------------------------------------- harness */

static void teardown(bench_case *c)
{
    if (c->cleanup) c->cleanup(c);
    for (int i = 0; i < BENCH_MAX_TENSORS; i++) ta_tensor_free(&c->t[i]);
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
        return case_fail(c, "result check failed: max %s error %.3g > %.3g",
                         c->shape == BENCH_SHAPE_SDPA ? "absolute" : "relative", err,
                         c->tolerance);
    }
    return 0;
}

/* setup, cold call, check, warm-up, timed runs, check again. Returns 0 when timed,
 * 1 when the path is not built (the cold call returned TA_EUNSUPPORTED), -1 on failure.
 * Every call's extra memory is measured: the counting hook's peak above what was
 * outstanding when the call began. */
static int time_case(bench_state *s, bench_case *c)
{
    ta_status st = ta_set_num_threads(c->threads);
    if (st != TA_OK) return case_lib_fail(c, "ta_set_num_threads", st);
    if (c->setup(c)) return -1;
    size_t base = mem_mark();
    double t0 = bench_now();
    c->last_status = TA_OK;
    if (c->run(c)) return c->last_status == TA_EUNSUPPORTED ? 1 : -1;
    c->cold_s = bench_now() - t0;
    c->extra_bytes_cold = mem_extra_since(base);
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
        if (c->run(c)) return -1;
    double start = bench_now(), extra = 0.0;
    int n = 0;
    while (n < BENCH_MAX_RUNS && (n < min_runs || bench_now() - start < min_seconds)) {
        base = mem_mark();
        t0 = bench_now();
        if (c->run(c)) return -1;
        s->times[n++] = bench_now() - t0;
        double e = mem_extra_since(base);
        extra = e < 0.0 || extra < 0.0 ? -1.0 : fmax(extra, e);
    }
    c->extra_bytes = extra;
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

static int case_ok(const bench_case *c)
{
    return c->status && strcmp(c->status, "ok") == 0;
}

/* Denominator: the active ISA's peak on the case's thread count. An sdpa case is also
 * set against the reference path on the same shape, when both ran. */
static void finish_ratios(bench_state *s)
{
    int above = 0;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        if (!case_ok(c)) continue;
        c->peak_gflops = known_peak(s, ta_active_isa(), c->threads);
        c->peak_fraction = c->peak_gflops > 0.0 ? c->gflops / c->peak_gflops : 0.0;
        above |= c->peak_fraction > 1.0;
        if (c->shape == BENCH_SHAPE_SDPA && c->pair >= 0) {
            const bench_case *ref = c->sdpa_path == TA_SDPA_REFERENCE ? c : &s->cases[c->pair];
            if (case_ok(ref) && c->median_s > 0.0)
                c->speedup_vs_reference = ref->median_s / c->median_s;
        }
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
    else if (c->shape == BENCH_SHAPE_ATTN)
        snprintf(buf, n, "%s B%lld H%lld L%lld D%lld", c->spec, (long long)c->B,
                 (long long)c->H, (long long)c->Lq, (long long)c->D);
    else {
        char heads[32], lens[40];
        if (c->Hkv != c->H) snprintf(heads, sizeof heads, "H%lld/%lld", (long long)c->H, (long long)c->Hkv);
        else snprintf(heads, sizeof heads, "H%lld", (long long)c->H);
        if (c->Lq != c->Lk) snprintf(lens, sizeof lens, "Lq%lld Lk%lld", (long long)c->Lq, (long long)c->Lk);
        else snprintf(lens, sizeof lens, "L%lld", (long long)c->Lq);
        snprintf(buf, n, "B%lld %s %s D%lld%s%s", (long long)c->B, heads, lens,
                 (long long)c->D, c->causal ? " " : "", c->causal ? causal_name(c->causal) : "");
    }
}

static void print_header(void)
{
    printf("%-32s %-34s %3s %5s %10s %10s %10s %9s %6s %9s %7s %9s\n", "case", "shape", "thr",
           "runs", "median ms", "min ms", "cold ms", "GFLOP/s", "%peak", "err", "x ref",
           "extra MiB");
}

static void print_row(const bench_case *c)
{
    char shape[160], speedup[16] = "-", extra[16] = "?";
    shape_str(c, shape, sizeof shape);
    if (isfinite(c->speedup_vs_reference))
        snprintf(speedup, sizeof speedup, "%.2f", c->speedup_vs_reference);
    if (c->extra_bytes >= 0.0) snprintf(extra, sizeof extra, "%.1f", c->extra_bytes / (1 << 20));
    if (strcmp(c->status, "ok") == 0)
        printf("%-32s %-34s %3d %5d %10.3f %10.3f %10.3f %9.1f %5.1f%% %9.2e %7s %9s\n",
               c->name, shape, c->threads, c->runs, c->median_s * 1e3, c->min_s * 1e3,
               c->cold_s * 1e3, c->gflops, 100.0 * c->peak_fraction, c->max_rel_err, speedup,
               extra);
    else if (!strcmp(c->status, "unavailable") || !strcmp(c->status, "skipped"))
        printf("%-32s %-34s %3d  %s: %s\n", c->name, shape, c->threads, c->status, c->error);
    else
        printf("%-32s %-34s %3d  FAILED (%s): %s\n", c->name, shape, c->threads, c->status,
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
        if (!ta_cpu_supports((ta_isa)i)) continue;
        printf("  %-8s %9.1f on 1 thread", ta_isa_name((ta_isa)i),
               known_peak(s, (ta_isa)i, 1));
        if (s->cfg.threads != 1)
            printf(", %9.1f on %d threads", known_peak(s, (ta_isa)i, s->cfg.threads),
                   s->cfg.threads);
        printf("%s\n", (ta_isa)i == act ? "   <- ratios use this" : "");
    }
    printf("  (best of two measurements, before and after the cases; they differed by up to "
           "%.0f%%)\n\n", 100.0 * s->peak_spread);
    fflush(stdout);
}

/* ---------------------------------------------------------------- peers */

/* --peers: the seed's PyTorch code (bench/peers/torch_seed.py, run by Debian's
 * /usr/bin/python3 with python3-torch) timed on the seed shapes that ran here, in its
 * best configuration (glibc keeps freed memory, so calls reuse touched pages). Optional
 * by nature: a missing python, torch or script skips it with the reason, never fails. */
#define BENCH_PYTHON "/usr/bin/python3"
#define BENCH_TORCH_TUNABLES \
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

/* The script: $TA_TORCH_PEER, else bench/peers/torch_seed.py under the current
 * directory, beside the executable or one level up (a build directory in the tree). */
static int find_torch_script(char *out, size_t n)
{
    const char *env = getenv("TA_TORCH_PEER");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return readable(out);
    }
    if (readable("bench/peers/torch_seed.py")) {
        snprintf(out, n, "bench/peers/torch_seed.py");
        return 1;
    }
    char exe[2048];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 0;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    static const char *const rel[] = {"bench/peers/torch_seed.py", "../bench/peers/torch_seed.py"};
    for (int i = 0; i < 2; i++) {
        int w = snprintf(out, n, "%s/%s", exe, rel[i]);
        if (w > 0 && (size_t)w < n && readable(out)) return 1;
    }
    return 0;
}

static void torch_skip(bench_state *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->torch.reason, sizeof s->torch.reason, fmt, ap);
    va_end(ap);
    s->torch.status = "skipped";
    progress_clear(s);
    fprintf(stderr, "bench: the torch peer is skipped: %s\n", s->torch.reason);
}

/* The name a case shares with its peer row: "sdpa_seed_fused" -> "sdpa_seed". */
static int sdpa_base_name(const bench_case *c, char *out, size_t n)
{
    size_t len = strlen(c->name), suffix = strlen(c->path) + 1;
    if (c->shape != BENCH_SHAPE_SDPA || len <= suffix || len - suffix >= n) return 0;
    memcpy(out, c->name, len - suffix);
    out[len - suffix] = '\0';
    return 1;
}

/* The seed's shapes (self-attention, the seed's own causal mask or none) that ran. */
static int torch_eligible(const bench_state *s, int i)
{
    const bench_case *c = &s->cases[i];
    if (c->shape != BENCH_SHAPE_SDPA || !case_ok(c) || strncmp(c->name, "sdpa_seed", 9) ||
        c->Hkv != c->H || c->Lq != c->Lk || c->causal == TA_CAUSAL_BOTTOM_RIGHT)
        return 0;
    /* one row per shape: the first of its two paths that ran */
    return !(c->pair >= 0 && c->pair < i && case_ok(&s->cases[c->pair]));
}

static void run_torch_peer(bench_state *s)
{
    char script[2048];
    if (!find_torch_script(script, sizeof script) || strchr(script, '\'')) {
        torch_skip(s, "bench/peers/torch_seed.py not found (set TA_TORCH_PEER)");
        return;
    }
    if (access(BENCH_PYTHON, X_OK) != 0) {
        torch_skip(s, "%s is not there", BENCH_PYTHON);
        return;
    }
    char *cmd = s->torch.command;
    size_t cap = sizeof s->torch.command;
    int w = snprintf(cmd, cap, "GLIBC_TUNABLES=%s %s '%s' --json --threads %d --runs %d",
                     BENCH_TORCH_TUNABLES, BENCH_PYTHON, script, s->cfg.threads,
                     s->cfg.quick ? 2 : 3);
    int shapes = 0;
    for (int i = 0; i < s->ncases && w > 0 && (size_t)w < cap; i++) {
        const bench_case *c = &s->cases[i];
        char base[64];
        if (!torch_eligible(s, i) || !sdpa_base_name(c, base, sizeof base)) continue;
        w += snprintf(cmd + w, cap - (size_t)w, " --shape %s,%lld,%lld,%lld,%lld,%s", base,
                      (long long)c->B, (long long)c->H, (long long)c->Lq, (long long)c->D,
                      causal_name(c->causal));
        shapes++;
    }
    if (w <= 0 || (size_t)w + 8 >= cap) {
        torch_skip(s, "the peer's command line is too long");
        return;
    }
    if (!shapes) {
        torch_skip(s, "no seed attention case ran (see --filter)");
        return;
    }
    progress(s, "the torch peer: the seed's PyTorch code on %d shape%s ...", shapes,
             shapes == 1 ? "" : "s");
    char redirected[sizeof s->torch.command + 8];
    snprintf(redirected, sizeof redirected, "%s 2>&1", cmd);
    FILE *p = popen(redirected, "r");
    if (!p) {
        torch_skip(s, "cannot start %s: %s", BENCH_PYTHON, strerror(errno));
        return;
    }
    /* JSON lines are rows; anything else (a traceback) is kept to say why it failed. */
    cJSON *rows = cJSON_CreateArray();
    char line[4096], last[512] = "";
    while (fgets(line, sizeof line, p)) {
        cJSON *row = line[0] == '{' ? cJSON_Parse(line) : NULL;
        if (row && rows && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(row, "name")) &&
            cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "median_s"))) {
            cJSON_AddItemToArray(rows, row);
        } else {
            cJSON_Delete(row);
            line[strcspn(line, "\n")] = '\0';
            if (line[0]) snprintf(last, sizeof last, "%.500s", line);
        }
    }
    int status = pclose(p);
    if (!rows || status != 0) {
        cJSON_Delete(rows);
        torch_skip(s, "%s exited with status %d%s%s", BENCH_PYTHON,
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1, last[0] ? ": " : "", last);
        return;
    }
    s->torch.rows = rows;
    s->torch.status = "ok";
}

/* speedup_vs_torch for every sdpa case whose shape the peer timed. */
static void finish_torch_ratios(bench_state *s)
{
    if (!s->torch.rows) return;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        char base[64];
        if (!case_ok(c) || !sdpa_base_name(c, base, sizeof base)) continue;
        const cJSON *row;
        cJSON_ArrayForEach(row, s->torch.rows)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(row, "name");
            double median = cJSON_GetObjectItemCaseSensitive(row, "median_s")->valuedouble;
            if (strcmp(name->valuestring, base) == 0 && median > 0.0 && c->median_s > 0.0)
                c->speedup_vs_torch = median / c->median_s;
        }
    }
}

static void print_torch(const bench_state *s)
{
    if (!s->torch.status) return;
    printf("\npeer: the seed's PyTorch code (bench/peers/torch_seed.py, %d thread%s, "
           "GLIBC_TUNABLES=%s)\n", s->cfg.threads, s->cfg.threads == 1 ? "" : "s",
           BENCH_TORCH_TUNABLES);
    if (!s->torch.rows) {
        printf("  skipped: %s\n", s->torch.reason);
        return;
    }
    const cJSON *row;
    cJSON_ArrayForEach(row, s->torch.rows)
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(row, "name")->valuestring;
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(row, "gflops");
        printf("  %-20s median %10.3f ms  %7.1f GFLOP/s", name,
               cJSON_GetObjectItemCaseSensitive(row, "median_s")->valuedouble * 1e3,
               cJSON_IsNumber(g) ? g->valuedouble : NAN);
        for (int i = 0; i < s->ncases; i++) {
            const bench_case *c = &s->cases[i];
            char base[64];
            if (case_ok(c) && isfinite(c->speedup_vs_torch) &&
                sdpa_base_name(c, base, sizeof base) && !strcmp(base, name))
                printf("   %s x%.2f", c->path, c->speedup_vs_torch);
        }
        printf("\n");
    }
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
        int sdpa = c->shape == BENCH_SHAPE_SDPA;
        cJSON_AddNumberToObject(o, "B", (double)c->B);
        cJSON_AddNumberToObject(o, "H", (double)c->H);
        if (sdpa) cJSON_AddNumberToObject(o, "Hkv", (double)c->Hkv);
        cJSON_AddNumberToObject(o, "Lq", (double)c->Lq);
        cJSON_AddNumberToObject(o, "Lk", (double)c->Lk);
        cJSON_AddNumberToObject(o, "D", (double)c->D);
        if (sdpa) cJSON_AddStringToObject(o, "causal", causal_name(c->causal));
        if (sdpa) cJSON_AddNumberToObject(o, "pairs", c->pairs);
        else cJSON_AddStringToObject(o, "spec", c->spec);
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
    /* sdpa outputs are of order 1: their error is absolute (bench/README.md). */
    NUM(c->shape == BENCH_SHAPE_SDPA ? "max_abs_err" : "max_rel_err", c->max_rel_err,
        isfinite(c->max_rel_err) && c->max_rel_err >= 0.0 && strcmp(c->status, "skipped") &&
            strcmp(c->status, "unavailable"));
    NUM("tolerance", c->tolerance, 1);
    if (c->shape == BENCH_SHAPE_SDPA) {
        NUM("max_abs_diff_vs_reference", c->max_abs_diff_ref, isfinite(c->max_abs_diff_ref));
        NUM("speedup_vs_reference", c->speedup_vs_reference, isfinite(c->speedup_vs_reference));
        NUM("speedup_vs_torch", c->speedup_vs_torch, isfinite(c->speedup_vs_torch));
    }
    NUM("extra_bytes", c->extra_bytes, ok && c->extra_bytes >= 0.0);
    NUM("extra_bytes_cold", c->extra_bytes_cold, c->cold_s > 0.0 && c->extra_bytes_cold >= 0.0);
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
        if (!ta_cpu_supports((ta_isa)i)) continue;
        cJSON_AddNumberToObject(peaks, ta_isa_name((ta_isa)i),
                                known_peak(s, (ta_isa)i, s->cfg.threads));
        cJSON_AddNumberToObject(peaks1, ta_isa_name((ta_isa)i), known_peak(s, (ta_isa)i, 1));
    }
    if (s->torch.status) {
        cJSON *peers = cJSON_AddObjectToObject(root, "peers");
        cJSON *torch = peers ? cJSON_AddObjectToObject(peers, "torch") : NULL;
        if (!torch) {
            cJSON_Delete(root);
            return NULL;
        }
        cJSON_AddStringToObject(torch, "status", s->torch.status);
        if (s->torch.rows) {
            cJSON_AddStringToObject(torch, "command", s->torch.command);
            cJSON_AddItemReferenceToObject(torch, "cases", s->torch.rows);
        } else {
            cJSON_AddStringToObject(torch, "reason", s->torch.reason);
        }
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
           "                        [--list] [--peers]\n"
           "\n"
           "Measures the float32 FMA peak of this machine for every ISA it supports, then\n"
           "times SGEMM (square 256..2048 and the seed's batched attention shapes), the\n"
           "seed's four einsums (B=32 H=8 L=512 D=64) and scaled dot-product attention\n"
           "(ta_sdpa, reference and fused paths: the seed example, an L sweep at constant\n"
           "work with D=64 and 128, GQA, decoding, a long causal sequence). Each case is\n"
           "checked before it is timed (against a float64 oracle; a fused case also against\n"
           "the reference output on the same inputs), warmed up, and run >= 5 times and\n"
           ">= 0.5 s (slow cases: 2 or 3 runs); the table gives the median, the minimum, the\n"
           "first (cold) call, GFLOP/s, the fraction of the active ISA's measured peak on the\n"
           "case's thread count, the speed-up over the reference path and the extra memory\n"
           "the call allocated. A path that is not built reads \"unavailable\"; a reference\n"
           "whose [B,H,Lq,Lk] scratch would exceed 4 GiB reads \"skipped\".\n"
           "\n"
           "  --quick            2 timed runs, smaller sizes (no 2048, L<=256)\n"
           "  --json FILE        also write the results as JSON (schema: bench/README.md)\n"
           "  --threads N        threads for the library and the peak (default: all cores)\n"
           "  --filter SUBSTRING run only the cases whose name contains SUBSTRING\n"
           "                     (e.g. sdpa_, _fused, sgemm_)\n"
           "  --list             print the case names and exit\n"
           "  --peers            also time the seed's PyTorch code on the seed shapes\n"
           "                     (bench/peers/torch_seed.py with " BENCH_PYTHON "; skipped,\n"
           "                     with the reason, when python or torch is missing)\n"
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
        } else if (!strcmp(key, "--peers")) {
            cfg->peers = 1;
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

static int selected(const bench_state *s, int i)
{
    return !s->cfg.filter || strstr(s->cases[i].name, s->cfg.filter) != NULL;
}

/* A reference sdpa output that its fused twin (run next, same inputs) will be checked
 * against changes hands from the case to s->kept, so that teardown keeps it. */
static void keep_reference_output(bench_state *s, bench_case *c)
{
    if (c->shape != BENCH_SHAPE_SDPA || c->sdpa_path != TA_SDPA_REFERENCE || !case_ok(c) ||
        c->pair <= (int)(c - s->cases) || !selected(s, c->pair) ||
        s->cases[c->pair].skip_reason[0])
        return;
    ta_tensor_free(&s->kept);
    s->kept = c->t[c->output];
    memset(&c->t[c->output], 0, sizeof c->t[c->output]);
    s->kept_for = c->pair;
}

static int run_cases(bench_state *s)
{
    int nselected = 0, done = 0, failed = 0;
    for (int i = 0; i < s->ncases; i++) nselected += selected(s, i);
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        if (!selected(s, i)) continue;
        progress(s, "[%d/%d] %s ...", ++done, nselected, c->name);
        c->max_rel_err = 0.0;
        c->max_abs_diff_ref = NAN;
        c->speedup_vs_reference = NAN;
        c->speedup_vs_torch = NAN;
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
        if (r > 0) c->status = "unavailable";
        keep_reference_output(s, c);
        teardown(c);
        if (s->kept_for == i) { /* its fused twin has used it */
            ta_tensor_free(&s->kept);
            s->kept_for = -1;
            c->ref_out = NULL;
        }
        if (r > 0) {
            progress_clear(s);
            fprintf(stderr, "bench: %s is unavailable: %s\n", c->name, c->error);
        } else if (r < 0) {
            progress_clear(s);
            fprintf(stderr, "tensorattn: error: bench case %s: %s\n", c->name, c->error);
            failed++;
        }
    }
    ta_tensor_free(&s->kept); /* a twin that was filtered out or failed before using it */
    s->kept_for = -1;
    ta_set_num_threads(s->cfg.threads);
    return failed ? -1 : 0;
}

int ta_bench_main(int argc, char **argv)
{
    /* First, before the library allocates anything (see counting_alloc). */
    ta_set_allocator(counting_alloc, counting_free, NULL);
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
    s->kept_for = -1;
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
        if (cfg->peers) run_torch_peer(s);
        if (recheck_peaks(s)) rc = 1;
        finish_ratios(s);
        finish_torch_ratios(s);
        print_machine(s);
        print_table(s);
        print_torch(s);
        if (cfg->json_path && write_json(s, cfg->json_path)) rc = 1;
    }
    progress_clear(s);
    cJSON_Delete(s->torch.rows);
    free(s->times);
    free(s);
    return rc;
}
