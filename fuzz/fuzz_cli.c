/* libFuzzer target: the command-line tool's argument handling, end to end but cheap.
 * The CLI sources are compiled in with main renamed (-Dmain=cli_main). The input is
 * split at newlines and NULs into at most 24 arguments; every '/' is removed, so every
 * path is a plain name inside a private temporary directory (the working directory),
 * which holds tiny valid inputs: q.npy k.npy v.npy [1,2,3,4], m.npy [3,5] mask,
 * l.npy [1] key lengths, x.npy [1,3,8], w.safetensors (seed layout, E=8 H=2),
 * wt.safetensors (torch layout) and bad.npy (truncated). What it covers: option
 * parsing (unknown options, missing and duplicate values, "--opt=value", "--",
 * numbers out of range), command dispatch, input loading, validation and the small
 * computations and atomic writes of sdpa, mha and einsum. Not covered: "demo" and
 * "bench" (heavy by design: their input is skipped) and the output of the commands
 * (not checked for correctness here; tests/test_cli.c does that).
 * Every run must return 0, 1 or 2; files the run created are removed after it. */
#include "tensorattn.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_main(int argc, char **argv);

/* The CLI links the bench command's entry; the harness never calls it. */
int ta_bench_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return 2;
}

static const char *const cli_base_files[] = {"q.npy", "k.npy", "v.npy", "m.npy", "l.npy",
                                             "x.npy", "w.safetensors", "wt.safetensors",
                                             "bad.npy", NULL};

static void cli_save(const char *name, int nd, const int64_t *shape, uint64_t seed)
{
    ta_tensor t;
    if (ta_tensor_empty(&t, nd, shape) || ta_randn(&t, seed) || ta_npy_save(name, &t)) abort();
    ta_tensor_free(&t);
}

static char cli_dir[64] = "/tmp/ta_fuzz_cli_XXXXXX";

/* At exit: the sandbox goes (every file in it was made by this process). */
static void cli_remove_sandbox(void)
{
    for (int i = 0; cli_base_files[i]; i++) unlink(cli_base_files[i]);
    if (chdir("/") == 0) rmdir(cli_dir);
}

static void cli_cleanup(void);

static void cli_setup(void)
{
    static int done;
    if (done) return;
    done = 1;
    setenv("OMP_THREAD_LIMIT", "2", 1); /* --threads 4096 must not spawn 4096 threads */
    if (!mkdtemp(cli_dir) || chdir(cli_dir) != 0) abort();
    atexit(cli_remove_sandbox);
    atexit(cli_cleanup); /* runs first: the run's own files */
    const int64_t s4[4] = {1, 2, 3, 4}, sm[2] = {3, 5}, sx[3] = {1, 3, 8};
    cli_save("q.npy", 4, s4, 1);
    const int64_t sk[4] = {1, 2, 5, 4};
    cli_save("k.npy", 4, sk, 2);
    cli_save("v.npy", 4, sk, 3);
    ta_tensor m;
    if (ta_tensor_ones(&m, 2, sm) || ta_npy_save("m.npy", &m)) abort();
    ta_tensor_free(&m);
    cli_save("x.npy", 3, sx, 4);
    FILE *f = fopen("l.npy", "wb");
    static const char lnpy[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<i8', 'fortran_order': False, "
                               "'shape': (1,), }";
    fwrite(lnpy, 1, sizeof lnpy - 1, f);
    for (size_t i = sizeof lnpy - 1; i < 127; i++) fputc(' ', f);
    fputc('\n', f);
    int64_t len = 4;
    fwrite(&len, 8, 1, f);
    fclose(f);
    f = fopen("bad.npy", "wb");
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fclose(f);
    ta_attention *l;
    if (ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 1) || ta_attention_save("w.safetensors", l))
        abort();
    ta_attention_free(l);
    if (ta_attention_create(&l, TA_LAYOUT_TORCH, 8, 2, 1) || ta_attention_save("wt.safetensors", l))
        abort();
    ta_attention_free(l);
}

/* Removes every file the run created. */
static void cli_cleanup(void)
{
    DIR *d = opendir(".");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        int base = 0;
        for (int i = 0; cli_base_files[i]; i++) base |= strcmp(cli_base_files[i], e->d_name) == 0;
        if (!base) unlink(e->d_name);
    }
    if (d) closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_setup();
    if (size > 2048) return 0;
    char buf[2049];
    size_t n = 0;
    for (size_t i = 0; i < size; i++)
        if (data[i] != '/') buf[n++] = data[i] == '\n' ? '\0' : (char)data[i];
    buf[n] = '\0';
    char *argv[26];
    int argc = 0;
    argv[argc++] = "tensorattn";
    for (size_t i = 0; i <= n && argc < 25;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    if (argc > 1 && (strcmp(argv[1], "demo") == 0 || strcmp(argv[1], "bench") == 0)) return 0;
    int rc = cli_main(argc, argv);
    fflush(stdout);
    ta_set_num_threads(2);
    cli_cleanup();
    if (rc < 0 || rc > 2) abort();
    return 0;
}
