/* ta-test: all-isas
 * Variable-length batches (opts.cu_seqlens_q/k): ta_sdpa and ta_sdpa_backward on packed
 * sequences, on the reference and the fused (automatic) path,
 *   - against PyTorch: tests/fixtures/varlen.tafx (tools/fixtures_varlen.py), float64
 *     torch math of each sequence's dense problem: ragged lengths, empty sequences in
 *     every position, Lq_b != Lk_b, both causal alignments, GQA, Dv != D, scale, LSE,
 *     gradients; forward within 1e-5, gradients within 1e-4;
 *   - against the float64 oracle that copies each sequence into a dense problem
 *     (tests/support/sdpa_varlen_oracle.c) on random batches in three memory layouts
 *     (packed, head-major, q/k/v slices of one buffer), with long sequences that take
 *     the fused forward's key split, many tiny ones, and batches without queries or
 *     without sequences; every output element must be written (they start as NaN);
 *   - the same bits without opts->lse, and for 1, 2 and 3 threads;
 *   - the fused forward's bits (O, LSE) and the fused backward's (dQ, dK, dV) those of
 *     each sequence run alone as a dense call on views of the same tensors, where the
 *     sequences run together. */
#include "ta_test.h"

#include "fixture_cases.h"
#include "varlen_batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL_FWD 1e-5
#define TOL_GRAD 1e-4

static const char *path_name(ta_sdpa_path p) { return p == TA_SDPA_REFERENCE ? "reference" : "auto"; }

/* ------------------------------------------------------------ fixtures */

typedef struct tally {
    int cases, empty_seqs, empty_rows, top_left, bottom_right, gqa, layouts[2];
} tally;

static void spec_of(ta_test_varlen_spec *s, const char *meta, const char *name)
{
    memset(s, 0, sizeof *s);
    s->name = name;
    int64_t shape[4], lq[TA_TEST_VARLEN_MAX], lk[TA_TEST_VARLEN_MAX];
    assert_int_equal(ta_fixture_meta_ints(meta, "shape", shape, 4), 4);
    s->n = ta_fixture_meta_ints(meta, "lengths_q", lq, TA_TEST_VARLEN_MAX);
    assert_int_equal(ta_fixture_meta_ints(meta, "lengths_k", lk, TA_TEST_VARLEN_MAX), s->n);
    for (int i = 0; i < s->n; i++) {
        s->lq[i] = (int32_t)lq[i];
        s->lk[i] = (int32_t)lk[i];
    }
    s->H = shape[0], s->Hkv = shape[1], s->D = shape[2], s->Dv = shape[3];
    char buf[64];
    ta_fixture_meta_get(meta, "scale", buf, sizeof buf);
    s->scale = (float)strtod(buf, NULL);
    ta_fixture_meta_get(meta, "causal", buf, sizeof buf);
    s->causal = !strcmp(buf, "top_left") ? TA_CAUSAL_TOP_LEFT
                : !strcmp(buf, "bottom_right") ? TA_CAUSAL_BOTTOM_RIGHT : TA_CAUSAL_NONE;
}

/* A record into a tensor of the batch (any layout). */
static void load_into(ta_tensor *dst, const ta_fixture_file *f, const char *c, const char *role)
{
    ta_tensor t;
    TA_CHECK_OK(ta_fixture_tensor(&t, ta_fixture_need(f, c, role)));
    TA_CHECK_OK(ta_tensor_copy(dst, &t));
    ta_tensor_free(&t);
}

static void fixture_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    tally *t = ctx;
    const char *meta = ta_fixture_case_meta(f, c);
    ta_test_varlen_spec s;
    spec_of(&s, meta, c);
    s.layout = t->cases % 2 ? TA_VARLEN_HEAD_MAJOR : TA_VARLEN_PACKED;
    t->layouts[t->cases % 2]++;
    t->cases++;
    char buf[32];
    ta_fixture_meta_get(meta, "empty_rows", buf, sizeof buf);
    t->empty_rows += atoi(buf) > 0;
    t->top_left += s.causal == TA_CAUSAL_TOP_LEFT;
    t->bottom_right += s.causal == TA_CAUSAL_BOTTOM_RIGHT;
    t->gqa += s.H != s.Hkv;
    for (int i = 0; i < s.n; i++)
        if (!s.lq[i] || !s.lk[i]) {
            t->empty_seqs++;
            break;
        }

    ta_test_varlen_batch b;
    ta_test_varlen_make(&b, &s, 1);
    /* the file's offsets are the batch's */
    const ta_fixture_record *rq = ta_fixture_need(f, c, "cu_seqlens_q"),
                            *rk = ta_fixture_need(f, c, "cu_seqlens_k");
    assert_int_equal(rq->dtype, TA_FIXTURE_I32);
    assert_int_equal(rq->numel, s.n + 1);
    assert_memory_equal(rq->data, b.cq, sizeof(int32_t) * (size_t)(s.n + 1));
    assert_memory_equal(rk->data, b.ck, sizeof(int32_t) * (size_t)(s.n + 1));
    load_into(&b.q, f, c, "q");
    load_into(&b.k, f, c, "k");
    load_into(&b.v, f, c, "v");
    load_into(&b.dout, f, c, "dout");
    /* the backward gets the reference's O and LSE rounded to float32 */
    ta_tensor O, L;
    TA_CHECK_OK(ta_fixture_tensor(&O, ta_fixture_need(f, c, "out")));
    TA_CHECK_OK(ta_fixture_tensor(&L, ta_fixture_need(f, c, "lse")));
    for (int pi = 0; pi < 2; pi++) {
        ta_sdpa_path path = pi ? TA_SDPA_AUTO : TA_SDPA_REFERENCE;
        TA_CHECK_OK(ta_tensor_fill(&b.o, NAN));
        TA_CHECK_OK(ta_tensor_fill(&b.lse, NAN));
        TA_CHECK_OK(ta_test_varlen_run(&b, path, 0));
        ta_fixture_expect_close(c, path_name(path), &b.o, ta_fixture_need(f, c, "out"), 0.0,
                                TOL_FWD);
        ta_fixture_expect_close(c, "lse", &b.lse, ta_fixture_need(f, c, "lse"), 1.0, TOL_FWD);

        ta_sdpa_opts o = b.opts;
        o.path = path;
        o.lse = NULL;
        ta_tensor *g[3] = {&b.dq, &b.dk, &b.dv};
        for (int i = 0; i < 3; i++) TA_CHECK_OK(ta_tensor_fill(g[i], NAN));
        TA_CHECK_OK(ta_sdpa_backward(&b.dq, &b.dk, &b.dv, &b.dout, &b.q, &b.k, &b.v, &O, &L, &o));
        const char *roles[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++)
            ta_fixture_expect_close(c, roles[i], g[i], ta_fixture_need(f, c, roles[i]), 0.0,
                                    TOL_GRAD);
    }
    ta_tensor_free(&O);
    ta_tensor_free(&L);
    ta_test_varlen_free(&b);
}

static void test_varlen_matches_pytorch(void **state)
{
    (void)state;
    tally t = {0};
    int n = ta_fixture_cases_run("varlen.tafx", NULL, NULL, fixture_case, &t);
    assert_int_equal(n, t.cases);
    /* what the file must hold */
    assert_true(t.cases >= 10);
    assert_true(t.empty_seqs >= 5);
    assert_true(t.empty_rows >= 2);
    assert_true(t.top_left >= 2 && t.bottom_right >= 3);
    assert_true(t.gqa >= 3);
}

/* ------------------------------------------------------------- oracle */

static const ta_test_varlen_spec fixed_specs[] = {
    {"ragged self-attention, one qkv buffer", 5, {5, 0, 17, 1, 33}, {5, 0, 17, 1, 33},
     3, 3, 16, 16, TA_CAUSAL_TOP_LEFT, 0.0f, TA_VARLEN_QKV},
    {"ragged GQA qkv buffer, bottom right", 5, {33, 1, 0, 17, 5}, {33, 1, 0, 17, 5},
     4, 2, 8, 8, TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_QKV},
    {"decode against long keys (key split)", 3, {1, 2, 1}, {1100, 3, 2050},
     4, 1, 32, 16, TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED},
    {"prefill, head-major", 3, {130, 0, 64}, {130, 7, 200},
     2, 2, 8, 12, TA_CAUSAL_BOTTOM_RIGHT, 0.5f, TA_VARLEN_HEAD_MAJOR},
    {"top-left with more queries than keys", 4, {9, 20, 3, 0}, {4, 20, 0, 6},
     2, 1, 8, 8, TA_CAUSAL_TOP_LEFT, 0.0f, TA_VARLEN_HEAD_MAJOR},
    {"many tiny sequences", 40,
     {1, 0, 3, 2, 4, 1, 1, 0, 0, 2, 3, 4, 4, 1, 2, 0, 3, 1, 2, 2,
      0, 4, 1, 3, 2, 1, 0, 1, 4, 2, 3, 3, 1, 0, 2, 4, 1, 2, 0, 3},
     {2, 1, 3, 0, 4, 1, 2, 0, 3, 2, 3, 1, 4, 1, 2, 2, 3, 0, 2, 4,
      1, 4, 1, 3, 0, 1, 2, 1, 4, 2, 3, 3, 0, 1, 2, 4, 1, 2, 3, 3},
     4, 2, 8, 4, TA_CAUSAL_NONE, 0.0f, TA_VARLEN_PACKED},
    /* 64 sequences x 8 kv heads: the forward's and the backward's claims take several
     * short groups at a time (plan_grab, ta_claim_bundle), across sequences of any length */
    {"many short sequences, many heads", 64,
     {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5,
      0, 2, 8, 8, 4, 1, 9, 7, 1, 6, 9, 3, 9, 9, 3, 7, 5, 1, 0, 5, 8, 2, 0, 9, 7, 4, 9, 4, 4, 5, 9, 2},
     {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5,
      0, 2, 8, 8, 4, 1, 9, 7, 1, 6, 9, 3, 9, 9, 3, 7, 5, 1, 0, 5, 8, 2, 0, 9, 7, 4, 9, 4, 4, 5, 9, 2},
     8, 8, 8, 8, TA_CAUSAL_TOP_LEFT, 0.0f, TA_VARLEN_PACKED},
    {"keys only: no query anywhere", 3, {0, 0, 0}, {3, 0, 5}, 2, 2, 8, 8,
     TA_CAUSAL_NONE, 0.0f, TA_VARLEN_PACKED},
    {"queries only: no key anywhere", 2, {3, 4}, {0, 0}, 2, 1, 8, 8,
     TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED},
    {"no sequences", 0, {0}, {0}, 2, 2, 8, 8, TA_CAUSAL_NONE, 0.0f, TA_VARLEN_PACKED},
    /* sequences that run together (sdpa_forward_fused.c) beside ones that run alone (the
     * second and tenth split their keys), empty ones between them */
    {"prefill of mixed lengths, together", 12, {0, 3, 50, 1, 130, 0, 64, 7, 200, 2, 33, 97},
     {5, 1500, 50, 40, 130, 0, 64, 300, 200, 1100, 0, 97},
     4, 2, 16, 16, TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED},
    /* rows 2 KiB apart: the sequences of more than 384 keys read V through each thread's
     * copy (plan_kv_copy, sdpa_forward_fused.c), the short one in place, in one region */
    {"long rows far apart, V copied", 3, {60, 400, 2}, {420, 400, 100},
     8, 8, 64, 64, TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED},
};

/* 640 sequences of 1 - 2 queries and 1 - 40 keys, 2 kv heads side by side: every plan a
 * decode sweep (on AVX2 and AVX-512), so that the forward's claims take several units
 * each on 1 and 2 threads (job_bundle in sdpa_forward_fused.c); with the fixed specs,
 * what every test below runs. */
static ta_test_varlen_spec many_decodes(void)
{
    ta_test_varlen_spec s = {"640 decode sweeps in one region", TA_TEST_VARLEN_MAX, {0}, {0},
                             4, 2, 16, 16, TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED};
    for (int i = 0; i < s.n; i++) {
        s.lq[i] = 1 + i % 2;
        s.lk[i] = 1 + (i * 7) % 40;
    }
    return s;
}

static size_t nspecs(void) { return sizeof fixed_specs / sizeof *fixed_specs + 1; }

static const ta_test_varlen_spec *spec(size_t i)
{
    static ta_test_varlen_spec many;
    if (i < sizeof fixed_specs / sizeof *fixed_specs) return &fixed_specs[i];
    if (many.n == 0) many = many_decodes();
    return &many;
}

/* Forward (the library's O and LSE) and backward (given that O) against the oracle. */
static void check_oracle(ta_test_varlen_batch *b, ta_sdpa_path path)
{
    const ta_test_varlen_spec *s = &b->s;
    TA_CHECK_OK(ta_test_varlen_run(b, path, 1));
    double *q = ta_test_to_f64(&b->q), *k = ta_test_to_f64(&b->k), *v = ta_test_to_f64(&b->v);
    double *dout = ta_test_to_f64(&b->dout), *o = ta_test_to_f64(&b->o);
    size_t nq = (size_t)(b->Tq * s->H + 1), nk = (size_t)(b->Tk * s->Hkv + 1);
    double *wo = malloc(sizeof(double) * nq * (size_t)s->Dv), *wl = malloc(sizeof(double) * nq);
    double *wq = malloc(sizeof(double) * nq * (size_t)s->D);
    double *wk = malloc(sizeof(double) * nk * (size_t)s->D);
    double *wv = malloc(sizeof(double) * nk * (size_t)s->Dv);
    ta_test_varlen_forward64(&b->oracle, q, k, v, wo, wl);
    ta_test_varlen_backward64(&b->oracle, q, k, v, o, dout, wq, wk, wv);
    const ta_tensor *got[5] = {&b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    const double *want[5] = {wo, wl, wq, wk, wv}, rel[5] = {0, 1, 0, 0, 0};
    const double tol[5] = {TOL_FWD, TOL_FWD, TOL_GRAD, TOL_GRAD, TOL_GRAD};
    const char *names[5] = {"O", "LSE", "dQ", "dK", "dV"};
    for (int i = 0; i < 5; i++) {
        int64_t bad;
        double e = ta_test_max_err(got[i], want[i], rel[i], tol[i], &bad);
        if (!(e <= tol[i]))
            fail_msg("%s (%s): %s differs by %.3g (first bad element %lld)", s->name,
                     path_name(path), names[i], e, (long long)bad);
    }
    double *all[] = {q, k, v, dout, o, wo, wl, wq, wk, wv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

static void test_varlen_matches_oracle(void **state)
{
    (void)state;
    for (size_t i = 0; i < nspecs(); i++) {
        ta_test_varlen_batch b;
        ta_test_varlen_make(&b, spec(i), 100 + 10 * i);
        check_oracle(&b, TA_SDPA_REFERENCE);
        ta_test_varlen_free(&b);
        ta_test_varlen_make(&b, spec(i), 100 + 10 * i); /* outputs NaN again */
        check_oracle(&b, TA_SDPA_AUTO);
        ta_test_varlen_free(&b);
    }
}

/* Without opts->lse the outputs are the same bits. */
static void test_varlen_without_lse(void **state)
{
    (void)state;
    for (int path = 0; path < 2; path++) {
        ta_test_varlen_batch b;
        ta_test_varlen_make(&b, spec(2), 11);
        ta_sdpa_path pa = path ? TA_SDPA_AUTO : TA_SDPA_REFERENCE;
        TA_CHECK_OK(ta_test_varlen_run(&b, pa, 0));
        int64_t n;
        float *want = ta_test_varlen_outputs(&b, &n);
        ta_sdpa_opts o = b.opts;
        o.path = pa;
        o.lse = NULL;
        TA_CHECK_OK(ta_tensor_fill(&b.o, NAN));
        TA_CHECK_OK(ta_sdpa(&b.o, &b.q, &b.k, &b.v, &o));
        float *got = ta_test_varlen_outputs(&b, &n);
        assert_memory_equal(got, want, sizeof(float) * (size_t)ta_tensor_numel(&b.o));
        free(got);
        free(want);
        ta_test_varlen_free(&b);
    }
}

/* ------------------------------------------------- each sequence alone */

/* Rows t0 .. t0 + L of a [T, Hx, X] view as the [1, Hx, L, X] view of one sequence (a
 * [H, T] LSE as [1, H, L]). */
static ta_tensor rows_of(const ta_tensor *t, int64_t t0, int64_t L)
{
    ta_tensor v = *t;
    if (t->ndim == 2) {
        v.data = (float *)t->data + t0 * t->stride[1];
        v.ndim = 3;
        v.shape[0] = 1, v.shape[1] = t->shape[0], v.shape[2] = L;
        v.stride[0] = 0, v.stride[1] = t->stride[0], v.stride[2] = t->stride[1];
        return v;
    }
    v.data = (float *)t->data + t0 * t->stride[0];
    v.ndim = 4;
    v.shape[0] = 1, v.shape[1] = t->shape[1], v.shape[2] = L, v.shape[3] = t->shape[2];
    v.stride[0] = 0, v.stride[1] = t->stride[1], v.stride[2] = t->stride[0];
    v.stride[3] = t->stride[2];
    return v;
}

/* Each float of a [1, Hx, L, X] view bitwise that of `want` (the same shape). */
static void expect_view_bits(const ta_tensor *got, const ta_tensor *want, const char *what,
                             const char *spec, int nt, int seq)
{
    for (int64_t h = 0; h < got->shape[1]; h++)
        for (int64_t r = 0; r < got->shape[2]; r++)
            for (int64_t x = 0; x < got->shape[3]; x++) {
                const float a = ((const float *)got->data)[h * got->stride[1] + r * got->stride[2] +
                                                           x * got->stride[3]];
                const float g = ((const float *)want->data)[h * want->stride[1] +
                                                            r * want->stride[2] + x * want->stride[3]];
                if (memcmp(&a, &g, sizeof a))
                    fail_msg("%s, %d threads: sequence %d %s[%lld, %lld, %lld] %.9g, alone %.9g",
                             spec, nt, seq, what, (long long)h, (long long)r, (long long)x, a, g);
            }
}

/* The fused forward of a batch (its sequences together where they can, sdpa_seqs.c)
 * gives the bits of each sequence run alone as a dense call on the same views, O and
 * LSE, on 1 and 3 threads: whichever sequences run together, in whatever order the
 * threads take their work. */
static void test_varlen_bitwise_as_each_sequence_alone(void **state)
{
    (void)state;
    const int saved = ta_get_num_threads();
    for (int nt = 1; nt <= 3; nt += 2)
        for (size_t i = 0; i < nspecs(); i++) {
            TA_CHECK_OK(ta_set_num_threads(nt));
            ta_test_varlen_batch b;
            ta_test_varlen_make(&b, spec(i), 31 + i);
            ta_sdpa_opts o = b.opts;
            o.path = TA_SDPA_FUSED;
            TA_CHECK_OK(ta_sdpa(&b.o, &b.q, &b.k, &b.v, &o));
            for (int s = 0; s < spec(i)->n; s++) {
                const int64_t lq = b.cq[s + 1] - b.cq[s], lk = b.ck[s + 1] - b.ck[s];
                if (lq == 0) continue;
                ta_tensor q = rows_of(&b.q, b.cq[s], lq), k = rows_of(&b.k, b.ck[s], lk);
                ta_tensor v = rows_of(&b.v, b.ck[s], lk), want = rows_of(&b.o, b.cq[s], lq);
                ta_tensor wl = rows_of(&b.lse, b.cq[s], lq), out, lse;
                TA_CHECK_OK(ta_tensor_empty(&out, 4, want.shape));
                TA_CHECK_OK(ta_tensor_empty(&lse, 3, wl.shape));
                ta_sdpa_opts d = {.causal = o.causal, .scale = o.scale, .path = TA_SDPA_FUSED,
                                  .lse = &lse};
                TA_CHECK_OK(ta_sdpa(&out, &q, &k, &v, &d));
                expect_view_bits(&want, &out, "O", spec(i)->name, nt, s);
                for (int64_t h = 0; h < out.shape[1]; h++)
                    for (int64_t r = 0; r < lq; r++) {
                        const float la = ((const float *)lse.data)[h * lq + r];
                        const float lg = ((const float *)wl.data)[h * wl.stride[1] + r * wl.stride[2]];
                        if (memcmp(&la, &lg, sizeof(float)))
                            fail_msg("%s, %d threads: sequence %d LSE[%lld, %lld] %.9g, alone %.9g",
                                     spec(i)->name, nt, s, (long long)h, (long long)r, lg, la);
                    }
                ta_tensor_free(&out);
                ta_tensor_free(&lse);
            }
            ta_test_varlen_free(&b);
        }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* The fused backward of a batch (its sequences in plan "group" together, the others
 * alone: sdpa_backward_fused.c) gives the bits of each sequence's dense backward on the
 * same views, dQ, dK and dV, on 1 and 3 threads. */
static void test_varlen_backward_bitwise_as_each_sequence_alone(void **state)
{
    (void)state;
    const int saved = ta_get_num_threads();
    for (int nt = 1; nt <= 3; nt += 2)
        for (size_t i = 0; i < nspecs(); i++) {
            TA_CHECK_OK(ta_set_num_threads(nt));
            ta_test_varlen_batch b;
            ta_test_varlen_make(&b, spec(i), 41 + i);
            TA_CHECK_OK(ta_test_varlen_run(&b, TA_SDPA_FUSED, 1));
            for (int s = 0; s < spec(i)->n; s++) {
                const int64_t q0 = b.cq[s], k0 = b.ck[s];
                const int64_t lq = b.cq[s + 1] - q0, lk = b.ck[s + 1] - k0;
                if (lq == 0 || lk == 0) continue; /* (the oracle test has those) */
                const ta_tensor q = rows_of(&b.q, q0, lq), k = rows_of(&b.k, k0, lk);
                const ta_tensor v = rows_of(&b.v, k0, lk), o = rows_of(&b.o, q0, lq);
                const ta_tensor dout = rows_of(&b.dout, q0, lq), lse = rows_of(&b.lse, q0, lq);
                const ta_tensor wq = rows_of(&b.dq, q0, lq), wk = rows_of(&b.dk, k0, lk);
                const ta_tensor wv = rows_of(&b.dv, k0, lk);
                ta_tensor dq, dk, dv;
                TA_CHECK_OK(ta_tensor_empty(&dq, 4, wq.shape));
                TA_CHECK_OK(ta_tensor_empty(&dk, 4, wk.shape));
                TA_CHECK_OK(ta_tensor_empty(&dv, 4, wv.shape));
                ta_sdpa_opts d = {.causal = spec(i)->causal, .scale = spec(i)->scale,
                                  .path = TA_SDPA_FUSED};
                TA_CHECK_OK(ta_sdpa_backward(&dq, &dk, &dv, &dout, &q, &k, &v, &o, &lse, &d));
                expect_view_bits(&wq, &dq, "dQ", spec(i)->name, nt, s);
                expect_view_bits(&wk, &dk, "dK", spec(i)->name, nt, s);
                expect_view_bits(&wv, &dv, "dV", spec(i)->name, nt, s);
                ta_tensor_free(&dq);
                ta_tensor_free(&dk);
                ta_tensor_free(&dv);
            }
            ta_test_varlen_free(&b);
        }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

/* A batch without a query row (every Lq_b 0, or no heads) on the fused path, in a
 * workspace of exactly the queried size: nothing to compute, and the backward's dK, dV
 * those of the float64 oracle (zeros). Until session 35 the forward (and, without heads,
 * the backward) ran the joint region's setup anyway, which the size query had given no
 * bytes: TA_EINTERNAL "scratch smaller than planned" (in the library's own scratch too,
 * on a first call). */
static void test_varlen_without_query_rows_in_exact_workspace(void **state)
{
    (void)state;
    static const ta_test_varlen_spec specs[] = {
        {"no query anywhere", 3, {0, 0, 0}, {3, 0, 5}, 2, 2, 8, 8, TA_CAUSAL_NONE, 0.0f,
         TA_VARLEN_PACKED},
        {"two sequences of no query", 2, {0, 0}, {10, 7}, 4, 1, 16, 8,
         TA_CAUSAL_BOTTOM_RIGHT, 0.0f, TA_VARLEN_PACKED},
        {"no heads", 2, {3, 4}, {5, 2}, 0, 0, 8, 8, TA_CAUSAL_NONE, 0.0f, TA_VARLEN_PACKED},
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
        for (int path = 0; path < 2; path++) {
            const ta_test_varlen_spec *s = &specs[i];
            ta_test_varlen_batch b;
            ta_test_varlen_make(&b, s, 60 + i);
            ta_sdpa_opts o = b.opts;
            o.path = path ? TA_SDPA_FUSED : TA_SDPA_AUTO;
            size_t n = 0;
            TA_CHECK_OK(ta_sdpa_workspace_size(&n, &b.o, &b.q, &b.k, &b.v, &o));
            void *ws = malloc(n + 1);
            assert_non_null(ws);
            o.workspace = (ta_workspace){ws, n};
            if (ta_sdpa(&b.o, &b.q, &b.k, &b.v, &o))
                fail_msg("%s (%s): forward: %s", s->name, path ? "fused" : "auto", ta_last_error());
            o.lse = NULL;
            TA_CHECK_OK(ta_sdpa_backward_workspace_size(&n, &b.dq, &b.dk, &b.dv, &b.dout, &b.q,
                                                        &b.k, &b.v, &b.o, &b.lse, &o));
            free(ws);
            ws = malloc(n + 1);
            assert_non_null(ws);
            o.workspace = (ta_workspace){ws, n};
            if (ta_sdpa_backward(&b.dq, &b.dk, &b.dv, &b.dout, &b.q, &b.k, &b.v, &b.o, &b.lse,
                                 &o))
                fail_msg("%s (%s): backward: %s", s->name, path ? "fused" : "auto", ta_last_error());
            free(ws);
            if (s->Hkv == 0) { /* every gradient is empty (and the oracle divides by Hkv) */
                ta_test_varlen_free(&b);
                continue;
            }
            double *q = ta_test_to_f64(&b.q), *k = ta_test_to_f64(&b.k);
            double *v = ta_test_to_f64(&b.v), *dout = ta_test_to_f64(&b.dout);
            double *oo = ta_test_to_f64(&b.o);
            const size_t nq = (size_t)(b.Tq * s->H + 1), nk = (size_t)(b.Tk * s->Hkv + 1);
            double *wq = malloc(sizeof(double) * nq * (size_t)s->D);
            double *wk = malloc(sizeof(double) * nk * (size_t)s->D);
            double *wv = malloc(sizeof(double) * nk * (size_t)s->Dv);
            ta_test_varlen_backward64(&b.oracle, q, k, v, oo, dout, wq, wk, wv);
            const ta_tensor *got[3] = {&b.dq, &b.dk, &b.dv};
            const double *want[3] = {wq, wk, wv};
            for (int t = 0; t < 3; t++) {
                int64_t bad;
                const double e = ta_test_max_err(got[t], want[t], 0, TOL_GRAD, &bad);
                if (!(e <= TOL_GRAD))
                    fail_msg("%s (%s): gradient %d differs by %.3g (element %lld)", s->name,
                             path ? "fused" : "auto", t, e, (long long)bad);
            }
            double *all[] = {q, k, v, dout, oo, wq, wk, wv};
            for (size_t a = 0; a < sizeof all / sizeof *all; a++) free(all[a]);
            ta_test_varlen_free(&b);
        }
}

/* -------------------------------------------------------- determinism */

static void test_varlen_bitwise_for_any_thread_count(void **state)
{
    (void)state;
    const int saved = ta_get_num_threads();
    const size_t picks[3] = {1, 2, 5}; /* qkv GQA bottom-right, key split, many tiny */
    for (size_t pi = 0; pi < 3; pi++)
        for (int path = 0; path < 2; path++) {
            float *first = NULL;
            int64_t n0 = 0;
            for (int nt = 1; nt <= 3; nt++) {
                TA_CHECK_OK(ta_set_num_threads(nt));
                ta_test_varlen_batch b;
                ta_test_varlen_make(&b, spec(picks[pi]), 7);
                TA_CHECK_OK(ta_test_varlen_run(&b, path ? TA_SDPA_AUTO : TA_SDPA_REFERENCE, 1));
                int64_t n;
                float *x = ta_test_varlen_outputs(&b, &n);
                if (!first) {
                    first = x;
                    n0 = n;
                } else {
                    assert_int_equal(n, n0);
                    if (memcmp(first, x, sizeof(float) * (size_t)n))
                        fail_msg("%s (%s): %d threads differ from 1", spec(picks[pi])->name,
                                 path ? "auto" : "reference", nt);
                    free(x);
                }
                ta_test_varlen_free(&b);
            }
            free(first);
        }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varlen_matches_pytorch),
        cmocka_unit_test(test_varlen_matches_oracle),
        cmocka_unit_test(test_varlen_backward_bitwise_as_each_sequence_alone),
        cmocka_unit_test(test_varlen_without_lse),
        cmocka_unit_test(test_varlen_bitwise_for_any_thread_count),
        cmocka_unit_test(test_varlen_bitwise_as_each_sequence_alone),
        cmocka_unit_test(test_varlen_without_query_rows_in_exact_workspace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
