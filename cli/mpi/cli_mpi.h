/* The command line under mpirun (built only where MPI was found): every rank runs the
 * same command on the same files; failures are agreed so that every rank exits with the
 * same code and rank 0 alone prints the one error line. */
#ifndef TA_CLI_MPI_H
#define TA_CLI_MPI_H

#include "cli.h"
#include "tensorattn_mpi.h"

#include <stdbool.h>

typedef struct cli_mpi {
    int rank, P;
    bool we_init; /* this command called MPI_Init (and calls MPI_Finalize) */
    int quiet_fd[2]; /* saved stdout, stderr while a non-root rank is silenced */
    int code;     /* this rank's first failure (0: none) and its message (whole: a path of
                   * up to PATH_MAX and the library's message) */
    char msg[CLI_WHY_MAX];
} cli_mpi;

/* MPI_Init_thread (FUNNELED) unless MPI is already up; rank and size of MPI_COMM_WORLD. */
void cli_mpi_init(cli_mpi *m, int *argc, char ***argv);
/* MPI_Finalize if cli_mpi_init called MPI_Init; returns code. */
int cli_mpi_finish(cli_mpi *m, int code);
/* Silences stdout and stderr on ranks other than 0 (argument parsing and help print the
 * same thing on every rank), and restores them. */
void cli_mpi_quiet(cli_mpi *m);
void cli_mpi_loud(cli_mpi *m);
/* Records this rank's failure (the first one wins): code and message; returns code. */
int cli_mpi_fail(cli_mpi *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The agreement: every rank learns the lowest failing rank's code and message; rank 0
 * prints "tensorattn: error: <message>". Returns the code (0 when no rank failed). */
int cli_mpi_sync(cli_mpi *m);
/* A library call that failed alike on every rank (the MPI layer agrees itself): rank 0
 * prints "<what>: ta_last_error()"; returns CLI_FAIL. */
int cli_mpi_lib_fail(const cli_mpi *m, const char *what);
/* Unless --threads or OMP_NUM_THREADS says otherwise: the cores this rank may use,
 * shared among the ranks on its node (2 ranks on 2 cores: one thread each). */
void cli_mpi_default_threads(const cli_mpi *m);

/* This rank's shard of a full [B, X, L, W] tensor (rows of dim 2, ta_cp_shard's split):
 * a new contiguous tensor (float32 unless the input is f16/bf16: same dtype). */
ta_status cli_mpi_shard(ta_tensor *local, const ta_tensor *full, ta_cp_scheme scheme,
                        const cli_mpi *m);
/* The ranks' shards [B, X, Lr, W] (contiguous float32) gathered into full [B, X, L, W] on
 * rank 0 (full is ignored elsewhere). 3-d tensors (the LSE) are taken as [.., 1]. */
ta_status cli_mpi_gather(ta_tensor *full, const ta_tensor *local, ta_cp_scheme scheme,
                         const cli_mpi *m);

#endif
