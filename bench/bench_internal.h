/* tensorattn bench, inside: the types the bench's files share and the small harness API
 * the case files use (bench/README.md has the method and the JSON schema). Uses only
 * the public header.
 *
 * Where things are:
 *   main.c                 the command line, ta_bench_main: the order of a run
 *   harness.c              a case's life: setup, cold call, check, timing, ratios
 *   alloc_count.c          the counting allocator behind extra_bytes
 *   machine.c              the machine section: the FMA peaks and the read bandwidth the
 *                          ratios divide by
 *   peak.c, peak_<isa>.c   one FMA-peak or read-bandwidth measurement (peak.h), loops per
 *                          ISA of the table
 *   cases.c                the case table: which cases a run has
 *   cases_gemm.c           kinds "sgemm" and "sgemm_batched"
 *   cases_einsum.c         kind "einsum"
 *   cases_sdpa.c           kind "sdpa" (forward; cases_sdpa.h: what the backward shares)
 *   cases_sdpa_backward.c  kind "sdpa_backward"
 *   peers.c                --peers: the seed's PyTorch code (bench/peers/torch_seed.py),
 *                          or PyTorch 2.x's flash SDPA (torch_sdpa.py, --torch-python)
 *   report_table.c         the table on stdout
 *   report_json.c          --json FILE
 *
 * A case is one row of the table: a name, a kind (its functions: setup, run, check,
 * and how to print its shape), the kind's own state (its shape and parameters), a
 * flop count (and, for a memory-bound case, a byte count), and the results the harness
 * fills in. A new kind of case is a new
 * cases_*.c with a builder that appends rows; the harness does not change. */
#ifndef TA_BENCH_INTERNAL_H
#define TA_BENCH_INTERNAL_H

#include "tensorattn.h"

#include <cjson/cJSON.h>

#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_TENSORS 14
#define BENCH_MAX_CASES 96
#define BENCH_MAX_RUNS 10000 /* a cap on timed runs of tiny cases */
#define BENCH_TOLERANCE 1e-4
#define BENCH_PYTHON "/usr/bin/python3" /* Debian's, with python3-torch: the torch peer */
#define BENCH_SDPA_MAX_RAGGED 16                 /* batches of a decode case with key lengths */

typedef struct bench_config {
    int quick;
    const char *json_path;
    const char *filter;
    int list;
    int peers;            /* --peers: time the seed's PyTorch code on the seed shapes */
    const char *torch_python; /* --torch-python: a python with torch >= 2.1, whose flash
                                 SDPA is then the peer of every attention case */
    int threads;          /* the bench thread count (--threads, else the library's) */
    int min_runs;         /* timed runs: at least min_runs and at least min_seconds */
    double min_seconds;
    int warmup_runs;
    double peak_seconds;  /* per FMA peak measurement */
    int64_t read_bytes;   /* the read-bandwidth buffer: far larger than the caches */
    int read_runs;        /* passes over it (the median is kept) */
    int64_t latency_steps; /* loads of the latency chase in that buffer */
} bench_config;

typedef struct bench_case bench_case;

/* What a kind of case does. setup allocates and touches every buffer into t[] (the
 * output at t[output], contiguous, NaN); run makes one call of the code under test;
 * check returns the largest error of sampled outputs against an oracle written in the
 * bench, not the library; cleanup (optional) frees what setup made beyond t[]. Each
 * returns 0, or -1 after bench_fail / bench_lib_fail said why. */
typedef struct bench_kind {
    const char *name; /* the report's "kind": "sgemm", "sgemm_batched", "einsum", ... */
    int abs_err;      /* errors are absolute (outputs of order 1: attention), else
                         relative to sum_k |a_k b_k| (bench_rel_err) */
    int (*setup)(bench_case *c);
    int (*run)(bench_case *c);
    int (*check)(bench_case *c, double *max_err);
    void (*cleanup)(bench_case *c);
    void (*shape_text)(const bench_case *c, char *buf, size_t n); /* the table's column */
    void (*shape_json)(const bench_case *c, cJSON *o);             /* the report's fields */
} bench_kind;

struct bench_case {
    char name[64];
    const bench_kind *kind;
    const char *path; /* the code path timed: "gemm", "einsum", "reference", "fused" */
    void *state;      /* the kind's own: its shape and parameters (freed with the table) */
    double flops;     /* floating-point operations of one run */
    double bytes;     /* > 0: a memory-bound case (decoding), the bytes one run must move
                         at least; reported as GB/s against the read bandwidth */
    int threads;      /* threads the case runs on */
    double tolerance; /* largest accepted max_rel_err */
    /* Two paths of one shape (attention): the other path's case (-1: none); the
     * reference runs first, and its output is kept for the twin, which is checked
     * against it (ref_out, NULL when it did not run just before). */
    int twin;
    int is_reference;
    const ta_tensor *ref_out;
    char skip_reason[160]; /* non-empty: not run, status "skipped" */
    /* Non-empty: the shape whose same-path case does this case's work with opts.causal
     * (this one passes the causal mask as a tensor); ratio_vs_causal is the time ratio. */
    char vs_causal[48];
    /* Non-empty: another case (its full name) this one is timed against: ratio_vs =
     * this median / (vs_scale * that median), reported under the JSON key vs_key
     * ("ratio_vs_f32": a half-precision cache against float32, "ratio_vs_contiguous",
     * "ratio_vs_padded_share": varlen against its padded batch's time scaled by the real
     * (query, key) pairs' share). */
    char vs_case[64];
    char vs_key[32];
    double vs_scale;

    /* Buffers: owned between setup and teardown (t[] are freed by the harness). */
    ta_tensor t[BENCH_MAX_TENSORS];
    int output;

    /* Results. */
    const char *status; /* "ok", "check_failed", "error", "skipped", or
                           NULL (filtered out) */
    char error[512];
    double cold_s, median_s, min_s, gflops, peak_gflops, peak_fraction, max_rel_err;
    int runs;
    double max_abs_diff_ref;     /* twin: max |out - out_reference| (NaN: not compared) */
    double speedup_vs_reference; /* twin: reference median / this median (NaN: unknown) */
    /* Library memory beyond the live buffers when the call started: the peak during a
     * timed call (largest over the timed runs) and during the cold call; -1: unknown. */
    double extra_bytes, extra_bytes_cold;
    double speedup_vs_torch; /* sdpa: the torch peer's median / this median (NaN: unknown) */
    /* bytes > 0: bytes / median_s in GB/s, the read bandwidth measured on the case's
     * thread count (0: not measured), and their ratio (NaN: unknown). */
    double gbs, read_gbs, bandwidth_fraction;
    /* 1 when a memory-bound case ran and its bytes <= the last-level cache
     * (bench_state.llc_bytes; bench_finish_ratios); else 0 */
    int fits_llc;
    double ratio_vs_causal; /* vs_causal: this median / that case's median (NaN: unknown) */
    double ratio_vs;        /* vs_case: see there (NaN: unknown) */
    /* The same ratio (ratio_vs when vs_case is set, else ratio_vs_causal) timed in
     * alternation: after every case ran, this case and its partner run one after the
     * other in rounds, and this is the median over the rounds of this run's time / the
     * partner's (over vs_scale), so that the load of a shared machine, which moves from
     * one minute to the next, falls on both alike. NaN: not measured; rounds: how many. */
    double ratio_alternating;
    int ratio_rounds;
    /* A compute case (flops, no bytes; not the reference path): its fraction of the FMA
     * peak timed in alternation, after every case ran: rounds of one call between two
     * short peak measurements (bench_fma_peak over ~20 ms), and the median over the rounds
     * of the call's GFLOP/s over the higher of its two peaks, so that a host whose speed
     * moves within a run weighs both alike. NaN: not measured; rounds: how many. */
    double peak_fraction_alternating;
    int peak_rounds;
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
    double read_gbs, read_gbs_1thread; /* read bandwidth, bench threads and 1 (0: unknown) */
    double read_spread; /* largest relative change of a bandwidth between its two measurements */
    double read_latency_ns; /* a load that misses every cache, 1 thread (0: unknown) */
    /* The largest cache of cpu0 (its last level, shared or not), in bytes, as Linux's
     * sysfs reports it (0: unknown): a memory-bound case whose bytes fit in it may be
     * read from it by its repeated calls, not from memory (bench_case.fits_llc). */
    int64_t llc_bytes;
    bench_case cases[BENCH_MAX_CASES];
    int ncases;
    double *times; /* BENCH_MAX_RUNS timings, allocated once */
    /* A reference output kept for its twin, which runs next on the same inputs
     * (kept_for: that case's index, -1: none). */
    ta_tensor kept;
    int kept_for;
    /* --peers: what the torch peer reported (JSON lines, parsed), or why it did not run. */
    struct {
        const char *status; /* NULL (not asked), "ok", "skipped" */
        char reason[512];
        char command[16384]; /* torch_sdpa.py gets every attention shape as JSON */
        cJSON *rows; /* an array of the peer's JSON objects */
    } torch;
} bench_state;

/* ---- harness.c: the case table and a case's life */

/* Appends a case; the table takes c->state (freed by bench_cases_free, or here when the
 * case cannot be added: state NULL, i.e. out of memory, or the table is full, each
 * with a warning). Returns the case's index or -1. */
int bench_add_case(bench_state *s, const bench_case *c);
/* A copy of n bytes of a kind's state in new memory (NULL: out of memory). */
void *bench_state_dup(const void *state, size_t n);
void bench_cases_free(bench_state *s);
int bench_selected(const bench_state *s, int i); /* --filter keeps case i */
int bench_case_ok(const bench_case *c);          /* status "ok" */
/* Runs every selected case; -1 if one failed. */
int bench_run_cases(bench_state *s);
/* peak_fraction and speedup_vs_reference, once the peaks are final. */
void bench_finish_ratios(bench_state *s);

/* Record why a case failed; return -1 so callers can `return bench_fail(...)`. */
int bench_fail(bench_case *c, const char *fmt, ...);
int bench_lib_fail(bench_case *c, const char *what, ta_status st); /* keeps its status */

/* A new tensor filled with NaN: an element the code under test forgets to write fails
 * the check instead of passing as a stale value. */
int bench_new_output(bench_case *c, ta_tensor *t, int ndim, const int64_t *shape);
/* The first element that is not finite, or -1. */
int64_t bench_first_nonfinite(const ta_tensor *t);
/* max |t[output] - ref_out| over every element (NaN counts as infinite); also kept as
 * the case's max_abs_diff_ref. Call only when c->ref_out is set. */
double bench_diff_vs_reference(bench_case *c);
/* The error of an element relative to sum_k |a_k b_k|: the scale on which float32
 * rounding of a dot product is bounded, so cancellation cannot fake a failure. */
double bench_rel_err(double got, double ref, double scale);
/* The larger of two errors; a NaN error counts as infinite (an unwritten element). */
double bench_worse(double worst, double err);

/* xorshift64*: sampled check positions, independent of the library's RNG. */
uint64_t bench_rand(uint64_t *s);

/* The checked output elements: the first, the last, BENCH_SAMPLES random ones, then
 * BENCH_RUN consecutive ones from a random start (whole rows, so every column of a
 * tile and its edges is seen). Fixed seeds: a failure reproduces. */
typedef struct bench_sampler {
    uint64_t rng;
    int64_t total, run_start;
    int n;
} bench_sampler;
bench_sampler bench_sampler_start(int64_t total, uint64_t seed);
int64_t bench_sampler_next(bench_sampler *s); /* the next element, or -1 when done */

/* The progress line on stderr (rewritten in place on a terminal), and its clearing
 * before anything else is printed. */
void bench_progress(bench_state *s, const char *fmt, ...);
void bench_progress_clear(bench_state *s);

/* ---- alloc_count.c: extra_bytes */

void bench_install_counting_allocator(void);
size_t bench_mem_mark(void);             /* bytes outstanding now; resets the peak to it */
double bench_mem_extra_since(size_t base); /* peak above base since the mark; -1: unknown */

/* ---- machine.c: the FMA peaks and the read bandwidth */

int bench_measure_machine(bench_state *s); /* every supported ISA, 1 and bench threads */
int bench_peak_for(bench_state *s, ta_isa isa, int threads, double *gflops);
int bench_recheck_peaks(bench_state *s); /* and the read bandwidth */
double bench_known_peak(const bench_state *s, ta_isa isa, int threads); /* 0: not measured */
double bench_known_bandwidth(const bench_state *s, int threads);        /* 0: not measured */

/* ---- cases.c and the builders of each kind */

void bench_build_cases(bench_state *s);
void bench_add_sgemm(bench_state *s, const char *name, int64_t M, int64_t N, int64_t K);
void bench_add_sgemm_batched(bench_state *s, const char *name, int64_t batch, int64_t M,
                             int64_t N, int64_t K, const char *layout);
void bench_add_einsum(bench_state *s, const char *name, const char *spec, const char *letters,
                      int64_t B, int64_t H, int64_t L, int64_t D);
void bench_add_sdpa(bench_state *s, const char *name, int64_t B, int64_t H, int64_t Hkv,
                    int64_t Lq, int64_t Lk, int64_t D, ta_causal causal);
/* A forward shape (Lq = Lk = L, H = Hkv) with Q, K and V of dtype (O float32), each path
 * timed against the same path of the float32 case vs ("ratio_vs_f32"). */
void bench_add_sdpa_dtype(bench_state *s, const char *name, int64_t B, int64_t H, int64_t L,
                          int64_t D, ta_causal causal, ta_dtype dtype, const char *vs);
/* One new token (Lq = 1, bottom-right) against a cache of Lk keys; key_lengths: NULL,
 * or B (<= BENCH_SDPA_MAX_RAGGED) lengths passed as opts.key_lengths. Memory-bound: bytes
 * count the keys and values each sequence reads, Q and O. */
void bench_add_sdpa_decode(bench_state *s, const char *name, int64_t B, int64_t H, int64_t Hkv,
                           int64_t Lk, int64_t D, const int64_t *key_lengths);
/* The seed's causal mask triu(ones(L, L), 1) passed as a [L, L] TA_MASK_BLOCK tensor, on
 * the shape of the case `causal_name` (its opts.causal twin): the same flops. */
void bench_add_sdpa_causal_mask(bench_state *s, const char *name, const char *causal_name,
                                int64_t B, int64_t H, int64_t L, int64_t D);
/* Attention variants (issue 12), forward: a causal sliding window (each row sees itself
 * and the `left` keys before it), its flops the window's pairs only; and softcap, ALiBi
 * (BLOOM's slopes) or sinks on a plain shape, timed against the case `vs` of the same
 * path ("ratio_vs_plain"). */
void bench_add_sdpa_window(bench_state *s, const char *name, int64_t B, int64_t H, int64_t L,
                           int64_t D, int64_t left);
void bench_add_sdpa_variant(bench_state *s, const char *name, int64_t B, int64_t H, int64_t L,
                            int64_t D, float softcap, int alibi, int sinks, const char *vs);
void bench_add_sdpa_backward(bench_state *s, const char *name, int64_t B, int64_t H,
                             int64_t L, int64_t D, ta_causal causal);
/* The backward with Q, K, V and dO of dtype (O and the gradients float32), each path
 * timed against the same path of the float32 case vs ("ratio_vs_f32"; NULL: none). */
void bench_add_sdpa_backward_dtype(bench_state *s, const char *name, int64_t B, int64_t H,
                                   int64_t L, int64_t D, ta_causal causal, ta_dtype dtype,
                                   const char *vs);
/* cases_kvcache.c. One decode step through ta_sdpa_kvcache (fused): B sequences of lens[b]
 * keys (NULL: all Lmax) after appending one, a cache of Lmax keys per sequence of dtype,
 * contiguous (block 0) or paged in blocks of `block` rows scattered at random, q of
 * q_dtype; vs (NULL: none) names a case to time against, with its scale and JSON key (see
 * vs_case). */
void bench_add_kv_decode(bench_state *s, const char *name, int64_t B, int64_t H, int64_t Hkv,
                         int64_t D, int64_t Lmax, const int64_t *lens, int64_t block,
                         ta_dtype dtype, ta_dtype q_dtype, const char *vs, double vs_scale,
                         const char *vs_key);
/* Causal prefill of nseq packed sequences of lens[b] tokens (cu_seqlens), and the same
 * batch padded to the longest as the sdpa pair "<name>_padded"; ratio_vs_padded_share. */
void bench_add_varlen_prefill(bench_state *s, const char *name, int64_t nseq, const int64_t *lens,
                              int64_t H, int64_t D);

/* ---- peers.c: --peers */

void bench_run_torch_peer(bench_state *s);
void bench_finish_torch_ratios(bench_state *s);
void bench_print_torch(const bench_state *s);

/* ---- report_table.c, report_json.c */

void bench_print_machine(const bench_state *s);
void bench_print_table(const bench_state *s);
int bench_write_json(const bench_state *s, const char *path);
/* Adds the n integer fields keys[i]: v[i] to o, in that order (a kind's shape fields). */
void bench_json_ints(cJSON *o, int n, const char *const keys[], const int64_t v[]);

#endif
