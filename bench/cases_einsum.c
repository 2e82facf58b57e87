/* Kind "einsum": ta_einsum on the seed's four attention einsums, with operands filled
 * U[-1, 1). The spec's letters map to the case's (B, H, Lq, Lk, D); the check computes
 * sampled output elements in float64 straight from the spec. */
#include "bench_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct einsum_case {
    int64_t B, H, Lq, Lk, D;
    const char *spec;    /* two operands, explicit output: "bhid,bhjd->bhij" */
    const char *letters; /* the spec's letters for (B, H, Lq, Lk, D), in that order */
} einsum_case;

/* The einsum spec split in three letter strings; 0 if it has another form (the
 * oracle below handles two operands, explicit output, no ellipsis or repeats). */
static int split_spec(const char *spec, char a[16], char b[16], char out[16])
{
    char *parts[3] = {a, b, out};
    int part = 0, n = 0;
    for (const char *p = spec; *p; p++) {
        if (*p == ',' && part == 0) {
            parts[part++][n] = '\0', n = 0;
        } else if (p[0] == '-' && p[1] == '>' && part == 1) {
            parts[part++][n] = '\0', n = 0, p++;
        } else if (((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) && n < 15) {
            parts[part][n++] = *p;
        } else {
            return 0;
        }
    }
    parts[part][n] = '\0';
    return part == 2 && a[0] && b[0] && out[0];
}

/* Size of an einsum letter from the case's (B, H, Lq, Lk, D) and its letter map. */
static int64_t letter_size(const einsum_case *e, char letter)
{
    const char *at = strchr(e->letters, letter);
    if (!at || !letter) return -1;
    const int64_t dims[5] = {e->B, e->H, e->Lq, e->Lk, e->D};
    return dims[at - e->letters];
}

static int letters_shape(bench_case *c, const char *letters, int64_t *shape)
{
    const einsum_case *e = c->state;
    int n = (int)strlen(letters);
    if (n > TA_MAX_DIMS)
        return bench_fail(c, "bench: einsum operand '%s' has too many dims", letters);
    for (int i = 0; i < n; i++)
        if ((shape[i] = letter_size(e, letters[i])) < 0)
            return bench_fail(c, "bench: einsum letter '%c' of %s has no size", letters[i],
                              e->spec);
    return 0;
}

/* t[0], t[1]: the operands, U[-1, 1); t[2]: the output, of the shape the spec names. */
static int einsum_setup(bench_case *c)
{
    const einsum_case *e = c->state;
    char la[16], lb[16], lo[16];
    if (!split_spec(e->spec, la, lb, lo))
        return bench_fail(c, "bench: cannot read einsum spec '%s'", e->spec);
    int64_t shape[TA_MAX_DIMS];
    const char *ops[2] = {la, lb};
    for (int i = 0; i < 2; i++) {
        if (letters_shape(c, ops[i], shape)) return -1;
        ta_status st = ta_tensor_empty(&c->t[i], (int)strlen(ops[i]), shape);
        if (st != TA_OK) return bench_lib_fail(c, "ta_tensor_empty", st);
        st = ta_rand_uniform(&c->t[i], -1.0f, 1.0f, (uint64_t)i + 1);
        if (st != TA_OK) return bench_lib_fail(c, "ta_rand_uniform", st);
    }
    if (letters_shape(c, lo, shape)) return -1;
    return bench_new_output(c, &c->t[2], (int)strlen(lo), shape);
}

static int einsum_run(bench_case *c)
{
    const einsum_case *e = c->state;
    ta_status st = ta_einsum(&c->t[2], e->spec, &c->t[0], &c->t[1]);
    if (st != TA_OK) return bench_lib_fail(c, "ta_einsum", st);
    return 0;
}

/* One output element of a two-operand einsum in float64, straight from the
 * definition: sum over the letters absent from the output of a[...] * b[...]. */
static void einsum_element(const bench_case *c, const char *la, const char *lb, const char *lo,
                           int64_t val[128], double *ref, double *scale)
{
    char both[32], sum[16];
    int64_t size[16];
    int ns = 0;
    snprintf(both, sizeof both, "%s%s", la, lb);
    for (const char *p = both; *p; p++)
        if (!strchr(lo, *p) && !memchr(sum, *p, (size_t)ns)) {
            sum[ns] = *p;
            size[ns++] = letter_size(c->state, *p);
            val[(unsigned char)*p] = 0;
        }
    double acc = 0.0, abs_acc = 0.0;
    for (;;) {
        int64_t ia[TA_MAX_DIMS], ib[TA_MAX_DIMS];
        for (int i = 0; la[i]; i++) ia[i] = val[(unsigned char)la[i]];
        for (int i = 0; lb[i]; i++) ib[i] = val[(unsigned char)lb[i]];
        double x = (double)*ta_tensor_at_const(&c->t[0], ia) * (double)*ta_tensor_at_const(&c->t[1], ib);
        acc += x;
        abs_acc += fabs(x);
        int d = ns - 1; /* odometer over the summed letters */
        while (d >= 0 && ++val[(unsigned char)sum[d]] == size[d]) val[(unsigned char)sum[d--]] = 0;
        if (d < 0) break;
    }
    *ref = acc;
    *scale = abs_acc;
}

static int einsum_check(bench_case *c, double *max_rel_err)
{
    const einsum_case *es = c->state;
    char la[16], lb[16], lo[16];
    if (!split_spec(es->spec, la, lb, lo))
        return bench_fail(c, "bench: cannot read einsum spec '%s'", es->spec);
    const ta_tensor *out = &c->t[2];
    bench_sampler smp = bench_sampler_start(ta_tensor_numel(out), 0x2545f4914f6cdd1dULL);
    double worst = 0.0;
    for (int64_t e; (e = bench_sampler_next(&smp)) >= 0;) {
        int64_t idx[TA_MAX_DIMS], val[128] = {0};
        for (int d = out->ndim - 1; d >= 0; d--) { /* unravel in row-major order */
            idx[d] = e % out->shape[d];
            e /= out->shape[d];
            val[(unsigned char)lo[d]] = idx[d];
        }
        double ref, scale;
        einsum_element(c, la, lb, lo, val, &ref, &scale);
        double err = bench_rel_err(*ta_tensor_at_const(out, idx), ref, scale);
        if (err > worst) worst = err;
    }
    *max_rel_err = worst;
    return 0;
}

static void einsum_shape_text(const bench_case *c, char *buf, size_t n)
{
    const einsum_case *e = c->state;
    snprintf(buf, n, "%s B%lld H%lld L%lld D%lld", e->spec, (long long)e->B, (long long)e->H,
             (long long)e->Lq, (long long)e->D);
}

static void einsum_shape_json(const bench_case *c, cJSON *o)
{
    const einsum_case *e = c->state;
    static const char *const keys[5] = {"B", "H", "Lq", "Lk", "D"};
    bench_json_ints(o, 5, keys, (const int64_t[5]){e->B, e->H, e->Lq, e->Lk, e->D});
    cJSON_AddStringToObject(o, "spec", e->spec);
}

static const bench_kind einsum_kind = {
    .name = "einsum", .setup = einsum_setup, .run = einsum_run, .check = einsum_check,
    .shape_text = einsum_shape_text, .shape_json = einsum_shape_json};

void bench_add_einsum(bench_state *s, const char *name, const char *spec, const char *letters,
                      int64_t B, int64_t H, int64_t L, int64_t D)
{
    einsum_case e = {.B = B, .H = H, .Lq = L, .Lk = L, .D = D, .spec = spec, .letters = letters};
    bench_case c = {.kind = &einsum_kind, .path = "einsum",
                    .state = bench_state_dup(&e, sizeof e),
                    /* one multiply-add per (b, h, i, j, d) */
                    .flops = 2.0 * (double)B * (double)H * (double)L * (double)L * (double)D,
                    .threads = s->cfg.threads, .tolerance = BENCH_TOLERANCE, .twin = -1,
                    .output = 2};
    snprintf(c.name, sizeof c.name, "%s", name);
    bench_add_case(s, &c);
}
