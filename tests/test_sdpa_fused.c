/* ta-test: all-isas
 * What only the fused SDPA forward does, through ta_sdpa with opts.path = TA_SDPA_FUSED
 * (the case table both paths share is test_sdpa_cases.c): key tiles a mask tensor blocks
 * entirely are skipped as causal ones are; rows that keep nothing or one key; NaN in a
 * blocked key is discarded (V at blocked keys is never read); bitwise equality over
 * thread counts for both schedules (query tiles, key split); weights refused; the expf
 * kernel against double exp; and O and the LSE for scores near 3000, where a base-2
 * softmax's carry is large, split into key chunks and not. */
#include "ta_test.h"
#include "sdpa_cases.h"
#include "sdpa_oracle.h"

#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The fused path on case tensors t with options o (o->path is TA_SDPA_FUSED). */
static void run_fused(ta_sdpa_case_tensors *t, const ta_sdpa_opts *o)
{
    TA_CHECK_OK(ta_sdpa(&t->o, &t->q, &t->k, &t->v, o));
}

/* A causal mask given as a tensor (the seed's triu(ones, 1) in block mode): key tiles it
 * blocks for every row are skipped like the ones opts.causal hides; the result matches
 * the reference path on the same mask and the fused path with opts.causal. */
static void test_mask_tensor_blocking_whole_tiles(void **state)
{
    (void)state;
    const int64_t s4[4] = {2, 3, 200, 40}, ms[2] = {200, 200};
    ta_tensor q, k, v, o1, o2, o3, m;
    TA_CHECK_OK(ta_tensor_empty(&q, 4, s4)); TA_CHECK_OK(ta_randn(&q, 81));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, s4)); TA_CHECK_OK(ta_randn(&k, 82));
    TA_CHECK_OK(ta_tensor_empty(&v, 4, s4)); TA_CHECK_OK(ta_randn(&v, 83));
    TA_CHECK_OK(ta_tensor_empty(&o1, 4, s4));
    TA_CHECK_OK(ta_tensor_empty(&o2, 4, s4));
    TA_CHECK_OK(ta_tensor_empty(&o3, 4, s4));
    TA_CHECK_OK(ta_tensor_ones(&m, 2, ms));
    TA_CHECK_OK(ta_tensor_triu(&m, 1));
    ta_sdpa_opts fused = {.mask = &m, .mask_mode = TA_MASK_BLOCK, .path = TA_SDPA_FUSED};
    ta_sdpa_opts ref = fused, causal = {.causal = TA_CAUSAL_TOP_LEFT, .path = TA_SDPA_FUSED};
    ref.path = TA_SDPA_REFERENCE;
    TA_CHECK_OK(ta_sdpa(&o1, &q, &k, &v, &fused));
    TA_CHECK_OK(ta_sdpa(&o2, &q, &k, &v, &ref));
    TA_CHECK_OK(ta_sdpa(&o3, &q, &k, &v, &causal));
    const float *a = o1.data, *b = o2.data, *c = o3.data;
    for (int64_t e = 0; e < ta_tensor_numel(&o1); e++) {
        if (!(fabsf(a[e] - b[e]) <= 1e-5f)) fail_msg("element %lld: fused %g, reference %g", (long long)e, (double)a[e], (double)b[e]);
        if (!(fabsf(a[e] - c[e]) <= 1e-6f)) fail_msg("element %lld: mask %g, causal %g", (long long)e, (double)a[e], (double)c[e]);
    }
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v); ta_tensor_free(&m);
    ta_tensor_free(&o1); ta_tensor_free(&o2); ta_tensor_free(&o3);
}

static void test_fully_masked_rows(void **state)
{
    (void)state;
    ta_sdpa_case c = ta_sdpa_case_shape(2, 2, 1, 30, 45, 16, 16, 7);
    c.mask = TA_TEST_MASK_FULL;
    c.mode = TA_MASK_KEEP;
    ta_sdpa_case_tensors t;
    ta_sdpa_case_make(&t, &c);
    /* Row (0, 1, 4) keeps nothing; row (1, 0, 7) keeps one key. */
    for (int64_t j = 0; j < 45; j++) {
        int64_t a[4] = {0, 1, 4, j}, b[4] = {1, 0, 7, j};
        *ta_tensor_at(&t.mask, a) = 0.0f;
        *ta_tensor_at(&t.mask, b) = j == 20 ? 1.0f : 0.0f;
    }
    ta_sdpa_opts o = ta_sdpa_case_opts(&c, &t, TA_SDPA_FUSED);
    run_fused(&t, &o);
    for (int64_t d = 0; d < 16; d++) {
        int64_t a[4] = {0, 1, 4, d}, b[4] = {1, 0, 7, d}, vj[4] = {1, 0, 20, d};
        assert_true(*ta_tensor_at(&t.o, a) == 0.0f);
        assert_true(fabsf(*ta_tensor_at(&t.o, b) - *ta_tensor_at(&t.v, vj)) < 1e-6f);
    }
    int64_t la[3] = {0, 1, 4};
    assert_true(*ta_tensor_at(&t.lse, la) == -INFINITY);
    ta_sdpa_case_free(&t);
}

static void test_nan_propagates_and_blocked_nan_is_discarded(void **state)
{
    (void)state;
    ta_sdpa_case c = ta_sdpa_case_shape(1, 2, 2, 70, 70, 64, 64, 7);
    c.causal = TA_CAUSAL_TOP_LEFT;
    ta_sdpa_case_tensors t;
    ta_sdpa_case_make(&t, &c);
    int64_t qi[4] = {0, 0, 3, 5}, kj[4] = {0, 1, 50, 9}, vj[4] = {0, 0, 0, 2};
    *ta_tensor_at(&t.q, qi) = NAN;  /* row (0, 0, 3): NaN */
    *ta_tensor_at(&t.k, kj) = NAN;  /* head 1: rows i >= 50 see it -> NaN; rows < 50 not */
    *ta_tensor_at(&t.v, vj) = NAN;  /* head 0, key 0 (seen by every row): column 2 NaN */
    ta_sdpa_opts o = ta_sdpa_case_opts(&c, &t, TA_SDPA_FUSED);
    run_fused(&t, &o);
    double O[2 * 70 * 64], L[2 * 70];
    ta_test_sdpa_f64(O, NULL, L, &t.q, &t.k, &t.v, &o, 1.0 / 8.0, true);
    assert_true(ta_test_max_err(&t.o, O, 0.0, 0, NULL) <= 1e-5);
    assert_true(ta_test_max_err(&t.lse, L, 1.0, 0, NULL) <= 1e-5);
    int64_t a[4] = {0, 1, 49, 0}, b[4] = {0, 1, 50, 0}, l3[3] = {0, 0, 3};
    assert_false(isnan(*ta_tensor_at(&t.o, a)));
    assert_true(isnan(*ta_tensor_at(&t.o, b)));
    assert_true(isnan(*ta_tensor_at(&t.lse, l3)));
    /* +inf through an additive mask: the row is NaN, as softmax's inf - inf. */
    ta_sdpa_case_free(&t);
    c.causal = TA_CAUSAL_NONE;
    c.mask = TA_TEST_MASK_FULL;
    c.mode = TA_MASK_ADDITIVE;
    ta_sdpa_case_make(&t, &c);
    int64_t mi[4] = {0, 1, 7, 33};
    *ta_tensor_at(&t.mask, mi) = INFINITY;
    o = ta_sdpa_case_opts(&c, &t, TA_SDPA_FUSED);
    run_fused(&t, &o);
    ta_test_sdpa_f64(O, NULL, L, &t.q, &t.k, &t.v, &o, 1.0 / 8.0, true);
    assert_true(ta_test_max_err(&t.o, O, 0.0, 0, NULL) <= 1e-5);
    int64_t r7[4] = {0, 1, 7, 0};
    assert_true(isnan(*ta_tensor_at(&t.o, r7)));
    ta_sdpa_case_free(&t);
}

/* Same inputs, 1, 2 and 3 threads: outputs must be bitwise equal (both schedules). */
static void test_threads_bitwise_identical(void **state)
{
    (void)state;
    const ta_sdpa_case cases[] = {
        {.B = 2, .H = 4, .Hkv = 2, .Lq = 200, .Lk = 200, .D = 64, .Dv = 64,
         .causal = TA_CAUSAL_TOP_LEFT, .seed = 5},
        {.B = 1, .H = 4, .Hkv = 1, .Lq = 2, .Lk = 3000, .D = 128, .Dv = 128,
         .causal = TA_CAUSAL_BOTTOM_RIGHT, .seed = 6},
    };
    int saved = ta_get_num_threads();
    for (size_t n = 0; n < 2; n++) {
        ta_sdpa_case_tensors t;
        ta_sdpa_case_make(&t, &cases[n]);
        ta_sdpa_opts o = ta_sdpa_case_opts(&cases[n], &t, TA_SDPA_FUSED);
        size_t no = (size_t)ta_tensor_numel(&t.o), nl = (size_t)ta_tensor_numel(&t.lse);
        float *o1 = malloc(no * sizeof(float)), *l1 = malloc(nl * sizeof(float));
        for (int th = 1; th <= 3; th++) {
            TA_CHECK_OK(ta_set_num_threads(th));
            run_fused(&t, &o);
            if (th == 1) {
                memcpy(o1, t.o.data, no * sizeof(float));
                memcpy(l1, t.lse.data, nl * sizeof(float));
            } else {
                assert_memory_equal(o1, t.o.data, no * sizeof(float));
                assert_memory_equal(l1, t.lse.data, nl * sizeof(float));
            }
        }
        free(o1);
        free(l1);
        ta_sdpa_case_free(&t);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* Causal problems whose last query tile would have few rows (Lq mod attn_mq in 1 ..
 * attn_rows_max): the fused path takes that short tile first (ta_fused_group_tiles);
 * O and the LSE against the reference path, both alignments. */
static void test_causal_short_tile_first(void **state)
{
    (void)state;
    const int64_t mq = ta_kernels_active()->attn_mq, lqs[3] = {mq + 1, 2 * mq + 5, 4 * mq + 8};
    for (int a = 0; a < 3; a++)
        for (int br = 0; br < 2; br++) {
            const ta_sdpa_case c = {.B = 2, .H = 2, .Hkv = 1, .Lq = lqs[a], .Lk = lqs[a] + (br ? 37 : 0),
                                    .D = 64, .Dv = 48, .seed = 40 + (uint64_t)a,
                                    .causal = br ? TA_CAUSAL_BOTTOM_RIGHT : TA_CAUSAL_TOP_LEFT};
            ta_sdpa_case_tensors t;
            ta_sdpa_case_make(&t, &c);
            size_t no = (size_t)ta_tensor_numel(&t.o), nl = (size_t)ta_tensor_numel(&t.lse);
            float *o1 = malloc(no * sizeof(float)), *l1 = malloc(nl * sizeof(float));
            assert_true(o1 && l1);
            ta_sdpa_opts r = ta_sdpa_case_opts(&c, &t, TA_SDPA_REFERENCE);
            TA_CHECK_OK(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &r));
            memcpy(o1, t.o.data, no * sizeof(float));
            memcpy(l1, t.lse.data, nl * sizeof(float));
            memset(t.o.data, 0xff, no * sizeof(float)); /* NaN: a row left unwritten fails */
            memset(t.lse.data, 0xff, nl * sizeof(float));
            ta_sdpa_opts o = ta_sdpa_case_opts(&c, &t, TA_SDPA_FUSED);
            run_fused(&t, &o);
            const float *of = t.o.data, *lf = t.lse.data;
            for (size_t e = 0; e < no; e++)
                if (!(fabsf(of[e] - o1[e]) <= 2e-5f))
                    fail_msg("Lq %lld %s: O[%zu] fused %g, reference %g", (long long)c.Lq,
                             br ? "bottom_right" : "top_left", e, (double)of[e], (double)o1[e]);
            for (size_t e = 0; e < nl; e++)
                if (!(fabsf(lf[e] - l1[e]) <= 2e-5f * (1.0f + fabsf(l1[e]))))
                    fail_msg("Lq %lld: LSE[%zu] fused %g, reference %g", (long long)c.Lq, e,
                             (double)lf[e], (double)l1[e]);
            free(o1);
            free(l1);
            ta_sdpa_case_free(&t);
        }
}

/* K [B, Hkv, Lk, D] and V as views of [B, Lk, Hkv, D] buffers (varlen's packed layout, a
 * KV cache's), whose rows alias in L1 so that the fused forward reads V, and in the
 * later cases K (rows 4 KiB apart, or a group's rows too many for their L2 sets), through
 * each thread's copy of its group's rows (grown item by item: causal tiles, key chunks, a
 * window's later starts): the same O and LSE bit for bit as the contiguous tensors of
 * the same values, through the library's scratch and through a caller's workspace of
 * exactly the queried size, on 1 and 2 threads; and K alone strided (V contiguous),
 * whose workspace is larger than the contiguous tensors' exactly where K is copied. (A
 * decode step reads strided rows in place with other kernels than contiguous ones: the
 * KV-cache tests cover it.) */
static void test_key_rows_in_any_layout_bitwise(void **state)
{
    (void)state;
    const ta_sdpa_case cases[] = {
        {.B = 2, .H = 8, .Hkv = 4, .Lq = 100, .Lk = 130, .D = 64, .Dv = 32,
         .causal = TA_CAUSAL_TOP_LEFT, .seed = 9},
        {.B = 1, .H = 4, .Hkv = 4, .Lq = 70, .Lk = 300, .D = 128, .Dv = 128, .seed = 12},
        /* few tiles and many keys: the keys split into chunks, a thread's V rows grow
         * chunk by chunk */
        {.B = 1, .H = 8, .Hkv = 8, .Lq = 48, .Lk = 2000, .D = 32, .Dv = 64, .seed = 14},
        /* a sliding window (below): items start past key 0 */
        {.B = 1, .H = 8, .Hkv = 8, .Lq = 300, .Lk = 300, .D = 64, .Dv = 64,
         .causal = TA_CAUSAL_TOP_LEFT, .seed = 15},
        /* K copied too: rows 4 KiB apart (16 heads of 64) */
        {.B = 1, .H = 16, .Hkv = 16, .Lq = 130, .Lk = 200, .D = 64, .Dv = 32,
         .causal = TA_CAUSAL_TOP_LEFT, .seed = 16},
        /* grouped heads whose tiles span two heads, and a window (below) */
        {.B = 2, .H = 32, .Hkv = 16, .Lq = 40, .Lk = 300, .D = 64, .Dv = 64, .seed = 17},
        /* rows 2 KiB apart, but 2100 of them: more than their L2 sets hold */
        {.B = 1, .H = 8, .Hkv = 8, .Lq = 100, .Lk = 2100, .D = 64, .Dv = 64,
         .causal = TA_CAUSAL_BOTTOM_RIGHT, .seed = 18},
    };
    /* whether the plan copies K (k_rows_spill in sdpa_forward_fused.c) */
    const bool k_copied[] = {false, false, false, false, true, true, true};
    _Static_assert(sizeof k_copied / sizeof k_copied[0] == sizeof cases / sizeof cases[0],
                   "one k_copied per case");
    int saved = ta_get_num_threads();
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        const ta_sdpa_case *c = &cases[n];
        ta_sdpa_case_tensors t;
        ta_sdpa_case_make(&t, c);
        ta_sdpa_opts o = ta_sdpa_case_opts(c, &t, TA_SDPA_FUSED);
        if (n == 3 || n == 5) {
            o.has_window = 1;
            o.window_left = 70;
            o.window_right = -1;
        }
        size_t no = (size_t)ta_tensor_numel(&t.o), nl = (size_t)ta_tensor_numel(&t.lse);
        float *o1 = malloc(no * sizeof(float)), *l1 = malloc(nl * sizeof(float));
        TA_CHECK_OK(ta_set_num_threads(1));
        run_fused(&t, &o);
        memcpy(o1, t.o.data, no * sizeof(float));
        memcpy(l1, t.lse.data, nl * sizeof(float));
        /* the same values in [B, Lk, Hkv, X] buffers, seen as [B, Hkv, Lk, X] */
        ta_tensor kv[2], views[2];
        for (int w = 0; w < 2; w++) {
            const ta_tensor *src = w ? &t.v : &t.k;
            const int64_t X = w ? c->Dv : c->D;
            TA_CHECK_OK(ta_tensor_empty(&kv[w], 4, (int64_t[]){c->B, c->Lk, c->Hkv, X}));
            TA_CHECK_OK(ta_tensor_permute(&views[w], &kv[w], (int[]){0, 2, 1, 3}));
            TA_CHECK_OK(ta_tensor_copy(&views[w], src));
        }
        for (int variant = 0; variant < 3; variant++) {
            /* 0: both strided, library scratch; 1: both, caller's workspace; 2: K only */
            const ta_tensor *k = &views[0], *v = variant == 2 ? &t.v : &views[1];
            ta_sdpa_opts ow = o;
            void *buf = NULL;
            if (variant == 2) {
                size_t strided = 0, contiguous = 0;
                TA_CHECK_OK(ta_sdpa_workspace_size(&strided, &t.o, &t.q, k, v, &ow));
                TA_CHECK_OK(ta_sdpa_workspace_size(&contiguous, &t.o, &t.q, &t.k, v, &ow));
                if ((strided > contiguous) != k_copied[n])
                    fail_msg("case %zu: workspace %zu with K strided, %zu contiguous", n, strided,
                             contiguous);
            }
            if (variant == 1) {
                size_t bytes = 0;
                TA_CHECK_OK(ta_sdpa_workspace_size(&bytes, &t.o, &t.q, k, v, &ow));
                buf = malloc(bytes ? bytes : 1);
                ow.workspace = (ta_workspace){.data = buf, .size = bytes};
            }
            for (int th = 1; th <= 2; th++) {
                TA_CHECK_OK(ta_set_num_threads(th));
                memset(t.o.data, 0xff, no * sizeof(float));
                TA_CHECK_OK(ta_sdpa(&t.o, &t.q, k, v, &ow));
                if (memcmp(o1, t.o.data, no * sizeof(float)))
                    fail_msg("case %zu variant %d threads %d", n, variant, th);
                assert_memory_equal(l1, t.lse.data, nl * sizeof(float));
            }
            free(buf);
        }
        for (int w = 0; w < 2; w++) ta_tensor_free(&kv[w]);
        free(o1);
        free(l1);
        ta_sdpa_case_free(&t);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* An O of 16 MiB and more is written with non-temporal stores (the fused plan's
 * stream_o): the same bits as each head computed on its own (an O of 512 KiB, plain
 * stores), on 1 and 2 threads, and as an O whose rows are not 16-byte aligned (stream_o
 * planned, every row stored plainly). */
static void test_large_output_bitwise(void **state)
{
    (void)state;
    const int64_t H = 32, Lq = 4096, Lk = 64, D = 32;
    const int64_t sq[4] = {1, H, Lq, D}, sk[4] = {1, H, Lk, D};
    ta_tensor q, k, v, o, oh, ou;
    TA_CHECK_OK(ta_tensor_empty(&q, 4, sq)); TA_CHECK_OK(ta_randn(&q, 91));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, sk)); TA_CHECK_OK(ta_randn(&k, 92));
    TA_CHECK_OK(ta_tensor_empty(&v, 4, sk)); TA_CHECK_OK(ta_randn(&v, 93));
    TA_CHECK_OK(ta_tensor_empty(&o, 4, sq));
    TA_CHECK_OK(ta_tensor_empty(&oh, 4, sq));
    const size_t n = (size_t)(H * Lq * D);
    float *ubuf = malloc((n + 1) * sizeof(float));
    assert_non_null(ubuf);
    TA_CHECK_OK(ta_tensor_from_buffer(&ou, ubuf + 1, 4, sq, o.stride));
    ta_sdpa_opts opts = {.causal = TA_CAUSAL_TOP_LEFT, .path = TA_SDPA_FUSED};
    int saved = ta_get_num_threads();
    TA_CHECK_OK(ta_set_num_threads(1));
    for (int64_t h = 0; h < H; h++) { /* one head a call: O 512 KiB */
        const int64_t s1q[4] = {1, 1, Lq, D}, s1k[4] = {1, 1, Lk, D};
        ta_tensor qh, kh, vh, ohh;
        TA_CHECK_OK(ta_tensor_from_buffer(&qh, (float *)q.data + h * Lq * D, 4, s1q, q.stride));
        TA_CHECK_OK(ta_tensor_from_buffer(&kh, (float *)k.data + h * Lk * D, 4, s1k, k.stride));
        TA_CHECK_OK(ta_tensor_from_buffer(&vh, (float *)v.data + h * Lk * D, 4, s1k, v.stride));
        TA_CHECK_OK(ta_tensor_from_buffer(&ohh, (float *)oh.data + h * Lq * D, 4, s1q, oh.stride));
        TA_CHECK_OK(ta_sdpa(&ohh, &qh, &kh, &vh, &opts));
    }
    for (int th = 1; th <= 2; th++) {
        TA_CHECK_OK(ta_set_num_threads(th));
        memset(o.data, 0xff, n * sizeof(float));
        TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &opts));
        if (memcmp(o.data, oh.data, n * sizeof(float))) fail_msg("streamed O, threads %d", th);
        memset(ubuf, 0xff, (n + 1) * sizeof(float));
        TA_CHECK_OK(ta_sdpa(&ou, &q, &k, &v, &opts));
        if (memcmp(ou.data, oh.data, n * sizeof(float))) fail_msg("unaligned O, threads %d", th);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
    free(ubuf);
    ta_tensor_free(&q);
    ta_tensor_free(&k);
    ta_tensor_free(&v);
    ta_tensor_free(&o);
    ta_tensor_free(&oh);
}

/* Weights need Lq x Lk, which the fused path never forms: refused before anything is
 * written, with a message naming the paths that give them. */
static void test_weights_are_refused(void **state)
{
    (void)state;
    ta_sdpa_case c = ta_sdpa_case_shape(1, 1, 1, 4, 4, 8, 8, 7);
    ta_sdpa_case_tensors t;
    ta_sdpa_case_make(&t, &c);
    ta_tensor w;
    const int64_t ws[4] = {1, 1, 4, 4};
    TA_CHECK_OK(ta_tensor_full(&w, 4, ws, 3.0f));
    TA_CHECK_OK(ta_tensor_fill(&t.o, 3.0f));
    ta_sdpa_opts o = ta_sdpa_case_opts(&c, &t, TA_SDPA_FUSED);
    o.weights = &w;
    TA_CHECK_ERR(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o), TA_EUNSUPPORTED, "weights");
    assert_non_null(strstr(ta_last_error(), "TA_SDPA_REFERENCE"));
    for (int e = 0; e < 16; e++) assert_true(((float *)w.data)[e] == 3.0f);
    for (int e = 0; e < 32; e++) assert_true(((float *)t.o.data)[e] == 3.0f);
    ta_tensor_free(&w);
    ta_sdpa_case_free(&t);
}

/* The expf kernel over the softmax's domain [-104, 0] (x = s - max <= 0), against
 * double exp: within 2 ulp where the result is normal; below FLT_MIN within FLT_MIN
 * (AVX2 and scalar flush those to 0; AVX-512 rounds them into denormals). Exact at 0,
 * 0 at -inf, NaN at NaN. */
static void test_expf_kernel_accuracy(void **state)
{
    (void)state;
    const ta_kernels *k = ta_kernels_active();
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    double worst_ulp = 0;
    for (int pass = 0; pass < 8; pass++) {
        for (int n = 0; n < N; n++) x[n] = -104.0f * (float)(pass * N + n) / (8.0f * N);
        k->attn_exp(y, x, N - pass); /* odd lengths exercise the tail */
        for (int n = 0; n < N - pass; n++) {
            double e = exp((double)x[n]);
            if (e < FLT_MIN) {
                if (!(fabs(y[n] - e) <= FLT_MIN)) fail_msg("exp(%a) = %a, want %a", x[n], y[n], e);
                continue;
            }
            double ulp = ldexp(1.0, ilogb(e) - 23), err = fabs(y[n] - e) / ulp;
            worst_ulp = ta_test_worse(worst_ulp, err);
        }
    }
    if (!(worst_ulp <= 2.0)) fail_msg("expf kernel: %.2f ulp", worst_ulp);
    float sp[4] = {0.0f, -INFINITY, NAN, -1e-30f}, r[4];
    k->attn_exp(r, sp, 4);
    assert_true(r[0] == 1.0f);
    assert_true(r[1] == 0.0f);
    assert_true(isnan(r[2]));
    assert_true(r[3] == 1.0f);
    free(x);
    free(y);
}

/* Scores near 3000 (exact in float: a_i + t_j, t_j a multiple of 2^-10 in [-4, 4]),
 * where a base-2 softmax's carry (kernels.h, attn_softmax_exp2; up to 2.4e-4 here) is
 * large: O against a float64 oracle for tiles whose keys are split into chunks (Lk 2048:
 * one tile of 48 rows through attn_softmax, of 1 and 4 rows through attn_softmax_rows,
 * merged by LSE) and not (Lk 600), with a sink in the denominator and without, and the
 * LSE within half an ulp of the oracle's (plus 2e-6): without the carry's correction
 * where l meets m (the merge, the LSE, the sink), O is off by ~1e-4 and the LSE by up to
 * 0.7 ulp. */
static void test_large_shift_carry(void **state)
{
    (void)state;
    const int64_t lqs[3] = {48, 1, 4}, lks[2] = {2048, 600}, D = 64, one = 1;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            for (int sink = 0; sink < 2; sink++) {
                const int64_t Lq = lqs[a], Lk = lks[b];
                const int64_t sq[4] = {1, 1, Lq, D}, sk[4] = {1, 1, Lk, D}, sl[3] = {1, 1, Lq};
                ta_tensor q, k, v, o, lse, sg;
                TA_CHECK_OK(ta_tensor_zeros(&q, 4, sq));
                TA_CHECK_OK(ta_tensor_zeros(&k, 4, sk));
                TA_CHECK_OK(ta_tensor_empty(&v, 4, sk));
                TA_CHECK_OK(ta_randn(&v, 91));
                TA_CHECK_OK(ta_tensor_empty(&o, 4, sq));
                TA_CHECK_OK(ta_tensor_empty(&lse, 3, sl));
                TA_CHECK_OK(ta_tensor_empty(&sg, 1, &one));
                const double sigma = 3008.0; /* a sink about as heavy as the keys of row 0 */
                ((float *)sg.data)[0] = (float)sigma;
                float *qd = q.data, *kd = k.data;
                const float *vd = v.data, *od = o.data, *ld = lse.data;
                for (int64_t i = 0; i < Lq; i++) { /* scale 1/8: scores a_i + t_j exactly */
                    qd[i * D] = 8.0f * (3000.0f + (float)i);
                    qd[i * D + 1] = 8.0f;
                }
                double tmax = -INFINITY;
                for (int64_t j = 0; j < Lk; j++) {
                    kd[j * D] = 1.0f;
                    kd[j * D + 1] = (float)((int64_t)((j * 2654435761u) % 8193) - 4096) / 1024.0f;
                    if (kd[j * D + 1] > tmax) tmax = kd[j * D + 1];
                }
                ta_sdpa_opts op = {.path = TA_SDPA_FUSED, .lse = &lse, .sinks = sink ? &sg : NULL};
                TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &op));
                /* the oracle: softmax over t_j alone (the shift a_i cancels), the sink at
                 * sigma - a_i on that scale */
                double den = 0.0, num[64] = {0};
                for (int64_t j = 0; j < Lk; j++) {
                    const double w = exp((double)kd[j * D + 1] - tmax);
                    den += w;
                    for (int64_t d = 0; d < D; d++) num[d] += w * vd[j * D + d];
                }
                for (int64_t i = 0; i < Lq; i++) {
                    const double a_i = 3000.0 + (double)i;
                    const double di = den + (sink ? exp(sigma - a_i - tmax) : 0.0);
                    double scale = 0.0;
                    for (int64_t d = 0; d < D; d++)
                        if (fabs(num[d] / di) > scale) scale = fabs(num[d] / di);
                    for (int64_t d = 0; d < D; d++)
                        if (!(fabs(od[i * D + d] - num[d] / di) <= 4e-6 * scale))
                            fail_msg("Lq %lld Lk %lld sink %d: O[%lld, %lld] = %.9g, oracle %.9g",
                                     (long long)Lq, (long long)Lk, sink, (long long)i, (long long)d,
                                     (double)od[i * D + d], num[d] / di);
                    const double want = a_i + tmax + log(di);
                    const double ulp = ldexp(1.0, ilogb(want) - 23);
                    if (!(fabs(ld[i] - want) <= 0.5 * ulp + 2e-6))
                        fail_msg("Lq %lld Lk %lld sink %d: LSE[%lld] = %.9g, oracle %.9g (%.2f ulp)",
                                 (long long)Lq, (long long)Lk, sink, (long long)i, (double)ld[i],
                                 want, fabs(ld[i] - want) / ulp);
                }
                ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
                ta_tensor_free(&o); ta_tensor_free(&lse); ta_tensor_free(&sg);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_kernel_accuracy),
        cmocka_unit_test(test_mask_tensor_blocking_whole_tiles),
        cmocka_unit_test(test_fully_masked_rows),
        cmocka_unit_test(test_nan_propagates_and_blocked_nan_is_discarded),
        cmocka_unit_test(test_threads_bitwise_identical),
        cmocka_unit_test(test_causal_short_tile_first),
        cmocka_unit_test(test_key_rows_in_any_layout_bitwise),
        cmocka_unit_test(test_large_output_bitwise),
        cmocka_unit_test(test_weights_are_refused),
        cmocka_unit_test(test_large_shift_carry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
