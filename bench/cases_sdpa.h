/* What the attention kinds share: the forward ("sdpa", cases_sdpa.c) and the backward
 * ("sdpa_backward", cases_sdpa_backward.c) hold the same state, set up the same
 * inputs, and are read by the torch peer (peers.c). */
#ifndef TA_BENCH_CASES_SDPA_H
#define TA_BENCH_CASES_SDPA_H

#include "bench_internal.h"

#define BENCH_SDPA_ROWS 14 /* random query rows checked in float64 per call */

/* An attention case: Q [B,H,Lq,D], K and V [B,Hkv,Lk,D], O [B,H,Lq,D]; the causal
 * alignment, how it reaches ta_sdpa (opts.causal, or the seed's mask as a tensor), the
 * key lengths of each batch (ragged: opts.key_lengths), the ta_sdpa path, and the
 * unmasked (query, key) pairs of all batches and heads. */
typedef struct bench_sdpa {
    int64_t B, H, Hkv, Lq, Lk, D;
    ta_causal causal;
    int mask_tensor; /* the (top-left) causal limit goes as the seed's mask, a [Lq, Lk]
                        tensor triu(ones, 1) with TA_MASK_BLOCK, not as opts.causal */
    int ragged;      /* key_lengths[b] (B <= BENCH_SDPA_MAX_RAGGED) go as opts.key_lengths */
    int64_t key_lengths[BENCH_SDPA_MAX_RAGGED];
    ta_sdpa_path path;
    double pairs;
    /* Attention variants (issue 12; forward only): a window (left, right: -1 unbounded),
     * softcap (0: off), ALiBi slopes bench_sdpa_slope (t[5]), sinks bench_sdpa_sink
     * (t[6]). */
    int window;
    int64_t wleft, wright;
    float softcap;
    int alibi, sinks;
    /* Q, K and V stored in this dtype (t[half_at .. half_at + 2]: t[7..9] for a forward,
     * t[10..12] for a backward, whose dO is t[13] then; O and the gradients stay
     * float32), t[0..2] holding their values exactly, for the oracle; TA_F32 (0):
     * t[0..2] themselves. */
    ta_dtype dtype;
    int half_at;
} bench_sdpa;

/* The variants' per-head values the forward cases pass (and their oracle uses): BLOOM's
 * ALiBi slopes 2^(-8 (h + 1) / H), sinks -0.5 .. 0.25. */
double bench_sdpa_slope(const bench_sdpa *a, int64_t h);
double bench_sdpa_sink(int64_t h);

/* The shape with its pairs counted (path: set per case by bench_add_sdpa_pair). */
bench_sdpa bench_sdpa_shape(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk,
                            int64_t D, ta_causal causal);
/* A forward sdpa case's state; NULL for any other case. */
const bench_sdpa *bench_sdpa_of(const bench_case *c);

/* The keys query row i may see under the causal alignment: a prefix [0, n) of Lk. */
int64_t bench_sdpa_visible(ta_causal causal, int64_t i, int64_t Lq, int64_t Lk);
/* The keys row i of batch b sees: the causal prefix, cut at the batch's key length and
 * the window's right bound; from bench_sdpa_first on (the window's left bound, else 0). */
int64_t bench_sdpa_keys(const bench_sdpa *a, int64_t b, int64_t i);
int64_t bench_sdpa_first(const bench_sdpa *a, int64_t i);
const char *bench_causal_name(ta_causal causal); /* "none", "top_left", "bottom_right" */

/* t[0] = Q, t[1] = K, t[2] = V: N(0,1) from fixed seeds (both paths of a shape see the
 * same inputs); t[3] = O, NaN; t[4] = the mask tensor when mask_tensor. */
int bench_sdpa_setup(bench_case *c);
/* Row (b, h, i) of the softmax in float64, from t[0] and t[1], not yet normalised:
 * w[j] = exp(s_j - max s) for the *n keys of a prefix of Lk (w holds Lk doubles; 0 at
 * keys left of a window), s_j = q_i . k_j / sqrt(D) (then softcap, ALiBi).
 * Returns sum_j w[j] (plus exp(sigma - max s) with sinks; 0 when the row sees nothing). */
double bench_sdpa_exp_row(const bench_case *c, int64_t b, int64_t h, int64_t i, double *w,
                          int64_t *n);
/* Row j of V for query head h of batch b: D floats. */
const float *bench_sdpa_value_row(const bench_case *c, int64_t b, int64_t h, int64_t j);
void bench_sdpa_shape_text(const bench_case *c, char *buf, size_t n);
void bench_sdpa_shape_json(const bench_case *c, cJSON *o);

/* Appends the two cases of one shape, the reference path first (its twin is checked
 * against its output), both of `kind`, with proto's flops, bytes, output index and
 * vs_causal (the rest of proto is ignored). ref_skip non-empty: the reference is not
 * run, for that reason. */
void bench_add_sdpa_pair(bench_state *s, const bench_kind *kind, const char *name,
                         const bench_sdpa *shape, const bench_case *proto,
                         const char *ref_skip);
#endif
