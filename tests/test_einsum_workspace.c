/* ta-test: all-isas -- einsum's scratch: ta_einsum_workspace_size + ta_einsum_ext with a
 * caller buffer, and the internal ta_einsum_scratch_bytes + ta_einsum_run.
 *
 * For every path einsum plans (a GEMM straight on the operands, transposed, one or both
 * operands packed, an operand pre-reduced, pre-reduced then packed, a product loop, a
 * one-operand sum, an empty result, an empty sum), pins down:
 *   - the size query is nonzero exactly when the plan needs scratch, and does not
 *     depend on where the data lives;
 *   - with a caller buffer (aligned or not, ending at a guard page: a call that uses a
 *     byte more than the size query measured crashes) the result is bitwise the result
 *     of ta_einsum and the call makes no allocation (counted through ta_set_allocator,
 *     after ta_scratch_cache_release so no kept block hides one);
 *   - a buffer one byte too small is TA_EINVAL naming ta_einsum_ext, with out untouched;
 *   - ta_einsum_scratch_bytes reads only layouts (views with NULL data) and gives what
 *     ta_einsum_run needs, which runs in a carved sub-arena without allocating;
 *   - without a workspace, a second identical ta_einsum allocates nothing (the block
 *     kept between calls), and ta_einsum_alloc allocates only its result. */
#include "ta_test.h"
#include "alloc_hook.h"
#include "guard.h"
#include "core/workspace.h"
#include "ops/einsum.h"

#include <stdbool.h>
#include <stdlib.h>

/* Starts counting from no kept block, so that a call that needs scratch must show it. */
static void count_from_nothing(void)
{
    ta_scratch_cache_release();
    ta_test_alloc_count = 0;
}

/* ------------------------------------------------------------- operands */

enum { V_CONTIG = 0, V_TRANSPOSE = 1, V_STEP = 2 /* + dim: every other element */ };

/* A view of the given shape over a malloc'd, N(0,1)-filled buffer (the library's
 * allocator never sees it): contiguous, the transpose of the last two dims, or every
 * other element along one dim. */
static ta_tensor make_view(float **mem, int nd, const int64_t *shape, int view, uint64_t seed)
{
    int64_t st[TA_MAX_DIMS] = {0}, n = 1;
    for (int d = 0; d < nd; d++) st[d] = shape[d];
    if (view == V_TRANSPOSE) {
        st[nd - 1] = shape[nd - 2];
        st[nd - 2] = shape[nd - 1];
    } else if (view >= V_STEP) {
        st[view - V_STEP] *= 2;
    }
    for (int d = 0; d < nd; d++) n *= st[d];
    *mem = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert_non_null(*mem);
    ta_tensor t, v;
    TA_CHECK_OK(ta_tensor_from_buffer(&t, *mem, nd, st, NULL));
    TA_CHECK_OK(ta_randn(&t, seed));
    if (view == V_TRANSPOSE) TA_CHECK_OK(ta_tensor_transpose(&v, &t, nd - 2, nd - 1));
    else if (view >= V_STEP)
        TA_CHECK_OK(ta_tensor_slice(&v, &t, view - V_STEP, 0, st[view - V_STEP], 2));
    else v = t;
    return v;
}

static void fill(float *mem, int64_t n, float value)
{
    for (int64_t i = 0; i < n; i++) mem[i] = value;
}

static void assert_all(const float *mem, int64_t n, float value, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (mem[i] != value) fail_msg("%s: element %lld was written", what, (long long)i);
}

/* ----------------------------------------------------------------- cases */

typedef struct ws_case {
    const char *name, *spec;
    int na, nb; /* nb == 0: one operand */
    int64_t sa[5], sb[5];
    int va, vb; /* views */
    ta_einsum_path path;
    int packed, reduced;
    bool scratch; /* the plan needs scratch */
} ws_case;

static const ws_case cases[] = {
    {"gemm", "bhid,bhjd->bhij", 4, 4, {2, 3, 17, 8}, {2, 3, 5, 8}, V_CONTIG, V_CONTIG,
     TA_EINSUM_PATH_GEMM, 0, 0, true},
    {"gemm on strided views", "bhid,bhjd->bhij", 4, 4, {2, 3, 17, 8}, {2, 3, 5, 8},
     V_STEP + 2, V_STEP + 1, TA_EINSUM_PATH_GEMM, 0, 0, true},
    {"gemm transposed", "ij,jk->ki", 2, 2, {7, 5}, {5, 3}, V_CONTIG, V_CONTIG,
     TA_EINSUM_PATH_GEMM, 0, 0, true},
    /* (c, d) chain in a as c*D + d but in b as d*C*E*F + c*E*F: a is packed */
    {"pack one", "abcd,dcef->abef", 4, 4, {3, 4, 5, 6}, {6, 5, 7, 2}, V_CONTIG, V_CONTIG,
     TA_EINSUM_PATH_GEMM, 1, 0, true},
    /* every other c in a, every other d in b: neither chains, both are packed */
    {"pack both", "abcd,dcef->abef", 4, 4, {3, 4, 5, 6}, {6, 5, 7, 2}, V_STEP + 2, V_STEP + 0,
     TA_EINSUM_PATH_GEMM, 2, 0, true},
    {"pre-reduce", "ij,jk->k", 2, 2, {7, 5}, {5, 3}, V_CONTIG, V_CONTIG, TA_EINSUM_PATH_GEMM,
     0, 1, true},
    /* x summed in a alone, then a's (c, d) packed in b's order: two steps on a */
    {"pre-reduce then pack", "xabcd,dcef->abef", 5, 4, {2, 3, 4, 5, 6}, {6, 5, 7, 2},
     V_CONTIG, V_CONTIG, TA_EINSUM_PATH_GEMM, 1, 1, true},
    {"product", "bi,bj->bij", 2, 2, {4, 5}, {4, 6}, V_CONTIG, V_TRANSPOSE,
     TA_EINSUM_PATH_ELEMENTWISE, 0, 0, false},
    {"one operand", "bhid->bdi", 4, 0, {2, 3, 17, 8}, {0}, V_TRANSPOSE, 0,
     TA_EINSUM_PATH_GENERIC, 0, 0, false},
    {"one operand sum", "ij->", 2, 0, {33, 65}, {0}, V_CONTIG, 0, TA_EINSUM_PATH_GENERIC, 0,
     0, false},
    {"empty result", "ij,jk->ik", 2, 2, {0, 5}, {5, 3}, V_CONTIG, V_CONTIG,
     TA_EINSUM_PATH_EMPTY, 0, 0, false},
    {"empty sum", "ij,jk->ik", 2, 2, {4, 0}, {0, 3}, V_CONTIG, V_CONTIG, TA_EINSUM_PATH_EMPTY,
     0, 0, false},
};

typedef struct ws_run {
    const ws_case *c;
    float *amem, *bmem, *omem, *rmem;
    ta_tensor a, b, out, ref;
    const ta_tensor *bp; /* &b, or NULL for one operand */
    int64_t n;           /* elements of out */
} ws_run;

static void run_open(ws_run *r, const ws_case *c)
{
    r->c = c;
    r->a = make_view(&r->amem, c->na, c->sa, c->va, 1);
    r->bmem = NULL;
    r->b = (ta_tensor){0};
    r->bp = NULL;
    if (c->nb) {
        r->b = make_view(&r->bmem, c->nb, c->sb, c->vb, 2);
        r->bp = &r->b;
    }
    int nd;
    int64_t shape[TA_MAX_DIMS];
    TA_CHECK_OK(ta_einsum_shape(&nd, shape, c->spec, &r->a, r->bp));
    r->n = 1;
    for (int d = 0; d < nd; d++) r->n *= shape[d];
    r->omem = malloc((size_t)(r->n ? r->n : 1) * sizeof(float));
    r->rmem = malloc((size_t)(r->n ? r->n : 1) * sizeof(float));
    assert_true(r->omem && r->rmem);
    TA_CHECK_OK(ta_tensor_from_buffer(&r->out, r->omem, nd, shape, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&r->ref, r->rmem, nd, shape, NULL));
    fill(r->rmem, r->n, 7.0f);
    TA_CHECK_OK(c->nb ? ta_einsum(&r->ref, c->spec, &r->a, &r->b)
                      : ta_einsum1(&r->ref, c->spec, &r->a));
}

static void run_close(ws_run *r)
{
    free(r->amem);
    free(r->bmem);
    free(r->omem);
    free(r->rmem);
}

static void expect_same(const ws_run *r, const char *how)
{
    if (r->n && memcmp(r->omem, r->rmem, (size_t)r->n * sizeof(float)) != 0)
        fail_msg("%s (%s): result differs from ta_einsum's", r->c->name, how);
}

static void expect_plan(const ws_run *r)
{
    ta_einsum_plan_info info;
    ta_einsum_last_plan(&info);
    if (info.path != r->c->path || info.packed != r->c->packed || info.reduced != r->c->reduced)
        fail_msg("%s: path %d packed %d reduced %d, expected %d %d %d", r->c->name, info.path,
                 info.packed, info.reduced, r->c->path, r->c->packed, r->c->reduced);
}

/* ----------------------------------------------------------------- tests */

/* Runs check on every case, each with its operands, out and ta_einsum's result. */
static void for_each_case(void (*check)(ws_run *r))
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ws_run r;
        run_open(&r, &cases[i]);
        check(&r);
        run_close(&r);
    }
}

static size_t workspace_size(const ws_run *r)
{
    size_t bytes;
    TA_CHECK_OK(ta_einsum_workspace_size(&bytes, &r->out, r->c->spec, &r->a, r->bp));
    return bytes;
}

/* A caller buffer, aligned or not: the same bits as ta_einsum, no allocation. */
static void caller_workspace(ws_run *r)
{
    size_t bytes = workspace_size(r);
    if ((bytes > 0) != r->c->scratch) fail_msg("%s: workspace of %zu bytes", r->c->name, bytes);
    for (size_t off = 0; bytes && off < 64; off += 21) { /* 0: aligned; 21, 42: odd */
        ta_guard g;
        ta_workspace ws = ta_guard_workspace(&g, bytes, off);
        assert_non_null(ws.data);
        fill(r->omem, r->n, -3.0f);
        count_from_nothing();
        TA_CHECK_OK(ta_einsum_ext(&r->out, r->c->spec, &r->a, r->bp, &ws));
        if (ta_test_alloc_count != 0)
            fail_msg("%s: %ld allocation(s) with a caller workspace", r->c->name, ta_test_alloc_count);
        expect_same(r, "caller workspace");
        expect_plan(r);
        ta_guard_release(&g);
    }
    /* NULL and zeroed workspaces: the library's block, same result */
    ta_workspace zero = {0};
    fill(r->omem, r->n, -3.0f);
    TA_CHECK_OK(ta_einsum_ext(&r->out, r->c->spec, &r->a, r->bp, &zero));
    expect_same(r, "zeroed workspace");
    fill(r->omem, r->n, -3.0f);
    TA_CHECK_OK(ta_einsum_ext(&r->out, r->c->spec, &r->a, r->bp, NULL));
    expect_same(r, "no workspace");
}

/* One byte short: TA_EINVAL naming ta_einsum_ext, out untouched, nothing allocated. */
static void workspace_too_small(ws_run *r)
{
    if (!r->c->scratch) return;
    size_t bytes = workspace_size(r);
    ta_guard g;
    ta_workspace ws = ta_guard_workspace(&g, bytes, 0);
    assert_non_null(ws.data);
    ws.size = bytes - 1;
    fill(r->omem, r->n, -3.0f);
    count_from_nothing();
    TA_CHECK_ERR(ta_einsum_ext(&r->out, r->c->spec, &r->a, r->bp, &ws), TA_EINVAL,
                 "ta_einsum_ext");
    assert_int_equal(ta_test_alloc_count, 0);
    assert_all(r->omem, r->n, -3.0f, r->c->name);
    ta_guard_release(&g);
}

/* The size is a function of the layouts: operands elsewhere in memory (other data)
 * need the same bytes, and ta_einsum_scratch_bytes gets them from views without data. */
static void size_reads_layouts_only(ws_run *r)
{
    ws_run r2;
    run_open(&r2, r->c);
    TA_CHECK_OK(ta_randn(&r2.a, 99));
    size_t bytes = workspace_size(r), raw;
    assert_int_equal(workspace_size(&r2), bytes);
    run_close(&r2);
    ta_tensor a = r->a, b = r->b, out = r->out;
    a.data = b.data = out.data = NULL;
    TA_CHECK_OK(ta_einsum_scratch_bytes(&raw, "test", &out, r->c->spec, &a,
                                        r->c->nb ? &b : NULL));
    assert_int_equal(ta_workspace_bytes(raw), bytes);
}

/* The nested entry: sized from layouts, run in a sub-arena of a carved block next to
 * a piece of the caller's own, which it leaves alone. */
static void nested_run(ws_run *r)
{
    size_t raw;
    TA_CHECK_OK(ta_einsum_scratch_bytes(&raw, "test", &r->out, r->c->spec, &r->a, r->bp));
    ta_arena m = ta_arena_measure();
    (void)TA_ARENA_TAKE(&m, float, 5);
    (void)ta_arena_sub(&m, raw);
    size_t total = ta_arena_bytes(&m);
    ta_guard g; /* the sub-arena, the last piece, ends at the guard page */
    unsigned char *mem = ta_guard_bytes(&g, total);
    assert_non_null(mem);
    assert_int_equal((uintptr_t)mem % TA_ARENA_ALIGN, 0);
    ta_arena a = ta_arena_over(mem, total);
    float *mine = TA_ARENA_TAKE(&a, float, 5);
    ta_arena sub = ta_arena_sub(&a, raw);
    assert_false(a.overflow);
    for (int k = 0; k < 5; k++) mine[k] = 1.5f;
    fill(r->omem, r->n, -3.0f);
    count_from_nothing();
    TA_CHECK_OK(ta_einsum_run("test", &r->out, r->c->spec, &r->a, r->bp, &sub));
    assert_int_equal(ta_test_alloc_count, 0);
    assert_all(mine, 5, 1.5f, "the caller's piece of the arena");
    expect_same(r, "ta_einsum_run");
    expect_plan(r);
    ta_guard_release(&g);
}

/* Without a workspace: the first call takes a block, the second reuses it; the
 * allocating variant allocates its result and nothing else. */
static void kept_block(ws_run *r)
{
    const char *spec = r->c->spec;
    count_from_nothing();
    TA_CHECK_OK(ta_einsum_ext(&r->out, spec, &r->a, r->bp, NULL));
    assert_int_equal(ta_test_alloc_count, r->c->scratch ? 1 : 0);
    ta_test_alloc_count = 0;
    TA_CHECK_OK(r->c->nb ? ta_einsum(&r->out, spec, &r->a, &r->b)
                         : ta_einsum1(&r->out, spec, &r->a));
    if (ta_test_alloc_count != 0) fail_msg("%s: the second call allocated %ld time(s)", r->c->name, ta_test_alloc_count);
    expect_same(r, "second call");
    ta_tensor res = {0};
    ta_test_alloc_count = 0;
    TA_CHECK_OK(r->c->nb ? ta_einsum_alloc(&res, spec, &r->a, &r->b)
                         : ta_einsum1_alloc(&res, spec, &r->a));
    assert_int_equal(ta_test_alloc_count, 1);
    if (r->n && memcmp(res.data, r->rmem, (size_t)r->n * sizeof(float)) != 0)
        fail_msg("%s: ta_einsum_alloc differs from ta_einsum", r->c->name);
    ta_tensor_free(&res);
}

#define CASE_TEST(name)                                                                    \
    static void test_##name(void **state)                                                  \
    {                                                                                      \
        (void)state;                                                                       \
        for_each_case(name);                                                               \
    }
CASE_TEST(caller_workspace)
CASE_TEST(workspace_too_small)
CASE_TEST(size_reads_layouts_only)
CASE_TEST(nested_run)
CASE_TEST(kept_block)

/* The size query validates as the call does. */
static void test_size_query_errors(void **state)
{
    (void)state;
    ws_run r;
    run_open(&r, &cases[0]);
    size_t bytes = 12345;
    TA_CHECK_ERR(ta_einsum_workspace_size(NULL, &r.out, r.c->spec, &r.a, &r.b), TA_EINVAL,
                 "bytes is NULL");
    TA_CHECK_ERR(ta_einsum_workspace_size(&bytes, NULL, r.c->spec, &r.a, &r.b), TA_EINVAL,
                 "out is NULL");
    TA_CHECK_ERR(ta_einsum_workspace_size(&bytes, &r.out, "bhid,bhjd->bhji", &r.a, &r.b),
                 TA_ESHAPE, "ta_einsum_workspace_size: out has shape");
    TA_CHECK_ERR(ta_einsum_workspace_size(&bytes, &r.out, r.c->spec, &r.a, NULL), TA_EINVAL,
                 "(b is NULL)");
    ta_tensor in_out; /* an operand b inside out's memory */
    TA_CHECK_OK(ta_tensor_from_buffer(&in_out, r.omem, 4, r.c->sb, NULL));
    TA_CHECK_ERR(ta_einsum_workspace_size(&bytes, &r.out, r.c->spec, &r.a, &in_out), TA_EINVAL,
                 "out overlaps operand 1");
    assert_int_equal(bytes, 12345);
    TA_CHECK_ERR(ta_einsum_ext(&r.out, "bhid->bhi", &r.a, &r.b, NULL), TA_EINVAL,
                 "ta_einsum_ext: spec 'bhid->bhi' names 1 operand but 2 were given (b is set)");
    run_close(&r);
}

static int setup(void **state)
{
    (void)state;
    ta_test_count_allocations();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ta_test_stop_counting();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caller_workspace),  cmocka_unit_test(test_workspace_too_small),
        cmocka_unit_test(test_size_reads_layouts_only), cmocka_unit_test(test_nested_run),
        cmocka_unit_test(test_kept_block),        cmocka_unit_test(test_size_query_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
