/* test_context_parallel, part 2: the standard split, determinism and statistics, and the
 * errors. An error must reach every rank as the same status and the same message (the
 * rank at fault named), leave the outputs untouched, and never hang: a rank that waited
 * for a peer stuck elsewhere would keep the test from finishing (CTest's timeout). */
#include "context_parallel_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_shard_partitions_the_sequence(void **state)
{
    (void)state;
    const int64_t lengths[] = {0, 1, 5, 8, 9, 100, 1001};
    for (int s = 0; s < 3; s++)
        for (int np = 1; np <= 5; np++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                const int64_t L = lengths[li];
                int *seen = calloc((size_t)L + 1, sizeof(int));
                int64_t next = 0, lo = L, hi = 0;
                for (int r = 0; r < np; r++) {
                    int64_t start[2], len[2];
                    int n = ta_cp_shard(start, len, (ta_cp_scheme)s, L, np, r);
                    assert_int_equal(n, s == TA_CP_ZIGZAG ? 2 : 1);
                    for (int c = 0; c < n; c++) {
                        for (int64_t i = start[c]; i < start[c] + len[c]; i++) seen[i]++;
                        lo = len[c] < lo ? len[c] : lo;
                        hi = len[c] > hi ? len[c] : hi;
                    }
                    if (s != TA_CP_ZIGZAG) { /* contiguous, in rank order */
                        assert_int_equal(start[0], next);
                        next += len[0];
                    } else { /* chunks r and 2P-1-r of 2P equal ones */
                        assert_int_equal(start[0], r * (L / (2 * np)) + (r < L % (2 * np) ? r : L % (2 * np)));
                        assert_true(start[1] >= start[0] + len[0]);
                    }
                }
                for (int64_t i = 0; i < L; i++) assert_int_equal(seen[i], 1);
                assert_true(hi - lo <= 1);
                free(seen);
            }
    int64_t start[2], len[2];
    assert_int_equal(ta_cp_shard(start, len, TA_CP_RING, 10, 0, 0), 0);
    assert_int_equal(ta_cp_shard(start, len, TA_CP_RING, 10, 2, 2), 0);
    assert_int_equal(ta_cp_shard(start, len, TA_CP_RING, -1, 2, 0), 0);
    assert_int_equal(ta_cp_shard(start, len, (ta_cp_scheme)3, 10, 2, 0), 0);
    ta_cp_scheme sch;
    TA_CHECK_OK(ta_cp_scheme_parse(&sch, "zigzag"));
    assert_int_equal(sch, TA_CP_ZIGZAG);
    TA_CHECK_ERR(ta_cp_scheme_parse(&sch, "ringg"), TA_EINVAL, "ring, zigzag or ulysses");
    assert_string_equal(ta_cp_scheme_name(TA_CP_ULYSSES), "ulysses");
}

void test_mpi_not_initialised(void **state)
{
    (void)state;
    assert_int_equal(before_init_status, TA_EINVAL);
    assert_non_null(strstr(before_init_msg, "MPI is not initialised"));
}

/* This rank's tensors of a small problem: q [B, H, Lr, D], k, v [B, Hkv, Lr, D], o, lse;
 * the standard ring split of L, or Lr rows when lr >= 0. Filled with seeded values; o
 * and lse with 7 (to see that an error leaves them untouched). */
typedef struct small {
    ta_tensor q, k, v, o, lse;
} small;

static void small_make(small *t, int64_t B, int64_t H, int64_t Hkv, int64_t L, int64_t D,
                       int64_t lr)
{
    int64_t start[2], len[2];
    ta_cp_shard(start, len, TA_CP_RING, L, P, rank);
    const int64_t Lr = lr >= 0 ? lr : len[0];
    const int64_t sq[4] = {B, H, Lr, D}, sk[4] = {B, Hkv, Lr, D}, sl[3] = {B, H, Lr};
    TA_CHECK_OK(ta_tensor_empty(&t->q, 4, sq));
    TA_CHECK_OK(ta_tensor_empty(&t->k, 4, sk));
    TA_CHECK_OK(ta_tensor_empty(&t->v, 4, sk));
    TA_CHECK_OK(ta_randn(&t->q, 1 + (uint64_t)rank));
    TA_CHECK_OK(ta_randn(&t->k, 100 + (uint64_t)rank));
    TA_CHECK_OK(ta_randn(&t->v, 200 + (uint64_t)rank));
    TA_CHECK_OK(ta_tensor_full(&t->o, 4, sq, 7.0f));
    TA_CHECK_OK(ta_tensor_full(&t->lse, 3, sl, 7.0f));
}

static void small_free(small *t)
{
    ta_tensor_free(&t->q);
    ta_tensor_free(&t->k);
    ta_tensor_free(&t->v);
    ta_tensor_free(&t->o);
    ta_tensor_free(&t->lse);
}

static bool untouched(const ta_tensor *t)
{
    const float *x = t->data;
    for (int64_t i = 0; i < ta_tensor_numel(t); i++)
        if (x[i] != 7.0f) return false;
    return true;
}

/* Every rank got `code`, a message with both needles (n2 may be NULL), the same message
 * as every other rank, and its outputs are untouched; checked on all ranks together. */
static void expect_everywhere(ta_status st, ta_status code, const char *n1, const char *n2,
                              const small *t)
{
    char mine[512] = {0};
    snprintf(mine, sizeof mine, "%s", ta_last_error());
    char *all = malloc(sizeof mine * (size_t)P);
    assert_non_null(all);
    MPI_Allgather(mine, (int)sizeof mine, MPI_CHAR, all, (int)sizeof mine, MPI_CHAR,
                  MPI_COMM_WORLD);
    int ok = st == code && strstr(mine, n1) && (!n2 || strstr(mine, n2)) &&
             (!t || (untouched(&t->o) && untouched(&t->lse)));
    for (int s = 0; s < P; s++) ok = ok && strcmp(all + s * sizeof mine, mine) == 0;
    free(all);
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok)
        fail_msg("rank %d: got %s '%s', expected %s with '%s'%s%s, the same on every rank",
                 rank, ta_status_name(st), mine, ta_status_name(code), n1, n2 ? " and " : "",
                 n2 ? n2 : "");
}

void test_deterministic_and_stats(void **state)
{
    (void)state;
    const int64_t B = 2, H = 2 * P, Hkv = P, L = 8 * P, D = 8;
    small t;
    small_make(&t, B, H, Hkv, L, D, -1);
    for (int s = 0; s < 3; s++) {
        ta_tensor o2;
        TA_CHECK_OK(ta_tensor_empty(&o2, 4, t.o.shape));
        ta_sdpa_opts opts = {.causal = TA_CAUSAL_TOP_LEFT};
        ta_cp_stats st1, st2;
        TA_CHECK_OK(ta_sdpa_context_parallel(MPI_COMM_WORLD, (ta_cp_scheme)s, &t.o, &t.q, &t.k,
                                             &t.v, &opts, &st1));
        TA_CHECK_OK(ta_sdpa_context_parallel(MPI_COMM_WORLD, (ta_cp_scheme)s, &o2, &t.q, &t.k,
                                             &t.v, &opts, &st2));
        int same = memcmp(t.o.data, o2.data, sizeof(float) * (size_t)ta_tensor_numel(&o2)) == 0, all;
        MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        assert_true(all);
        assert_true(st1.total_s >= st1.compute_s && st1.compute_s > 0.0 && st1.blocked_s >= 0.0);
        /* a ring step sends the K/V block in hand: P - 1 of them, each B*Hkv*Lr*(D+Dv) */
        if (s != TA_CP_ULYSSES) {
            assert_int_equal(st1.steps, P);
            assert_int_equal(st1.bytes_sent, (int64_t)(P - 1) * B * Hkv * t.q.shape[2] * 2 * D * 4);
        } else { /* Q, K, V to heads, O and LSE back */
            assert_int_equal(st1.steps, 5);
            if (P == 1) assert_int_equal(st1.bytes_sent, 0);
            else assert_true(st1.bytes_sent > 0);
        }
        ta_tensor_free(&o2);
        ta_cp_release(); /* the next call takes a new buffer: the same results */
    }
    small_free(&t);
}

void test_unsupported_option_same_error_everywhere(void **state)
{
    (void)state;
    small t;
    small_make(&t, 1, 2, 2, 4 * P, 4, -1);
    ta_sdpa_opts opts = {.mask = &t.q, .lse = &t.lse};
    ta_status st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v,
                                            &opts, NULL);
    expect_everywhere(st, TA_EUNSUPPORTED, "a mask", "context parallelism", &t);
    opts = (ta_sdpa_opts){.weights = &t.q, .lse = &t.lse};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EUNSUPPORTED, "attention weights", "zigzag", &t);
    /* key lengths are global: above the local rows is fine, above L is not */
    int64_t kl = 4 * P + 1;
    opts = (ta_sdpa_opts){.key_lengths = &kl, .lse = &t.lse};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "opts->key_lengths[0]", "outside [0, L", &t);
    /* the backward takes the forward's LSE as an argument, not in opts */
    opts = (ta_sdpa_opts){.lse = &t.lse};
    ta_tensor dq, dk, dv;
    TA_CHECK_OK(ta_tensor_full(&dq, 4, t.q.shape, 7.0f));
    TA_CHECK_OK(ta_tensor_full(&dk, 4, t.k.shape, 7.0f));
    TA_CHECK_OK(ta_tensor_full(&dv, 4, t.v.shape, 7.0f));
    st = ta_sdpa_context_parallel_backward(MPI_COMM_WORLD, TA_CP_RING, &dq, &dk, &dv, &t.q, &t.q,
                                           &t.k, &t.v, &t.q, &t.lse, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "opts->lse must be NULL", "backward", NULL);
    assert_true(untouched(&dq) && untouched(&dk) && untouched(&dv));
    ta_tensor_free(&dq);
    ta_tensor_free(&dk);
    ta_tensor_free(&dv);
    small_free(&t);
}

static void *failing_alloc(size_t bytes, size_t alignment, void *user)
{
    (void)bytes, (void)alignment, (void)user;
    return NULL;
}

static void plain_free(void *p, void *user)
{
    (void)user;
    free(p);
}

/* An allocation that fails on one rank alone: every rank returns TA_ENOMEM with the same
 * message (the failing rank used to return before the gather the others waited in). */
void test_one_rank_out_of_memory(void **state)
{
    (void)state;
    small t;
    small_make(&t, 1, 2, 2, 4 * P, 4, -1);
    ta_sdpa_opts opts = {.lse = &t.lse};
    for (int s = 0; s < 3; s++) {
        if (rank == P - 1) ta_set_allocator(failing_alloc, plain_free, NULL);
        ta_status st = ta_sdpa_context_parallel(MPI_COMM_WORLD, (ta_cp_scheme)s, &t.o, &t.q,
                                                &t.k, &t.v, &opts, NULL);
        if (rank == P - 1) ta_set_allocator(NULL, NULL, NULL);
        expect_everywhere(st, TA_ENOMEM, "out of memory", "(on one rank or more)", &t);
    }
    small_free(&t);
}

/* An allocator that fails its n-th request (n counts down), and only that one. */
static void *nth_alloc(size_t bytes, size_t alignment, void *user)
{
    int *n = user;
    if ((*n)-- == 0) return NULL;
    void *p = NULL;
    if (alignment < sizeof(void *)) alignment = sizeof(void *);
    return posix_memalign(&p, alignment, bytes ? bytes : 1) ? NULL : p;
}

/* The backward with sinks and their gradient, its n-th allocation failing on the last
 * rank, for n = 0, 1, ... until the call succeeds: every failure reaches every rank as
 * TA_ENOMEM and leaves dQ, dK, dV and dsinks untouched (until session 35 the sinks' sums
 * were allocated after the gradients had been written). */
void test_backward_out_of_memory_writes_nothing(void **state)
{
    (void)state;
    small t;
    small_make(&t, 1, 2 * P, P, 4 * P, 4, -1);
    const int64_t H = 2 * P;
    ta_tensor sinks, dsinks, dout, g[3];
    TA_CHECK_OK(ta_tensor_full(&sinks, 1, &H, 0.5f));
    TA_CHECK_OK(ta_tensor_empty(&dsinks, 1, &H));
    TA_CHECK_OK(ta_tensor_empty(&dout, 4, t.o.shape));
    TA_CHECK_OK(ta_randn(&dout, 300 + (uint64_t)rank));
    const ta_tensor *like[3] = {&t.q, &t.k, &t.v};
    for (int i = 0; i < 3; i++) TA_CHECK_OK(ta_tensor_empty(&g[i], 4, like[i]->shape));
    for (int s = 0; s < 3; s++) {
        ta_sdpa_opts opts = {.causal = TA_CAUSAL_TOP_LEFT, .sinks = &sinks, .lse = &t.lse};
        TA_CHECK_OK(ta_sdpa_context_parallel(MPI_COMM_WORLD, (ta_cp_scheme)s, &t.o, &t.q, &t.k,
                                             &t.v, &opts, NULL));
        opts.lse = NULL;
        opts.dsinks = &dsinks;
        for (int n = 0;; n++) {
            assert_true(n < 100);
            for (int i = 0; i < 3; i++) TA_CHECK_OK(ta_tensor_fill(&g[i], 7.0f));
            TA_CHECK_OK(ta_tensor_fill(&dsinks, 7.0f));
            ta_cp_release(); /* every try makes the same allocations */
            int left = n;
            if (rank == P - 1) ta_set_allocator(nth_alloc, plain_free, &left);
            ta_status st = ta_sdpa_context_parallel_backward(
                MPI_COMM_WORLD, (ta_cp_scheme)s, &g[0], &g[1], &g[2], &dout, &t.q, &t.k, &t.v,
                &t.o, &t.lse, &opts, NULL);
            if (rank == P - 1) ta_set_allocator(NULL, NULL, NULL);
            int ok = st == TA_OK, all_ok;
            MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            if (all_ok) break;
            /* the function named once: "<fn> (<scheme>): ..." */
            const char *msg = ta_last_error(), *fn = strstr(msg, "_backward (");
            int fine = st == TA_ENOMEM && fn &&
                       !strstr(fn + 1, "_backward (") && untouched(&g[0]) &&
                       untouched(&g[1]) && untouched(&g[2]) && untouched(&dsinks), all_fine;
            MPI_Allreduce(&fine, &all_fine, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            if (!all_fine)
                fail_msg("rank %d, %s, allocation %d failing: %s '%s'%s", rank,
                         ta_cp_scheme_name((ta_cp_scheme)s), n, ta_status_name(st), msg,
                         fine ? " (on another rank)" : " (or an output written)");
        }
    }
    for (int i = 0; i < 3; i++) ta_tensor_free(&g[i]);
    ta_tensor_free(&sinks);
    ta_tensor_free(&dsinks);
    ta_tensor_free(&dout);
    small_free(&t);
}

void test_one_rank_bad_shape_named(void **state)
{
    (void)state;
    char who[32];
    if (P > 1) snprintf(who, sizeof who, "rank %d: ", P - 1);
    else snprintf(who, sizeof who, "ta_sdpa_context_parallel");
    small t, bad;
    small_make(&t, 1, 2, 2, 4 * P, 4, -1);
    small_make(&bad, 1, 2, 2, 4 * P, 5, -1); /* D = 5 */
    /* the last rank's K has D = 5 */
    ta_status st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q,
                                            rank == P - 1 ? &bad.k : &t.k, &t.v, NULL, NULL);
    expect_everywhere(st, TA_ESHAPE, who, "ta_sdpa", &t);
    /* the last rank passes NULL for O */
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ULYSSES, rank == P - 1 ? NULL : &t.o,
                                  &t.q, &t.k, &t.v, NULL, NULL);
    expect_everywhere(st, TA_EINVAL, who, "O is NULL", &t);
    small_free(&bad);
    /* the last rank's Q holds one more row than its K: not self-attention */
    small_make(&bad, 1, 2, 2, 4 * P, 4, t.q.shape[2] + 1);
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, rank == P - 1 ? &bad.q : &t.q,
                                  &t.k, &t.v, NULL, NULL);
    expect_everywhere(st, TA_ESHAPE, who, "self-attention", &t);
    small_free(&bad);
    small_free(&t);
}

void test_ranks_disagree(void **state)
{
    (void)state;
    if (P == 1) skip();
    small t;
    small_make(&t, 1, 2, 2, 4 * P, 4, -1);
    ta_sdpa_opts opts = {.scale = rank == 0 ? 0.5f : 0.0f};
    ta_status st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v,
                                            &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "disagree", "opts->scale", &t);
    opts = (ta_sdpa_opts){.causal = rank == P - 1 ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "disagree", "causal", &t);
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, rank == 0 ? TA_CP_ULYSSES : TA_CP_RING, &t.o,
                                  &t.q, &t.k, &t.v, NULL, NULL);
    expect_everywhere(st, TA_EINVAL, "disagree", "scheme", &t);
    /* key lengths: on some ranks only, then with different values */
    int64_t kl = rank == 0 ? 1 : 2;
    opts = (ta_sdpa_opts){.key_lengths = rank == 0 ? &kl : NULL};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "disagree", "opts->key_lengths", &t);
    opts.key_lengths = &kl;
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ULYSSES, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "disagree", "opts->key_lengths", &t);
    /* rank 0 calls the backward while the others call the forward */
    ta_tensor g[3];
    for (int i = 0; i < 3; i++) TA_CHECK_OK(ta_tensor_full(&g[i], 4, t.q.shape, 7.0f));
    if (rank == 0)
        st = ta_sdpa_context_parallel_backward(MPI_COMM_WORLD, TA_CP_RING, &g[0], &g[1], &g[2],
                                               &t.q, &t.q, &t.k, &t.v, &t.q, &t.lse, NULL, NULL);
    else
        st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, NULL, NULL);
    expect_everywhere(st, TA_EINVAL, "disagree", "direction", &t);
    for (int i = 0; i < 3; i++) {
        assert_true(untouched(&g[i]));
        ta_tensor_free(&g[i]);
    }
    small_free(&t);
}

void test_scheme_requirements(void **state)
{
    (void)state;
    small t;
    /* Ulysses: H = P + 1 query heads (Hkv = 1) cannot be split over P > 1 ranks */
    small_make(&t, 1, P + 1, 1, 4 * P, 4, -1);
    ta_status st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ULYSSES, &t.o, &t.q, &t.k, &t.v,
                                            NULL, NULL);
    if (P > 1) expect_everywhere(st, TA_ESHAPE, "ulysses", "divisible by the number of ranks", &t);
    else assert_int_equal(st, TA_OK);
    small_free(&t);
    /* zigzag takes the standard split only: rank 0 one row more, the last one less */
    if (P > 1) {
        int64_t start[2], len[2];
        ta_cp_shard(start, len, TA_CP_ZIGZAG, 4 * P, P, rank);
        small_make(&t, 1, 2, 2, 4 * P, 4, len[0] + len[1] + (rank == 0) - (rank == P - 1));
        st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &t.o, &t.q, &t.k, &t.v, NULL,
                                      NULL);
        expect_everywhere(st, TA_ESHAPE, "zigzag", "ta_cp_shard", &t);
        small_free(&t);
    }
    small_make(&t, 1, 2, 2, 4 * P, 4, -1);
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, (ta_cp_scheme)7, &t.o, &t.q, &t.k, &t.v, NULL,
                                  NULL);
    expect_everywhere(st, TA_EINVAL, "not a ta_cp_scheme", NULL, &t);
    st = ta_sdpa_context_parallel(MPI_COMM_NULL, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, NULL, NULL);
    expect_everywhere(st, TA_EINVAL, "MPI_COMM_NULL", NULL, &t);
    small_free(&t);
}

/* An intercommunicator (the even world ranks one group, the odd ones the other): its
 * collectives and ranks address the other group, so the ring paired one group's queries
 * with the other's keys and returned TA_OK with wrong rows (1.4 off, for groups of two).
 * Every process now gets TA_EINVAL, the outputs untouched. */
void test_intercommunicator_refused(void **state)
{
    (void)state;
    if (P == 1) skip(); /* one process: no second group */
    MPI_Comm group, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &group);
    MPI_Intercomm_create(group, 0, MPI_COMM_WORLD, 1 - rank % 2, 77, &inter);
    small t;
    small_make(&t, 1, 2, 2, 8, 4, 4);
    ta_sdpa_opts opts = {.lse = &t.lse};
    for (int s = 0; s < 3; s++) {
        ta_status st = ta_sdpa_context_parallel(inter, (ta_cp_scheme)s, &t.o, &t.q, &t.k, &t.v,
                                                &opts, NULL);
        expect_everywhere(st, TA_EINVAL, "intercommunicator", "MPI_Intercomm_merge", &t);
    }
    ta_tensor g[3];
    for (int i = 0; i < 3; i++) TA_CHECK_OK(ta_tensor_full(&g[i], 4, t.q.shape, 7.0f));
    ta_status st = ta_sdpa_context_parallel_backward(inter, TA_CP_ZIGZAG, &g[0], &g[1], &g[2],
                                                     &t.q, &t.q, &t.k, &t.v, &t.q, &t.lse, NULL,
                                                     NULL);
    expect_everywhere(st, TA_EINVAL, "intercommunicator", "backward", NULL);
    for (int i = 0; i < 3; i++) {
        assert_true(untouched(&g[i]));
        ta_tensor_free(&g[i]);
    }
    small_free(&t);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&group);
}

/* The variants: bad values on every rank (the library's own message, the same
 * everywhere), bad values on one rank (named), and ranks that disagree on a window, the
 * softcap, the slopes' or sinks' values or whether they are given -- each the same clean
 * error on every rank, the outputs untouched. */
void test_variants_disagree_and_bad_values(void **state)
{
    (void)state;
    small t;
    small_make(&t, 2, 2 * P, P, 4 * P, 4, -1);
    const int64_t H = 2 * P, bad_shape[1] = {H + 1};
    ta_tensor slopes, sinks, wrong, dsinks;
    TA_CHECK_OK(ta_tensor_full(&slopes, 1, &H, 0.25f));
    TA_CHECK_OK(ta_tensor_full(&sinks, 1, &H, 1.0f));
    TA_CHECK_OK(ta_tensor_full(&wrong, 1, bad_shape, 1.0f));
    TA_CHECK_OK(ta_tensor_full(&dsinks, 1, &H, 7.0f));
    ta_sdpa_opts opts = {.has_window = 1, .window_left = -2, .window_right = 0, .lse = &t.lse};
    ta_status st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &t.o, &t.q, &t.k, &t.v,
                                            &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "window_left = -2", "zigzag", &t);
    opts = (ta_sdpa_opts){.softcap = -1.0f};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "opts->softcap", "ring", &t);
    opts = (ta_sdpa_opts){.alibi_slopes = &wrong};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ULYSSES, &t.o, &t.q, &t.k, &t.v, &opts,
                                  NULL);
    expect_everywhere(st, TA_EINVAL, "opts->alibi_slopes has shape", "ulysses", &t);
    /* the last rank's sinks have the wrong shape: named */
    char who[32];
    snprintf(who, sizeof who, P > 1 ? "rank %d: " : "ta_sdpa_context_parallel", P - 1);
    opts = (ta_sdpa_opts){.sinks = rank == P - 1 ? &wrong : &sinks};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, who, "opts->sinks has shape", &t);
    /* dsinks in a forward, dsinks without sinks in a backward */
    opts = (ta_sdpa_opts){.sinks = &sinks, .dsinks = &dsinks};
    st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "opts->dsinks", NULL, &t);
    ta_tensor g[3];
    for (int i = 0; i < 3; i++)
        TA_CHECK_OK(ta_tensor_full(&g[i], 4, i ? t.k.shape : t.q.shape, 7.0f));
    opts = (ta_sdpa_opts){.dsinks = &dsinks};
    st = ta_sdpa_context_parallel_backward(MPI_COMM_WORLD, TA_CP_ZIGZAG, &g[0], &g[1], &g[2],
                                           &t.o, &t.q, &t.k, &t.v, &t.o, &t.lse, &opts, NULL);
    expect_everywhere(st, TA_EINVAL, "opts->dsinks needs opts->sinks", NULL, NULL);
    for (int i = 0; i < 3; i++) assert_true(untouched(&g[i]));
    assert_true(untouched(&dsinks));
    if (P > 1) { /* the ranks disagree */
        const bool last = rank == P - 1;
        opts = (ta_sdpa_opts){.has_window = 1, .window_left = last ? 3 : 2, .window_right = -1};
        st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, &opts,
                                      NULL);
        expect_everywhere(st, TA_EINVAL, "disagree", "the window", &t);
        opts = (ta_sdpa_opts){.softcap = last ? 30.0f : 30.000002f};
        st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &t.o, &t.q, &t.k, &t.v, &opts,
                                      NULL);
        expect_everywhere(st, TA_EINVAL, "disagree", "opts->softcap", &t);
        opts = (ta_sdpa_opts){.alibi_slopes = rank == 0 ? &slopes : NULL};
        st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ULYSSES, &t.o, &t.q, &t.k, &t.v, &opts,
                                      NULL);
        expect_everywhere(st, TA_EINVAL, "disagree", "opts->alibi_slopes", &t);
        if (last) ((float *)slopes.data)[H - 1] = 0.5f; /* one value differs */
        opts = (ta_sdpa_opts){.alibi_slopes = &slopes};
        st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t.o, &t.q, &t.k, &t.v, &opts,
                                      NULL);
        expect_everywhere(st, TA_EINVAL, "disagree", "opts->alibi_slopes", &t);
        if (last) ((float *)sinks.data)[0] = 2.0f;
        opts = (ta_sdpa_opts){.sinks = &sinks};
        st = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &t.o, &t.q, &t.k, &t.v, &opts,
                                      NULL);
        expect_everywhere(st, TA_EINVAL, "disagree", "opts->sinks", &t);
        ((float *)sinks.data)[0] = 1.0f; /* the same sinks again, dsinks on rank 0 only */
        opts = (ta_sdpa_opts){.sinks = &sinks, .dsinks = rank == 0 ? &dsinks : NULL};
        st = ta_sdpa_context_parallel_backward(MPI_COMM_WORLD, TA_CP_RING, &g[0], &g[1], &g[2],
                                               &t.o, &t.q, &t.k, &t.v, &t.o, &t.lse, &opts, NULL);
        expect_everywhere(st, TA_EINVAL, "disagree", "opts->dsinks", NULL);
        for (int i = 0; i < 3; i++) assert_true(untouched(&g[i]));
        assert_true(untouched(&dsinks));
    }
    for (int i = 0; i < 3; i++) ta_tensor_free(&g[i]);
    ta_tensor *v[4] = {&slopes, &sinks, &wrong, &dsinks};
    for (int i = 0; i < 4; i++) ta_tensor_free(v[i]);
    small_free(&t);
}
