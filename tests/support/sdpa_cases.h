/* One SDPA case table run on both paths, as ggml's test-backend-ops runs one case list
 * in several modes: a case is a shape and its options (scale, causal alignment, mask
 * mode and broadcast shape, key lengths, GQA, Dv != D, strided or guard-page views);
 * each mode runs every case through the public ta_sdpa with opts.path set and compares
 * with the float64 oracle (sdpa_oracle.h), or compares the two paths with each other. */
#ifndef TA_TEST_SDPA_CASES_H
#define TA_TEST_SDPA_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "guard.h"
#include "tensorattn.h"

/* The mask's shape (broadcast to [B, H, Lq, Lk] by trailing alignment). */
typedef enum ta_test_mask_kind {
    TA_TEST_MASK_NONE,
    TA_TEST_MASK_LQLK,   /* [Lq, Lk] */
    TA_TEST_MASK_B11LK,  /* [B, 1, 1, Lk] */
    TA_TEST_MASK_1HLQLK, /* [1, H, Lq, Lk] */
    TA_TEST_MASK_FULL,   /* [B, H, Lq, Lk] */
    TA_TEST_MASK_LK,     /* [Lk] */
    TA_TEST_MASK_H1LK    /* [H, 1, Lk] */
} ta_test_mask_kind;

/* opts.key_lengths per batch b. */
typedef enum ta_test_lengths {
    TA_TEST_LEN_NONE,
    TA_TEST_LEN_CYCLE,         /* 0, Lk, Lk/2 + 1, 1, 0, ... (capped at Lk) */
    TA_TEST_LEN_CYCLE_FROM_LK, /* Lk, Lk/2 + 1, 1, 0, Lk, ... (capped at Lk) */
    TA_TEST_LEN_LK_MINUS_3     /* max(Lk - 3, 0) for every batch */
} ta_test_lengths;

/* How Q, K, V, O and the LSE are laid out in memory. */
typedef enum ta_test_view {
    TA_TEST_VIEW_CONTIG,  /* contiguous */
    TA_TEST_VIEW_STRIDED, /* Q, K, V, O permuted and sliced from bigger buffers, LSE transposed */
    TA_TEST_VIEW_GUARD    /* contiguous, K and V ending exactly at a PROT_NONE page */
} ta_test_view;

typedef struct ta_sdpa_case {
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    float scale; /* 0: the default 1/sqrt(D) */
    ta_causal causal;
    ta_test_mask_kind mask;
    ta_mask_mode mode;
    ta_test_lengths lengths;
    ta_test_view view;
    uint64_t seed; /* Q, K, V from seed, seed + 1, seed + 2; the mask from seed + 99 */
    /* keep / block masks only. 0: random (a quarter blocked). 1: each mask row keeps a
     * prefix of its keys and blocks the rest (a bound in disguise: the seed's triu mask,
     * a padding mask), with NaN where the mode counts it the same. 2: as 1, but every
     * third row also allows its last key (a bound only up to it). */
    int prefix;
} ta_sdpa_case;

/* A case of that shape and seed, every option at its default. */
ta_sdpa_case ta_sdpa_case_shape(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk,
                                int64_t D, int64_t Dv, uint64_t seed);

/* The tensors of one case: the views the call uses and what owns their memory. */
typedef struct ta_sdpa_case_tensors {
    ta_tensor q, k, v, o, lse, mask;
    ta_tensor qb, kb, vb, ob, lb; /* owning buffers behind strided views */
    ta_guard gk, gv;
    int64_t *lengths;
} ta_sdpa_case_tensors;

/* Builds Q, K, V (random), O and LSE (NaN: an element a path does not write fails the
 * comparison), the mask and key lengths of case c. */
void ta_sdpa_case_make(ta_sdpa_case_tensors *t, const ta_sdpa_case *c);
void ta_sdpa_case_free(ta_sdpa_case_tensors *t);
/* ta_sdpa's options for case c on `path`, with opts.lse = &t->lse. */
ta_sdpa_opts ta_sdpa_case_opts(const ta_sdpa_case *c, ta_sdpa_case_tensors *t, ta_sdpa_path path);
/* "B2 H4/2 Lq37 Lk75 D65 Dv33 causal 2 mask 1/0 len 0 view 1 scale 0" for messages. */
const char *ta_sdpa_case_name(const ta_sdpa_case *c, char *buf, size_t size);

/* Runs case c on `path` (TA_SDPA_REFERENCE or TA_SDPA_FUSED) through ta_sdpa and fails
 * unless O (absolute) and LSE (relative to max(1, |LSE|)) are within 1e-5 of the
 * oracle; on the reference path also the weights (absolute). A second call without the
 * optional outputs must give the same O, bit for bit. */
void ta_sdpa_case_check(const ta_sdpa_case *c, ta_sdpa_path path);
/* Runs case c on both paths and fails unless O and LSE agree within 1e-5 (a check of
 * the paths that does not depend on the oracle). */
void ta_sdpa_case_check_agree(const ta_sdpa_case *c);

/* The case table (sdpa_case_table.c): groups of cases, each built on demand. */
typedef struct ta_sdpa_case_list {
    ta_sdpa_case *v;
    size_t n, cap;
} ta_sdpa_case_list;
void ta_sdpa_case_add(ta_sdpa_case_list *l, ta_sdpa_case c);

typedef struct ta_sdpa_case_group {
    const char *name;
    void (*build)(ta_sdpa_case_list *l);
} ta_sdpa_case_group;
extern const ta_sdpa_case_group ta_sdpa_case_groups[];
extern const size_t ta_sdpa_case_group_count;

#endif
