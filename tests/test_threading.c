/* The header's concurrency contract: calls on distinct outputs may run at the same time
 * from several threads, here from inside the caller's own OpenMP parallel region (the
 * library's regions nest), and give bitwise the results of the same calls made one after
 * the other: ta_sdpa (fused and reference), ta_sdpa_backward, ta_einsum and the forward
 * of distinct layers. Errors stay on their own thread (ta_last_error). */
#include "ta_test.h"

#include "core/core.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define CALLERS 4

static const int64_t SHAPE[4] = {2, 4, 67, 24};

static void randn4(ta_tensor *t, uint64_t seed)
{
    TA_CHECK_OK(ta_tensor_empty(t, 4, SHAPE));
    TA_CHECK_OK(ta_randn(t, seed));
}

static void assert_bits(const ta_tensor *a, const ta_tensor *b, const char *what, int caller)
{
    if (memcmp(a->data, b->data, sizeof(float) * (size_t)ta_tensor_numel(a)) != 0)
        fail_msg("%s: caller %d's result differs from the serial one", what, caller);
}

static void test_sdpa_from_callers_region(void **state)
{
    (void)state;
    ta_tensor q, k, v, dout, ref[2], lse, dref[3];
    randn4(&q, 1);
    randn4(&k, 2);
    randn4(&v, 3);
    randn4(&dout, 4);
    const int64_t ls[3] = {SHAPE[0], SHAPE[1], SHAPE[2]};
    TA_CHECK_OK(ta_tensor_empty(&lse, 3, ls));
    const ta_sdpa_path paths[2] = {TA_SDPA_FUSED, TA_SDPA_REFERENCE};
    for (int p = 0; p < 2; p++) {
        TA_CHECK_OK(ta_tensor_empty(&ref[p], 4, SHAPE));
        ta_sdpa_opts o = {.causal = TA_CAUSAL_TOP_LEFT, .path = paths[p]};
        if (p == 0) o.lse = &lse;
        TA_CHECK_OK(ta_sdpa(&ref[p], &q, &k, &v, &o));
    }
    for (int g = 0; g < 3; g++) TA_CHECK_OK(ta_tensor_empty(&dref[g], 4, SHAPE));
    ta_sdpa_opts bo = {.causal = TA_CAUSAL_TOP_LEFT};
    TA_CHECK_OK(ta_sdpa_backward(&dref[0], &dref[1], &dref[2], &dout, &q, &k, &v, &ref[0], &lse, &bo));

    ta_tensor out[CALLERS][2], grad[CALLERS][3];
    int failures = 0;
#pragma omp parallel num_threads(CALLERS) reduction(+ : failures)
    {
        int c = omp_get_thread_num();
        for (int p = 0; p < 2; p++) {
            ta_sdpa_opts o = {.causal = TA_CAUSAL_TOP_LEFT, .path = paths[p]};
            failures += ta_tensor_empty(&out[c][p], 4, SHAPE) != TA_OK;
            failures += ta_sdpa(&out[c][p], &q, &k, &v, &o) != TA_OK;
        }
        for (int g = 0; g < 3; g++) failures += ta_tensor_empty(&grad[c][g], 4, SHAPE) != TA_OK;
        failures += ta_sdpa_backward(&grad[c][0], &grad[c][1], &grad[c][2], &dout, &q, &k, &v,
                                     &ref[0], &lse, &bo) != TA_OK;
    }
    assert_int_equal(failures, 0);
    for (int c = 0; c < CALLERS; c++) {
        assert_bits(&out[c][0], &ref[0], "ta_sdpa fused", c);
        assert_bits(&out[c][1], &ref[1], "ta_sdpa reference", c);
        for (int g = 0; g < 3; g++) assert_bits(&grad[c][g], &dref[g], "ta_sdpa_backward", c);
        for (int p = 0; p < 2; p++) ta_tensor_free(&out[c][p]);
        for (int g = 0; g < 3; g++) ta_tensor_free(&grad[c][g]);
    }
    for (int p = 0; p < 2; p++) ta_tensor_free(&ref[p]);
    for (int g = 0; g < 3; g++) ta_tensor_free(&dref[g]);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v); ta_tensor_free(&dout);
    ta_tensor_free(&lse);
}

static void test_einsum_and_layers_from_callers_region(void **state)
{
    (void)state;
    ta_tensor q, k, ref;
    randn4(&q, 5);
    randn4(&k, 6);
    TA_CHECK_OK(ta_einsum_alloc(&ref, "bhid,bhjd->bhij", &q, &k));
    const int64_t xs[3] = {2, 19, 32};
    ta_tensor x, yref;
    TA_CHECK_OK(ta_tensor_empty(&x, 3, xs));
    TA_CHECK_OK(ta_randn(&x, 7));
    TA_CHECK_OK(ta_tensor_empty(&yref, 3, xs));
    ta_attention *layer[CALLERS];
    for (int c = 0; c < CALLERS; c++)
        TA_CHECK_OK(ta_attention_create(&layer[c], TA_LAYOUT_TORCH, 32, 4, 8)); /* same seed */
    ta_attention_opts ao = {.causal = TA_CAUSAL_TOP_LEFT};
    TA_CHECK_OK(ta_attention_forward(&yref, layer[0], &x, &x, &x, &ao));

    ta_tensor s[CALLERS], y[CALLERS];
    int failures = 0;
#pragma omp parallel num_threads(CALLERS) reduction(+ : failures)
    {
        int c = omp_get_thread_num();
        failures += ta_einsum_alloc(&s[c], "bhid,bhjd->bhij", &q, &k) != TA_OK;
        failures += ta_tensor_empty(&y[c], 3, xs) != TA_OK;
        failures += ta_attention_forward(&y[c], layer[c], &x, &x, &x, &ao) != TA_OK;
        /* an error on this thread names this thread's mistake */
        const char *bad = c % 2 ? "bhid,bhjd->bhiX" : "bhid,bhjd->bhiY";
        ta_status st = ta_einsum_alloc(&(ta_tensor){0}, bad, &q, &k);
        failures += st == TA_OK;
        failures += strstr(ta_last_error(), bad) == NULL;
    }
    assert_int_equal(failures, 0);
    for (int c = 0; c < CALLERS; c++) {
        assert_bits(&s[c], &ref, "ta_einsum", c);
        assert_bits(&y[c], &yref, "ta_attention_forward", c);
        ta_tensor_free(&s[c]);
        ta_tensor_free(&y[c]);
        ta_attention_free(layer[c]);
    }
    ta_tensor_free(&ref); ta_tensor_free(&q); ta_tensor_free(&k);
    ta_tensor_free(&x); ta_tensor_free(&yref);
}

/* The work loops' claims (core.h: ta_claims_first, ta_claims_next; the next chunk taken
 * as the one running starts, claims of `per` consecutive chunks): every chunk runs once,
 * in order within a claim, and a thread's first claim is its own, so a thread that
 * arrives first cannot take a claim another thread would have started with. Thread 0
 * runs its whole loop before the others start (they wait at a barrier): with as many
 * claims as threads it must take one, not all (the bug of one shared counter for the
 * first claims too, fixed in session 22: a backward with 2 groups on 2 threads ran on
 * one). */
/* A thread's loop over the chunks it claims, counting the runs of each chunk and its own. */
static void claim_loop(int64_t nchunks, int64_t per, int64_t *counter, int *taken, int *mine)
{
    ta_claims cl;
    for (int64_t c = ta_claims_first(&cl, counter, per, nchunks); c < nchunks;) {
        const int64_t cn = ta_claims_next(&cl, c);
        if (cn < nchunks && cn % per != 0 && cn != c + 1)
            fail_msg("chunk %lld followed by %lld inside a claim of %lld", (long long)c,
                     (long long)cn, (long long)per);
        __atomic_fetch_add(&taken[c], 1, __ATOMIC_RELAXED);
        ++*mine;
        c = cn;
    }
}

static void test_claims(void **state)
{
    (void)state;
    for (int64_t per = 1; per <= 3; per += 2)
        for (int nt = 1; nt <= 4; nt++)
            for (int64_t nchunks = 0; nchunks <= per * (3 * nt + 2); nchunks++) {
                int taken[64] = {0}, mine[8] = {0}, team = 0;
                int64_t counter = 0;
#pragma omp parallel num_threads(nt)
                {
                    const int me = omp_get_thread_num();
                    if (me == 0) {
                        team = omp_get_num_threads();
                        claim_loop(nchunks, per, &counter, taken, &mine[0]);
                    }
#pragma omp barrier
                    if (me != 0) claim_loop(nchunks, per, &counter, taken, &mine[me]);
                }
                for (int64_t c = 0; c < nchunks; c++)
                    if (taken[c] != 1)
                        fail_msg("%d threads, %lld chunks of %lld a claim: chunk %lld ran %d "
                                 "times", nt, (long long)nchunks, (long long)per, (long long)c,
                                 taken[c]);
                /* thread 0 ran alone first: its own claim, then all those past the team's
                 * first ones; every other thread its own claim (as much of it as there
                 * is) and nothing more */
                for (int t = 1; t < team; t++) {
                    const int64_t own = TA_MAX(0, TA_MIN(per, nchunks - t * per));
                    if (mine[t] != own)
                        fail_msg("%d threads, %lld chunks of %lld a claim: thread %d ran %d "
                                 "chunks", team, (long long)nchunks, (long long)per, t, mine[t]);
                }
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdpa_from_callers_region),
        cmocka_unit_test(test_einsum_and_layers_from_callers_region),
        cmocka_unit_test(test_claims),
    };
    return cmocka_run_group_tests_name("threading", tests, NULL, NULL);
}
