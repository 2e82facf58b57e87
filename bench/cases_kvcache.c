/* Kinds "kvcache" and "varlen": inference (issue 11).
 *
 * kvcache: one decode step of ta_sdpa_kvcache on the fused path: each sequence appends
 * one key and value (at seqlens[b] = Lk_b - 1, the same row every run) and its query
 * attends to its Lk_b keys. The cache is float32, float16 or bfloat16, contiguous
 * [B, Lmax, Hkv, D] or paged [blocks, block, Hkv, D] with a block table that scatters
 * each sequence's blocks at random. Memory-bound: bytes count the keys and values read
 * (in the cache's dtype), q, the new rows and O.
 * varlen: ta_sdpa on packed sequences of different lengths (cu_seqlens), causal, fused;
 * compared with the same batch padded to the longest (a plain sdpa case).
 * Both check sampled query rows against float64 from the definition, reading the
 * cache's stored (rounded) values, so every dtype is held to the float32 tolerance. */
#include "bench_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAX_SEQS 16
#define KV_ROWS 24 /* sampled (sequence, head) rows checked per call */

typedef struct bench_kv {
    int64_t B, H, Hkv, D, Lmax, block; /* block 0: contiguous */
    int64_t max_blocks, nblocks;       /* paged */
    int64_t lens[KV_MAX_SEQS];         /* keys per sequence after the append */
    int32_t seqlens[KV_MAX_SEQS];      /* lens - 1: where the new key goes */
    int32_t *table;                    /* paged: [B, max_blocks], made by setup */
    ta_dtype dtype;                    /* the cache's */
    ta_dtype q_dtype;                  /* q's: float32, or the cache's (a half model) */
} bench_kv;

static int64_t kv_sum(const bench_kv *a)
{
    int64_t n = 0;
    for (int64_t b = 0; b < a->B; b++) n += a->lens[b];
    return n;
}

/* t[0] q [B,1,H,D] (q_dtype), t[1] and t[2] the caches, t[3] O [B,1,H,D], t[4] and t[5]
 * the new key and value [B,1,Hkv,D] (float32). */
static int kv_setup(bench_case *c)
{
    bench_kv *a = c->state;
    const int64_t q[4] = {a->B, 1, a->H, a->D}, kn[4] = {a->B, 1, a->Hkv, a->D};
    int64_t cache[4] = {a->B, a->Lmax, a->Hkv, a->D};
    if (a->block) {
        a->max_blocks = (a->Lmax + a->block - 1) / a->block;
        a->nblocks = a->B * a->max_blocks;
        cache[0] = a->nblocks;
        cache[1] = a->block;
        a->table = malloc(sizeof(int32_t) * (size_t)a->nblocks);
        int64_t *perm = malloc(sizeof(int64_t) * (size_t)a->nblocks);
        if (!a->table || !perm) {
            free(perm);
            return bench_fail(c, "bench: out of memory for the block table");
        }
        /* a random permutation of the blocks (Fisher-Yates, fixed seed) */
        uint64_t rng = 0x9e3779b97f4a7c15ULL;
        for (int64_t i = 0; i < a->nblocks; i++) perm[i] = i;
        for (int64_t i = a->nblocks - 1; i > 0; i--) {
            int64_t j = (int64_t)(bench_rand(&rng) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t i = 0; i < a->nblocks; i++) a->table[i] = (int32_t)perm[i];
        free(perm);
    }
    ta_status st = ta_tensor_empty_dtype(&c->t[0], a->q_dtype, 4, q);
    if (!st) st = ta_randn(&c->t[0], 11);
    for (int i = 1; i <= 2 && !st; i++) {
        st = ta_tensor_empty_dtype(&c->t[i], a->dtype, 4, cache);
        if (!st) st = ta_randn(&c->t[i], 11 + (uint64_t)i);
    }
    for (int i = 4; i <= 5 && !st; i++) {
        st = ta_tensor_empty(&c->t[i], 4, kn);
        if (!st) st = ta_randn(&c->t[i], 20 + (uint64_t)i);
    }
    if (st) return bench_lib_fail(c, "the kvcache inputs", st);
    for (int64_t b = 0; b < a->B; b++) a->seqlens[b] = (int32_t)(a->lens[b] - 1);
    return bench_new_output(c, &c->t[3], 4, q);
}

static void kv_cleanup(bench_case *c)
{
    bench_kv *a = c->state;
    free(a->table);
    a->table = NULL;
}

static ta_kv_cache kv_cache_of(bench_case *c)
{
    const bench_kv *a = c->state;
    return (ta_kv_cache){.k = &c->t[1], .v = &c->t[2], .seqlens = a->seqlens,
                         .block_table = a->table, .max_blocks = a->max_blocks};
}

static int kv_run(bench_case *c)
{
    ta_kv_cache cache = kv_cache_of(c);
    const ta_sdpa_opts opts = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .path = TA_SDPA_FUSED};
    ta_status st = ta_sdpa_kvcache(&c->t[3], &c->t[0], &cache, &c->t[4], &c->t[5], &opts);
    return st ? bench_lib_fail(c, "ta_sdpa_kvcache", st) : 0;
}

/* Which keys a checked row reads: case c's, of sequence b (kv_check: its cache; varlen:
 * the packed rows from row b) and kv head g. */
typedef struct row_at {
    const bench_case *c;
    int64_t b, g;
} row_at;

/* Reads key (value false) or value row j of the row being checked into out (D floats). */
typedef void (*row_reader)(const row_at *at, bool value, int64_t j, float *out);

/* The largest |o[d] - exact| for the float64 softmax(q . k_j / sqrt(D)) v_j of the n keys
 * read(ctx, ..., j) gives (0 when n is 0: O = 0). w: n doubles, row and acc: D floats and
 * D doubles of scratch. */
static double row_error(const float *q, const float *o, int64_t D, int64_t n, row_reader read,
                        const row_at *ctx, double *w, float *row, double *acc)
{
    double top = -INFINITY, sum = 0.0, worst = 0.0;
    for (int64_t j = 0; j < n; j++) {
        read(ctx, false, j, row);
        double dot = 0.0;
        for (int64_t d = 0; d < D; d++) dot += (double)q[d] * (double)row[d];
        w[j] = dot / sqrt((double)D);
        if (w[j] > top) top = w[j];
    }
    for (int64_t j = 0; j < n; j++) sum += (w[j] = exp(w[j] - top));
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0;
    for (int64_t j = 0; j < n; j++) {
        read(ctx, true, j, row);
        for (int64_t d = 0; d < D; d++) acc[d] += w[j] * (double)row[d];
    }
    for (int64_t d = 0; d < D; d++) worst = bench_worse(worst, fabs((double)o[d] - (n ? acc[d] / sum : 0.0)));
    return worst;
}

/* Row j of the cache t (key or value) of sequence b, kv head g, widened to float32. */
static void kv_row(const bench_case *c, const ta_tensor *t, int64_t b, int64_t j, int64_t g,
                   float *out)
{
    const bench_kv *a = c->state;
    int64_t blk = b, row = j;
    if (a->block) {
        blk = a->table[b * a->max_blocks + j / a->block];
        row = j % a->block;
    }
    const size_t es = ta_dtype_size(a->dtype);
    const char *p = (const char *)t->data +
                    es * (size_t)(blk * t->stride[0] + row * t->stride[1] + g * t->stride[2]);
    ta_convert(out, TA_F32, p, a->dtype, (size_t)a->D);
}

static void kv_read(const row_at *at, bool value, int64_t j, float *out)
{
    kv_row(at->c, &at->c->t[value ? 2 : 1], at->b, j, at->g, out);
}

static int kv_check(bench_case *c, double *max_err)
{
    const bench_kv *a = c->state;
    const int64_t D = a->D, Lmax = a->Lmax;
    double *w = malloc(sizeof(double) * (size_t)Lmax), *acc = malloc(sizeof(double) * (size_t)D);
    float *row = malloc(sizeof(float) * (size_t)D), *qw = malloc(sizeof(float) * (size_t)D);
    if (!w || !row || !acc || !qw) {
        free(w); free(row); free(acc); free(qw);
        return bench_fail(c, "bench: out of memory for the float64 check");
    }
    uint64_t rng = 0x2545f4914f6cdd1dULL;
    double worst = 0.0;
    for (int n = 0; n < KV_ROWS; n++) {
        int64_t b = n == 0 ? 0 : n == 1 ? a->B - 1 : (int64_t)(bench_rand(&rng) % (uint64_t)a->B);
        int64_t h = n == 1 ? a->H - 1 : (int64_t)(bench_rand(&rng) % (uint64_t)a->H);
        const row_at at = {c, b, h / (a->H / a->Hkv)};
        const size_t qs = ta_dtype_size(a->q_dtype);
        ta_convert(qw, TA_F32, (const char *)c->t[0].data + qs * (size_t)((b * a->H + h) * D),
                   a->q_dtype, (size_t)D);
        const float *o = (const float *)c->t[3].data + (b * a->H + h) * D;
        worst = bench_worse(worst, row_error(qw, o, D, a->lens[b], kv_read, &at, w, row, acc));
    }
    free(w); free(row); free(acc); free(qw);
    *max_err = worst;
    return 0;
}

static void kv_shape_text(const bench_case *c, char *buf, size_t n)
{
    const bench_kv *a = c->state;
    char cache[48];
    if (a->block) snprintf(cache, sizeof cache, "paged%lld", (long long)a->block);
    else snprintf(cache, sizeof cache, "contig");
    if (a->q_dtype != TA_F32) /* a half model: q in the cache's dtype too */
        snprintf(cache + strlen(cache), sizeof cache - strlen(cache), " q %s",
                 ta_dtype_name(a->q_dtype));
    if (a->B > 1)
        snprintf(buf, n, "B%lld H%lld/%lld Lk%lld..%lld D%lld %s %s", (long long)a->B,
                 (long long)a->H, (long long)a->Hkv, (long long)a->lens[0],
                 (long long)a->lens[a->B - 1], (long long)a->D, ta_dtype_name(a->dtype), cache);
    else
        snprintf(buf, n, "B1 H%lld/%lld Lk%lld D%lld %s %s", (long long)a->H, (long long)a->Hkv,
                 (long long)a->lens[0], (long long)a->D, ta_dtype_name(a->dtype), cache);
}

static void kv_shape_json(const bench_case *c, cJSON *o)
{
    const bench_kv *a = c->state;
    static const char *const keys[6] = {"B", "H", "Hkv", "D", "capacity", "block_size"};
    bench_json_ints(o, 6, keys, (const int64_t[6]){a->B, a->H, a->Hkv, a->D, a->Lmax, a->block});
    cJSON_AddStringToObject(o, "kv_dtype", ta_dtype_name(a->dtype));
    cJSON_AddStringToObject(o, "q_dtype", ta_dtype_name(a->q_dtype));
    cJSON *lens = cJSON_AddArrayToObject(o, "key_lengths");
    for (int64_t b = 0; b < a->B && lens; b++)
        cJSON_AddItemToArray(lens, cJSON_CreateNumber((double)a->lens[b]));
}

static const bench_kind kv_kind = {
    .name = "kvcache", .abs_err = 1, .setup = kv_setup, .run = kv_run, .check = kv_check,
    .cleanup = kv_cleanup, .shape_text = kv_shape_text, .shape_json = kv_shape_json};

void bench_add_kv_decode(bench_state *s, const char *name, int64_t B, int64_t H, int64_t Hkv,
                         int64_t D, int64_t Lmax, const int64_t *lens, int64_t block,
                         ta_dtype dtype, ta_dtype q_dtype, const char *vs, double vs_scale,
                         const char *vs_key)
{
    if (B > KV_MAX_SEQS) {
        fprintf(stderr, "bench: warning: %s has more than %d sequences; left out\n", name,
                KV_MAX_SEQS);
        return;
    }
    bench_kv a = {.B = B, .H = H, .Hkv = Hkv, .D = D, .Lmax = Lmax, .block = block,
                  .dtype = dtype, .q_dtype = q_dtype};
    for (int64_t b = 0; b < B; b++) a.lens[b] = lens ? lens[b] : Lmax;
    double keys = (double)kv_sum(&a);
    bench_case c = {.kind = &kv_kind, .path = "fused", .state = bench_state_dup(&a, sizeof a),
                    .flops = 4.0 * (double)H * keys * (double)D, .threads = s->cfg.threads,
                    .tolerance = BENCH_TOLERANCE, .twin = -1, .output = 3};
    c.bytes = 2.0 * (double)Hkv * keys * (double)D * (double)ta_dtype_size(dtype) +
              (double)B * (double)D *
                  ((double)(ta_dtype_size(q_dtype) + sizeof(float)) * (double)H +
                   2.0 * sizeof(float) * (double)Hkv);
    snprintf(c.name, sizeof c.name, "%s", name);
    if (vs) {
        snprintf(c.vs_case, sizeof c.vs_case, "%s", vs);
        snprintf(c.vs_key, sizeof c.vs_key, "%s", vs_key);
        c.vs_scale = vs_scale;
    }
    bench_add_case(s, &c);
}

/* ------------------------------------------------------------------ varlen */

typedef struct bench_varlen {
    int64_t nseq, H, D;
    int64_t lens[KV_MAX_SEQS];
    int32_t cu[KV_MAX_SEQS + 1];
} bench_varlen;

/* t[0] Q, t[1] K, t[2] V [T, H, D], t[3] O [T, H, D]. */
static int varlen_setup(bench_case *c)
{
    const bench_varlen *a = c->state;
    const int64_t shape[3] = {a->cu[a->nseq], a->H, a->D};
    for (int i = 0; i < 3; i++) {
        ta_status st = ta_tensor_empty(&c->t[i], 3, shape);
        if (!st) st = ta_randn(&c->t[i], 31 + (uint64_t)i);
        if (st) return bench_lib_fail(c, "the varlen inputs", st);
    }
    return bench_new_output(c, &c->t[3], 3, shape);
}

static int varlen_run(bench_case *c)
{
    const bench_varlen *a = c->state;
    const ta_sdpa_opts opts = {.causal = TA_CAUSAL_TOP_LEFT, .path = TA_SDPA_FUSED,
                               .cu_seqlens_q = a->cu, .cu_seqlens_k = a->cu,
                               .num_seqs = a->nseq};
    ta_status st = ta_sdpa(&c->t[3], &c->t[0], &c->t[1], &c->t[2], &opts);
    return st ? bench_lib_fail(c, "ta_sdpa (varlen)", st) : 0;
}

static void varlen_read(const row_at *at, bool value, int64_t j, float *out)
{
    const bench_varlen *a = at->c->state;
    const float *t = (const float *)at->c->t[value ? 2 : 1].data;
    memcpy(out, t + ((at->b + j) * a->H + at->g) * a->D, sizeof(float) * (size_t)a->D);
}

static int varlen_check(bench_case *c, double *max_err)
{
    const bench_varlen *a = c->state;
    const int64_t H = a->H, D = a->D, T = a->cu[a->nseq];
    double *w = malloc(sizeof(double) * (size_t)(T > 0 ? T : 1)), *acc = malloc(sizeof(double) * (size_t)D);
    float *row = malloc(sizeof(float) * (size_t)D);
    if (!w || !row || !acc) {
        free(w); free(row); free(acc);
        return bench_fail(c, "bench: out of memory for the float64 check");
    }
    uint64_t rng = 0x5851f42d4c957f2dULL;
    double worst = 0.0;
    for (int n = 0; n < KV_ROWS && T > 0; n++) {
        int64_t r = n == 0 ? 0 : n == 1 ? T - 1 : (int64_t)(bench_rand(&rng) % (uint64_t)T);
        int64_t h = (int64_t)(bench_rand(&rng) % (uint64_t)H), b = 0;
        while (a->cu[b + 1] <= r) b++;
        const row_at at = {c, a->cu[b], h}; /* causal: the keys of its sequence up to r */
        const float *q = (const float *)c->t[0].data + (r * H + h) * D;
        const float *o = (const float *)c->t[3].data + (r * H + h) * D;
        worst = bench_worse(worst, row_error(q, o, D, r - at.b + 1, varlen_read, &at, w, row, acc));
    }
    free(w); free(row); free(acc);
    *max_err = worst;
    return 0;
}

static void varlen_shape_text(const bench_case *c, char *buf, size_t n)
{
    const bench_varlen *a = c->state;
    snprintf(buf, n, "%lld seqs T%lld H%lld D%lld causal", (long long)a->nseq,
             (long long)a->cu[a->nseq], (long long)a->H, (long long)a->D);
}

static void varlen_shape_json(const bench_case *c, cJSON *o)
{
    const bench_varlen *a = c->state;
    static const char *const keys[4] = {"num_seqs", "T", "H", "D"};
    bench_json_ints(o, 4, keys, (const int64_t[4]){a->nseq, a->cu[a->nseq], a->H, a->D});
    cJSON_AddStringToObject(o, "causal", "top_left");
    cJSON *lens = cJSON_AddArrayToObject(o, "lengths");
    for (int64_t b = 0; b < a->nseq && lens; b++)
        cJSON_AddItemToArray(lens, cJSON_CreateNumber((double)a->lens[b]));
}

static const bench_kind varlen_kind = {
    .name = "varlen", .abs_err = 1, .setup = varlen_setup, .run = varlen_run,
    .check = varlen_check, .shape_text = varlen_shape_text, .shape_json = varlen_shape_json};

void bench_add_varlen_prefill(bench_state *s, const char *name, int64_t nseq, const int64_t *lens,
                              int64_t H, int64_t D)
{
    if (nseq > KV_MAX_SEQS) return;
    bench_varlen a = {.nseq = nseq, .H = H, .D = D};
    double pairs = 0.0, padded_pairs = 0.0;
    int64_t Lmax = 0;
    for (int64_t b = 0; b < nseq; b++) {
        a.lens[b] = lens[b];
        a.cu[b + 1] = a.cu[b] + (int32_t)lens[b];
        pairs += (double)lens[b] * (double)(lens[b] + 1) / 2.0;
        if (lens[b] > Lmax) Lmax = lens[b];
    }
    padded_pairs = (double)nseq * (double)Lmax * (double)(Lmax + 1) / 2.0;
    /* The same batch padded to the longest: a plain causal sdpa case, every row and key
     * of [nseq, H, Lmax, D] computed (padding is what a padded batch pays for). */
    char padded[64];
    snprintf(padded, sizeof padded, "%.40s_padded", name);
    bench_add_sdpa(s, padded, nseq, H, H, Lmax, Lmax, D, TA_CAUSAL_TOP_LEFT);
    bench_case c = {.kind = &varlen_kind, .path = "fused", .state = bench_state_dup(&a, sizeof a),
                    .flops = 4.0 * (double)H * pairs * (double)D, .threads = s->cfg.threads,
                    .tolerance = BENCH_TOLERANCE, .twin = -1, .output = 3};
    snprintf(c.name, sizeof c.name, "%s", name);
    /* real tokens' share of the padded batch's work: its (query, key) pairs */
    snprintf(c.vs_case, sizeof c.vs_case, "%.40s_fused", padded);
    snprintf(c.vs_key, sizeof c.vs_key, "ratio_vs_padded_share");
    c.vs_scale = pairs / padded_pairs;
    bench_add_case(s, &c);
}
