/* tensorattn sdpa --q Q.npy --k K.npy --v V.npy ... -o O.npy */
#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: tensorattn sdpa --q Q.npy --k K.npy --v V.npy -o O.npy\n"
    "                       [--causal [top_left|bottom_right]]\n"
    "                       [--mask M.npy --mask-mode keep|block|additive]\n"
    "                       [--key-lengths L.npy] [--scale S] [--threads N]\n"
    "                       [--weights W.npy] [--lse LSE.npy]\n"
    "                       [--grad-out dO.npy --dq dQ.npy --dk dK.npy --dv dV.npy]\n"
    "                       [--window LEFT,RIGHT] [--softcap C] [--alibi-slopes S.npy]\n"
    "                       [--sinks S.npy] [--dsinks dS.npy] [--kv-dtype f32|f16|bf16]\n"
    "       tensorattn sdpa --q Q.npy --k K.npy --v V.npy --cu-seqlens-q CQ.npy\n"
    "                       --cu-seqlens-k CK.npy -o O.npy [--causal ...] [--scale S]\n"
    "                       [--threads N] [--lse LSE.npy] [--grad-out ... --dv dV.npy]\n"
    "                       [variants as above]\n"
    "\n"
    "Scaled dot-product attention softmax(Q K^T * scale + mask) V.\n"
    "  Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv] (H % Hkv == 0), O [B,H,Lq,Dv].\n"
    "  --causal       top_left (default; query i sees keys j <= i, PyTorch is_causal) or\n"
    "                 bottom_right (query i sees keys j <= i + Lk - Lq)\n"
    "  --mask         broadcastable to [B,H,Lq,Lk]; |b1, |u1 or <f4\n"
    "  --mask-mode    keep: nonzero may attend (default); block: nonzero is masked;\n"
    "                 additive: the value is added to the scaled scores\n"
    "  --key-lengths  <i4 or <i8 of shape [B]: keys at or beyond the length are padding\n"
    "  --scale        default 1/sqrt(D)\n"
    "  --weights      also write the attention weights [B,H,Lq,Lk]\n"
    "  --lse          also write the log-sum-exp of each query row [B,H,Lq]\n"
    "  --grad-out     dO = dL/dO [B,H,Lq,Dv]: also run the backward pass and write the\n"
    "  --dq --dk --dv gradients dQ [B,H,Lq,D], dK [B,Hkv,Lk,D], dV [B,Hkv,Lk,Dv] (all four\n"
    "                 flags together; dK and dV sum over the query heads of a group;\n"
    "                 additive masks get no gradient)\n"
    "Variable-length batches (FlashAttention's varlen): with --cu-seqlens-q and\n"
    "--cu-seqlens-k (both; <i4 or <i8 of shape [num_seqs + 1], starting at 0,\n"
    "non-decreasing, the last equal to Tq and Tk) Q [Tq,H,D], K [Tk,Hkv,D] and\n"
    "V [Tk,Hkv,Dv] hold the sequences packed: sequence b is the query rows\n"
    "CQ[b]..CQ[b+1] against the keys CK[b]..CK[b+1], every option per sequence (its own\n"
    "Lq and Lk for bottom_right). O and dO are [Tq,H,Dv], --lse [H,Tq], the gradients\n"
    "packed like their inputs. --mask, --key-lengths and --weights do not combine with\n"
    "the offsets.\n"
    "Variants (FlashAttention's definitions; with query i, key j: rel = j - (i + delta),\n"
    "delta = 0 for --causal top_left, else Lk - Lq):\n"
    "  --window       keys with -LEFT <= rel <= RIGHT only; -1: unbounded on that side\n"
    "  --softcap      C > 0: scores s = C * tanh(s / C) (after the scale)\n"
    "  --alibi-slopes <f4 [H] or [B,H]: scores -= slope * |rel| (no gradient)\n"
    "  --sinks        <f4 [H]: a logit per head in every row's softmax denominator\n"
    "                 (LSE includes it; a row with no key gets output 0, LSE = sink)\n"
    "  --dsinks       with --grad-out and --sinks: also write the sinks' gradient [H]\n"
    "--kv-dtype f16|bf16 stores K and V at that precision (rounded to nearest-even, as an\n"
    "inference engine's cache would) and computes in float32 from the stored values;\n"
    "inputs may be <f4, <f8 or <f2, outputs are <f4.\n"
    "A query row that may attend to no key gets output 0, weights 0 and LSE -inf, and\n"
    "contributes no gradient.\n"
    "Outputs are .npy <f4, all written whole or none, and only after every computation\n"
    "succeeded; an output naming an input, or two outputs one file, is a usage error.\n"
    "Context parallelism over MPI: mpirun -np P tensorattn sdpa ... --context-parallel\n"
    "ring|zigzag|ulysses (see tensorattn sdpa --context-parallel ring --help).\n";

enum { O_Q, O_K, O_V, O_OUT, O_CAUSAL, O_MASK, O_MODE, O_KLEN, O_SCALE, O_THREADS, O_W, O_LSE,
       O_GRAD, O_DQ, O_DK, O_DV, O_CUQ, O_CUK, O_WINDOW, O_SOFTCAP, O_ALIBI, O_SINKS,
       O_DSINKS, O_KVDT };

/* --cu-seqlens-q / -k: num_seqs + 1 (>= 1) integers that fit int32, into *out (malloc'd).
 * Returns false after printing the error. */
static bool load_offsets(int32_t **out, int64_t *count, const cli_opt *o)
{
    int nd;
    int64_t shape[TA_MAX_DIMS], *v = NULL;
    ta_status st = ta_npy_load_int64(&v, &nd, shape, o->value);
    if (st) {
        cli_error(CLI_FAIL, "reading %s: %s", o->name, ta_last_error());
        return false;
    }
    bool ok = nd == 1 && shape[0] >= 1;
    if (!ok)
        cli_error(CLI_FAIL, "%s must have shape [num_seqs + 1] with at least one offset, got "
                  "%d dims%s", o->name, nd, nd == 1 ? " of length 0" : "");
    for (int64_t i = 0; ok && i < shape[0]; i++)
        if (v[i] < INT32_MIN || v[i] > INT32_MAX) {
            cli_error(CLI_FAIL, "%s: offset %lld at index %lld does not fit int32", o->name,
                      (long long)v[i], (long long)i);
            ok = false;
        }
    *out = ok ? malloc(sizeof(int32_t) * (size_t)shape[0]) : NULL;
    if (ok && !*out) {
        cli_error(CLI_FAIL, "%s: out of memory", o->name);
        ok = false;
    }
    for (int64_t i = 0; ok && i < shape[0]; i++) (*out)[i] = (int32_t)v[i];
    *count = ok ? shape[0] : 0;
    ta_npy_free(v);
    return ok;
}

/* The offsets of a variable-length batch into so (both files, the same length). */
static bool load_varlen(ta_sdpa_opts *so, int32_t **cq, int32_t **ck, const cli_opt *oq,
                        const cli_opt *ok)
{
    int64_t nq, nk;
    if (!load_offsets(cq, &nq, oq) || !load_offsets(ck, &nk, ok)) return false;
    if (nq != nk) {
        cli_error(CLI_FAIL, "--cu-seqlens-q has %lld offsets but --cu-seqlens-k has %lld; "
                  "both are [num_seqs + 1]", (long long)nq, (long long)nk);
        return false;
    }
    so->cu_seqlens_q = *cq;
    so->cu_seqlens_k = *ck;
    so->num_seqs = nq - 1;
    return true;
}

int cmd_sdpa(int argc, char **argv)
{
    cli_opt opts[] = {
        [O_Q] = {.name = "--q", .takes_value = true},
        [O_K] = {.name = "--k", .takes_value = true},
        [O_V] = {.name = "--v", .takes_value = true},
        [O_OUT] = {.name = "-o", .takes_value = true},
        [O_CAUSAL] = {.name = "--causal", .optional_value = true},
        [O_MASK] = {.name = "--mask", .takes_value = true},
        [O_MODE] = {.name = "--mask-mode", .takes_value = true},
        [O_KLEN] = {.name = "--key-lengths", .takes_value = true},
        [O_SCALE] = {.name = "--scale", .takes_value = true},
        [O_THREADS] = {.name = "--threads", .takes_value = true},
        [O_W] = {.name = "--weights", .takes_value = true},
        [O_LSE] = {.name = "--lse", .takes_value = true},
        [O_GRAD] = {.name = "--grad-out", .takes_value = true},
        [O_DQ] = {.name = "--dq", .takes_value = true},
        [O_DK] = {.name = "--dk", .takes_value = true},
        [O_DV] = {.name = "--dv", .takes_value = true},
        [O_CUQ] = {.name = "--cu-seqlens-q", .takes_value = true},
        [O_CUK] = {.name = "--cu-seqlens-k", .takes_value = true},
        [O_WINDOW] = {.name = "--window", .takes_value = true},
        [O_SOFTCAP] = {.name = "--softcap", .takes_value = true},
        [O_ALIBI] = {.name = "--alibi-slopes", .takes_value = true},
        [O_SINKS] = {.name = "--sinks", .takes_value = true},
        [O_DSINKS] = {.name = "--dsinks", .takes_value = true},
        [O_KVDT] = {.name = "--kv-dtype", .takes_value = true},
        {0}};
    if (cli_context_parallel_requested(argc, argv)) return cmd_sdpa_context_parallel(argc, argv);
    const char *pos[1];
    int npos;
    int rc = cli_parse(argc, argv, 2, opts, pos, 0, &npos, help);
    if (rc) return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
    if (!opts[O_Q].given || !opts[O_K].given || !opts[O_V].given || !opts[O_OUT].given)
        return cli_error(CLI_USAGE, "sdpa needs --q, --k, --v and -o (see --help)");
    bool grad = opts[O_GRAD].given || opts[O_DQ].given || opts[O_DK].given || opts[O_DV].given;
    if (grad && !(opts[O_GRAD].given && opts[O_DQ].given && opts[O_DK].given && opts[O_DV].given))
        return cli_error(CLI_USAGE, "the backward pass needs all of --grad-out, --dq, --dk "
                                    "and --dv");
    const bool varlen = opts[O_CUQ].given || opts[O_CUK].given;
    if (varlen && !(opts[O_CUQ].given && opts[O_CUK].given))
        return cli_error(CLI_USAGE, "--cu-seqlens-q and --cu-seqlens-k go together");
    const int clash = opts[O_MASK].given ? O_MASK : opts[O_KLEN].given ? O_KLEN
                      : opts[O_W].given ? O_W : -1;
    if (varlen && clash >= 0)
        return cli_error(CLI_USAGE, "%s does not combine with --cu-seqlens-q/-k (the offsets "
                         "say where each sequence ends)", opts[clash].name);
    ta_sdpa_opts so = {0};
    if (opts[O_CAUSAL].given) {
        const char *a = opts[O_CAUSAL].value;
        if (!a || strcmp(a, "top_left") == 0) so.causal = TA_CAUSAL_TOP_LEFT;
        else if (strcmp(a, "bottom_right") == 0) so.causal = TA_CAUSAL_BOTTOM_RIGHT;
        else return cli_error(CLI_USAGE, "--causal expects top_left or bottom_right, got '%s'", a);
    }
    if (!cli_mask_mode(&opts[O_MODE], &opts[O_MASK], &so.mask_mode)) return CLI_USAGE;
    if (opts[O_SCALE].given && !cli_float("--scale", opts[O_SCALE].value, &so.scale))
        return CLI_USAGE;
    if (opts[O_SCALE].given && so.scale == 0.0f)
        return cli_error(CLI_USAGE, "--scale must be nonzero");
    if (opts[O_DSINKS].given && !(grad && opts[O_SINKS].given))
        return cli_error(CLI_USAGE, "--dsinks needs the backward pass (--grad-out ...) and "
                                    "--sinks");
    if (!cli_variant_flags(opts, &so)) return CLI_USAGE;
    ta_dtype kv_dtype;
    if (!cli_kv_dtype(opts, &kv_dtype)) return CLI_USAGE;
    if (!cli_threads(&opts[0])) return CLI_USAGE;
#define GIVEN(i) (opts[i].given ? opts[i].value : NULL)
    const cli_file ins[] = {{"--q", GIVEN(O_Q)},           {"--k", GIVEN(O_K)},
                            {"--v", GIVEN(O_V)},           {"--mask", GIVEN(O_MASK)},
                            {"--key-lengths", GIVEN(O_KLEN)}, {"--grad-out", GIVEN(O_GRAD)},
                            {"--cu-seqlens-q", GIVEN(O_CUQ)}, {"--cu-seqlens-k", GIVEN(O_CUK)},
                            {"--alibi-slopes", GIVEN(O_ALIBI)}, {"--sinks", GIVEN(O_SINKS)}};
    const cli_file outs[] = {{"-o", GIVEN(O_OUT)},   {"--weights", GIVEN(O_W)},
                             {"--lse", GIVEN(O_LSE)}, {"--dq", GIVEN(O_DQ)},
                             {"--dk", GIVEN(O_DK)},   {"--dv", GIVEN(O_DV)},
                             {"--dsinks", GIVEN(O_DSINKS)}};
#undef GIVEN
    if (!cli_outputs_apart(ins, CLI_COUNT(ins), outs, CLI_COUNT(outs))) return CLI_USAGE;

    ta_tensor q = {0}, k = {0}, v = {0}, mask = {0}, o = {0}, w = {0}, lse = {0};
    ta_tensor dout = {0}, dq = {0}, dk = {0}, dv = {0}, slopes = {0}, sinks = {0}, dsinks = {0};
    int64_t *klen = NULL;
    int32_t *cq = NULL, *ck = NULL;
    ta_status st;
    rc = CLI_FAIL;
    if ((st = ta_npy_load(&q, opts[O_Q].value))) { cli_fail(st, "reading --q"); goto done; }
    if ((st = ta_npy_load(&k, opts[O_K].value))) { cli_fail(st, "reading --k"); goto done; }
    if ((st = ta_npy_load(&v, opts[O_V].value))) { cli_fail(st, "reading --v"); goto done; }
    /* --kv-dtype: K and V stored at that precision (the gradients stay float32) */
    if (!cli_store_as(&k, kv_dtype, "--kv-dtype") || !cli_store_as(&v, kv_dtype, "--kv-dtype"))
        goto done;
    if (opts[O_MASK].given) {
        if ((st = ta_npy_load(&mask, opts[O_MASK].value))) { cli_fail(st, "reading --mask"); goto done; }
        so.mask = &mask;
    }
    if (!cli_variant_files(opts, &so, &slopes, &sinks)) goto done;
    const int nd = varlen ? 3 : 4; /* packed [T,H,D], or [B,H,L,D] */
    if (q.ndim != nd || v.ndim != nd || (grad && k.ndim != nd)) {
        cli_error(CLI_FAIL, "--q, --k and --v must have %d dims %s, got %d, %d and %d", nd,
                  varlen ? "[T,H,D] with --cu-seqlens-q/-k" : "[B,H,L,D]", q.ndim, k.ndim,
                  v.ndim);
        goto done;
    }
    if (varlen && !load_varlen(&so, &cq, &ck, &opts[O_CUQ], &opts[O_CUK])) goto done;
    if (opts[O_KLEN].given) {
        int nd;
        int64_t shape[TA_MAX_DIMS];
        if ((st = ta_npy_load_int64(&klen, &nd, shape, opts[O_KLEN].value))) {
            cli_fail(st, "reading --key-lengths");
            goto done;
        }
        if (nd != 1 || shape[0] != q.shape[0]) {
            cli_error(CLI_FAIL, "--key-lengths must have shape [B] = [%lld], got %d dims%s",
                      (long long)q.shape[0], nd, nd == 1 ? " of another length" : "");
            goto done;
        }
        so.key_lengths = klen;
    }
    /* O like Q with Dv; LSE [B,H,Lq], or [H,Tq] for packed sequences */
    int64_t oshape[4] = {q.shape[0], q.shape[1], q.shape[2], q.shape[3]};
    oshape[nd - 1] = v.shape[nd - 1];
    const int64_t lshape[3] = {varlen ? q.shape[1] : q.shape[0], varlen ? q.shape[0] : q.shape[1],
                               q.shape[2]};
    if ((st = ta_tensor_empty(&o, nd, oshape))) { cli_fail(st, "sdpa"); goto done; }
    if (opts[O_W].given) {
        int64_t wshape[4] = {q.shape[0], q.shape[1], q.shape[2], k.ndim == 4 ? k.shape[2] : 0};
        if ((st = ta_tensor_empty(&w, 4, wshape))) { cli_fail(st, "sdpa"); goto done; }
        so.weights = &w;
    }
    if (opts[O_LSE].given || grad) { /* the backward needs the forward's LSE */
        if ((st = ta_tensor_empty(&lse, nd - 1, lshape))) { cli_fail(st, "sdpa"); goto done; }
        so.lse = &lse;
    }
    if (grad) { /* load dO before computing anything: a bad file fails early */
        if ((st = ta_npy_load(&dout, opts[O_GRAD].value))) { cli_fail(st, "reading --grad-out"); goto done; }
        if ((st = ta_tensor_empty(&dq, nd, q.shape)) || (st = ta_tensor_empty(&dk, nd, k.shape))) {
            cli_fail(st, "sdpa");
            goto done;
        }
        int64_t vshape[4] = {k.shape[0], k.shape[1], k.shape[2], k.shape[3]};
        vshape[nd - 1] = v.shape[nd - 1]; /* dV: K's keys and heads, V's Dv */
        if ((st = ta_tensor_empty(&dv, nd, vshape))) { cli_fail(st, "sdpa"); goto done; }
        if (opts[O_DSINKS].given && (st = ta_tensor_empty(&dsinks, 1, &q.shape[1]))) {
            cli_fail(st, "sdpa");
            goto done;
        }
    }
    if ((st = ta_sdpa(&o, &q, &k, &v, &so))) { cli_fail(st, "sdpa"); goto done; }
    if (grad) {
        ta_sdpa_opts bo = so;
        bo.weights = NULL;
        bo.lse = NULL;
        bo.path = TA_SDPA_AUTO;
        bo.dsinks = opts[O_DSINKS].given ? &dsinks : NULL;
        if ((st = ta_sdpa_backward(&dq, &dk, &dv, &dout, &q, &k, &v, &o, &lse, &bo))) {
            cli_fail(st, "sdpa backward");
            goto done;
        }
    }
    /* every output or none (cli_save_all): outs[i] and these tensors in the same order */
    const ta_tensor *made[] = {&o, &w, &lse, &dq, &dk, &dv, &dsinks};
    _Static_assert(CLI_COUNT(made) == CLI_COUNT(outs), "an output path for each tensor");
    cli_out save[CLI_COUNT(outs)];
    for (int i = 0; i < CLI_COUNT(outs); i++) save[i] = (cli_out){outs[i].opt, outs[i].path, made[i]};
    char why[CLI_WHY_MAX];
    if (!cli_save_all(save, CLI_COUNT(save), why, sizeof why)) {
        cli_error(CLI_FAIL, "%s", why);
        goto done;
    }
    rc = CLI_OK;
done:
    ta_tensor_free(&q);
    ta_tensor_free(&k);
    ta_tensor_free(&v);
    ta_tensor_free(&mask);
    ta_tensor_free(&o);
    ta_tensor_free(&w);
    ta_tensor_free(&lse);
    ta_tensor_free(&dout);
    ta_tensor_free(&dq);
    ta_tensor_free(&dk);
    ta_tensor_free(&dv);
    ta_tensor_free(&slopes);
    ta_tensor_free(&sinks);
    ta_tensor_free(&dsinks);
    ta_npy_free(klen);
    free(cq);
    free(ck);
    return rc;
}
