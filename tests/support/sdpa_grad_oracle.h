/* ta_sdpa_backward's float64 oracle for the backward tests: a problem (cfg) with its
 * tensors in a chosen layout, O and LSE from the float64 forward rounded to float32
 * (independent of ta_sdpa), and the analytic float64 backward. */
#ifndef TA_TEST_SDPA_GRAD_ORACLE_H
#define TA_TEST_SDPA_GRAD_ORACLE_H

#include <stdint.h>

#include "guard.h"
#include "ta_test.h"

enum { MASK_NONE, MASK_LQLK, MASK_B11LK, MASK_1HLQLK, MASK_BHLQLK, MASK_H1LK, MASK_LK };

typedef struct cfg {
    const char *name;
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    float scale;
    ta_causal causal;
    int mask;
    ta_mask_mode mode;
    int64_t kl[4]; /* key lengths, used when use_kl */
    int use_kl;
    ta_test_layout layout; /* of Q, K, V, dO, dK, dV (O: BHLD, dQ: BLHD when DLAST);
                              TA_TEST_GUARD: Q, K, V, dO, O, dQ, dK, dV, LSE and the
                              mask contiguous, each ending at a guard page */
    int empty_rows; /* mask rows 1 and 3 keep nothing (keep mode) */
} cfg;

/* A problem's tensors: the views the library sees, their storage, and the float32
 * inputs as doubles. */
typedef struct prob {
    cfg c;
    ta_tensor Q, K, V, dO, O, L, M, dQ, dK, dV;     /* views the library sees */
    ta_tensor sQ, sK, sV, sdO, sO, sdQ, sdK, sdV;   /* their storage */
    double *q, *k, *v, *dout, *m;                   /* float32 values as doubles */
    int64_t mshape[4];                              /* the mask as [B?, H?, Lq?, Lk] (1 = bcast) */
    ta_sdpa_opts opts;
    ta_guard guard[10];                             /* TA_TEST_GUARD: the mappings */
    int nguard;
} prob;

/* Builds problem c: Q, K, V, dO random from seed .. seed + 3, the mask from seed + 4, O
 * and LSE from the float64 forward. */
void ta_test_grad_setup(prob *p, const cfg *c, uint64_t seed);
void ta_test_grad_teardown(prob *p);
/* O [B,H,Lq,Dv] and LSE [B,H,Lq] in float64 from q, k, v (doubles, C order). */
void ta_test_grad_forward64(const prob *p, const double *q, const double *k, const double *v,
                            double *o, double *lse);
/* dQ, dK, dV in float64 from the problem's inputs and o (the forward output the
 * library is given). */
void ta_test_grad_backward64(const prob *p, const double *o, double *dq, double *dk, double *dv);
/* ta_sdpa_backward on `path` into dQ, dK, dV (first filled with 9). */
ta_status ta_test_grad_run(prob *p, ta_sdpa_path path);

#endif
