/* ta-test: all-isas
 * float16 and bfloat16 storage in ta_sdpa and ta_sdpa_backward (issue 11) against
 * PyTorch: tests/fixtures/half.tafx (tools/fixtures_half.py) holds inputs rounded by
 * torch to each case's storage dtypes (Q; K and V; O and dO; the gradients) and the
 * float64 references computed from those rounded values. Each case runs on the
 * reference and the fused (automatic) path with the tensors in their dtypes:
 *   - O within 2e-3 of the output's scale when O is half, else 1e-5, beyond the rounding
 *     of each element to O's dtype (up to 2^-8 of it for bfloat16, 2^-11 for float16);
 *     the LSE (float32) within 1e-5;
 *   - dQ, dK, dV (the backward gets the reference O rounded to O's dtype, and the LSE)
 *     within (4e-3 + 4 u) of each gradient's scale when a half tensor takes part (u: O's
 *     unit roundoff, as D_i = rowsum(dO * O) sees O rounded), else 1e-4.
 * Also: varlen batches with bfloat16 tensors equal the dense runs of each sequence, a
 * half output is written whole (no element left from before), and bfloat16 Q, K, V give
 * the O and LSE of float32 tensors holding the same values within float32 roundoff, on
 * 60 random shapes and option sets (on avx512bf16 the bfloat16 dot product's Q.K^T
 * against the FMAs). */
#include "ta_test.h"

#include "fixture_cases.h"
#include "sdpa_oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ta_dtype dtype_named(const char *s)
{
    return !strcmp(s, "f16") ? TA_F16 : !strcmp(s, "bf16") ? TA_BF16 : TA_F32;
}

/* The unit roundoff of a storage dtype: the largest relative error of rounding to it. */
static double roundoff(ta_dtype dt)
{
    return dt == TA_BF16 ? 0x1p-8 : dt == TA_F16 ? 0x1p-11 : 0x1p-24;
}

/* max over the elements of |t - ref| - u |ref|, t of any dtype, u its unit roundoff: the
 * error beyond the rounding of the output itself (at most u of an element, 2^-8 for
 * bfloat16, which alone exceeds 2e-3 of the scale near it); *scale = max |ref|. NaN
 * anywhere is +inf. */
static double err_of(const ta_tensor *t, const double *ref, double *scale)
{
    ta_tensor f;
    TA_CHECK_OK(ta_tensor_empty(&f, t->ndim, t->shape));
    TA_CHECK_OK(ta_tensor_copy(&f, t));
    const double u = roundoff(t->dtype);
    const float *x = f.data;
    int64_t n = ta_tensor_numel(&f);
    double e = 0.0;
    *scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        *scale = fmax(*scale, fabs(ref[i]));
        double d = fabs((double)x[i] - ref[i]) - u * fabs(ref[i]);
        e = isnan(d) ? INFINITY : fmax(e, d);
    }
    ta_tensor_free(&f);
    return e;
}

typedef struct tally {
    int cases, half_o, half_kv_only;
} tally;

static void run_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    tally *t = ctx;
    const char *meta = ta_fixture_case_meta(f, c);
    char names[64];
    ta_fixture_meta_get(meta, "dtypes", names, sizeof names);
    ta_dtype dt[4];
    char *save = NULL, *tok = strtok_r(names, ",", &save);
    for (int i = 0; i < 4; i++, tok = strtok_r(NULL, ",", &save)) {
        assert_non_null(tok);
        dt[i] = dtype_named(tok);
    }
    ta_test_sdpa_inputs in;
    ta_test_sdpa_inputs_load(&in, f, c);
    ta_tensor q, k, v, o, lse, dout, o0, l0, dO, Oin, dQ, dK, dV;
    ta_test_as_dtype(&q, &in.q, dt[0]);
    ta_test_as_dtype(&k, &in.k, dt[1]);
    ta_test_as_dtype(&v, &in.v, dt[1]);
    TA_CHECK_OK(ta_fixture_tensor(&dout, ta_fixture_need(f, c, "dout")));
    TA_CHECK_OK(ta_fixture_tensor(&o0, ta_fixture_need(f, c, "out")));
    TA_CHECK_OK(ta_fixture_tensor(&l0, ta_fixture_need(f, c, "lse")));
    ta_test_as_dtype(&dO, &dout, dt[2]);
    ta_test_as_dtype(&Oin, &o0, dt[2]); /* the reference O rounded to O's dtype (ta_tensor_copy rounds) */
    TA_CHECK_OK(ta_tensor_empty_dtype(&o, dt[2], 4, o0.shape));
    TA_CHECK_OK(ta_tensor_empty(&lse, 3, l0.shape));
    TA_CHECK_OK(ta_tensor_empty_dtype(&dQ, dt[3], 4, q.shape));
    TA_CHECK_OK(ta_tensor_empty_dtype(&dK, dt[3], 4, k.shape));
    TA_CHECK_OK(ta_tensor_empty_dtype(&dV, dt[3], 4, v.shape));
    double *wo = ta_fixture_case_f64(f, c, "out"), *wl = ta_fixture_case_f64(f, c, "lse");
    double *wq = ta_fixture_case_f64(f, c, "dq"), *wk = ta_fixture_case_f64(f, c, "dk"),
           *wv = ta_fixture_case_f64(f, c, "dv");
    const bool half_o = dt[2] != TA_F32, half_any = half_o || dt[0] != TA_F32 || dt[3] != TA_F32;
    t->cases++;
    t->half_o += half_o;
    t->half_kv_only += !half_any && dt[1] != TA_F32;
    for (int path = 0; path < 2; path++) {
        ta_sdpa_opts op = in.opts;
        op.path = path ? TA_SDPA_AUTO : TA_SDPA_REFERENCE;
        op.lse = &lse;
        TA_CHECK_OK(ta_tensor_fill(&o, NAN));
        TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &op));
        double so, sl, eo = err_of(&o, wo, &so), el = ta_test_max_err(&lse, wl, 0.0, 0.0, NULL);
        (void)sl;
        double tol_o = half_o ? 2e-3 * fmax(so, 1e-30) : 1e-5;
        if (!(eo <= tol_o && el <= 1e-5))
            fail_msg("%s (%s, %s): O error %.3g (tolerance %.3g, scale %.3g), LSE error %.3g",
                     c, meta, path ? "auto" : "reference", eo, tol_o, so, el);
        op.lse = NULL;
        TA_CHECK_OK(ta_tensor_fill(&dQ, NAN));
        TA_CHECK_OK(ta_tensor_fill(&dK, NAN));
        TA_CHECK_OK(ta_tensor_fill(&dV, NAN));
        TA_CHECK_OK(ta_sdpa_backward(&dQ, &dK, &dV, &dO, &q, &k, &v, &Oin, &l0, &op));
        double s[3], e[3] = {err_of(&dQ, wq, &s[0]), err_of(&dK, wk, &s[1]), err_of(&dV, wv, &s[2])};
        for (int g = 0; g < 3; g++) {
            /* the backward's D_i = rowsum(dO * O) reads O as given, rounded to its dtype
             * (as FlashAttention's does): 4 roundoffs of O on top */
            double tol = half_any ? (4e-3 + 4.0 * roundoff(dt[2])) * fmax(s[g], 1.0) : 1e-4;
            if (!(e[g] <= tol))
                fail_msg("%s (%s, %s): d%c error %.3g (tolerance %.3g, scale %.3g)", c, meta,
                         path ? "auto" : "reference", "QKV"[g], e[g], tol, s[g]);
        }
    }
    free(wo); free(wl); free(wq); free(wk); free(wv);
    ta_tensor *all[] = {&q, &k, &v, &o, &lse, &dout, &o0, &l0, &dO, &Oin, &dQ, &dK, &dV};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    ta_test_sdpa_inputs_free(&in);
}

static void test_half_matches_pytorch(void **state)
{
    (void)state;
    tally t = {0};
    int n = ta_fixture_cases_run("half.tafx", NULL, NULL, run_case, &t);
    assert_int_equal(n, t.cases);
    assert_true(n >= 10);
    assert_true(t.half_o >= 5);
    assert_true(t.half_kv_only >= 2); /* the decode cases: a half cache, float32 q and O */
}

/* A varlen batch of bfloat16 Q, K, V and O equals the dense run of each sequence on the
 * same bfloat16 values (sequence views of the packed tensors, one call each). */
static void test_half_varlen_equals_dense(void **state)
{
    (void)state;
    const int32_t cu_q[4] = {0, 5, 5, 22}, cu_k[4] = {0, 9, 12, 30};
    const int64_t H = 4, Hkv = 2, D = 16, qs[3] = {22, H, D}, ks[3] = {30, Hkv, D};
    ta_tensor q32, k32, v32, q, k, v, o;
    TA_CHECK_OK(ta_tensor_empty(&q32, 3, qs));
    TA_CHECK_OK(ta_tensor_empty(&k32, 3, ks));
    TA_CHECK_OK(ta_tensor_empty(&v32, 3, ks));
    TA_CHECK_OK(ta_randn(&q32, 5));
    TA_CHECK_OK(ta_randn(&k32, 6));
    TA_CHECK_OK(ta_randn(&v32, 7));
    ta_test_as_dtype(&q, &q32, TA_BF16);
    ta_test_as_dtype(&k, &k32, TA_BF16);
    ta_test_as_dtype(&v, &v32, TA_BF16);
    TA_CHECK_OK(ta_tensor_empty_dtype(&o, TA_BF16, 3, qs));
    for (int path = 0; path < 2; path++) {
        ta_sdpa_opts op = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .cu_seqlens_q = cu_q,
                           .cu_seqlens_k = cu_k, .num_seqs = 3,
                           .path = path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE};
        TA_CHECK_OK(ta_tensor_fill(&o, NAN));
        TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, &op));
        for (int b = 0; b < 3; b++) {
            /* sequence b as a dense [1, Hx, L, D] problem on views */
            ta_tensor qv, kv, vv, ov, od;
            const int perm[3] = {1, 0, 2};
            TA_CHECK_OK(ta_tensor_slice(&qv, &q, 0, cu_q[b], cu_q[b + 1], 1));
            TA_CHECK_OK(ta_tensor_slice(&kv, &k, 0, cu_k[b], cu_k[b + 1], 1));
            TA_CHECK_OK(ta_tensor_slice(&vv, &v, 0, cu_k[b], cu_k[b + 1], 1));
            TA_CHECK_OK(ta_tensor_slice(&ov, &o, 0, cu_q[b], cu_q[b + 1], 1));
            ta_tensor *vs[4] = {&qv, &kv, &vv, &ov};
            for (int i = 0; i < 4; i++) {
                TA_CHECK_OK(ta_tensor_permute(vs[i], vs[i], perm));
                int64_t s4[4] = {1, vs[i]->shape[0], vs[i]->shape[1], vs[i]->shape[2]};
                TA_CHECK_OK(ta_tensor_reshape(vs[i], vs[i], 4, s4));
            }
            TA_CHECK_OK(ta_tensor_empty_dtype(&od, TA_BF16, 4, ov.shape));
            ta_sdpa_opts dop = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .path = op.path};
            TA_CHECK_OK(ta_sdpa(&od, &qv, &kv, &vv, &dop));
            ta_tensor a, bb;
            TA_CHECK_OK(ta_tensor_empty(&a, 4, ov.shape));
            TA_CHECK_OK(ta_tensor_empty(&bb, 4, ov.shape));
            TA_CHECK_OK(ta_tensor_copy(&a, &ov));
            TA_CHECK_OK(ta_tensor_copy(&bb, &od));
            int64_t n = ta_tensor_numel(&a);
            assert_memory_equal(a.data, bb.data, sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) assert_false(isnan(((float *)a.data)[i]));
            ta_tensor_free(&a);
            ta_tensor_free(&bb);
            ta_tensor_free(&od);
        }
    }
    ta_tensor *all[] = {&q32, &k32, &v32, &q, &k, &v, &o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

/* The random tests' draws: xorshift64 on *s, then a value in [0, n). */
static int64_t rnd(uint64_t *s, int64_t n)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (int64_t)(*s % (uint64_t)n);
}

/* The fused path's options for a random test, drawn from *rng in this order: the causal
 * alignment; a window (1 in 4); softcap 20 (1 in 4); ALiBi slopes (1 in 4, made in
 * slopes, [H]); sinks (1 in 4, made in sinks, [H]; not drawn when sinks is NULL); key
 * lengths (1 in 3, in kl[B]). */
static ta_sdpa_opts random_opts(uint64_t *rng, int64_t B, int64_t H, int64_t Lk,
                                ta_tensor *slopes, ta_tensor *sinks, int64_t *kl)
{
    const int64_t hs[1] = {H};
    ta_sdpa_opts op = {.path = TA_SDPA_FUSED};
    const int64_t cm = rnd(rng, 3);
    op.causal = cm == 0 ? TA_CAUSAL_NONE : cm == 1 ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_BOTTOM_RIGHT;
    if (rnd(rng, 4) == 0) {
        op.has_window = 1;
        op.window_left = rnd(rng, 2) ? -1 : rnd(rng, 50);
        op.window_right = rnd(rng, 2) ? -1 : rnd(rng, 50);
    }
    if (rnd(rng, 4) == 0) op.softcap = 20.0f;
    if (rnd(rng, 4) == 0) {
        TA_CHECK_OK(ta_tensor_empty(slopes, 1, hs));
        for (int64_t h = 0; h < H; h++) ((float *)slopes->data)[h] = 0.1f / (float)(h + 1);
        op.alibi_slopes = slopes;
    }
    if (sinks && rnd(rng, 4) == 0) {
        TA_CHECK_OK(ta_tensor_empty(sinks, 1, hs));
        for (int64_t h = 0; h < H; h++) ((float *)sinks->data)[h] = 0.3f * (float)h - 0.5f;
        op.sinks = sinks;
    }
    if (rnd(rng, 3) == 0) {
        for (int64_t b = 0; b < B; b++) kl[b] = rnd(rng, Lk + 1);
        op.key_lengths = kl;
    }
    return op;
}

/* A bfloat16 Q, K and V against float32 ones holding the same values, fused path, on
 * random shapes with every option the forward takes (GQA, both causal alignments, a
 * window, softcap, ALiBi, sinks, key lengths, Dv != D, D with and without a last odd
 * vector of the kernels): where the CPU has AVX512_BF16 the bfloat16 run's Q.K^T is the
 * dot product (attn_qk_rows_bf16dot, attn_qk_bf16dot) and the float32 run's the FMAs,
 * so O and the LSE may differ by float32 roundoff only (1e-5 of max(1, |x|)); elsewhere
 * both widen the same values. A quarter of the cases give the bfloat16 tensors as [B, L,
 * H, D] views, half of them a bfloat16 O (its rounding of the float32 run's O beside). */
static void as_bshd(ta_tensor *buf, ta_tensor *view, const ta_tensor *x, ta_dtype dt);

static void test_bf16_equals_float32_values(void **state)
{
    (void)state;
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
#define RND(n) rnd(&rng, (n))
    static const int64_t Ds[6] = {16, 32, 48, 64, 80, 128};
    for (int c = 0; c < 60; c++) {
        const int64_t Hkv = 1 + RND(3), H = Hkv * (1 + RND(6)), B = 1 + RND(2);
        const int64_t Lq = 1 + RND(c % 3 == 0 ? 4 : 100), Lk = 1 + RND(200), D = Ds[RND(6)];
        const int64_t Dv = RND(3) == 0 ? 32 : D;
        const int64_t qs[4] = {B, H, Lq, D}, ks[4] = {B, Hkv, Lk, D}, vs[4] = {B, Hkv, Lk, Dv};
        const int64_t os[4] = {B, H, Lq, Dv}, ls[3] = {B, H, Lq};
        ta_tensor x32[3], x16[3], buf[3], o[2], lse[2], slopes = {0}, sinks = {0};
        const bool bshd = c % 4 == 1; /* [B, L, H, D] views: rows that lie apart */
        const int64_t *shapes[3] = {qs, ks, vs};
        for (int i = 0; i < 3; i++) {
            TA_CHECK_OK(ta_tensor_empty(&x32[i], 4, shapes[i]));
            TA_CHECK_OK(ta_randn(&x32[i], (uint64_t)(3 * c + i + 1)));
            ta_test_as_dtype(&buf[i], &x32[i], TA_BF16);
            TA_CHECK_OK(ta_tensor_copy(&x32[i], &buf[i])); /* the same values */
            if (bshd) {
                ta_tensor_free(&buf[i]);
                as_bshd(&buf[i], &x16[i], &x32[i], TA_BF16);
            } else {
                x16[i] = buf[i];
            }
        }
        int64_t kl[2];
        ta_sdpa_opts op = random_opts(&rng, B, H, Lk, &slopes, &sinks, kl);
        const bool half_o = RND(2) == 0; /* O bfloat16: the float32 O's rounding beside */
        for (int r = 0; r < 2; r++) {
            TA_CHECK_OK(ta_tensor_empty_dtype(&o[r], r || !half_o ? TA_F32 : TA_BF16, 4, os));
            TA_CHECK_OK(ta_tensor_empty(&lse[r], 3, ls));
            op.lse = &lse[r];
            const ta_tensor *x = r ? x32 : x16;
            TA_CHECK_OK(ta_sdpa(&o[r], &x[0], &x[1], &x[2], &op));
        }
        if (half_o) { /* O as float32, and the float32 run's O rounded to bfloat16 */
            ta_tensor wide, rounded;
            TA_CHECK_OK(ta_tensor_empty(&wide, 4, os));
            TA_CHECK_OK(ta_tensor_copy(&wide, &o[0]));
            ta_test_as_dtype(&rounded, &o[1], TA_BF16);
            ta_tensor_free(&o[0]);
            o[0] = wide;
            TA_CHECK_OK(ta_tensor_copy(&o[1], &rounded));
            ta_tensor_free(&rounded);
        }
        for (int t = 0; t < 2; t++) {
            const float *a = (const float *)(t ? lse[0].data : o[0].data);
            const float *b = (const float *)(t ? lse[1].data : o[1].data);
            const int64_t n = ta_tensor_numel(t ? &lse[0] : &o[0]);
            for (int64_t i = 0; i < n; i++) {
                if (a[i] == b[i]) continue; /* -inf LSE of a row without keys too */
                /* a bfloat16 O may round the other way where the two differ by roundoff: an ulp */
                const double m = fmax(1.0, fabs((double)b[i])) * (half_o && !t ? 0x1p-7 / 1e-5 + 1.0 : 1.0);
                if (!(fabs((double)a[i] - (double)b[i]) <= 1e-5 * m))
                    fail_msg("case %d (B%lld H%lld/%lld Lq%lld Lk%lld D%lld Dv%lld): %s[%lld] "
                             "%.9g (bfloat16) against %.9g (float32 of the same values)",
                             c, (long long)B, (long long)H, (long long)Hkv, (long long)Lq,
                             (long long)Lk, (long long)D, (long long)Dv, t ? "lse" : "O",
                             (long long)i, (double)a[i], (double)b[i]);
            }
        }
        for (int i = 0; i < 3; i++) {
            ta_tensor_free(&x32[i]);
            ta_tensor_free(&buf[i]);
        }
        for (int r = 0; r < 2; r++) {
            ta_tensor_free(&o[r]);
            ta_tensor_free(&lse[r]);
        }
        ta_tensor_free(&slopes);
        ta_tensor_free(&sinks);
    }
#undef RND
}

/* A [B, L, Hx, X] tensor of values x (a [B, Hx, L, X] tensor) in dtype dt, as its
 * [B, Hx, L, X] view (rows Hx X apart): the layout of a model's projections. */
static void as_bshd(ta_tensor *buf, ta_tensor *view, const ta_tensor *x, ta_dtype dt)
{
    const int perm[4] = {0, 2, 1, 3};
    const int64_t s[4] = {x->shape[0], x->shape[2], x->shape[1], x->shape[3]};
    TA_CHECK_OK(ta_tensor_empty_dtype(buf, dt, 4, s));
    TA_CHECK_OK(ta_tensor_permute(view, buf, perm));
    TA_CHECK_OK(ta_tensor_copy(view, x));
}

/* A gradient g (half or float32) of a half backward against g32, the float32 gradient
 * of tensors holding the same values: without the dot product the same bits rounded once
 * to g's dtype; with it (dot) within 1e-5 of g32's largest magnitude (at least 1) beyond
 * that rounding. Returns the difference over that scale. */
static double expect_grad(const ta_tensor *g, const ta_tensor *g32, bool dot, const char *ctx)
{
    ta_tensor want, got, wf;
    ta_test_as_dtype(&want, g32, g->dtype);
    TA_CHECK_OK(ta_tensor_empty(&got, g->ndim, g->shape));
    TA_CHECK_OK(ta_tensor_copy(&got, g));
    TA_CHECK_OK(ta_tensor_empty(&wf, g->ndim, g->shape));
    TA_CHECK_OK(ta_tensor_copy(&wf, &want));
    const float *a = got.data, *w = g32->data, *b = wf.data;
    const int64_t n = ta_tensor_numel(&got);
    const double u = g->dtype == TA_BF16 ? 0x1p-8 : g->dtype == TA_F16 ? 0x1p-11 : 0.0;
    double m = 1.0, e = 0.0;
    for (int64_t j = 0; j < n; j++) {
        if (!isfinite(w[j])) /* else a NaN in both runs (the same bits) would pass */
            fail_msg("%s[%lld]: the float32 run's gradient is %g", ctx, (long long)j, (double)w[j]);
        m = fmax(m, fabs((double)w[j]));
    }
    for (int64_t j = 0; j < n; j++) {
        if (!dot) {
            if (memcmp(&a[j], &b[j], sizeof(float)) != 0)
                fail_msg("%s[%lld] = %.9g; float32 of the same values gives %.9g (rounded: "
                         "%.9g): expected the same bits", ctx, (long long)j, (double)a[j],
                         (double)w[j], (double)b[j]);
            continue;
        }
        const double d = fabs((double)a[j] - (double)w[j]) - u * fabs((double)w[j]);
        e = isnan(d) ? INFINITY : fmax(e, d);
    }
    if (dot && !(e <= 1e-5 * m))
        fail_msg("%s differs by %.3g beyond its rounding from float32 of the same values, "
                 "largest magnitude %.3g", ctx, e, m);
    ta_tensor_free(&want);
    ta_tensor_free(&got);
    ta_tensor_free(&wf);
    return e / m;
}

/* The backward on half Q, K, V, O and dO (float16 or bfloat16; the gradients half or
 * float32) gives the gradients of float32 tensors holding the same values, on 60 random
 * shapes and option sets (GQA, both causal alignments, windows, softcap, ALiBi, key
 * lengths, Dv != D, D odd, [B, L, H, D] views): the fused backward reads and writes the
 * half tensors itself (no float32 stand-ins), so the float32 gradients are the same bits
 * and the half ones those bits rounded once; except where the CPU has AVX512_BF16 and
 * the tensors are bfloat16, whose S = Q K^T and dP = dO V^T take the dot product
 * (attn_bwd_gemm_bf16dot) where the float32 run takes the FMAs: there within 1e-5 of
 * each gradient's largest magnitude (at least 1), beyond the rounding of a half output. */
static void test_half_backward_equals_float32_values(void **state)
{
    (void)state;
    uint64_t rng = 0x243f6a8885a308d3ULL;
#define RND(n) rnd(&rng, (n))
    static const int64_t Ds[6] = {16, 32, 17, 64, 80, 128};
    double worst = 0.0;
    int exact = 0;
    for (int c = 0; c < 60; c++) {
        const ta_dtype dt = RND(3) ? TA_BF16 : TA_F16, gt = RND(2) ? dt : TA_F32;
        const int64_t Hkv = 1 + RND(3), H = Hkv * (1 + RND(4)), B = 1 + RND(2);
        const int64_t Lq = 1 + RND(c % 3 == 0 ? 4 : 150), Lk = 1 + RND(200), D = Ds[RND(6)];
        const int64_t Dv = RND(3) == 0 ? 32 : D;
        const int64_t qs[4] = {B, H, Lq, D}, ks[4] = {B, Hkv, Lk, D}, vs[4] = {B, Hkv, Lk, Dv};
        const int64_t os[4] = {B, H, Lq, Dv}, ls[3] = {B, H, Lq};
        const int64_t *shapes[5] = {qs, ks, vs, os, os};
        const bool bshd = RND(4) == 0;
        /* Q, K, V, dO, O: half values in both dtypes (O from a float32 forward) */
        ta_tensor x32[5], buf[5], x16[5], lse, g[2][3], slopes = {0};
        int64_t kl[2];
        ta_sdpa_opts op = random_opts(&rng, B, H, Lk, &slopes, NULL, kl);
        TA_CHECK_OK(ta_tensor_empty(&lse, 3, ls));
        for (int i = 0; i < 5; i++) {
            TA_CHECK_OK(ta_tensor_empty(&x32[i], 4, shapes[i]));
            if (i < 4) TA_CHECK_OK(ta_randn(&x32[i], (uint64_t)(5 * c + i + 1)));
            if (i == 4) { /* O and the LSE of the float32 forward */
                op.lse = &lse;
                TA_CHECK_OK(ta_sdpa(&x32[4], &x32[0], &x32[1], &x32[2], &op));
                op.lse = NULL;
            }
            ta_tensor r;
            ta_test_as_dtype(&r, &x32[i], dt);
            TA_CHECK_OK(ta_tensor_copy(&x32[i], &r));
            ta_tensor_free(&r);
            if (bshd) {
                as_bshd(&buf[i], &x16[i], &x32[i], dt);
            } else {
                ta_test_as_dtype(&buf[i], &x32[i], dt);
                x16[i] = buf[i];
            }
        }
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < 3; i++)
                TA_CHECK_OK(ta_tensor_empty_dtype(&g[r][i], r ? TA_F32 : gt, 4, shapes[i]));
            const ta_tensor *x = r ? x32 : x16;
            TA_CHECK_OK(ta_sdpa_backward(&g[r][0], &g[r][1], &g[r][2], &x[3], &x[0], &x[1],
                                         &x[2], &x[4], &lse, &op));
        }
        const bool dot = ta_active_isa() == TA_ISA_AVX512BF16 && dt == TA_BF16 &&
                         (D % 2 == 0 || Dv % 2 == 0);
        exact += !dot;
        for (int i = 0; i < 3; i++) {
            char ctx[160];
            snprintf(ctx, sizeof ctx, "case %d (%s -> %s, B%lld H%lld/%lld Lq%lld Lk%lld D%lld "
                     "Dv%lld%s): d%c", c, ta_dtype_name(dt), ta_dtype_name(gt), (long long)B,
                     (long long)H, (long long)Hkv, (long long)Lq, (long long)Lk, (long long)D,
                     (long long)Dv, bshd ? ", BLHD" : "", "QKV"[i]);
            worst = ta_test_worse(worst, expect_grad(&g[0][i], &g[1][i], dot, ctx));
        }
        for (int i = 0; i < 5; i++) {
            ta_tensor_free(&x32[i]);
            ta_tensor_free(&buf[i]);
        }
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 3; i++) ta_tensor_free(&g[r][i]);
        ta_tensor_free(&lse);
        ta_tensor_free(&slopes);
    }
    assert_true(exact >= 10); /* float16 cases at least: bitwise on every table */
    if (getenv("TA_TEST_VERBOSE"))
        print_message("largest difference / scale (dot product): %.3g; %d exact cases\n", worst,
                      exact);
#undef RND
}

/* A varlen backward (packed [T, H, D] tensors, five sequences, one of them empty, in
 * one call) on bfloat16 or float16 Q, K, V, O and dO, its gradients in the same dtype,
 * against the varlen backward of float32 tensors holding the same values (as
 * test_half_backward_equals_float32_values), on 1 and 2 threads: the sequences' groups
 * run in one region (the half tensors need no stand-ins). */
static void test_half_varlen_backward_equals_float32_values(void **state)
{
    (void)state;
    const int saved = ta_get_num_threads();
    const int32_t cu_q[6] = {0, 5, 5, 77, 80, 150}, cu_k[6] = {0, 9, 12, 100, 100, 170};
    const int64_t H = 4, Hkv = 2, D = 32, qs[3] = {150, H, D}, ks[3] = {170, Hkv, D};
    const int64_t ls[2] = {H, 150};
    for (int k = 0; k < 4; k++) {
        const ta_dtype dt = k % 2 ? TA_F16 : TA_BF16;
        TA_CHECK_OK(ta_set_num_threads(1 + k / 2));
        ta_tensor x32[5], x16[5], lse, g[2][3];
        const int64_t *shapes[5] = {qs, ks, ks, qs, qs}; /* Q, K, V, dO, O */
        ta_sdpa_opts op = {.causal = TA_CAUSAL_BOTTOM_RIGHT, .cu_seqlens_q = cu_q,
                           .cu_seqlens_k = cu_k, .num_seqs = 5, .path = TA_SDPA_FUSED};
        TA_CHECK_OK(ta_tensor_empty(&lse, 2, ls));
        for (int i = 0; i < 5; i++) {
            TA_CHECK_OK(ta_tensor_empty(&x32[i], 3, shapes[i]));
            if (i < 4) TA_CHECK_OK(ta_randn(&x32[i], (uint64_t)(31 + i)));
            if (i == 4) {
                op.lse = &lse;
                TA_CHECK_OK(ta_sdpa(&x32[4], &x32[0], &x32[1], &x32[2], &op));
                op.lse = NULL;
            }
            ta_test_as_dtype(&x16[i], &x32[i], dt);
            TA_CHECK_OK(ta_tensor_copy(&x32[i], &x16[i]));
        }
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < 3; i++)
                TA_CHECK_OK(ta_tensor_empty_dtype(&g[r][i], r ? TA_F32 : dt, 3, shapes[i]));
            const ta_tensor *x = r ? x32 : x16;
            TA_CHECK_OK(ta_tensor_fill(&g[r][0], NAN));
            TA_CHECK_OK(ta_sdpa_backward(&g[r][0], &g[r][1], &g[r][2], &x[3], &x[0], &x[1],
                                         &x[2], &x[4], &lse, &op));
        }
        const bool dot = ta_active_isa() == TA_ISA_AVX512BF16 && dt == TA_BF16;
        for (int i = 0; i < 3; i++) {
            char ctx[96];
            snprintf(ctx, sizeof ctx, "varlen %s, %d thread(s): d%c", ta_dtype_name(dt),
                     1 + k / 2, "QKV"[i]);
            expect_grad(&g[0][i], &g[1][i], dot, ctx);
        }
        for (int i = 0; i < 5; i++) {
            ta_tensor_free(&x32[i]);
            ta_tensor_free(&x16[i]);
        }
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 3; i++) ta_tensor_free(&g[r][i]);
        ta_tensor_free(&lse);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* bfloat16 subnormals meet large values. AVX512_BF16's dot product reads bfloat16
 * subnormals as zero; the avx512bf16 kernels used it for Q K^T (and the backward's dO
 * V^T) whatever the values, so a key of subnormals against a large query scored 0:
 * Q all 2^126, even keys all 2^-127 (a bfloat16 subnormal), odd keys 0, D 32: the even
 * keys score 16 / sqrt(32), the odd ones 0, and with V 1 at even keys, 0 at odd ones, O
 * is e^s / (e^s + 1) = 0.9442 (it gave 0.5: every score 0). Few-row tiles (Lq 1, 4) and
 * tiles of many rows (Lq 64), on every ISA. Then the backward of bfloat16 tensors with
 * subnormal K and V under a large Q and dO equals that of float32 tensors holding the
 * same values. */
static void test_bf16_subnormals_against_large_values(void **state)
{
    (void)state;
    const int64_t D = 32, Lk = 64;
    const double s = 16.0 / sqrt(32.0), want = exp(s) / (exp(s) + 1.0);
    static const int64_t Lqs[3] = {1, 4, 64};
    for (int c = 0; c < 3; c++) {
        const int64_t Lq = Lqs[c];
        const int64_t qs[4] = {1, 1, Lq, D}, ks[4] = {1, 1, Lk, D};
        ta_tensor q, k, v, o;
        TA_CHECK_OK(ta_tensor_empty_dtype(&q, TA_BF16, 4, qs));
        TA_CHECK_OK(ta_tensor_fill(&q, 0x1p126f));
        TA_CHECK_OK(ta_tensor_zeros_dtype(&k, TA_BF16, 4, ks));
        TA_CHECK_OK(ta_tensor_zeros(&v, 4, ks));
        for (int64_t j = 0; j < Lk; j += 2)
            for (int64_t d = 0; d < D; d++) {
                ((uint16_t *)k.data)[j * D + d] = 0x0040; /* 2^-127 */
                ((float *)v.data)[j * D + d] = 1.0f;
            }
        TA_CHECK_OK(ta_tensor_empty(&o, 4, qs));
        TA_CHECK_OK(ta_sdpa(&o, &q, &k, &v, NULL));
        for (int64_t i = 0; i < Lq * D; i++)
            if (!(fabs(((float *)o.data)[i] - want) <= 1e-6))
                fail_msg("%s, Lq %lld: O[%lld] = %.7f, expected %.7f", ta_isa_name(ta_active_isa()),
                         (long long)Lq, (long long)i, ((float *)o.data)[i], want);
        ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v); ta_tensor_free(&o);
    }
    /* the backward: Q and dO large, K and V subnormal (bfloat16), against float32 */
    const int64_t Lq = 64, sh[4] = {1, 1, Lq, D}, ls[3] = {1, 1, Lq};
    ta_tensor x32[4], x16[4], o, lse, g32[3], g16[3];
    for (int t = 0; t < 4; t++) {
        TA_CHECK_OK(ta_tensor_empty(&x32[t], 4, sh));
        float *x = x32[t].data;
        for (int64_t i = 0; i < Lq * D; i++) {
            const float m = (float)(1 + (i * 7 + t) % 5) * ((i + t) % 3 ? 1.0f : -1.0f);
            x[i] = t == 0 ? m * 0x1p124f : t == 3 ? m * 0x1p120f : m * 0x1p-131f;
        }
        TA_CHECK_OK(ta_tensor_empty_dtype(&x16[t], TA_BF16, 4, sh));
        TA_CHECK_OK(ta_tensor_copy(&x16[t], &x32[t])); /* exact: 3 significant bits */
    }
    TA_CHECK_OK(ta_tensor_empty(&o, 4, sh));
    TA_CHECK_OK(ta_tensor_empty(&lse, 3, ls));
    ta_sdpa_opts op = {.lse = &lse};
    TA_CHECK_OK(ta_sdpa(&o, &x32[0], &x32[1], &x32[2], &op));
    op.lse = NULL;
    for (int g = 0; g < 3; g++) {
        TA_CHECK_OK(ta_tensor_empty(&g32[g], 4, sh));
        TA_CHECK_OK(ta_tensor_empty(&g16[g], 4, sh));
    }
    TA_CHECK_OK(ta_sdpa_backward(&g32[0], &g32[1], &g32[2], &x32[3], &x32[0], &x32[1], &x32[2],
                                 &o, &lse, &op));
    TA_CHECK_OK(ta_sdpa_backward(&g16[0], &g16[1], &g16[2], &x16[3], &x16[0], &x16[1], &x16[2],
                                 &o, &lse, &op));
    static const char *names[3] = {"dQ", "dK", "dV"};
    for (int g = 0; g < 3; g++) {
        const float *a = g32[g].data, *b = g16[g].data;
        double scale = 0.0, err = 0.0;
        for (int64_t i = 0; i < Lq * D; i++) {
            if (isfinite(a[i])) scale = fmax(scale, fabs(a[i])); /* a NaN or inf widens no bound */
            err = ta_test_worse(err, fabs((double)a[i] - b[i]));
        }
        if (!(err <= 1e-5 * scale))
            fail_msg("%s: %s of bfloat16 tensors differs from float32's by %g (scale %g)",
                     ta_isa_name(ta_active_isa()), names[g], err, scale);
        ta_tensor_free(&g32[g]);
        ta_tensor_free(&g16[g]);
    }
    for (int t = 0; t < 4; t++) {
        ta_tensor_free(&x32[t]);
        ta_tensor_free(&x16[t]);
    }
    ta_tensor_free(&o);
    ta_tensor_free(&lse);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_matches_pytorch),
        cmocka_unit_test(test_half_varlen_equals_dense),
        cmocka_unit_test(test_bf16_equals_float32_values),
        cmocka_unit_test(test_half_backward_equals_float32_values),
        cmocka_unit_test(test_half_varlen_backward_equals_float32_values),
        cmocka_unit_test(test_bf16_subnormals_against_large_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
