/* Variable-length batches for the tests: the packed tensors of one batch (in a chosen
 * memory layout), its offsets and options, and the library's forward and backward on
 * it. Used by test_sdpa_varlen*.c. */
#ifndef TA_TEST_VARLEN_BATCH_H
#define TA_TEST_VARLEN_BATCH_H

#include <stdint.h>

#include "sdpa_varlen_oracle.h"
#include "tensorattn.h"

#define TA_TEST_VARLEN_MAX 640 /* sequences */

/* How the packed [T, Hx, X] tensors lie in memory. */
typedef enum ta_test_varlen_layout {
    TA_VARLEN_PACKED,     /* contiguous [T, Hx, X] */
    TA_VARLEN_HEAD_MAJOR, /* [Hx, T, X] in memory, seen through a permuted view */
    TA_VARLEN_QKV         /* q, k, v: head slices of one [T, H + 2 Hkv, D] buffer (needs
                             Tq == Tk and D == Dv); the others packed */
} ta_test_varlen_layout;

typedef struct ta_test_varlen_spec {
    const char *name;
    int n;                               /* sequences */
    int32_t lq[TA_TEST_VARLEN_MAX], lk[TA_TEST_VARLEN_MAX];
    int64_t H, Hkv, D, Dv;
    ta_causal causal;
    float scale;
    ta_test_varlen_layout layout;
} ta_test_varlen_spec;

typedef struct ta_test_varlen_batch {
    ta_test_varlen_spec s;
    int32_t cq[TA_TEST_VARLEN_MAX + 1], ck[TA_TEST_VARLEN_MAX + 1];
    int64_t Tq, Tk;
    ta_tensor q, k, v, dout, o, lse, dq, dk, dv;     /* the views the library sees */
    ta_tensor sq, sk, sv, sdout, so, sdq, sdk, sdv;  /* their storage (views of qkv: empty) */
    ta_tensor qkv;                                   /* TA_VARLEN_QKV's buffer */
    ta_test_varlen oracle;
    ta_sdpa_opts opts;                               /* offsets, scale, causal, lse */
} ta_test_varlen_batch;

/* Lays out a batch: offsets from the lengths, q, k, v, dout random from seed .. seed + 3
 * (one stream for TA_VARLEN_QKV), outputs filled with NaN. */
void ta_test_varlen_make(ta_test_varlen_batch *b, const ta_test_varlen_spec *s, uint64_t seed);
void ta_test_varlen_free(ta_test_varlen_batch *b);
/* ta_sdpa with opts->lse into b->o, b->lse on path; then, with backward, ta_sdpa_backward
 * into b->dq, dk, dv from that O and LSE. */
ta_status ta_test_varlen_run(ta_test_varlen_batch *b, ta_sdpa_path path, int backward);
/* O, LSE, dQ, dK, dV one after the other in C order (malloc'd: free()); *n floats. */
float *ta_test_varlen_outputs(const ta_test_varlen_batch *b, int64_t *n);

#endif
