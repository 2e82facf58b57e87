/* ta-test: all-isas -- Caller workspaces (ta_workspace): with a buffer of the size the
 * _workspace_size query gives, ta_sdpa and ta_sdpa_backward make no allocation at all
 * (counted through the allocation hook), on every path and plan, and give bitwise the
 * results of the same call without a workspace; a buffer one byte too small is refused
 * before any output is written; any alignment works; without a workspace a repeated call
 * reuses the library's kept block and allocates nothing either. Every workspace ends at
 * a guard page (tests/support/guard.h), so a call that uses a byte more than its size
 * query measured crashes. */
#include "ta_test.h"

#include "alloc_hook.h"
#include "guard.h"
#include "core/workspace.h" /* ta_scratch_cache_release: start from no kept block */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One SDPA case: shapes, options, and views that exercise each plan. */
typedef struct wcase {
    const char *name;
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    ta_causal causal;
    ta_sdpa_path path;
    int weights, mask, k_strided, q_strided;
} wcase;

static const wcase cases[] = {
    {"fused causal GQA", 2, 4, 2, 37, 53, 16, 24, TA_CAUSAL_TOP_LEFT, TA_SDPA_FUSED, 0, 0, 0, 0},
    {"fused decode split", 1, 2, 1, 1, 2500, 32, 32, TA_CAUSAL_BOTTOM_RIGHT, TA_SDPA_FUSED, 0, 0, 0, 0},
    {"fused mask, strided K and Q", 2, 2, 2, 19, 70, 8, 8, TA_CAUSAL_NONE, TA_SDPA_FUSED, 0, 1, 1, 1},
    {"fused few groups (split backward)", 1, 1, 1, 300, 300, 16, 16, TA_CAUSAL_TOP_LEFT, TA_SDPA_FUSED, 0, 0, 0, 0},
    {"reference with weights", 2, 4, 2, 13, 29, 8, 12, TA_CAUSAL_TOP_LEFT, TA_SDPA_REFERENCE, 1, 0, 0, 0},
    {"reference mask, strided", 1, 2, 1, 9, 33, 8, 8, TA_CAUSAL_NONE, TA_SDPA_REFERENCE, 0, 1, 1, 1},
};

typedef struct tensors {
    ta_tensor q, k, v, o, lse, w, mask, dout, dq, dk, dv;
    ta_tensor qbuf, kbuf; /* storage of the strided views */
} tensors;

/* [B, H, L, D] with the last dim strided by 2 (a view into a [B, H, L, 2D] buffer). */
static void strided(ta_tensor *view, ta_tensor *buf, const int64_t *shape, uint64_t seed)
{
    const int64_t wide[4] = {shape[0], shape[1], shape[2], 2 * shape[3]};
    TA_CHECK_OK(ta_tensor_empty(buf, 4, wide));
    TA_CHECK_OK(ta_randn(buf, seed));
    TA_CHECK_OK(ta_tensor_slice(view, buf, 3, 0, wide[3], 2));
}

static void make(tensors *t, const wcase *c)
{
    memset(t, 0, sizeof *t);
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D};
    const int64_t vs[4] = {c->B, c->Hkv, c->Lk, c->Dv}, os[4] = {c->B, c->H, c->Lq, c->Dv};
    const int64_t ws[4] = {c->B, c->H, c->Lq, c->Lk}, ls[3] = {c->B, c->H, c->Lq};
    if (c->q_strided) {
        strided(&t->q, &t->qbuf, qs, 1);
    } else {
        TA_CHECK_OK(ta_tensor_empty(&t->q, 4, qs));
        TA_CHECK_OK(ta_randn(&t->q, 1));
    }
    if (c->k_strided) {
        strided(&t->k, &t->kbuf, ks, 2);
    } else {
        TA_CHECK_OK(ta_tensor_empty(&t->k, 4, ks));
        TA_CHECK_OK(ta_randn(&t->k, 2));
    }
    TA_CHECK_OK(ta_tensor_empty(&t->v, 4, vs));
    TA_CHECK_OK(ta_randn(&t->v, 3));
    TA_CHECK_OK(ta_tensor_empty(&t->o, 4, os));
    TA_CHECK_OK(ta_tensor_empty(&t->dout, 4, os));
    TA_CHECK_OK(ta_randn(&t->dout, 4));
    TA_CHECK_OK(ta_tensor_empty(&t->lse, 3, ls));
    TA_CHECK_OK(ta_tensor_empty(&t->dq, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&t->dk, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&t->dv, 4, vs));
    if (c->weights) TA_CHECK_OK(ta_tensor_empty(&t->w, 4, ws));
    if (c->mask) { /* [B, 1, Lq, Lk] keep mask, about one key in five blocked */
        const int64_t ms[4] = {c->B, 1, c->Lq, c->Lk};
        TA_CHECK_OK(ta_tensor_empty(&t->mask, 4, ms));
        TA_CHECK_OK(ta_rand(&t->mask, 5));
        float *m = t->mask.data;
        for (int64_t i = 0; i < ta_tensor_numel(&t->mask); i++) m[i] = m[i] < 0.2f ? 0.0f : 1.0f;
    }
}

static void release(tensors *t)
{
    ta_tensor *all[] = {&t->q, &t->k, &t->v, &t->o, &t->lse, &t->w, &t->mask, &t->dout,
                        &t->dq, &t->dk, &t->dv, &t->qbuf, &t->kbuf};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static ta_sdpa_opts opts_of(const wcase *c, tensors *t)
{
    ta_sdpa_opts o = {.causal = c->causal, .path = c->path, .lse = &t->lse};
    if (c->weights) o.weights = &t->w;
    if (c->mask) {
        o.mask = &t->mask;
        o.mask_mode = TA_MASK_KEEP;
    }
    return o;
}

static float *copy_of(const ta_tensor *t)
{
    size_t n = (size_t)ta_tensor_numel(t);
    float *c = malloc(sizeof(float) * (n ? n : 1));
    memcpy(c, t->data, sizeof(float) * n);
    return c;
}

static void assert_same(const ta_tensor *t, const float *ref, const char *what, const char *name)
{
    if (memcmp(t->data, ref, sizeof(float) * (size_t)ta_tensor_numel(t)) != 0)
        fail_msg("%s: %s differs with a workspace", name, what);
}

/* A caller buffer of `bytes` starting `skew` bytes past a 64-byte boundary, ending at
 * a guard page (ta_guard_workspace). */
static ta_workspace buffer(size_t bytes, size_t skew, ta_guard *g)
{
    ta_workspace ws = ta_guard_workspace(g, bytes, skew);
    assert_non_null(ws.data);
    return ws;
}

static void assert_all(const ta_tensor *t, float v, const char *what, const char *name)
{
    for (int64_t i = 0; i < ta_tensor_numel(t); i++)
        if (((const float *)t->data)[i] != v)
            fail_msg("%s: %s[%lld] was written by a refused call", name, what, (long long)i);
}

static void forward_case(const wcase *c)
{
    tensors t;
    make(&t, c);
    ta_sdpa_opts o = opts_of(c, &t);
    /* the reference result without a workspace, then the kept block is warm */
    TA_CHECK_OK(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o));
    float *o_ref = copy_of(&t.o), *l_ref = copy_of(&t.lse);
    ta_test_alloc_count = 0;
    TA_CHECK_OK(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o));
    if (ta_test_alloc_count) fail_msg("%s: a repeated call without a workspace allocated %ld times", c->name, ta_test_alloc_count);

    size_t bytes = 0;
    TA_CHECK_OK(ta_sdpa_workspace_size(&bytes, &t.o, &t.q, &t.k, &t.v, &o));
    assert_true(bytes > 0);
    ta_guard g;
    o.workspace = buffer(bytes, 13, &g); /* unaligned on purpose */
    TA_CHECK_OK(ta_tensor_fill(&t.o, NAN));
    ta_scratch_cache_release();
    ta_test_alloc_count = 0;
    TA_CHECK_OK(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o));
    if (ta_test_alloc_count) fail_msg("%s: ta_sdpa with a workspace allocated %ld times", c->name, ta_test_alloc_count);
    assert_same(&t.o, o_ref, "O", c->name);
    assert_same(&t.lse, l_ref, "LSE", c->name);

    /* one byte short: refused, O untouched */
    o.workspace.size = bytes - 1;
    TA_CHECK_OK(ta_tensor_fill(&t.o, 7.0f));
    TA_CHECK_ERR(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o), TA_EINVAL, "ta_sdpa: the workspace has");
    assert_all(&t.o, 7.0f, "O", c->name);
    ta_guard_release(&g);
    free(o_ref);
    free(l_ref);
    release(&t);
}

static void backward_case(const wcase *c)
{
    tensors t;
    make(&t, c);
    ta_sdpa_opts o = opts_of(c, &t);
    TA_CHECK_OK(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o));
    o.lse = NULL;
    o.weights = NULL;
    TA_CHECK_OK(ta_sdpa_backward(&t.dq, &t.dk, &t.dv, &t.dout, &t.q, &t.k, &t.v, &t.o, &t.lse, &o));
    float *dq = copy_of(&t.dq), *dk = copy_of(&t.dk), *dv = copy_of(&t.dv);

    size_t bytes = 0;
    TA_CHECK_OK(ta_sdpa_backward_workspace_size(&bytes, &t.dq, &t.dk, &t.dv, &t.dout, &t.q, &t.k,
                                                &t.v, &t.o, &t.lse, &o));
    assert_true(bytes > 0);
    ta_guard g;
    o.workspace = buffer(bytes, 5, &g);
    TA_CHECK_OK(ta_tensor_fill(&t.dq, NAN));
    TA_CHECK_OK(ta_tensor_fill(&t.dk, NAN));
    TA_CHECK_OK(ta_tensor_fill(&t.dv, NAN));
    ta_scratch_cache_release();
    ta_test_alloc_count = 0;
    TA_CHECK_OK(ta_sdpa_backward(&t.dq, &t.dk, &t.dv, &t.dout, &t.q, &t.k, &t.v, &t.o, &t.lse, &o));
    if (ta_test_alloc_count) fail_msg("%s: ta_sdpa_backward with a workspace allocated %ld times", c->name, ta_test_alloc_count);
    assert_same(&t.dq, dq, "dQ", c->name);
    assert_same(&t.dk, dk, "dK", c->name);
    assert_same(&t.dv, dv, "dV", c->name);
    /* one byte short: refused, dQ, dK, dV untouched */
    o.workspace.size = bytes - 1;
    TA_CHECK_OK(ta_tensor_fill(&t.dq, 7.0f));
    TA_CHECK_OK(ta_tensor_fill(&t.dk, 7.0f));
    TA_CHECK_OK(ta_tensor_fill(&t.dv, 7.0f));
    TA_CHECK_ERR(ta_sdpa_backward(&t.dq, &t.dk, &t.dv, &t.dout, &t.q, &t.k, &t.v, &t.o, &t.lse, &o),
                 TA_EINVAL, "ta_sdpa_backward: the workspace has");
    assert_all(&t.dq, 7.0f, "dQ", c->name);
    assert_all(&t.dk, 7.0f, "dK", c->name);
    assert_all(&t.dv, 7.0f, "dV", c->name);
    ta_guard_release(&g);
    free(dq);
    free(dk);
    free(dv);
    release(&t);
}

static void test_sdpa_forward(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) forward_case(&cases[i]);
}

static void test_sdpa_backward(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) backward_case(&cases[i]);
}

/* The size is the thread count's: queried for 1 thread, a 2-thread call needs more on
 * the fused path (a workspace per thread) and says so instead of overrunning. */
static void test_size_follows_threads(void **state)
{
    (void)state;
    tensors t;
    make(&t, &cases[0]);
    ta_sdpa_opts o = opts_of(&cases[0], &t);
    size_t one, two;
    TA_CHECK_OK(ta_set_num_threads(1));
    TA_CHECK_OK(ta_sdpa_workspace_size(&one, &t.o, &t.q, &t.k, &t.v, &o));
    TA_CHECK_OK(ta_set_num_threads(2));
    TA_CHECK_OK(ta_sdpa_workspace_size(&two, &t.o, &t.q, &t.k, &t.v, &o));
    assert_true(two > one);
    ta_guard g;
    o.workspace = buffer(one, 0, &g);
    TA_CHECK_ERR(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o), TA_EINVAL, "for the current thread count");
    ta_guard_release(&g);
    release(&t);
}

/* A head_dim whose scratch no machine has (2^45 floats per query row, Q and K broadcast
 * views of one float): the size query and the calls say TA_ENOMEM, nothing is written,
 * and no size arithmetic wraps on the way (the sanitizer run checks that). */
static void test_scratch_that_cannot_fit(void **state)
{
    (void)state;
    const int64_t D = (int64_t)1 << 45;
    float one = 1.0f, o[4] = {7.0f, 7.0f, 7.0f, 7.0f}, lse[2];
    const int64_t qs[4] = {1, 1, 2, D}, vs[4] = {1, 1, 3, 2}, os[4] = {1, 1, 2, 2};
    const int64_t zero[4] = {0, 0, 0, 0}, ls[3] = {1, 1, 2};
    float vbuf[6] = {0};
    ta_tensor q, k, v, out, l;
    TA_CHECK_OK(ta_tensor_from_buffer(&q, &one, 4, qs, zero));
    const int64_t ks[4] = {1, 1, 3, D};
    TA_CHECK_OK(ta_tensor_from_buffer(&k, &one, 4, ks, zero));
    TA_CHECK_OK(ta_tensor_from_buffer(&v, vbuf, 4, vs, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&out, o, 4, os, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&l, lse, 3, ls, NULL));
    ta_sdpa_opts opts = {.path = TA_SDPA_FUSED, .lse = &l};
    size_t bytes;
    TA_CHECK_ERR(ta_sdpa_workspace_size(&bytes, &out, &q, &k, &v, &opts), TA_ENOMEM,
                 "does not fit");
    TA_CHECK_ERR(ta_sdpa(&out, &q, &k, &v, &opts), TA_ENOMEM, "ta_sdpa: the scratch");
    for (int i = 0; i < 4; i++) assert_true(o[i] == 7.0f);
    float dq1, dk1, dv[6];
    ta_tensor dq, dk, dvt;
    TA_CHECK_OK(ta_tensor_from_buffer(&dq, &dq1, 4, qs, zero)); /* refused: aliasing output */
    TA_CHECK_OK(ta_tensor_from_buffer(&dk, &dk1, 4, ks, zero));
    TA_CHECK_OK(ta_tensor_from_buffer(&dvt, dv, 4, vs, NULL));
    opts.lse = NULL;
    TA_CHECK_ERR(ta_sdpa_backward(&dq, &dk, &dvt, &out, &q, &k, &v, &out, &l, &opts), TA_EINVAL,
                 "dQ has stride 0");
}

/* A workspace that shares memory with one of the call's tensors would have the call write
 * its scratch over them (an input changed behind the caller's back, a wrong result): it is
 * refused before anything is written, for ta_sdpa, ta_sdpa_backward, ta_sdpa_kvcache and
 * ta_einsum_ext. Here one block holds the tensor and serves as the workspace. */
static void test_workspace_overlapping_a_tensor(void **state)
{
    (void)state;
    const int64_t s[4] = {1, 2, 24, 8}, ls[3] = {1, 2, 24}, n = 1 << 16;
    ta_tensor block, q, k, v, o, lse, view;
    TA_CHECK_OK(ta_tensor_full(&block, 1, &n, 3.0f));
    TA_CHECK_OK(ta_tensor_empty(&q, 4, s));
    TA_CHECK_OK(ta_randn(&q, 1));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, s));
    TA_CHECK_OK(ta_randn(&k, 2));
    TA_CHECK_OK(ta_tensor_empty(&v, 4, s));
    TA_CHECK_OK(ta_randn(&v, 3));
    TA_CHECK_OK(ta_tensor_full(&o, 4, s, 7.0f));
    TA_CHECK_OK(ta_tensor_empty(&lse, 3, ls));
    const ta_workspace ws = {block.data, (size_t)n * sizeof(float)};
    /* an input inside the workspace: refused, the input and O untouched */
    TA_CHECK_OK(ta_tensor_from_buffer(&view, (float *)block.data + 1000, 4, s, NULL));
    TA_CHECK_OK(ta_tensor_copy(&view, &k));
    ta_sdpa_opts opts = {.workspace = ws, .lse = &lse};
    TA_CHECK_ERR(ta_sdpa(&o, &q, &view, &v, &opts), TA_EINVAL, "the workspace overlaps K");
    assert_memory_equal(view.data, k.data, sizeof(float) * (size_t)ta_tensor_numel(&k));
    for (int64_t i = 0; i < ta_tensor_numel(&o); i++) assert_true(((float *)o.data)[i] == 7.0f);
    /* O inside it */
    TA_CHECK_ERR(ta_sdpa(&view, &q, &k, &v, &opts), TA_EINVAL, "the workspace overlaps O");
    opts.workspace = (ta_workspace){0};
    TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &opts));
    /* the backward: dK inside it */
    ta_tensor dq, dv;
    TA_CHECK_OK(ta_tensor_empty(&dq, 4, s));
    TA_CHECK_OK(ta_tensor_empty(&dv, 4, s));
    ta_sdpa_opts bo = {.workspace = ws};
    TA_CHECK_ERR(ta_sdpa_backward(&dq, &view, &dv, &o, &q, &k, &v, &o, &lse, &bo), TA_EINVAL,
                 "the workspace overlaps dK");
    assert_memory_equal(view.data, k.data, sizeof(float) * (size_t)ta_tensor_numel(&k));
    /* a KV cache inside it: the cache untouched */
    const int64_t qs[4] = {1, 1, 2, 8}, cs[4] = {1, 24, 2, 8};
    ta_tensor q1, o1, kc, vc;
    TA_CHECK_OK(ta_tensor_empty(&q1, 4, qs));
    TA_CHECK_OK(ta_randn(&q1, 4));
    TA_CHECK_OK(ta_tensor_full(&o1, 4, qs, 7.0f));
    TA_CHECK_OK(ta_tensor_from_buffer(&kc, (float *)block.data + 5000, 4, cs, NULL));
    TA_CHECK_OK(ta_tensor_empty(&vc, 4, cs));
    TA_CHECK_OK(ta_randn(&vc, 5));
    const int32_t seqlens[1] = {10};
    ta_kv_cache cache = {.k = &kc, .v = &vc, .seqlens = seqlens};
    ta_sdpa_opts ko = {.workspace = ws};
    TA_CHECK_ERR(ta_sdpa_kvcache(&o1, &q1, &cache, NULL, NULL, &ko), TA_EINVAL,
                 "the workspace overlaps cache->k");
    for (int64_t i = 0; i < ta_tensor_numel(&kc); i++) assert_true(((float *)kc.data)[i] == 3.0f);
    for (int64_t i = 0; i < ta_tensor_numel(&o1); i++) assert_true(((float *)o1.data)[i] == 7.0f);
    /* einsum: an operand inside it */
    const int64_t ss[4] = {1, 2, 24, 24};
    ta_tensor scores;
    TA_CHECK_OK(ta_tensor_empty(&scores, 4, ss));
    TA_CHECK_ERR(ta_einsum_ext(&scores, "bhid,bhjd->bhij", &q, &view, &ws), TA_EINVAL,
                 "the workspace overlaps b");
    assert_memory_equal(view.data, k.data, sizeof(float) * (size_t)ta_tensor_numel(&k));
    ta_tensor *all[10] = {&block, &q, &k, &v, &o, &lse, &dq, &dv, &q1, &o1};
    for (int i = 0; i < 10; i++) ta_tensor_free(all[i]);
    ta_tensor_free(&vc);
    ta_tensor_free(&scores);
}

/* The arguments that are no tensors are read while the call runs, after its scratch is
 * written: key lengths, varlen offsets, a KV cache's seqlens and block table inside the
 * workspace are refused too (before, a block table there was overwritten by the scratch
 * and read as block indices: a segfault; key lengths gave a wrong O with TA_OK). */
static void test_workspace_overlapping_an_array(void **state)
{
    (void)state;
    const int64_t s[4] = {2, 2, 24, 8}, n = 1 << 16;
    ta_tensor block, q, k, v, o;
    TA_CHECK_OK(ta_tensor_zeros(&block, 1, &n));
    TA_CHECK_OK(ta_tensor_empty(&q, 4, s));
    TA_CHECK_OK(ta_randn(&q, 1));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, s));
    TA_CHECK_OK(ta_randn(&k, 2));
    TA_CHECK_OK(ta_tensor_empty(&v, 4, s));
    TA_CHECK_OK(ta_randn(&v, 3));
    TA_CHECK_OK(ta_tensor_full(&o, 4, s, 7.0f));
    const ta_workspace ws = {block.data, (size_t)n * sizeof(float)};
    unsigned char *at = (unsigned char *)block.data + 64;
    /* key lengths */
    int64_t *kl = (int64_t *)(void *)at;
    kl[0] = 5;
    kl[1] = 9;
    ta_sdpa_opts opts = {.workspace = ws, .key_lengths = kl};
    TA_CHECK_ERR(ta_sdpa(&o, &q, &k, &v, &opts), TA_EINVAL,
                 "the workspace overlaps opts->key_lengths");
    for (int64_t i = 0; i < ta_tensor_numel(&o); i++) assert_true(((float *)o.data)[i] == 7.0f);
    ta_tensor dq, dk, dv, lse;
    const int64_t ls[3] = {2, 2, 24};
    TA_CHECK_OK(ta_tensor_empty(&dq, 4, s));
    TA_CHECK_OK(ta_tensor_empty(&dk, 4, s));
    TA_CHECK_OK(ta_tensor_empty(&dv, 4, s));
    TA_CHECK_OK(ta_tensor_zeros(&lse, 3, ls));
    TA_CHECK_ERR(ta_sdpa_backward(&dq, &dk, &dv, &o, &q, &k, &v, &o, &lse, &opts), TA_EINVAL,
                 "the workspace overlaps opts->key_lengths");
    /* varlen offsets: two sequences of 12 rows, Q [24, 2, 8] */
    const int64_t ps[3] = {24, 2, 8};
    ta_tensor pq, pk, pv, po;
    TA_CHECK_OK(ta_tensor_from_buffer(&pq, q.data, 3, ps, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&pk, k.data, 3, ps, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&pv, v.data, 3, ps, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&po, o.data, 3, ps, NULL));
    int32_t *cu = (int32_t *)(void *)at;
    cu[0] = 0;
    cu[1] = 12;
    cu[2] = 24;
    const int32_t cu_ok[3] = {0, 12, 24};
    ta_sdpa_opts vo = {.workspace = ws, .cu_seqlens_q = cu, .cu_seqlens_k = cu_ok, .num_seqs = 2};
    TA_CHECK_ERR(ta_sdpa(&po, &pq, &pk, &pv, &vo), TA_EINVAL,
                 "the workspace overlaps opts->cu_seqlens_q");
    vo.cu_seqlens_q = cu_ok;
    vo.cu_seqlens_k = cu;
    TA_CHECK_ERR(ta_sdpa(&po, &pq, &pk, &pv, &vo), TA_EINVAL,
                 "the workspace overlaps opts->cu_seqlens_k");
    for (int64_t i = 0; i < ta_tensor_numel(&o); i++) assert_true(((float *)o.data)[i] == 7.0f);
    /* a paged KV cache: seqlens, then the block table inside the workspace */
    const int64_t qs[4] = {2, 1, 2, 8}, cs[4] = {4, 16, 2, 8};
    ta_tensor q1, o1, kc, vc;
    TA_CHECK_OK(ta_tensor_empty(&q1, 4, qs));
    TA_CHECK_OK(ta_randn(&q1, 4));
    TA_CHECK_OK(ta_tensor_full(&o1, 4, qs, 7.0f));
    TA_CHECK_OK(ta_tensor_empty(&kc, 4, cs));
    TA_CHECK_OK(ta_randn(&kc, 5));
    TA_CHECK_OK(ta_tensor_empty(&vc, 4, cs));
    TA_CHECK_OK(ta_randn(&vc, 6));
    const int32_t table_ok[4] = {3, 1, 0, 2}, seqlens_ok[2] = {20, 12};
    int32_t *table = (int32_t *)(void *)at, *seqlens = (int32_t *)(void *)(at + 64);
    memcpy(table, table_ok, sizeof table_ok);
    memcpy(seqlens, seqlens_ok, sizeof seqlens_ok);
    ta_kv_cache cache = {.k = &kc, .v = &vc, .seqlens = seqlens, .block_table = table_ok,
                         .max_blocks = 2};
    ta_sdpa_opts ko = {.workspace = ws};
    TA_CHECK_ERR(ta_sdpa_kvcache(&o1, &q1, &cache, NULL, NULL, &ko), TA_EINVAL,
                 "the workspace overlaps cache->seqlens");
    cache.seqlens = seqlens_ok;
    cache.block_table = table;
    TA_CHECK_ERR(ta_sdpa_kvcache(&o1, &q1, &cache, NULL, NULL, &ko), TA_EINVAL,
                 "the workspace overlaps cache->block_table");
    for (int64_t i = 0; i < ta_tensor_numel(&o1); i++) assert_true(((float *)o1.data)[i] == 7.0f);
    /* apart from the workspace, the same calls run */
    cache.block_table = table_ok;
    TA_CHECK_OK(ta_sdpa_kvcache(&o1, &q1, &cache, NULL, NULL, &ko));
    vo.cu_seqlens_k = cu_ok;
    TA_CHECK_OK(ta_sdpa(&po, &pq, &pk, &pv, &vo));
    ta_tensor *all[12] = {&block, &q, &k, &v, &o, &dq, &dk, &dv, &lse, &q1, &o1, &kc};
    for (int i = 0; i < 12; i++) ta_tensor_free(all[i]);
    ta_tensor_free(&vc);
}

static int setup(void **state)
{
    (void)state;
    ta_test_count_allocations();
    return ta_set_num_threads(2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdpa_forward),
        cmocka_unit_test(test_sdpa_backward),
        cmocka_unit_test(test_size_follows_threads),
        cmocka_unit_test(test_scratch_that_cannot_fit),
        cmocka_unit_test(test_workspace_overlapping_a_tensor),
        cmocka_unit_test(test_workspace_overlapping_an_array),
    };
    return cmocka_run_group_tests_name("workspace", tests, setup, NULL);
}
