/* ta-test: all-isas -- ta_einsum's loops against guard pages: every operand and the
 * output end exactly where a PROT_NONE page begins (tests/support/guard.c), so a SIMD or
 * loop tail that reads or writes one element too far crashes instead of passing. Odd
 * sizes (1, 3, 5, 17, 31, 33, 129, 257) through the strided product loop (nothing
 * contracted), the one-operand reduction (sums, diagonals, permutations) and the GEMM
 * path's edge tiles, with operands and outputs also as transposed views of such
 * buffers. Each result is checked against the naive float64 einsum, and each case
 * against the plan it is meant to exercise. */
#include "ta_test.h"
#include "einsum_oracle.h"
#include "guard.h"

#include "ops/einsum.h"

#include <math.h>
#include <stdio.h>

typedef struct guard_case {
    const char *spec;
    int nd[2];                /* operand ranks (nd[1] 0: one operand) */
    int64_t shape[2][3];      /* operand shapes as einsum sees them */
    int transposed;           /* bit k: operand k (bit 2: the output) is the transposed
                                 view (last two dims swapped) of its buffer */
    ta_einsum_path path;      /* the plan the case is for */
} guard_case;

static int64_t numel_of(int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return n;
}

/* t: a [shape] view of a buffer that ends at a guard page; transposed: the buffer holds
 * the last two dims swapped and t is its transpose (so the view's last element in
 * memory order is still the buffer's last). */
static float *guarded(ta_tensor *t, ta_guard *g, int nd, const int64_t *shape, int transposed)
{
    int64_t n = numel_of(nd, shape), s[3] = {0};
    float *p = ta_guard_floats(g, (size_t)(n ? n : 1));
    assert_non_null(p);
    for (int d = 0; d < nd; d++) s[d] = shape[d];
    if (transposed && nd >= 2) {
        s[nd - 2] = shape[nd - 1];
        s[nd - 1] = shape[nd - 2];
    }
    ta_tensor store;
    TA_CHECK_OK(ta_tensor_from_buffer(&store, p, nd, s, NULL));
    if (transposed && nd >= 2) TA_CHECK_OK(ta_tensor_transpose(t, &store, nd - 2, nd - 1));
    else *t = store;
    return p;
}

static void run_guard_case(const guard_case *c)
{
    const int nops = c->nd[1] ? 2 : 1;
    ta_guard g[3] = {{0}};
    ta_tensor ops[2], out;
    const ta_tensor *opp[2] = {&ops[0], &ops[1]};
    for (int k = 0; k < nops; k++) {
        float *p = guarded(&ops[k], &g[k], c->nd[k], c->shape[k], c->transposed >> k & 1);
        for (int64_t e = 0, n = numel_of(c->nd[k], c->shape[k]); e < n; e++)
            p[e] = ta_test_rng_float();
    }
    oracle_result ref;
    ta_test_einsum_oracle(&ref, c->spec, nops, opp);
    float *po = guarded(&out, &g[2], ref.ndim, ref.shape, c->transposed >> 2 & 1);
    for (int64_t e = 0; e < ref.numel; e++) po[e] = NAN; /* an unwritten element fails */
    char what[200];
    snprintf(what, sizeof what, "'%s' [%lld, %lld, %lld] x [%lld, %lld, %lld] (transposed %d)",
             c->spec, (long long)c->shape[0][0], (long long)c->shape[0][1],
             (long long)c->shape[0][2], (long long)c->shape[1][0], (long long)c->shape[1][1],
             (long long)c->shape[1][2], c->transposed);
    if (nops == 2) TA_CHECK_OK(ta_einsum(&out, c->spec, &ops[0], &ops[1]));
    else TA_CHECK_OK(ta_einsum1(&out, c->spec, &ops[0]));
    ta_einsum_plan_info info;
    ta_einsum_last_plan(&info);
    if (info.path != c->path) fail_msg("%s: plan path %d, the case is for %d", what, info.path, c->path);
    ta_test_einsum_check(&out, &ref, what);
    ta_test_einsum_oracle_free(&ref);
    for (int k = 0; k < 3; k++) ta_guard_release(&g[k]);
}

static void run_guard_cases(const guard_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) run_guard_case(&cases[i]);
}

/* Two operands, nothing contracted: Hadamard products, outer products, scaling. */
static void test_product_loop_tails(void **state)
{
    (void)state;
    static const guard_case cases[] = {
        {"i,i->i", {1, 1}, {{1}, {1}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,i->i", {1, 1}, {{3}, {3}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,i->i", {1, 1}, {{17}, {17}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,i->i", {1, 1}, {{33}, {33}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,i->i", {1, 1}, {{129}, {129}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"ij,ij->ij", {2, 2}, {{3, 17}, {3, 17}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"ij,ij->ij", {2, 2}, {{17, 33}, {17, 33}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"ij,ij->ij", {2, 2}, {{17, 9}, {17, 9}}, 1, TA_EINSUM_PATH_ELEMENTWISE},
        {"ij,ij->ij", {2, 2}, {{5, 31}, {5, 31}}, 4, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,j->ij", {1, 1}, {{1}, {31}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        /* a contraction over one term is a product (size-1 dims drop out of the plan) */
        {"ij,jk->ik", {2, 2}, {{1, 1}, {1, 1}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,j->ij", {1, 1}, {{3}, {17}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,j->ij", {1, 1}, {{17}, {129}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"i,j->ji", {1, 1}, {{33}, {5}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"bi,bj->bij", {2, 2}, {{3, 17}, {3, 5}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"bi,bj->bij", {2, 2}, {{5, 3}, {5, 33}}, 3, TA_EINSUM_PATH_ELEMENTWISE},
        {"ij,j->ij", {2, 1}, {{5, 33}, {33}}, 0, TA_EINSUM_PATH_ELEMENTWISE},
        {"ij,i->ij", {2, 1}, {{31, 3}, {31}}, 1, TA_EINSUM_PATH_ELEMENTWISE},
    };
    run_guard_cases(cases, sizeof cases / sizeof *cases);
}

/* One operand: sums over rows, columns or everything, diagonals, permutations. */
static void test_one_operand_reduction_tails(void **state)
{
    (void)state;
    static const guard_case cases[] = {
        {"i->", {1, 0}, {{1}}, 0, TA_EINSUM_PATH_GENERIC},
        {"i->", {1, 0}, {{17}}, 0, TA_EINSUM_PATH_GENERIC},
        {"i->", {1, 0}, {{129}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ij->i", {2, 0}, {{3, 17}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ij->i", {2, 0}, {{17, 129}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ij->i", {2, 0}, {{33, 17}}, 1, TA_EINSUM_PATH_GENERIC},
        {"ij->j", {2, 0}, {{17, 33}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ij->j", {2, 0}, {{5, 31}}, 1, TA_EINSUM_PATH_GENERIC},
        {"ij->", {2, 0}, {{1, 1}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ij->", {2, 0}, {{17, 31}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ii->i", {2, 0}, {{17, 17}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ii->", {2, 0}, {{33, 33}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ij->ji", {2, 0}, {{3, 17}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ij->ji", {2, 0}, {{33, 5}}, 4, TA_EINSUM_PATH_GENERIC},
        {"ijk->ik", {3, 0}, {{3, 17, 5}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ijk->kji", {3, 0}, {{3, 5, 7}}, 0, TA_EINSUM_PATH_GENERIC},
        {"ijk->j", {3, 0}, {{5, 33, 3}}, 1, TA_EINSUM_PATH_GENERIC},
    };
    run_guard_cases(cases, sizeof cases / sizeof *cases);
}

/* The GEMM path: M, N and K that leave partial micro-tiles on every edge. */
static void test_gemm_edge_tiles(void **state)
{
    (void)state;
    static const guard_case cases[] = {
        {"ij,jk->ik", {2, 2}, {{3, 17}, {17, 5}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ik", {2, 2}, {{17, 3}, {3, 33}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ik", {2, 2}, {{33, 65}, {65, 31}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ik", {2, 2}, {{129, 17}, {17, 129}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ik", {2, 2}, {{7, 129}, {129, 1}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ik", {2, 2}, {{1, 257}, {257, 3}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ik", {2, 2}, {{33, 17}, {17, 65}}, 3, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ik", {2, 2}, {{31, 9}, {9, 17}}, 4, TA_EINSUM_PATH_GEMM},
        {"ij,kj->ik", {2, 2}, {{17, 33}, {31, 33}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,jk->ki", {2, 2}, {{17, 5}, {5, 33}}, 0, TA_EINSUM_PATH_GEMM},
        {"bij,bjk->bik", {3, 3}, {{3, 17, 9}, {3, 9, 31}}, 0, TA_EINSUM_PATH_GEMM},
        {"bij,bjk->bik", {3, 3}, {{5, 3, 33}, {5, 33, 7}}, 3, TA_EINSUM_PATH_GEMM},
        {"ij,jk->k", {2, 2}, {{7, 5}, {5, 3}}, 0, TA_EINSUM_PATH_GEMM},
        {"ij,j->i", {2, 1}, {{129, 17}, {17}}, 0, TA_EINSUM_PATH_GEMM},
    };
    run_guard_cases(cases, sizeof cases / sizeof *cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_product_loop_tails),
        cmocka_unit_test(test_one_operand_reduction_tails),
        cmocka_unit_test(test_gemm_edge_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
