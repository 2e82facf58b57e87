/* ta-test: all-isas -- The micro-kernels of the table TA_ARCH selects
 * (ta_kernels_active(); tests/run_isa runs this once per ISA of the table and reports an
 * ISA the CPU lacks as skipped), called directly on odd sizes and every tail case
 * (contracts: docs/kernels.md), against two references: a float64 oracle written here in
 * plain loops (independent of the kernel templates, which the scalar kernels are
 * instances of too: the scalar run checks them against it as well), and the scalar
 * kernels (ta_kernels_for(TA_ISA_SCALAR)). Every operand ends at an mprotect-ed guard
 * page, so a tail that reads or writes one element too far crashes; gaps between rows
 * hold a sentinel that must survive, so a store past a row's end inside the buffer
 * fails too.
 *
 * Bounds against the float64 oracle (u = 2^-24, the float32 unit roundoff). A float32
 * sum of n products, in any order, with or without fused multiply-adds, is within
 * gamma_n = n u / (1 - n u) <= (n + 1) u times the sum of the terms' magnitudes. An exp
 * of the kernels is within 1.3 ulp <= 2.6 u |y| of exp where y is normal, 2^-149
 * where it is denormal (docs/kernels.md); an argument x rounded once (|dx| <= u |x|)
 * adds |x| u relative:
 *   sgemm_ukr          (k + 4) u (|alpha| sum_p |a b| + |beta c|)
 *   attn_qk            (d + 1) u sum_p |q k|; a score a rowk bound skips: as it was, or right
 *   attn_qk_rows       (d + 1) u sum_p |q k| (another summation order); rows >= mq untouched
 *   attn_softmax       m exactly; p, alpha: (|x| + 3) u y + 2^-148 (x = s - m', y = e^x);
 *                      l: sum over its terms t (l alpha, every p) of (|x_t| + nk + 6) u t
 *                      + (nk + 1) 2^-148
 *   attn_pv            (nk + 2) u (|o alpha| + sum_j |p v|)
 *   attn_exp           3 u exp(x) + 2^-149; -inf -> 0, NaN -> NaN, 0 -> 1 exactly
 *   attn_bwd_gemm      (k + 2) u (|c| + sum_p |a b|)
 *   attn_bwd_dsoftmax  x = s scale - lse: P: (|s scale| + |x| + 3) u P + 2^-148;
 *                      dS: (|s scale| + |x| + 5) u |dS| + (1 + |dp - di|) 2^-148;
 *                      lse = -inf rows exactly 0
 * Bounds against the scalar kernels (the same terms in the same order; the SIMD kernels
 * fuse each multiply-add where the scalar ones round twice, so two results of k terms
 * differ by at most about 2 k u times the sum of the terms' magnitudes, and two exps by
 * 2.6 ulp):
 *   sgemm_ukr          (2k + 6) u (|alpha| sum_p |a b| + |beta c|)
 *   attn_qk            (2d + 2) u sum_p |q k|
 *   attn_qk_rows       (2d + 2) u sum_p |q k| (against scalar attn_qk_rows and attn_qk)
 *   attn_softmax       p, alpha: 6 u |p| + 2^-148 (denormals); m exactly; l (nk + 16) u l
 *   attn_pv            (2nk + 4) u (|o alpha| + sum_j |p v|)
 *   attn_exp           6 u |y| + 2^-148; -inf -> 0, NaN -> NaN, 0 -> 1 exactly
 *   attn_bwd_gemm      (2k + 2) u (|c| + sum_p |a b|)
 *   attn_bwd_dsoftmax  P: 6 u |P| + 2^-148; dS: 8 u |dS| + 2^-148; lse = -inf rows 0.
 * The few-row kernels on typed rows (attn_qk_rows_kv, attn_pv_rows_kv, float32, float16
 * and bfloat16 K / V rows; the oracle widens the same half values exactly):
 *   attn_qk_rows_kv    oracle (d + 1) u sum_p |q k|; scalar kernel (2d + 2) u sum_p |q k|
 *   attn_qk_rows_bf16dot (avx512bf16 only; bfloat16 q too) oracle (d + 2) u scale sum_p |q k|
 *   attn_qk_bf16dot    (the same) oracle (d + 2) u scale sum_p |q k|; rowk as attn_qk's
 *   attn_bwd_gemm_bf16dot (the same) oracle (k + 2) u sum_p |a b|; column bounds nhi
 *   attn_pv_rows_kv    bitwise the table's attn_pv on the widened rows; oracle as attn_pv
 *   attn_softmax_rows  m, s, alpha bitwise the table's attn_softmax; l as attn_softmax's
 *                      bound against the oracle. */
#include "ta_test.h"

#include "core/dtype.h"
#include "guard.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U 0x1p-24
#define DENORMAL_SLACK 0x1p-148
#define SENTINEL 12345.0f

static char where[200]; /* the case being run, for failure messages */

static uint64_t rng = 0x9E3779B97F4A7C15u;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 23) - 1.0f;
}

static int32_t irand(int64_t n) /* uniform in [0, n) */
{
    frand();
    return (int32_t)((rng >> 11) % (uint64_t)n);
}

/* Guard-page buffers of one case, released together. */
typedef struct arena {
    ta_guard g[8];
    int n;
} arena;

/* n floats (at least one) ending at a guard page, each set to fill (NAN: random). */
static float *gfloats(arena *a, int64_t n, float fill)
{
    assert_true(a->n < 8);
    float *p = ta_guard_floats(&a->g[a->n++], (size_t)(n > 0 ? n : 1));
    assert_non_null(p);
    for (int64_t i = 0; i < (n > 0 ? n : 1); i++) p[i] = isnan(fill) ? frand() : fill;
    return p;
}

static void arena_release(arena *a)
{
    for (int i = 0; i < a->n; i++) ta_guard_release(&a->g[i]);
    a->n = 0;
}

static float *copy_of(const float *p, int64_t n)
{
    float *c = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(c);
    if (n > 0) memcpy(c, p, sizeof(float) * (size_t)n);
    return c;
}

/* got against want: the float64 oracle's value or the scalar kernel's. */
static void expect_near(const char *ref_name, const char *what, int64_t i, float got,
                        double want, double bound)
{
    if ((double)got == want || (isnan(got) && isnan(want))) return;
    double d = fabs((double)got - want);
    if (!(d <= bound))
        fail_msg("%s: %s[%lld] = %.9g, the %s gives %.9g (|diff| %.3g > bound %.3g)", where,
                 what, (long long)i, (double)got, ref_name, want, d, bound);
}
#define EXPECT_ORACLE(what, i, got, want, bound) expect_near("float64 oracle", what, i, got, want, bound)
#define EXPECT_SCALAR(what, i, got, want, bound) expect_near("scalar kernel", what, i, got, want, bound)

/* The bound on a float32 exp whose argument carried an error of arg_u u relative to
 * the exp: (arg_u + 3) u y + 2^-148 for y = exp(x) exactly (2^-148 alone for y 0 or NaN). */
static double exp_bound(double arg_u, double y)
{
    return y > 0.0 ? (arg_u + 3.0) * U * y + DENORMAL_SLACK : DENORMAL_SLACK;
}

/* The table under test (TA_ARCH's choice, or the best this CPU runs); *ref: the scalar
 * one. Fails when TA_ARCH names an ISA and the library runs another. */
static const ta_kernels *tested(const ta_kernels **ref)
{
    const ta_kernels *k = ta_kernels_active();
    const char *arch = getenv("TA_ARCH");
    assert_non_null(k);
    if (arch && *arch && strcmp(arch, k->name) != 0)
        fail_msg("TA_ARCH=%s, but the active kernel table is %s (%s)", arch, k->name,
                 ta_kernels_init_error() ? ta_kernels_init_error() : "no init error");
    *ref = ta_kernels_for(TA_ISA_SCALAR);
    assert_non_null(*ref);
    assert_int_equal((*ref)->isa, TA_ISA_SCALAR);
    return k;
}

/* ---------------------------------------------------------------- tables */

/* The tested table and the scalar one are built and pass the limits (and no table
 * failed them); the check rejects a table over them. */
static void test_tables_meet_their_limits(void **state)
{
    (void)state;
    const char *err = ta_kernels_init_error();
    if (err) fail_msg("%s", err);
    char why[160];
    const ta_kernels *both[2];
    both[0] = tested(&both[1]);
    for (int t = 0; t < 2; t++) {
        const ta_kernels *k = both[t];
        assert_string_equal(k->name, ta_isa_name(k->isa));
        if (ta_kernels_check(k, why, sizeof why) != 0) fail_msg("%s: %s", k->name, why);
        ta_kernels bad = *k;
        bad.sgemm_nr = TA_SGEMM_TILE_MAX / bad.sgemm_mr + 1;
        bad.sgemm_nc = bad.sgemm_nr;
        assert_int_equal(ta_kernels_check(&bad, why, sizeof why), -1);
        assert_non_null(strstr(why, "TA_SGEMM_TILE_MAX"));
        bad = *k;
        bad.attn_mq = bad.attn_vl * bad.attn_pr + 1;
        assert_int_equal(ta_kernels_check(&bad, why, sizeof why), -1);
        bad = *k;
        bad.attn_pv = NULL;
        assert_int_equal(ta_kernels_check(&bad, why, sizeof why), -1);
        bad = *k;
        bad.attn_qk_rows = NULL;
        assert_int_equal(ta_kernels_check(&bad, why, sizeof why), -1);
        for (int rm = 0; rm < 2; rm++) {
            bad = *k;
            bad.attn_rows_max = rm ? bad.attn_mq + 1 : 0;
            assert_int_equal(ta_kernels_check(&bad, why, sizeof why), -1);
            assert_non_null(strstr(why, "attn_rows_max"));
        }
    }
}

/* ------------------------------------------------------------- sgemm_ukr */

/* One MR x NR tile of k's kernel against the float64 oracle and the scalar kernel's
 * tiles over the same operands (A zero-padded and B repacked to the scalar tile). layout 0: A packed
 * (1, MR); 1: rows in place (k + 2, 1); 2: both strides odd (3, 2 MR + 1). */
static void sgemm_case(const ta_kernels *k, const ta_kernels *ref, int64_t K, float alpha,
                       float beta, int layout)
{
    const int64_t MR = k->sgemm_mr, NR = k->sgemm_nr, rs_c = NR + 3;
    const int64_t RM = ref->sgemm_mr, RN = ref->sgemm_nr;
    const int64_t rs_a = layout == 0 ? 1 : layout == 1 ? K + 2 : 3;
    const int64_t cs_a = layout == 0 ? MR : layout == 1 ? 1 : 2 * MR + 1;
    snprintf(where, sizeof where, "%s sgemm_ukr %lldx%lld k=%lld alpha=%g beta=%g layout %d",
             k->name, (long long)MR, (long long)NR, (long long)K, alpha, beta, layout);
    arena ar = {0};
    const int64_t na = K ? (MR - 1) * rs_a + (K - 1) * cs_a + 1 : 0;
    const float *a = gfloats(&ar, na, NAN);
    const float *b = gfloats(&ar, (K * NR + 15) / 16 * 16, NAN); /* 64-byte aligned */
    float *c = gfloats(&ar, (MR - 1) * rs_c + NR, SENTINEL);
    for (int64_t i = 0; i < MR; i++)
        for (int64_t j = 0; j < NR; j++) c[i * rs_c + j] = beta == 0.0f ? NAN : frand();
    float *c0 = copy_of(c, (MR - 1) * rs_c + NR);
    k->sgemm_ukr(K, alpha, a, rs_a, cs_a, b, beta, c, rs_c);

    float *ra = calloc((size_t)(RM * K + 1), sizeof(float)), *rb = malloc(sizeof(float) * (size_t)(RN * K + 1));
    float *rc = malloc(sizeof(float) * (size_t)(RM * RN));
    assert_true(ra && rb && rc);
    for (int64_t i0 = 0; i0 < MR; i0 += RM)
        for (int64_t j0 = 0; j0 < NR; j0 += RN) {
            for (int64_t p = 0; p < K; p++) {
                for (int64_t r = 0; r < RM; r++)
                    ra[p * RM + r] = i0 + r < MR ? a[(i0 + r) * rs_a + p * cs_a] : 0.0f;
                for (int64_t j = 0; j < RN; j++) rb[p * RN + j] = j0 + j < NR ? b[p * NR + j0 + j] : 0.0f;
            }
            for (int64_t r = 0; r < RM * RN; r++) {
                int64_t i = i0 + r / RN, j = j0 + r % RN;
                rc[r] = i < MR && j < NR ? c0[i * rs_c + j] : 0.0f;
            }
            ref->sgemm_ukr(K, alpha, ra, 1, RM, rb, beta, rc, RN);
            for (int64_t i = i0; i < MR && i < i0 + RM; i++)
                for (int64_t j = j0; j < NR && j < j0 + RN; j++) {
                    double s = 0.0, e = 0.0; /* sum |a b|, sum a b */
                    for (int64_t p = 0; p < K; p++) {
                        double t = (double)a[i * rs_a + p * cs_a] * b[p * NR + j];
                        s += fabs(t);
                        e += t;
                    }
                    double bc = beta == 0.0f ? 0.0 : (double)beta * c0[i * rs_c + j];
                    double mag = fabs(alpha) * s + fabs(bc);
                    EXPECT_ORACLE("C", i * rs_c + j, c[i * rs_c + j], alpha * e + bc, ((double)K + 4.0) * U * mag);
                    EXPECT_SCALAR("C", i * rs_c + j, c[i * rs_c + j], rc[(i - i0) * RN + j - j0],
                                  (2.0 * (double)K + 6.0) * U * mag);
                }
        }
    for (int64_t i = 0; i + 1 < MR; i++) /* the gap between rows: not C's */
        for (int64_t j = NR; j < rs_c; j++) EXPECT_ORACLE("gap", i * rs_c + j, c[i * rs_c + j], SENTINEL, 0.0);
    free(ra);
    free(rb);
    free(rc);
    free(c0);
    arena_release(&ar);
}

/* k = 0 .. 5, 17, 129; alpha 1, -0.5; beta == 0 (C full of NaN: must not be read), 1,
 * 0.25; A packed, in place and strided. */
static void test_sgemm_ukr(void **state)
{
    (void)state;
    const int64_t ks[] = {0, 1, 2, 3, 4, 5, 17, 129};
    const float ab[][2] = {{1.0f, 0.0f}, {-0.5f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}};
    const ta_kernels *ref, *k = tested(&ref);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        for (size_t j = 0; j < sizeof ab / sizeof ab[0]; j++)
            for (int layout = 0; layout < 3; layout++) sgemm_case(k, ref, ks[i], ab[j][0], ab[j][1], layout);
}

/* --------------------------------------------------------------- attn_qk */

/* A prefetch stream (kernels.h, ta_pf) over two buffers of na and nb floats: spans of up
 * to 64 floats of each in turn (at most 32 spans). Returns its spans. */
static int64_t stream_spans(ta_pf_span *sp, const float *a, int64_t na, const float *b,
                            int64_t nb)
{
    int64_t n = 0;
    for (int64_t i = 0; n < 32 && (i < na || i < nb); i += 64) {
        if (i < na) sp[n++] = (ta_pf_span){(const char *)(a + i), (const char *)(a + (i + 64 < na ? i + 64 : na))};
        if (i < nb && n < 32) sp[n++] = (ta_pf_span){(const char *)(b + i), (const char *)(b + (i + 64 < nb ? i + 64 : nb))};
    }
    return n;
}

/* A kernel left its stream within its spans: the span it stopped in advanced by whole
 * lines within its bounds, the spans after it untouched; and advanced it when it had
 * steps to take. */
static void check_stream(const ta_pf *pf, const ta_pf_span *sp, const ta_pf_span *orig,
                         int64_t n, int stepped)
{
    if (pf->next < sp || pf->next > sp + n || pf->end != sp + n)
        fail_msg("%s: the prefetch stream left its spans", where);
    for (int64_t i = pf->next - sp; i < n; i++) {
        const int64_t moved = sp[i].a - orig[i].a;
        if (sp[i].b != orig[i].b || (sp + i != pf->next && moved != 0) || moved < 0 ||
            moved % 64 != 0 || sp[i].a >= orig[i].b)
            fail_msg("%s: span %lld of the prefetch stream changed wrongly", where, (long long)i);
    }
    if (stepped && n > 0 && pf->next == sp && sp[0].a == orig[0].a)
        fail_msg("%s: the prefetch stream did not advance", where);
}

static void qk_case(const ta_kernels *k, const ta_kernels *ref, int64_t d, int64_t nk, int with_rowk)
{
    const int64_t MQ = k->attn_mq, RQ = ref->attn_mq, ldk = d + 3;
    snprintf(where, sizeof where, "%s attn_qk d=%lld nk=%lld rowk=%d", k->name, (long long)d,
             (long long)nk, with_rowk);
    assert_int_equal(MQ % RQ, 0);
    arena ar = {0};
    const float *qp = gfloats(&ar, d * MQ, NAN);
    const float *kk = gfloats(&ar, nk ? (nk - 1) * ldk + d : 0, NAN);
    float *s = gfloats(&ar, nk * MQ, SENTINEL);
    int32_t *rowk = NULL;
    if (with_rowk) {
        rowk = malloc(sizeof(int32_t) * (size_t)MQ);
        assert_non_null(rowk);
        for (int64_t r = 0; r < MQ; r++) rowk[r] = irand(nk + 1);
    }
    /* with a prefetch stream over the inputs (every case): the same bits as without, and
     * the stream advanced, never past its end */
    ta_pf_span sp[32], orig[32];
    const int64_t ns = stream_spans(sp, qp, d * MQ, kk, nk ? (nk - 1) * ldk + d : 0);
    memcpy(orig, sp, sizeof sp);
    ta_pf pf = {sp, sp + ns};
    k->attn_qk(s, qp, kk, ldk, nk, d, rowk, &pf);
    check_stream(&pf, sp, orig, ns, d >= 2 && nk > 0 && !rowk);
    float *s2 = copy_of(s, nk * MQ);
    k->attn_qk(s2, qp, kk, ldk, nk, d, rowk, NULL);
    if (memcmp(s, s2, sizeof(float) * (size_t)(nk * MQ)) != 0)
        fail_msg("%s: the scores with a prefetch stream differ from those without", where);
    free(s2);
    float *rq = malloc(sizeof(float) * (size_t)(d * RQ + 1)), *rs = malloc(sizeof(float) * (size_t)(nk * RQ + 1));
    assert_true(rq && rs);
    for (int64_t b0 = 0; b0 < MQ; b0 += RQ) {
        for (int64_t p = 0; p < d; p++)
            for (int64_t r = 0; r < RQ; r++) rq[p * RQ + r] = qp[p * MQ + b0 + r];
        ref->attn_qk(rs, rq, kk, ldk, nk, d, rowk ? rowk + b0 : NULL, NULL);
        for (int64_t j = 0; j < nk; j++)
            for (int64_t r = 0; r < RQ; r++) {
                const int64_t i = j * MQ + b0 + r;
                double sum = 0.0, e = 0.0;
                for (int64_t p = 0; p < d; p++) {
                    double t = (double)rq[p * RQ + r] * kk[j * ldk + p];
                    sum += fabs(t);
                    e += t;
                }
                if (rowk && j >= rowk[b0 + r]) { /* a score the row does not need: */
                    if (s[i] != SENTINEL) /* left as it was, or computed */
                        EXPECT_ORACLE("unneeded s", i, s[i], e, ((double)d + 1.0) * U * sum);
                    continue;
                }
                EXPECT_ORACLE("s", i, s[i], e, ((double)d + 1.0) * U * sum);
                EXPECT_SCALAR("s", i, s[i], rs[j * RQ + r], (2.0 * (double)d + 2.0) * U * sum);
            }
    }
    free(rq);
    free(rs);
    free(rowk);
    arena_release(&ar);
}

/* Key counts 1 .. 17 (every tail of a KJ-key micro-tile) and 64, d = 0, 1, 3, 17, 129. */
static void test_attn_qk(void **state)
{
    (void)state;
    const int64_t ds[] = {0, 1, 3, 17, 129};
    const ta_kernels *ref, *k = tested(&ref);
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        for (int64_t nk = 1; nk <= 18; nk++)
            for (int rk = 0; rk < 2; rk++) qk_case(k, ref, ds[i], nk == 18 ? 64 : nk, rk);
}

/* ---------------------------------------------------------- attn_qk_rows */

/* q [mq rows, ldq = d + 2], k [nk rows, ldk = d + 3], s [nk, attn_mq] full of a sentinel:
 * the scores of rows < mq against the float64 oracle, the scalar attn_qk_rows and the
 * scalar attn_qk (the broadcast kernel, on the same rows packed transposed); rows >= mq
 * untouched. */
static void qk_rows_case(const ta_kernels *k, const ta_kernels *ref, int64_t d, int64_t nk,
                         int64_t mq)
{
    const int64_t MQ = k->attn_mq, RQ = ref->attn_mq, ldq = d + 2, ldk = d + 3;
    snprintf(where, sizeof where, "%s attn_qk_rows d=%lld nk=%lld mq=%lld", k->name,
             (long long)d, (long long)nk, (long long)mq);
    arena ar = {0};
    const float *q = gfloats(&ar, d ? (mq - 1) * ldq + d : 0, NAN);
    const float *kk = gfloats(&ar, nk && d ? (nk - 1) * ldk + d : 0, NAN);
    float *s = gfloats(&ar, nk * MQ, SENTINEL);
    k->attn_qk_rows(s, q, ldq, mq, kk, ldk, nk, d);
    float *rs = malloc(sizeof(float) * (size_t)(nk * RQ + 1));
    float *rt = malloc(sizeof(float) * (size_t)(nk * RQ + 1));
    float *rq = malloc(sizeof(float) * (size_t)(d * RQ + 1));
    assert_true(rs && rt && rq);
    for (int64_t b0 = 0; b0 < mq; b0 += RQ) {
        const int64_t n = mq - b0 < RQ ? mq - b0 : RQ;
        ref->attn_qk_rows(rs, q + b0 * ldq, ldq, n, kk, ldk, nk, d);
        for (int64_t p = 0; p < d; p++)
            for (int64_t r = 0; r < RQ; r++) rq[p * RQ + r] = r < n ? q[(b0 + r) * ldq + p] : 0.0f;
        ref->attn_qk(rt, rq, kk, ldk, nk, d, NULL, NULL);
        for (int64_t j = 0; j < nk; j++)
            for (int64_t r = 0; r < n; r++) {
                const int64_t i = j * MQ + b0 + r;
                double sum = 0.0, e = 0.0;
                for (int64_t p = 0; p < d; p++) {
                    double t = (double)q[(b0 + r) * ldq + p] * kk[j * ldk + p];
                    sum += fabs(t);
                    e += t;
                }
                EXPECT_ORACLE("s", i, s[i], e, ((double)d + 1.0) * U * sum);
                EXPECT_SCALAR("s", i, s[i], rs[j * RQ + r], (2.0 * (double)d + 2.0) * U * sum);
                EXPECT_SCALAR("s (scalar attn_qk)", i, s[i], rt[j * RQ + r],
                              (2.0 * (double)d + 2.0) * U * sum);
            }
    }
    for (int64_t j = 0; j < nk; j++)
        for (int64_t r = mq; r < MQ; r++)
            EXPECT_ORACLE("untouched s", j * MQ + r, s[j * MQ + r], SENTINEL, 0.0);
    free(rs);
    free(rt);
    free(rq);
    arena_release(&ar);
}

/* d = 0 .. 17 (every lane tail and chain count), 64, 128, 129; nk = 0 .. 17, 64; mq =
 * 1 .. attn_rows_max + 2 (the rows the driver gives it, and past), attn_mq - 1, attn_mq. */
static void test_attn_qk_rows(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    const int64_t MQ = k->attn_mq, RM = k->attn_rows_max;
    int64_t mqs[24], n = 0; /* increasing, <= MQ */
    for (int64_t mq = 1; mq <= RM + 2 && mq <= MQ; mq++) mqs[n++] = mq;
    if (MQ - 1 > mqs[n - 1]) mqs[n++] = MQ - 1;
    if (MQ > mqs[n - 1]) mqs[n++] = MQ;
    const int64_t big[] = {64, 128, 129};
    for (int64_t d = 0; d <= 20; d++)
        for (int64_t nk = 0; nk <= 18; nk++)
            for (int64_t i = 0; i < n; i++)
                if (mqs[i] <= RM + 2 || (d + nk) % 4 == 0)
                    qk_rows_case(k, ref, d <= 17 ? d : big[d - 18], nk == 18 ? 64 : nk, mqs[i]);
}

/* ---------------------------------------------------------- attn_softmax */

/* With softmax_big set, rows r % 5 == 2 have scores and running m 1e5 times larger
 * (shifts past TA_EXP2_BIG: a base-2 table's vectors that hold one take the other form). */
static int softmax_big;

/* Scores of spread 60 (some p underflow to denormals or 0), a masked -inf here and there,
 * a row of only -inf, a row with a NaN; running m = -inf (l = 0) or finite; alpha the
 * sentinel. */
static void softmax_inputs(arena *ar, int64_t MQ, int64_t nk, float **s, float **m, float **l,
                           float **alpha)
{
    *s = gfloats(ar, nk * MQ, NAN), *m = gfloats(ar, MQ, NAN), *l = gfloats(ar, MQ, 0.0f);
    *alpha = gfloats(ar, MQ, SENTINEL);
    for (int64_t i = 0; i < nk * MQ; i++) {
        (*s)[i] *= 60.0f;
        if (i % 7 == 3 || i % MQ == 1) (*s)[i] = -INFINITY;
        if (nk > 1 && i == MQ + 2) (*s)[i] = NAN;
    }
    for (int64_t r = 0; r < MQ; r++) {
        (*m)[r] = r % 3 == 0 ? -INFINITY : 40.0f * (*m)[r];
        (*l)[r] = r % 3 == 0 ? 0.0f : 1.0f + 3.0f * fabsf(frand());
        if (softmax_big && r % 5 == 2) {
            (*m)[r] *= 1e5f;
            for (int64_t j = 0; j < nk; j++) (*s)[j * MQ + r] *= 1e5f;
        }
    }
}

/* Row r's shift u: its running max m0[r] and scores s0, 0 when that is -inf. */
static double softmax_shift(int64_t r, int64_t MQ, int64_t nk, const float *s0, const float *m0)
{
    double mx = m0[r];
    for (int64_t j = 0; j < nk; j++) /* a NaN score does not enter the max */
        if (s0[j * MQ + r] > mx) mx = s0[j * MQ + r];
    return mx;
}

/* A base-2 table's carry of shift u (kernels.h, attn_softmax_exp2): u L - fl(u L) where
 * |fl(u L)| < TA_EXP2_BIG, else 0; and whether some row < mq of row r's vector has no
 * carry (big: the vector's p then take the two-rounding form). */
static double exp2_carry(double u)
{
    const float uL = (float)u * TA_LOG2E_F;
    return fabsf(uL) < TA_EXP2_BIG ? u * (double)TA_LOG2E_F - (double)uL : 0.0;
}
static int exp2_vector_big(const ta_kernels *k, int64_t r, int64_t MQ, int64_t nk, int64_t mq,
                           const float *s0, const float *m0)
{
    const int64_t VL = k->attn_vl, r0 = r / VL * VL;
    for (int64_t i = r0; i < r0 + VL && i < mq; i++) {
        const double mx = softmax_shift(i, MQ, nk, s0, m0);
        const float uL = (float)(mx == -INFINITY ? 0.0 : mx) * TA_LOG2E_F;
        if (!(fabsf(uL) < TA_EXP2_BIG)) return 1;
    }
    return 0;
}

/* Row r of a softmax step (s, m, l, alpha from s0, m0, l0 [nk, MQ]; table k, tile rows
 * mq) against the float64 oracle, with the bounds of the file's header. A base-2 table's
 * p are y = 2^((s - u) L + c) and alpha 2^((m - u) L + c - c_m) (L = TA_LOG2E_F, c the
 * carry), whose argument carries one rounding (the one-rounding form: (|x| + 3) u y, x
 * = s - u) or three (sub, multiply, add of c: (3 |x| + 3) u y, and alpha always). */
static void softmax_oracle_row(const ta_kernels *k, int64_t r, int64_t MQ, int64_t nk,
                               int64_t mq, const float *s0, const float *m0, const float *l0,
                               const float *s, const float *m, const float *l,
                               const float *alpha)
{
    const double mx = softmax_shift(r, MQ, nk, s0, m0);
    const double sub = mx == -INFINITY ? 0.0 : mx, xa = m0[r] - sub;
    const int b2 = k->attn_softmax_exp2, big = b2 && exp2_vector_big(k, r, MQ, nk, mq, s0, m0);
    const double c = b2 ? exp2_carry(sub) : 0.0, L = TA_LOG2E_F;
    const double pw = b2 && big ? 3.0 : 1.0, aw = b2 ? 3.0 : 1.0; /* argument roundings */
    const double ea = b2 ? exp2(xa * L + c - (isfinite(m0[r]) ? exp2_carry(m0[r]) : 0.0)) : exp(xa);
    EXPECT_ORACLE("m", r, m[r], mx, 0.0);
    EXPECT_ORACLE("alpha", r, alpha[r], ea, exp_bound(aw * fabs(xa), ea));
    double lo = l0[r] * ea, bl = lo > 0.0 ? (aw * fabs(xa) + (double)nk + 6.0) * U * lo : 0.0;
    for (int64_t j = 0; j < nk; j++) {
        const double x = s0[j * MQ + r] - sub, p = b2 ? exp2(x * L + c) : exp(x);
        EXPECT_ORACLE("s", j * MQ + r, s[j * MQ + r], p, exp_bound(pw * fabs(x), p));
        lo += p;
        bl += p > 0.0 ? (pw * fabs(x) + (double)nk + 6.0) * U * p : 0.0;
    }
    EXPECT_ORACLE("l", r, l[r], lo, bl + ((double)nk + 1.0) * DENORMAL_SLACK);
}

/* attn_softmax on softmax_inputs against the scalar kernel and the float64 oracle. */
static void softmax_case(const ta_kernels *k, const ta_kernels *ref, int64_t nk, int64_t mq)
{
    const int64_t MQ = k->attn_mq, RQ = ref->attn_mq, VL = k->attn_vl;
    /* the rows of the vectors that hold a row < mq: computed; the others untouched */
    const int64_t cover = (mq + VL - 1) / VL * VL;
    snprintf(where, sizeof where, "%s attn_softmax nk=%lld mq=%lld", k->name, (long long)nk,
             (long long)mq);
    assert_true(cover <= MQ);
    arena ar = {0};
    float *s, *m, *l, *alpha;
    softmax_inputs(&ar, MQ, nk, &s, &m, &l, &alpha);
    float *s0 = copy_of(s, nk * MQ), *m0 = copy_of(m, MQ), *l0 = copy_of(l, MQ);
    k->attn_softmax(s, m, l, alpha, nk, mq, NULL);
    float rsb[64 * 16], rm[16], rl[16], ra[16];
    assert_true(RQ <= 16 && nk <= 64);
    for (int64_t r = cover; r < MQ; r++) { /* past the vectors of rows < mq: as they were */
        EXPECT_ORACLE("untouched m", r, m[r], m0[r], 0.0);
        EXPECT_ORACLE("untouched l", r, l[r], l0[r], 0.0);
        EXPECT_ORACLE("untouched alpha", r, alpha[r], SENTINEL, 0.0);
        for (int64_t j = 0; j < nk; j++)
            EXPECT_ORACLE("untouched s", j * MQ + r, s[j * MQ + r], s0[j * MQ + r], 0.0);
    }
    for (int64_t b0 = 0; b0 < cover; b0 += RQ) {
        const int64_t n = cover - b0 < RQ ? cover - b0 : RQ;
        for (int64_t j = 0; j < nk; j++)
            for (int64_t r = 0; r < RQ; r++) rsb[j * RQ + r] = s0[j * MQ + b0 + r];
        memcpy(rm, m0 + b0, sizeof(float) * (size_t)RQ);
        memcpy(rl, l0 + b0, sizeof(float) * (size_t)RQ);
        ref->attn_softmax(rsb, rm, rl, ra, nk, RQ, NULL);
        for (int64_t r = 0; r < n; r++) {
            EXPECT_SCALAR("m", b0 + r, m[b0 + r], rm[r], 0.0);
            if (k->attn_softmax_exp2 != ref->attn_softmax_exp2) continue; /* the oracle's */
            EXPECT_SCALAR("alpha", b0 + r, alpha[b0 + r], ra[r], 6 * U * fabs(ra[r]) + DENORMAL_SLACK);
            EXPECT_SCALAR("l", b0 + r, l[b0 + r], rl[r], ((double)nk + 16.0) * U * fabs(rl[r]));
            for (int64_t j = 0; j < nk; j++)
                EXPECT_SCALAR("s", j * MQ + b0 + r, s[j * MQ + b0 + r], rsb[j * RQ + r],
                              6 * U * fabs(rsb[j * RQ + r]) + DENORMAL_SLACK);
        }
    }
    /* rows mq .. cover - 1 are scratch the driver never reads; a base-2 table picks its
     * form by the rows < mq alone, so only a natural one meets the bounds there too */
    for (int64_t r = 0; r < cover; r++)
        if (r < mq || !k->attn_softmax_exp2) softmax_oracle_row(k, r, MQ, nk, mq, s0, m0, l0, s, m, l, alpha);
    free(s0);
    free(m0);
    free(l0);
    arena_release(&ar);
}

/* attn_softmax with per-row key counts against the same kernel without them on the
 * scores with the keys past each row's count set to -inf first: the same bits in the
 * vectors that hold a row < mq (counts 0, nk, in between, one vector's all equal, one
 * vector's all 0; whatever the blocked scores held, NaN included). */
static void softmax_rowk_case(const ta_kernels *k, int64_t nk, int64_t mq, int pattern)
{
    const int64_t MQ = k->attn_mq, VL = k->attn_vl, cover = (mq + VL - 1) / VL * VL;
    snprintf(where, sizeof where, "%s attn_softmax rowk nk=%lld mq=%lld pattern %d", k->name,
             (long long)nk, (long long)mq, pattern);
    arena ar = {0};
    float *s, *m, *l, *alpha;
    softmax_inputs(&ar, MQ, nk, &s, &m, &l, &alpha);
    int32_t rowk[64];
    assert_true(MQ <= 64);
    for (int64_t r = 0; r < MQ; r++) {
        rowk[r] = pattern == 0 ? irand(nk + 1) : pattern == 1 ? (int32_t)(r % 3 == 0 ? nk : 0)
                  : pattern == 2 ? (int32_t)((r / VL) % 2 ? 0 : nk / 2)
                                 : (int32_t)(r * nk / MQ); /* a causal diagonal */
        if (r >= mq) rowk[r] = 0; /* the driver's padding rows */
    }
    float *sb = copy_of(s, nk * MQ), *mb = copy_of(m, MQ), *lb = copy_of(l, MQ),
          *ab = copy_of(alpha, MQ);
    for (int64_t j = 0; j < nk; j++)
        for (int64_t r = 0; r < MQ; r++) {
            if (j >= rowk[r]) sb[j * MQ + r] = -INFINITY;
            if (j >= rowk[r] && (j + r) % 5 == 0) s[j * MQ + r] = NAN; /* ignored */
        }
    k->attn_softmax(s, m, l, alpha, nk, mq, rowk);
    k->attn_softmax(sb, mb, lb, ab, nk, mq, NULL);
    for (int64_t r = 0; r < cover; r++) {
        EXPECT_SCALAR("m", r, m[r], mb[r], 0.0);
        EXPECT_SCALAR("l", r, l[r], lb[r], 0.0);
        EXPECT_SCALAR("alpha", r, alpha[r], ab[r], 0.0);
        for (int64_t j = 0; j < nk; j++) {
            EXPECT_SCALAR("s", j * MQ + r, s[j * MQ + r], sb[j * MQ + r], 0.0);
            if (j >= rowk[r] && !(s[j * MQ + r] == 0.0f && !signbit(s[j * MQ + r])))
                fail_msg("%s: s[%lld] = %g past the row's count, not +0", where,
                         (long long)(j * MQ + r), (double)s[j * MQ + r]);
        }
    }
    free(sb);
    free(mb);
    free(lb);
    free(ab);
    arena_release(&ar);
}

static void test_attn_softmax(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    const int64_t VL = k->attn_vl, MQ = k->attn_mq;
    for (int64_t nk = 1; nk <= 64; nk += nk < 8 ? 1 : 9) softmax_case(k, ref, nk, MQ);
    /* tiles of fewer rows (a decode step: 1): only the vectors holding them */
    const int64_t mqs[] = {1, 2, VL - 1, VL, VL + 1, MQ - VL, MQ - 1};
    for (size_t i = 0; i < sizeof mqs / sizeof mqs[0]; i++)
        for (int64_t nk = 1; nk <= 64; nk += nk < 3 ? 1 : 30)
            if (mqs[i] >= 1 && mqs[i] <= MQ) softmax_case(k, ref, nk, mqs[i]);
    for (int pattern = 0; pattern < 4; pattern++)
        for (int64_t nk = 1; nk <= 64; nk += nk < 8 ? 1 : 7) {
            softmax_rowk_case(k, nk, MQ, pattern);
            softmax_rowk_case(k, nk, MQ - VL + 1, pattern);
        }
    softmax_big = 1; /* shifts past TA_EXP2_BIG in some rows */
    for (int64_t nk = 1; nk <= 64; nk += nk < 4 ? 1 : 20) {
        softmax_case(k, ref, nk, MQ);
        softmax_case(k, ref, nk, 1);
        softmax_case(k, ref, nk, 3);
        softmax_rowk_case(k, nk, MQ, 3);
    }
    softmax_big = 0;
}

/* attn_softmax's exp over its whole range: each row's shift 0 (a key of score 0, the
 * others in [-110, 0]), so p = exp(s), or 2^(fl(s L)) for a base-2 table, against
 * double's exp / exp2 of that same argument on 2^19 scores: 3 u y + 2^-148. */
static void test_attn_softmax_exp_range(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    const int64_t MQ = k->attn_mq, nk = 64;
    snprintf(where, sizeof where, "%s attn_softmax exp range", k->name);
    float *s = malloc(sizeof(float) * (size_t)(nk * MQ)), *m = malloc(sizeof(float) * (size_t)MQ);
    float *l = malloc(sizeof(float) * (size_t)MQ), *alpha = malloc(sizeof(float) * (size_t)MQ);
    float *s0 = malloc(sizeof(float) * (size_t)(nk * MQ));
    assert_true(s && m && l && alpha && s0);
    const int64_t per = (nk - 1) * MQ, calls = ((int64_t)1 << 19) / per + 1;
    for (int64_t c = 0; c < calls; c++) {
        for (int64_t r = 0; r < MQ; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
            s0[r] = 0.0f; /* key 0: the shift */
            for (int64_t j = 1; j < nk; j++) /* evenly over [-110, 0], interleaved by call */
                s0[j * MQ + r] = (float)(-110.0 * (double)((j - 1) * MQ + r + c * per) / (double)(calls * per));
        }
        memcpy(s, s0, sizeof(float) * (size_t)(nk * MQ));
        k->attn_softmax(s, m, l, alpha, nk, MQ, NULL);
        for (int64_t i = MQ; i < nk * MQ; i++) {
            const double x = s0[i];
            const double xl = (double)(float)(s0[i] * TA_LOG2E_F); /* fl(s L) */
            const double y = k->attn_softmax_exp2 ? exp2(xl) : exp(x);
            const double b = exp_bound(0.0, y); /* the argument is the kernel's own */
            EXPECT_ORACLE("s", i, s[i], y, b);
        }
    }
    free(s);
    free(m);
    free(l);
    free(alpha);
    free(s0);
}

/* --------------------------------------------------------------- attn_pv */

/* o [mq rows, ldo = dv rounded up to attn_vl] against the float64 oracle and the scalar
 * kernel per block of its attn_mq rows. o holds exactly the mq rows the kernel may write
 * and v ends at its last row's column dv - 1, both at guard pages. */
static void pv_case(const ta_kernels *k, const ta_kernels *ref, int64_t nk, int64_t dv,
                    int64_t mq, int with_rowk)
{
    const int64_t MQ = k->attn_mq, RQ = ref->attn_mq, VL = k->attn_vl;
    const int64_t ldo = (dv + VL - 1) / VL * VL, ldv = dv + 5, rows = mq;
    snprintf(where, sizeof where, "%s attn_pv nk=%lld dv=%lld mq=%lld rowk=%d", k->name,
             (long long)nk, (long long)dv, (long long)mq, with_rowk);
    arena ar = {0};
    float *o = gfloats(&ar, rows * ldo, NAN), *p = gfloats(&ar, nk * MQ, NAN);
    const float *alpha = gfloats(&ar, MQ, NAN), *v = gfloats(&ar, nk ? (nk - 1) * ldv + dv : 0, NAN);
    int32_t rowk[64];
    assert_true(MQ <= 64);
    for (int64_t r = 0; r < MQ; r++) {
        rowk[r] = with_rowk ? irand(nk + 1) : (int32_t)nk;
        for (int64_t j = 0; j < nk; j++) p[j * MQ + r] = j < rowk[r] ? fabsf(p[j * MQ + r]) : 0.0f;
    }
    float *o0 = copy_of(o, rows * ldo);
    /* with a prefetch stream over the inputs: the same bits as without; tiles of many
     * rows advance it (those of few rows stream V without it) */
    ta_pf_span sp[32], orig[32];
    const int64_t ns = stream_spans(sp, v, nk ? (nk - 1) * ldv + dv : 0, p, nk * MQ);
    memcpy(orig, sp, sizeof sp);
    ta_pf pf = {sp, sp + ns};
    k->attn_pv(o, ldo, p, alpha, v, ldv, nk, dv, mq, with_rowk ? rowk : NULL, &pf);
    check_stream(&pf, sp, orig, ns, nk > 0 && !with_rowk && mq > k->attn_rows_max);
    float *o2 = copy_of(o0, rows * ldo);
    k->attn_pv(o2, ldo, p, alpha, v, ldv, nk, dv, mq, with_rowk ? rowk : NULL, NULL);
    for (int64_t r = 0; r < rows; r++)
        if (memcmp(o + r * ldo, o2 + r * ldo, sizeof(float) * (size_t)dv) != 0)
            fail_msg("%s: O row %lld with a prefetch stream differs from O without", where,
                     (long long)r);
    /* alpha NULL (a first tile): o not read, whatever it holds (NaN here), the bits of o
     * = 0 rescaled by alpha = 0 */
    for (int64_t i = 0; i < rows * ldo; i++) o2[i] = NAN;
    k->attn_pv(o2, ldo, p, NULL, v, ldv, nk, dv, mq, with_rowk ? rowk : NULL, NULL);
    float *oz = calloc((size_t)(rows * ldo), sizeof(float)), *az = calloc((size_t)MQ, sizeof(float));
    assert_true(oz && az);
    k->attn_pv(oz, ldo, p, az, v, ldv, nk, dv, mq, with_rowk ? rowk : NULL, NULL);
    for (int64_t r = 0; r < rows; r++)
        if (memcmp(oz + r * ldo, o2 + r * ldo, sizeof(float) * (size_t)dv) != 0)
            fail_msg("%s: O row %lld with alpha NULL differs from o = 0, alpha = 0", where,
                     (long long)r);
    free(oz);
    free(az);
    free(o2);
    float *ro = malloc(sizeof(float) * (size_t)(RQ * dv)), *rp = malloc(sizeof(float) * (size_t)(nk * RQ + 1));
    assert_true(ro && rp);
    for (int64_t b0 = 0; b0 < mq; b0 += RQ) {
        const int64_t n = mq - b0 < RQ ? mq - b0 : RQ;
        for (int64_t r = 0; r < RQ; r++) {
            for (int64_t c = 0; c < dv; c++) ro[r * dv + c] = r < n ? o0[(b0 + r) * ldo + c] : 0.0f;
            for (int64_t j = 0; j < nk; j++) rp[j * RQ + r] = p[j * MQ + b0 + r];
        }
        ref->attn_pv(ro, dv, rp, alpha + b0, v, ldv, nk, dv, n, with_rowk ? rowk + b0 : NULL, NULL);
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < dv; c++) {
                const int64_t i = (b0 + r) * ldo + c;
                double e = (double)o0[i] * alpha[b0 + r], sum = fabs(e);
                for (int64_t j = 0; j < nk; j++) {
                    double t = (double)rp[j * RQ + r] * v[j * ldv + c];
                    sum += fabs(t);
                    e += t;
                }
                EXPECT_ORACLE("o", i, o[i], e, ((double)nk + 2.0) * U * sum);
                EXPECT_SCALAR("o", i, o[i], ro[r * dv + c], (2.0 * (double)nk + 4.0) * U * sum);
            }
    }
    free(ro);
    free(rp);
    free(o0);
    arena_release(&ar);
}

/* dv = 1 .. PC * VL + VL + 1 (every column tail: 1 .. PC vectors, each partial), 113,
 * 128, 129 (whole rows of 7, 8, 9 vectors on the streamed path); mq = 1 .. PR + 1 (every short row group; the streamed path of tiles of <= attn_rows_max
 * rows), 2 PR - 1, attn_mq - 1, attn_mq; nk = 0, 1, 3, 17 (with and without rowk). */
static void test_attn_pv(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    const int64_t PR = k->attn_pr, MQ = k->attn_mq, RM = k->attn_rows_max;
    const int64_t nks[] = {0, 1, 3, 17};
    int64_t mqs[24], n = 0; /* increasing, <= MQ */
    for (int64_t mq = 1; mq <= PR + 1 && mq <= MQ; mq++) mqs[n++] = mq;
    const int64_t more[] = {2 * PR - 1, MQ - 1, MQ};
    for (int i = 0; i < 3; i++)
        if (more[i] > mqs[n - 1] && more[i] <= MQ) mqs[n++] = more[i];
    const int64_t wide[] = {113, 128, 129}; /* 7, 8, 9 vectors of 16 */
    for (int64_t t = 0; t < 84; t++) {
        const int64_t dv = t < 81 ? t + 1 : wide[t - 81];
        for (int64_t i = 0; i < n; i++)
            for (size_t j = 0; j < 4; j++)
                if (dv % 16 < 4 || j == 2 || (mqs[i] <= RM && dv % 16 < 8))
                    pv_case(k, ref, nks[j], dv, mqs[i], (int)(dv + i) % 2);
    }
}

/* -------------------------------------------------------------- attn_exp */

static void exp_case(const ta_kernels *k, const ta_kernels *ref, int64_t n, int in_place)
{
    static const float special[] = {-INFINITY, NAN, 0.0f, -87.5f, -95.0f, -103.5f, 88.7f,
                                    -1e-30f, 1e-30f, -104.5f, -0.0f, 80.0f};
    snprintf(where, sizeof where, "%s attn_exp n=%lld in_place=%d", k->name, (long long)n, in_place);
    arena ar = {0};
    float *x = gfloats(&ar, n, NAN), *y = in_place ? x : gfloats(&ar, n, SENTINEL);
    for (int64_t i = 0; i < n; i++)
        x[i] = i % 5 == 2 ? special[(i / 5) % 12] : x[i] * (x[i] < 0 ? 104.0f : 88.0f);
    float *x0 = copy_of(x, n), *want = malloc(sizeof(float) * (size_t)(n + 1));
    assert_non_null(want);
    k->attn_exp(y, x, n);
    ref->attn_exp(want, x0, n);
    for (int64_t i = 0; i < n; i++) {
        const double e = exp((double)x0[i]);
        EXPECT_ORACLE("y", i, y[i], e, 3 * U * e + 0x1p-149);
        EXPECT_SCALAR("y", i, y[i], want[i], 6 * U * fabs(want[i]) + DENORMAL_SLACK);
        if (x0[i] == -INFINITY) assert_true(y[i] == 0.0f);
        if (x0[i] == 0.0f) assert_true(y[i] == 1.0f);
        if (isnan(x0[i])) assert_true(isnan(y[i]));
    }
    if (n == 0 && !in_place) assert_true(y[0] == SENTINEL);
    free(x0);
    free(want);
    arena_release(&ar);
}

static void test_attn_exp(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    for (int64_t n = 0; n <= 38; n++) /* 0 .. 2 VL + 6 for VL = 16, then 129, 1000 */
        for (int ip = 0; ip < 2; ip++) exp_case(k, ref, n == 37 ? 129 : n == 38 ? 1000 : n, ip);
}

/* --------------------------------------------------------- attn_bwd_gemm */

/* C [m, n] (ldc = n + 2) = (acc ? C : 0) + A B; A by rows in place (rsa = K + 1, csa = 1)
 * or transposed (rsa = 1, csa = m + 2); acc == 0 with C full of NaN (must not be read). */
static void bwd_gemm_case(const ta_kernels *k, const ta_kernels *ref, int64_t m, int64_t n,
                          int64_t K, int acc, int transposed)
{
    const int64_t ldc = n + 2, ldb = n + 1, nc = (m - 1) * ldc + n;
    const int64_t rsa = transposed ? 1 : K + 1, csa = transposed ? m + 2 : 1;
    snprintf(where, sizeof where, "%s attn_bwd_gemm m=%lld n=%lld k=%lld acc=%d A%s", k->name,
             (long long)m, (long long)n, (long long)K, acc, transposed ? "^T" : "");
    arena ar = {0};
    const float *a = gfloats(&ar, K ? (m - 1) * rsa + (K - 1) * csa + 1 : 0, NAN);
    const float *b = gfloats(&ar, K ? (K - 1) * ldb + n : 0, NAN);
    float *c = gfloats(&ar, nc, SENTINEL);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = acc ? frand() : NAN;
    float *c0 = copy_of(c, nc), *want = copy_of(c, nc), *c2 = copy_of(c, nc);
    /* with a prefetch stream over A and B: the same bits as without, and the stream
     * advanced (a line every other step: when K >= 2), never past its end */
    ta_pf_span sp[32], orig[32];
    const int64_t ns = stream_spans(sp, a, K ? (m - 1) * rsa + (K - 1) * csa + 1 : 0, b,
                                    K ? (K - 1) * ldb + n : 0);
    memcpy(orig, sp, sizeof sp);
    ta_pf pf = {sp, sp + ns};
    k->attn_bwd_gemm(c, ldc, a, rsa, csa, b, ldb, m, n, K, acc, &pf);
    check_stream(&pf, sp, orig, ns, K >= 2);
    k->attn_bwd_gemm(c2, ldc, a, rsa, csa, b, ldb, m, n, K, acc, NULL);
    if (memcmp(c, c2, sizeof(float) * (size_t)nc) != 0)
        fail_msg("%s: C with a prefetch stream differs from C without", where);
    free(c2);
    ref->attn_bwd_gemm(want, ldc, a, rsa, csa, b, ldb, m, n, K, acc, NULL);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double e = acc ? (double)c0[i * ldc + j] : 0.0, sum = fabs(e);
            for (int64_t p = 0; p < K; p++) {
                double t = (double)a[i * rsa + p * csa] * b[p * ldb + j];
                sum += fabs(t);
                e += t;
            }
            EXPECT_ORACLE("C", i * ldc + j, c[i * ldc + j], e, ((double)K + 2.0) * U * sum);
            EXPECT_SCALAR("C", i * ldc + j, c[i * ldc + j], want[i * ldc + j], (2.0 * (double)K + 2.0) * U * sum);
        }
        for (int64_t j = n; j < ldc && i + 1 < m; j++) EXPECT_ORACLE("gap", i * ldc + j, c[i * ldc + j], SENTINEL, 0.0);
    }
    free(c0);
    free(want);
    arena_release(&ar);
}

/* m = 1 .. 2 MR + 1 (full tiles and every row tail), n = 1 .. NV VL + VL + 1 (every
 * column tail) for the widest table, k = 0, 1, 17, acc 0 / 1, A both ways. */
static void test_attn_bwd_gemm(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    for (int64_t m = 1; m <= 13; m++)
        for (int64_t n = 1; n <= 81; n++)
            for (int64_t K = 0; K <= 17; K += K ? 16 : 1)
                for (int acc = 0; acc < 2; acc++)
                    if ((m + n + K + acc) % 3 == 0 || n < 4 || m < 3)
                        bwd_gemm_case(k, ref, m, n, K, acc, (int)(m + n) % 2);
}

/* --------------------------------------------------- attn_bwd_gemm_ranged */

/* attn_bwd_gemm_ranged against attn_bwd_gemm of the same table on an A whose terms
 * outside each row's [klo, khi) are zero (as a causal diagonal's P and dS): every
 * column a row asks for (j < nhi[i]) bitwise the full product's; a column past it is
 * the full product's too (its tile's range reaches it) or, when its tile's does not,
 * 0 (acc == 0) or C as it was (acc); the gaps past n untouched. Limits drawn at
 * random per row, empty ranges and ends past k and n included; `which` picks the
 * arrays given (bit 0 klo, 1 khi, 2 nhi). */
static void bwd_gemm_ranged_case(const ta_kernels *k, int64_t m, int64_t n, int64_t K, int acc,
                                 int transposed, int which)
{
    const int64_t ldc = n + 2, ldb = n + 1, nc = (m - 1) * ldc + n;
    const int64_t rsa = transposed ? 1 : K + 1, csa = transposed ? m + 2 : 1;
    snprintf(where, sizeof where, "%s attn_bwd_gemm_ranged m=%lld n=%lld k=%lld acc=%d A%s "
             "ranges %d", k->name, (long long)m, (long long)n, (long long)K, acc,
             transposed ? "^T" : "", which);
    int32_t klo[16], khi[16], nhi[16];
    assert_true(m <= 16);
    for (int64_t i = 0; i < m; i++) {
        klo[i] = which & 1 ? (int32_t)(rand() % (K + 2)) : 0;
        khi[i] = which & 2 ? (int32_t)(rand() % (K + 3)) : (int32_t)K;
        nhi[i] = which & 4 ? (int32_t)(rand() % (n + 3)) - 1 : (int32_t)n;
    }
    arena ar = {0};
    float *a = gfloats(&ar, K ? (m - 1) * rsa + (K - 1) * csa + 1 : 0, NAN);
    const float *b = gfloats(&ar, K ? (K - 1) * ldb + n : 0, NAN);
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < K; p++)
            if (p < klo[i] || p >= khi[i]) a[i * rsa + p * csa] = 0.0f;
    float *c = gfloats(&ar, nc, SENTINEL);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = acc ? frand() : NAN;
    float *c0 = copy_of(c, nc), *full = copy_of(c, nc);
    k->attn_bwd_gemm(full, ldc, a, rsa, csa, b, ldb, m, n, K, acc, NULL);
    k->attn_bwd_gemm_ranged(c, ldc, a, rsa, csa, b, ldb, m, n, K, acc, which & 1 ? klo : NULL,
                            which & 2 ? khi : NULL, which & 4 ? nhi : NULL, NULL);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            const int64_t x = i * ldc + j;
            const float got = c[x];
            if (memcmp(&got, &full[x], sizeof got) == 0) continue;
            if (j >= nhi[i] && memcmp(&got, acc ? &c0[x] : &(float){0.0f}, sizeof got) == 0)
                continue;
            fail_msg("%s: C[%lld][%lld] = %.9g, the full product's %.9g (asked for: %s)", where,
                     (long long)i, (long long)j, (double)got, (double)full[x],
                     j < nhi[i] ? "yes" : "no");
        }
        for (int64_t j = n; j < ldc && i + 1 < m; j++) EXPECT_ORACLE("gap", i * ldc + j, c[i * ldc + j], SENTINEL, 0.0);
    }
    free(c0);
    free(full);
    arena_release(&ar);
}

/* m = 1 .. 13 (row tiles and tails), n = 1 .. 70 (every column tail of the widest
 * table), k = 0, 1, 17, 64; each combination of ranges. */
static void test_attn_bwd_gemm_ranged(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    srand(11);
    for (int64_t m = 1; m <= 13; m++)
        for (int64_t n = 1; n <= 70; n++)
            for (int ki = 0; ki < 4; ki++)
                for (int which = 0; which < 8; which++)
                    if ((m + n + ki + which) % 5 == 0 || n < 3)
                        bwd_gemm_ranged_case(k, m, n, (int64_t[]){0, 1, 17, 64}[ki],
                                             (int)(m + which) % 2, (int)(m + n) % 2, which);
}

/* ----------------------------------------------------- attn_bwd_dsoftmax */

/* Rows of stride ld = n + 3; every third row has lse = -inf (attends to nothing); every
 * fourth a low part lo (a huge LSE's, ta_sdpa_lse_split): x = (s scale - lse) - lo. */
static void dsoftmax_case(const ta_kernels *k, const ta_kernels *ref, int64_t m, int64_t n)
{
    const int64_t ld = n + 3, ns = (m - 1) * ld + n;
    const float scale = 0.7f;
    snprintf(where, sizeof where, "%s attn_bwd_dsoftmax m=%lld n=%lld", k->name, (long long)m, (long long)n);
    arena ar = {0};
    float *s = gfloats(&ar, ns, NAN), *dp = gfloats(&ar, ns, NAN);
    float lse[17], lo[17], di[17];
    assert_true(m <= 17);
    for (int64_t r = 0; r < m; r++) {
        lse[r] = r % 3 == 1 ? -INFINITY : 3.0f * frand();
        lo[r] = r % 4 == 2 ? 2.0f + frand() : 0.0f;
        di[r] = frand();
        for (int64_t j = n; j < ld && r + 1 < m; j++) s[r * ld + j] = dp[r * ld + j] = SENTINEL;
        for (int64_t j = 0; j < n; j++) {
            s[r * ld + j] *= 20.0f;
            if (j % 5 == 4) s[r * ld + j] = -INFINITY; /* a masked score */
        }
    }
    float *ws = copy_of(s, ns), *wdp = copy_of(dp, ns), *s0 = copy_of(s, ns), *dp0 = copy_of(dp, ns);
    k->attn_bwd_dsoftmax(s, dp, ld, lse, lo, di, m, n, scale, k->attn_exp);
    ref->attn_bwd_dsoftmax(ws, wdp, ld, lse, lo, di, m, n, scale, ref->attn_exp);
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = 0; j < n; j++) {
            int64_t i = r * ld + j;
            if (lse[r] == -INFINITY) assert_true(s[i] == 0.0f && dp[i] == 0.0f);
            /* the float64 oracle: x = (s scale - lse) - lo, P = e^x, dS = P (dp - di) */
            const double sc = (double)s0[i] * scale, x = sc - lse[r] - lo[r], d = (double)dp0[i] - di[r];
            const double P = lse[r] == -INFINITY ? 0.0 : exp(x), dS = P * d;
            const double ax = fabs(sc) + fabs(x) + 2.0 * lo[r]; /* |x| + the extra rounding */
            EXPECT_ORACLE("P", i, s[i], P, exp_bound(ax, P));
            EXPECT_ORACLE("dS", i, dp[i], dS, P > 0.0 ? (ax + 5.0) * U * fabs(dS) + (1.0 + fabs(d)) * DENORMAL_SLACK : 0.0);
            EXPECT_SCALAR("P", i, s[i], ws[i], 6 * U * fabs(ws[i]) + DENORMAL_SLACK);
            EXPECT_SCALAR("dS", i, dp[i], wdp[i], 8 * U * fabs(wdp[i]) + DENORMAL_SLACK);
        }
        for (int64_t j = n; j < ld && r + 1 < m; j++) {
            EXPECT_ORACLE("gap s", r * ld + j, s[r * ld + j], SENTINEL, 0.0);
            EXPECT_ORACLE("gap dp", r * ld + j, dp[r * ld + j], SENTINEL, 0.0);
        }
    }
    free(ws);
    free(wdp);
    free(s0);
    free(dp0);
    arena_release(&ar);
}

/* attn_row_dot: the scalar table's bits on every ISA (kernels.h: one summation order),
 * and within (n + 1) u64 (|terms|) of a long double sum; n 0 .. 75 and 128, rows at any
 * float offset, operands of mixed signs and magnitudes. */
static void test_attn_row_dot(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    float *x = malloc(sizeof(float) * 140), *y = malloc(sizeof(float) * 140);
    assert_true(x && y);
    for (int i = 0; i < 140; i++) {
        x[i] = frand() * (i % 7 == 3 ? 1e4f : 1.0f);
        y[i] = frand() * (i % 5 == 1 ? 1e-3f : 1.0f);
    }
    for (int64_t n = 0; n <= 128; n = n < 75 ? n + 1 : n + 53)
        for (int off = 0; off < 3; off++) {
            snprintf(where, sizeof where, "%s attn_row_dot n=%lld offset %d", k->name,
                     (long long)n, off);
            const double got = k->attn_row_dot(x + off, y + off, n);
            const double want = ref->attn_row_dot(x + off, y + off, n);
            if (memcmp(&got, &want, sizeof got) != 0)
                fail_msg("%s: %.17g, the scalar table %.17g", where, got, want);
            long double e = 0.0L, mag = 0.0L;
            for (int64_t c = 0; c < n; c++) {
                e += (long double)x[off + c] * (long double)y[off + c];
                mag += fabsl((long double)x[off + c] * (long double)y[off + c]);
            }
            if (!(fabsl((long double)got - e) <= (long double)(n + 1) * 0x1p-53L * mag))
                fail_msg("%s: %.17g, the sum %.17Lg", where, got, e);
        }
    free(x);
    free(y);
}

static void test_attn_bwd_dsoftmax(void **state)
{
    (void)state;
    const int64_t ms[] = {1, 3, 17};
    const ta_kernels *ref, *k = tested(&ref);
    for (size_t i = 0; i < 3; i++)
        for (int64_t n = 1; n <= 35 || n == 129; n = n == 35 ? 129 : n + 1) dsoftmax_case(k, ref, ms[i], n);
}

/* ------------------------------------------------------------ attn_pack_t */

/* dst[p * ld + r] = scale * src[off[r] + p * s3] exactly (one multiply each; scale 1 an
 * exact copy), 0 on the rows past n, nothing written past the tile; the rows come from
 * anywhere in src (reversed and shuffled offsets), unit and strided columns. */
static void pack_t_case(const ta_kernels *k, int64_t ld, int64_t mq, int64_t d, int64_t s3)
{
    const int64_t rows = ld + 3;
    snprintf(where, sizeof where, "%s attn_pack_t ld=%lld n=%lld d=%lld s3=%lld", k->name,
             (long long)ld, (long long)mq, (long long)d, (long long)s3);
    arena ar = {0};
    const int64_t lds = d * s3 + 5;
    float *q = gfloats(&ar, rows * lds, NAN), *qp = gfloats(&ar, d * ld, SENTINEL);
    int64_t qoff[64];
    for (int64_t r = 0; r < mq; r++) qoff[r] = ((rows - 1 - r) * 7 % rows) * lds + (r % 2);
    const float scale = mq % 2 ? 0.37f : 1.0f;
    k->attn_pack_t(qp, ld, q, qoff, s3, mq, d, scale);
    for (int64_t p = 0; p < d; p++)
        for (int64_t r = 0; r < ld; r++) {
            const float want = r < mq ? q[qoff[r] + p * s3] * scale : 0.0f;
            if (qp[p * ld + r] != want)
                fail_msg("%s: dst[%lld, %lld] = %g, want %g", where, (long long)p, (long long)r,
                         (double)qp[p * ld + r], (double)want);
        }
    arena_release(&ar);
}

static void test_attn_pack_t(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    const int64_t ds[] = {1, 7, 8, 9, 16, 17, 64, 129};
    /* the forward's Q tile, a row of 64; the backward's K, V tiles at their own stride
     * (pack_kv: mq rounded up to 16, or mq itself below 16) */
    for (int l = 0; l < 3; l++)
        for (int64_t mq = 1; mq <= 64; mq += mq < 20 ? 1 : 7) {
            const int64_t ld = l == 0 ? k->attn_mq : l == 1 ? 64 : mq < 16 ? mq : (mq + 15) / 16 * 16;
            if (mq > ld) continue;
            for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
                for (int64_t s3 = 1; s3 <= 2; s3++) pack_t_case(k, ld, mq, ds[i], s3);
        }
}

/* ------------------------------------------------------- attn_scale_row */

/* dst = src * alpha (0 when zero) for n floats at offset floats into a buffer of n + 20
 * (so rows start aligned to the vector or not; offset 20 ends dst at a guard page), src
 * holding NaN and inf here and there: bitwise the plain products, streamed or not, and
 * the buffer's other floats untouched. (A thread reads its own streamed stores without a
 * fence.) */
static void scale_row_case(const ta_kernels *k, int64_t n, int64_t offset, int zero, int stream)
{
    snprintf(where, sizeof where, "%s attn_scale_row n=%lld offset=%lld zero=%d stream=%d",
             k->name, (long long)n, (long long)offset, zero, stream);
    arena ar = {0};
    float *src = gfloats(&ar, n, NAN), *buf = gfloats(&ar, n + 20, SENTINEL);
    float *dst = buf + offset;
    for (int64_t c = 0; c < n; c++)
        if (c % 11 == 5) src[c] = c % 2 ? INFINITY : NAN;
    const float alpha = 0.3f + (float)n;
    k->attn_scale_row(dst, src, alpha, zero, n, stream);
    for (int64_t c = 0; c < n + 20; c++)
        if ((c < offset || c >= offset + n) && buf[c] != SENTINEL)
            fail_msg("%s: buffer float %lld outside dst written", where, (long long)c);
    for (int64_t c = 0; c < n; c++) {
        const float want = zero ? 0.0f : src[c] * alpha;
        if (memcmp(&dst[c], &want, sizeof want) != 0 && !(isnan(want) && isnan(dst[c])))
            fail_msg("%s: dst[%lld] = %g, want %g", where, (long long)c, (double)dst[c],
                     (double)want);
    }
    arena_release(&ar);
}

static void test_attn_scale_row(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    for (int64_t n = 1; n <= 70; n += n < 20 ? 1 : 7)
        for (int64_t offset = 0; offset <= 20; offset += offset < 4 ? 1 : 8)
            for (int zero = 0; zero < 2; zero++)
                for (int stream = 0; stream < 2; stream++) scale_row_case(k, n, offset, zero, stream);
}

/* ------------------------------------------------------- attn_finish_rows */

/* dst rows (stride ldd, at offset floats into the buffer) = src rows (stride lds) times
 * 1 / l[r], rows whose l is 0 zero, a NaN l NaN: bitwise the plain products of the
 * reciprocal, streamed or not, and the floats between and around the rows untouched. */
static void finish_rows_case(const ta_kernels *k, int64_t rows, int64_t n, int64_t offset,
                             int stream)
{
    snprintf(where, sizeof where, "%s attn_finish_rows rows=%lld n=%lld offset=%lld stream=%d",
             k->name, (long long)rows, (long long)n, (long long)offset, stream);
    arena ar = {0};
    const int64_t ldd = n + 5, lds = n + 3, len = offset + rows * ldd;
    float *src = gfloats(&ar, rows * lds, NAN), *buf = gfloats(&ar, len, SENTINEL);
    float *l = gfloats(&ar, rows, NAN), *dst = buf + offset;
    for (int64_t r = 0; r < rows; r++) {
        l[r] = r % 4 == 1 ? 0.0f : r % 7 == 3 ? NAN : 0.75f + 0.37f * (float)r;
        for (int64_t c = 0; c < n; c++)
            src[r * lds + c] = (c + r) % 13 == 6 ? INFINITY : 0.1f * (float)(c - 3 * r);
    }
    k->attn_finish_rows(dst, ldd, src, lds, l, rows, n, stream);
    for (int64_t c = 0; c < len; c++) {
        const int64_t r = (c - offset) / ldd, col = (c - offset) % ldd;
        if ((c < offset || col >= n) && buf[c] != SENTINEL)
            fail_msg("%s: buffer float %lld outside the rows written", where, (long long)c);
        if (c < offset || col >= n) continue;
        const float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
        const float want = l[r] == 0.0f ? 0.0f : src[r * lds + col] * inv;
        if (memcmp(&buf[c], &want, sizeof want) != 0 && !(isnan(want) && isnan(buf[c])))
            fail_msg("%s: row %lld col %lld = %g, want %g", where, (long long)r,
                     (long long)col, (double)buf[c], (double)want);
    }
    arena_release(&ar);
}

static void test_attn_finish_rows(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    for (int64_t rows = 1; rows <= 9; rows += 4)
        for (int64_t n = 1; n <= 70; n += n < 20 ? 3 : 11)
            for (int64_t offset = 0; offset <= 16; offset += 16)
                for (int stream = 0; stream < 2; stream++)
                    finish_rows_case(k, rows, n, offset, stream);
}

/* ---------------------------------------- few-row kernels on typed rows */

static const char *const kind_names[3] = {"f32", "f16", "bf16"};

/* n rows of cols values (row stride ld elements, the last row ending at a guard page) in
 * the kind's type, and their exact float32 values in *wide (ld floats a row). */
static void *typed_rows(arena *a, int kind, int64_t n, int64_t cols, int64_t ld, float **wide)
{
    const int64_t es = kind == 0 ? 4 : 2, count = n ? (n - 1) * ld + cols : 0;
    assert_true(a->n < 8);
    char *p = ta_guard_bytes(&a->g[a->n++], (size_t)(count > 0 ? count * es : 1));
    assert_non_null(p);
    float *w = malloc(sizeof(float) * (size_t)(n * ld + 1));
    assert_non_null(w);
    for (int64_t i = 0; i < count; i++) {
        float x = frand() * 2.0f;
        if (kind == 1) {
            const uint16_t h = ta_f32_to_f16(x);
            memcpy(p + 2 * i, &h, 2);
            x = ta_f16_to_f32(h);
        } else if (kind == 2) {
            const uint16_t h = ta_f32_to_bf16(x);
            memcpy(p + 2 * i, &h, 2);
            x = ta_bf16_to_f32(h);
        } else {
            memcpy(p + 4 * i, &x, 4);
        }
        w[i] = x;
    }
    *wide = w;
    return p;
}

/* q rows in the layout attn_qk_rows_kv takes for the kind (kernels.h: bfloat16 blocks of
 * 2 vl hold their even elements, then the odd). */
static void permute_q(float *dst, const float *q, int64_t mq, int64_t ldq, int64_t d,
                      int64_t vl, int kind)
{
    for (int64_t r = 0; r < mq; r++) {
        memcpy(dst + r * ldq, q + r * ldq, sizeof(float) * (size_t)d);
        for (int64_t b = 0; kind == 2 && b + 2 * vl <= d; b += 2 * vl)
            for (int64_t i = 0; i < vl; i++) {
                dst[r * ldq + b + i] = q[r * ldq + b + 2 * i];
                dst[r * ldq + b + vl + i] = q[r * ldq + b + 2 * i + 1];
            }
    }
}

static void qk_rows_kv_case(const ta_kernels *k, const ta_kernels *ref, int kind, int64_t d,
                            int64_t nk, int64_t mq)
{
    const int64_t MQ = k->attn_mq, ldq = d + 2, ldk = d + 3, es = kind == 0 ? 4 : 2;
    snprintf(where, sizeof where, "%s attn_qk_rows_kv %s d=%lld nk=%lld mq=%lld", k->name,
             kind_names[kind], (long long)d, (long long)nk, (long long)mq);
    arena ar = {0};
    float *kw;
    const float *q = gfloats(&ar, (mq - 1) * ldq + d, NAN);
    float *qk = gfloats(&ar, (mq - 1) * ldq + d, 0.0f), *qr = gfloats(&ar, (mq - 1) * ldq + d, 0.0f);
    /* rows past the keys: the table points one row past each key's, and the
     * kernels read it at koff = minus a row (a sweep's shared table and its offset) */
    const void *kk = typed_rows(&ar, kind, nk + 2, d, ldk, &kw);
    const int64_t koff = -es * ldk;
    float *s = gfloats(&ar, nk * MQ, SENTINEL), *rs = gfloats(&ar, nk * MQ, SENTINEL);
    permute_q(qk, q, mq, ldq, d, k->attn_vl, kind);
    permute_q(qr, q, mq, ldq, d, ref->attn_vl, kind);
    /* the table in reverse key order, and TA_ROWS_AHEAD rows to prefetch past the keys */
    const void *rows[64 + TA_ROWS_AHEAD];
    assert_true(nk <= 64);
    for (int64_t j = 0; j < nk + TA_ROWS_AHEAD; j++)
        rows[j] = (const char *)kk + es * ldk * (nk ? nk - j % nk : 1);
    k->attn_qk_rows_kv[kind](s, MQ, qk, ldq, mq, rows, koff, nk, d, nk + TA_ROWS_AHEAD, rows,
                             koff, d * es, NULL);
    ref->attn_qk_rows_kv[kind](rs, MQ, qr, ldq, mq, rows, koff, nk, d, nk, NULL, 0, 0, NULL);
    { /* with a caller's prefetch stream: the same bits, and every line of it requested */
        float *s2 = gfloats(&ar, nk * MQ, SENTINEL);
        ta_pf_span spans[2] = {{(const char *)kk, (const char *)kk + es * ldk * nk},
                               {(const char *)q, (const char *)(q + d)}};
        ta_pf pf = {spans, spans + 2};
        k->attn_qk_rows_kv[kind](s2, MQ, qk, ldq, mq, rows, koff, nk, d, nk, NULL, 0, 0, &pf);
        assert_memory_equal(s2, s, sizeof(float) * (size_t)(nk * MQ));
        if (nk > 0) assert_true(pf.next == pf.end);
    }
    for (int64_t j = 0; j < nk; j++)
        for (int64_t r = 0; r < MQ; r++) {
            const int64_t i = j * MQ + r;
            if (r >= mq) {
                EXPECT_ORACLE("untouched s", i, s[i], SENTINEL, 0.0);
                continue;
            }
            double sum = 0.0, e = 0.0;
            for (int64_t p = 0; p < d; p++) {
                const double t = (double)q[r * ldq + p] * kw[(nk - 1 - j) * ldk + p];
                sum += fabs(t);
                e += t;
            }
            EXPECT_ORACLE("s", i, s[i], e, ((double)d + 1.0) * U * sum);
            EXPECT_SCALAR("s", i, s[i], rs[i], (2.0 * (double)d + 2.0) * U * sum);
        }
    free(kw);
    arena_release(&ar);
}

/* d = 1 .. 4 vectors and 8 (D 128 at 16 lanes), odd vector counts leaving a last block of
 * one vector (bfloat16); nk = 0 .. 19 (every block tail of VL / R keys), 64; mq = 1 ..
 * attn_rows_max; every kind. */
static void test_attn_qk_rows_kv(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    const int64_t VL = k->attn_vl, dvs[] = {1, 2, 3, 4, 5, 8};
    for (int kind = 0; kind < 3; kind++)
        for (size_t di = 0; di < sizeof dvs / sizeof dvs[0]; di++)
            for (int64_t nk = 0; nk <= 20; nk++)
                for (int64_t mq = 1; mq <= k->attn_rows_max; mq++)
                    if (nk < 20 ? (nk + mq + (int64_t)di) % 3 == 0 || dvs[di] == 8 : 1)
                        qk_rows_kv_case(k, ref, kind, dvs[di] * VL, nk == 20 ? 64 : nk, mq);
}

/* The tested table when it is avx512bf16, which has both of the bfloat16 dot product's
 * kernels, else NULL, after checking that it and the scalar table have neither. */
static const ta_kernels *bf16dot_table(void)
{
    const ta_kernels *ref, *k = tested(&ref);
    assert_true(!ref->attn_qk_rows_bf16dot && !ref->attn_qk_bf16dot && !ref->attn_bwd_gemm_bf16dot);
    if (k->isa != TA_ISA_AVX512BF16) {
        assert_true(!k->attn_qk_rows_bf16dot && !k->attn_qk_bf16dot && !k->attn_bwd_gemm_bf16dot);
        return NULL;
    }
    assert_true(k->attn_qk_rows_bf16dot && k->attn_qk_bf16dot && k->attn_bwd_gemm_bf16dot);
    return k;
}

/* attn_qk_rows_bf16dot (the avx512bf16 table; NULL elsewhere): bfloat16 q rows and K rows,
 * the scores times scale, against the float64 oracle of the same bfloat16 values. */
static void qk_rows_bf16dot_case(const ta_kernels *k, int64_t d, int64_t nk, int64_t mq)
{
    const int64_t MQ = k->attn_mq, ldq = d + 2, ldk = d + 3;
    const float scale = 0.37f;
    snprintf(where, sizeof where, "%s attn_qk_rows_bf16dot d=%lld nk=%lld mq=%lld", k->name,
             (long long)d, (long long)nk, (long long)mq);
    arena ar = {0};
    float *kw, *qw;
    const uint16_t *q = typed_rows(&ar, 2, mq, d, ldq, &qw);
    /* the table points one row past each key's and is read at koff = minus a row */
    const void *kk = typed_rows(&ar, 2, nk + 2, d, ldk, &kw);
    const int64_t koff = -2 * ldk;
    float *s = gfloats(&ar, nk * MQ, SENTINEL), *s2 = gfloats(&ar, nk * MQ, SENTINEL);
    const void *rows[64 + TA_ROWS_AHEAD]; /* reverse key order, rows to prefetch past them */
    assert_true(nk <= 64);
    for (int64_t j = 0; j < nk + TA_ROWS_AHEAD; j++)
        rows[j] = (const char *)kk + 2 * ldk * (nk ? nk - j % nk : 1);
    k->attn_qk_rows_bf16dot(s, MQ, q, ldq, mq, scale, rows, koff, nk, d, nk + TA_ROWS_AHEAD,
                            rows, koff, 2 * d, NULL);
    { /* with a caller's prefetch stream: the same bits, and every line of it requested */
        ta_pf_span spans[2] = {{(const char *)kk, (const char *)kk + 2 * ldk * nk},
                               {(const char *)q, (const char *)(q + d)}};
        ta_pf pf = {spans, spans + 2};
        k->attn_qk_rows_bf16dot(s2, MQ, q, ldq, mq, scale, rows, koff, nk, d, nk, NULL, 0, 0, &pf);
        assert_memory_equal(s2, s, sizeof(float) * (size_t)(nk * MQ));
        if (nk > 0) assert_true(pf.next == pf.end);
    }
    for (int64_t j = 0; j < nk; j++)
        for (int64_t r = 0; r < MQ; r++) {
            const int64_t i = j * MQ + r;
            if (r >= mq) {
                EXPECT_ORACLE("untouched s", i, s[i], SENTINEL, 0.0);
                continue;
            }
            double sum = 0.0, e = 0.0;
            for (int64_t p = 0; p < d; p++) {
                const double t = (double)qw[r * ldq + p] * kw[(nk - 1 - j) * ldk + p];
                sum += fabs(t);
                e += t;
            }
            /* d products exact, d roundings of the sums at most, one of the product by scale */
            EXPECT_ORACLE("s", i, s[i], (double)scale * e, ((double)d + 2.0) * U * scale * sum);
        }
    free(kw);
    free(qw);
    arena_release(&ar);
}

/* The avx512bf16 table has it, the others not; d = 1 .. 8 vectors (D 128 at 16 lanes; an
 * odd count ends in a step of one vector); nk = 0 .. 19 (every block tail of VL / R keys),
 * 64; mq = 1 .. attn_rows_max. */
static void test_attn_qk_rows_bf16dot(void **state)
{
    (void)state;
    const ta_kernels *k = bf16dot_table();
    if (!k) return;
    const int64_t VL = k->attn_vl;
    for (int64_t dv = 1; dv <= 8; dv++)
        for (int64_t nk = 0; nk <= 20; nk++)
            for (int64_t mq = 1; mq <= k->attn_rows_max; mq++)
                if (nk < 20 ? (nk + mq + dv) % 3 == 0 || dv == 8 : 1)
                    qk_rows_bf16dot_case(k, dv * VL, nk == 20 ? 64 : nk, mq);
}

/* attn_qk_bf16dot (the avx512bf16 table; NULL elsewhere): bfloat16 q pairs and K rows
 * (ldk = d + 3 elements: odd, so rows start 2-byte aligned), the scores times scale,
 * against the float64 oracle of the same bfloat16 values; rowk as attn_qk's; with a
 * prefetch stream the same bits. */
static void qk_bf16dot_case(const ta_kernels *k, int64_t d, int64_t nk, int with_rowk)
{
    const int64_t MQ = k->attn_mq, ldk = d + 3;
    const float scale = 0.37f;
    snprintf(where, sizeof where, "%s attn_qk_bf16dot d=%lld nk=%lld rowk=%d", k->name,
             (long long)d, (long long)nk, with_rowk);
    arena ar = {0};
    float *qw, *kw;
    const uint16_t *qr = typed_rows(&ar, 2, MQ, d, d, &qw); /* q rows [MQ, d] */
    const uint16_t *kk = typed_rows(&ar, 2, nk, d, ldk, &kw);
    assert_true(ar.n < 8);
    uint16_t *qp = (uint16_t *)ta_guard_bytes(&ar.g[ar.n++], (size_t)(d * MQ * 2 + 2));
    assert_non_null(qp);
    for (int64_t p = 0; p < d; p++)
        for (int64_t r = 0; r < MQ; r++) qp[(p / 2) * 2 * MQ + 2 * r + p % 2] = qr[r * d + p];
    float *s = gfloats(&ar, nk * MQ, SENTINEL);
    int32_t *rowk = NULL;
    if (with_rowk) {
        rowk = malloc(sizeof(int32_t) * (size_t)MQ);
        assert_non_null(rowk);
        for (int64_t r = 0; r < MQ; r++) rowk[r] = irand(nk + 1);
    }
    ta_pf_span sp[2] = {{(const char *)kk, (const char *)(kk + (nk ? (nk - 1) * ldk + d : 0))},
                        {(const char *)qp, (const char *)(qp + d * MQ)}};
    ta_pf pf = {sp, sp + 2};
    k->attn_qk_bf16dot(s, qp, kk, ldk, nk, d, scale, rowk, &pf);
    assert_true(pf.next <= pf.end);
    float *s2 = copy_of(s, nk * MQ);
    k->attn_qk_bf16dot(s2, qp, kk, ldk, nk, d, scale, rowk, NULL);
    if (memcmp(s, s2, sizeof(float) * (size_t)(nk * MQ)) != 0)
        fail_msg("%s: the scores with a prefetch stream differ from those without", where);
    free(s2);
    for (int64_t j = 0; j < nk; j++)
        for (int64_t r = 0; r < MQ; r++) {
            const int64_t i = j * MQ + r;
            double sum = 0.0, e = 0.0;
            for (int64_t p = 0; p < d; p++) {
                const double t = (double)qw[r * d + p] * kw[j * ldk + p];
                sum += fabs(t);
                e += t;
            }
            e *= scale;
            sum *= scale;
            if (rowk && j >= rowk[r]) { /* a score the row does not need: as it was, or right */
                if (s[i] != SENTINEL) EXPECT_ORACLE("unneeded s", i, s[i], e, ((double)d + 2.0) * U * sum);
                continue;
            }
            EXPECT_ORACLE("s", i, s[i], e, ((double)d + 2.0) * U * sum);
        }
    free(rowk);
    free(qw);
    free(kw);
    arena_release(&ar);
}

/* The avx512bf16 table has it, the others not; key counts 1 .. 17 (every tail of a
 * micro-tile of keys) and 64, d = 2, 16, 34, 128, with and without row bounds. */
static void test_attn_qk_bf16dot(void **state)
{
    (void)state;
    const ta_kernels *k = bf16dot_table();
    if (!k) return;
    const int64_t ds[] = {2, 16, 34, 128};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        for (int64_t nk = 1; nk <= 18; nk++)
            for (int rk = 0; rk < 2; rk++) qk_bf16dot_case(k, ds[i], nk == 18 ? 64 : nk, rk);
}

/* attn_bwd_gemm_bf16dot (the avx512bf16 table; NULL elsewhere): A's bfloat16 rows (lda =
 * k + 1 elements: odd, so rows start 2-byte aligned) times B given as the pairs of n
 * bfloat16 rows (B[p, j] = row j's element p), against the float64 oracle of the same
 * values; with nhi, a row's columns from its nhi on are 0 or right (its micro-tile's
 * rows may need them); columns past n untouched; with a prefetch stream the same bits. */
static void bwd_gemm_bf16dot_case(const ta_kernels *k, int64_t m, int64_t n, int64_t kd,
                                  int with_nhi)
{
    const int64_t lda = kd + 1, ldb = n + 3, ldc = n + 2;
    snprintf(where, sizeof where, "%s attn_bwd_gemm_bf16dot m=%lld n=%lld k=%lld nhi=%d",
             k->name, (long long)m, (long long)n, (long long)kd, with_nhi);
    arena ar = {0};
    float *aw, *bw;
    const uint16_t *a = typed_rows(&ar, 2, m, kd, lda, &aw);
    const uint16_t *br = typed_rows(&ar, 2, n, kd, kd, &bw); /* B^T's rows [n, k] */
    assert_true(ar.n < 8);
    uint32_t *b = (uint32_t *)ta_guard_bytes(&ar.g[ar.n++], (size_t)((kd / 2 - 1) * ldb + n) * 4);
    assert_non_null(b);
    for (int64_t p = 0; p < kd / 2; p++)
        for (int64_t j = 0; j < n; j++)
            b[p * ldb + j] = (uint32_t)br[j * kd + 2 * p] | (uint32_t)br[j * kd + 2 * p + 1] << 16;
    float *c = gfloats(&ar, (m - 1) * ldc + n, SENTINEL);
    int32_t nhi[16];
    assert_true(m <= 16);
    for (int64_t r = 0; r < m; r++) nhi[r] = (int32_t)irand(n + 1);
    ta_pf_span sp[1] = {{(const char *)b, (const char *)(b + (kd / 2 - 1) * ldb + n)}};
    ta_pf pf = {sp, sp + 1};
    k->attn_bwd_gemm_bf16dot(c, ldc, a, lda, b, ldb, m, n, kd, with_nhi ? nhi : NULL, &pf);
    assert_true(pf.next <= pf.end);
    float *c2 = copy_of(c, (m - 1) * ldc + n);
    k->attn_bwd_gemm_bf16dot(c2, ldc, a, lda, b, ldb, m, n, kd, with_nhi ? nhi : NULL, NULL);
    if (memcmp(c, c2, sizeof(float) * (size_t)((m - 1) * ldc + n)) != 0)
        fail_msg("%s: the product with a prefetch stream differs from that without", where);
    free(c2);
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < ldc && r * ldc + j < (m - 1) * ldc + n; j++) {
            const int64_t i = r * ldc + j;
            if (j >= n) {
                EXPECT_ORACLE("untouched c", i, c[i], SENTINEL, 0.0);
                continue;
            }
            double sum = 0.0, e = 0.0;
            for (int64_t p = 0; p < kd; p++) {
                const double t = (double)aw[r * lda + p] * bw[j * kd + p];
                sum += fabs(t);
                e += t;
            }
            /* k products exact, two roundings a pair at most */
            if (with_nhi && j >= nhi[r] && c[i] == 0.0f) continue;
            EXPECT_ORACLE("c", i, c[i], e, ((double)kd + 2.0) * U * sum);
        }
    free(aw);
    free(bw);
    arena_release(&ar);
}

/* The avx512bf16 table has it, the others not; m = 1 .. 13 (every tail of a micro-tile
 * of up to 8 rows), n = 1 .. 17, 33, 64, 70 (every column tail), k = 2, 16, 34, 64, 130,
 * with and without column bounds. */
static void test_attn_bwd_gemm_bf16dot(void **state)
{
    (void)state;
    const ta_kernels *k = bf16dot_table();
    if (!k) return;
    const int64_t ns[] = {1, 2, 3, 5, 8, 9, 15, 16, 17, 33, 64, 70}, ks[] = {2, 16, 34, 64, 130};
    for (int64_t m = 1; m <= 13; m++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
                if ((m + (int64_t)a + (int64_t)b) % 2 == 0 || m == 6 || ns[a] == 64)
                    bwd_gemm_bf16dot_case(k, m, ns[a], ks[b], (int)((m + (int64_t)a) % 2));
}

static void pv_rows_kv_case(const ta_kernels *k, int kind, int64_t nk, int64_t dv, int64_t mq)
{
    const int64_t MQ = k->attn_mq, ldo = dv, ldv = dv + 5, es = kind == 0 ? 4 : 2;
    snprintf(where, sizeof where, "%s attn_pv_rows_kv %s nk=%lld dv=%lld mq=%lld", k->name,
             kind_names[kind], (long long)nk, (long long)dv, (long long)mq);
    arena ar = {0};
    float *vw;
    float *o = gfloats(&ar, mq * ldo, NAN), *p = gfloats(&ar, nk * MQ, NAN);
    const float *alpha = gfloats(&ar, MQ, NAN);
    /* rows past the keys: the table points one row past each key's, read at voff
     * = minus a row (a sweep's shared table and its offset) */
    const void *v = typed_rows(&ar, kind, nk + 2, dv, ldv, &vw);
    const int64_t voff = -es * ldv;
    for (int64_t i = 0; i < nk * MQ; i++) p[i] = fabsf(p[i]);
    float *o0 = copy_of(o, mq * ldo), *ow = copy_of(o, mq * ldo);
    /* the table in reverse key order (attn_pv gets the widened rows so reordered) */
    const void *rows[64 + TA_ROWS_AHEAD];
    float *vr = malloc(sizeof(float) * (size_t)(nk * ldv + 1));
    assert_true(nk <= 64 && vr);
    for (int64_t j = 0; j < nk + TA_ROWS_AHEAD; j++)
        rows[j] = (const char *)v + es * ldv * (nk ? nk - j % nk : 1);
    for (int64_t j = 0; j < nk; j++) memcpy(vr + j * ldv, vw + (nk - 1 - j) * ldv, sizeof(float) * (size_t)dv);
    float *o2 = copy_of(o, mq * ldo);
    k->attn_pv_rows_kv[kind](o, ldo, p, MQ, alpha, rows, voff, nk, dv, mq, nk + TA_ROWS_AHEAD, NULL);
    { /* with a caller's prefetch stream: the same bits, and every line of it requested */
        ta_pf_span spans[2] = {{(const char *)v, (const char *)v + es * ldv * nk},
                               {(const char *)p, (const char *)(p + nk * MQ)}};
        ta_pf pf = {spans, spans + 2};
        k->attn_pv_rows_kv[kind](o2, ldo, p, MQ, alpha, rows, voff, nk, dv, mq, nk, &pf);
        assert_memory_equal(o2, o, sizeof(float) * (size_t)(mq * ldo));
        if (nk > 0) assert_true(pf.next == pf.end);
        free(o2);
    }
    k->attn_pv(ow, ldo, p, alpha, vr, ldv, nk, dv, mq, NULL, NULL);
    for (int64_t r = 0; r < mq; r++)
        for (int64_t c = 0; c < dv; c++) {
            const int64_t i = r * ldo + c;
            double e = (double)o0[i] * alpha[r], sum = fabs(e);
            for (int64_t j = 0; j < nk; j++) {
                const double t = (double)p[j * MQ + r] * vr[j * ldv + c];
                sum += fabs(t);
                e += t;
            }
            EXPECT_ORACLE("o", i, o[i], e, ((double)nk + 2.0) * U * sum);
            expect_near("table's attn_pv on the widened rows", "o", i, o[i], ow[i], 0.0);
        }
    free(vw);
    free(vr);
    free(o0);
    free(ow);
    arena_release(&ar);
}

/* dv = 1 .. 9 vectors and 16 (every column grouping of 8, 4, 2, 1 vectors); mq = 1 ..
 * attn_rows_max; nk = 0, 1, 3, 17, 64; every kind. */
static void test_attn_pv_rows_kv(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    const int64_t VL = k->attn_vl, nks[] = {0, 1, 3, 17, 64};
    for (int kind = 0; kind < 3; kind++)
        for (int64_t nv = 1; nv <= 10; nv++)
            for (int64_t mq = 1; mq <= k->attn_rows_max; mq++)
                for (size_t j = 0; j < 5; j++)
                    if ((nv + mq + (int64_t)j) % 2 == 0 || nks[j] == 17)
                        pv_rows_kv_case(k, kind, nks[j], (nv == 10 ? 16 : nv) * VL, mq);
}

static void softmax_rows_case(const ta_kernels *k, int64_t nk, int64_t mq)
{
    const int64_t MQ = k->attn_mq;
    snprintf(where, sizeof where, "%s attn_softmax_rows nk=%lld mq=%lld", k->name,
             (long long)nk, (long long)mq);
    arena ar = {0};
    float *s, *m, *l, *alpha;
    softmax_inputs(&ar, MQ, nk, &s, &m, &l, &alpha);
    float *s0 = copy_of(s, nk * MQ), *m0 = copy_of(m, MQ), *l0 = copy_of(l, MQ);
    float *sw = copy_of(s, nk * MQ), *mw = copy_of(m, MQ), *lw = copy_of(l, MQ), *aw = copy_of(alpha, MQ);
    k->attn_softmax_rows(s, MQ, m, l, alpha, nk, mq);
    k->attn_softmax(sw, mw, lw, aw, nk, mq, NULL);
    for (int64_t r = 0; r < MQ; r++) {
        if (r >= mq) {
            EXPECT_ORACLE("untouched m", r, m[r], m0[r], 0.0);
            EXPECT_ORACLE("untouched l", r, l[r], l0[r], 0.0);
            EXPECT_ORACLE("untouched alpha", r, alpha[r], SENTINEL, 0.0);
            continue;
        }
        expect_near("table's attn_softmax", "m", r, m[r], mw[r], 0.0);
        expect_near("table's attn_softmax", "alpha", r, alpha[r], aw[r], 0.0);
        for (int64_t j = 0; j < nk; j++)
            expect_near("table's attn_softmax", "s", j * MQ + r, s[j * MQ + r], sw[j * MQ + r], 0.0);
        softmax_oracle_row(k, r, MQ, nk, mq, s0, m0, l0, s, m, l, alpha);
    }
    /* The same tile packed, G = 1, 2, 4 or 8 rows a key (the decode sweep's layout, worked in
     * place): the same bits, in a buffer of just the room the contract asks for (nk
     * rounded up to VL / G keys; AddressSanitizer sees a step past it). */
    const int64_t G = mq <= 1 ? 1 : mq <= 2 ? 2 : mq <= 4 ? 4 : 8;
    const int64_t kpv = k->attn_vl / G > 1 ? k->attn_vl / G : 1;
    const int64_t room = (nk + kpv - 1) / kpv * kpv * G;
    float *sp = malloc(sizeof(float) * (size_t)room);
    float *mp = copy_of(m0, MQ), *lp = copy_of(l0, MQ), *ap = copy_of(alpha, MQ);
    assert_non_null(sp);
    for (int64_t i = 0; i < room; i++) sp[i] = 1.0f; /* rows past the tile's: finite */
    for (int64_t j = 0; j < nk; j++)
        for (int64_t r = 0; r < G && r < MQ; r++) sp[j * G + r] = s0[j * MQ + r];
    k->attn_softmax_rows(sp, G, mp, lp, ap, nk, mq);
    for (int64_t r = 0; r < mq; r++) {
        expect_near("the strided call", "packed m", r, mp[r], m[r], 0.0);
        expect_near("the strided call", "packed l", r, lp[r], l[r], 0.0);
        expect_near("the strided call", "packed alpha", r, ap[r], alpha[r], 0.0);
        for (int64_t j = 0; j < nk; j++)
            expect_near("the strided call", "packed s", j * G + r, sp[j * G + r], s[j * MQ + r], 0.0);
    }
    free(sp);
    free(mp);
    free(lp);
    free(ap);
    free(s0);
    free(m0);
    free(l0);
    free(sw);
    free(mw);
    free(lw);
    free(aw);
    arena_release(&ar);
}

/* The two forms of the exps (ta_exp_denormal_assist: 1 masks the lanes below -87 and
 * computes the rare denormal ones again, 0 one pass clamped at -104) give the same bits:
 * attn_exp over [-120, 0] in steps that hit every 1/32 of the reduction and the edges
 * -87 and -104 (plus -inf, NaN, 0), and attn_softmax (with and without row counts) and
 * attn_softmax_rows on scores spread over 240, so that many p land in [-104, -87). */
static void test_exp_forms_bitwise(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    const int saved = ta_exp_denormal_assist;
    enum { N = 1 << 14 };
    float *x = malloc(N * sizeof(float)), *y[2];
    y[0] = malloc(N * sizeof(float));
    y[1] = malloc(N * sizeof(float));
    for (int n = 0; n < N; n++) x[n] = -120.0f * (float)n / (float)N;
    x[0] = -INFINITY, x[1] = NAN, x[2] = 0.0f, x[3] = -87.0f, x[4] = -104.0f;
    x[5] = nextafterf(-87.0f, 0.0f), x[6] = nextafterf(-87.0f, -200.0f);
    x[7] = nextafterf(-104.0f, 0.0f), x[8] = nextafterf(-104.0f, -200.0f);
    for (int f = 0; f < 2; f++) {
        ta_exp_denormal_assist = f;
        k->attn_exp(y[f], x, N - 3); /* a tail */
    }
    snprintf(where, sizeof where, "%s attn_exp, the two exp forms", k->name);
    for (int n = 0; n < N - 3; n++)
        if (memcmp(&y[0][n], &y[1][n], sizeof(float)) != 0)
            fail_msg("%s: exp(%a) = %a (one pass) against %a (masked)", where, (double)x[n],
                     (double)y[0][n], (double)y[1][n]);
    const int64_t MQ = k->attn_mq;
    const int64_t mqs[] = {1, 3, k->attn_rows_max, MQ - 1, MQ};
    for (int64_t nk = 1; nk <= 70; nk += 23)
        for (size_t mi = 0; mi < sizeof mqs / sizeof mqs[0]; mi++)
            for (int kind = 0; kind < 3; kind++) {
                const int64_t mq = mqs[mi];
                snprintf(where, sizeof where, "%s %s nk=%lld mq=%lld, the two exp forms", k->name,
                         kind == 2 ? "attn_softmax_rows" : "attn_softmax", (long long)nk,
                         (long long)mq);
                if (kind == 2 && mq > k->attn_rows_max) continue;
                arena ar = {0};
                float *s, *m, *l, *alpha;
                softmax_inputs(&ar, MQ, nk, &s, &m, &l, &alpha);
                for (int64_t i = 0; i < nk * MQ; i++) s[i] *= 4.0f;
                int32_t rowk[64];
                assert_true(MQ <= 64);
                for (int64_t r = 0; r < MQ; r++) rowk[r] = irand(nk + 1);
                float *c[2][4];
                for (int f = 0; f < 2; f++) {
                    c[f][0] = copy_of(s, nk * MQ), c[f][1] = copy_of(m, MQ);
                    c[f][2] = copy_of(l, MQ), c[f][3] = copy_of(alpha, MQ);
                    ta_exp_denormal_assist = f;
                    if (kind == 2) k->attn_softmax_rows(c[f][0], MQ, c[f][1], c[f][2], c[f][3], nk, mq);
                    else k->attn_softmax(c[f][0], c[f][1], c[f][2], c[f][3], nk, mq, kind ? rowk : NULL);
                }
                const int64_t len[4] = {nk * MQ, MQ, MQ, MQ};
                for (int a = 0; a < 4; a++) {
                    if (memcmp(c[0][a], c[1][a], sizeof(float) * (size_t)len[a]) != 0)
                        fail_msg("%s: output %d differs", where, a);
                    free(c[0][a]);
                    free(c[1][a]);
                }
                arena_release(&ar);
            }
    ta_exp_denormal_assist = saved;
    free(x);
    free(y[0]);
    free(y[1]);
}

/* nk = 1 .. 9, 17, 63, 64, 65, 130 (chunks of 64 keys and their tails); mq = 1 ..
 * attn_rows_max. */
static void test_attn_softmax_rows(void **state)
{
    (void)state;
    const ta_kernels *ref, *k = tested(&ref);
    (void)ref;
    const int64_t nks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 63, 64, 65, 130};
    for (size_t i = 0; i < sizeof nks / sizeof nks[0]; i++)
        for (int64_t mq = 1; mq <= k->attn_rows_max; mq++) softmax_rows_case(k, nks[i], mq);
    softmax_big = 1; /* shifts past TA_EXP2_BIG in some rows */
    for (int64_t mq = 1; mq <= k->attn_rows_max; mq++) softmax_rows_case(k, 17, mq);
    softmax_big = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables_meet_their_limits),
        cmocka_unit_test(test_sgemm_ukr),
        cmocka_unit_test(test_attn_qk),
        cmocka_unit_test(test_attn_qk_rows),
        cmocka_unit_test(test_attn_softmax),
        cmocka_unit_test(test_attn_pv),
        cmocka_unit_test(test_attn_exp),
        cmocka_unit_test(test_attn_pack_t),
        cmocka_unit_test(test_attn_scale_row),
        cmocka_unit_test(test_attn_finish_rows),
        cmocka_unit_test(test_attn_qk_rows_kv),
        cmocka_unit_test(test_attn_qk_rows_bf16dot),
        cmocka_unit_test(test_attn_qk_bf16dot),
        cmocka_unit_test(test_attn_bwd_gemm_bf16dot),
        cmocka_unit_test(test_attn_pv_rows_kv),
        cmocka_unit_test(test_attn_softmax_rows),
        cmocka_unit_test(test_attn_softmax_exp_range),
        cmocka_unit_test(test_exp_forms_bitwise),
        cmocka_unit_test(test_attn_bwd_gemm),
        cmocka_unit_test(test_attn_bwd_gemm_ranged),
        cmocka_unit_test(test_attn_bwd_dsoftmax),
        cmocka_unit_test(test_attn_row_dot),
    };
    char group[96];
    snprintf(group, sizeof group, "kernels (%s) against float64 and scalar", ta_isa_name(ta_active_isa()));
    return cmocka_run_group_tests_name(group, tests, NULL, NULL);
}
