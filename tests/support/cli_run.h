/* Running the tensorattn CLI from tests: a private temporary directory, a spawn that
 * captures stdout and stderr, paths in that directory, and a raw .npy writer. */
#ifndef TA_TEST_CLI_RUN_H
#define TA_TEST_CLI_RUN_H

#include <stddef.h>

extern char ta_cli_dir[64];     /* the directory, after ta_cli_make_dir */
extern char ta_cli_out[8192];   /* the last run's stdout (truncated), terminated */
extern char ta_cli_err[8192];   /* the last run's stderr (truncated), terminated */

/* mkdtemp("/tmp/<tag>_XXXXXX") into ta_cli_dir; 0 on success (cmocka setup style). */
int ta_cli_make_dir(const char *tag);
/* rm -rf ta_cli_dir; 0 on success. */
int ta_cli_remove_dir(void);

/* Runs TA_CLI_PATH with argv (NULL-terminated; argv[0] is replaced), in this process's
 * working directory, stdout and stderr captured into ta_cli_out / ta_cli_err. Returns
 * the exit status, or 128 + the signal number if it was killed. */
int ta_cli_run(const char **argv);

/* "<ta_cli_dir>/<name>" from a ring of 32 buffers: enough for one command line. */
char *ta_cli_path(const char *name);
int ta_cli_exists(const char *path);

/* A .npy v1.0 file at path with this descr ("<f4"), shape text ("(2, 3)") and raw data
 * bytes (nbytes may disagree with the shape, to make broken files). */
void ta_npy_write_raw(const char *path, const char *descr, const char *shape, const void *data,
                      size_t nbytes);

#endif
