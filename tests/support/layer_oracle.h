/* The attention layers' forward in float64 (layer_oracle.c) and the check of
 * ta_attention_forward against it. */
#ifndef TA_TEST_LAYER_ORACLE_H
#define TA_TEST_LAYER_ORACLE_H

#include <stdint.h>

#include "tensorattn.h"

/* The layer's parameter `name` as malloc'd doubles (free()); its count into *count. */
double *ta_test_layer_param_f64(const ta_attention *l, const char *name, int64_t *count);

/* A new [N, L, E] tensor of N(0, 1) values from seed. */
ta_tensor ta_test_randn3(int64_t N, int64_t L, int64_t E, uint64_t seed);

/* A zeroed [N, H, Lq, Lk] table of additive terms (0, -inf or a float) for the oracle;
 * B4(b, n, h, i, j) is its element, with N, H, Lq, Lk in scope. */
double *ta_test_bias_new(int64_t N, int64_t H, int64_t Lq, int64_t Lk);
#define B4(b, n, h, i, j) (b)[(((n) * H + (h)) * Lq + (i)) * Lk + (j)]

/* Runs ta_attention_forward(out, l, q, k, v, opts) and the oracle with the additive
 * table bias4 (NULL: none; the seed layout reads only -inf, as its mask == 0), and fails
 * (naming the caller's line) unless the output, and the weights when want_w (1: per
 * head, 2: averaged over heads), are within tol. Returns the output's max error. */
double ta_test_layer_check_at(int line, ta_attention *l, const ta_tensor *q, const ta_tensor *k,
                              const ta_tensor *v, const ta_attention_opts *opts,
                              const double *bias4, int want_w, double tol);
#define ta_test_layer_check(...) ta_test_layer_check_at(__LINE__, __VA_ARGS__)
/* The same check without weights, with per-head weights and with averaged weights. */
void ta_test_layer_check_weights_at(int line, ta_attention *l, const ta_tensor *q,
                                    const ta_tensor *k, const ta_tensor *v,
                                    const ta_attention_opts *opts, const double *bias4, double tol);
#define ta_test_layer_check_weights(...) ta_test_layer_check_weights_at(__LINE__, __VA_ARGS__)

#endif
