/* Shared pieces of the command-line tool. */
#ifndef TA_CLI_H
#define TA_CLI_H

#include "tensorattn.h"

#include <stdbool.h>
#include <stddef.h>

/* Exit codes of the CLI contract. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Prints "tensorattn: error: <message>" on stderr, one line (a newline or another
 * control character in the message is written as \n or \xHH); returns code. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reports a failed library call: "tensorattn: error: <what>: <ta_last_error()>". */
int cli_fail(ta_status st, const char *what);

/* A small option parser: "--name value", "--name=value" and bare flags.
 * Options are declared in a table; parsing fills their value fields. */
typedef struct cli_opt {
    const char *name;    /* "--q" */
    bool takes_value;    /* false: a flag */
    bool optional_value; /* a flag that may take a value (e.g. --causal [align]) */
    const char *value;   /* out: the value, or NULL */
    bool given;          /* out */
} cli_opt;

/* Parses argv[first..argc-1] against opts (terminated by name == NULL). Positional
 * arguments are stored in pos (up to max_pos; their count in *npos). "--help" prints
 * help on stdout and returns CLI_HELP_SHOWN (the command then exits 0). Prints a usage
 * error and returns CLI_USAGE on an unknown option or a missing value; CLI_OK else. */
enum { CLI_HELP_SHOWN = -1 };
int cli_parse(int argc, char **argv, int first, cli_opt *opts, const char **pos, int max_pos,
              int *npos, const char *help);
cli_opt *cli_find(cli_opt *opts, const char *name);

/* Parses an integer / float option value; on failure prints a usage error. */
bool cli_int(const char *opt, const char *text, long long min, long long max, long long *out);
bool cli_float(const char *opt, const char *text, float *out);

/* --mask-mode: keep|block|additive into *mode when given (it needs --mask); returns
 * false after printing a usage error. */
bool cli_mask_mode(const cli_opt *mode_opt, const cli_opt *mask_opt, ta_mask_mode *mode);

/* The attention variants' flags of sdpa (and kvcache), found in opts by name:
 * --window LEFT,RIGHT (integers >= -1) and --softcap C (> 0) into *so when given; returns
 * false after printing a usage error (exit 2). */
bool cli_variant_flags(cli_opt *opts, ta_sdpa_opts *so);
/* --alibi-slopes S.npy and --sinks S.npy when given: loaded into *slopes and *sinks (free
 * them with ta_tensor_free) and set in *so; returns false after printing an error (exit
 * 1). Their shapes are the library's to check. */
bool cli_variant_files(cli_opt *opts, ta_sdpa_opts *so, ta_tensor *slopes, ta_tensor *sinks);

/* --kv-dtype f32|f16|bf16 (found in opts by name) into *dt (TA_F32 when absent); returns
 * false after printing a usage error. */
bool cli_kv_dtype(cli_opt *opts, ta_dtype *dt);
/* *t (owning, float32) becomes a new tensor of dtype dt with its values rounded to
 * nearest-even, as an inference engine's cache stores them (nothing for TA_F32); returns
 * false after printing an error. */
bool cli_store_as(ta_tensor *t, ta_dtype dt, const char *what);

/* A file a command reads or writes: its option ("-o") and path (NULL: not given). */
typedef struct cli_file {
    const char *opt;
    const char *path;
} cli_file;

/* The entries of an array. */
#define CLI_COUNT(a) ((int)(sizeof(a) / sizeof(a)[0]))

/* Whether the outputs name files apart from each other and from the inputs (the command
 * line never writes its inputs, and two outputs in one file would leave one of them):
 * the same string, the same existing file, or the same name in the same directory
 * (realpath); and none of out is the empty string. Else false after printing a usage
 * error (exit 2). */
bool cli_outputs_apart(const cli_file *in, int nin, const cli_file *out, int nout);

/* An output of a command: its option, path (NULL: not written) and tensor. */
typedef struct cli_out {
    const char *opt;
    const char *path;
    const ta_tensor *t;
} cli_out;

/* Writes every given output as .npy, all or none: each goes whole to a temporary file
 * beside its path first (ta_npy_save), and the temporaries are renamed over the paths
 * only once every one of them is written; on any failure they are removed and no path
 * has changed (a rename that fails after others succeeded - the paths were checked for
 * anything but regular files before - is the one exception). Returns false with why (the error's text,
 * exit 1) filled: CLI_WHY_MAX bytes hold any of its messages whole (an option, a path of
 * up to PATH_MAX bytes, and the system's reason or the library's message, which holds
 * 9216). */
enum { CLI_WHY_MAX = 9216 + 4096 };
bool cli_save_all(const cli_out *outs, int n, char *why, size_t cap);

/* Applies --threads if given (returns false after printing an error). */
bool cli_threads(cli_opt *opts);

/* "[32, 8, 512, 64]" */
void cli_print_shape(const ta_tensor *t);

int cmd_demo(int argc, char **argv);
int cmd_einsum(int argc, char **argv);
int cmd_sdpa(int argc, char **argv);
int cmd_kvcache(int argc, char **argv);
int cmd_mha(int argc, char **argv);

/* Context parallelism over MPI (cmd_context_parallel.c; cli/mpi/ where MPI was found):
 * whether argv (from argv[2]) asks for --context-parallel, the two commands, and a line
 * for --help saying whether MPI is built in. */
bool cli_context_parallel_requested(int argc, char **argv);
int cmd_sdpa_context_parallel(int argc, char **argv);
int cmd_bench_context_parallel(int argc, char **argv);
extern const char cli_mpi_note[];

#endif
