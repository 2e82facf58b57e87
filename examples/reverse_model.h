/* reverse_model: the model of examples/train_reverse.c, shared with examples/generate.c.
 *
 * A tiny decoder-only transformer (attention only) that learns to reverse 8 digits. It
 * reads one causal stream of 16 tokens [x0 .. x7 SEP y0 .. y6] (y_i = x_{7-i}) and at
 * position 8 + i predicts y_i:
 *     h0 = tok_emb[s] + pos_emb                         [B, 16, E]
 *     h1 = h0 + attn1(h0)     h2 = h1 + attn2(h1)       causal torch-layout layers
 *     logits = h2 W^T + b                                [B, 16, 10]
 * Training: mean cross-entropy over positions 8..15, the backward by hand,
 * ta_attention_backward, AdamW. Everything here exits the program on a library error
 * (an example's shortcut, never the library's). */
#ifndef REVERSE_MODEL_H
#define REVERSE_MODEL_H

#include <tensorattn.h>

#include <stdio.h>
#include <stdlib.h>

#define L_IN 8              /* digits to reverse */
#define T_SEQ (2 * L_IN)    /* stream length */
#define V_OUT 10            /* digits */
#define V_IN (V_OUT + 1)    /* digits and SEP */
#define SEP V_OUT
#define EMB 64
#define HEADS 4
#define NLAYERS 2
#define NPARAMS (4 + 4 * NLAYERS)

extern const char *reverse_prog; /* for messages: the program name */

#define CHECK(call)                                                                      \
    do {                                                                                 \
        ta_status st_ = (call);                                                          \
        if (st_ != TA_OK) {                                                              \
            fprintf(stderr, "%s: %s failed: %s\n", reverse_prog, #call, ta_last_error());     \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

typedef struct model {
    ta_tensor tok, pos, w, b;             /* [V_IN, E], [T, E], [V_OUT, E], [V_OUT] */
    ta_tensor gtok, gpos, gw, gb;
    ta_attention *attn[NLAYERS];
    ta_tensor *params[NPARAMS];
    const ta_tensor *grads[NPARAMS];
    ta_tensor pviews[4 * NLAYERS], gviews[4 * NLAYERS];
} model;

/* activations of one batch */
typedef struct acts {
    int64_t B;
    ta_tensor h[NLAYERS + 1]; /* residual stream after embedding and after each layer */
    ta_tensor tmp, logits, dlogits, dh;
    int *tokens, *targets;    /* [B, T]; targets -1 where no loss */
} acts;

extern const ta_attention_opts REVERSE_CAUSAL; /* top-left causal */

void model_init(model *m, uint64_t seed);
void model_free(model *m);
/* Parameters to and from a .safetensors file (names tok_emb, pos_emb, head.weight,
 * head.bias, attn<l>.<state_dict name>). */
void model_save(const model *m, const char *path);
void model_load(model *m, const char *path);
void acts_init(acts *a, int64_t B);
void acts_free(acts *a);
/* A batch of sequences from the stream `seed`: tokens and targets. */
void make_batch(acts *a, uint64_t seed);
/* dst[r, :] += bias for the rows r < rows of a [rows, cols] matrix. */
void add_bias(float *dst, int64_t rows, int64_t cols, const float *bias);
/* Forward of the whole stream to the logits. */
void forward(model *m, acts *a);
/* Mean cross-entropy over the target positions; dlogits = its gradient; correct count. */
double loss_and_grad(acts *a, int64_t *correct, int64_t *count);
void zero_grads(model *m);
void backward(model *m, acts *a);
/* Greedy decoding on held-out sequences (a full forward per generated token): token
 * accuracy and whole-sequence accuracy. */
void evaluate(model *m, acts *a, uint64_t seed, double *tok_acc, double *seq_acc);
/* steps of AdamW (lr with 50 warm-up steps and cosine decay to 10%) on batches of the
 * training stream of `seed`; *first = the first step's loss, *recent = the mean of the
 * last min(20, steps). Prints progress unless quiet. */
void model_train(model *m, long steps, long batch, double lr, uint64_t seed, int quiet,
                 double *first, double *recent);

#endif
