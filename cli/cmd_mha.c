/* tensorattn mha --weights W.safetensors --layout seed|torch --heads H --input X.npy ... */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char help[] =
    "usage: tensorattn mha --weights W.safetensors --layout seed|torch --heads H\n"
    "                      --input X.npy [--keys K.npy --values V.npy]\n"
    "                      [--mask M.npy --mask-mode keep|block|additive] [--causal]\n"
    "                      [--threads N] -o Y.npy\n"
    "\n"
    "A multi-head self-attention layer on X [N, L, E] (batch first); with --keys and\n"
    "--values, cross attention: queries from X, keys [N, Lk, E], values [N, Lk, E].\n"
    "  --layout seed   the seed's SelfAttention: values.weight, keys.weight,\n"
    "                  queries.weight [E/H, E/H] shared by the heads, fc_out.weight [E, E],\n"
    "                  fc_out.bias [E]; its mask keeps nonzero entries (mask == 0 is\n"
    "                  filled with -1e20 before scaling); default --mask-mode keep\n"
    "  --layout torch  nn.MultiheadAttention(E, H, batch_first=True): in_proj_weight\n"
    "                  [3E, E], in_proj_bias [3E], out_proj.weight [E, E],\n"
    "                  out_proj.bias [E]; its attn_mask blocks True entries: default\n"
    "                  --mask-mode block (additive for float masks you mean to add)\n"
    "  --mask          broadcastable to [N, H, Lq, Lk]\n"
    "  --causal        query i attends to keys j <= i\n"
    "Output: Y [N, L, E] as .npy <f4, written whole or not at all; -o naming an input is a\n"
    "usage error.\n";

enum { O_W, O_LAYOUT, O_HEADS, O_IN, O_KEYS, O_VALUES, O_MASK, O_MODE, O_CAUSAL, O_THREADS, O_OUT };

int cmd_mha(int argc, char **argv)
{
    cli_opt opts[] = {[O_W] = {.name = "--weights", .takes_value = true},
                      [O_LAYOUT] = {.name = "--layout", .takes_value = true},
                      [O_HEADS] = {.name = "--heads", .takes_value = true},
                      [O_IN] = {.name = "--input", .takes_value = true},
                      [O_KEYS] = {.name = "--keys", .takes_value = true},
                      [O_VALUES] = {.name = "--values", .takes_value = true},
                      [O_MASK] = {.name = "--mask", .takes_value = true},
                      [O_MODE] = {.name = "--mask-mode", .takes_value = true},
                      [O_CAUSAL] = {.name = "--causal"},
                      [O_THREADS] = {.name = "--threads", .takes_value = true},
                      [O_OUT] = {.name = "-o", .takes_value = true},
                      {0}};
    const char *pos[1];
    int npos;
    int rc = cli_parse(argc, argv, 2, opts, pos, 0, &npos, help);
    if (rc) return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
    if (!opts[O_W].given || !opts[O_LAYOUT].given || !opts[O_HEADS].given || !opts[O_IN].given ||
        !opts[O_OUT].given)
        return cli_error(CLI_USAGE, "mha needs --weights, --layout, --heads, --input and -o "
                                    "(see --help)");
    if (opts[O_KEYS].given != opts[O_VALUES].given)
        return cli_error(CLI_USAGE, "--keys and --values go together");
    ta_layout layout;
    const char *l = opts[O_LAYOUT].value;
    if (strcmp(l, "seed") == 0) layout = TA_LAYOUT_SEED;
    else if (strcmp(l, "torch") == 0) layout = TA_LAYOUT_TORCH;
    else return cli_error(CLI_USAGE, "--layout expects seed or torch, got '%s'", l);
    long long heads;
    if (!cli_int("--heads", opts[O_HEADS].value, 1, 1 << 20, &heads)) return CLI_USAGE;
    ta_attention_opts ao = {.mask_mode = layout == TA_LAYOUT_SEED ? TA_MASK_KEEP : TA_MASK_BLOCK,
                            .causal = opts[O_CAUSAL].given ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE};
    if (!cli_mask_mode(&opts[O_MODE], &opts[O_MASK], &ao.mask_mode)) return CLI_USAGE;
    if (!cli_threads(opts)) return CLI_USAGE;
#define GIVEN(i) (opts[i].given ? opts[i].value : NULL)
    const cli_file ins[] = {{"--weights", GIVEN(O_W)}, {"--input", GIVEN(O_IN)},
                            {"--keys", GIVEN(O_KEYS)},  {"--values", GIVEN(O_VALUES)},
                            {"--mask", GIVEN(O_MASK)}},
                   out[] = {{"-o", GIVEN(O_OUT)}};
#undef GIVEN
    if (!cli_outputs_apart(ins, CLI_COUNT(ins), out, CLI_COUNT(out))) return CLI_USAGE;

    ta_attention *layer = NULL;
    ta_tensor x = {0}, k = {0}, v = {0}, mask = {0}, y = {0};
    ta_status st;
    rc = CLI_FAIL;
    if ((st = ta_attention_load(&layer, opts[O_W].value, layout, (int64_t)heads))) {
        cli_fail(st, "reading --weights");
        goto done;
    }
    if ((st = ta_npy_load(&x, opts[O_IN].value))) { cli_fail(st, "reading --input"); goto done; }
    if (opts[O_KEYS].given) {
        if ((st = ta_npy_load(&k, opts[O_KEYS].value))) { cli_fail(st, "reading --keys"); goto done; }
        if ((st = ta_npy_load(&v, opts[O_VALUES].value))) { cli_fail(st, "reading --values"); goto done; }
    }
    if (opts[O_MASK].given) {
        if ((st = ta_npy_load(&mask, opts[O_MASK].value))) { cli_fail(st, "reading --mask"); goto done; }
        ao.mask = &mask;
    }
    if (x.ndim != 3) {
        cli_error(CLI_FAIL, "--input must have 3 dims [N, L, E], got %d", x.ndim);
        goto done;
    }
    if ((st = ta_tensor_empty(&y, 3, x.shape))) { cli_fail(st, "mha"); goto done; }
    const ta_tensor *kk = opts[O_KEYS].given ? &k : &x, *vv = opts[O_KEYS].given ? &v : &x;
    if ((st = ta_attention_forward(&y, layer, &x, kk, vv, &ao))) { cli_fail(st, "mha"); goto done; }
    if ((st = ta_npy_save(opts[O_OUT].value, &y))) { cli_fail(st, "writing -o"); goto done; }
    rc = CLI_OK;
done:
    ta_attention_free(layer);
    ta_tensor_free(&x);
    ta_tensor_free(&k);
    ta_tensor_free(&v);
    ta_tensor_free(&mask);
    ta_tensor_free(&y);
    return rc;
}
