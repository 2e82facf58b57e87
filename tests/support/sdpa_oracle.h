/* ta_sdpa's semantics (DESIGN.md, "Attention semantics") in double, written from the
 * definitions with plain loops: the oracle the SDPA tests compare both paths against. */
#ifndef TA_TEST_SDPA_ORACLE_H
#define TA_TEST_SDPA_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

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

#endif
