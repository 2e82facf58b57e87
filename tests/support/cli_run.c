#include "cli_run.h"
#include "ta_test.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char ta_cli_out[8192];
char ta_cli_err[8192];

static void slurp(const char *path, char *text, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, size - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
}

int ta_cli_run(const char **argv)
{
    argv[0] = TA_CLI_PATH;
    return ta_cli_run_program(TA_CLI_PATH, argv);
}

int ta_cli_run_program(const char *program, const char **argv)
{
    char outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/.stdout", ta_test_dir);
    snprintf(errp, sizeof errp, "%s/.stderr", ta_test_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execvp(program, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    slurp(outp, ta_cli_out, sizeof ta_cli_out);
    slurp(errp, ta_cli_err, sizeof ta_cli_err);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void ta_cli_expect_error(const char **argv, int code, const char *needle)
{
    char cmd[512] = "";
    for (int i = 1; argv[i]; i++) { /* truncated when long: room for " " and the NUL */
        size_t used = strlen(cmd);
        if (used + 2 >= sizeof cmd) break;
        strncat(cmd, argv[i], sizeof cmd - used - 2);
        strcat(cmd, " ");
    }
    int rc = ta_cli_run(argv);
    if (rc != code) fail_msg("'%s' exited %d, expected %d; stderr: %s", cmd, rc, code, ta_cli_err);
    if (strncmp(ta_cli_err, "tensorattn: error: ", 19) != 0)
        fail_msg("'%s': stderr does not start with 'tensorattn: error: ': %s", cmd, ta_cli_err);
    const char *nl = strchr(ta_cli_err, '\n');
    if (!nl || nl[1] != '\0') fail_msg("'%s': stderr is not exactly one line: %s", cmd, ta_cli_err);
    if (needle && !strstr(ta_cli_err, needle))
        fail_msg("'%s': stderr lacks '%s': %s", cmd, needle, ta_cli_err);
}

void ta_npy_write_raw(const char *path, const char *descr, const char *shape, const void *data,
                      size_t nbytes)
{
    char header[256];
    int n = snprintf(header, sizeof header,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    int pad = (64 - (10 + n + 1) % 64) % 64; /* magic, version, length, header, '\n' */
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint16_t hl = (uint16_t)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hl, 2, 1, f);
    fwrite(header, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    if (nbytes) fwrite(data, 1, nbytes, f);
    fclose(f);
}

void ta_cli_save_record(const char *path, const ta_fixture_record *r)
{
    ta_tensor t;
    TA_CHECK_OK(ta_fixture_tensor(&t, r));
    TA_CHECK_OK(ta_npy_save(path, &t));
    ta_tensor_free(&t);
}

void ta_cli_save_i64(const char *path, const ta_fixture_record *r)
{
    char shape[32];
    snprintf(shape, sizeof shape, "(%lld,)", (long long)r->shape[0]);
    ta_npy_write_raw(path, "<i8", shape, r->data, (size_t)r->numel * 8);
}

double ta_cli_compare_npy(const char *path, const ta_fixture_record *ref)
{
    ta_tensor o;
    TA_CHECK_OK(ta_npy_load(&o, path));
    assert_int_equal(o.ndim, ref->ndim);
    for (int d = 0; d < o.ndim; d++) assert_int_equal(o.shape[d], ref->shape[d]);
    double *want = malloc(sizeof(double) * (size_t)(ref->numel ? ref->numel : 1));
    TA_CHECK_OK(ta_fixture_to_f64(want, (size_t)ref->numel, ref));
    double d = ta_test_max_err(&o, want, 0.0, 0, NULL);
    free(want);
    ta_tensor_free(&o);
    return d;
}

int ta_cli_sdpa_inputs(const char **argv, int a, const ta_fixture_file *f, const char *name,
                       char *causal, char *mode, char *scale)
{
    const char *meta = ta_fixture_case_meta(f, name);
    ta_fixture_meta_get(meta, "causal", causal, 32);
    ta_fixture_meta_get(meta, "scale", scale, 64);
    int has_mode = ta_fixture_meta_get(meta, "mask_mode", mode, 32);
    const char *roles[3] = {"q", "k", "v"}, *flags[3] = {"--q", "--k", "--v"};
    for (int r = 0; r < 3; r++) {
        char file[16];
        snprintf(file, sizeof file, "%s.npy", roles[r]);
        char *p = ta_test_path(file);
        ta_cli_save_record(p, ta_fixture_case_record(f, name, roles[r]));
        argv[a++] = flags[r];
        argv[a++] = p;
    }
    const ta_fixture_record *mask = ta_fixture_case_record(f, name, "mask");
    const ta_fixture_record *klen = ta_fixture_case_record(f, name, "key_lengths");
    if (mask) {
        ta_cli_save_record(ta_test_path("mask.npy"), mask);
        argv[a++] = "--mask";
        argv[a++] = ta_test_path("mask.npy");
        argv[a++] = "--mask-mode";
        argv[a++] = has_mode ? mode : "keep";
    }
    if (klen) {
        ta_cli_save_i64(ta_test_path("klen.npy"), klen);
        argv[a++] = "--key-lengths";
        argv[a++] = ta_test_path("klen.npy");
    }
    bool seed_mask = mask && has_mode && strcmp(mode, "block") == 0 && strncmp(name, "seed", 4) == 0;
    if (strcmp(causal, "none") != 0 && !seed_mask) {
        argv[a++] = "--causal";
        argv[a++] = causal;
    }
    if (strtod(scale, NULL) != 0.0) {
        argv[a++] = "--scale";
        argv[a++] = scale;
    }
    return a;
}
