/* mpirun -np P tensorattn sdpa --context-parallel ring|zigzag|ulysses --q Q.npy --k K.npy
 * --v V.npy -o O.npy [...]: every rank reads the same files and takes its shard, the ranks
 * compute together (ta_sdpa_context_parallel and its backward), rank 0 gathers and writes
 * the outputs. Every failure is agreed: each rank exits with the same code, rank 0 prints
 * the one error line. */
#include "cli_mpi.h"

#include <stdio.h>
#include <string.h>

static const char help[] =
    "usage: mpirun -np P tensorattn sdpa --context-parallel ring|zigzag|ulysses\n"
    "                       --q Q.npy --k K.npy --v V.npy -o O.npy\n"
    "                       [--causal [top_left|bottom_right]] [--scale S] [--threads N]\n"
    "                       [--lse LSE.npy] [--key-lengths L.npy]\n"
    "                       [--window LEFT,RIGHT] [--softcap C] [--alibi-slopes S.npy]\n"
    "                       [--sinks S.npy] [--dsinks dS.npy]\n"
    "                       [--grad-out dO.npy --dq dQ.npy --dk dK.npy --dv dV.npy]\n"
    "\n"
    "Scaled dot-product attention split over the MPI ranks along the sequence (context\n"
    "parallelism): every rank reads the same files and takes its shard, rank 0 gathers\n"
    "the results and writes them. Self-attention shapes: Q [B,H,L,D], K [B,Hkv,L,D],\n"
    "V [B,Hkv,L,Dv] (H % Hkv == 0), O [B,H,L,Dv]; the results equal the single-process\n"
    "run within 1e-5.\n"
    "  ring     rank r holds rows r*L/P .. (r+1)*L/P - 1; K/V blocks travel around the\n"
    "           ring, sent while the block in hand is computed\n"
    "  zigzag   the ring over 2P chunks, rank r holding chunks r and 2P-1-r, so causal\n"
    "           work is the same on every rank\n"
    "  ulysses  all-to-all from sequence shards to head shards and back (needs\n"
    "           H % P == 0 and Hkv % P == 0)\n"
    "  Lengths that do not divide evenly give the first shards one row more.\n"
    "  --causal, --scale, --lse, --key-lengths, the variants (--window, --softcap,\n"
    "  --alibi-slopes, --sinks, --dsinks) and the backward flags as in tensorattn sdpa\n"
    "  (--causal's two alignments agree here, since Lq == Lk; the key lengths count keys\n"
    "  of the whole sequence, and rel = j - i counts global positions).\n"
    "  --threads  threads per rank (default: the cores this rank may use, shared among\n"
    "             the ranks on its node; OMP_NUM_THREADS is respected)\n"
    "Not with --context-parallel: --mask, --weights, --cu-seqlens-q/-k, --kv-dtype.\n"
    "On an error every rank exits non-zero (2 usage, 1 input or computation) and rank 0\n"
    "prints the one error line. As root in a container: mpirun --allow-run-as-root\n"
    "--oversubscribe, with OMPI_MCA_btl_vader_single_copy_mechanism=none set.\n";

enum { O_CP, O_Q, O_K, O_V, O_OUT, O_CAUSAL, O_SCALE, O_THREADS, O_LSE, O_GRAD, O_DQ, O_DK, O_DV,
       O_KLEN, O_WINDOW, O_SOFTCAP, O_ALIBI, O_SINKS, O_DSINKS, O_REFUSED };

/* sdpa's flags that context parallelism does not take (a clear usage error, not
 * "unknown option") */
static const char *const refused[] = {"--mask",          "--mask-mode",     "--weights",
                                      "--cu-seqlens-q",  "--cu-seqlens-k",  "--kv-dtype"};
enum { N_REFUSED = sizeof refused / sizeof refused[0] };

typedef struct cp_args {
    ta_cp_scheme scheme;
    ta_sdpa_opts so;
    bool grad;
    const char *in[6];  /* --q, --k, --v, --grad-out, --alibi-slopes, --sinks (or NULL) */
    const char *klen;   /* --key-lengths, or NULL */
    const char *out[5]; /* -o, --lse, --dq, --dk, --dv (NULL: not wanted) */
    const char *dsinks; /* --dsinks, or NULL */
} cp_args;

/* The flags (the same verdict on every rank, printed by rank 0 alone). */
static int parse_flags(cli_opt *opts, int argc, char **argv, cp_args *a)
{
    const char *pos[1];
    int npos;
    int rc = cli_parse(argc, argv, 2, opts, pos, 0, &npos, help);
    if (rc) return rc;
    for (int i = 0; i < N_REFUSED; i++)
        if (opts[O_REFUSED + i].given)
            return cli_error(CLI_USAGE, "%s does not combine with --context-parallel (context "
                             "parallelism takes --causal, --scale, --lse, --key-lengths, the "
                             "variants and the backward flags)",
                             refused[i]);
    if (ta_cp_scheme_parse(&a->scheme, opts[O_CP].value))
        return cli_error(CLI_USAGE, "--context-parallel expects ring, zigzag or ulysses, got '%s'",
                         opts[O_CP].value);
    if (!opts[O_Q].given || !opts[O_K].given || !opts[O_V].given || !opts[O_OUT].given)
        return cli_error(CLI_USAGE, "sdpa needs --q, --k, --v and -o (see --help)");
    a->grad = opts[O_GRAD].given || opts[O_DQ].given || opts[O_DK].given || opts[O_DV].given;
    if (a->grad && !(opts[O_GRAD].given && opts[O_DQ].given && opts[O_DK].given && opts[O_DV].given))
        return cli_error(CLI_USAGE, "the backward pass needs all of --grad-out, --dq, --dk and --dv");
    if (opts[O_CAUSAL].given) {
        const char *c = opts[O_CAUSAL].value;
        if (!c || strcmp(c, "top_left") == 0) a->so.causal = TA_CAUSAL_TOP_LEFT;
        else if (strcmp(c, "bottom_right") == 0) a->so.causal = TA_CAUSAL_BOTTOM_RIGHT;
        else return cli_error(CLI_USAGE, "--causal expects top_left or bottom_right, got '%s'", c);
    }
    if (opts[O_SCALE].given && !cli_float("--scale", opts[O_SCALE].value, &a->so.scale))
        return CLI_USAGE;
    if (opts[O_SCALE].given && a->so.scale == 0.0f)
        return cli_error(CLI_USAGE, "--scale must be nonzero");
    if (opts[O_DSINKS].given && !(a->grad && opts[O_SINKS].given))
        return cli_error(CLI_USAGE, "--dsinks needs the backward pass (--grad-out ...) and "
                                    "--sinks");
    if (!cli_variant_flags(opts, &a->so)) return CLI_USAGE;
    if (!cli_threads(opts)) return CLI_USAGE;
    const int in[6] = {O_Q, O_K, O_V, O_GRAD, O_ALIBI, O_SINKS};
    const int out[5] = {O_OUT, O_LSE, O_DQ, O_DK, O_DV};
    for (int i = 0; i < 6; i++) a->in[i] = opts[in[i]].given ? opts[in[i]].value : NULL;
    a->dsinks = opts[O_DSINKS].given ? opts[O_DSINKS].value : NULL;
    for (int i = 0; i < 5; i++) a->out[i] = opts[out[i]].given ? opts[out[i]].value : NULL;
    a->klen = opts[O_KLEN].given ? opts[O_KLEN].value : NULL;
    const cli_file ins[] = {{"--q", a->in[0]},        {"--k", a->in[1]},
                            {"--v", a->in[2]},        {"--grad-out", a->in[3]},
                            {"--alibi-slopes", a->in[4]}, {"--sinks", a->in[5]},
                            {"--key-lengths", a->klen}};
    const cli_file outs[] = {{"-o", a->out[0]}, {"--lse", a->out[1]}, {"--dq", a->out[2]},
                             {"--dk", a->out[3]}, {"--dv", a->out[4]}, {"--dsinks", a->dsinks}};
    if (!cli_outputs_apart(ins, CLI_COUNT(ins), outs, CLI_COUNT(outs))) return CLI_USAGE;
    return CLI_OK;
}

/* Every tensor of a run: the full inputs, this rank's shards, its outputs, and (on rank 0)
 * the gathered outputs. */
typedef struct cp_data {
    ta_tensor full[6], in[4];  /* q, k, v, dout; full only: ALiBi slopes, sinks */
    ta_tensor out[5], gath[5]; /* o, lse, dq, dk, dv */
    ta_tensor dsinks;          /* [H], the same on every rank */
    int64_t *klen;             /* --key-lengths [B] (global lengths), or NULL */
} cp_data;

static void free_data(cp_data *d)
{
    for (int i = 0; i < 6; i++) ta_tensor_free(&d->full[i]);
    for (int i = 0; i < 4; i++) ta_tensor_free(&d->in[i]);
    ta_tensor_free(&d->dsinks);
    for (int i = 0; i < 5; i++) {
        ta_tensor_free(&d->out[i]);
        ta_tensor_free(&d->gath[i]);
    }
    ta_npy_free(d->klen);
}

/* The shapes of o, lse, dq, dk, dv for L rows. */
static int out_shape(int64_t shape[4], const cp_data *d, int i, int64_t L)
{
    const ta_tensor *q = &d->full[0], *k = &d->full[1], *v = &d->full[2];
    const int64_t s[5][4] = {{q->shape[0], q->shape[1], L, v->shape[3]},
                             {q->shape[0], q->shape[1], L, 0},
                             {q->shape[0], q->shape[1], L, q->shape[3]},
                             {k->shape[0], k->shape[1], L, k->shape[3]},
                             {k->shape[0], k->shape[1], L, v->shape[3]}};
    memcpy(shape, s[i], sizeof s[i]);
    return i == 1 ? 3 : 4;
}

/* Reads the inputs on every rank and takes this rank's shards; allocates its outputs. */
static void load(cli_mpi *m, const cp_args *a, cp_data *d)
{
    static const char *const flag[6] = {"--q", "--k", "--v", "--grad-out", "--alibi-slopes",
                                        "--sinks"};
    const int n = a->grad ? 4 : 3;
    for (int i = 0; i < 6 && !m->code; i++)
        if (a->in[i] && ta_npy_load(&d->full[i], a->in[i]))
            cli_mpi_fail(m, CLI_FAIL, "reading %s: %s", flag[i], ta_last_error());
    if (m->code) return;
    const ta_tensor *f = d->full;
    if (f[0].ndim != 4 || f[1].ndim != 4 || f[2].ndim != 4 || (a->grad && f[3].ndim != 4)) {
        cli_mpi_fail(m, CLI_FAIL, "--q, --k, --v%s must have 4 dims [B,H,L,D] with "
                     "--context-parallel", a->grad ? " and --grad-out" : "");
        return;
    }
    if (f[0].shape[2] != f[1].shape[2] || f[0].shape[2] != f[2].shape[2]) {
        cli_mpi_fail(m, CLI_FAIL, "--context-parallel is self-attention: Q, K and V must hold "
                     "the same sequence length, got %lld, %lld and %lld",
                     (long long)f[0].shape[2], (long long)f[1].shape[2], (long long)f[2].shape[2]);
        return;
    }
    if (a->klen) {
        int nd;
        int64_t shape[TA_MAX_DIMS];
        if (ta_npy_load_int64(&d->klen, &nd, shape, a->klen))
            cli_mpi_fail(m, CLI_FAIL, "reading --key-lengths: %s", ta_last_error());
        else if (nd != 1 || shape[0] != f[0].shape[0])
            cli_mpi_fail(m, CLI_FAIL, "--key-lengths must have shape [B] = [%lld], got %d dims%s",
                         (long long)f[0].shape[0], nd, nd == 1 ? " of another length" : "");
    }
    for (int i = 0; i < n && !m->code; i++)
        if (cli_mpi_shard(&d->in[i], &f[i], a->scheme, m))
            cli_mpi_fail(m, CLI_FAIL, "sdpa: %s", ta_last_error());
    const int64_t Lr = d->in[0].shape[2];
    for (int i = 0; i < 5 && !m->code; i++) {
        if (i == 1 ? !(a->out[1] || a->grad) : i >= 2 && !a->grad) continue;
        int64_t shape[4];
        int nd = out_shape(shape, d, i, Lr);
        if (ta_tensor_empty(&d->out[i], nd, shape))
            cli_mpi_fail(m, CLI_FAIL, "sdpa: %s", ta_last_error());
    }
    if (a->dsinks && !m->code && ta_tensor_empty(&d->dsinks, 1, &f[0].shape[1]))
        cli_mpi_fail(m, CLI_FAIL, "sdpa: %s", ta_last_error());
}

/* Gathers the outputs on rank 0 and writes them there. */
static void gather_and_write(cli_mpi *m, const cp_args *a, cp_data *d)
{
    static const char *const flag[5] = {"-o", "--lse", "--dq", "--dk", "--dv"};
    const int64_t L = d->full[0].shape[2];
    for (int i = 0; i < 5 && m->rank == 0; i++) {
        int64_t shape[4];
        int nd = out_shape(shape, d, i, L);
        if (a->out[i] && ta_tensor_empty(&d->gath[i], nd, shape))
            cli_mpi_fail(m, CLI_FAIL, "sdpa: %s", ta_last_error());
    }
    if (cli_mpi_sync(m)) return;
    for (int i = 0; i < 5; i++)
        if (a->out[i] && cli_mpi_gather(&d->gath[i], &d->out[i], a->scheme, m))
            cli_mpi_fail(m, CLI_FAIL, "sdpa: %s", ta_last_error());
    /* all or none (cli_save_all); dsinks: summed over every rank's rows, the same
     * everywhere */
    if (m->rank == 0 && !m->code) {
        cli_out outs[6];
        for (int i = 0; i < 5; i++) outs[i] = (cli_out){flag[i], a->out[i], &d->gath[i]};
        outs[5] = (cli_out){"--dsinks", a->dsinks, &d->dsinks};
        char why[CLI_WHY_MAX];
        if (!cli_save_all(outs, CLI_COUNT(outs), why, sizeof why)) cli_mpi_fail(m, CLI_FAIL, "%s", why);
    }
    cli_mpi_sync(m);
}

static int run(cli_mpi *m, cp_args *a)
{
    cp_data d;
    memset(&d, 0, sizeof d);
    load(m, a, &d);
    int rc = cli_mpi_sync(m);
    if (!rc) {
        a->so.lse = d.out[1].data ? &d.out[1] : NULL;
        a->so.key_lengths = d.klen;
        a->so.alibi_slopes = a->in[4] ? &d.full[4] : NULL;
        a->so.sinks = a->in[5] ? &d.full[5] : NULL;
        if (ta_sdpa_context_parallel(MPI_COMM_WORLD, a->scheme, &d.out[0], &d.in[0], &d.in[1],
                                     &d.in[2], &a->so, NULL))
            rc = cli_mpi_lib_fail(m, "sdpa");
    }
    if (!rc && a->grad) {
        ta_sdpa_opts bo = a->so;
        bo.lse = NULL;
        bo.dsinks = a->dsinks ? &d.dsinks : NULL;
        if (ta_sdpa_context_parallel_backward(MPI_COMM_WORLD, a->scheme, &d.out[2], &d.out[3],
                                              &d.out[4], &d.in[3], &d.in[0], &d.in[1], &d.in[2],
                                              &d.out[0], &d.out[1], &bo, NULL))
            rc = cli_mpi_lib_fail(m, "sdpa backward");
    }
    if (!rc) {
        gather_and_write(m, a, &d);
        rc = m->code;
    }
    free_data(&d);
    return rc;
}

int cmd_sdpa_context_parallel(int argc, char **argv)
{
    cli_mpi m;
    cli_mpi_init(&m, &argc, &argv);
    cli_opt opts[O_REFUSED + N_REFUSED + 1] = {
        [O_CP] = {.name = "--context-parallel", .takes_value = true},
        [O_Q] = {.name = "--q", .takes_value = true},
        [O_K] = {.name = "--k", .takes_value = true},
        [O_V] = {.name = "--v", .takes_value = true},
        [O_OUT] = {.name = "-o", .takes_value = true},
        [O_CAUSAL] = {.name = "--causal", .optional_value = true},
        [O_SCALE] = {.name = "--scale", .takes_value = true},
        [O_THREADS] = {.name = "--threads", .takes_value = true},
        [O_LSE] = {.name = "--lse", .takes_value = true},
        [O_GRAD] = {.name = "--grad-out", .takes_value = true},
        [O_DQ] = {.name = "--dq", .takes_value = true},
        [O_DK] = {.name = "--dk", .takes_value = true},
        [O_DV] = {.name = "--dv", .takes_value = true},
        [O_KLEN] = {.name = "--key-lengths", .takes_value = true},
        [O_WINDOW] = {.name = "--window", .takes_value = true},
        [O_SOFTCAP] = {.name = "--softcap", .takes_value = true},
        [O_ALIBI] = {.name = "--alibi-slopes", .takes_value = true},
        [O_SINKS] = {.name = "--sinks", .takes_value = true},
        [O_DSINKS] = {.name = "--dsinks", .takes_value = true},
    };
    for (int i = 0; i < N_REFUSED; i++)
        opts[O_REFUSED + i] = (cli_opt){.name = refused[i], .takes_value = true};
    cp_args a = {0};
    cli_mpi_quiet(&m);
    int rc = parse_flags(opts, argc, argv, &a);
    cli_mpi_loud(&m);
    if (rc) return cli_mpi_finish(&m, rc == CLI_HELP_SHOWN ? CLI_OK : rc);
    if (!opts[O_THREADS].given) cli_mpi_default_threads(&m);
    return cli_mpi_finish(&m, run(&m, &a));
}
