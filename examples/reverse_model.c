/* reverse_model: see reverse_model.h. */
#define _POSIX_C_SOURCE 200809L
#include "reverse_model.h"

#include <math.h>
#include <string.h>

void model_init(model *m, uint64_t seed)
{
    int64_t s_tok[2] = {V_IN, EMB}, s_pos[2] = {T_SEQ, EMB}, s_w[2] = {V_OUT, EMB}, s_b = V_OUT;
    CHECK(ta_tensor_empty(&m->tok, 2, s_tok));
    CHECK(ta_tensor_empty(&m->pos, 2, s_pos));
    CHECK(ta_tensor_empty(&m->w, 2, s_w));
    CHECK(ta_tensor_zeros(&m->b, 1, &s_b));
    CHECK(ta_randn(&m->tok, seed + 1));
    CHECK(ta_randn(&m->pos, seed + 2));
    float bound = 1.0f / sqrtf((float)EMB);
    CHECK(ta_rand_uniform(&m->w, -bound, bound, seed + 3));
    CHECK(ta_tensor_zeros(&m->gtok, 2, s_tok));
    CHECK(ta_tensor_zeros(&m->gpos, 2, s_pos));
    CHECK(ta_tensor_zeros(&m->gw, 2, s_w));
    CHECK(ta_tensor_zeros(&m->gb, 1, &s_b));
    ta_tensor *own[4] = {&m->tok, &m->pos, &m->w, &m->b}, *gown[4] = {&m->gtok, &m->gpos, &m->gw, &m->gb};
    for (int i = 0; i < 4; i++) {
        m->params[i] = own[i];
        m->grads[i] = gown[i];
    }
    int k = 4;
    for (int l = 0; l < NLAYERS; l++) {
        CHECK(ta_attention_create(&m->attn[l], TA_LAYOUT_TORCH, EMB, HEADS, seed + 10 + (uint64_t)l));
        for (int i = 0; i < ta_attention_param_count(m->attn[l]); i++) {
            const char *name = ta_attention_param_name(m->attn[l], i);
            CHECK(ta_attention_param(&m->pviews[k - 4], m->attn[l], name));
            CHECK(ta_attention_grad(&m->gviews[k - 4], m->attn[l], name));
            m->params[k] = &m->pviews[k - 4];
            m->grads[k] = &m->gviews[k - 4];
            k++;
        }
    }
}

void model_free(model *m)
{
    ta_tensor *t[8] = {&m->tok, &m->pos, &m->w, &m->b, &m->gtok, &m->gpos, &m->gw, &m->gb};
    for (int i = 0; i < 8; i++) ta_tensor_free(t[i]);
    for (int l = 0; l < NLAYERS; l++) ta_attention_free(m->attn[l]);
}

void acts_init(acts *a, int64_t B)
{
    int64_t s[3] = {B, T_SEQ, EMB}, sl[3] = {B, T_SEQ, V_OUT};
    a->B = B;
    for (int l = 0; l <= NLAYERS; l++) CHECK(ta_tensor_empty(&a->h[l], 3, s));
    CHECK(ta_tensor_empty(&a->tmp, 3, s));
    CHECK(ta_tensor_empty(&a->dh, 3, s));
    CHECK(ta_tensor_empty(&a->logits, 3, sl));
    CHECK(ta_tensor_empty(&a->dlogits, 3, sl));
    a->tokens = malloc(sizeof(int) * (size_t)(B * T_SEQ));
    a->targets = malloc(sizeof(int) * (size_t)(B * T_SEQ));
}

void acts_free(acts *a)
{
    for (int l = 0; l <= NLAYERS; l++) ta_tensor_free(&a->h[l]);
    ta_tensor_free(&a->tmp); ta_tensor_free(&a->dh);
    ta_tensor_free(&a->logits); ta_tensor_free(&a->dlogits);
    free(a->tokens); free(a->targets);
}

/* A batch of sequences from the stream `seed`: tokens and targets. */
void make_batch(acts *a, uint64_t seed)
{
    int64_t *digits = malloc(sizeof(int64_t) * (size_t)(a->B * L_IN));
    CHECK(ta_randint(digits, (size_t)(a->B * L_IN), 0, V_OUT, seed));
    for (int64_t b = 0; b < a->B; b++) {
        int *tok = a->tokens + b * T_SEQ, *tgt = a->targets + b * T_SEQ;
        const int64_t *x = digits + b * L_IN;
        for (int i = 0; i < L_IN; i++) {
            tok[i] = (int)x[i];
            tgt[i] = -1;
        }
        tok[L_IN] = SEP;
        for (int i = 0; i < L_IN; i++) {
            int y = (int)x[L_IN - 1 - i];
            tgt[L_IN + i] = y;
            if (i + 1 < L_IN) tok[L_IN + 1 + i] = y;
        }
    }
    free(digits);
}

void add_bias(float *dst, int64_t rows, int64_t cols, const float *bias)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * cols + c] += bias[c];
}

const ta_attention_opts REVERSE_CAUSAL = {.causal = TA_CAUSAL_TOP_LEFT};

/* Forward to the logits. */
void forward(model *m, acts *a)
{
    const int64_t R = a->B * T_SEQ;
    float *h0 = a->h[0].data;
    const float *tok = m->tok.data, *pos = m->pos.data;
    for (int64_t r = 0; r < R; r++)
        for (int e = 0; e < EMB; e++)
            h0[r * EMB + e] = tok[a->tokens[r] * EMB + e] + pos[(r % T_SEQ) * EMB + e];
    for (int l = 0; l < NLAYERS; l++) {
        CHECK(ta_attention_forward(&a->tmp, m->attn[l], &a->h[l], &a->h[l], &a->h[l], &REVERSE_CAUSAL));
        const float *x = a->h[l].data, *y = a->tmp.data;
        float *z = a->h[l + 1].data;
        for (int64_t i = 0; i < R * EMB; i++) z[i] = x[i] + y[i];
    }
    /* logits = h W^T + b */
    float *lg = a->logits.data;
    CHECK(ta_sgemm(lg, V_OUT, 1, a->h[NLAYERS].data, EMB, 1, m->w.data, 1, EMB, R, V_OUT, EMB,
                   1.0f, 0.0f));
    add_bias(lg, R, V_OUT, m->b.data);
}

/* Mean cross-entropy over the target positions; dlogits = its gradient; correct count. */
double loss_and_grad(acts *a, int64_t *correct, int64_t *count)
{
    const int64_t R = a->B * T_SEQ;
    const float *lg = a->logits.data;
    float *dl = a->dlogits.data;
    int64_t n = 0, ok = 0;
    for (int64_t r = 0; r < R; r++) n += a->targets[r] >= 0;
    double loss = 0.0;
    for (int64_t r = 0; r < R; r++) {
        int t = a->targets[r];
        if (t < 0) {
            for (int j = 0; j < V_OUT; j++) dl[r * V_OUT + j] = 0.0f;
            continue;
        }
        double mx = lg[r * V_OUT], z = 0.0;
        int arg = 0;
        for (int j = 1; j < V_OUT; j++)
            if (lg[r * V_OUT + j] > mx) { mx = lg[r * V_OUT + j]; arg = j; }
        for (int j = 0; j < V_OUT; j++) z += exp(lg[r * V_OUT + j] - mx);
        loss += log(z) - (lg[r * V_OUT + t] - mx);
        ok += arg == t;
        for (int j = 0; j < V_OUT; j++) {
            double p = exp(lg[r * V_OUT + j] - mx) / z;
            dl[r * V_OUT + j] = (float)((p - (j == t)) / (double)n);
        }
    }
    if (correct) *correct = ok;
    if (count) *count = n;
    return loss / (double)n;
}

void zero_grads(model *m)
{
    CHECK(ta_tensor_fill(&m->gtok, 0.0f));
    CHECK(ta_tensor_fill(&m->gpos, 0.0f));
    CHECK(ta_tensor_fill(&m->gw, 0.0f));
    CHECK(ta_tensor_fill(&m->gb, 0.0f));
    for (int l = 0; l < NLAYERS; l++) CHECK(ta_attention_zero_grad(m->attn[l]));
}

void backward(model *m, acts *a)
{
    const int64_t R = a->B * T_SEQ;
    const float *dl = a->dlogits.data;
    /* read-out: dW += dl^T h, db += colsum dl, dh = dl W */
    CHECK(ta_sgemm(m->gw.data, EMB, 1, dl, 1, V_OUT, a->h[NLAYERS].data, EMB, 1, V_OUT, EMB, R,
                   1.0f, 1.0f));
    float *gb = m->gb.data;
    for (int j = 0; j < V_OUT; j++) {
        double s = 0.0;
        for (int64_t r = 0; r < R; r++) s += dl[r * V_OUT + j];
        gb[j] += (float)s;
    }
    CHECK(ta_sgemm(a->dh.data, EMB, 1, dl, V_OUT, 1, m->w.data, EMB, 1, R, EMB, V_OUT, 1.0f, 0.0f));
    /* residual layers in reverse: dh (the gradient of h[l+1]) is also the residual
     * branch's gradient of h[l]; the attention adds its part into the same buffer */
    for (int l = NLAYERS - 1; l >= 0; l--)
        CHECK(ta_attention_backward(&a->dh, &a->dh, &a->dh, m->attn[l], &a->dh, &a->h[l], &a->h[l],
                                    &a->h[l], &REVERSE_CAUSAL));
    /* embeddings: scatter-add (in row order: deterministic) */
    const float *dh = a->dh.data;
    float *gt = m->gtok.data, *gp = m->gpos.data;
    for (int64_t r = 0; r < R; r++)
        for (int e = 0; e < EMB; e++) {
            gt[a->tokens[r] * EMB + e] += dh[r * EMB + e];
            gp[(r % T_SEQ) * EMB + e] += dh[r * EMB + e];
        }
}

/* Greedy decoding on held-out sequences: token accuracy and whole-sequence accuracy. */
void evaluate(model *m, acts *a, uint64_t seed, double *tok_acc, double *seq_acc)
{
    make_batch(a, seed);
    for (int64_t r = 0; r < a->B * T_SEQ; r++) {
        int i = (int)(r % T_SEQ);
        if (i > L_IN) a->tokens[r] = 0; /* not yet generated (the causal mask hides them anyway) */
    }
    for (int i = 0; i < L_IN; i++) {
        forward(m, a);
        const float *lg = a->logits.data;
        for (int64_t b = 0; b < a->B; b++) {
            const float *row = lg + (b * T_SEQ + L_IN + i) * V_OUT;
            int arg = 0;
            for (int j = 1; j < V_OUT; j++)
                if (row[j] > row[arg]) arg = j;
            if (i + 1 < L_IN) a->tokens[b * T_SEQ + L_IN + 1 + i] = arg;
            a->targets[b * T_SEQ + i] = arg; /* the prediction, kept in the unused slots */
        }
    }
    int64_t ok = 0, seq_ok = 0;
    for (int64_t b = 0; b < a->B; b++) {
        int all = 1;
        for (int i = 0; i < L_IN; i++) {
            int hit = a->targets[b * T_SEQ + i] == a->targets[b * T_SEQ + L_IN + i];
            ok += hit;
            all &= hit;
        }
        seq_ok += all;
    }
    *tok_acc = (double)ok / (double)(a->B * L_IN);
    *seq_acc = (double)seq_ok / (double)a->B;
}


void model_train(model *m, long steps, long batch, double lr, uint64_t seed, int quiet,
                 double *first, double *recent)
{
    acts a;
    acts_init(&a, batch);
    ta_optimizer *opt;
    CHECK(ta_optimizer_adamw(&opt, &(ta_adamw_opts){.lr = lr, .beta1 = 0.9, .beta2 = 0.98,
                                                    .eps = 1e-8, .weight_decay = 0.01}));
    const long tail = steps < 20 ? steps : 20;
    *first = *recent = 0.0;
    for (long s = 1; s <= steps; s++) {
        /* cosine decay to 10% of lr over the run, 50 warm-up steps */
        double frac = (double)(s - 1) / (double)steps, warm = s < 50 ? (double)s / 50.0 : 1.0;
        CHECK(ta_optimizer_set_lr(opt, lr * warm * (0.1 + 0.45 * (1.0 + cos(3.14159265358979323846 * frac)))));
        make_batch(&a, seed * 0x9E3779B97F4A7C15ull + (uint64_t)s); /* training stream */
        zero_grads(m);
        forward(m, &a);
        int64_t ok, n;
        double loss = loss_and_grad(&a, &ok, &n);
        backward(m, &a);
        CHECK(ta_optimizer_step(opt, NPARAMS, m->params, m->grads));
        if (s == 1) *first = loss;
        if (s > steps - tail) *recent += loss / (double)tail;
        if (!quiet && (s == 1 || s % 100 == 0 || s == steps))
            printf("step %5ld  loss %.4f  train token acc %.3f\n", s, loss, (double)ok / (double)n);
    }
    ta_optimizer_free(opt);
    acts_free(&a);
}

/* The file name of parameter i: the embeddings and read-out, then each layer's
 * state_dict names under attn<l>. */
static void param_name(const model *m, int i, char *buf, size_t n)
{
    static const char *const own[4] = {"tok_emb", "pos_emb", "head.weight", "head.bias"};
    if (i < 4) {
        snprintf(buf, n, "%s", own[i]);
        return;
    }
    int l = (i - 4) / 4;
    snprintf(buf, n, "attn%d.%s", l, ta_attention_param_name(m->attn[l], (i - 4) % 4));
}

void model_save(const model *m, const char *path)
{
    char names[NPARAMS][64];
    const char *np[NPARAMS];
    const ta_tensor *tp[NPARAMS];
    for (int i = 0; i < NPARAMS; i++) {
        param_name(m, i, names[i], sizeof names[i]);
        np[i] = names[i];
        tp[i] = m->params[i];
    }
    CHECK(ta_safetensors_save(path, NPARAMS, np, tp));
}

void model_load(model *m, const char *path)
{
    ta_safetensors *st;
    CHECK(ta_safetensors_open(&st, path));
    for (int i = 0; i < NPARAMS; i++) {
        char name[64];
        param_name(m, i, name, sizeof name);
        ta_tensor t;
        CHECK(ta_safetensors_get(&t, st, name));
        CHECK(ta_tensor_copy(m->params[i], &t)); /* checks the shape */
        ta_tensor_free(&t);
    }
    ta_safetensors_free(st);
}
