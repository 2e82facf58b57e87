#include "cli_run.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char ta_cli_dir[64];
char ta_cli_out[8192];
char ta_cli_err[8192];

int ta_cli_make_dir(const char *tag)
{
    snprintf(ta_cli_dir, sizeof ta_cli_dir, "/tmp/%s_XXXXXX", tag);
    return mkdtemp(ta_cli_dir) ? 0 : -1;
}

int ta_cli_remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ta_cli_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void slurp(const char *path, char *text, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, size - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
}

int ta_cli_run(const char **argv)
{
    char outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/.stdout", ta_cli_dir);
    snprintf(errp, sizeof errp, "%s/.stderr", ta_cli_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        argv[0] = TA_CLI_PATH;
        execv(TA_CLI_PATH, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    slurp(outp, ta_cli_out, sizeof ta_cli_out);
    slurp(errp, ta_cli_err, sizeof ta_cli_err);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

char *ta_cli_path(const char *name)
{
    static char buf[32][160];
    static int next;
    char *p = buf[next++ % 32];
    snprintf(p, 160, "%s/%s", ta_cli_dir, name);
    return p;
}

int ta_cli_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
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
