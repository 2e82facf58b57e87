/* The command line's door to context parallelism (cli/mpi/, built only where CMake found
 * MPI): `tensorattn sdpa ... --context-parallel SCHEME` and `tensorattn bench
 * --context-parallel SCHEMES`. Without MPI those say so and exit 2. */
#include "cli.h"

#include <string.h>

bool cli_context_parallel_requested(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--context-parallel") == 0 ||
            strncmp(argv[i], "--context-parallel=", 19) == 0)
            return true;
    }
    return false;
}

#ifdef TA_WITH_MPI
const char cli_mpi_note[] = "context parallelism over MPI: built in (mpirun -np P tensorattn "
                            "sdpa ... --context-parallel ring|zigzag|ulysses)";
#else
const char cli_mpi_note[] = "context parallelism over MPI: not built (no MPI found at build "
                            "time; scripts/setup installs Open MPI)";

static int no_mpi(void)
{
    return cli_error(CLI_USAGE, "--context-parallel needs MPI, and this tensorattn was built "
                                "without it (install Open MPI with scripts/setup and rebuild)");
}

int cmd_sdpa_context_parallel(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return no_mpi();
}

int cmd_bench_context_parallel(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return no_mpi();
}
#endif
