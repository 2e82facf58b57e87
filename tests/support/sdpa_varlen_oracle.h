/* The float64 oracle of variable-length batches (tensorattn.h, "Variable-length
 * batches"): each sequence is copied into a dense [1, H, L, X] problem and run through
 * the dense float64 oracle of the backward tests (sdpa_grad_oracle.h), then copied back
 * into the packed rows. Independent of the library's own varlen code. */
#ifndef TA_TEST_SDPA_VARLEN_ORACLE_H
#define TA_TEST_SDPA_VARLEN_ORACLE_H

#include <stdint.h>

#include "tensorattn.h"

/* A packed batch: num_seqs sequences, offsets cq/ck (num_seqs + 1 each), heads and dims. */
typedef struct ta_test_varlen {
    int64_t n, H, Hkv, D, Dv;
    const int32_t *cq, *ck;
    float scale; /* 0: 1/sqrt(D) */
    ta_causal causal;
} ta_test_varlen;

/* Forward: o [Tq,H,Dv] and lse [H,Tq] (C order doubles) from packed q [Tq,H,D],
 * k [Tk,Hkv,D], v [Tk,Hkv,Dv] (C order doubles). */
void ta_test_varlen_forward64(const ta_test_varlen *b, const double *q, const double *k,
                              const double *v, double *o, double *lse);
/* Backward: dq, dk, dv (packed, C order) of sum(dout * O) given o, the forward output
 * the library is handed (its rounding is part of the gradient it gets). */
void ta_test_varlen_backward64(const ta_test_varlen *b, const double *q, const double *k,
                               const double *v, const double *o, const double *dout,
                               double *dq, double *dk, double *dv);

#endif
