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

/* context_parallel_errors.c */
void test_shard_partitions_the_sequence(void **state);
void test_mpi_not_initialised(void **state);
void test_deterministic_and_stats(void **state);
void test_unsupported_option_same_error_everywhere(void **state);
void test_one_rank_bad_shape_named(void **state);
void test_ranks_disagree(void **state);
void test_scheme_requirements(void **state);

#endif
