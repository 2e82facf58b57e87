/* generate: autoregressive decoding through a KV cache, with the model that
 * examples/train_reverse.c trains (reverse_model.h).
 *
 * For B held-out prompts [x0 .. x7 SEP] the model generates the 8 reversed digits:
 *   prefill: the 9 prompt tokens go through both layers at once; each layer projects
 *            them (q, k, v = x W^T + b), ta_sdpa_kvcache appends k and v to the layer's
 *            cache and attends (causal, bottom-right), then out_proj and the residual;
 *   decode:  7 steps of one token per sequence, each appending one key and value per
 *            layer and attending to the whole cache.
 * The cache is float32, bfloat16 or float16 ([B, 16, H, D] per layer and for K and V);
 * the decoding loop allocates nothing (one workspace sized once, buffers made before it).
 * It prints tokens per second for each cache dtype, next to recomputing the full causal
 * forward for every token (what evaluate() in reverse_model.c does), and checks that
 * cached decoding produces the same tokens and, for float32, logits within 1e-5 (relative
 * to the largest logit) of the full recompute at every step.
 *
 *     generate [--load W.safetensors | --train-steps N] [--batch B] [--threads T]
 *              [--repeat R] [--seed S] [--check]
 * --load: parameters saved by `train_reverse --save`; otherwise the model is trained for
 * --train-steps (300) steps first. --check: exit 1 unless the float32 cache reproduces the
 * full recompute (tokens and logits) and the half-precision caches give the same tokens
 * for at least 99% of the sequences. Exit 0 on success, 1 on failure, 2 on usage. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "reverse_model.h"

#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

const char *reverse_prog = "generate";

#define D_HEAD (EMB / HEADS)
#define PROMPT (L_IN + 1) /* x0 .. x7 SEP */

/* Everything one generation needs, made before it starts. */
typedef struct decoder {
    model *m;
    int64_t B;
    ta_dtype dtype;
    ta_tensor kc[NLAYERS], vc[NLAYERS]; /* [B, T_SEQ, H, D] */
    int32_t *seqlens;                   /* [B] keys in every layer's cache */
    float *x, *qkv, *o, *y;             /* [B * PROMPT, E], [.., 3E], [.., E], [.., E] */
    ta_workspace ws;
    ta_tensor wi[NLAYERS], bi[NLAYERS], wo[NLAYERS], bo[NLAYERS]; /* layer parameters */
} decoder;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The views ta_sdpa_kvcache takes for n tokens per sequence: q, k_new, v_new inside the
 * projections [B, n, 3E] and the attention output [B, n, E], each as [B, n, H, D]. */
static void step_views(decoder *d, int64_t n, ta_tensor *q, ta_tensor *kn, ta_tensor *vn,
                       ta_tensor *o)
{
    const int64_t shape[4] = {d->B, n, HEADS, D_HEAD};
    const int64_t sp[4] = {n * 3 * EMB, 3 * EMB, D_HEAD, 1};
    CHECK(ta_tensor_from_buffer(q, d->qkv, 4, shape, sp));
    CHECK(ta_tensor_from_buffer(kn, d->qkv + EMB, 4, shape, sp));
    CHECK(ta_tensor_from_buffer(vn, d->qkv + 2 * EMB, 4, shape, sp));
    CHECK(ta_tensor_from_buffer(o, d->o, 4, shape, NULL));
}

static void decoder_init(decoder *d, model *m, int64_t B, ta_dtype dtype)
{
    memset(d, 0, sizeof *d);
    d->m = m;
    d->B = B;
    d->dtype = dtype;
    const int64_t cs[4] = {B, T_SEQ, HEADS, D_HEAD};
    for (int l = 0; l < NLAYERS; l++) {
        CHECK(ta_tensor_zeros_dtype(&d->kc[l], dtype, 4, cs));
        CHECK(ta_tensor_zeros_dtype(&d->vc[l], dtype, 4, cs));
        CHECK(ta_attention_param(&d->wi[l], m->attn[l], "in_proj_weight"));
        CHECK(ta_attention_param(&d->bi[l], m->attn[l], "in_proj_bias"));
        CHECK(ta_attention_param(&d->wo[l], m->attn[l], "out_proj.weight"));
        CHECK(ta_attention_param(&d->bo[l], m->attn[l], "out_proj.bias"));
    }
    d->seqlens = calloc((size_t)B, sizeof *d->seqlens);
    const size_t rows = (size_t)(B * PROMPT);
    d->x = malloc(sizeof(float) * rows * EMB);
    d->qkv = malloc(sizeof(float) * rows * 3 * EMB);
    d->o = malloc(sizeof(float) * rows * EMB);
    d->y = malloc(sizeof(float) * rows * EMB);
    if (!d->seqlens || !d->x || !d->qkv || !d->o || !d->y) {
        fprintf(stderr, "generate: out of memory\n");
        exit(1);
    }
    /* One workspace for every step: the larger of the prefill's and a decode step's. */
    size_t need = 0;
    const ta_sdpa_opts opts = {.causal = TA_CAUSAL_BOTTOM_RIGHT};
    for (int64_t n = 1; n <= PROMPT; n += PROMPT - 1) {
        ta_tensor q, kn, vn, o;
        step_views(d, n, &q, &kn, &vn, &o);
        ta_kv_cache c = {.k = &d->kc[0], .v = &d->vc[0], .seqlens = d->seqlens};
        size_t bytes;
        CHECK(ta_sdpa_kvcache_workspace_size(&bytes, &o, &q, &c, &kn, &vn, &opts));
        if (bytes > need) need = bytes;
    }
    d->ws.size = need;
    d->ws.data = need ? malloc(need) : NULL;
    if (need && !d->ws.data) {
        fprintf(stderr, "generate: out of memory\n");
        exit(1);
    }
}

static void decoder_free(decoder *d)
{
    for (int l = 0; l < NLAYERS; l++) {
        ta_tensor_free(&d->kc[l]);
        ta_tensor_free(&d->vc[l]);
    }
    free(d->seqlens);
    free(d->x);
    free(d->qkv);
    free(d->o);
    free(d->y);
    free(d->ws.data);
}

/* n tokens per sequence (tokens[b * n + t]) at positions seqlens[b] + t through both
 * layers and the read-out: logits [B, V_OUT] of each sequence's last token. */
static void step(decoder *d, const int *tokens, int64_t n, float *logits)
{
    const model *m = d->m;
    const int64_t B = d->B, R = B * n;
    const float *tok = m->tok.data, *pos = m->pos.data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < n; t++)
            for (int e = 0; e < EMB; e++)
                d->x[(b * n + t) * EMB + e] =
                    tok[tokens[b * n + t] * EMB + e] + pos[(d->seqlens[b] + t) * EMB + e];
    const ta_sdpa_opts opts = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .workspace = d->ws};
    for (int l = 0; l < NLAYERS; l++) {
        /* qkv = x W_in^T + b_in */
        CHECK(ta_sgemm(d->qkv, 3 * EMB, 1, d->x, EMB, 1, d->wi[l].data, 1, EMB, R, 3 * EMB, EMB,
                       1.0f, 0.0f));
        add_bias(d->qkv, R, 3 * EMB, d->bi[l].data);
        ta_tensor q, kn, vn, o;
        step_views(d, n, &q, &kn, &vn, &o);
        ta_kv_cache c = {.k = &d->kc[l], .v = &d->vc[l], .seqlens = d->seqlens};
        CHECK(ta_sdpa_kvcache(&o, &q, &c, &kn, &vn, &opts));
        /* x += o W_out^T + b_out */
        CHECK(ta_sgemm(d->y, EMB, 1, d->o, EMB, 1, d->wo[l].data, 1, EMB, R, EMB, EMB, 1.0f, 0.0f));
        add_bias(d->y, R, EMB, d->bo[l].data);
        for (int64_t i = 0; i < R * EMB; i++) d->x[i] += d->y[i];
    }
    for (int64_t b = 0; b < B; b++) d->seqlens[b] += (int32_t)n;
    /* logits of the last token of each sequence: rows b * n + n - 1 */
    CHECK(ta_sgemm(logits, V_OUT, 1, d->x + (n - 1) * EMB, n * EMB, 1, m->w.data, 1, EMB, B, V_OUT,
                   EMB, 1.0f, 0.0f));
    add_bias(logits, B, V_OUT, m->b.data);
}

static int argmax(const float *row)
{
    int a = 0;
    for (int j = 1; j < V_OUT; j++)
        if (row[j] > row[a]) a = j;
    return a;
}

/* Generates the 8 digits of every prompt (prompts[b * PROMPT ..]) through the cache:
 * out[b * L_IN + i] the i-th generated digit, logits[(i * B + b) * V_OUT ..] its logits. */
static void generate(decoder *d, const int *prompts, int *out, float *logits, int *next)
{
    const int64_t B = d->B;
    memset(d->seqlens, 0, sizeof(int32_t) * (size_t)B);
    step(d, prompts, PROMPT, logits);
    for (int i = 0; i < L_IN; i++) {
        float *lg = logits + (int64_t)i * B * V_OUT;
        if (i > 0) step(d, next, 1, lg);
        for (int64_t b = 0; b < B; b++) next[b] = out[b * L_IN + i] = argmax(lg + b * V_OUT);
    }
}

/* The same digits by recomputing the full causal forward for every token. */
static void generate_full(model *m, acts *a, const int *prompts, int *out, float *logits)
{
    const int64_t B = a->B;
    for (int64_t b = 0; b < B; b++)
        for (int t = 0; t < T_SEQ; t++)
            a->tokens[b * T_SEQ + t] = t < PROMPT ? prompts[b * PROMPT + t] : 0;
    for (int i = 0; i < L_IN; i++) {
        forward(m, a);
        for (int64_t b = 0; b < B; b++) {
            const float *row = (const float *)a->logits.data + (b * T_SEQ + L_IN + i) * V_OUT;
            memcpy(logits + ((int64_t)i * B + b) * V_OUT, row, sizeof(float) * V_OUT);
            out[b * L_IN + i] = argmax(row);
            if (i + 1 < L_IN) a->tokens[b * T_SEQ + L_IN + 1 + i] = out[b * L_IN + i];
        }
    }
}

static int usage(const char *msg)
{
    fprintf(stderr, "generate: %s\nusage: generate [--load W.safetensors | --train-steps N] "
                    "[--batch B] [--threads T] [--repeat R] [--seed S] [--check]\n", msg);
    return 2;
}

int main(int argc, char **argv)
{
    long train_steps = 300, batch = 256, threads = 1, repeat = 5;
    unsigned long long seed = 1;
    const char *load = NULL;
    int check = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--check")) { check = 1; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("generate: decode the reversed digits through a KV cache (float32, bfloat16 "
                   "and float16) and compare with the full recompute\n  --load W.safetensors "
                   "(from train_reverse --save) or --train-steps N (300)\n  --batch B (256)  "
                   "--threads T (1)  --repeat R (5: timed runs, the median is printed)  --seed S\n"
                   "  --check: exit 1 unless cached decoding reproduces the full recompute\n");
            return 0;
        }
        if (i + 1 >= argc) return usage("missing value after an option");
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(a, "--load")) { load = v; continue; }
        if (!strcmp(a, "--train-steps")) train_steps = strtol(v, &end, 10);
        else if (!strcmp(a, "--batch")) batch = strtol(v, &end, 10);
        else if (!strcmp(a, "--threads")) threads = strtol(v, &end, 10);
        else if (!strcmp(a, "--repeat")) repeat = strtol(v, &end, 10);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, &end, 10);
        else return usage("unknown option");
        if (*end || end == v) return usage("bad number");
    }
    if (train_steps < 1 || batch < 1 || threads < 1 || threads > INT_MAX || repeat < 1)
        return usage("values out of range");
    CHECK(ta_set_num_threads((int)threads));

    model m;
    model_init(&m, seed * 1000);
    if (load) {
        model_load(&m, load);
        printf("loaded the parameters from %s\n", load);
    } else {
        double first, recent;
        model_train(&m, train_steps, 64, 3e-3, seed, 1, &first, &recent);
        printf("trained %ld steps: loss %.4f -> %.4f\n", train_steps, first, recent);
    }

    const int64_t B = batch;
    acts a;
    acts_init(&a, B);
    make_batch(&a, 0xE7A1ull + seed * 7919ull); /* held-out prompts, as train_reverse evaluates */
    int *prompts = malloc(sizeof(int) * (size_t)(B * PROMPT));
    int *ref = malloc(sizeof(int) * (size_t)(B * L_IN)), *got = malloc(sizeof(int) * (size_t)(B * L_IN));
    int *next = malloc(sizeof(int) * (size_t)B);
    float *lref = malloc(sizeof(float) * (size_t)(B * L_IN * V_OUT));
    float *lgot = malloc(sizeof(float) * (size_t)(B * L_IN * V_OUT));
    if (!prompts || !ref || !got || !next || !lref || !lgot) return usage("out of memory");
    for (int64_t b = 0; b < B; b++)
        memcpy(prompts + b * PROMPT, a.tokens + b * T_SEQ, sizeof(int) * PROMPT);

    double t0 = now();
    generate_full(&m, &a, prompts, ref, lref);
    double t_full = now() - t0, scale = 0.0;
    for (int64_t i = 0; i < B * L_IN * V_OUT; i++) scale = fmax(scale, fabs(lref[i]));
    int64_t correct = 0;
    for (int64_t b = 0; b < B; b++)
        for (int i = 0; i < L_IN; i++) correct += ref[b * L_IN + i] == prompts[b * PROMPT + L_IN - 1 - i];
    printf("full recompute (a causal forward of the stream per token): %.0f tokens/s, "
           "accuracy %.2f%%\n", (double)(B * L_IN) / t_full, 100.0 * (double)correct / (double)(B * L_IN));

    static const ta_dtype dtypes[3] = {TA_F32, TA_BF16, TA_F16};
    int rc = 0;
    for (int k = 0; k < 3; k++) {
        decoder d;
        decoder_init(&d, &m, B, dtypes[k]);
        double times[64];
        if (repeat > 64) repeat = 64;
        generate(&d, prompts, got, lgot, next); /* warm-up */
        for (long r = 0; r < repeat; r++) {
            t0 = now();
            generate(&d, prompts, got, lgot, next);
            times[r] = now() - t0;
        }
        for (long i = 1; i < repeat; i++) /* insertion sort: the median */
            for (long j = i; j > 0 && times[j] < times[j - 1]; j--) {
                double t = times[j]; times[j] = times[j - 1]; times[j - 1] = t;
            }
        double t = times[repeat / 2], diff = 0.0;
        int64_t same_seq = 0;
        for (int64_t b = 0; b < B; b++)
            same_seq += !memcmp(got + b * L_IN, ref + b * L_IN, sizeof(int) * L_IN);
        for (int64_t i = 0; i < B * L_IN * V_OUT; i++) diff = fmax(diff, fabs(lgot[i] - lref[i]));
        printf("KV cache %-4s: %.0f tokens/s (%.1fx the full recompute), same tokens in %.2f%% "
               "of the sequences, max |logit - full| = %.2e (%.1e of the largest logit)\n",
               ta_dtype_name(dtypes[k]), (double)(B * L_IN) / t, t_full / t,
               100.0 * (double)same_seq / (double)B, diff, diff / scale);
        if (check && dtypes[k] == TA_F32 && (same_seq != B || !(diff <= 1e-5 * scale))) {
            fprintf(stderr, "generate: the float32 cache differs from the full recompute\n");
            rc = 1;
        }
        if (check && dtypes[k] != TA_F32 && !(same_seq >= 0.99 * (double)B)) {
            fprintf(stderr, "generate: the %s cache changed the tokens of %.2f%% of the sequences\n",
                    ta_dtype_name(dtypes[k]), 100.0 * (double)(B - same_seq) / (double)B);
            rc = 1;
        }
        decoder_free(&d);
    }
    if (check && !rc) printf("check passed\n");
    free(prompts); free(ref); free(got); free(next); free(lref); free(lgot);
    acts_free(&a);
    model_free(&m);
    return rc;
}
