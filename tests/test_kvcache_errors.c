/* ta_sdpa_kvcache's hostile inputs (DESIGN.md, "KV cache"): bad lengths, a block index
 * out of range among the blocks a sequence uses, a sequence longer than its cache, k_new
 * without v_new, wrong shapes and dtypes, options that do not combine with a cache,
 * overlapping outputs, a cache the append would write through a stride 0, a block the
 * append writes that another sequence (or another slot) reads, a workspace too small. Each must fail with its own error code and a message naming the argument, and
 * leave O, the LSE and both caches byte for byte as they were (nothing is written before
 * every check passed, the append included). Also: block-table entries past the blocks a
 * sequence uses are never read. */
#include "ta_test.h"

#include "fixture_cases.h"
#include "kv_cases.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ta_fixture_file *fx;

/* The bytes of everything the call may write. */
typedef struct snapshot {
    unsigned char *b[4];
    size_t n[4];
} snapshot;

static ta_tensor *written(ta_test_kv *t, int i)
{
    ta_tensor *w[4] = {&t->o_s, &t->lse, &t->kc_s, &t->vc_s};
    return w[i];
}

static void take(snapshot *s, ta_test_kv *t)
{
    for (int i = 0; i < 4; i++) {
        s->n[i] = (size_t)ta_tensor_numel(written(t, i)) * sizeof(float);
        s->b[i] = malloc(s->n[i] + 1);
        assert_non_null(s->b[i]);
        memcpy(s->b[i], written(t, i)->data, s->n[i]);
    }
}

static void same_and_free(snapshot *s, ta_test_kv *t, const char *what)
{
    const char *names[4] = {"O", "LSE", "the k cache", "the v cache"};
    for (int i = 0; i < 4; i++) {
        if (memcmp(s->b[i], written(t, i)->data, s->n[i]))
            fail_msg("%s: %s changed although the call failed", what, names[i]);
        free(s->b[i]);
    }
}

static int drop_v_new; /* a change may pass k_new alone */

/* The call with t's arguments (new keys when the case has them). */
static ta_status call(ta_test_kv *t, const ta_sdpa_opts *o)
{
    return ta_sdpa_kvcache(&t->o, &t->q, &t->cache, t->has_new ? &t->kn : NULL,
                           t->has_new && !drop_v_new ? &t->vn : NULL, o);
}

/* One hostile variant: case c loaded fresh, changed by `change`, must fail with code and
 * needle and write nothing. */
typedef void (*change_fn)(ta_test_kv *t, ta_sdpa_opts *o);
static void expect_refused(const char *c, change_fn change, ta_status code, const char *needle)
{
    ta_test_kv t;
    ta_test_kv_load(&t, fx, c, TA_TEST_BHLD);
    ta_sdpa_opts o = t.opts;
    change(&t, &o);
    snapshot s;
    take(&s, &t);
    ta_status st = call(&t, &o);
    if (st != code || !strstr(ta_last_error(), needle))
        fail_msg("%s (%s): got %s '%s', expected %s with '%s'", c, needle, ta_status_name(st),
                 ta_last_error(), ta_status_name(code), needle);
    same_and_free(&s, &t, needle);
    drop_v_new = 0;
    ta_test_kv_free(&t);
}

/* kv000: contiguous, B 3, H 4, Hkv 2, Lq 1, D = Dv = 16, Lnew 1, Lmax 20, seqlens 0 7 19.
 * kv004: paged, blocks of 4, max_blocks 5, 12 blocks, seqlens 0 10 19, Lnew 1. */
static void neg_len(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->seqlens[1] = -3; }
static void over_len(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->seqlens[2] = 20; }
static void huge_len(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->seqlens[0] = INT32_MAX; }
static void no_lens(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->cache.seqlens = NULL; }
static void block_high(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->table[5 + 2] = 12; }
static void block_neg(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->table[2 * 5 + 4] = -1; }
static void k_only(ta_test_kv *t, ta_sdpa_opts *o) { (void)t, (void)o; drop_v_new = 1; }
static void neg_blocks(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->cache.max_blocks = -1; }
static void with_mask(ta_test_kv *t, ta_sdpa_opts *o) { o->mask = &t->lse; }
static void with_lengths(ta_test_kv *t, ta_sdpa_opts *o)
{
    static const int64_t len[3] = {1, 1, 1};
    (void)t;
    o->key_lengths = len;
}
static void with_weights(ta_test_kv *t, ta_sdpa_opts *o) { o->weights = &t->o; }
static void with_cu(ta_test_kv *t, ta_sdpa_opts *o)
{
    static const int32_t cu[4] = {0, 1, 2, 3};
    (void)t;
    o->cu_seqlens_q = o->cu_seqlens_k = cu;
    o->num_seqs = 3;
}
static void nan_scale(ta_test_kv *t, ta_sdpa_opts *o) { (void)t; o->scale = NAN; }
static void bad_path(ta_test_kv *t, ta_sdpa_opts *o) { (void)t; o->path = (ta_sdpa_path)7; }
static void bad_causal(ta_test_kv *t, ta_sdpa_opts *o) { (void)t; o->causal = (ta_causal)9; }
static void q_dim(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->q.shape[3] = 8; }
static void q_heads(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->q.shape[2] = 3; t->o.shape[2] = 3; }
static void o_shape(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->o.shape[3] = 8; }
static ta_tensor lse_view; /* a changed view of the LSE (its storage stays as it is) */
static void lse_shape(ta_test_kv *t, ta_sdpa_opts *o)
{
    lse_view = t->lse;
    lse_view.owned = NULL;
    lse_view.shape[1] = 3;
    o->lse = &lse_view;
}
static void cache_batch(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->kc.shape[0] = t->vc.shape[0] = 2;
}
static void v_cache_len(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->vc.shape[1] = 19; }
static void k_new_heads(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->kn.shape[2] = 1; }
static void v_new_len(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->vn.shape[1] = 2; }
static void no_blocks(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->kc.shape[1] = t->vc.shape[1] = 0;
}
/* f16 and bf16 are storage types the cache and q may have; f64 is not */
static void f64_cache(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->kc.dtype = TA_F64; }
static void f64_q(ta_test_kv *t, ta_sdpa_opts *o) { (void)o; t->q.dtype = TA_F64; }
static void o_in_cache(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->o.data = t->kc_s.data; /* O (3 x 1 x 4 x 16 floats) inside the k cache */
}
static void lse_in_q(ta_test_kv *t, ta_sdpa_opts *o)
{
    lse_view = t->lse;
    lse_view.owned = NULL;
    lse_view.data = t->q_s.data;
    o->lse = &lse_view;
}
static void k_new_in_cache(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->kn.data = (float *)t->vc_s.data + 16; /* read while the cache is written */
}
/* caches the append writes with a stride 0 (every sequence's blocks or rows in one place:
 * each sequence's new keys overwrite the keys another sequence reads) */
static void k_cache_broadcast(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->kc.stride[0] = 0;
}
static void v_blocks_broadcast(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->vc.stride[0] = 0;
}
/* a cache whose sequences (blocks) start inside the one before: a batch stride of one
 * row, so sequence b's row j is sequence b - 1's row j + 1 (not a stride 0: the
 * partial overlap that passed the aliasing check until session 37) */
static void k_cache_rows_overlap(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->kc.stride[0] = t->kc.stride[1];
}
static void v_blocks_overlap(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->vc.stride[0] = t->vc.stride[1];
}
/* blocks appended to that another sequence (or the same one elsewhere) uses: seq 0
 * appends into slot 0, seq 1 into slot 2, seq 2 into slot 4 */
static void shared_appended_block(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->table[0] = t->table[5 + 2];
}
static void reads_appended_block(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->table[5 + 0] = t->table[2 * 5 + 4];
}
static void appended_block_listed_twice(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->table[2 * 5 + 1] = t->table[2 * 5 + 4];
}
/* kv006: paged, blocks of 8, max_blocks 3, seqlens 3 10, Lnew 6: sequence 0 appends
 * into its slots 0 and 1 */
static void appends_twice_into_one_block(ta_test_kv *t, ta_sdpa_opts *o)
{
    (void)o;
    t->table[1] = t->table[0];
}
static void tiny_workspace(ta_test_kv *t, ta_sdpa_opts *o)
{
    size_t n;
    TA_CHECK_OK(ta_sdpa_kvcache_workspace_size(&n, &t->o, &t->q, &t->cache, &t->kn, &t->vn, o));
    assert_true(n > 0);
    /* the LSE's storage stands in for a buffer (never written: the call is refused) */
    o->workspace = (ta_workspace){.data = t->lse.data, .size = n - 1};
}

static void test_refused(void **state)
{
    (void)state;
    static const struct {
        const char *c;
        change_fn change;
        ta_status code;
        const char *needle;
    } cases[] = {
        {"kv000", neg_len, TA_EINVAL, "cache->seqlens[1] = -3 is negative"},
        {"kv000", over_len, TA_EINVAL, "sequence 2 would hold"},
        {"kv004", over_len, TA_EINVAL, "more than its cache holds (20)"},
        {"kv000", huge_len, TA_EINVAL, "more than its cache holds"},
        {"kv000", no_lens, TA_EINVAL, "cache->seqlens is NULL"},
        {"kv004", block_high, TA_EINVAL, "cache->block_table[1][2] = 12 is outside [0, 12)"},
        {"kv004", block_neg, TA_EINVAL, "cache->block_table[2][4] = -1 is outside"},
        {"kv004", neg_blocks, TA_EINVAL, "max_blocks = -1"},
        {"kv000", k_only, TA_EINVAL, "pass both or neither"},
        {"kv000", with_mask, TA_EINVAL, "opts->mask"},
        {"kv000", with_lengths, TA_EINVAL, "opts->key_lengths"},
        {"kv000", with_weights, TA_EINVAL, "opts->weights"},
        {"kv000", with_cu, TA_EINVAL, "cu_seqlens"},
        {"kv000", nan_scale, TA_EINVAL, "opts->scale"},
        {"kv000", bad_path, TA_EINVAL, "opts->path"},
        {"kv000", bad_causal, TA_EINVAL, "opts->causal"},
        {"kv000", q_dim, TA_ESHAPE, "head_dim"},
        {"kv000", q_heads, TA_ESHAPE, "not a multiple"},
        {"kv000", o_shape, TA_ESHAPE, "O has shape"},
        {"kv000", lse_shape, TA_ESHAPE, "opts->lse has shape"},
        {"kv000", cache_batch, TA_ESHAPE, "cache->k has batch 2"},
        {"kv000", v_cache_len, TA_ESHAPE, "cache->v has shape"},
        {"kv000", k_new_heads, TA_ESHAPE, "k_new has shape"},
        {"kv000", v_new_len, TA_ESHAPE, "v_new has shape"},
        {"kv004", no_blocks, TA_ESHAPE, "block_size >= 1"},
        {"kv000", f64_cache, TA_EUNSUPPORTED, "cache->k"},
        {"kv000", f64_q, TA_EUNSUPPORTED, "q"},
        {"kv000", o_in_cache, TA_EINVAL, "O overlaps cache->k"},
        {"kv000", lse_in_q, TA_EINVAL, "opts->lse overlaps q"},
        {"kv004", k_new_in_cache, TA_EINVAL, "cache->v overlaps k_new"},
        {"kv000", k_cache_broadcast, TA_EINVAL, "cache->k has stride 0 in dim 0"},
        {"kv004", v_blocks_broadcast, TA_EINVAL, "cache->v has stride 0 in dim 0"},
        {"kv000", k_cache_rows_overlap, TA_EINVAL, "cache->k's strides put two of its elements at one address"},
        {"kv004", v_blocks_overlap, TA_EINVAL, "cache->v's strides put two of its elements at one address"},
        {"kv004", shared_appended_block, TA_EINVAL, "is appended to by sequence 0 and by sequence 1"},
        {"kv004", reads_appended_block, TA_EINVAL, "which sequence 1 reads too (cache->block_table[1][0])"},
        {"kv004", appended_block_listed_twice, TA_EINVAL, "reads it at cache->block_table[2][1] too"},
        {"kv006", appends_twice_into_one_block, TA_EINVAL, "sequence 0's table lists block"},
        {"kv004", tiny_workspace, TA_EINVAL, "workspace"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_refused(cases[i].c, cases[i].change, cases[i].code, cases[i].needle);
}

/* NULL arguments and the size query's own. */
static void test_null_arguments(void **state)
{
    (void)state;
    ta_test_kv t;
    ta_test_kv_load(&t, fx, "kv000", TA_TEST_BHLD);
    size_t n;
    TA_CHECK_ERR(ta_sdpa_kvcache(NULL, &t.q, &t.cache, NULL, NULL, NULL), TA_EINVAL, "O is NULL");
    TA_CHECK_ERR(ta_sdpa_kvcache(&t.o, NULL, &t.cache, NULL, NULL, NULL), TA_EINVAL, "q is NULL");
    TA_CHECK_ERR(ta_sdpa_kvcache(&t.o, &t.q, NULL, NULL, NULL, NULL), TA_EINVAL, "cache is NULL");
    t.cache.k = NULL;
    TA_CHECK_ERR(ta_sdpa_kvcache(&t.o, &t.q, &t.cache, NULL, NULL, NULL), TA_EINVAL, "cache->k is NULL");
    t.cache.k = &t.kc;
    TA_CHECK_ERR(ta_sdpa_kvcache_workspace_size(NULL, &t.o, &t.q, &t.cache, NULL, NULL, NULL),
                 TA_EINVAL, "bytes is NULL");
    t.seqlens[0] = -1;
    TA_CHECK_ERR(ta_sdpa_kvcache_workspace_size(&n, &t.o, &t.q, &t.cache, NULL, NULL, NULL),
                 TA_EINVAL, "ta_sdpa_kvcache_workspace_size: cache->seqlens[0] = -1");
    ta_test_kv_free(&t);
}

/* Block-table entries past the blocks a sequence uses may hold anything: they are not
 * read (the result equals the case's reference). */
static void test_unused_entries_not_read(void **state)
{
    (void)state;
    ta_test_kv t;
    ta_test_kv_load(&t, fx, "kv004", TA_TEST_BHLD);
    /* sequence 0 uses 1 block, sequence 1 uses 3 */
    t.table[1] = INT32_MIN, t.table[4] = 1 << 30, t.table[5 + 3] = -7, t.table[5 + 4] = 99;
    TA_CHECK_OK(call(&t, &t.opts));
    ta_fixture_expect_close("kv004", "O", &t.o, ta_fixture_need(fx, "kv004", "out"), 0.0, 1e-5);
    ta_fixture_expect_close("kv004", "k cache", &t.kc, ta_fixture_need(fx, "kv004", "k_cache_out"), 0, 0);
    ta_test_kv_free(&t);
}

/* A block that sequences only read may be shared (vLLM's prefix sharing): sequence 2's
 * first block replaced by sequence 1's, the contents made equal first, reads what a
 * table without the sharing reads (the same O, LSE and caches, bit for bit). Until
 * session 35 nothing told this from sharing a block that the call appends to. */
static void test_read_only_blocks_may_be_shared(void **state)
{
    (void)state;
    ta_test_kv t[2];
    for (int shared = 0; shared < 2; shared++) {
        ta_test_kv *u = &t[shared];
        ta_test_kv_load(u, fx, "kv004", TA_TEST_BHLD);
        const int64_t x = u->table[5 + 0], y = u->table[2 * 5 + 0]; /* seq 1's, seq 2's slot 0 */
        ta_tensor *cache[2] = {&u->kc, &u->vc};
        for (int c = 0; c < 2; c++) {
            ta_tensor from, to;
            TA_CHECK_OK(ta_tensor_slice(&from, cache[c], 0, x, x + 1, 1));
            TA_CHECK_OK(ta_tensor_slice(&to, cache[c], 0, y, y + 1, 1));
            TA_CHECK_OK(ta_tensor_copy(&to, &from));
        }
        if (shared) u->table[2 * 5 + 0] = (int32_t)x;
        TA_CHECK_OK(call(u, &u->opts));
    }
    ta_tensor *a[4] = {&t[0].o, &t[0].lse, &t[0].kc, &t[0].vc};
    ta_tensor *b[4] = {&t[1].o, &t[1].lse, &t[1].kc, &t[1].vc};
    for (int i = 0; i < 4; i++)
        for (int64_t e = 0; e < ta_tensor_numel(a[i]); e++) {
            int64_t idx[4];
            int64_t r = e;
            for (int d = a[i]->ndim - 1; d >= 0; d--) {
                idx[d] = r % a[i]->shape[d];
                r /= a[i]->shape[d];
            }
            assert_memory_equal(ta_tensor_at(a[i], idx), ta_tensor_at(b[i], idx), sizeof(float));
        }
    ta_test_kv_free(&t[0]);
    ta_test_kv_free(&t[1]);
}

/* Empty caches (Hkv 0) of extents near 2^62: nothing to read or write, so the call
 * succeeds, and its bounds arithmetic (a paged sequence's block count, the overlap
 * checks' spans) must not overflow on the way (make sanitize: UBSan). */
static void test_empty_caches_of_huge_extents(void **state)
{
    (void)state;
    float buf[4] = {0};
    for (int paged = 0; paged < 2; paged++) {
        const int64_t L = paged ? 3 * ((int64_t)1 << 61) : (int64_t)1 << 62;
        const int64_t qs[4] = {1, 1, 0, 4}, cs[4] = {1, L, 0, 4};
        ta_tensor q, o, kc, vc, kn, vn;
        TA_CHECK_OK(ta_tensor_from_buffer(&q, buf, 4, qs, NULL));
        TA_CHECK_OK(ta_tensor_from_buffer(&o, buf, 4, qs, NULL));
        TA_CHECK_OK(ta_tensor_from_buffer(&kc, buf, 4, cs, NULL));
        TA_CHECK_OK(ta_tensor_from_buffer(&vc, buf, 4, cs, NULL));
        TA_CHECK_OK(ta_tensor_from_buffer(&kn, buf, 4, cs, NULL)); /* Lnew = the capacity */
        TA_CHECK_OK(ta_tensor_from_buffer(&vn, buf, 4, cs, NULL));
        int32_t seqlens[1] = {0}, table[1] = {0};
        const ta_kv_cache c = {&kc, &vc, seqlens, paged ? table : NULL, 1};
        TA_CHECK_OK(ta_sdpa_kvcache(&o, &q, &c, &kn, &vn, NULL));
    }
}

static int setup(void **state)
{
    (void)state;
    return ta_fixture_open(&fx, "kvcache.tafx") == TA_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ta_fixture_close(fx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_unused_entries_not_read),
        cmocka_unit_test(test_read_only_blocks_may_be_shared),
        cmocka_unit_test(test_empty_caches_of_huge_extents),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
