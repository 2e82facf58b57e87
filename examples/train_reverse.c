/* train_reverse: a tiny decoder-only transformer (attention only) learns to reverse
 * sequences of digits, trained with tensorattn's layers, backward and AdamW.
 *
 * Task: x = 8 random digits (0..9). The model reads one causal stream of 16 tokens
 *     [x0 x1 ... x7 SEP y0 y1 ... y6]        with y_i = x_{7-i}
 * and at position 8 + i predicts y_i (teacher forcing: position 8 + i sees x, SEP and
 * y_0..y_{i-1}). The causal layers let every output position see the whole input,
 * which precedes it in the stream. Evaluation decodes greedily (each predicted digit is
 * fed back) on held-out sequences drawn from a different random stream.
 *
 * Model (E = 64, 4 heads):
 *     h0 = tok_emb[s] + pos_emb                         [B, 16, E]
 *     h1 = h0 + attn1(h0)     h2 = h1 + attn2(h1)       causal torch-layout layers
 *     logits = h2 W^T + b                                [B, 16, 10]
 *     loss = mean cross-entropy over positions 8..15
 * Backward by hand, in reverse; ta_attention_backward accumulates into the residual's
 * gradient buffer (one buffer passed three times: self attention). AdamW updates all
 * 12 parameter tensors.
 *
 *     train_reverse [--steps N] [--batch B] [--lr LR] [--threads T] [--seed S]
 *                   [--check-loss-drop F] [--check-accuracy A] [--eval N] [--quiet]
 *                   [--save W.safetensors]
 * The model lives in reverse_model.{h,c} (examples/generate.c decodes with it through a
 * KV cache); --save writes the trained parameters for `generate --load`.
 * --check-loss-drop F: exit 1 unless the mean loss of the last 20 steps is at most the
 * first step's loss / F; --check-accuracy A: exit 1 unless the held-out greedy token
 * accuracy is at least A (0..1). The CTest smoke test uses both. Exit 0 on success, 1 on
 * failure, 2 on a usage error.
 * Threads: 1 by default: the model is tiny (1024 rows of 64), so one thread is fastest
 * on a busy machine; --threads N uses more (the results are bitwise the same). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "reverse_model.h"

#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

const char *reverse_prog = "train_reverse";

static int usage(const char *msg)
{
    fprintf(stderr,
            "train_reverse: %s\nusage: train_reverse [--steps N] [--batch B] [--lr LR] "
            "[--threads T] [--seed S] [--check-loss-drop F] [--check-accuracy A] [--eval N] [--quiet] "
            "[--save W.safetensors]\n",
            msg);
    return 2;
}

int main(int argc, char **argv)
{
    long steps = 500, batch = 64, threads = 1, eval_n = 2000;
    double lr = 3e-3, drop = 0.0, min_acc = -1.0;
    unsigned long long seed = 1;
    int quiet = 0;
    const char *save = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("train_reverse: learn to reverse %d digits with two causal attention layers "
                   "and AdamW\n  --steps N (500)  --batch B (64)  --lr LR (3e-3)  --threads T (1)  "
                   "--seed S  --eval N (2000)\n  --check-loss-drop F: exit 1 unless the loss fell "
                   "by the factor F\n  --check-accuracy A: exit 1 unless the held-out token "
                   "accuracy is >= A\n  --save W.safetensors: write the trained parameters (for generate "
                   "--load)\n", L_IN);
            return 0;
        }
        if (i + 1 >= argc) return usage("missing value after an option");
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "--steps")) steps = strtol(v, &end, 10);
        else if (!strcmp(a, "--batch")) batch = strtol(v, &end, 10);
        else if (!strcmp(a, "--threads")) threads = strtol(v, &end, 10);
        else if (!strcmp(a, "--eval")) eval_n = strtol(v, &end, 10);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, &end, 10);
        else if (!strcmp(a, "--lr")) lr = strtod(v, &end);
        else if (!strcmp(a, "--check-loss-drop")) drop = strtod(v, &end);
        else if (!strcmp(a, "--check-accuracy")) min_acc = strtod(v, &end);
        else if (!strcmp(a, "--save")) { save = v; continue; }
        else return usage("unknown option");
        if (*end || end == v) return usage("bad number");
    }
    if (steps < 1 || batch < 1 || eval_n < 0 || threads < 1 || threads > INT_MAX ||
        !(lr > 0) || !isfinite(lr) || !(drop >= 0) || !isfinite(drop) || !isfinite(min_acc) ||
        (min_acc >= 0 && eval_n == 0))
        return usage("values out of range (--check-accuracy needs --eval N > 0)");
    CHECK(ta_set_num_threads((int)threads));

    model m;
    model_init(&m, seed * 1000);
    acts ev;
    double first, recent, t0 = (double)clock() / CLOCKS_PER_SEC;
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    const long tail = steps < 20 ? steps : 20;
    model_train(&m, steps, batch, lr, seed, quiet, &first, &recent);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double wall = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
    printf("trained %ld steps (batch %ld) in %.1f s wall, %.1f s CPU; loss %.4f -> %.4f "
           "(last %ld steps), fell by %.1fx\n",
           steps, batch, wall, (double)clock() / CLOCKS_PER_SEC - t0, first, recent, tail,
           first / recent);
    int rc = 0;
    if (eval_n > 0) {
        acts_init(&ev, eval_n);
        double tok_acc, seq_acc;
        /* held out: a stream the training batches never use */
        evaluate(&m, &ev, 0xE7A1ull + seed * 7919ull, &tok_acc, &seq_acc);
        printf("held-out greedy decoding on %ld sequences: token accuracy %.2f%%, whole "
               "sequences %.2f%%\n", eval_n, 100.0 * tok_acc, 100.0 * seq_acc);
        if (min_acc >= 0 && !(tok_acc >= min_acc)) {
            fprintf(stderr, "train_reverse: held-out token accuracy %.4f is below the required %.4f\n",
                    tok_acc, min_acc);
            rc = 1;
        }
        acts_free(&ev);
    }
    if (drop > 0.0) {
        if (!(recent * drop <= first)) {
            fprintf(stderr, "train_reverse: the loss fell by %.2fx, less than the required %.2fx\n",
                    first / recent, drop);
            rc = 1;
        } else {
            printf("loss check passed: fell by %.2fx >= %.2fx\n", first / recent, drop);
        }
    }
    if (save) {
        model_save(&m, save);
        printf("saved the parameters to %s\n", save);
    }
    model_free(&m);
    return rc;
}
