/* --peers: a PyTorch peer timed on the attention shapes that ran here, in its best
 * configuration (GLIBC_TUNABLES in the child's environment: glibc keeps freed memory, so
 * calls reuse touched pages). Two peers, one per run:
 *   - by default the seed's PyTorch code (bench/peers/torch_seed.py, run by Debian's
 *     /usr/bin/python3 with python3-torch) on the seed shapes;
 *   - with --torch-python PY, PyTorch 2.x's flash SDPA (bench/peers/torch_sdpa.py, run
 *     by PY) on every attention case, forward and backward, given as JSON: the cases'
 *     own shape fields, so a field the script does not know skips that case there
 *     instead of timing another shape.
 * Optional by nature: a missing python, torch or script skips it with the reason,
 * never fails the run. */
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
#define BENCH_NO_TORCH_EXIT 3 /* torch_sdpa.py: this python has no torch >= 2.1 */

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

/* bench/peers/<name>: $<env>, else under the current directory, beside the executable
 * or one level up (a build directory in the tree). */
static int find_peer_script(const char *name, const char *env_name, char *out, size_t n)
{
    const char *env = getenv(env_name);
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return readable(out);
    }
    snprintf(out, n, "bench/peers/%s", name);
    if (readable(out)) return 1;
    char exe[2048];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 0;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    static const char *const up[] = {"", "../"};
    for (int i = 0; i < 2; i++) {
        int w = snprintf(out, n, "%s/%sbench/peers/%s", exe, up[i], name);
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

/* One row per shape: case i ran, and its twin did not run before it. */
static int first_of_shape(const bench_state *s, int i)
{
    const bench_case *c = &s->cases[i];
    return bench_case_ok(c) && !(c->twin >= 0 && c->twin < i && bench_case_ok(&s->cases[c->twin]));
}

/* Whether an attention case has an attention variant (window, softcap, ALiBi, sinks):
 * the peers' scripts compute plain attention, so such cases get no peer. */
static int has_variant(const bench_case *c)
{
    const bench_sdpa *a = bench_sdpa_of(c);
    return a && (a->window || a->softcap > 0.0f || a->alibi || a->sinks);
}

/* torch_seed.py: the seed's shapes (self-attention, the seed's own causal mask or none). */
static int seed_eligible(const bench_state *s, int i)
{
    const bench_case *c = &s->cases[i];
    const bench_sdpa *a = bench_sdpa_of(c);
    return a && !has_variant(c) && first_of_shape(s, i) && !strncmp(c->name, "sdpa_seed", 9) && a->Hkv == a->H &&
           a->Lq == a->Lk && a->causal != TA_CAUSAL_BOTTOM_RIGHT;
}

/* torch_sdpa.py: every attention case (kinds "sdpa", "sdpa_backward", ...). */
static int sdpa_eligible(const bench_state *s, int i)
{
    const bench_case *c = &s->cases[i];
    return first_of_shape(s, i) && !strncmp(c->kind->name, "sdpa", 4) && c->twin >= 0 &&
           !has_variant(c);
}

/* A command line being built; full once something did not fit. */
typedef struct command_buf {
    char *buf;
    size_t cap, len;
    int full;
} command_buf;

static void command_add(command_buf *b, const char *fmt, ...)
{
    if (b->full) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len) b->full = 1;
    else b->len += (size_t)n;
}

/* str in single quotes for the shell, a ' inside as '\''. */
static void command_add_quoted(command_buf *b, const char *str)
{
    command_add(b, "'");
    for (const char *p = str; *p; p++) {
        if (*p == '\'') command_add(b, "'\\''");
        else command_add(b, "%c", *p);
    }
    command_add(b, "'");
}

/* torch_seed.py's command line: the bench's threads and runs, one --shape per eligible
 * case. Returns the number of shapes, or -1 when it does not fit. */
static int seed_command(bench_state *s, const char *script)
{
    command_buf b = {s->torch.command, sizeof s->torch.command, 0, 0};
    command_add(&b, "GLIBC_TUNABLES=%s %s ", BENCH_TORCH_TUNABLES, BENCH_PYTHON);
    command_add_quoted(&b, script);
    command_add(&b, " --json --threads %d --runs %d", s->cfg.threads, s->cfg.quick ? 2 : 3);
    int shapes = 0;
    for (int i = 0; i < s->ncases; i++) {
        const bench_case *c = &s->cases[i];
        char base[64];
        if (!seed_eligible(s, i) || !sdpa_base_name(c, base, sizeof base)) continue;
        const bench_sdpa *a = bench_sdpa_of(c);
        command_add(&b, " --shape %s,%lld,%lld,%lld,%lld,%s", base, (long long)a->B,
                    (long long)a->H, (long long)a->Lq, (long long)a->D,
                    bench_causal_name(a->causal));
        shapes++;
    }
    return b.full ? -1 : shapes;
}

/* torch_sdpa.py's: --cases, a JSON list of {name, kind, the case's shape fields}. */
static int sdpa_command(bench_state *s, const char *script)
{
    cJSON *list = cJSON_CreateArray();
    int shapes = 0;
    for (int i = 0; i < s->ncases && list; i++) {
        const bench_case *c = &s->cases[i];
        char base[64];
        if (!sdpa_eligible(s, i) || !sdpa_base_name(c, base, sizeof base)) continue;
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(list, o)) {
            cJSON_Delete(o);
            cJSON_Delete(list);
            return -1;
        }
        cJSON_AddStringToObject(o, "name", base);
        cJSON_AddStringToObject(o, "kind", c->kind->name);
        c->kind->shape_json(c, o);
        shapes++;
    }
    char *json = list ? cJSON_PrintUnformatted(list) : NULL;
    cJSON_Delete(list);
    if (!json) return -1;
    command_buf b = {s->torch.command, sizeof s->torch.command, 0, 0};
    command_add(&b, "GLIBC_TUNABLES=%s ", BENCH_TORCH_TUNABLES);
    command_add_quoted(&b, s->cfg.torch_python);
    command_add(&b, " ");
    command_add_quoted(&b, script);
    command_add(&b, " --jsonl --threads %d%s --cases ", s->cfg.threads,
                s->cfg.quick ? " --quick" : "");
    command_add_quoted(&b, json);
    cJSON_free(json);
    return b.full ? -1 : shapes;
}

/* A row of the peer: a JSON object with a name and a median_s or a status. */
static int peer_row(const cJSON *row)
{
    return row && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(row, "name")) &&
           (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "median_s")) ||
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(row, "status")));
}

/* The row's median when it timed its case (the seed's rows have no status). */
static double row_median(const cJSON *row)
{
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(row, "status");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(row, "median_s");
    if (cJSON_IsString(st) && strcmp(st->valuestring, "ok")) return NAN;
    return cJSON_IsNumber(m) && m->valuedouble > 0.0 ? m->valuedouble : NAN;
}

void bench_run_torch_peer(bench_state *s)
{
    int sdpa = s->cfg.torch_python != NULL;
    const char *python = sdpa ? s->cfg.torch_python : BENCH_PYTHON;
    const char *name = sdpa ? "torch_sdpa.py" : "torch_seed.py";
    const char *env = sdpa ? "TA_TORCH_SDPA_PEER" : "TA_TORCH_PEER";
    char script[2048];
    if (!find_peer_script(name, env, script, sizeof script)) {
        torch_skip(s, "bench/peers/%s not found (set %s)", name, env);
        return;
    }
    if (access(python, X_OK) != 0) {
        torch_skip(s, "%s is not there", python);
        return;
    }
    int shapes = sdpa ? sdpa_command(s, script) : seed_command(s, script);
    if (shapes < 0) {
        torch_skip(s, "the peer's command line is too long");
        return;
    }
    if (!shapes) {
        torch_skip(s, "no %sattention case ran (see --filter)", sdpa ? "" : "seed ");
        return;
    }
    bench_progress(s, "the torch peer: %s on %d shape%s ...",
                   sdpa ? "PyTorch's flash SDPA" : "the seed's PyTorch code", shapes,
                   shapes == 1 ? "" : "s");
    char redirected[sizeof s->torch.command + 8];
    snprintf(redirected, sizeof redirected, "%s 2>&1", s->torch.command);
    FILE *p = popen(redirected, "r");
    if (!p) {
        torch_skip(s, "cannot start %s: %s", python, strerror(errno));
        return;
    }
    /* JSON lines are rows; anything else (a traceback) is kept to say why it failed. */
    cJSON *rows = cJSON_CreateArray();
    char line[8192], last[512] = "";
    while (fgets(line, sizeof line, p)) {
        cJSON *row = line[0] == '{' ? cJSON_Parse(line) : NULL;
        if (rows && peer_row(row)) {
            cJSON_AddItemToArray(rows, row);
        } else {
            cJSON_Delete(row);
            line[strcspn(line, "\n")] = '\0';
            if (line[0]) snprintf(last, sizeof last, "%.500s", line);
        }
    }
    int status = pclose(p);
    int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (!rows || status != 0) {
        cJSON_Delete(rows);
        if (sdpa && code == BENCH_NO_TORCH_EXIT && last[0]) /* its one line says why */
            torch_skip(s, "%s", last);
        else
            torch_skip(s, "%s exited with status %d%s%s", python, code, last[0] ? ": " : "",
                       last);
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
            const char *name = cJSON_GetObjectItemCaseSensitive(row, "name")->valuestring;
            double median = row_median(row);
            if (strcmp(name, base) == 0 && median > 0.0 && c->median_s > 0.0)
                c->speedup_vs_torch = median / c->median_s;
        }
    }
}

/* The torch version the rows report (torch_sdpa.py's rows carry it), or "". */
static const char *rows_torch_version(const cJSON *rows)
{
    const cJSON *row;
    cJSON_ArrayForEach(row, rows)
    {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, "torch");
        if (cJSON_IsString(v)) return v->valuestring;
    }
    return "";
}

void bench_print_torch(const bench_state *s)
{
    if (!s->torch.status) return;
    int sdpa = s->cfg.torch_python != NULL;
    if (sdpa)
        printf("\npeer: PyTorch %s scaled_dot_product_attention, CPU flash kernel "
               "(bench/peers/torch_sdpa.py with %s, %d thread%s, GLIBC_TUNABLES=%s)\n",
               s->torch.rows ? rows_torch_version(s->torch.rows) : "2.x", s->cfg.torch_python,
               s->cfg.threads, s->cfg.threads == 1 ? "" : "s", BENCH_TORCH_TUNABLES);
    else
        printf("\npeer: the seed's PyTorch code (bench/peers/torch_seed.py, %d thread%s, "
               "GLIBC_TUNABLES=%s)\n", s->cfg.threads, s->cfg.threads == 1 ? "" : "s",
               BENCH_TORCH_TUNABLES);
    if (!s->torch.rows) {
        printf("  skipped: %s\n", s->torch.reason);
        return;
    }
    printf("  %-28s %12s %9s   our paths: x speed-up over torch\n", "case", "torch ms", "GFLOP/s");
    const cJSON *row;
    cJSON_ArrayForEach(row, s->torch.rows)
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(row, "name")->valuestring;
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(row, "gflops");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(row, "status");
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(row, "error");
        double median = row_median(row);
        if (!isfinite(median)) {
            printf("  %-28s %s: %s\n", name, cJSON_IsString(st) ? st->valuestring : "?",
                   cJSON_IsString(err) ? err->valuestring : "");
            continue;
        }
        printf("  %-28s %12.3f %9.1f  ", name, median * 1e3,
               cJSON_IsNumber(g) ? g->valuedouble : NAN);
        for (int i = 0; i < s->ncases; i++) {
            const bench_case *c = &s->cases[i];
            char base[64];
            if (bench_case_ok(c) && isfinite(c->speedup_vs_torch) &&
                sdpa_base_name(c, base, sizeof base) && !strcmp(base, name))
                printf(" %s x%.2f", c->path, c->speedup_vs_torch);
        }
        printf("\n");
    }
    fflush(stdout);
}
