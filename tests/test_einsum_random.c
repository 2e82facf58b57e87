/* ta-test: all-isas -- ta_einsum / ta_einsum1 against the naive float64 einsum of
 * tests/support/einsum_oracle.c on randomized specs x shapes (1, 3, 17, a few 129/257)
 * x layouts (permuted, stepped, negative, stride-0 expanded): diagonals, ellipsis,
 * broadcasting, outer products, scalars, sometimes into a pre-allocated strided output
 * whose gaps must stay untouched; fixed 129/257 problems through the GEMM in every
 * layout; zero-size extents. */
#include "ta_test.h"
#include "einsum_oracle.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (int i = 0; i < 52; i++) lsize[i] = sizes[ta_test_rng_int(5)];
    if (big) lsize[ta_test_rng_int(52)] = ta_test_rng_int(2) ? 129 : 257;
    int E = ta_test_rng_int(3);
    int64_t esize[2];
    for (int e = 0; e < 2; e++) esize[e] = sizes[ta_test_rng_int(5)];
    /* letter counts per input term, to know which letters may broadcast */
    int cnt[2][52] = {{0}};
    int term = 0;
    for (const char *p = spec; *p && *p != '-'; p++) {
        if (*p == ',') term = 1;
        else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
            cnt[term][ta_test_einsum_symbol(*p)]++;
    }
    const char *p = spec;
    double cost = 1.0;
    bool counted[52] = {false};
    for (int k = 0; k < nops; k++) {
        nd[k] = 0;
        int ne = ta_test_rng_int(E + 1);
        int bcast = ta_test_rng_int(5) == 0 ? ta_test_rng_int(52) : -1; /* a letter given extent 1 here */
        for (; *p && *p != ',' && *p != '-'; p++) {
            if (*p == ' ') continue;
            if (*p == '.') {
                for (int e = E - ne; e < E; e++) {
                    int64_t s = esize[e];
                    if (ta_test_rng_int(5) == 0) s = 1;
                    shape[k][nd[k]++] = s;
                }
                p += 2;
                continue;
            }
            int id = ta_test_einsum_symbol(*p);
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
        int layout = ta_test_rng_int(L_COUNT);
        if (layout == L_EXPANDED && ta_test_rng_int(2)) layout = L_STEPPED;
        rtensor_make(&op[k], nd[k], shape[k], layout);
        ops[k] = &op[k].t;
    }
    oracle_result ref;
    ta_test_einsum_oracle(&ref, spec, nops, ops);
    char what[200];
    snprintf(what, sizeof what, "'%s' (%s%s)", spec, nops == 2 ? "two operands" : "one operand",
             big ? ", big" : "");

    ta_tensor out = {0};
    rtensor pre;
    float *before = NULL;
    bool prealloc = ta_test_rng_int(4) == 0 && ref.ndim > 0;
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
    ta_test_einsum_check(&out, &ref, what);
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
    ta_test_einsum_oracle_free(&ref);
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
            ta_test_einsum_check_alloc(cases[c].spec, &a.t, &b.t, NULL);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
