/* tensorattn kvcache --q Q.npy --k-cache KC.npy --v-cache VC.npy --cache-seqlens CS.npy
 *                    ... -o O.npy
 * ta_sdpa_kvcache on .npy files. The caches are loaded into memory and updated there; the
 * input files are never written: the updated caches go to --k-cache-out/--v-cache-out. */
#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const char help[] =
    "usage: tensorattn kvcache --q Q.npy --k-cache KC.npy --v-cache VC.npy\n"
    "                          --cache-seqlens CS.npy -o O.npy\n"
    "                          [--k-new K.npy --v-new V.npy] [--block-table BT.npy]\n"
    "                          [--causal] [--scale S] [--threads N] [--lse LSE.npy]\n"
    "                          [--k-cache-out KC2.npy --v-cache-out VC2.npy]\n"
    "                          [--window LEFT,RIGHT] [--softcap C]\n"
    "                          [--alibi-slopes S.npy] [--sinks S.npy]\n"
    "                          [--kv-dtype f32|f16|bf16]\n"
    "\n"
    "Attention of new queries against a KV cache (FlashAttention's flash_attn_with_kvcache,\n"
    "BSHD layout): k_new and v_new are first written into each sequence's cache at\n"
    "positions cache_seqlens[b] .., then q attends to the Lk = cache_seqlens[b] + Lnew keys\n"
    "of its sequence.\n"
    "  --q              [B,Lq,H,D] (H a multiple of Hkv)\n"
    "  --k-cache        contiguous [B,Lmax,Hkv,D], or paged [num_blocks,block_size,Hkv,D]\n"
    "  --v-cache        the same with Dv\n"
    "  --cache-seqlens  <i4 or <i8 [B]: the keys already in each sequence's cache\n"
    "  --k-new --v-new  [B,Lnew,Hkv,D] and [B,Lnew,Hkv,Dv], appended (both or neither)\n"
    "  --block-table    <i4 or <i8 [B,max_blocks]: the cache is paged; position p of\n"
    "                   sequence b is row p % block_size of block block_table[b, p /\n"
    "                   block_size]; entries past the blocks a sequence uses are never\n"
    "                   read (they may hold -1)\n"
    "  --causal         query i sees keys j <= i + Lk - Lq of its sequence (bottom right)\n"
    "  --scale          default 1/sqrt(D)\n"
    "  --lse            also write the log-sum-exp of each query row [B,H,Lq]\n"
    "  --k-cache-out --v-cache-out\n"
    "                   write the caches after the append (both or neither)\n"
    "  --kv-dtype       f16 or bf16: the cache holds its values at that precision,\n"
    "                   rounded to nearest-even as an inference engine's cache would (the\n"
    "                   loaded cache and the appended keys and values alike); attention\n"
    "                   computes in float32 from the stored values. The caches are written\n"
    "                   out as <f4 holding the stored values. Default f32.\n"
    "Variants (FlashAttention's definitions; with query i, key j of a sequence of Lk keys:\n"
    "rel = j - (i + Lk - Lq)):\n"
    "  --window         keys with -LEFT <= rel <= RIGHT only; -1: unbounded on that side\n"
    "  --softcap        C > 0: scores s = C * tanh(s / C) (after the scale)\n"
    "  --alibi-slopes   <f4 [H] or [B,H]: scores -= slope * |rel|\n"
    "  --sinks          <f4 [H]: a logit per head in every row's softmax denominator\n"
    "                   (LSE includes it; a row with no key gets output 0, LSE = sink)\n"
    "O is [B,Lq,H,Dv]; a query row with no key gets output 0 and LSE -inf. Inputs may be\n"
    "<f4, <f8 or <f2 and are never modified (an output naming an input, or two outputs\n"
    "one file, is a usage error). Outputs are .npy <f4, all written whole or none, and only\n"
    "after the computation succeeded: bad lengths, a block index out of range or a\n"
    "sequence longer than its cache exit 1 and write nothing.\n";

enum { O_Q, O_KC, O_VC, O_SEQ, O_OUT, O_KNEW, O_VNEW, O_BT, O_CAUSAL, O_SCALE, O_THREADS,
       O_LSE, O_KC_OUT, O_VC_OUT, O_WINDOW, O_SOFTCAP, O_ALIBI, O_SINKS, O_KVDT };

/* What the command loads and makes; released in one place. */
typedef struct kv_args {
    ta_tensor q, kc, vc, kn, vn, o, lse, slopes, sinks;
    int32_t *seqlens, *table;
    int64_t max_blocks;
} kv_args;

static void kv_args_free(kv_args *a)
{
    ta_tensor *t[] = {&a->q, &a->kc, &a->vc, &a->kn, &a->vn, &a->o, &a->lse, &a->slopes,
                      &a->sinks};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) ta_tensor_free(t[i]);
    free(a->seqlens);
    free(a->table);
}

/* An integer file ('<i4' or '<i8') of shape [rows] (ndim 1) or [rows, *] (ndim 2) as
 * int32 values; *cols gets the second extent. Prints the error and returns false. */
static bool load_int32(int32_t **out, int64_t *cols, const char *opt, const char *path,
                       int ndim, int64_t rows)
{
    int64_t *v = NULL, shape[TA_MAX_DIMS];
    int nd;
    char what[64];
    snprintf(what, sizeof what, "reading %s", opt);
    ta_status st = ta_npy_load_int64(&v, &nd, shape, path);
    if (st) return cli_fail(st, what), false;
    bool ok = nd == ndim && shape[0] == rows;
    if (!ok)
        cli_error(CLI_FAIL, "%s must have shape %s with B = %lld (the batch of --q), got %d "
                  "dims%s", opt, ndim == 1 ? "[B]" : "[B, max_blocks]", (long long)rows, nd,
                  nd == ndim ? " of another batch" : "");
    const int64_t n = ok ? rows * (ndim == 2 ? shape[1] : 1) : 0;
    *cols = ndim == 2 && ok ? shape[1] : 0;
    *out = ok ? malloc(sizeof(int32_t) * (size_t)(n + 1)) : NULL;
    if (ok && !*out) {
        cli_error(CLI_FAIL, "%s: out of memory", what);
        ok = false;
    }
    for (int64_t i = 0; ok && i < n; i++) {
        if (v[i] < INT32_MIN || v[i] > INT32_MAX) {
            cli_error(CLI_FAIL, "%s: value %lld (element %lld) does not fit int32", opt,
                      (long long)v[i], (long long)i);
            ok = false;
        }
        (*out)[i] = (int32_t)v[i];
    }
    ta_npy_free(v);
    return ok;
}

#define GIVEN(i) (opts[i].given ? opts[i].value : NULL)

/* Usage checks that need no file; returns CLI_OK or the exit code. */
static int check_usage(cli_opt *opts, ta_sdpa_opts *so, ta_dtype *kv_dtype)
{
    if (!opts[O_Q].given || !opts[O_KC].given || !opts[O_VC].given || !opts[O_SEQ].given ||
        !opts[O_OUT].given)
        return cli_error(CLI_USAGE, "kvcache needs --q, --k-cache, --v-cache, --cache-seqlens "
                                    "and -o (see --help)");
    if (opts[O_KNEW].given != opts[O_VNEW].given)
        return cli_error(CLI_USAGE, "--k-new and --v-new go together");
    if (opts[O_KC_OUT].given != opts[O_VC_OUT].given)
        return cli_error(CLI_USAGE, "--k-cache-out and --v-cache-out go together");
    if (opts[O_CAUSAL].given) so->causal = TA_CAUSAL_BOTTOM_RIGHT;
    if (opts[O_SCALE].given && !cli_float("--scale", opts[O_SCALE].value, &so->scale))
        return CLI_USAGE;
    if (opts[O_SCALE].given && so->scale == 0.0f)
        return cli_error(CLI_USAGE, "--scale must be nonzero");
    if (!cli_variant_flags(opts, so)) return CLI_USAGE;
    if (!cli_kv_dtype(opts, kv_dtype)) return CLI_USAGE;
    if (!cli_threads(opts)) return CLI_USAGE;
    const cli_file ins[] = {{"--q", GIVEN(O_Q)},       {"--k-cache", GIVEN(O_KC)},
                            {"--v-cache", GIVEN(O_VC)}, {"--cache-seqlens", GIVEN(O_SEQ)},
                            {"--k-new", GIVEN(O_KNEW)}, {"--v-new", GIVEN(O_VNEW)},
                            {"--block-table", GIVEN(O_BT)}, {"--alibi-slopes", GIVEN(O_ALIBI)},
                            {"--sinks", GIVEN(O_SINKS)}};
    const cli_file outs[] = {{"-o", GIVEN(O_OUT)}, {"--lse", GIVEN(O_LSE)},
                             {"--k-cache-out", GIVEN(O_KC_OUT)}, {"--v-cache-out", GIVEN(O_VC_OUT)}};
    if (!cli_outputs_apart(ins, CLI_COUNT(ins), outs, CLI_COUNT(outs))) return CLI_USAGE;
    return CLI_OK;
}

/* Loads every input and makes the outputs; prints the error and returns false. */
static bool load_inputs(kv_args *a, cli_opt *opts)
{
    const struct { int opt; ta_tensor *t; } files[] = {
        {O_Q, &a->q}, {O_KC, &a->kc}, {O_VC, &a->vc}, {O_KNEW, &a->kn}, {O_VNEW, &a->vn}};
    ta_status st;
    char what[64];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        const cli_opt *o = &opts[files[i].opt];
        if (!o->given) continue;
        snprintf(what, sizeof what, "reading %s", o->name);
        if ((st = ta_npy_load(files[i].t, o->value))) return cli_fail(st, what), false;
    }
    if (a->q.ndim != 4 || a->vc.ndim != 4)
        return cli_error(CLI_FAIL, "--q and --v-cache must have 4 dims ([B,Lq,H,D] and "
                         "[B|num_blocks,Lmax|block_size,Hkv,Dv]), got %d and %d", a->q.ndim,
                         a->vc.ndim), false;
    const int64_t B = a->q.shape[0], Lq = a->q.shape[1], H = a->q.shape[2], Dv = a->vc.shape[3];
    int64_t unused;
    if (!load_int32(&a->seqlens, &unused, "--cache-seqlens", opts[O_SEQ].value, 1, B))
        return false;
    if (opts[O_BT].given &&
        !load_int32(&a->table, &a->max_blocks, "--block-table", opts[O_BT].value, 2, B))
        return false;
    const int64_t os[4] = {B, Lq, H, Dv}, ls[3] = {B, H, Lq};
    if ((st = ta_tensor_empty(&a->o, 4, os))) return cli_fail(st, "kvcache"), false;
    if (opts[O_LSE].given && (st = ta_tensor_empty(&a->lse, 3, ls)))
        return cli_fail(st, "kvcache"), false;
    return true;
}

/* Writes -o, --lse and the caches (as float32: a half cache's stored values widen
 * exactly), all or none; prints the error and returns false. */
static bool save_outputs(kv_args *a, const cli_opt *opts)
{
    if (opts[O_KC_OUT].given && (!cli_store_as(&a->kc, TA_F32, "writing --k-cache-out") ||
                                 !cli_store_as(&a->vc, TA_F32, "writing --v-cache-out")))
        return false;
    const cli_out outs[] = {{"-o", GIVEN(O_OUT), &a->o},
                            {"--lse", GIVEN(O_LSE), &a->lse},
                            {"--k-cache-out", GIVEN(O_KC_OUT), &a->kc},
                            {"--v-cache-out", GIVEN(O_VC_OUT), &a->vc}};
    char why[CLI_WHY_MAX];
    if (!cli_save_all(outs, CLI_COUNT(outs), why, sizeof why)) return cli_error(CLI_FAIL, "%s", why), false;
    return true;
}

int cmd_kvcache(int argc, char **argv)
{
    cli_opt opts[] = {
        [O_Q] = {.name = "--q", .takes_value = true},
        [O_KC] = {.name = "--k-cache", .takes_value = true},
        [O_VC] = {.name = "--v-cache", .takes_value = true},
        [O_SEQ] = {.name = "--cache-seqlens", .takes_value = true},
        [O_OUT] = {.name = "-o", .takes_value = true},
        [O_KNEW] = {.name = "--k-new", .takes_value = true},
        [O_VNEW] = {.name = "--v-new", .takes_value = true},
        [O_BT] = {.name = "--block-table", .takes_value = true},
        [O_CAUSAL] = {.name = "--causal"},
        [O_SCALE] = {.name = "--scale", .takes_value = true},
        [O_THREADS] = {.name = "--threads", .takes_value = true},
        [O_LSE] = {.name = "--lse", .takes_value = true},
        [O_KC_OUT] = {.name = "--k-cache-out", .takes_value = true},
        [O_VC_OUT] = {.name = "--v-cache-out", .takes_value = true},
        [O_WINDOW] = {.name = "--window", .takes_value = true},
        [O_SOFTCAP] = {.name = "--softcap", .takes_value = true},
        [O_ALIBI] = {.name = "--alibi-slopes", .takes_value = true},
        [O_SINKS] = {.name = "--sinks", .takes_value = true},
        [O_KVDT] = {.name = "--kv-dtype", .takes_value = true},
        {0}};
    const char *pos[1];
    int npos;
    int rc = cli_parse(argc, argv, 2, opts, pos, 0, &npos, help);
    if (rc) return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
    ta_sdpa_opts so = {0};
    ta_dtype kv_dtype;
    if ((rc = check_usage(opts, &so, &kv_dtype))) return rc;

    kv_args a = {0};
    rc = CLI_FAIL;
    if (!load_inputs(&a, opts)) goto done;
    /* --kv-dtype: the caches held at that precision; the library rounds the new rows as
     * it appends them */
    if (!cli_store_as(&a.kc, kv_dtype, "--kv-dtype") || !cli_store_as(&a.vc, kv_dtype, "--kv-dtype"))
        goto done;
    if (!cli_variant_files(opts, &so, &a.slopes, &a.sinks)) goto done;
    ta_kv_cache cache = {.k = &a.kc, .v = &a.vc, .seqlens = a.seqlens,
                         .block_table = a.table, .max_blocks = a.max_blocks};
    so.lse = opts[O_LSE].given ? &a.lse : NULL;
    const bool add = opts[O_KNEW].given;
    ta_status st = ta_sdpa_kvcache(&a.o, &a.q, &cache, add ? &a.kn : NULL, add ? &a.vn : NULL, &so);
    if (st) {
        cli_fail(st, "kvcache");
        goto done;
    }
    if (save_outputs(&a, opts)) rc = CLI_OK;
done:
    kv_args_free(&a);
    return rc;
}
