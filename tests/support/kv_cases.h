/* The KV-cache fixture cases (tests/fixtures/kvcache.tafx, tools/fixtures_kvcache.py) as
 * the arguments of ta_sdpa_kvcache: every tensor copied into fresh storage of a chosen
 * memory layout, the lengths and the block table into arrays the test may change. */
#ifndef TA_TEST_KV_CASES_H
#define TA_TEST_KV_CASES_H

#include <stdint.h>

#include "fixtures.h"
#include "ta_test.h"

typedef struct ta_test_kv {
    int64_t B, H, Hkv, Lq, D, Dv, Lnew;
    int paged, has_new;
    ta_tensor q, kc, vc, kn, vn, o, lse;       /* what the call takes (views) */
    ta_tensor q_s, kc_s, vc_s, kn_s, vn_s, o_s; /* their storage */
    int32_t *seqlens, *table;                  /* malloc'd copies */
    ta_kv_cache cache;                         /* points at kc, vc, seqlens, table */
    ta_sdpa_opts opts;                         /* causal and scale of the case; lse set */
} ta_test_kv;

/* Case c of f with its 4-d tensors laid out as `layout` says (TA_TEST_BHLD, BLHD or
 * DLAST, applied to the [B, L, H, X] and cache shapes alike), O filled with 9 and the
 * LSE with 7. */
void ta_test_kv_load(ta_test_kv *t, const ta_fixture_file *f, const char *c,
                     ta_test_layout layout);
void ta_test_kv_free(ta_test_kv *t);

#endif
