/* ta_sdpa's semantics (DESIGN.md, "Attention semantics") in double, written from the
 * definitions with plain loops: the oracle the SDPA tests compare both paths against. */
#ifndef TA_TEST_SDPA_ORACLE_H
#define TA_TEST_SDPA_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

#include "fixtures.h"
#include "ta_test.h"
#include "tensorattn.h"

/* Element (a, b, c, d) of a rank-4 float32 tensor, as a double. */
double ta_test_at4(const ta_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
/* Mask element broadcast to (b, h, i, j) by trailing alignment (numpy rules). */
double ta_test_mask_at(const ta_tensor *m, int64_t b, int64_t h, int64_t i, int64_t j);

/* O [B,H,Lq,Dv], W [B,H,Lq,Lk] (NULL: not wanted) and L [B,H,Lq], C order, double, for
 * Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv] and op's causal, mask, mask_mode and
 * key_lengths; scale already resolved (op->scale is not read). Blocked scores are -inf
 * whatever the product; a NaN or +inf score makes the row NaN; a row with nothing to
 * attend gives output 0, weights 0 and LSE -inf.
 * skip_zero_weights: keys of weight 0 add nothing to O (the fused path, which never
 * reads V at blocked keys); otherwise they add 0 * V, so a NaN there spreads (the
 * reference path, as PyTorch). */
void ta_test_sdpa_f64(double *O, double *W, double *L, const ta_tensor *Q, const ta_tensor *K,
                      const ta_tensor *V, const ta_sdpa_opts *op, double scale,
                      bool skip_zero_weights);

/* The options of an sdpa fixture case (sdpa.tafx, sdpa_grad.tafx), from its metadata:
 * shape = B, H, Hkv, Lq, Lk, D, Dv; scale (0: the default); causal; mask_mode (keep when
 * the case has none); blhd: the case lays Q, K, V out as [B, L, H, D] in memory. */
typedef struct ta_test_sdpa_meta {
    int64_t shape[7];
    float scale;
    ta_causal causal;
    ta_mask_mode mode;
    int blhd;
} ta_test_sdpa_meta;
ta_test_sdpa_meta ta_test_sdpa_case_meta(const char *meta);

/* The inputs of an sdpa fixture case: its metadata, q, k, v laid out as the case says
 * (BLHD or BHLD, as [B, H, L, X] views), the mask and the key lengths. */
typedef struct ta_test_sdpa_inputs {
    ta_test_sdpa_meta m;
    ta_test_layout layout;
    ta_tensor q, k, v;    /* views in that layout */
    ta_tensor qs, ks, vs; /* their storage */
    ta_tensor mask;       /* zeroed when the case has none */
    int64_t *key_lengths; /* NULL when the case has none */
    ta_sdpa_opts opts;    /* scale, causal, mask, mask mode and key lengths of the case */
} ta_test_sdpa_inputs;
void ta_test_sdpa_inputs_load(ta_test_sdpa_inputs *in, const ta_fixture_file *f, const char *c);
void ta_test_sdpa_inputs_free(ta_test_sdpa_inputs *in);

#endif
