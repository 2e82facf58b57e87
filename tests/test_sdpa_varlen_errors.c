/* Variable-length batches (opts.cu_seqlens_q/k): hostile arguments and scratch.
 *   - Every bad argument (offsets not starting at 0, decreasing, not ending at Tq / Tk,
 *     num_seqs < 0, one offset array missing, a mask, key lengths or weights with the
 *     offsets, packed ranks and shapes, extents, overlaps) gives one error with its
 *     message from ta_sdpa, ta_sdpa_backward and both workspace queries, and leaves every
 *     output (and the size) untouched.
 *   - With a caller workspace of the size the query gives (ending at a guard page) the
 *     calls allocate nothing and give the bits of the library's scratch; one byte less
 *     is refused before anything is written (a batch of many sequences too, which the
 *     fused forward runs together: the query covers that).
 *   - Batches of several sequences without a query row (Tq = 0) or without heads run
 *     (TA_OK, dK = dV = 0) from a fresh scratch block and with a workspace of exactly the
 *     queried size.
 *   - The fused paths' workspace bound of a batch (ta_sdpa_scratch_bound of the whole,
 *     shapes only) covers every sequence it may hold: swept over Lq' <= Tq and Lk' <= Tk,
 *     including the shapes where a shorter sequence needs more than the whole (the
 *     forward's key split, the backward's "group" plan). (The reference path sizes its
 *     workspace from the offsets: its einsums' packing does not grow monotonically.) */
#include "ta_test.h"

#include "alloc_hook.h"
#include "guard.h"
#include "core/workspace.h" /* ta_scratch_cache_release: start from no kept block */
#include "ops/sdpa.h" /* the bound and the problems it covers */
#include "varlen_batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ hostile */

static const ta_test_varlen_spec base = {
    "base", 3, {2, 0, 3}, {3, 1, 2}, 2, 1, 8, 4, TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED};

enum { FWD = 1, BWD = 2 };

typedef struct hostile {
    const char *name;
    int where;          /* FWD, BWD or both */
    ta_status code;
    const char *needle;
} hostile;

static const hostile cases[] = {
    {"cu_q starts at 1", FWD | BWD, TA_EINVAL, "cu_seqlens_q[0] = 1; offsets start at 0"},
    {"cu_k starts at -1", FWD | BWD, TA_EINVAL, "cu_seqlens_k[0] = -1; offsets start at 0"},
    {"cu_q decreases", FWD | BWD, TA_EINVAL, "cu_seqlens_q[2] = 1 is below opts->cu_seqlens_q[1] = 2"},
    {"cu_q ends before Tq", FWD | BWD, TA_EINVAL, "cu_seqlens_q[3] = 4 but Q has Tq = 5 rows"},
    {"cu_k ends after Tk", FWD | BWD, TA_EINVAL, "cu_seqlens_k[3] = 7 but K has Tk = 6 rows"},
    {"num_seqs < 0", FWD | BWD, TA_EINVAL, "opts->num_seqs = -1 must be >= 0"},
    {"cu_k missing", FWD | BWD, TA_EINVAL, "opts->cu_seqlens_k is NULL but opts->cu_seqlens_q is set"},
    {"cu_q missing", FWD | BWD, TA_EINVAL, "opts->cu_seqlens_q is NULL but opts->cu_seqlens_k is set"},
    {"num_seqs alone", FWD | BWD, TA_EINVAL, "opts->num_seqs = 3 but opts->cu_seqlens_q and"},
    {"mask", FWD | BWD, TA_EINVAL, "opts->mask does not combine with opts->cu_seqlens_q/k"},
    {"key lengths", FWD | BWD, TA_EINVAL, "opts->key_lengths does not combine"},
    {"weights", FWD | BWD, TA_EINVAL, "opts->weights does not combine"},
    {"Q of rank 4", FWD | BWD, TA_ESHAPE, "Q must have 3 dims [Tq, H, D] with opts->cu_seqlens_q/k"},
    {"O of another Dv", FWD | BWD, TA_ESHAPE, "O has shape [5, 2, 3], expected [Tq, H, Dv] = [5, 2, 4]"},
    {"lse transposed", FWD | BWD, TA_ESHAPE, "lse has shape [5, 2], expected [H, Tq] = [2, 5]"},
    {"K of another head_dim", FWD | BWD, TA_ESHAPE, "K has head_dim 6 but Q has 8"},
    {"H % Hkv", FWD | BWD, TA_ESHAPE, "Q has 2 heads, not a multiple of the 3 heads"},
    {"NaN scale", FWD | BWD, TA_EINVAL, "opts->scale must be finite"},
    {"O overlaps Q", FWD, TA_EINVAL, "O overlaps Q"},
    {"dQ overlaps Q", BWD, TA_EINVAL, "dQ overlaps Q"},
    {"dK of another Tk", BWD, TA_ESHAPE, "dK has shape [5, 1, 8], expected [Tk, Hkv, D] = [6, 1, 8]"},
    {"opts->lse in the backward", BWD, TA_EINVAL, "opts->lse must be NULL"},
    /* ALiBi slopes [num_seqs, H]: the whole tensor is checked, not each sequence's row */
    {"slopes' row 1 in O", FWD, TA_EINVAL, "O overlaps opts->alibi_slopes"},
    {"slopes' row 1 in dQ", BWD, TA_EINVAL, "dQ overlaps opts->alibi_slopes"},
    {"slopes of float16", FWD | BWD, TA_EINVAL, "opts->alibi_slopes has dtype"},
};

/* The arguments of one call, made hostile as case k says. */
typedef struct call {
    ta_test_varlen_batch b;
    int32_t cq[4], ck[4];
    ta_tensor mask, q4, o3, lt, k6, k3, v3, dk5, extra_lse, big, in_big, slopes, slopes16;
    int64_t klen[3];
    ta_tensor *q, *k, *v, *o, *lse, *dq, *dk;
    ta_sdpa_opts opts;
} call;

static void make_call(call *c, int k)
{
    memset(c, 0, sizeof *c);
    ta_test_varlen_make(&c->b, &base, 5);
    ta_test_varlen_batch *b = &c->b;
    memcpy(c->cq, b->cq, sizeof c->cq);
    memcpy(c->ck, b->ck, sizeof c->ck);
    c->opts = b->opts;
    c->opts.cu_seqlens_q = c->cq;
    c->opts.cu_seqlens_k = c->ck;
    c->q = &b->q, c->k = &b->k, c->v = &b->v, c->o = &b->o, c->lse = &b->lse;
    c->dq = &b->dq, c->dk = &b->dk;
    const int64_t m[2] = {5, 6}, q4[4] = {1, 5, 2, 8}, o3[3] = {5, 2, 3}, lt[2] = {5, 2};
    const int64_t k6[3] = {6, 1, 6}, k3[3] = {6, 3, 8}, v3[3] = {6, 3, 4}, dk5[3] = {5, 1, 8};
    const char *name = cases[k].name;
    if (!strcmp(name, "cu_q starts at 1")) c->cq[0] = 1;
    if (!strcmp(name, "cu_k starts at -1")) c->ck[0] = -1;
    if (!strcmp(name, "cu_q decreases")) c->cq[2] = 1;
    if (!strcmp(name, "cu_q ends before Tq")) c->cq[3] = 4;
    if (!strcmp(name, "cu_k ends after Tk")) c->ck[3] = 7;
    if (!strcmp(name, "num_seqs < 0")) c->opts.num_seqs = -1;
    if (!strcmp(name, "cu_k missing")) c->opts.cu_seqlens_k = NULL;
    if (!strcmp(name, "cu_q missing")) c->opts.cu_seqlens_q = NULL;
    if (!strcmp(name, "num_seqs alone")) c->opts.cu_seqlens_q = c->opts.cu_seqlens_k = NULL;
    if (!strcmp(name, "mask")) {
        TA_CHECK_OK(ta_tensor_ones(&c->mask, 2, m));
        c->opts.mask = &c->mask;
    }
    if (!strcmp(name, "key lengths")) c->opts.key_lengths = c->klen;
    if (!strcmp(name, "weights")) c->opts.weights = &b->dq; /* any tensor: refused first */
    if (!strcmp(name, "Q of rank 4")) TA_CHECK_OK(ta_tensor_zeros(c->q = &c->q4, 4, q4));
    if (!strcmp(name, "O of another Dv")) TA_CHECK_OK(ta_tensor_zeros(c->o = &c->o3, 3, o3));
    if (!strcmp(name, "lse transposed")) TA_CHECK_OK(ta_tensor_zeros(c->lse = &c->lt, 2, lt));
    if (!strcmp(name, "K of another head_dim")) TA_CHECK_OK(ta_tensor_zeros(c->k = &c->k6, 3, k6));
    if (!strcmp(name, "H % Hkv")) {
        TA_CHECK_OK(ta_tensor_zeros(c->k = &c->k3, 3, k3));
        TA_CHECK_OK(ta_tensor_zeros(c->v = &c->v3, 3, v3));
    }
    if (!strcmp(name, "NaN scale")) c->opts.scale = NAN;
    if (!strcmp(name, "O overlaps Q")) TA_CHECK_OK(ta_tensor_slice(c->o = &c->o3, &b->q, 2, 0, 4, 1));
    if (!strcmp(name, "dQ overlaps Q")) c->dq = &b->q;
    if (!strcmp(name, "dK of another Tk")) TA_CHECK_OK(ta_tensor_zeros(c->dk = &c->dk5, 3, dk5));
    /* slopes [3, 2] with rows 20 floats apart in a buffer of 128: row 0 at float 0, row
     * 1 at 20, inside an output placed at float 16 */
    if (!strncmp(name, "slopes' row 1 in", 16)) {
        const int64_t n = 128, sl[2] = {3, 2}, st[2] = {20, 1};
        TA_CHECK_OK(ta_tensor_zeros(&c->big, 1, &n));
        float *at = (float *)c->big.data + 16;
        const bool fwd = !strcmp(name, "slopes' row 1 in O");
        const ta_tensor *like = fwd ? &b->o : &b->dq;
        TA_CHECK_OK(ta_tensor_from_buffer(&c->in_big, at, like->ndim, like->shape, NULL));
        if (fwd) c->o = &c->in_big;
        else c->dq = &c->in_big;
        TA_CHECK_OK(ta_tensor_from_buffer(&c->slopes, c->big.data, 2, sl, st));
        c->opts.alibi_slopes = &c->slopes;
    }
    if (!strcmp(name, "slopes of float16")) {
        const int64_t sl[2] = {3, 2};
        TA_CHECK_OK(ta_tensor_zeros_dtype(&c->slopes16, TA_F16, 2, sl));
        c->opts.alibi_slopes = &c->slopes16;
    }
    if (!strcmp(name, "opts->lse in the backward")) {
        TA_CHECK_OK(ta_tensor_zeros(&c->extra_lse, 2, lt));
        c->opts.lse = &c->extra_lse;
    }
    /* the outputs hold a pattern a failed call must leave */
    ta_tensor *outs[] = {&b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    for (int i = 0; i < 5; i++) TA_CHECK_OK(ta_tensor_fill(outs[i], 7.0f));
}

static void free_call(call *c)
{
    ta_tensor *all[] = {&c->mask, &c->q4, &c->lt, &c->k6, &c->k3, &c->v3, &c->dk5, &c->extra_lse,
                        &c->big, &c->slopes16};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    if (c->o == &c->o3 && c->o3.owned) ta_tensor_free(&c->o3);
    ta_test_varlen_free(&c->b);
}

static void expect_untouched(const call *c, const char *name, const char *fn)
{
    const ta_tensor *outs[] = {&c->b.o, &c->b.lse, &c->b.dq, &c->b.dk, &c->b.dv};
    for (int i = 0; i < 5; i++) {
        double *x = ta_test_to_f64(outs[i]);
        for (int64_t e = 0; e < ta_tensor_numel(outs[i]); e++)
            if (x[e] != 7.0) fail_msg("%s, %s: output %d element %lld written", name, fn, i, (long long)e);
        free(x);
    }
}

static void test_hostile_arguments(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const hostile *h = &cases[k];
        for (int entry = 0; entry < 4; entry++) {
            int bwd = entry >= 2, query = entry % 2;
            if (!(h->where & (bwd ? BWD : FWD))) continue;
            call c;
            make_call(&c, (int)k);
            ta_test_varlen_batch *b = &c.b;
            size_t bytes = 12345;
            ta_sdpa_opts o = c.opts;
            ta_status st;
            const char *fn;
            if (!bwd) {
                if (c.lse != &b->lse) o.lse = c.lse;
                fn = query ? "ta_sdpa_workspace_size" : "ta_sdpa";
                st = query ? ta_sdpa_workspace_size(&bytes, c.o, c.q, c.k, c.v, &o)
                           : ta_sdpa(c.o, c.q, c.k, c.v, &o);
            } else {
                if (strcmp(h->name, "opts->lse in the backward")) o.lse = NULL;
                fn = query ? "ta_sdpa_backward_workspace_size" : "ta_sdpa_backward";
                st = query ? ta_sdpa_backward_workspace_size(&bytes, c.dq, c.dk, &b->dv, &b->dout,
                                                             c.q, c.k, c.v, c.o, c.lse, &o)
                           : ta_sdpa_backward(c.dq, c.dk, &b->dv, &b->dout, c.q, c.k, c.v, c.o,
                                              c.lse, &o);
            }
            if (st != h->code || !strstr(ta_last_error(), h->needle) ||
                strncmp(ta_last_error(), fn, strlen(fn)))
                fail_msg("%s, %s: got %s '%s', expected %s with '%s'", h->name, fn,
                         ta_status_name(st), ta_last_error(), ta_status_name(h->code), h->needle);
            assert_int_equal(bytes, 12345);
            expect_untouched(&c, h->name, fn);
            free_call(&c);
        }
    }
}

/* The internal entry that the layers use takes dense problems only. */
static void test_prepare_refuses_offsets(void **state)
{
    (void)state;
    call c;
    make_call(&c, 0);
    c.cq[0] = 0;
    ta_sdpa_problem p;
    TA_CHECK_ERR(ta_sdpa_prepare(&p, "x", &c.b.o, &c.b.q, &c.b.k, &c.b.v, &c.opts,
                                 TA_SDPA_CHECK_ALL),
                 TA_EINVAL, "x: variable-length batches (opts->cu_seqlens_q/k) are not taken here");
    free_call(&c);
}

/* ---------------------------------------------------------- workspace */

static const ta_test_varlen_spec ws_specs[] = {
    {"fused, key split", 3, {1, 40, 2}, {1500, 40, 0}, 4, 2, 16, 8, TA_CAUSAL_BOTTOM_RIGHT,
     0.0f, TA_VARLEN_PACKED},
    {"fused, head-major", 4, {70, 0, 5, 9}, {64, 3, 5, 0}, 2, 2, 8, 8, TA_CAUSAL_TOP_LEFT,
     0.0f, TA_VARLEN_HEAD_MAJOR},
    /* sequences run together (ta_sdpa_forward_fused_seqs): lengths at the tiles' edges
     * (each sequence's last tile short), tiny ones that sweep, one that splits its keys */
    {"fused, many sequences together", 24,
     {1, 47, 48, 49, 95, 96, 97, 2, 0, 3, 1, 50, 1, 4, 145, 1, 2, 0, 49, 1, 3, 96, 1, 5},
     {1, 47, 48, 49, 95, 96, 97, 2, 4, 3, 1, 50, 1200, 4, 145, 1, 2, 0, 49, 9, 3, 96, 1, 5},
     6, 2, 8, 8, TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED},
};

static void test_caller_workspace(void **state)
{
    (void)state;
    for (size_t si = 0; si < sizeof ws_specs / sizeof *ws_specs; si++)
        for (int path = 0; path < 2; path++) {
            ta_sdpa_path pa = path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE;
            ta_test_varlen_batch b;
            ta_test_varlen_make(&b, &ws_specs[si], 3);
            TA_CHECK_OK(ta_test_varlen_run(&b, pa, 1));
            int64_t n;
            float *want = ta_test_varlen_outputs(&b, &n);
            ta_sdpa_opts o = b.opts;
            o.path = pa;
            size_t fb, bb;
            TA_CHECK_OK(ta_sdpa_workspace_size(&fb, &b.o, &b.q, &b.k, &b.v, &o));
            o.lse = NULL;
            TA_CHECK_OK(ta_sdpa_backward_workspace_size(&bb, &b.dq, &b.dk, &b.dv, &b.dout, &b.q,
                                                        &b.k, &b.v, &b.o, &b.lse, &o));
            assert_true(fb > 0 && bb > 0);
            ta_tensor *outs[] = {&b.o, &b.lse, &b.dq, &b.dk, &b.dv};
            /* one byte short: refused, nothing written */
            ta_guard g1 = {0}, g2 = {0};
            for (int i = 0; i < 5; i++) TA_CHECK_OK(ta_tensor_fill(outs[i], 7.0f));
            o = b.opts;
            o.path = pa;
            o.workspace = ta_guard_workspace(&g1, fb - 1, 0);
            TA_CHECK_ERR(ta_sdpa(&b.o, &b.q, &b.k, &b.v, &o), TA_EINVAL, "the workspace has");
            o.lse = NULL;
            o.workspace = ta_guard_workspace(&g2, bb - 1, 0);
            TA_CHECK_ERR(ta_sdpa_backward(&b.dq, &b.dk, &b.dv, &b.dout, &b.q, &b.k, &b.v, &b.o,
                                          &b.lse, &o),
                         TA_EINVAL, "the workspace has");
            for (int i = 0; i < 5; i++) {
                double *x = ta_test_to_f64(outs[i]);
                for (int64_t e = 0; e < ta_tensor_numel(outs[i]); e++) assert_true(x[e] == 7.0);
                free(x);
            }
            ta_guard_release(&g1);
            ta_guard_release(&g2);
            /* the exact size: no allocation, the same bits */
            for (size_t skew = 0; skew < 64; skew += 37) {
                o = b.opts;
                o.path = pa;
                o.workspace = ta_guard_workspace(&g1, fb, skew);
                ta_test_count_allocations();
                TA_CHECK_OK(ta_sdpa(&b.o, &b.q, &b.k, &b.v, &o));
                o.lse = NULL;
                o.workspace = ta_guard_workspace(&g2, bb, skew);
                TA_CHECK_OK(ta_sdpa_backward(&b.dq, &b.dk, &b.dv, &b.dout, &b.q, &b.k, &b.v,
                                             &b.o, &b.lse, &o));
                long allocs = ta_test_alloc_count;
                ta_test_stop_counting();
                if (allocs) fail_msg("%s: %ld allocations with a workspace", ws_specs[si].name, allocs);
                float *got = ta_test_varlen_outputs(&b, &n);
                assert_memory_equal(got, want, sizeof(float) * (size_t)n);
                free(got);
                ta_guard_release(&g1);
                ta_guard_release(&g2);
            }
            free(want);
            ta_test_varlen_free(&b);
        }
}

/* Batches of two or more sequences without a query row anywhere (Tq = 0; keys or not), or
 * without heads (H = Hkv = 0): nothing to attend, so ta_sdpa returns TA_OK with its
 * outputs empty and ta_sdpa_backward gives dK = dV = 0 (keys that no query sees), on the
 * fused paths and 1 or 2 threads, both from no kept scratch block and with a workspace of
 * exactly the queried size (ending at a guard page, no allocation). Until session 35 the
 * fused forward (Tq = 0) and the fused backward (no heads) took such sequences as a batch
 * to run together, whose head (plans, work lists) their size plans had not counted for a
 * batch without rows: TA_EINTERNAL "scratch smaller than planned" whenever the block was
 * exactly the planned size (a caller's workspace, the first call of a process). */
static const ta_test_varlen_spec no_query_specs[] = {
    {"no query, keys", 3, {0, 0, 0}, {3, 0, 5}, 4, 2, 37, 37, TA_CAUSAL_TOP_LEFT, 0.0f,
     TA_VARLEN_PACKED},
    {"no query, no key", 2, {0, 0}, {0, 0}, 2, 1, 16, 8, TA_CAUSAL_NONE, 0.0f, TA_VARLEN_PACKED},
    {"no heads", 3, {2, 0, 3}, {3, 1, 2}, 0, 0, 8, 4, TA_CAUSAL_BOTTOM_RIGHT, 0.0f,
     TA_VARLEN_PACKED},
};

static void expect_zeros(const ta_tensor *t, const char *what, const char *name)
{
    double *x = ta_test_to_f64(t);
    for (int64_t e = 0; e < ta_tensor_numel(t); e++)
        if (x[e] != 0.0) fail_msg("%s: %s[%lld] = %g, not 0", name, what, (long long)e, x[e]);
    free(x);
}

static void test_batch_without_rows(void **state)
{
    (void)state;
    const int saved = ta_get_num_threads();
    for (size_t si = 0; si < sizeof no_query_specs / sizeof *no_query_specs; si++)
        for (int nt = 1; nt <= 2; nt++)
            for (int path = 0; path < 2; path++) {
                const char *name = no_query_specs[si].name;
                TA_CHECK_OK(ta_set_num_threads(nt));
                ta_test_varlen_batch b;
                ta_test_varlen_make(&b, &no_query_specs[si], 9);
                assert_true(b.Tq == 0 || no_query_specs[si].H == 0);
                ta_sdpa_opts o = b.opts;
                o.path = path ? TA_SDPA_FUSED : TA_SDPA_AUTO;
                for (int ws = 0; ws < 2; ws++) {
                    ta_guard g = {0}, g2 = {0};
                    ta_sdpa_opts fo = o, bo = o;
                    bo.lse = NULL;
                    if (ws) { /* exactly the queried sizes, nothing allocated */
                        size_t fb, bb;
                        TA_CHECK_OK(ta_sdpa_workspace_size(&fb, &b.o, &b.q, &b.k, &b.v, &fo));
                        TA_CHECK_OK(ta_sdpa_backward_workspace_size(&bb, &b.dq, &b.dk, &b.dv,
                                                                    &b.dout, &b.q, &b.k, &b.v,
                                                                    &b.o, &b.lse, &bo));
                        fo.workspace = ta_guard_workspace(&g, fb, 0);
                        bo.workspace = ta_guard_workspace(&g2, bb, 0);
                        assert_non_null(fo.workspace.data);
                        assert_non_null(bo.workspace.data);
                        ta_test_count_allocations();
                    } else {
                        ta_scratch_cache_release(); /* a fresh block of the planned size */
                    }
                    ta_status st = ta_sdpa(&b.o, &b.q, &b.k, &b.v, &fo);
                    if (ws) ta_test_stop_counting();
                    if (ws && ta_test_alloc_count)
                        fail_msg("%s: %ld allocations with a workspace", name, ta_test_alloc_count);
                    if (st != TA_OK)
                        fail_msg("%s, %s, %d threads%s: ta_sdpa gave %s: %s", name,
                                 path ? "fused" : "auto", nt, ws ? ", workspace" : "",
                                 ta_status_name(st), ta_last_error());
                    if (!ws) ta_scratch_cache_release();
                    TA_CHECK_OK(ta_tensor_fill(&b.dk, NAN));
                    TA_CHECK_OK(ta_tensor_fill(&b.dv, NAN));
                    if (ws) ta_test_count_allocations();
                    TA_CHECK_OK(ta_sdpa_backward(&b.dq, &b.dk, &b.dv, &b.dout, &b.q, &b.k, &b.v,
                                                 &b.o, &b.lse, &bo));
                    if (ws) ta_test_stop_counting();
                    if (ws && ta_test_alloc_count)
                        fail_msg("%s: %ld allocations with a workspace", name, ta_test_alloc_count);
                    ta_guard_release(&g);
                    ta_guard_release(&g2);
                    expect_zeros(&b.dk, "dK", name);
                    expect_zeros(&b.dv, "dV", name);
                }
                ta_test_varlen_free(&b);
            }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* ------------------------------------------------------------- bound */

/* [1, Hx, T, X] strided as a packed [T, Hx, X] tensor (no data: shapes only). */
static ta_tensor tokens(int64_t Hx, int64_t T, int64_t X)
{
    return (ta_tensor){.ndim = 4, .shape = {1, Hx, T, X}, .stride = {0, X, Hx * X, 1}};
}

typedef struct dims {
    int64_t H, Hkv, D, Dv;
} dims;

/* The problem of a sequence of Lq queries and Lk keys (a whole batch: Tq, Tk). */
static size_t scratch(const dims *d, int64_t Lq, int64_t Lk, ta_sdpa_path path, int bwd,
                      int bound)
{
    ta_tensor q = tokens(d->H, Lq, d->D), k = tokens(d->Hkv, Lk, d->D);
    ta_tensor v = tokens(d->Hkv, Lk, d->Dv), o = tokens(d->H, Lq, d->Dv);
    ta_tensor dq = q, dk = k, dv = v, dout = o;
    ta_tensor lse = {.ndim = 3, .shape = {1, d->H, Lq}, .stride = {0, Lq > 1 ? Lq : 1, 1}};
    ta_sdpa_opts opts = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .path = path, .lse = bwd ? NULL : &lse};
    ta_sdpa_problem p;
    if (bwd)
        TA_CHECK_OK(ta_sdpa_prepare_backward(&p, "sweep", &dq, &dk, &dv, &dout, &q, &k, &v, &o,
                                             &lse, &opts, TA_SDPA_SHAPES_ONLY));
    else
        TA_CHECK_OK(ta_sdpa_prepare(&p, "sweep", &o, &q, &k, &v, &opts, TA_SDPA_SHAPES_ONLY));
    return bound ? ta_sdpa_scratch_bound(&p) : ta_sdpa_scratch_bytes(&p);
}

/* Sequence lengths worth trying up to T: small ones, tile and chunk edges, T's own. */
static int lengths(int64_t *out, int64_t T, int step)
{
    static const int64_t edges[] = {63, 64, 65, 127, 128, 1023, 1024, 1025, 2047, 2048, 4095,
                                    4096, 4097, 32255, 32256, 32767, 32768, 32769};
    int n = 0;
    for (int64_t l = 0; l <= T && l <= 200; l += step) out[n++] = l;
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        if (edges[i] <= T) out[n++] = edges[i];
    out[n++] = T / 2;
    out[n++] = T - 1 > 0 ? T - 1 : 0;
    out[n++] = T;
    return n;
}

static void test_bound_covers_every_sequence(void **state)
{
    (void)state;
    static const struct {
        dims d;
        int64_t Tq, Tk;
    } wholes[] = {
        {{8, 8, 64, 64}, 300, 40000},   /* many tiles: a short sequence splits its keys */
        {{4, 1, 128, 128}, 1000, 3000},
        {{32, 8, 128, 128}, 64, 5000},
        {{2, 2, 8, 8}, 50, 50},
        {{1, 1, 256, 256}, 5000, 5000}, /* dQ too large for plan "group"; shorter is not */
    };
    const int saved = ta_get_num_threads();
    int beyond_whole = 0; /* sequences that need more than the whole problem itself */
    int64_t lq[300], lk[300];
    for (int nt = 1; nt <= 4; nt += 3) {
        TA_CHECK_OK(ta_set_num_threads(nt));
        for (size_t w = 0; w < sizeof wholes / sizeof *wholes; w++)
            for (int bwd = 0; bwd < 2; bwd++) {
                const dims *d = &wholes[w].d;
                const ta_sdpa_path path = TA_SDPA_FUSED;
                size_t bound = scratch(d, wholes[w].Tq, wholes[w].Tk, path, bwd, 1);
                size_t own = scratch(d, wholes[w].Tq, wholes[w].Tk, path, bwd, 0);
                assert_true(bound >= own);
                int nq = lengths(lq, wholes[w].Tq, 1);
                int nk = lengths(lk, wholes[w].Tk, 50);
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < nk; j++) {
                        size_t need = scratch(d, lq[i], lk[j], path, bwd, 0);
                        beyond_whole += need > own;
                        if (need > bound)
                            fail_msg("fused %s, whole Lq %lld Lk %lld (H %lld Hkv %lld D %lld): a "
                                     "sequence of Lq %lld Lk %lld needs %zu > bound %zu",
                                     bwd ? "backward" : "forward",
                                     (long long)wholes[w].Tq, (long long)wholes[w].Tk,
                                     (long long)d->H, (long long)d->Hkv, (long long)d->D,
                                     (long long)lq[i], (long long)lk[j], need, bound);
                    }
            }
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
    /* the bound is not the whole's own scratch: the sweep reaches the shapes that say so */
    assert_true(beyond_whole > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_arguments),
        cmocka_unit_test(test_prepare_refuses_offsets),
        cmocka_unit_test(test_caller_workspace),
        cmocka_unit_test(test_batch_without_rows),
        cmocka_unit_test(test_bound_covers_every_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
