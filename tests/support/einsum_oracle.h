/* The einsum tests' oracle: a naive float64 einsum written from torch 1.13's rules
 * ("..." right-aligned and broadcast, size-1 dims broadcast, implicit output = "..."
 * then the letters seen once in character-code order) that loops over every value of
 * every index, adding each product into a float64 output and |product| into a second.
 * A result passes when |got - ref| <= 1e-6 * sqrt(K) * sum|terms| + 1e-30, K the number
 * of terms summed into one element: a wrong or missing term is O(sum|terms|) and always
 * fails, rounding (about sqrt(K) * 2^-24 for a random sign mix) never does.
 * Also: operands in random layouts, and the xorshift generator that draws them. */
#ifndef TA_TEST_EINSUM_ORACLE_H
#define TA_TEST_EINSUM_ORACLE_H

#include <stdint.h>

#include "tensorattn.h"

/* xorshift64, one stream per test program (a fixed start: reproducible). */
uint64_t ta_test_rng_next(void);
int ta_test_rng_int(int n);      /* [0, n) */
float ta_test_rng_float(void);   /* [-1, 1) */

/* The symbol number of an index letter: 'A'..'Z' 0..25, 'a'..'z' 26..51. */
int ta_test_einsum_symbol(char c);

typedef struct oracle_result {
    int ndim;
    int64_t shape[TA_MAX_DIMS];
    int64_t numel;
    int64_t terms; /* products summed into each output element */
    double *val, *mag;
} oracle_result;

/* The naive einsum of spec over nops (1 or 2) operands (any strides). */
void ta_test_einsum_oracle(oracle_result *r, const char *spec, int nops, const ta_tensor *const *ops);
void ta_test_einsum_oracle_free(oracle_result *r);
/* Fails the test (naming `what`) unless got (any strides) has the oracle's shape and
 * every element is within the bound above. */
void ta_test_einsum_check(const ta_tensor *got, const oracle_result *r, const char *what);
/* ta_einsum_alloc (b NULL: ta_einsum1_alloc) of spec against the oracle; what NULL:
 * the spec names the failure. */
void ta_test_einsum_check_alloc(const char *spec, const ta_tensor *a, const ta_tensor *b,
                                const char *what);

/* A float32 tensor viewing its own buffer (random values in [-1, 1)) in a layout. */
typedef struct rtensor {
    ta_tensor t;
    float *buf;
    int64_t span; /* elements in buf */
} rtensor;

/* Contiguous; dims permuted at random; permuted with steps of 1 or 2; one dim with a
 * negative stride; one dim of stride 0 (expanded). */
enum { L_CONTIG, L_PERMUTED, L_STEPPED, L_NEGATIVE, L_EXPANDED, L_COUNT };

void rtensor_make(rtensor *r, int nd, const int64_t *shape, int layout);
void rtensor_free(rtensor *r);

#endif
