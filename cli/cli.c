/* Option parsing and error reporting for the command-line tool. */
/* realpath (XSI), mkstemp (POSIX 2008) */
#define _XOPEN_SOURCE 700
#include "cli.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_error(int code, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    char small[1024], *big = NULL; /* out of memory: the message cut at 1023 bytes */
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) small[0] = '\0';
    if (n >= (int)sizeof small && (big = malloc((size_t)n + 1)))
        vsnprintf(big, (size_t)n + 1, fmt, again);
    const char *msg = big ? big : small;
    va_end(again);
    va_end(ap);
    /* one line whatever the message quotes: a file name or an argument may hold a
     * newline or another control character, written here as \n or \xHH, and a backslash
     * as \\ (so that a name holding "\n" itself reads apart from a newline) */
    fputs("tensorattn: error: ", stderr);
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++) {
        if (*c == '\n') fputs("\\n", stderr);
        else if (*c == '\\') fputs("\\\\", stderr);
        else if (*c < 0x20 || *c == 0x7f) fprintf(stderr, "\\x%02x", *c);
        else fputc(*c, stderr);
    }
    fputc('\n', stderr);
    free(big);
    return code;
}

int cli_fail(ta_status st, const char *what)
{
    (void)st;
    return cli_error(CLI_FAIL, "%s: %s", what, ta_last_error());
}

cli_opt *cli_find(cli_opt *opts, const char *name)
{
    for (cli_opt *o = opts; o->name; o++)
        if (strcmp(o->name, name) == 0) return o;
    return NULL;
}

int cli_parse(int argc, char **argv, int first, cli_opt *opts, const char **pos, int max_pos,
              int *npos, const char *help)
{
    *npos = 0;
    bool help_wanted = false;
    bool options_done = false;
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = true; /* everything after "--" is positional */
            continue;
        }
        /* "->" begins an einsum spec with no input indices, not an option */
        bool positional = options_done || arg[0] != '-' || strcmp(arg, "-") == 0 ||
                          strncmp(arg, "->", 2) == 0;
        if (positional) {
            if (*npos >= max_pos) return cli_error(CLI_USAGE, "unexpected argument '%s'", arg);
            pos[(*npos)++] = arg;
            continue;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            help_wanted = true;
            continue;
        }
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name) return cli_error(CLI_USAGE, "unknown option '%s'", arg);
        memcpy(name, arg, len);
        name[len] = '\0';
        cli_opt *o = cli_find(opts, name);
        if (!o) return cli_error(CLI_USAGE, "unknown option '%s' (see --help)", name);
        if (o->given) return cli_error(CLI_USAGE, "option %s given twice", name);
        o->given = true;
        if (o->takes_value) {
            if (eq) o->value = eq + 1;
            else if (i + 1 < argc) o->value = argv[++i];
            else return cli_error(CLI_USAGE, "option %s needs a value", name);
        } else if (o->optional_value) {
            if (eq) o->value = eq + 1;
            else if (i + 1 < argc && argv[i + 1][0] != '-') o->value = argv[++i];
        } else if (eq) {
            return cli_error(CLI_USAGE, "option %s takes no value", name);
        }
    }
    if (help_wanted) {
        fputs(help, stdout);
        return CLI_HELP_SHOWN;
    }
    return CLI_OK;
}

bool cli_int(const char *opt, const char *text, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        cli_error(CLI_USAGE, "%s expects an integer in [%lld, %lld], got '%s'", opt, min, max, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *opt, const char *text, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    /* finite as a float too: 1e39 is a finite double, and converting a double beyond
     * the float range is undefined behaviour */
    if (errno || end == text || *end || !isfinite(v) || fabs(v) > FLT_MAX) {
        cli_error(CLI_USAGE, "%s expects a finite number, got '%s'", opt, text);
        return false;
    }
    *out = (float)v;
    return true;
}

bool cli_mask_mode(const cli_opt *mode_opt, const cli_opt *mask_opt, ta_mask_mode *mode)
{
    if (!mode_opt->given) return true;
    const char *m = mode_opt->value;
    if (!mask_opt->given) return cli_error(CLI_USAGE, "--mask-mode needs --mask"), false;
    if (strcmp(m, "keep") == 0) *mode = TA_MASK_KEEP;
    else if (strcmp(m, "block") == 0) *mode = TA_MASK_BLOCK;
    else if (strcmp(m, "additive") == 0) *mode = TA_MASK_ADDITIVE;
    else return cli_error(CLI_USAGE, "--mask-mode expects keep, block or additive, got '%s'", m), false;
    return true;
}

/* One integer >= -1 of a "LEFT,RIGHT" pair: digits with an optional leading '-' (no
 * spaces, no '+'), ending at stop; *next is where it ended. */
static bool window_bound(const char *text, char stop, long long *v, const char **next)
{
    char *end;
    if (!(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return false;
    errno = 0;
    *v = strtoll(text, &end, 10);
    *next = end;
    return !errno && end != text && *end == stop && *v >= -1;
}

bool cli_variant_flags(cli_opt *opts, ta_sdpa_opts *so)
{
    cli_opt *w = cli_find(opts, "--window"), *c = cli_find(opts, "--softcap");
    if (w && w->given) {
        long long left, right;
        const char *next;
        if (!window_bound(w->value, ',', &left, &next) ||
            !window_bound(next + 1, '\0', &right, &next))
            return cli_error(CLI_USAGE, "--window expects LEFT,RIGHT, two integers >= -1 "
                             "(-1: unbounded), got '%s'", w->value), false;
        so->has_window = 1;
        so->window_left = left;
        so->window_right = right;
    }
    if (c && c->given) {
        if (!cli_float("--softcap", c->value, &so->softcap)) return false;
        if (!(so->softcap > 0.0f))
            return cli_error(CLI_USAGE, "--softcap must be > 0 (leave it out for no softcap), "
                             "got '%s'", c->value), false;
    }
    return true;
}

bool cli_variant_files(cli_opt *opts, ta_sdpa_opts *so, ta_tensor *slopes, ta_tensor *sinks)
{
    cli_opt *a = cli_find(opts, "--alibi-slopes"), *s = cli_find(opts, "--sinks");
    ta_status st;
    if (a && a->given) {
        if ((st = ta_npy_load(slopes, a->value))) return cli_fail(st, "reading --alibi-slopes"), false;
        so->alibi_slopes = slopes;
    }
    if (s && s->given) {
        if ((st = ta_npy_load(sinks, s->value))) return cli_fail(st, "reading --sinks"), false;
        so->sinks = sinks;
    }
    return true;
}

bool cli_kv_dtype(cli_opt *opts, ta_dtype *dt)
{
    cli_opt *o = cli_find(opts, "--kv-dtype");
    *dt = TA_F32;
    if (!o || !o->given) return true;
    if (!strcmp(o->value, "f32")) *dt = TA_F32;
    else if (!strcmp(o->value, "f16")) *dt = TA_F16;
    else if (!strcmp(o->value, "bf16")) *dt = TA_BF16;
    else return cli_error(CLI_USAGE, "--kv-dtype expects f32, f16 or bf16, got '%s'", o->value), false;
    return true;
}

bool cli_store_as(ta_tensor *t, ta_dtype dt, const char *what)
{
    if (dt == t->dtype) return true;
    ta_tensor r;
    ta_status st = ta_tensor_empty_dtype(&r, dt, t->ndim, t->shape);
    if (!st && (st = ta_tensor_copy(&r, t))) ta_tensor_free(&r);
    if (st) return cli_fail(st, what), false;
    ta_tensor_free(t);
    *t = r;
    return true;
}

bool cli_threads(cli_opt *opts)
{
    cli_opt *o = cli_find(opts, "--threads");
    if (!o || !o->given) return true;
    long long n;
    if (!cli_int("--threads", o->value, 1, 4096, &n)) return false;
    ta_set_num_threads((int)n);
    return true;
}

void cli_print_shape(const ta_tensor *t)
{
    putchar('[');
    for (int i = 0; i < t->ndim; i++) printf(i ? ", %lld" : "%lld", (long long)t->shape[i]);
    putchar(']');
}

/* path's directory made absolute (realpath) and its last name after it, malloc'd; NULL
 * where the directory does not resolve or the name is not a plain one. */
static char *canonical_name(const char *path)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) return NULL;
    char dir[PATH_MAX];
    const size_t dl = slash ? (size_t)(slash - path) : 0;
    if (dl + 1 > sizeof dir) return NULL;
    memcpy(dir, path, dl);
    dir[dl] = '\0';
    char *real = realpath(slash ? (dl ? dir : "/") : ".", NULL);
    if (!real) return NULL;
    const size_t n = strlen(real) + strlen(base) + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s/%s", real, base);
    free(real);
    return out;
}

/* Whether two paths name one file: the same string, the same existing file (device and
 * inode), or, neither existing, the same name in the same directory. */
static bool same_file(const char *a, const char *b)
{
    if (!strcmp(a, b)) return true;
    struct stat sa, sb;
    const bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb) return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char *ca = canonical_name(a), *cb = canonical_name(b);
    const bool same = ca && cb && !strcmp(ca, cb);
    free(ca);
    free(cb);
    return same;
}

bool cli_outputs_apart(const cli_file *in, int nin, const cli_file *out, int nout)
{
    for (int i = 0; i < nout; i++) {
        if (!out[i].path) continue;
        if (!*out[i].path) /* else found only after the computation, when renamed to "" */
            return cli_error(CLI_USAGE, "%s needs a file name ('' given)", out[i].opt), false;
        for (int j = 0; j < nin; j++)
            if (in[j].path && same_file(out[i].path, in[j].path))
                return cli_error(CLI_USAGE, "%s '%s' is the input file of %s: the command line "
                                 "never writes its inputs", out[i].opt, out[i].path, in[j].opt),
                       false;
        for (int j = 0; j < i; j++)
            if (out[j].path && same_file(out[i].path, out[j].path))
                return cli_error(CLI_USAGE, "%s and %s name the same file '%s'", out[j].opt,
                                 out[i].opt, out[i].path),
                       false;
    }
    return true;
}

enum { CLI_MAX_OUTS = 16 };

bool cli_save_all(const cli_out *outs, int n, char *why, size_t cap)
{
    char *stage[CLI_MAX_OUTS] = {0};
    bool ok = n <= CLI_MAX_OUTS;
    if (!ok) snprintf(why, cap, "internal: more than %d outputs", CLI_MAX_OUTS);
    for (int i = 0; ok && i < n; i++) {
        const char *path = outs[i].path;
        if (!path) continue;
        struct stat st;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* as ta_npy_save refuses it */
            snprintf(why, cap, "writing %s: %s exists and is not a regular file (a directory, "
                     "device or pipe), which the written file would replace", outs[i].opt, path);
            ok = false;
            break;
        }
        /* the temporary: "<dir>/.tmp.XXXXXX", short enough for the writer's own suffix */
        const char *slash = strrchr(path, '/');
        const int dir = slash ? (int)(slash + 1 - path) : 0;
        const size_t len = (size_t)dir + sizeof ".tmp.XXXXXX";
        if (!(stage[i] = malloc(len))) {
            snprintf(why, cap, "writing %s: out of memory", outs[i].opt);
            ok = false;
            break;
        }
        snprintf(stage[i], len, "%.*s.tmp.XXXXXX", dir, path);
        const int fd = mkstemp(stage[i]);
        if (fd < 0) {
            snprintf(why, cap, "writing %s: cannot create a file beside %s: %s", outs[i].opt,
                     path, strerror(errno));
            free(stage[i]);
            stage[i] = NULL;
            ok = false;
            break;
        }
        close(fd);
        if (ta_npy_save(stage[i], outs[i].t)) {
            snprintf(why, cap, "writing %s: %s", outs[i].opt, ta_last_error());
            ok = false;
        }
    }
    for (int i = 0; ok && i < n; i++) {
        if (!stage[i]) continue;
        if (rename(stage[i], outs[i].path) != 0) {
            snprintf(why, cap, "writing %s: cannot rename the written file to %s: %s",
                     outs[i].opt, outs[i].path, strerror(errno));
            ok = false;
            break;
        }
        free(stage[i]);
        stage[i] = NULL;
    }
    for (int i = 0; i < n && i < CLI_MAX_OUTS; i++)
        if (stage[i]) {
            unlink(stage[i]);
            free(stage[i]);
        }
    return ok;
}
