/* tensorattn einsum SPEC A.npy [B.npy] -o C.npy */
#include "cli.h"

#include <stdio.h>

static const char help[] =
    "usage: tensorattn einsum SPEC A.npy [B.npy] -o C.npy [--threads N]\n"
    "\n"
    "torch.einsum for one or two float32 operands, e.g.\n"
    "  tensorattn einsum 'bhid,bhjd->bhij' Q.npy K.npy -o S.npy\n"
    "Inputs: .npy, C order, <f4 or <f8 (converted). Output: <f4, written whole or not at all;\n"
    "-o naming an input is a usage error.\n";

int cmd_einsum(int argc, char **argv)
{
    cli_opt opts[] = {{.name = "-o", .takes_value = true},
                      {.name = "--threads", .takes_value = true},
                      {0}};
    const char *pos[3];
    int npos;
    int rc = cli_parse(argc, argv, 2, opts, pos, 3, &npos, help);
    if (rc) return rc == CLI_HELP_SHOWN ? CLI_OK : rc;
    if (npos < 2) return cli_error(CLI_USAGE, "einsum needs SPEC and one or two .npy files");
    if (!opts[0].given) return cli_error(CLI_USAGE, "einsum needs -o C.npy");
    if (!cli_threads(opts)) return CLI_USAGE;
    const cli_file ins[] = {{"A", pos[1]}, {"B", npos == 3 ? pos[2] : NULL}},
                   out[] = {{"-o", opts[0].value}};
    if (!cli_outputs_apart(ins, CLI_COUNT(ins), out, CLI_COUNT(out))) return CLI_USAGE;
    ta_tensor a = {0}, b = {0}, c = {0};
    ta_status st = ta_npy_load(&a, pos[1]);
    if (st) return cli_fail(st, "reading A");
    if (npos == 3 && (st = ta_npy_load(&b, pos[2]))) {
        ta_tensor_free(&a);
        return cli_fail(st, "reading B");
    }
    st = npos == 3 ? ta_einsum_alloc(&c, pos[0], &a, &b) : ta_einsum1_alloc(&c, pos[0], &a);
    if (!st) st = ta_npy_save(opts[0].value, &c);
    rc = st ? cli_fail(st, "einsum") : CLI_OK;
    ta_tensor_free(&a);
    ta_tensor_free(&b);
    ta_tensor_free(&c);
    return rc;
}
