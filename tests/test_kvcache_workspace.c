/* ta-test: all-isas -- ta_sdpa_kvcache as a generation loop uses it. One workspace, sized
 * once by ta_sdpa_kvcache_workspace_size, serves 100 decode steps (20 on the slow
 * reference path) in which every sequence grows by a key (its size depends on the shapes and the cache's capacity, not on the
 * lengths), and the steps make no allocation at all (counted through the allocation
 * hook), on both paths and both cache kinds; the workspace ends at a guard page, so a
 * step that needs more than the query measured crashes. O and LSE (of every 9th step and
 * the last) are checked against the float64 oracle of tests/support/sdpa_oracle.h on the keys the test
 * gathers itself from the final cache (keys never move once written). Rows of the cache
 * that hold no key are NaN and block-table entries past the blocks in use are -1: neither
 * may be read. The same calls give bitwise identical results on 1, 2 and 3 threads, and a
 * batch the bits of each of its sequences run alone (which the fused forward runs in one
 * parallel region). */
#include "ta_test.h"

#include "alloc_hook.h"
#include "guard.h"
#include "sdpa_oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXB 4

/* A generation: caches, and q, k_new, v_new, O, LSE for every step (a leading step dim). */
typedef struct gen {
    int64_t B, H, Hkv, D, Dv, cap, bs, steps, Lq; /* bs 0: a contiguous cache */
    int32_t len0[MAXB], seqlens[MAXB];
    ta_tensor kc, vc, kc0, vc0;  /* the cache, and its state before the steps */
    int32_t *table;
    int64_t max_blocks, nblocks;
    ta_tensor q, kn, vn, o, lse; /* [steps, B, Lq, H|Hkv, D|Dv], lse [steps, B, H, Lq] */
} gen;

/* Position p of sequence b in cache c: its [Hkv, X] row. */
static float *row(const gen *g, const ta_tensor *c, int64_t b, int64_t p)
{
    const int64_t X = c->shape[3];
    const int64_t r = g->bs ? g->table[b * g->max_blocks + p / g->bs] * g->bs + p % g->bs
                            : b * g->cap + p;
    return (float *)c->data + r * g->Hkv * X;
}

static void make(gen *g, uint64_t seed)
{
    const int64_t B = g->B, Hkv = g->Hkv, S = g->steps, Lq = g->Lq;
    if (g->bs) { /* each sequence's blocks drawn from a shuffled list; the rest -1 */
        g->max_blocks = g->cap / g->bs;
        g->nblocks = B * g->max_blocks + 3;
        int32_t *perm = malloc(sizeof(int32_t) * (size_t)g->nblocks);
        g->table = malloc(sizeof(int32_t) * (size_t)(B * g->max_blocks));
        assert_true(perm && g->table);
        for (int64_t i = 0; i < g->nblocks; i++) perm[i] = (int32_t)i;
        uint64_t x = seed * 2654435761u + 1;
        for (int64_t i = g->nblocks - 1; i > 0; i--) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            int64_t j = (int64_t)((x >> 33) % (uint64_t)(i + 1));
            int32_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int64_t b = 0; b < B; b++) {
            const int64_t used = (g->len0[b] + S * Lq + g->bs - 1) / g->bs;
            for (int64_t u = 0; u < g->max_blocks; u++)
                g->table[b * g->max_blocks + u] = u < used ? perm[b * g->max_blocks + u] : -1;
        }
        free(perm);
    }
    const int64_t lead0 = g->bs ? g->nblocks : B, lead1 = g->bs ? g->bs : g->cap;
    const int64_t ks[4] = {lead0, lead1, Hkv, g->D}, vs[4] = {lead0, lead1, Hkv, g->Dv};
    TA_CHECK_OK(ta_tensor_full(&g->kc0, 4, ks, NAN));
    TA_CHECK_OK(ta_tensor_full(&g->vc0, 4, vs, NAN));
    ta_tensor r;
    const int64_t rs[2] = {Hkv, g->D + g->Dv};
    TA_CHECK_OK(ta_tensor_empty(&r, 2, rs));
    for (int64_t b = 0; b < B; b++)
        for (int64_t p = 0; p < g->len0[b]; p++) {
            TA_CHECK_OK(ta_randn(&r, seed + (uint64_t)(b * g->cap + p)));
            for (int64_t h = 0; h < Hkv; h++) {
                memcpy(row(g, &g->kc0, b, p) + h * g->D, (float *)r.data + h * rs[1], sizeof(float) * (size_t)g->D);
                memcpy(row(g, &g->vc0, b, p) + h * g->Dv, (float *)r.data + h * rs[1] + g->D, sizeof(float) * (size_t)g->Dv);
            }
        }
    ta_tensor_free(&r);
    TA_CHECK_OK(ta_tensor_contiguous(&g->kc, &g->kc0));
    TA_CHECK_OK(ta_tensor_contiguous(&g->vc, &g->vc0));
    const int64_t qs[5] = {S, B, Lq, g->H, g->D}, ns[5] = {S, B, Lq, Hkv, g->D};
    const int64_t nvs[5] = {S, B, Lq, Hkv, g->Dv}, os[5] = {S, B, Lq, g->H, g->Dv};
    const int64_t ls[4] = {S, B, g->H, Lq};
    TA_CHECK_OK(ta_tensor_empty(&g->q, 5, qs));
    TA_CHECK_OK(ta_tensor_empty(&g->kn, 5, ns));
    TA_CHECK_OK(ta_tensor_empty(&g->vn, 5, nvs));
    TA_CHECK_OK(ta_tensor_full(&g->o, 5, os, 9.0f));
    TA_CHECK_OK(ta_tensor_full(&g->lse, 4, ls, 9.0f));
    TA_CHECK_OK(ta_randn(&g->q, seed + 1000001));
    TA_CHECK_OK(ta_randn(&g->kn, seed + 1000002));
    TA_CHECK_OK(ta_randn(&g->vn, seed + 1000003));
}

static void release(gen *g)
{
    ta_tensor *t[] = {&g->kc, &g->vc, &g->kc0, &g->vc0, &g->q, &g->kn, &g->vn, &g->o, &g->lse};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) ta_tensor_free(t[i]);
    free(g->table);
}

/* Step s of a tensor with a leading step dim. */
static ta_tensor at_step(const ta_tensor *t, int64_t s)
{
    ta_tensor v = {.data = (float *)t->data + s * t->stride[0], .ndim = t->ndim - 1};
    for (int d = 1; d < t->ndim; d++) {
        v.shape[d - 1] = t->shape[d];
        v.stride[d - 1] = t->stride[d];
    }
    return v;
}

/* Every step from the initial cache; *allocs gets the allocations the steps made. */
static void run(gen *g, ta_sdpa_path path, const ta_workspace *ws, long *allocs)
{
    TA_CHECK_OK(ta_tensor_copy(&g->kc, &g->kc0));
    TA_CHECK_OK(ta_tensor_copy(&g->vc, &g->vc0));
    memcpy(g->seqlens, g->len0, sizeof g->seqlens);
    ta_kv_cache cache = {.k = &g->kc, .v = &g->vc, .seqlens = g->seqlens,
                         .block_table = g->table, .max_blocks = g->max_blocks};
    ta_sdpa_opts o = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .path = path};
    if (ws) o.workspace = *ws;
    if (allocs) ta_test_count_allocations();
    for (int64_t s = 0; s < g->steps; s++) {
        ta_tensor q = at_step(&g->q, s), kn = at_step(&g->kn, s), vn = at_step(&g->vn, s);
        ta_tensor out = at_step(&g->o, s), lse = at_step(&g->lse, s);
        o.lse = &lse;
        TA_CHECK_OK(ta_sdpa_kvcache(&out, &q, &cache, &kn, &vn, &o));
        for (int64_t b = 0; b < g->B; b++) g->seqlens[b] += (int32_t)g->Lq;
    }
    if (allocs) {
        *allocs = ta_test_alloc_count;
        ta_test_stop_counting();
    }
}

/* O and LSE of every `every`-th step and the last against the oracle on keys gathered
 * from the final cache. */
static void verify(const gen *g, const char *what, int64_t every)
{
    const int64_t H = g->H, Lq = g->Lq, D = g->D, Dv = g->Dv, Hkv = g->Hkv;
    double *O = malloc(sizeof(double) * (size_t)(H * Lq * Dv)), *L = malloc(sizeof(double) * (size_t)(H * Lq));
    assert_true(O && L);
    ta_sdpa_opts op = {.causal = TA_CAUSAL_BOTTOM_RIGHT};
    for (int64_t s = 0; s < g->steps; s++)
        for (int64_t b = 0; b < g->B && (s % every == 0 || s == g->steps - 1); b++) {
            const int64_t Lk = g->len0[b] + (s + 1) * Lq;
            ta_tensor K, V;
            const int64_t ks[4] = {1, Hkv, Lk, D}, vs[4] = {1, Hkv, Lk, Dv};
            TA_CHECK_OK(ta_tensor_empty(&K, 4, ks));
            TA_CHECK_OK(ta_tensor_empty(&V, 4, vs));
            for (int64_t h = 0; h < Hkv; h++)
                for (int64_t p = 0; p < Lk; p++) {
                    memcpy((float *)K.data + (h * Lk + p) * D, row(g, &g->kc, b, p) + h * D, sizeof(float) * (size_t)D);
                    memcpy((float *)V.data + (h * Lk + p) * Dv, row(g, &g->vc, b, p) + h * Dv, sizeof(float) * (size_t)Dv);
                }
            ta_tensor qs = at_step(&g->q, s), Q = at_step(&qs, b); /* [Lq, H, D] */
            ta_tensor Qv = {.data = Q.data, .ndim = 4, .shape = {1, H, Lq, D},
                            .stride = {0, Q.stride[1], Q.stride[0], Q.stride[2]}};
            ta_test_sdpa_f64(O, NULL, L, &Qv, &K, &V, &op, 1.0 / sqrt((double)D), true);
            const float *got = (const float *)g->o.data + (s * g->B + b) * Lq * H * Dv;
            const float *got_l = (const float *)g->lse.data + (s * g->B + b) * H * Lq;
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Lq; i++) {
                    double e = fabs(got_l[h * Lq + i] - L[h * Lq + i]);
                    if (!(e <= 1e-5 * fmax(1.0, fabs(L[h * Lq + i]))))
                        fail_msg("%s: step %lld seq %lld head %lld row %lld: LSE %g, want %g", what,
                                 (long long)s, (long long)b, (long long)h, (long long)i,
                                 (double)got_l[h * Lq + i], L[h * Lq + i]);
                    for (int64_t d = 0; d < Dv; d++) {
                        double w = O[(h * Lq + i) * Dv + d], v = got[(i * H + h) * Dv + d];
                        if (!(fabs(v - w) <= 1e-5))
                            fail_msg("%s: step %lld seq %lld head %lld row %lld: O[%lld] %g, want %g",
                                     what, (long long)s, (long long)b, (long long)h, (long long)i,
                                     (long long)d, v, w);
                    }
                }
            ta_tensor_free(&K);
            ta_tensor_free(&V);
        }
    free(O);
    free(L);
}

static size_t workspace_bytes(gen *g, ta_sdpa_path path)
{
    ta_tensor q = at_step(&g->q, 0), kn = at_step(&g->kn, 0), vn = at_step(&g->vn, 0);
    ta_tensor out = at_step(&g->o, 0), lse = at_step(&g->lse, 0);
    ta_kv_cache cache = {.k = &g->kc, .v = &g->vc, .seqlens = g->len0,
                         .block_table = g->table, .max_blocks = g->max_blocks};
    ta_sdpa_opts o = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .path = path, .lse = &lse};
    size_t n;
    TA_CHECK_OK(ta_sdpa_kvcache_workspace_size(&n, &out, &q, &cache, &kn, &vn, &o));
    return n;
}

static void test_decode_steps_allocate_nothing(void **state)
{
    (void)state;
    for (int kind = 0; kind < 4; kind++) {
        const int paged = kind & 1;
        const ta_sdpa_path path = kind & 2 ? TA_SDPA_REFERENCE : TA_SDPA_AUTO;
        /* the reference path (the test oracle's twin) for 20 steps: it is slow */
        gen g = {.B = 3, .H = 8, .Hkv = 2, .D = 32, .Dv = 24, .cap = 1200, .bs = paged ? 16 : 0,
                 .steps = path == TA_SDPA_REFERENCE ? 20 : 100, .Lq = 1, .len0 = {0, 517, 1099}};
        make(&g, 11 + (uint64_t)kind);
        ta_guard guard;
        ta_workspace ws = ta_guard_workspace(&guard, workspace_bytes(&g, path), 5);
        assert_non_null(ws.data);
        long allocs;
        run(&g, path, &ws, &allocs);
        char what[64];
        snprintf(what, sizeof what, "%s cache, %s path", paged ? "paged" : "contiguous",
                 path == TA_SDPA_REFERENCE ? "reference" : "fused");
        if (allocs) fail_msg("%s: %lld decode steps allocated %ld times", what, (long long)g.steps, allocs);
        verify(&g, what, 9);
        ta_guard_release(&guard);
        release(&g);
    }
}

/* Chunked prefill steps (Lq = Lnew = 37, causal) and long-cache decode (split keys), paged:
 * the same bits on 1, 2 and 3 threads. */
static void test_threads_same_bits(void **state)
{
    (void)state;
    gen cases[2] = {
        {.B = 2, .H = 8, .Hkv = 2, .D = 32, .Dv = 32, .cap = 208, .bs = 16, .steps = 3, .Lq = 37,
         .len0 = {0, 50}},
        {.B = 2, .H = 8, .Hkv = 2, .D = 32, .Dv = 32, .cap = 2048, .bs = 32, .steps = 4, .Lq = 1,
         .len0 = {2000, 700}},
    };
    const int threads0 = ta_get_num_threads();
    for (int c = 0; c < 2; c++) {
        gen *g = &cases[c];
        make(g, 40 + (uint64_t)c);
        float *o1 = NULL, *l1 = NULL;
        const size_t no = (size_t)ta_tensor_numel(&g->o), nl = (size_t)ta_tensor_numel(&g->lse);
        for (int nt = 1; nt <= 3; nt++) {
            TA_CHECK_OK(ta_set_num_threads(nt));
            run(g, TA_SDPA_AUTO, NULL, NULL);
            if (nt == 1) {
                o1 = malloc(no * sizeof(float));
                l1 = malloc(nl * sizeof(float));
                assert_true(o1 && l1);
                memcpy(o1, g->o.data, no * sizeof(float));
                memcpy(l1, g->lse.data, nl * sizeof(float));
                verify(g, c ? "decode" : "prefill", 1);
            } else if (memcmp(o1, g->o.data, no * sizeof(float)) ||
                       memcmp(l1, g->lse.data, nl * sizeof(float))) {
                fail_msg("case %d: %d threads give other bits than 1", c, nt);
            }
        }
        free(o1);
        free(l1);
        release(g);
    }
    TA_CHECK_OK(ta_set_num_threads(threads0));
}

/* Row b of a tensor with a leading batch dim, as a batch of one. */
static ta_tensor batch_row(const ta_tensor *t, int64_t b)
{
    ta_tensor v = *t;
    v.owned = NULL;
    v.data = (float *)t->data + b * t->stride[0];
    v.shape[0] = 1;
    return v;
}

/* Every step, each sequence alone (a batch of one: its row of the contiguous cache, or
 * its row of the block table), into g's O and LSE. */
static void run_alone(gen *g)
{
    TA_CHECK_OK(ta_tensor_copy(&g->kc, &g->kc0));
    TA_CHECK_OK(ta_tensor_copy(&g->vc, &g->vc0));
    memcpy(g->seqlens, g->len0, sizeof g->seqlens);
    for (int64_t s = 0; s < g->steps; s++) {
        ta_tensor qs = at_step(&g->q, s), kns = at_step(&g->kn, s), vns = at_step(&g->vn, s);
        ta_tensor os = at_step(&g->o, s), ls = at_step(&g->lse, s);
        for (int64_t b = 0; b < g->B; b++) {
            ta_tensor q = batch_row(&qs, b), kn = batch_row(&kns, b), vn = batch_row(&vns, b);
            ta_tensor out = batch_row(&os, b), lse = batch_row(&ls, b);
            ta_tensor kc = g->bs ? g->kc : batch_row(&g->kc, b);
            ta_tensor vc = g->bs ? g->vc : batch_row(&g->vc, b);
            ta_kv_cache cache = {.k = &kc, .v = &vc, .seqlens = &g->seqlens[b],
                                 .block_table = g->bs ? g->table + b * g->max_blocks : NULL,
                                 .max_blocks = g->max_blocks};
            ta_sdpa_opts o = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .lse = &lse};
            TA_CHECK_OK(ta_sdpa_kvcache(&out, &q, &cache, &kn, &vn, &o));
        }
        for (int64_t b = 0; b < g->B; b++) g->seqlens[b] += (int32_t)g->Lq;
    }
}

/* A batch of sequences (which the fused forward runs in one parallel region, the ones
 * that split their keys merging after it) gives the bits of each sequence run alone:
 * decode from long caches (split) beside short ones, and chunked prefill; contiguous and
 * paged; on 1 and 3 threads. */
static void test_batch_as_each_alone(void **state)
{
    (void)state;
    gen cases[3] = {
        {.B = 4, .H = 8, .Hkv = 2, .D = 32, .Dv = 24, .cap = 2048, .bs = 0, .steps = 3, .Lq = 1,
         .len0 = {2000, 30, 0, 1100}},
        {.B = 4, .H = 8, .Hkv = 2, .D = 32, .Dv = 24, .cap = 2048, .bs = 32, .steps = 3, .Lq = 1,
         .len0 = {700, 2040, 5, 1500}},
        {.B = 3, .H = 4, .Hkv = 4, .D = 16, .Dv = 16, .cap = 208, .bs = 16, .steps = 2, .Lq = 37,
         .len0 = {0, 100, 30}},
    };
    const int threads0 = ta_get_num_threads();
    for (int c = 0; c < 3; c++) {
        gen *g = &cases[c];
        make(g, 70 + (uint64_t)c);
        const size_t no = (size_t)ta_tensor_numel(&g->o), nl = (size_t)ta_tensor_numel(&g->lse);
        float *o1 = malloc(no * sizeof(float)), *l1 = malloc(nl * sizeof(float));
        assert_true(o1 && l1);
        run_alone(g);
        memcpy(o1, g->o.data, no * sizeof(float));
        memcpy(l1, g->lse.data, nl * sizeof(float));
        for (int nt = 1; nt <= 3; nt += 2) {
            TA_CHECK_OK(ta_set_num_threads(nt));
            run(g, TA_SDPA_AUTO, NULL, NULL);
            for (size_t i = 0; i < no; i++)
                if (memcmp(&o1[i], (const float *)g->o.data + i, sizeof(float)))
                    fail_msg("case %d, %d threads: O[%zu] %.9g in the batch, %.9g alone", c, nt,
                             i, ((const float *)g->o.data)[i], o1[i]);
            if (memcmp(l1, g->lse.data, nl * sizeof(float)))
                fail_msg("case %d, %d threads: the batch's LSE differs from each alone", c, nt);
        }
        free(o1);
        free(l1);
        release(g);
    }
    TA_CHECK_OK(ta_set_num_threads(threads0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_steps_allocate_nothing),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_batch_as_each_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
