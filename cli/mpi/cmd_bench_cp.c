/* mpirun -np P tensorattn bench --context-parallel SCHEMES [shape flags]: times context
 * parallelism against the single-process run on the same cores, and reports per rank the
 * time computing, the time blocked in MPI, the bytes sent and how much of the transfer the
 * computation hid; for causal attention the balance of the ranks' compute. */
/* clock_gettime, nanosleep, strtok_r: -std=c11 declares them only with this (gcc's
 * -fopenmp implies _REENTRANT, hence an older POSIX level; clang's does not) */
#define _POSIX_C_SOURCE 200809L
#include "cli_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char help[] =
    "usage: mpirun -np P tensorattn bench --context-parallel ring,zigzag,ulysses|all\n"
    "           [--batch 1] [--heads 8] [--kv-heads H] [--seq 16384] [--dim 64]\n"
    "           [--no-causal] [--backward] [--threads N] [--repeat 1]\n"
    "\n"
    "Times context parallelism (forward, or forward and backward) on random inputs\n"
    "against one process running ta_sdpa on the same cores (rank 0 with threads x P\n"
    "threads while the other ranks sleep), after one warm-up run of each; the best of\n"
    "--repeat runs counts. Per rank: wall time of the call, its CPU time (all threads;\n"
    "MPI's waits spin, so they count), time computing, time blocked\n"
    "waiting for data in MPI, time in the agreements (waiting for the slowest rank),\n"
    "bytes sent, the time the same bytes take alone (a blocking ring exchange) and the\n"
    "overlap (1 - blocked / that time: the share of the transfer hidden behind\n"
    "computation; waiting for a slower neighbour counts as blocked). Per scheme: wall\n"
    "time against the single process, the balance (max / mean compute time of the\n"
    "ranks) and the largest difference from the single process's output (exit 1 beyond\n"
    "1e-4). --threads: per rank (default as for sdpa).\n";

enum { O_CP, O_B, O_H, O_HKV, O_L, O_D, O_NOCAUSAL, O_BWD, O_THREADS, O_REPEAT, O_N };

typedef struct bench_cfg {
    int64_t B, H, Hkv, L, D;
    bool causal, backward;
    int repeat;
    ta_cp_scheme scheme[3];
    int nscheme;
} bench_cfg;

static int parse(cli_opt *o, int argc, char **argv, bench_cfg *c)
{
    const char *pos[1];
    int npos;
    int rc = cli_parse(argc, argv, 2, o, pos, 0, &npos, help);
    if (rc) return rc;
    long long v[5] = {1, 8, -1, 16384, 64}, rep = 1;
    const int which[5] = {O_B, O_H, O_HKV, O_L, O_D};
    for (int i = 0; i < 5; i++)
        if (o[which[i]].given && !cli_int(o[which[i]].name, o[which[i]].value, 1, 1 << 24, &v[i]))
            return CLI_USAGE;
    if (o[O_REPEAT].given && !cli_int("--repeat", o[O_REPEAT].value, 1, 100, &rep)) return CLI_USAGE;
    *c = (bench_cfg){.B = v[0], .H = v[1], .Hkv = v[2] < 0 ? v[1] : v[2], .L = v[3], .D = v[4],
                     .causal = !o[O_NOCAUSAL].given, .backward = o[O_BWD].given,
                     .repeat = (int)rep};
    if (c->H % c->Hkv) return cli_error(CLI_USAGE, "--heads must be a multiple of --kv-heads");
    char list[64];
    snprintf(list, sizeof list, "%s", strcmp(o[O_CP].value, "all") ? o[O_CP].value
                                                                     : "ring,zigzag,ulysses");
    for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (c->nscheme == 3 || ta_cp_scheme_parse(&c->scheme[c->nscheme++], s))
            return cli_error(CLI_USAGE, "--context-parallel expects up to three of ring, zigzag, "
                             "ulysses (comma-separated) or all, got '%s'", o[O_CP].value);
    }
    return cli_threads(o) ? CLI_OK : CLI_USAGE;
}

/* CPU time of this process (all its threads): against the wall time it shows how much of
 * a run a rank was descheduled on a shared machine. */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Waits for the other ranks without spinning on a core (the single-process run has them). */
static void sleeping_barrier(void)
{
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    for (int done = 0;;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
}

typedef struct bench_data {
    ta_tensor full[4];    /* q, k, v, dout */
    ta_tensor ref[2];     /* the single process's O and dQ (rank 0) */
    ta_tensor in[4];      /* this rank's shards */
    ta_tensor out[5];     /* o, lse, dq, dk, dv of this rank */
} bench_data;

static ta_status make_inputs(bench_data *d, const bench_cfg *c)
{
    const int64_t sq[4] = {c->B, c->H, c->L, c->D}, skv[4] = {c->B, c->Hkv, c->L, c->D};
    ta_status st = TA_OK;
    for (int i = 0; i < 4 && !st; i++) {
        st = ta_tensor_empty(&d->full[i], 4, i == 1 || i == 2 ? skv : sq);
        if (!st) st = ta_randn(&d->full[i], 11 + (uint64_t)i);
    }
    return st;
}

/* Rank 0 times the single process on threads x P threads (its CPU time summed over the
 * threads into *cpu); the others sleep. */
static double time_single(const cli_mpi *m, const bench_cfg *c, bench_data *d, ta_status *st,
                          double *cpu)
{
    double best = INFINITY;
    if (m->rank == 0) {
        int threads = ta_get_num_threads();
        ta_set_num_threads(threads * m->P);
        const int64_t sl[3] = {c->B, c->H, c->L};
        ta_tensor lse = {0}, dk = {0}, dv = {0};
        *st = ta_tensor_empty(&d->ref[0], 4, d->full[0].shape);
        if (!*st) *st = ta_tensor_empty(&lse, 3, sl);
        if (!*st && c->backward) *st = ta_tensor_empty(&d->ref[1], 4, d->full[0].shape);
        if (!*st && c->backward) *st = ta_tensor_empty(&dk, 4, d->full[1].shape);
        if (!*st && c->backward) *st = ta_tensor_empty(&dv, 4, d->full[2].shape);
        ta_sdpa_opts so = {.causal = c->causal ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE, .lse = &lse};
        ta_sdpa_opts bo = so;
        bo.lse = NULL;
        for (int r = 0; r <= c->repeat && !*st; r++) { /* r == 0: the warm-up */
            double t = MPI_Wtime(), u = cpu_now();
            *st = ta_sdpa(&d->ref[0], &d->full[0], &d->full[1], &d->full[2], &so);
            if (!*st && c->backward)
                *st = ta_sdpa_backward(&d->ref[1], &dk, &dv, &d->full[3], &d->full[0], &d->full[1],
                                       &d->full[2], &d->ref[0], &lse, &bo);
            t = MPI_Wtime() - t;
            u = cpu_now() - u;
            if (r > 0 && t < best) {
                best = t;
                *cpu = u;
            }
        }
        ta_tensor_free(&lse);
        ta_tensor_free(&dk);
        ta_tensor_free(&dv);
        ta_set_num_threads(threads);
    }
    sleeping_barrier();
    MPI_Bcast(&best, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(cpu, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return best;
}

/* One timed run of a scheme: the stats of the forward plus the backward. */
static ta_status run_scheme(const bench_cfg *c, ta_cp_scheme s, bench_data *d, ta_cp_stats *stats,
                            double *wall, double *cpu)
{
    ta_sdpa_opts so = {.causal = c->causal ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE, .lse = &d->out[1]};
    ta_sdpa_opts bo = so;
    bo.lse = NULL;
    ta_cp_stats f, b = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime(), u = cpu_now();
    ta_status st = ta_sdpa_context_parallel(MPI_COMM_WORLD, s, &d->out[0], &d->in[0], &d->in[1],
                                            &d->in[2], &so, &f);
    if (!st && c->backward)
        st = ta_sdpa_context_parallel_backward(MPI_COMM_WORLD, s, &d->out[2], &d->out[3],
                                               &d->out[4], &d->in[3], &d->in[0], &d->in[1],
                                               &d->in[2], &d->out[0], &d->out[1], &bo, &b);
    t = MPI_Wtime() - t;
    *cpu = cpu_now() - u;
    MPI_Allreduce(&t, wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *stats = (ta_cp_stats){.total_s = f.total_s + b.total_s, .compute_s = f.compute_s + b.compute_s,
                           .blocked_s = f.blocked_s + b.blocked_s, .sync_s = f.sync_s + b.sync_s,
                           .bytes_sent = f.bytes_sent + b.bytes_sent, .steps = f.steps + b.steps};
    return st;
}

/* The time the same bytes take around the ring alone (blocking exchanges of a step's size). */
static double transfer_time(const cli_mpi *m, int64_t bytes, int steps)
{
    if (m->P == 1 || bytes == 0) return 0.0;
    int64_t n = bytes / (int64_t)sizeof(float), per = n / (steps > 1 ? steps - 1 : 1) + 1;
    float *a = calloc((size_t)per, sizeof(float)), *b = calloc((size_t)per, sizeof(float));
    const int right = (m->rank + 1) % m->P, left = (m->rank + m->P - 1) % m->P;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int64_t done = 0; a && b && done < n; done += per)
        MPI_Sendrecv(a, (int)per, MPI_FLOAT, right, 9, b, (int)per, MPI_FLOAT, left, 9,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    t = MPI_Wtime() - t;
    free(a);
    free(b);
    return t;
}

/* max |x - ref| / max(1, |ref|) over rank 0's gathered output */
static double max_err(const ta_tensor *x, const ta_tensor *ref)
{
    const float *a = x->data, *b = ref->data;
    double e = 0.0;
    for (int64_t i = 0; i < ta_tensor_numel(ref); i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        e = d > e || isnan(d) ? d : e;
    }
    return e;
}

typedef struct rank_row {
    double total, cpu, compute, blocked, sync, mib, transfer;
} rank_row;

static void report(const cli_mpi *m, ta_cp_scheme s, const rank_row *row, double wall,
                   double single, double err)
{
    double cmax = 0.0, csum = 0.0;
    for (int r = 0; r < m->P; r++) {
        double overlap = row[r].transfer > 0.0 ? 1.0 - row[r].blocked / row[r].transfer : 0.0;
        overlap = s == TA_CP_ULYSSES ? NAN : overlap < 0.0 ? 0.0 : overlap > 1.0 ? 1.0 : overlap;
        printf("%-8s %4d %9.4f %9.4f %9.4f %9.4f %9.4f %9.2f %10.4f %8.2f\n",
               ta_cp_scheme_name(s), r, row[r].total, row[r].cpu, row[r].compute, row[r].blocked,
               row[r].sync, row[r].mib, row[r].transfer, overlap);
        cmax = fmax(cmax, row[r].compute);
        csum += row[r].compute;
    }
    printf("%-8s wall %.4f s = %.3fx the single process; balance (max/mean compute) %.3f; "
           "max |err| %.2e\n", ta_cp_scheme_name(s), wall, wall / single,
           csum > 0.0 ? cmax / (csum / m->P) : 1.0, err);
}

static int bench(cli_mpi *m, const bench_cfg *c)
{
    bench_data d;
    memset(&d, 0, sizeof d);
    ta_status st = make_inputs(&d, c);
    if (st) cli_mpi_fail(m, CLI_FAIL, "bench: %s", ta_last_error());
    if (cli_mpi_sync(m)) return m->code;
    double single_cpu = 0.0, single = time_single(m, c, &d, &st, &single_cpu);
    if (st) cli_mpi_fail(m, CLI_FAIL, "bench: single process: %s", ta_last_error());
    if (m->rank == 0)
        printf("context parallelism: B %lld, H %lld, Hkv %lld, L %lld, D %lld, %s, %s; P %d ranks x "
               "%d threads\nsingle process, %d threads: %.4f s (cpu %.4f s)\n%-8s %4s %9s %9s %9s "
               "%9s %9s %9s %10s %8s\n",
               (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->L,
               (long long)c->D, c->causal ? "causal" : "not causal",
               c->backward ? "forward + backward" : "forward", m->P, ta_get_num_threads(),
               ta_get_num_threads() * m->P, single, single_cpu, "scheme", "rank", "total_s",
               "cpu_s", "compute_s", "blocked_s", "sync_s", "sent_MiB", "transfer_s", "overlap");
    for (int i = 0; i < c->nscheme && !cli_mpi_sync(m); i++) {
        const ta_cp_scheme s = c->scheme[i];
        for (int j = 0; j < 4; j++) ta_tensor_free(&d.in[j]);
        for (int j = 0; j < 5; j++) ta_tensor_free(&d.out[j]);
        for (int j = 0; j < 4 && !st; j++) st = cli_mpi_shard(&d.in[j], &d.full[j], s, m);
        const int64_t Lr = d.in[0].shape[2];
        const int64_t so[5][4] = {{c->B, c->H, Lr, c->D}, {c->B, c->H, Lr}, {c->B, c->H, Lr, c->D},
                                  {c->B, c->Hkv, Lr, c->D}, {c->B, c->Hkv, Lr, c->D}};
        for (int j = 0; j < 5 && !st; j++) st = ta_tensor_empty(&d.out[j], j == 1 ? 3 : 4, so[j]);
        if (st) cli_mpi_fail(m, CLI_FAIL, "bench: %s", ta_last_error());
        if (cli_mpi_sync(m)) break;
        ta_cp_stats stats;
        double wall, cpu, best = INFINITY;
        rank_row mine = {0}, *rows = malloc(sizeof(rank_row) * (size_t)m->P);
        for (int r = 0; r <= c->repeat && !st; r++) { /* r == 0: the warm-up */
            st = run_scheme(c, s, &d, &stats, &wall, &cpu);
            if (!st && r > 0 && wall < best) {
                best = wall;
                mine = (rank_row){stats.total_s, cpu, stats.compute_s, stats.blocked_s,
                                  stats.sync_s, (double)stats.bytes_sent / 1048576.0, 0.0};
                mine.transfer = s == TA_CP_ULYSSES ? 0.0
                                                   : transfer_time(m, stats.bytes_sent, stats.steps);
            }
        }
        if (st) { /* agreed by the library */
            free(rows);
            return cli_mpi_lib_fail(m, "bench");
        }
        MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, rows, (int)sizeof mine, MPI_BYTE, 0,
                   MPI_COMM_WORLD);
        ta_tensor o = {0};
        if (m->rank == 0 && ta_tensor_empty(&o, 4, d.full[0].shape))
            cli_mpi_fail(m, CLI_FAIL, "bench: %s", ta_last_error());
        if (!cli_mpi_sync(m) && !cli_mpi_gather(&o, &d.out[0], s, m) && m->rank == 0) {
            double err = max_err(&o, &d.ref[0]);
            report(m, s, rows, best, single, err);
            if (!(err <= 1e-4))
                cli_mpi_fail(m, CLI_FAIL, "bench: %s differs from the single process by %.2e",
                             ta_cp_scheme_name(s), err);
        }
        ta_tensor_free(&o);
        free(rows);
    }
    for (int j = 0; j < 4; j++) {
        ta_tensor_free(&d.full[j]);
        ta_tensor_free(&d.in[j]);
    }
    for (int j = 0; j < 5; j++) ta_tensor_free(&d.out[j]);
    ta_tensor_free(&d.ref[0]);
    ta_tensor_free(&d.ref[1]);
    return cli_mpi_sync(m);
}

int cmd_bench_context_parallel(int argc, char **argv)
{
    cli_mpi m;
    cli_mpi_init(&m, &argc, &argv);
    cli_opt opts[O_N + 1] = {
        [O_CP] = {.name = "--context-parallel", .takes_value = true},
        [O_B] = {.name = "--batch", .takes_value = true},
        [O_H] = {.name = "--heads", .takes_value = true},
        [O_HKV] = {.name = "--kv-heads", .takes_value = true},
        [O_L] = {.name = "--seq", .takes_value = true},
        [O_D] = {.name = "--dim", .takes_value = true},
        [O_NOCAUSAL] = {.name = "--no-causal"},
        [O_BWD] = {.name = "--backward"},
        [O_THREADS] = {.name = "--threads", .takes_value = true},
        [O_REPEAT] = {.name = "--repeat", .takes_value = true},
    };
    bench_cfg c = {0};
    cli_mpi_quiet(&m);
    int rc = parse(opts, argc, argv, &c);
    cli_mpi_loud(&m);
    if (rc) return cli_mpi_finish(&m, rc == CLI_HELP_SHOWN ? CLI_OK : rc);
    if (!opts[O_THREADS].given) cli_mpi_default_threads(&m);
    return cli_mpi_finish(&m, bench(&m, &c));
}
