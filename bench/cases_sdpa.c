/* Kind "sdpa": ta_sdpa(O, Q, K, V, &opts) on the reference and the fused path, each
 * shape a pair of cases (reference first). Checked on sampled query rows against
 * float64 from the definition, and, for the fused case, element by element against the
 * reference output on the same inputs. Errors are absolute: the outputs are weighted
 * means of N(0,1) values, of order 1. The causal limit goes as opts.causal or as the
 * seed's mask tensor; decoding cases may pass per-batch key lengths, and count the bytes
 * they must read. */
#include "cases_sdpa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_SDPA_RUN_ROWS 8 /* and a run of consecutive rows, with the first and the last */
#define BENCH_REF_SCRATCH_MAX ((double)(4LL << 30)) /* the reference's [B,H,Lq,Lk] floats */

int64_t bench_sdpa_visible(ta_causal causal, int64_t i, int64_t Lq, int64_t Lk)
{
    int64_t n = causal == TA_CAUSAL_TOP_LEFT ? i + 1
                : causal == TA_CAUSAL_BOTTOM_RIGHT ? i + Lk - Lq + 1 : Lk;
    return n < 0 ? 0 : n > Lk ? Lk : n;
}

/* The diagonal offset of the variants' positions: 0 top-left, else Lk - Lq. */
static int64_t sdpa_delta(const bench_sdpa *a)
{
    return a->causal == TA_CAUSAL_TOP_LEFT ? 0 : a->Lk - a->Lq;
}

int64_t bench_sdpa_keys(const bench_sdpa *a, int64_t b, int64_t i)
{
    int64_t n = bench_sdpa_visible(a->causal, i, a->Lq, a->Lk);
    if (a->window && a->wright >= 0 && i + sdpa_delta(a) + a->wright + 1 < n)
        n = i + sdpa_delta(a) + a->wright + 1;
    if (n < 0) n = 0;
    return a->ragged && a->key_lengths[b] < n ? a->key_lengths[b] : n;
}

int64_t bench_sdpa_first(const bench_sdpa *a, int64_t i)
{
    int64_t lo = a->window && a->wleft >= 0 ? i + sdpa_delta(a) - a->wleft : 0;
    return lo < 0 ? 0 : lo;
}

double bench_sdpa_slope(const bench_sdpa *a, int64_t h)
{
    return pow(2.0, -8.0 * (double)(h + 1) / (double)a->H);
}

double bench_sdpa_sink(int64_t h)
{
    return 0.25 * (double)(h % 4) - 0.5;
}

/* The unmasked (query, key) pairs of all batches and heads: the work a path that skips
 * masked keys does, and the only work GFLOP/s counts. */
static double sdpa_pairs(const bench_sdpa *a)
{
    double pairs = 0.0;
    for (int64_t b = 0; b < (a->ragged ? a->B : 1); b++)
        for (int64_t i = 0; i < a->Lq; i++) {
            int64_t n = bench_sdpa_keys(a, b, i) - bench_sdpa_first(a, i);
            pairs += (double)(n > 0 ? n : 0);
        }
    return (double)a->H * (a->ragged ? 1.0 : (double)a->B) * pairs;
}

/* The bytes a call must move at least: each key and value row that some query row of
 * its (batch, kv head) sees, read once (the last row sees the most), Q read, O written. */
static double sdpa_bytes(const bench_sdpa *a)
{
    double kv_rows = 0.0;
    for (int64_t b = 0; b < a->B; b++)
        kv_rows += (double)a->Hkv * (double)bench_sdpa_keys(a, b, a->Lq - 1);
    double q_rows = (double)a->B * (double)a->H * (double)a->Lq;
    return sizeof(float) * (double)a->D * (2.0 * kv_rows + 2.0 * q_rows);
}

const char *bench_causal_name(ta_causal causal)
{
    return causal == TA_CAUSAL_TOP_LEFT ? "top_left"
           : causal == TA_CAUSAL_BOTTOM_RIGHT ? "bottom_right" : "none";
}

int bench_sdpa_setup(bench_case *c)
{
    const bench_sdpa *a = c->state;
    const int64_t q[4] = {a->B, a->H, a->Lq, a->D}, kv[4] = {a->B, a->Hkv, a->Lk, a->D};
    const int64_t *shapes[3] = {q, kv, kv};
    for (int i = 0; i < 3; i++) {
        ta_status st = ta_tensor_empty(&c->t[i], 4, shapes[i]);
        if (st != TA_OK) return bench_lib_fail(c, "ta_tensor_empty", st);
        st = ta_randn(&c->t[i], (uint64_t)i + 11); /* as the seed's torch.randn */
        if (st != TA_OK) return bench_lib_fail(c, "ta_randn", st);
        if (a->dtype == TA_F32) continue;
        /* the half copy ta_sdpa reads, and its values back in t[i] for the oracle */
        ta_tensor *h = &c->t[a->half_at + i];
        st = ta_tensor_empty_dtype(h, a->dtype, 4, shapes[i]);
        if (st == TA_OK) st = ta_tensor_copy(h, &c->t[i]);
        if (st == TA_OK) st = ta_tensor_copy(&c->t[i], h);
        if (st != TA_OK) return bench_lib_fail(c, "the half-precision inputs", st);
    }
    if (a->mask_tensor) { /* the seed's mask: torch.triu(torch.ones(L, L), diagonal=1) */
        const int64_t m[2] = {a->Lq, a->Lk};
        ta_status st = ta_tensor_full(&c->t[4], 2, m, 1.0f);
        if (st == TA_OK) st = ta_tensor_triu(&c->t[4], 1);
        if (st != TA_OK) return bench_lib_fail(c, "the mask tensor", st);
    }
    for (int v = 0; v < 2; v++) { /* t[5] ALiBi slopes, t[6] sinks, [H] */
        if (!(v ? a->sinks : a->alibi)) continue;
        ta_status st = ta_tensor_empty(&c->t[5 + v], 1, &a->H);
        if (st != TA_OK) return bench_lib_fail(c, "ta_tensor_empty", st);
        for (int64_t h = 0; h < a->H; h++)
            ((float *)c->t[5 + v].data)[h] = (float)(v ? bench_sdpa_sink(h) : bench_sdpa_slope(a, h));
    }
    return bench_new_output(c, &c->t[3], 4, q);
}

static int sdpa_run(bench_case *c)
{
    const bench_sdpa *a = c->state;
    ta_sdpa_opts opts = {0}; /* scale 1/sqrt(D), no weights */
    opts.causal = a->mask_tensor ? TA_CAUSAL_NONE : a->causal;
    if (a->mask_tensor) {
        opts.mask = &c->t[4];
        opts.mask_mode = TA_MASK_BLOCK; /* nonzero = blocked: masked_fill_(mask, -inf) */
    }
    if (a->ragged) opts.key_lengths = a->key_lengths;
    opts.has_window = a->window;
    opts.window_left = a->wleft;
    opts.window_right = a->wright;
    opts.softcap = a->softcap;
    opts.alibi_slopes = a->alibi ? &c->t[5] : NULL;
    opts.sinks = a->sinks ? &c->t[6] : NULL;
    opts.path = a->path;
    const int in = a->dtype == TA_F32 ? 0 : a->half_at; /* Q, K, V: t[in .. in + 2] */
    ta_status st = ta_sdpa(&c->t[3], &c->t[in], &c->t[in + 1], &c->t[in + 2], &opts);
    if (st != TA_OK) return bench_lib_fail(c, "ta_sdpa", st);
    return 0;
}

double bench_sdpa_exp_row(const bench_case *c, int64_t b, int64_t h, int64_t i, double *w,
                          int64_t *n)
{
    const bench_sdpa *a = c->state;
    int64_t D = a->D, kvh = h / (a->H / a->Hkv);
    const float *q = (const float *)c->t[0].data + ((b * a->H + h) * a->Lq + i) * D;
    const float *k = (const float *)c->t[1].data + (b * a->Hkv + kvh) * a->Lk * D;
    *n = bench_sdpa_keys(a, b, i);
    const int64_t lo = bench_sdpa_first(a, i), pos = i + sdpa_delta(a);
    const double c0 = a->softcap, slope = a->alibi ? bench_sdpa_slope(a, h) : 0.0;
    double scale = 1.0 / sqrt((double)D), top = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < *n; j++) {
        double dot = 0.0;
        for (int64_t d = 0; d < D && j >= lo; d++) dot += (double)q[d] * (double)k[j * D + d];
        w[j] = dot * scale;
        if (c0 > 0.0) w[j] = c0 * tanh(w[j] / c0);
        w[j] -= slope * (double)(j > pos ? j - pos : pos - j);
        if (j < lo) w[j] = -INFINITY; /* left of the window */
        if (w[j] > top) top = w[j];
    }
    if (top == -INFINITY) return 0.0; /* sees no key: O = 0 */
    for (int64_t j = 0; j < *n; j++) sum += (w[j] = exp(w[j] - top));
    return a->sinks ? sum + exp(bench_sdpa_sink(h) - top) : sum;
}

const float *bench_sdpa_value_row(const bench_case *c, int64_t b, int64_t h, int64_t j)
{
    const bench_sdpa *a = c->state;
    int64_t kvh = h / (a->H / a->Hkv); /* grouped queries: H / Hkv query heads per kv head */
    return (const float *)c->t[2].data + ((b * a->Hkv + kvh) * a->Lk + j) * a->D;
}

/* Row (b, h, i) of softmax(Q K^T / sqrt(D)) V in float64, straight from the
 * definition, over the keys the causal alignment and the batch's key length let it see
 * (none: zeros, as ta_sdpa gives). w: Lk doubles of scratch. Returns the largest
 * |O[b,h,i,d] - exact|. */
static double sdpa_row_error(const bench_case *c, int64_t b, int64_t h, int64_t i, double *w)
{
    const bench_sdpa *a = c->state;
    int64_t D = a->D, n;
    double sum = bench_sdpa_exp_row(c, b, h, i, w, &n), worst = 0.0;
    const float *v = bench_sdpa_value_row(c, b, h, 0);
    const float *o = (const float *)c->t[3].data + ((b * a->H + h) * a->Lq + i) * D;
    for (int64_t d = 0; d < D; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++) acc += w[j] * (double)v[j * D + d];
        worst = bench_worse(worst, fabs((double)o[d] - (n ? acc / sum : 0.0)));
    }
    return worst;
}

/* Sampled rows against float64 (first, last, random ones and a run of consecutive
 * ones: every path); and, when the reference path ran on the same inputs in this run,
 * every element against its output. */
static int sdpa_check(bench_case *c, double *max_err)
{
    const bench_sdpa *a = c->state;
    int64_t rows = a->B * a->H * a->Lq;
    double *w = malloc((size_t)(a->Lk > 0 ? a->Lk : 1) * sizeof *w);
    if (!w) return bench_fail(c, "bench: out of memory for the float64 check");
    uint64_t rng = 0x853c49e6748fea9bULL;
    int64_t run_start = rows > BENCH_SDPA_RUN_ROWS
                            ? (int64_t)(bench_rand(&rng) % (uint64_t)(rows - BENCH_SDPA_RUN_ROWS))
                            : 0;
    double worst = 0.0;
    for (int n = 0; n < 2 + BENCH_SDPA_ROWS + BENCH_SDPA_RUN_ROWS && rows > 0; n++) {
        int64_t r = n == 0 ? 0
                    : n == 1 ? rows - 1
                    : n < 2 + BENCH_SDPA_ROWS ? (int64_t)(bench_rand(&rng) % (uint64_t)rows)
                    : run_start + (n - 2 - BENCH_SDPA_ROWS);
        if (r >= rows) break;
        double err = sdpa_row_error(c, r / (a->H * a->Lq), r / a->Lq % a->H, r % a->Lq, w);
        worst = bench_worse(worst, err);
    }
    free(w);
    if (c->ref_out) worst = bench_worse(worst, bench_diff_vs_reference(c));
    *max_err = worst;
    return 0;
}

void bench_sdpa_shape_text(const bench_case *c, char *buf, size_t n)
{
    const bench_sdpa *a = c->state;
    char heads[32], lens[40];
    if (a->Hkv != a->H) snprintf(heads, sizeof heads, "H%lld/%lld", (long long)a->H, (long long)a->Hkv);
    else snprintf(heads, sizeof heads, "H%lld", (long long)a->H);
    if (a->Lq != a->Lk) snprintf(lens, sizeof lens, "Lq%lld Lk%lld", (long long)a->Lq, (long long)a->Lk);
    else snprintf(lens, sizeof lens, "L%lld", (long long)a->Lq);
    const char *causal = a->mask_tensor ? " triu mask" : a->causal ? " " : "";
    int w = snprintf(buf, n, "B%lld %s %s D%lld%s%s", (long long)a->B, heads, lens,
                     (long long)a->D, causal,
                     a->causal && !a->mask_tensor ? bench_causal_name(a->causal) : "");
    if (a->ragged && w > 0 && (size_t)w < n) /* the lengths run from first to last */
        w += snprintf(buf + w, n - (size_t)w, " len%lld..%lld", (long long)a->key_lengths[0],
                      (long long)a->key_lengths[a->B - 1]);
    if (a->window && w > 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " window%lld,%lld", (long long)a->wleft,
                      (long long)a->wright);
    if (w > 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "%s%s%s", a->softcap > 0.0f ? " softcap" : "",
                      a->alibi ? " alibi" : "", a->sinks ? " sinks" : "");
    if (a->dtype != TA_F32 && w > 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, " %s", ta_dtype_name(a->dtype));
}

void bench_sdpa_shape_json(const bench_case *c, cJSON *o)
{
    const bench_sdpa *a = c->state;
    static const char *const keys[6] = {"B", "H", "Hkv", "Lq", "Lk", "D"};
    bench_json_ints(o, 6, keys, (const int64_t[6]){a->B, a->H, a->Hkv, a->Lq, a->Lk, a->D});
    /* what ta_sdpa is given: opts.causal, and the mask tensor ("triu": the seed's
     * [Lq, Lk] block mask triu(ones, 1), the top-left causal limit) */
    cJSON_AddStringToObject(o, "causal", bench_causal_name(a->mask_tensor ? TA_CAUSAL_NONE
                                                                        : a->causal));
    cJSON_AddStringToObject(o, "mask", a->mask_tensor ? "triu" : "none");
    if (a->ragged) {
        cJSON *lens = cJSON_AddArrayToObject(o, "key_lengths");
        for (int64_t b = 0; b < a->B && lens; b++)
            cJSON_AddItemToArray(lens, cJSON_CreateNumber((double)a->key_lengths[b]));
    }
    if (a->window) {
        cJSON_AddNumberToObject(o, "window_left", (double)a->wleft);
        cJSON_AddNumberToObject(o, "window_right", (double)a->wright);
    }
    if (a->softcap > 0.0f) cJSON_AddNumberToObject(o, "softcap", (double)a->softcap);
    if (a->alibi) cJSON_AddStringToObject(o, "alibi_slopes", "2^(-8 (h + 1) / H)");
    if (a->sinks) cJSON_AddStringToObject(o, "sinks", "0.25 (h % 4) - 0.5");
    cJSON_AddNumberToObject(o, "pairs", a->pairs);
    cJSON_AddStringToObject(o, "qkv_dtype", ta_dtype_name(a->dtype));
}

static const bench_kind sdpa_kind = {
    .name = "sdpa", .abs_err = 1, .setup = bench_sdpa_setup, .run = sdpa_run,
    .check = sdpa_check, .shape_text = bench_sdpa_shape_text,
    .shape_json = bench_sdpa_shape_json};

const bench_sdpa *bench_sdpa_of(const bench_case *c)
{
    return c->kind == &sdpa_kind ? c->state : NULL;
}

void bench_add_sdpa_pair(bench_state *s, const bench_kind *kind, const char *name,
                         const bench_sdpa *shape, const bench_case *proto,
                         const char *ref_skip)
{
    static const struct {
        ta_sdpa_path path;
        const char *name;
    } paths[2] = {{TA_SDPA_REFERENCE, "reference"}, {TA_SDPA_FUSED, "fused"}};
    int first = s->ncases;
    for (int p = 0; p < 2; p++) {
        bench_sdpa a = *shape;
        a.path = paths[p].path;
        bench_case c = {.kind = kind, .path = paths[p].name,
                        .state = bench_state_dup(&a, sizeof a), .flops = proto->flops,
                        .bytes = proto->bytes, .threads = s->cfg.threads,
                        .tolerance = BENCH_TOLERANCE, .twin = first + 1 - p,
                        .is_reference = p == 0, .output = proto->output};
        snprintf(c.name, sizeof c.name, "%s_%s", name, paths[p].name);
        memcpy(c.vs_causal, proto->vs_causal, sizeof c.vs_causal);
        if (proto->vs_case[0]) { /* the same path of the other shape */
            snprintf(c.vs_case, sizeof c.vs_case, "%.40s_%s", proto->vs_case, paths[p].name);
            memcpy(c.vs_key, proto->vs_key, sizeof c.vs_key);
            c.vs_scale = proto->vs_scale;
        }
        if (p == 0) snprintf(c.skip_reason, sizeof c.skip_reason, "%s", ref_skip);
        bench_add_case(s, &c);
    }
}

bench_sdpa bench_sdpa_shape(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk,
                            int64_t D, ta_causal causal)
{
    bench_sdpa a = {.B = B, .H = H, .Hkv = Hkv, .Lq = Lq, .Lk = Lk, .D = D, .causal = causal,
                    .half_at = 7};
    a.pairs = sdpa_pairs(&a);
    return a;
}

/* Appends the pair of a forward shape: flops are two multiply-adds (Q K^T and P V) per
 * unmasked pair and d; memory-bound shapes count their bytes. The reference path is
 * skipped where its [B, H, Lq, Lk] scratch would exceed 4 GiB. */
static void add_forward(bench_state *s, const char *name, const bench_sdpa *a, int memory_bound,
                        const char *vs_causal, const char *vs_plain, const char *vs_key)
{
    double scratch = (double)a->B * (double)a->H * (double)a->Lq * (double)a->Lk * sizeof(float);
    char skip[160] = "";
    if (scratch > BENCH_REF_SCRATCH_MAX)
        snprintf(skip, sizeof skip,
                 "the reference path's [B, H, Lq, Lk] scratch would take %.1f GiB (> 4 GiB)",
                 scratch / (double)(1LL << 30));
    bench_case proto = {.flops = 4.0 * a->pairs * (double)a->D, .output = 3,
                        .bytes = memory_bound ? sdpa_bytes(a) : 0.0};
    snprintf(proto.vs_causal, sizeof proto.vs_causal, "%s", vs_causal ? vs_causal : "");
    if (vs_plain) {
        snprintf(proto.vs_case, sizeof proto.vs_case, "%s", vs_plain);
        snprintf(proto.vs_key, sizeof proto.vs_key, "%s", vs_key ? vs_key : "ratio_vs_plain");
        proto.vs_scale = 1.0;
    }
    bench_add_sdpa_pair(s, &sdpa_kind, name, a, &proto, skip);
}

void bench_add_sdpa(bench_state *s, const char *name, int64_t B, int64_t H, int64_t Hkv,
                    int64_t Lq, int64_t Lk, int64_t D, ta_causal causal)
{
    bench_sdpa a = bench_sdpa_shape(B, H, Hkv, Lq, Lk, D, causal);
    add_forward(s, name, &a, 0, NULL, NULL, NULL);
}

void bench_add_sdpa_dtype(bench_state *s, const char *name, int64_t B, int64_t H, int64_t L,
                          int64_t D, ta_causal causal, ta_dtype dtype, const char *vs)
{
    bench_sdpa a = bench_sdpa_shape(B, H, H, L, L, D, causal);
    a.dtype = dtype;
    add_forward(s, name, &a, 0, NULL, vs, "ratio_vs_f32"); /* each path against f32's */
}

void bench_add_sdpa_decode(bench_state *s, const char *name, int64_t B, int64_t H, int64_t Hkv,
                           int64_t Lk, int64_t D, const int64_t *key_lengths)
{
    bench_sdpa a = bench_sdpa_shape(B, H, Hkv, 1, Lk, D, TA_CAUSAL_BOTTOM_RIGHT);
    if (key_lengths) {
        if (B > BENCH_SDPA_MAX_RAGGED) {
            fprintf(stderr, "bench: warning: %s has more than %d batches; it is left out\n",
                    name, BENCH_SDPA_MAX_RAGGED);
            return;
        }
        a.ragged = 1;
        for (int64_t b = 0; b < B; b++) a.key_lengths[b] = key_lengths[b];
        a.pairs = sdpa_pairs(&a);
    }
    add_forward(s, name, &a, 1, NULL, NULL, NULL);
}

void bench_add_sdpa_causal_mask(bench_state *s, const char *name, const char *causal_name,
                                int64_t B, int64_t H, int64_t L, int64_t D)
{
    bench_sdpa a = bench_sdpa_shape(B, H, H, L, L, D, TA_CAUSAL_TOP_LEFT);
    a.mask_tensor = 1;
    add_forward(s, name, &a, 0, causal_name, NULL, NULL);
}

void bench_add_sdpa_window(bench_state *s, const char *name, int64_t B, int64_t H, int64_t L,
                           int64_t D, int64_t left)
{
    bench_sdpa a = bench_sdpa_shape(B, H, H, L, L, D, TA_CAUSAL_BOTTOM_RIGHT);
    a.window = 1;
    a.wleft = left;
    a.wright = 0;
    a.pairs = sdpa_pairs(&a);
    add_forward(s, name, &a, 0, NULL, NULL, NULL);
}

void bench_add_sdpa_variant(bench_state *s, const char *name, int64_t B, int64_t H, int64_t L,
                            int64_t D, float softcap, int alibi, int sinks, const char *vs)
{
    bench_sdpa a = bench_sdpa_shape(B, H, H, L, L, D, TA_CAUSAL_NONE);
    a.softcap = softcap;
    a.alibi = alibi;
    a.sinks = sinks;
    add_forward(s, name, &a, 0, NULL, vs, NULL);
}
