/* --peers: the seed's PyTorch code (bench/peers/torch_seed.py, run by Debian's
 * /usr/bin/python3 with python3-torch) timed on the seed shapes that ran here, in its
 * best configuration (glibc keeps freed memory, so calls reuse touched pages). Optional
 * by nature: a missing python, torch or script skips it with the reason, never fails. */
#define _POSIX_C_SOURCE 200809L

#include "cases_sdpa.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BENCH_TORCH_TUNABLES \
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

/* The script: $TA_TORCH_PEER, else bench/peers/torch_seed.py under the current
 * directory, beside the executable or one level up (a build directory in the tree). */
static int find_torch_script(char *out, size_t n)
{
    const char *env = getenv("TA_TORCH_PEER");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return readable(out);
    }
    if (readable("bench/peers/torch_seed.py")) {
        snprintf(out, n, "bench/peers/torch_seed.py");
        return 1;
    }
    char exe[2048];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 0;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    static const char *const rel[] = {"bench/peers/torch_seed.py", "../bench/peers/torch_seed.py"};
    for (int i = 0; i < 2; i++) {
        int w = snprintf(out, n, "%s/%s", exe, rel[i]);
        if (w > 0 && (size_t)w < n && readable(out)) return 1;
    }
    return 0;
}

static void torch_skip(bench_state *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->torch.reason, sizeof s->torch.reason, fmt, ap);
    va_end(ap);
    s->torch.status = "skipped";
    bench_progress_clear(s);
    fprintf(stderr, "bench: the torch peer is skipped: %s\n", s->torch.reason);
}

/* The name a case shares with its peer row: "sdpa_seed_fused" -> "sdpa_seed". */
static int sdpa_base_name(const bench_case *c, char *out, size_t n)
{
    size_t len = strlen(c->name), suffix = strlen(c->path) + 1;
    if (c->twin < 0 || len <= suffix || len - suffix >= n) return 0;
    memcpy(out, c->name, len - suffix);
    out[len - suffix] = '\0';
    return 1;
}

/* The seed's shapes (self-attention, the seed's own causal mask or none) that ran. */
static int torch_eligible(const bench_state *s, int i)
{
    const bench_case *c = &s->cases[i];
    const bench_sdpa *a = bench_sdpa_of(c);
    if (!a || !bench_case_ok(c) || strncmp(c->name, "sdpa_seed", 9) || a->Hkv != a->H ||
        a->Lq != a->Lk || a->causal == TA_CAUSAL_BOTTOM_RIGHT)
        return 0;
    /* one row per shape: the first of its two paths that ran */
    return !(c->twin >= 0 && c->twin < i && bench_case_ok(&s->cases[c->twin]));
}

/* The peer's command line: the bench's threads and runs, one --shape per eligible
 * case. Returns the number of shapes, or -1 when it does not fit. */
static int torch_command(bench_state *s, const char *script)
{
    char *cmd = s->torch.command;
    size_t cap = sizeof s->torch.command;
    int w = snprintf(cmd, cap, "GLIBC_TUNABLES=%s %s '%s' --json --threads %d --runs %d",
                     BENCH_TORCH_TUNABLES, BENCH_PYTHON, script, s->cfg.threads,
                     s->cfg.quick ? 2 : 3);
    int shapes = 0;
    for (int i = 0; i < s->ncases && w > 0 && (size_t)w < cap; i++) {
        const bench_case *c = &s->cases[i];
        char base[64];
        if (!torch_eligible(s, i) || !sdpa_base_name(c, base, sizeof base)) continue;
        const bench_sdpa *a = bench_sdpa_of(c);
        w += snprintf(cmd + w, cap - (size_t)w, " --shape %s,%lld,%lld,%lld,%lld,%s", base,
                      (long long)a->B, (long long)a->H, (long long)a->Lq, (long long)a->D,
                      bench_causal_name(a->causal));
        shapes++;
    }
    return w <= 0 || (size_t)w + 8 >= cap ? -1 : shapes;
}

void bench_run_torch_peer(bench_state *s)
{
    char script[2048];
    if (!find_torch_script(script, sizeof script) || strchr(script, '\'')) {
        torch_skip(s, "bench/peers/torch_seed.py not found (set TA_TORCH_PEER)");
        return;
    }
    if (access(BENCH_PYTHON, X_OK) != 0) {
        torch_skip(s, "%s is not there", BENCH_PYTHON);
        return;
    }
    int shapes = torch_command(s, script);
    if (shapes < 0) {
        torch_skip(s, "the peer's command line is too long");
        return;
    }
    if (!shapes) {
        torch_skip(s, "no seed attention case ran (see --filter)");
        return;
    }
    bench_progress(s, "the torch peer: the seed's PyTorch code on %d shape%s ...", shapes,
                   shapes == 1 ? "" : "s");
    char redirected[sizeof s->torch.command + 8];
    snprintf(redirected, sizeof redirected, "%s 2>&1", s->torch.command);
    FILE *p = popen(redirected, "r");
    if (!p) {
        torch_skip(s, "cannot start %s: %s", BENCH_PYTHON, strerror(errno));
        return;
    }
    /* JSON lines are rows; anything else (a traceback) is kept to say why it failed. */
    cJSON *rows = cJSON_CreateArray();
    char line[4096], last[512] = "";
    while (fgets(line, sizeof line, p)) {
        cJSON *row = line[0] == '{' ? cJSON_Parse(line) : NULL;
        if (row && rows && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(row, "name")) &&
            cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "median_s"))) {
            cJSON_AddItemToArray(rows, row);
        } else {
            cJSON_Delete(row);
            line[strcspn(line, "\n")] = '\0';
            if (line[0]) snprintf(last, sizeof last, "%.500s", line);
        }
    }
    int status = pclose(p);
    if (!rows || status != 0) {
        cJSON_Delete(rows);
        torch_skip(s, "%s exited with status %d%s%s", BENCH_PYTHON,
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1, last[0] ? ": " : "", last);
        return;
    }
    s->torch.rows = rows;
    s->torch.status = "ok";
}

void bench_finish_torch_ratios(bench_state *s)
{
    if (!s->torch.rows) return;
    for (int i = 0; i < s->ncases; i++) {
        bench_case *c = &s->cases[i];
        char base[64];
        if (!bench_case_ok(c) || !sdpa_base_name(c, base, sizeof base)) continue;
        const cJSON *row;
        cJSON_ArrayForEach(row, s->torch.rows)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(row, "name");
            double median = cJSON_GetObjectItemCaseSensitive(row, "median_s")->valuedouble;
            if (strcmp(name->valuestring, base) == 0 && median > 0.0 && c->median_s > 0.0)
                c->speedup_vs_torch = median / c->median_s;
        }
    }
}

void bench_print_torch(const bench_state *s)
{
    if (!s->torch.status) return;
    printf("\npeer: the seed's PyTorch code (bench/peers/torch_seed.py, %d thread%s, "
           "GLIBC_TUNABLES=%s)\n", s->cfg.threads, s->cfg.threads == 1 ? "" : "s",
           BENCH_TORCH_TUNABLES);
    if (!s->torch.rows) {
        printf("  skipped: %s\n", s->torch.reason);
        return;
    }
    const cJSON *row;
    cJSON_ArrayForEach(row, s->torch.rows)
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(row, "name")->valuestring;
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(row, "gflops");
        printf("  %-20s median %10.3f ms  %7.1f GFLOP/s", name,
               cJSON_GetObjectItemCaseSensitive(row, "median_s")->valuedouble * 1e3,
               cJSON_IsNumber(g) ? g->valuedouble : NAN);
        for (int i = 0; i < s->ncases; i++) {
            const bench_case *c = &s->cases[i];
            char base[64];
            if (bench_case_ok(c) && isfinite(c->speedup_vs_torch) &&
                sdpa_base_name(c, base, sizeof base) && !strcmp(base, name))
                printf("   %s x%.2f", c->path, c->speedup_vs_torch);
        }
        printf("\n");
    }
    fflush(stdout);
}
