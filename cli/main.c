/* tensorattn: the command-line tool. Uses only the public header.
 * Contract (DESIGN.md): exit 0 on success, 2 on a usage error, 1 on bad input or a
 * failed computation, always with one line "tensorattn: error: ..." on stderr. */
#include "bench.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: tensorattn <command> [options]\n"
    "\n"
    "Tensor-based self-attention: scaled dot-product attention, masks, einsum and\n"
    "multi-head attention layers.\n"
    "\n"
    "commands:\n"
    "  demo     run the seed example (B=32, H=8, L=512, D=64, causal) and time it\n"
    "  sdpa     scaled dot-product attention on .npy files\n"
    "  kvcache  attention against a KV cache (contiguous or paged) on .npy files\n"
    "  mha      a self-attention layer (seed or torch layout) on .npy files\n"
    "  einsum   an einsum contraction of one or two .npy files\n"
    "  bench    benchmarks: FMA peak, GEMM, einsum, attention\n"
    "\n"
    "  tensorattn --version | --help ; tensorattn <command> --help\n";

static int run_command(int argc, char **argv)
{
    if (argc < 2) return cli_error(CLI_USAGE, "missing command (see tensorattn --help)");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        printf("\n%s\n", cli_mpi_note);
        return CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("tensorattn %s\n", ta_version());
        return CLI_OK;
    }
    if (strcmp(cmd, "demo") == 0) return cmd_demo(argc, argv);
    if (strcmp(cmd, "sdpa") == 0) return cmd_sdpa(argc, argv);
    if (strcmp(cmd, "kvcache") == 0) return cmd_kvcache(argc, argv);
    if (strcmp(cmd, "mha") == 0) return cmd_mha(argc, argv);
    if (strcmp(cmd, "einsum") == 0) return cmd_einsum(argc, argv);
    if (strcmp(cmd, "bench") == 0)
        return cli_context_parallel_requested(argc, argv) ? cmd_bench_context_parallel(argc, argv)
                                                          : ta_bench_main(argc - 1, argv + 1);
    return cli_error(CLI_USAGE, "unknown command '%s' (see tensorattn --help)", cmd);
}

int main(int argc, char **argv)
{
    int rc = run_command(argc, argv);
    /* What a command printed (help, the demo's and the bench's results) must have reached
     * stdout: a full disk or /dev/full is a failed run, not a success with nothing shown. */
    errno = 0;
    const bool flushed = fflush(stdout) == 0;
    if (rc == CLI_OK && (!flushed || ferror(stdout)))
        rc = cli_error(CLI_FAIL, "writing the standard output failed%s%s", errno ? ": " : "",
                       errno ? strerror(errno) : "");
    return rc;
}
