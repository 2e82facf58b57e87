/* Running the tensorattn CLI from tests: a spawn that captures stdout and stderr (in
 * the test's private directory, ta_test_make_dir), and a raw .npy writer. */
#ifndef TA_TEST_CLI_RUN_H
#define TA_TEST_CLI_RUN_H

#include <stddef.h>

#include "fixtures.h"

extern char ta_cli_out[8192];   /* the last run's stdout (truncated), terminated */
extern char ta_cli_err[8192];   /* the last run's stderr (truncated), terminated */

/* Runs TA_CLI_PATH with argv (NULL-terminated; argv[0] is replaced), in this process's
 * working directory, stdout and stderr captured into ta_cli_out / ta_cli_err (through
 * files in ta_test_dir: call ta_test_make_dir first). Returns the exit status, or 128 +
 * the signal number if it was killed. */
int ta_cli_run(const char **argv);
/* The same for another program (found on PATH unless it has a '/'); argv[0] is its name. */
int ta_cli_run_program(const char *program, const char **argv);

/* Runs argv (as ta_cli_run) and fails the test unless it exits with `code` and stderr is
 * exactly one line "tensorattn: error: ..." that contains needle (NULL: any line). */
void ta_cli_expect_error(const char **argv, int code, const char *needle);


/* A .npy v1.0 file at path with this descr ("<f4"), shape text ("(2, 3)") and raw data
 * bytes (nbytes may disagree with the shape, to make broken files). */
void ta_npy_write_raw(const char *path, const char *descr, const char *shape, const void *data,
                      size_t nbytes);

/* A fixture record as a float32 .npy at path; an integer record of shape [n] as '<i8'. */
void ta_cli_save_record(const char *path, const ta_fixture_record *r);
void ta_cli_save_i64(const char *path, const ta_fixture_record *r);
/* max |file - ref| for a record of the same shape (NaN must meet NaN). */
double ta_cli_compare_npy(const char *path, const ta_fixture_record *ref);

/* The inputs of an sdpa fixture case (sdpa.tafx, sdpa_grad.tafx) on the command line:
 * writes q, k, v, the mask and the key lengths as .npy files into ta_test_dir and appends
 * --q/--k/--v, --mask/--mask-mode, --key-lengths, --causal and --scale to argv from
 * position a (the seed's own cases, whose triu block mask already is the causal limit,
 * get no --causal). causal, mode and scale (32, 32 and 64 chars) keep the strings argv
 * points at. Returns the next position. */
int ta_cli_sdpa_inputs(const char **argv, int a, const ta_fixture_file *f, const char *name,
                       char *causal, char *mode, char *scale);

#endif
