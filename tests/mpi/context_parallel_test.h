/* Shared by the two sources of test_context_parallel (tests/mpi). */
#ifndef TA_CONTEXT_PARALLEL_TEST_H
#define TA_CONTEXT_PARALLEL_TEST_H

#include "ta_test.h"
#include "tensorattn_mpi.h"

#include <stdbool.h>

extern int rank, P; /* of MPI_COMM_WORLD */
/* ta_sdpa_context_parallel's answer before MPI_Init (main calls it first) */
extern ta_status before_init_status;
extern char before_init_msg[512];

/* A case of test_context_parallel.c: shapes, options, and how the shards are laid out. */
typedef struct cp_case {
    int64_t B, H, Hkv, L, D, Dv;
    float scale;
    ta_dtype dtype;   /* of Q, K, V */
    bool strided;     /* Q, dO and O as [B, L, H, X] views */
    bool custom;      /* ring / Ulysses: rank r holds r + 1 rows (not the standard split) */
    const int64_t *klen; /* NULL, or B global key lengths (opts.key_lengths) */
    /* variants: a window (wl, wr), softcap, ALiBi slopes of rank alibi (0: none, 1: [H],
     * 2: [B, H]), sinks (and their gradient) */
    bool window;
    int64_t wl, wr;
    float softcap;
    int alibi;
    bool sinks;
    bool sink_inf;    /* head 0's sink +inf: its rows are NaN (docs/reliability.md) */
} cp_case;

/* One scheme on one case: forward (O, LSE) and backward (dQ, dK, dV, dsinks) against the
 * single-process run of the whole sequence. Returns the largest error over every output
 * and rank. */
double run_case(const cp_case *c, ta_cp_scheme s, bool causal);
/* run_case for every case, scheme, causal and not; fails above 1e-5. */
void check_cases(const cp_case *cases, int ncases, const ta_cp_scheme *schemes, int ns);

/* context_parallel_variants.c */
void test_variants_match_single_process(void **state);
void test_variants_with_key_lengths_and_pieces(void **state);
void test_variants_disagree_and_bad_values(void **state);

/* context_parallel_errors.c */
void test_shard_partitions_the_sequence(void **state);
void test_mpi_not_initialised(void **state);
void test_deterministic_and_stats(void **state);
void test_unsupported_option_same_error_everywhere(void **state);
void test_one_rank_bad_shape_named(void **state);
void test_one_rank_out_of_memory(void **state);
void test_backward_out_of_memory_writes_nothing(void **state);
void test_ranks_disagree(void **state);
void test_scheme_requirements(void **state);
void test_intercommunicator_refused(void **state);

#endif
