/* Running a command under mpirun: init, silencing, agreement, threads, shard and gather. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "cli_mpi.h"

#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Open MPI's shared-memory transport (vader) without a single-copy mechanism (as these
 * containers need: OMPI_MCA_btl_vader_single_copy_mechanism=none) hands a large message
 * over in 32 KiB fragments, each needing both processes on a core: a ring step's K/V
 * block then crawls on a busy machine. 1 MiB fragments (in a 32 MiB segment) cut the
 * time blocked on it several-fold (docs/context_parallel.md); set only when the user has not
 * chosen, before MPI_Init reads them. */
static void tune_open_mpi(void)
{
    const char *copy = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    if (!copy || strcmp(copy, "none") != 0) return;
    setenv("OMPI_MCA_btl_vader_max_send_size", "1048576", 0);
    setenv("OMPI_MCA_btl_vader_segment_size", "33554432", 0);
}

void cli_mpi_init(cli_mpi *m, int *argc, char ***argv)
{
    memset(m, 0, sizeof *m);
    m->quiet_fd[0] = m->quiet_fd[1] = -1;
    int init = 0, provided;
    MPI_Initialized(&init);
    if (!init) {
        tune_open_mpi();
        /* only this thread calls MPI; OpenMP threads compute in between */
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        m->we_init = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->P);
}

int cli_mpi_finish(cli_mpi *m, int code)
{
    fflush(stdout);
    fflush(stderr);
    if (m->we_init) MPI_Finalize();
    return code;
}

void cli_mpi_quiet(cli_mpi *m)
{
    if (m->rank == 0) return;
    fflush(stdout);
    fflush(stderr);
    int null = open("/dev/null", O_WRONLY);
    if (null < 0) return;
    m->quiet_fd[0] = dup(1);
    m->quiet_fd[1] = dup(2);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
}

void cli_mpi_loud(cli_mpi *m)
{
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; i++)
        if (m->quiet_fd[i] >= 0) {
            dup2(m->quiet_fd[i], i + 1);
            close(m->quiet_fd[i]);
            m->quiet_fd[i] = -1;
        }
}

int cli_mpi_fail(cli_mpi *m, int code, const char *fmt, ...)
{
    if (m->code) return m->code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->msg, sizeof m->msg, fmt, ap);
    va_end(ap);
    m->code = code;
    return code;
}

typedef struct verdict {
    int code;
    char msg[CLI_WHY_MAX];
} verdict;

int cli_mpi_sync(cli_mpi *m)
{
    verdict mine = {.code = m->code}, *all = malloc(sizeof(verdict) * (size_t)m->P);
    memcpy(mine.msg, m->msg, sizeof mine.msg);
    if (!all) { /* cannot agree: fail loudly everywhere rather than hang */
        fprintf(stderr, "tensorattn: error: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, CLI_FAIL);
    }
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                  MPI_COMM_WORLD);
    int code = 0;
    for (int s = 0; s < m->P && !code; s++)
        if (all[s].code) {
            code = all[s].code;
            if (m->rank == 0 && s == 0) cli_error(code, "%s", all[s].msg);
            else if (m->rank == 0) cli_error(code, "rank %d: %s", s, all[s].msg);
        }
    free(all);
    m->code = code;
    return code;
}

int cli_mpi_lib_fail(const cli_mpi *m, const char *what)
{
    if (m->rank == 0) cli_error(CLI_FAIL, "%s: %s", what, ta_last_error());
    return CLI_FAIL;
}

void cli_mpi_default_threads(const cli_mpi *m)
{
    (void)m;
    if (getenv("OMP_NUM_THREADS")) return;
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)online;
    /* bound to a subset by mpirun: that subset is this rank's; else share the node */
    int n = mine < online ? mine : mine / (local > 0 ? local : 1);
    ta_set_num_threads(n < 1 ? 1 : n);
}

/* A 3-d tensor as 4-d with a last extent of 1. */
static ta_tensor as4(const ta_tensor *t)
{
    ta_tensor v = *t;
    if (v.ndim == 3) {
        v.ndim = 4;
        v.shape[3] = 1;
        v.stride[3] = 1;
    }
    v.owned = NULL;
    return v;
}

ta_status cli_mpi_shard(ta_tensor *local, const ta_tensor *full, ta_cp_scheme scheme,
                        const cli_mpi *m)
{
    int64_t start[2], len[2];
    int n = ta_cp_shard(start, len, scheme, full->shape[2], m->P, m->rank);
    int64_t shape[4] = {full->shape[0], full->shape[1], 0, full->shape[3]};
    for (int c = 0; c < n; c++) shape[2] += len[c];
    ta_status st = ta_tensor_empty_dtype(local, full->dtype, 4, shape);
    for (int c = 0, at = 0; c < n && !st; at += (int)len[c], c++) {
        ta_tensor from, to;
        st = ta_tensor_slice(&from, full, 2, start[c], start[c] + len[c], 1);
        if (!st) st = ta_tensor_slice(&to, local, 2, at, at + len[c], 1);
        if (!st) st = ta_tensor_copy(&to, &from);
    }
    if (st) ta_tensor_free(local);
    return st;
}

/* Rows of rank s's chunks, from its contiguous shard data into full. */
static ta_status place(ta_tensor *full, float *data, ta_cp_scheme scheme, const cli_mpi *m, int s)
{
    int64_t start[2], len[2];
    int n = ta_cp_shard(start, len, scheme, full->shape[2], m->P, s);
    const int64_t shape[4] = {full->shape[0], full->shape[1], len[0] + (n > 1 ? len[1] : 0),
                              full->shape[3]};
    ta_tensor shard;
    ta_status st = ta_tensor_from_buffer(&shard, data, 4, shape, NULL);
    for (int c = 0, at = 0; c < n && !st; at += (int)len[c], c++) {
        ta_tensor from, to;
        st = ta_tensor_slice(&from, &shard, 2, at, at + len[c], 1);
        if (!st) st = ta_tensor_slice(&to, full, 2, start[c], start[c] + len[c], 1);
        if (!st) st = ta_tensor_copy(&to, &from);
    }
    return st;
}

ta_status cli_mpi_gather(ta_tensor *full, const ta_tensor *local, ta_cp_scheme scheme,
                         const cli_mpi *m)
{
    ta_tensor lv = as4(local);
    const int64_t row = lv.shape[0] * lv.shape[1] * lv.shape[3]; /* floats per row of dim 2 */
    if (m->rank != 0) {
        MPI_Send(lv.data, (int)(row * lv.shape[2]), MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
        return TA_OK;
    }
    ta_tensor fv = as4(full);
    ta_status st = place(&fv, lv.data, scheme, m, 0);
    int64_t most = 0;
    for (int s = 1; s < m->P; s++) {
        int64_t start[2], len[2];
        int n = ta_cp_shard(start, len, scheme, fv.shape[2], m->P, s);
        int64_t rows = len[0] + (n > 1 ? len[1] : 0);
        most = rows > most ? rows : most;
    }
    float *buf = malloc(sizeof(float) * (size_t)(row * most + 1));
    if (!buf) { /* the other ranks are sending: no clean way back */
        fprintf(stderr, "tensorattn: error: gathering the shards: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, CLI_FAIL);
    }
    for (int s = 1; s < m->P; s++) { /* receive every shard even after a failure */
        int64_t start[2], len[2];
        int n = ta_cp_shard(start, len, scheme, fv.shape[2], m->P, s);
        int64_t rows = len[0] + (n > 1 ? len[1] : 0);
        MPI_Recv(buf, (int)(row * rows), MPI_FLOAT, s, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!st) st = place(&fv, buf, scheme, m, s);
    }
    free(buf);
    return st;
}
