/* ta-test: all-isas -- ta_einsum / ta_einsum1 / ta_einsum_shape against a naive
 * float64 einsum written here.
 *
 * The oracle parses the spec on its own (torch 1.13 rules: "..." right-aligned and
 * broadcast, size-1 dims broadcast, implicit output = "..." then the letters seen once
 * in character-code order) and loops over every value of every index, adding the
 * product of the operands' elements into a float64 output, and |product| into a
 * second one. A result passes when |got - ref| <= 1e-6 * sqrt(K) * sum|terms| + 1e-30
 * with K the number of terms summed into one element: a wrong or missing term is
 * O(sum|terms|) and always fails, rounding (about sqrt(K) * 2^-24 for a random sign
 * mix) never does.
 *
 * Pins down: (a) randomized specs x shapes (1, 3, 17, a few 129/257) x layouts
 * (permuted, stepped, negative, stride-0 expanded), diagonals, ellipsis, broadcasting,
 * outer products, scalars; (b) the seed's four contractions run as one GEMM with no
 * copy of the inputs; (c) one thread and two give bitwise-identical results; (d) every
 * error path, with its message and untouched outputs; (e) pre-allocated strided
 * outputs (gaps untouched) and ta_einsum_shape. */
#include "ta_test.h"
#include "ops/einsum.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- random */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }
static float rng_float(void) { return (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* ---------------------------------------------------------------- oracle */

#define OR_MAX_SYM 64 /* 52 letters, then up to 8 dims under "..." */

typedef struct oracle_term {
    int n;       /* symbols, with the ellipsis expanded */
    int sym[16];
} oracle_term;

static int sym_of_letter(char c) { return c >= 'a' ? 26 + (c - 'a') : c - 'A'; }

/* Splits one term (no spaces) into letters and the ellipsis position. */
static void oracle_split(const char *s, int len, int *letters, int *nl, int *ell)
{
    *nl = 0;
    *ell = -1;
    for (int i = 0; i < len; i++) {
        if (s[i] == '.') {
            *ell = *nl;
            i += 2;
        } else {
            letters[(*nl)++] = sym_of_letter(s[i]);
        }
    }
}

typedef struct oracle_result {
    int ndim;
    int64_t shape[TA_MAX_DIMS];
    int64_t numel;
    int64_t terms; /* products summed into each output element */
    double *val, *mag;
} oracle_result;

/* The naive einsum: every index value, every product, in float64. */
static void oracle(oracle_result *r, const char *spec_in, int nops, const ta_tensor *const *ops)
{
    char spec[256];
    int len = 0;
    for (const char *p = spec_in; *p; p++)
        if (*p != ' ') spec[len++] = *p;
    spec[len] = 0;
    const char *arrow = strstr(spec, "->");
    int in_len = arrow ? (int)(arrow - spec) : len;
    int letters[3][16], nl[3], ell[3], ne[2], E = 0;
    const char *t0 = spec;
    for (int k = 0; k < nops; k++) {
        const char *comma = memchr(t0, ',', (size_t)(spec + in_len - t0));
        int tl = comma && k == 0 && nops == 2 ? (int)(comma - t0) : (int)(spec + in_len - t0);
        oracle_split(t0, tl, letters[k], &nl[k], &ell[k]);
        ne[k] = ell[k] >= 0 ? ops[k]->ndim - nl[k] : 0;
        if (ne[k] > E) E = ne[k];
        t0 += tl + 1;
    }
    oracle_term term[2];
    int64_t size[OR_MAX_SYM];
    int count[OR_MAX_SYM] = {0};
    for (int s = 0; s < OR_MAX_SYM; s++) size[s] = -1;
    for (int k = 0; k < nops; k++) {
        term[k].n = ops[k]->ndim;
        for (int d = 0; d < ops[k]->ndim; d++) {
            int s;
            if (ell[k] >= 0 && d >= ell[k] && d < ell[k] + ne[k]) s = 52 + E - ne[k] + (d - ell[k]);
            else s = letters[k][ell[k] >= 0 && d >= ell[k] ? d - ne[k] : d];
            term[k].sym[d] = s;
            count[s]++;
            int64_t n = ops[k]->shape[d];
            if (size[s] < 0 || size[s] == 1) size[s] = n;
        }
    }
    int osym[TA_MAX_DIMS + 52], on = 0;
    if (arrow) {
        int ol[16], onl, oell;
        oracle_split(arrow + 2, (int)strlen(arrow + 2), ol, &onl, &oell);
        for (int i = 0; i <= onl; i++) {
            if (i == oell)
                for (int e = 0; e < E; e++) osym[on++] = 52 + e;
            if (i < onl) osym[on++] = ol[i];
        }
    } else {
        for (int e = 0; e < E; e++) osym[on++] = 52 + e;
        for (int s = 0; s < 52; s++)
            if (count[s] == 1) osym[on++] = s;
    }
    r->ndim = on;
    r->numel = 1;
    bool in_out[OR_MAX_SYM] = {false};
    for (int d = 0; d < on; d++) {
        r->shape[d] = size[osym[d]];
        r->numel *= r->shape[d];
        in_out[osym[d]] = true;
    }
    r->terms = 1;
    int syms[OR_MAX_SYM], ns = 0;
    for (int s = 0; s < OR_MAX_SYM; s++)
        if (size[s] >= 0) {
            syms[ns++] = s;
            if (!in_out[s]) r->terms *= size[s];
        }
    r->val = calloc((size_t)(r->numel ? r->numel : 1), sizeof(double));
    r->mag = calloc((size_t)(r->numel ? r->numel : 1), sizeof(double));
    for (int s = 0; s < ns; s++)
        if (size[syms[s]] == 0) return;
    int64_t v[OR_MAX_SYM] = {0};
    for (;;) {
        double prod = 1.0;
        for (int k = 0; k < nops; k++) {
            const float *p = ops[k]->data;
            for (int d = 0; d < ops[k]->ndim; d++)
                if (ops[k]->shape[d] != 1) p += v[term[k].sym[d]] * ops[k]->stride[d];
            prod *= (double)*p;
        }
        int64_t o = 0;
        for (int d = 0; d < on; d++) o = o * r->shape[d] + v[osym[d]];
        r->val[o] += prod;
        r->mag[o] += fabs(prod);
        int s = ns - 1;
        for (; s >= 0; s--) {
            if (++v[syms[s]] < size[syms[s]]) break;
            v[syms[s]] = 0;
        }
        if (s < 0) break;
    }
}

static void oracle_free(oracle_result *r)
{
    free(r->val);
    free(r->mag);
}

/* Compares a result tensor (any strides) with the oracle. */
static void check_against(const ta_tensor *got, const oracle_result *r, const char *what)
{
    assert_int_equal(got->ndim, r->ndim);
    for (int d = 0; d < r->ndim; d++)
        if (got->shape[d] != r->shape[d])
            fail_msg("%s: dim %d is %lld, oracle %lld", what, d, (long long)got->shape[d],
                     (long long)r->shape[d]);
    double tol = 1e-6 * sqrt((double)(r->terms > 1 ? r->terms : 1));
    int64_t idx[TA_MAX_DIMS] = {0};
    for (int64_t o = 0; o < r->numel; o++) {
        int64_t rem = o;
        for (int d = r->ndim - 1; d >= 0; d--) {
            idx[d] = rem % r->shape[d];
            rem /= r->shape[d];
        }
        double g = *ta_tensor_at_const(got, idx);
        double err = fabs(g - r->val[o]);
        if (!(err <= tol * r->mag[o] + 1e-30))
            fail_msg("%s: element %lld is %.9g, oracle %.9g (sum|terms| %.3g, K %lld)", what,
                     (long long)o, g, r->val[o], r->mag[o], (long long)r->terms);
    }
}

/* ---------------------------------------------------------------- layouts */

/* A float32 tensor viewing its own buffer in a random layout. */
typedef struct rtensor {
    ta_tensor t;
    float *buf;
    int64_t span; /* elements in buf */
} rtensor;

enum { L_CONTIG, L_PERMUTED, L_STEPPED, L_NEGATIVE, L_EXPANDED, L_COUNT };

static void rtensor_make(rtensor *r, int nd, const int64_t *shape, int layout)
{
    int perm[TA_MAX_DIMS], step[TA_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        perm[d] = d;
        step[d] = 1;
    }
    if (layout != L_CONTIG)
        for (int d = nd - 1; d > 0; d--) {
            int j = rng_int(d + 1), x = perm[d];
            perm[d] = perm[j];
            perm[j] = x;
        }
    if (layout == L_STEPPED)
        for (int d = 0; d < nd; d++) step[d] = 1 + rng_int(2);
    int64_t stride[TA_MAX_DIMS], s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int d = perm[i];
        stride[d] = s * step[d];
        s = stride[d] * (shape[d] > 0 ? shape[d] : 1);
    }
    r->span = s;
    r->buf = malloc((size_t)s * sizeof(float) + sizeof(float));
    for (int64_t i = 0; i < s; i++) r->buf[i] = rng_float();
    float *base = r->buf;
    if (layout == L_NEGATIVE && nd > 0) {
        int d = rng_int(nd);
        if (shape[d] > 0) base += (shape[d] - 1) * stride[d];
        stride[d] = -stride[d];
    }
    if (layout == L_EXPANDED && nd > 0) stride[rng_int(nd)] = 0;
    TA_CHECK_OK(ta_tensor_from_buffer(&r->t, base, nd, shape, stride));
}

static void rtensor_free(rtensor *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* ------------------------------------------------------- (a) randomized */

static const char *const specs2[] = {
    "ij,jk->ik", "ij,kj->ik", "ji,jk->ik", "ij,jk", "ij,jk->ki", "bij,bjk->bik",
    "bij,bkj->bki", "bhid,bhjd->bhij", "bhij,bhjd->bhid", "nqhd,nkhd->nhqk",
    "nhql,nlhd->nqhd", "i,j->ij", "i,i->", "i,i->i", "i,i", "ij,ij->ij", "ij,ij->",
    "ij,ij->ji", "...ij,...jk->...ik", "...ij,jk->...ik", "ij,...jk", "i...,i...->...",
    "...,...->...", "..., ...", "ii,i->i", "iij,jk->ik", "ij,k->jk", "ij,jk->j",
    "abcd,cdef->abef", "abcd,dcef->abef", "acbd,cdef", "abc,bca->", "ab,ba->a",
    "bn,anm->bam", "xyz,zy->x", "iI,Ij->ij", "Ab,bA", "a,b->ab", "ab,cd->abcd",
    "ij,->ij", "i,->", ",->", ",", "...i,...j->...ij", "b i j , b j k -> b i k",
    "ij,jk->", "ijk,jil->kl", "i...j,j...k->ik...", "bij,jk->bik", "ij,bjk->bik",
    "kj,ji->ik", "jk,ij", "ab...,b->a...",
};

static const char *const specs1[] = {
    "ij->ji", "ii->i", "ii->", "ij->", "ij->i", "ij->j", "i...->...", "...ii->...i",
    "iji->j", "abc->cab", "ab->ab", "ba", "...ij->...ji", "ij", "iij->ji", "->", "i->",
    "ii", "...", "a...b->b", "abcd->dbca", "aBc->Bc", "i...->i",
};

/* Shapes for a spec: one extent per letter from {1, 3, 17} (sometimes 129/257 when the
 * whole loop nest stays cheap), "..." dims of random count, and size-1 broadcasting of
 * a letter or "..." dim in one of the two operands. Returns false if too costly. */
static bool draw_shapes(const char *spec, int nops, int *nd, int64_t shape[2][TA_MAX_DIMS],
                        bool big)
{
    static const int64_t sizes[] = {1, 3, 17, 3, 17};
    int64_t lsize[52];
    for (int i = 0; i < 52; i++) lsize[i] = sizes[rng_int(5)];
    if (big) lsize[rng_int(52)] = rng_int(2) ? 129 : 257;
    int E = rng_int(3);
    int64_t esize[2];
    for (int e = 0; e < 2; e++) esize[e] = sizes[rng_int(5)];
    /* letter counts per input term, to know which letters may broadcast */
    int cnt[2][52] = {{0}};
    int term = 0;
    for (const char *p = spec; *p && *p != '-'; p++) {
        if (*p == ',') term = 1;
        else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
            cnt[term][sym_of_letter(*p)]++;
    }
    const char *p = spec;
    double cost = 1.0;
    bool counted[52] = {false};
    for (int k = 0; k < nops; k++) {
        nd[k] = 0;
        int ne = rng_int(E + 1);
        int bcast = rng_int(5) == 0 ? rng_int(52) : -1; /* a letter given extent 1 here */
        for (; *p && *p != ',' && *p != '-'; p++) {
            if (*p == ' ') continue;
            if (*p == '.') {
                for (int e = E - ne; e < E; e++) {
                    int64_t s = esize[e];
                    if (rng_int(5) == 0) s = 1;
                    shape[k][nd[k]++] = s;
                }
                p += 2;
                continue;
            }
            int id = sym_of_letter(*p);
            if (!counted[id]) cost *= (double)lsize[id];
            counted[id] = true;
            int64_t s = lsize[id];
            /* size-1 broadcasting against the other operand (never on a diagonal) */
            if (id == bcast && nops == 2 && cnt[k][id] == 1 && cnt[1 - k][id] > 0) s = 1;
            shape[k][nd[k]++] = s;
        }
        if (*p == ',') p++;
        if (nd[k] > TA_MAX_DIMS) return false;
    }
    for (int e = 0; e < E; e++) cost *= (double)esize[e];
    return cost <= 2e5;
}

static int cases_run = 0;

static void run_case(const char *spec, int nops, bool big)
{
    int nd[2];
    int64_t shape[2][TA_MAX_DIMS];
    for (int tries = 0; !draw_shapes(spec, nops, nd, shape, big); tries++)
        if (tries > 50) return;
    rtensor op[2];
    const ta_tensor *ops[2] = {NULL, NULL};
    for (int k = 0; k < nops; k++) {
        int layout = rng_int(L_COUNT);
        if (layout == L_EXPANDED && rng_int(2)) layout = L_STEPPED;
        rtensor_make(&op[k], nd[k], shape[k], layout);
        ops[k] = &op[k].t;
    }
    oracle_result ref;
    oracle(&ref, spec, nops, ops);
    char what[200];
    snprintf(what, sizeof what, "'%s' (%s%s)", spec, nops == 2 ? "two operands" : "one operand",
             big ? ", big" : "");

    ta_tensor out = {0};
    rtensor pre;
    float *before = NULL;
    bool prealloc = rng_int(4) == 0 && ref.ndim > 0;
    if (prealloc) {
        /* a stepped, permuted output whose gaps must keep their values */
        rtensor_make(&pre, ref.ndim, ref.shape, L_STEPPED);
        out = pre.t;
        before = malloc((size_t)pre.span * sizeof(float));
        memcpy(before, pre.buf, (size_t)pre.span * sizeof(float));
    }
    ta_status st;
    if (prealloc)
        st = nops == 2 ? ta_einsum(&out, spec, ops[0], ops[1]) : ta_einsum1(&out, spec, ops[0]);
    else
        st = nops == 2 ? ta_einsum_alloc(&out, spec, ops[0], ops[1])
                       : ta_einsum1_alloc(&out, spec, ops[0]);
    if (st != TA_OK) fail_msg("%s: %s", what, ta_last_error());
    check_against(&out, &ref, what);
    if (prealloc) {
        assert_ptr_equal(out.data, pre.t.data);
        /* mark the elements the view addresses; every other one must be unchanged */
        char *mine = calloc((size_t)pre.span, 1);
        int64_t idx[TA_MAX_DIMS] = {0};
        for (int64_t o = 0; o < ref.numel; o++) {
            mine[ta_tensor_at(&out, idx) - pre.buf] = 1;
            for (int d = ref.ndim - 1; d >= 0; d--) {
                if (++idx[d] < ref.shape[d]) break;
                idx[d] = 0;
            }
        }
        for (int64_t i = 0; i < pre.span; i++)
            if (!mine[i] && memcmp(&pre.buf[i], &before[i], sizeof(float)) != 0)
                fail_msg("%s: a gap of the pre-allocated out was written", what);
        free(mine);
        free(before);
        rtensor_free(&pre);
    } else {
        assert_true(ta_tensor_is_contiguous(&out));
        ta_tensor_free(&out);
    }
    oracle_free(&ref);
    for (int k = 0; k < nops; k++) rtensor_free(&op[k]);
    cases_run++;
}

static void test_random_two_operands(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof specs2 / sizeof *specs2; s++)
        for (int rep = 0; rep < 8; rep++) run_case(specs2[s], 2, rep == 7);
}

static void test_random_one_operand(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof specs1 / sizeof *specs1; s++)
        for (int rep = 0; rep < 8; rep++) run_case(specs1[s], 1, rep == 7);
}

/* Fixed larger problems: 129/257 extents through the GEMM with every layout. */
static void test_large_extents(void **state)
{
    (void)state;
    struct {
        const char *spec;
        int nd[2];
        int64_t shape[2][4];
    } cases[] = {
        {"ij,jk->ik", {2, 2}, {{129, 17}, {17, 257}}},
        {"ij,kj->ki", {2, 2}, {{257, 3}, {129, 3}}},
        {"bij,bjk->bik", {3, 3}, {{3, 129, 17}, {3, 17, 33}}},
        {"ij,ij->j", {2, 2}, {{129, 257}, {129, 257}}},
        {"ab,cd->abcd", {2, 2}, {{17, 3}, {3, 129}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int layout = 0; layout < L_COUNT; layout++) {
            rtensor a, b;
            rtensor_make(&a, cases[c].nd[0], cases[c].shape[0], layout);
            rtensor_make(&b, cases[c].nd[1], cases[c].shape[1], (layout + 1) % L_COUNT);
            const ta_tensor *ops[2] = {&a.t, &b.t};
            oracle_result ref;
            oracle(&ref, cases[c].spec, 2, ops);
            ta_tensor out = {0};
            TA_CHECK_OK(ta_einsum_alloc(&out, cases[c].spec, &a.t, &b.t));
            check_against(&out, &ref, cases[c].spec);
            ta_tensor_free(&out);
            oracle_free(&ref);
            rtensor_free(&a);
            rtensor_free(&b);
        }
}

/* Zero-size extents: an empty result, or an empty sum (all zeros, as torch). */
static void test_empty_extents(void **state)
{
    (void)state;
    int64_t s30[2] = {3, 0}, s02[2] = {0, 2};
    ta_tensor a, b, out = {0};
    TA_CHECK_OK(ta_tensor_empty(&a, 2, s30));
    TA_CHECK_OK(ta_tensor_empty(&b, 2, s02));
    TA_CHECK_OK(ta_einsum_alloc(&out, "ij,jk->ik", &a, &b));
    assert_int_equal(out.ndim, 2);
    assert_int_equal(out.shape[0], 3);
    assert_int_equal(out.shape[1], 2);
    for (int i = 0; i < 6; i++) assert_true(((float *)out.data)[i] == 0.0f);
    ta_tensor_free(&out);
    TA_CHECK_OK(ta_einsum1_alloc(&out, "ij->i", &a));
    assert_int_equal(out.shape[0], 3);
    for (int i = 0; i < 3; i++) assert_true(((float *)out.data)[i] == 0.0f);
    ta_tensor_free(&out);
    TA_CHECK_OK(ta_einsum1_alloc(&out, "ij->j", &a));
    assert_int_equal(out.shape[0], 0);
    ta_tensor_free(&out);
    ta_tensor_free(&a);
    ta_tensor_free(&b);
}

/* ------------------------------------------------- (b) the seed's contractions */

static void seed_case(const char *spec, int nd, const int64_t *sa, const int64_t *sb,
                      int64_t batch, int64_t m, int64_t n, int64_t k, int layout)
{
    rtensor a, b;
    rtensor_make(&a, nd, sa, layout);
    rtensor_make(&b, nd, sb, layout);
    const ta_tensor *ops[2] = {&a.t, &b.t};
    oracle_result ref;
    oracle(&ref, spec, 2, ops);
    ta_tensor out = {0};
    TA_CHECK_OK(ta_einsum_alloc(&out, spec, &a.t, &b.t));
    check_against(&out, &ref, spec);
    ta_einsum_plan_info info;
    ta_einsum_last_plan(&info);
    if (info.path != TA_EINSUM_PATH_GEMM || info.packed || info.reduced || info.gemm_calls != 1)
        fail_msg("%s (layout %d): path %d, packed %d, reduced %d, gemm calls %d", spec, layout,
                 info.path, info.packed, info.reduced, info.gemm_calls);
    assert_int_equal(ta_einsum_last_plan_packed(), 0);
    assert_int_equal(info.batch, batch);
    assert_int_equal(info.m, m);
    assert_int_equal(info.n, n);
    assert_int_equal(info.k, k);
    ta_tensor_free(&out);
    oracle_free(&ref);
    rtensor_free(&a);
    rtensor_free(&b);
}

static void test_seed_specs_zero_copy(void **state)
{
    (void)state;
    /* N=2, H=3, Lq=17, Lk=5, D=8, in every input layout but stride-0 expansion */
    int64_t q_nqhd[4] = {2, 17, 3, 8}, k_nkhd[4] = {2, 5, 3, 8};
    int64_t p_nhql[4] = {2, 3, 17, 5}, v_nlhd[4] = {2, 5, 3, 8};
    int64_t q_bhid[4] = {2, 3, 17, 8}, k_bhjd[4] = {2, 3, 5, 8};
    int64_t p_bhij[4] = {2, 3, 17, 5};
    for (int layout = L_CONTIG; layout < L_EXPANDED; layout++) {
        seed_case("nqhd,nkhd->nhqk", 4, q_nqhd, k_nkhd, 6, 17, 5, 8, layout);
        seed_case("nhql,nlhd->nqhd", 4, p_nhql, v_nlhd, 6, 17, 8, 5, layout);
        seed_case("bhid,bhjd->bhij", 4, q_bhid, k_bhjd, 6, 17, 5, 8, layout);
        seed_case("bhij,bhjd->bhid", 4, p_bhij, k_bhjd, 6, 17, 8, 5, layout);
    }
    /* contiguous [B,H,L,D]: batch and heads merge into one batch dim */
    rtensor a, b;
    rtensor_make(&a, 4, q_bhid, L_CONTIG);
    rtensor_make(&b, 4, k_bhjd, L_CONTIG);
    ta_tensor out = {0};
    TA_CHECK_OK(ta_einsum_alloc(&out, "bhid,bhjd->bhij", &a.t, &b.t));
    ta_einsum_plan_info info;
    ta_einsum_last_plan(&info);
    assert_int_equal(info.batch_ndim, 1);
    ta_tensor_free(&out);
    rtensor_free(&a);
    rtensor_free(&b);
}

/* The plan copies only when it must, and says so. */
static void test_plan_copies(void **state)
{
    (void)state;
    struct {
        const char *spec;
        int64_t sa[4], sb[4];
        int packed, reduced;
        ta_einsum_path path;
        int transposed;
    } cases[] = {
        /* (c, d) chain in a as c*D + d but in b as d*C*E*F + c*E*F: one must be packed */
        {"abcd,dcef->abef", {3, 4, 5, 6}, {6, 5, 7, 2}, 1, 0, TA_EINSUM_PATH_GEMM, 0},
        /* (c, d) merge into one K of 30 with no copy */
        {"abcd,cdef->abef", {3, 4, 5, 6}, {5, 6, 7, 2}, 0, 0, TA_EINSUM_PATH_GEMM, 0},
        /* i is summed in a alone: a is reduced first */
        {"ij,jk->k", {7, 5}, {5, 3}, 0, 1, TA_EINSUM_PATH_GEMM, 0},
        /* nothing contracted: a product loop */
        {"bi,bj->bij", {4, 5}, {4, 6}, 0, 0, TA_EINSUM_PATH_ELEMENTWISE, 0},
        /* only the output's M dim is unit stride: computed as C^T = B^T A^T */
        {"ij,jk->ki", {7, 5}, {5, 3}, 0, 0, TA_EINSUM_PATH_GEMM, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rtensor a, b;
        rtensor_make(&a, cases[c].sa[3] ? 4 : 2, cases[c].sa, L_CONTIG);
        rtensor_make(&b, cases[c].sb[3] ? 4 : 2, cases[c].sb, L_CONTIG);
        const ta_tensor *ops[2] = {&a.t, &b.t};
        oracle_result ref;
        oracle(&ref, cases[c].spec, 2, ops);
        ta_tensor out = {0};
        TA_CHECK_OK(ta_einsum_alloc(&out, cases[c].spec, &a.t, &b.t));
        check_against(&out, &ref, cases[c].spec);
        ta_einsum_plan_info info;
        ta_einsum_last_plan(&info);
        if (info.packed != cases[c].packed || info.reduced != cases[c].reduced ||
            info.path != cases[c].path || info.transposed != cases[c].transposed)
            fail_msg("%s: packed %d reduced %d path %d transposed %d", cases[c].spec,
                     info.packed, info.reduced, info.path, info.transposed);
        ta_tensor_free(&out);
        oracle_free(&ref);
        rtensor_free(&a);
        rtensor_free(&b);
    }
}

/* -------------------------------------------------------- (c) threads */

static void test_threads_bitwise(void **state)
{
    (void)state;
    struct {
        const char *spec;
        int nops, nd[2];
        int64_t shape[2][4];
    } cases[] = {
        {"bhid,bhjd->bhij", 2, {4, 4}, {{2, 3, 65, 32}, {2, 3, 65, 32}}},
        {"nqhd,nkhd->nhqk", 2, {4, 4}, {{2, 65, 3, 32}, {2, 33, 3, 32}}},
        {"abcd,dcef->abef", 2, {4, 4}, {{3, 17, 9, 11}, {11, 9, 17, 3}}},
        {"ij,jk->k", 2, {2, 2}, {{300, 129}, {129, 65}}},
        {"bi,bj->bij", 2, {2, 2}, {{8, 129}, {8, 257}}},
        {"ij->i", 1, {2, 0}, {{300, 301}, {0}}},
        {"ij->j", 1, {2, 0}, {{300, 301}, {0}}},
        {"ij->", 1, {2, 0}, {{300, 301}, {0}}},
        {"ijk->kji", 1, {3, 0}, {{40, 41, 42}, {0}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rtensor op[2];
        for (int k = 0; k < cases[c].nops; k++)
            rtensor_make(&op[k], cases[c].nd[k], cases[c].shape[k], L_PERMUTED);
        ta_tensor r[2] = {{0}, {0}};
        for (int t = 0; t < 2; t++) {
            TA_CHECK_OK(ta_set_num_threads(t + 1));
            if (cases[c].nops == 2) TA_CHECK_OK(ta_einsum_alloc(&r[t], cases[c].spec, &op[0].t, &op[1].t));
            else TA_CHECK_OK(ta_einsum1_alloc(&r[t], cases[c].spec, &op[0].t));
        }
        int64_t n = ta_tensor_numel(&r[0]);
        if (memcmp(r[0].data, r[1].data, (size_t)n * sizeof(float)) != 0)
            fail_msg("%s: 1 and 2 threads differ", cases[c].spec);
        ta_tensor_free(&r[0]);
        ta_tensor_free(&r[1]);
        for (int k = 0; k < cases[c].nops; k++) rtensor_free(&op[k]);
    }
    TA_CHECK_OK(ta_set_num_threads(2));
}

/* -------------------------------------------------------- (d) errors */

static void test_errors(void **state)
{
    (void)state;
    int64_t s23[2] = {2, 3}, s34[2] = {3, 4}, s45[2] = {4, 5}, s33[2] = {3, 3};
    int64_t s3[1] = {3}, s233[3] = {2, 3, 3}, s43[2] = {4, 3}, s11111[5] = {1, 1, 1, 1, 1};
    ta_tensor a23, a34, a45, a33, a3, a233, a43, o5;
    TA_CHECK_OK(ta_tensor_zeros(&a23, 2, s23));
    TA_CHECK_OK(ta_tensor_zeros(&a34, 2, s34));
    TA_CHECK_OK(ta_tensor_zeros(&a45, 2, s45));
    TA_CHECK_OK(ta_tensor_zeros(&a33, 2, s33));
    TA_CHECK_OK(ta_tensor_zeros(&a3, 1, s3));
    TA_CHECK_OK(ta_tensor_zeros(&a233, 3, s233));
    TA_CHECK_OK(ta_tensor_zeros(&a43, 2, s43));
    TA_CHECK_OK(ta_tensor_zeros(&o5, 5, s11111));
    ta_tensor out = {0};

    TA_CHECK_ERR(ta_einsum(&out, NULL, &a23, &a34), TA_EINVAL, "spec is NULL");
    TA_CHECK_ERR(ta_einsum(NULL, "ij,jk->ik", &a23, &a34), TA_EINVAL, "out is NULL");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", NULL, &a34), TA_EINVAL, "a is NULL");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &a23, NULL), TA_EINVAL, "b is NULL");
    TA_CHECK_ERR(ta_einsum1(&out, "ij->ji", NULL), TA_EINVAL, "a is NULL");
    /* sizes */
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &a23, &a45), TA_ESHAPE,
                 "index 'j' has size 3 in operand 0 but 4 in operand 1");
    TA_CHECK_ERR(ta_einsum(&out, "bhid,bhjd->bhij", &a233, &a233), TA_ESHAPE,
                 "operand 0 has 3 dims but the spec 'bhid' names 4");
    TA_CHECK_ERR(ta_einsum(&out, "bid,bhjd->bhij", &a233, &a233), TA_ESHAPE,
                 "operand 1 has 3 dims but the spec 'bhjd' names 4");
    TA_CHECK_ERR(ta_einsum1(&out, "ijk...->i", &a23), TA_ESHAPE, "names at least 3");
    TA_CHECK_ERR(ta_einsum1(&out, "ii->i", &a23), TA_ESHAPE, "index 'i' is repeated");
    TA_CHECK_ERR(ta_einsum(&out, "...i,...i", &a23, &a43), TA_ESHAPE, "under '...'");
    /* spec syntax */
    TA_CHECK_ERR(ta_einsum(&out, "ij,j?->i", &a23, &a34), TA_EINVAL, "invalid character '?'");
    TA_CHECK_ERR(ta_einsum(&out, "ij,j1->i", &a23, &a34), TA_EINVAL, "letters a-z or A-Z");
    TA_CHECK_ERR(ta_einsum1(&out, "i\tj", &a23), TA_EINVAL, "invalid character");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->il", &a23, &a34), TA_EINVAL,
                 "output index 'l' does not appear");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ii", &a23, &a34), TA_EINVAL,
                 "output index 'i' appears more than once");
    TA_CHECK_ERR(ta_einsum(&out, "...i...,j", &a23, &a34), TA_EINVAL, "more than one '...'");
    TA_CHECK_ERR(ta_einsum1(&out, "i->...i...", &a3), TA_EINVAL, "more than one '...'");
    TA_CHECK_ERR(ta_einsum(&out, "i.j,jk", &a23, &a34), TA_EINVAL, "not part of an ellipsis");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->i->k", &a23, &a34), TA_EINVAL, "more than one '->'");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->i,k", &a23, &a34), TA_EINVAL, "after '->'");
    TA_CHECK_ERR(ta_einsum1(&out, "ij- >i", &a23), TA_EINVAL, "invalid character '-'");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk,kl->il", &a23, &a34), TA_EINVAL, "more than two operands");
    /* operand count */
    TA_CHECK_ERR(ta_einsum(&out, "ij->ji", &a23, &a34), TA_EINVAL,
                 "names 1 operand but 2 were given");
    TA_CHECK_ERR(ta_einsum1(&out, "ij,jk->ik", &a23), TA_EINVAL,
                 "names 2 operands but 1 was given");
    /* dtype */
    ta_tensor f64 = a23;
    f64.dtype = TA_F64;
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &f64, &a34), TA_EUNSUPPORTED, "float32");
    TA_CHECK_ERR(ta_einsum(&out, "ij,jk->ik", &a23, &f64), TA_EUNSUPPORTED, "b has dtype");
    /* too many result dims */
    TA_CHECK_ERR(ta_einsum(&out, "abcde,fghij", &o5, &o5), TA_EUNSUPPORTED,
                 "would have 10 dims");
    /* nothing was allocated by any failing call */
    assert_null(out.data);
    assert_null(out.owned);

    /* a pre-allocated out of the wrong shape, dtype or with a stride-0 dim: untouched */
    ta_tensor pre;
    TA_CHECK_OK(ta_tensor_full(&pre, 2, s33, 5.0f));
    TA_CHECK_ERR(ta_einsum(&pre, "ij,jk->ik", &a23, &a34), TA_ESHAPE,
                 "out has shape [3, 3] but the result of 'ij,jk->ik' has shape [2, 4]");
    ta_tensor bad = pre;
    bad.dtype = TA_F64;
    TA_CHECK_ERR(ta_einsum1(&bad, "ij->ji", &a33), TA_EUNSUPPORTED, "out has dtype");
    bad = pre;
    bad.stride[0] = 0;
    TA_CHECK_ERR(ta_einsum1(&bad, "ij->ji", &a33), TA_EINVAL, "stride 0 in dim 0");
    for (int i = 0; i < 9; i++) assert_true(((float *)pre.data)[i] == 5.0f);
    ta_tensor_free(&pre);

    /* ta_einsum_shape */
    int nd = -1;
    int64_t shape[TA_MAX_DIMS];
    TA_CHECK_ERR(ta_einsum_shape(NULL, shape, "ij,jk", &a23, &a34), TA_EINVAL, "ndim is NULL");
    TA_CHECK_ERR(ta_einsum_shape(&nd, NULL, "ij,jk", &a23, &a34), TA_EINVAL, "shape is NULL");
    TA_CHECK_ERR(ta_einsum_shape(&nd, shape, "ij,jk", &a23, NULL), TA_EINVAL,
                 "names 2 operands but 1 was given");
    TA_CHECK_ERR(ta_einsum_shape(&nd, shape, "ij,jk", &a23, &a45), TA_ESHAPE, "index 'j'");
    assert_int_equal(nd, -1);

    ta_tensor *all[] = {&a23, &a34, &a45, &a33, &a3, &a233, &a43, &o5};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

/* ------------------------------------------------ (e) out and shapes */

static void test_preallocated_out(void **state)
{
    (void)state;
    int64_t sa[2] = {17, 3}, sb[2] = {3, 129};
    rtensor a, b;
    rtensor_make(&a, 2, sa, L_CONTIG);
    rtensor_make(&b, 2, sb, L_PERMUTED);
    const ta_tensor *ops[2] = {&a.t, &b.t};
    oracle_result ref;
    oracle(&ref, "ij,jk->ik", 2, ops);
    /* out [17, 129] stored transposed with a gap after every element: strides (2, 34) */
    float *buf = malloc(2 * 17 * 129 * sizeof(float));
    for (int i = 0; i < 2 * 17 * 129; i++) buf[i] = -777.0f;
    int64_t oshape[2] = {17, 129}, ostride[2] = {2, 34};
    ta_tensor out;
    TA_CHECK_OK(ta_tensor_from_buffer(&out, buf, 2, oshape, ostride));
    TA_CHECK_OK(ta_einsum(&out, "ij,jk->ik", &a.t, &b.t));
    assert_ptr_equal(out.data, buf);
    assert_null(out.owned);
    check_against(&out, &ref, "ij,jk->ik into a strided out");
    for (int i = 1; i < 2 * 17 * 129; i += 2) assert_true(buf[i] == -777.0f);
    /* negative strides on the output too: flip dim 0 */
    ta_tensor flipped = out;
    flipped.data = buf + 16 * 2;
    flipped.stride[0] = -2;
    TA_CHECK_OK(ta_einsum(&flipped, "ij,jk->ik", &a.t, &b.t));
    check_against(&flipped, &ref, "ij,jk->ik into a flipped out");
    oracle_free(&ref);

    /* a scalar out, pre-allocated (ndim 0) */
    ta_tensor scalar;
    TA_CHECK_OK(ta_tensor_full(&scalar, 0, NULL, 123.0f));
    TA_CHECK_OK(ta_einsum1(&scalar, "ij->", &a.t));
    oracle(&ref, "ij->", 1, ops);
    check_against(&scalar, &ref, "ij-> into a scalar");
    oracle_free(&ref);
    ta_tensor_free(&scalar);
    /* the one-operand form into a strided out */
    for (int i = 0; i < 2 * 17 * 129; i++) buf[i] = -777.0f;
    int64_t tshape[2] = {129, 3}, tstride[2] = {6, 2};
    TA_CHECK_OK(ta_tensor_from_buffer(&out, buf, 2, tshape, tstride));
    TA_CHECK_OK(ta_einsum1(&out, "jk->kj", &b.t));
    const ta_tensor *opb[1] = {&b.t};
    oracle(&ref, "jk->kj", 1, opb);
    check_against(&out, &ref, "jk->kj into a strided out");
    for (int i = 1; i < 129 * 6; i += 2) assert_true(buf[i] == -777.0f);
    oracle_free(&ref);
    free(buf);
    rtensor_free(&a);
    rtensor_free(&b);
}

static void expect_shape(const char *spec, const ta_tensor *a, const ta_tensor *b, int nd,
                         const int64_t *want)
{
    int got_nd;
    int64_t got[TA_MAX_DIMS];
    TA_CHECK_OK(ta_einsum_shape(&got_nd, got, spec, a, b));
    if (got_nd != nd) fail_msg("%s: ndim %d, expected %d", spec, got_nd, nd);
    for (int d = 0; d < nd; d++)
        if (got[d] != want[d])
            fail_msg("%s: dim %d is %lld, expected %lld", spec, d, (long long)got[d],
                     (long long)want[d]);
}

static void test_shape(void **state)
{
    (void)state;
    int64_t s2357[4] = {2, 3, 5, 7}, s2367[4] = {2, 3, 6, 7}, s23[2] = {2, 3};
    int64_t s234[3] = {2, 3, 4}, s345[3] = {3, 4, 5}, s1[1] = {1}, s4[1] = {4}, s33[2] = {3, 3};
    ta_tensor q, k, m, x, y, one, four, sc, m33;
    TA_CHECK_OK(ta_tensor_zeros(&m33, 2, s33));
    TA_CHECK_OK(ta_tensor_zeros(&q, 4, s2357));
    TA_CHECK_OK(ta_tensor_zeros(&k, 4, s2367));
    TA_CHECK_OK(ta_tensor_zeros(&m, 2, s23));
    TA_CHECK_OK(ta_tensor_zeros(&x, 3, s234));
    TA_CHECK_OK(ta_tensor_zeros(&y, 3, s345));
    TA_CHECK_OK(ta_tensor_zeros(&one, 1, s1));
    TA_CHECK_OK(ta_tensor_zeros(&four, 1, s4));
    TA_CHECK_OK(ta_tensor_zeros(&sc, 0, NULL));
    expect_shape("bhid,bhjd->bhij", &q, &k, 4, (int64_t[]){2, 3, 5, 6});
    /* implicit outputs follow torch 1.13: character-code order, uppercase first */
    expect_shape("ba", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("bA", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("Ab", &m, NULL, 2, (int64_t[]){2, 3});
    expect_shape("aB", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("ii", &m33, NULL, 0, NULL);
    expect_shape("ii->i", &m33, NULL, 1, (int64_t[]){3});
    expect_shape("ij...", &x, NULL, 3, (int64_t[]){4, 2, 3});
    expect_shape("a...,...b", &x, &y, 4, (int64_t[]){3, 4, 2, 5});
    expect_shape("i...->i", &x, NULL, 1, (int64_t[]){2});
    expect_shape("ij->...ij", &m, NULL, 2, (int64_t[]){2, 3});
    expect_shape("i,i", &four, &one, 0, NULL);
    expect_shape("i,i->i", &one, &four, 1, (int64_t[]){4});
    expect_shape(" i j -> j i ", &m, NULL, 2, (int64_t[]){3, 2});
    expect_shape("", &sc, NULL, 0, NULL);
    expect_shape(",", &sc, &sc, 0, NULL);
    ta_tensor *all[] = {&q, &k, &m, &x, &y, &one, &four, &sc, &m33};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static void test_cases_counted(void **state)
{
    (void)state;
    /* the randomized tests must really have run (a shape draw can skip a case) */
    assert_true(cases_run > 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_two_operands),
        cmocka_unit_test(test_random_one_operand),
        cmocka_unit_test(test_cases_counted),
        cmocka_unit_test(test_large_extents),
        cmocka_unit_test(test_empty_extents),
        cmocka_unit_test(test_seed_specs_zero_copy),
        cmocka_unit_test(test_plan_copies),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_preallocated_out),
        cmocka_unit_test(test_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
