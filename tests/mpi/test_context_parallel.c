/* Context parallelism (tensorattn_mpi.h), run by CTest on P = 1, 2, 3 and 4 ranks through
 * mpirun (tests/mpi/run.sh). Every rank builds the same whole inputs, takes its shard, and
 * compares what ta_sdpa_context_parallel and its backward give it with the rows of the
 * single-process ta_sdpa / ta_sdpa_backward of the whole sequence (1e-5, relative to
 * max(1, |ref|)): ring, zigzag and Ulysses, causal and not, GQA, D != Dv, odd lengths
 * (uneven shards), ranks holding no rows, a ring split that is not the standard one,
 * strided views and bfloat16 inputs; the attention variants (context_parallel_variants.c:
 * window, softcap, ALiBi, sinks and dsinks); determinism; and the errors: an unsupported option,
 * one rank's bad shape, ranks that disagree, shards a scheme cannot take, each giving every
 * rank the same status and message (no hang), the outputs untouched.
 * The largest error is reduced over the ranks before any assertion, so all ranks pass or
 * fail together and stay in step. */
#include "context_parallel_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rank, P;
ta_status before_init_status;
char before_init_msg[512];

/* The rows of the whole sequence this rank holds (1 or 2 chunks). */
static int my_rows(int64_t start[2], int64_t len[2], ta_cp_scheme s, const cp_case *c)
{
    if (!c->custom) return ta_cp_shard(start, len, s, c->L, P, rank);
    start[0] = (int64_t)rank * (rank + 1) / 2; /* 1 + 2 + ... + rank */
    len[0] = rank + 1;
    return 1;
}

/* This rank's shard of a whole [B, X, L, W] tensor, in a new tensor of the given dtype
 * (strided: stored as [B, L, X, W]). */
static void take_shard(ta_tensor *view, ta_tensor *store, const ta_tensor *full,
                       const int64_t start[2], const int64_t len[2], int n, ta_dtype dtype,
                       bool strided)
{
    const int64_t shape[4] = {full->shape[0], full->shape[1], len[0] + (n > 1 ? len[1] : 0),
                              full->shape[3]};
    if (strided) {
        ta_test_tensor4(view, store, shape, TA_TEST_BLHD, NULL);
    } else {
        TA_CHECK_OK(ta_tensor_empty_dtype(store, dtype, 4, shape));
        *view = *store;
        view->owned = NULL;
    }
    for (int c = 0, at = 0; c < n; at += (int)len[c], c++) {
        ta_tensor from, to;
        TA_CHECK_OK(ta_tensor_slice(&from, full, 2, start[c], start[c] + len[c], 1));
        TA_CHECK_OK(ta_tensor_slice(&to, view, 2, at, at + len[c], 1));
        TA_CHECK_OK(ta_tensor_copy(&to, &from));
    }
}

/* max over this rank's rows of |local - ref| / max(1, |ref|), ref the whole [B, X, L, W]
 * (3-d tensors: [B, X, L]); then the max over the ranks. NaN where ref is NaN counts as
 * equal, NaN elsewhere as the worst. */
static double shard_err(const ta_tensor *local, const ta_tensor *ref, const int64_t start[2],
                        const int64_t len[2], int n)
{
    double worst = 0.0;
    const int64_t W = ref->ndim == 4 ? ref->shape[3] : 1;
    for (int64_t b = 0; b < ref->shape[0]; b++)
        for (int64_t x = 0; x < ref->shape[1]; x++)
            for (int c = 0, at = 0; c < n; at += (int)len[c], c++)
                for (int64_t i = 0; i < len[c]; i++)
                    for (int64_t w = 0; w < W; w++) {
                        int64_t li[4] = {b, x, at + i, w}, gi[4] = {b, x, start[c] + i, w};
                        double g = *ta_tensor_at_const(local, li), r = *ta_tensor_at_const(ref, gi);
                        if (g == r || (isnan(g) && isnan(r))) continue; /* -inf LSEs, NaN rows alike */
                        double e = fabs(g - r) / fmax(1.0, fabs(r));
                        worst = isnan(e) ? INFINITY : fmax(worst, e); /* NaN elsewhere: the worst */
                    }
    double all;
    MPI_Allreduce(&worst, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

/* The whole problem and its single-process results, the same on every rank; the
 * variants' slopes and sinks (when the case has them) and the sinks' gradient. */
typedef struct whole {
    ta_tensor q, k, v, dout, o, lse, dq, dk, dv;
    ta_tensor slopes, sinks, dsinks;
} whole;

/* The case's options over w's slopes and sinks (dsinks: the backward's output, or NULL). */
static ta_sdpa_opts case_opts(const cp_case *c, bool causal, whole *w, ta_tensor *dsinks)
{
    return (ta_sdpa_opts){.scale = c->scale,
                          .causal = causal ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE,
                          .key_lengths = c->klen, .has_window = c->window,
                          .window_left = c->wl, .window_right = c->wr, .softcap = c->softcap,
                          .alibi_slopes = c->alibi ? &w->slopes : NULL,
                          .sinks = c->sinks ? &w->sinks : NULL,
                          .dsinks = c->sinks ? dsinks : NULL};
}

/* Slopes [H] or [B, H] and sinks [H]: the same values on every rank, of the size of the
 * scores (slopes of a few hundredths, sinks about the LSE of a short row). */
static void variant_tensors(whole *w, const cp_case *c)
{
    const int64_t bh[2] = {c->B, c->H};
    if (c->alibi) {
        TA_CHECK_OK(ta_tensor_empty(&w->slopes, c->alibi, c->alibi == 1 ? &bh[1] : bh));
        float *a = w->slopes.data;
        for (int64_t i = 0; i < ta_tensor_numel(&w->slopes); i++)
            a[i] = 0.02f + 0.03f * (float)(i % 5);
    }
    if (c->sinks) {
        TA_CHECK_OK(ta_tensor_empty(&w->sinks, 1, &bh[1]));
        TA_CHECK_OK(ta_tensor_empty(&w->dsinks, 1, &bh[1]));
        float *s = w->sinks.data;
        for (int64_t h = 0; h < c->H; h++) s[h] = 0.5f + 0.7f * (float)(h % 4);
        if (c->sink_inf) s[0] = INFINITY;
    }
}

static void whole_make(whole *w, const cp_case *c, bool causal, uint64_t seed)
{
    const int64_t sq[4] = {c->B, c->H, c->L, c->D}, sk[4] = {c->B, c->Hkv, c->L, c->D};
    const int64_t sv[4] = {c->B, c->Hkv, c->L, c->Dv}, so[4] = {c->B, c->H, c->L, c->Dv};
    const int64_t sl[3] = {c->B, c->H, c->L};
    ta_tensor *in[4] = {&w->q, &w->k, &w->v, &w->dout};
    const int64_t *shape[4] = {sq, sk, sv, so};
    for (int i = 0; i < 4; i++) {
        ta_tensor f;
        TA_CHECK_OK(ta_tensor_empty(&f, 4, shape[i]));
        TA_CHECK_OK(ta_randn(&f, seed + (uint64_t)i));
        /* the inputs as the case's dtype sees them (bf16: rounded once) */
        TA_CHECK_OK(ta_tensor_empty_dtype(in[i], i < 3 ? c->dtype : TA_F32, 4, shape[i]));
        TA_CHECK_OK(ta_tensor_copy(in[i], &f));
        ta_tensor_free(&f);
    }
    TA_CHECK_OK(ta_tensor_empty(&w->o, 4, so));
    TA_CHECK_OK(ta_tensor_empty(&w->lse, 3, sl));
    TA_CHECK_OK(ta_tensor_empty(&w->dq, 4, sq));
    TA_CHECK_OK(ta_tensor_empty(&w->dk, 4, sk));
    TA_CHECK_OK(ta_tensor_empty(&w->dv, 4, sv));
    variant_tensors(w, c);
    ta_sdpa_opts so_ = case_opts(c, causal, w, NULL);
    so_.lse = &w->lse;
    TA_CHECK_OK(ta_sdpa(&w->o, &w->q, &w->k, &w->v, &so_));
    so_.lse = NULL;
    so_.dsinks = c->sinks ? &w->dsinks : NULL;
    TA_CHECK_OK(ta_sdpa_backward(&w->dq, &w->dk, &w->dv, &w->dout, &w->q, &w->k, &w->v, &w->o,
                                 &w->lse, &so_));
}

static void whole_free(whole *w)
{
    ta_tensor *t[12] = {&w->q,  &w->k,  &w->v,  &w->dout,   &w->o,     &w->lse,
                        &w->dq, &w->dk, &w->dv, &w->slopes, &w->sinks, &w->dsinks};
    for (int i = 0; i < 12; i++) ta_tensor_free(t[i]);
}

/* max |got - ref| / max(1, |ref|) of the sinks' gradient [H] (every rank has all of it),
 * then the max over the ranks; NaN where the single process has NaN counts as equal. */
static double dsinks_err(const ta_tensor *got, const ta_tensor *ref)
{
    double worst = 0.0, all;
    for (int64_t h = 0; h < ref->shape[0]; h++) {
        double r = ((const float *)ref->data)[h], g = ((const float *)got->data)[h];
        if (g == r || (isnan(g) && isnan(r))) continue;
        double e = fabs(g - r) / fmax(1.0, fabs(r));
        worst = isnan(e) ? INFINITY : fmax(worst, e);
    }
    MPI_Allreduce(&worst, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

double run_case(const cp_case *c, ta_cp_scheme s, bool causal)
{
    whole w = {0};
    whole_make(&w, c, causal, 100 + (uint64_t)c->L);
    int64_t start[2], len[2];
    const int n = my_rows(start, len, s, c);
    const ta_tensor *full[9] = {&w.q, &w.k, &w.v, &w.dout, &w.o, &w.lse, &w.dq, &w.dk, &w.dv};
    ta_tensor view[9], store[9];
    for (int i = 0; i < 9; i++) {
        if (i == 5) continue; /* the LSE: 3-d, made below */
        bool strided = c->strided && (i == 0 || i == 3 || i == 4);
        take_shard(&view[i], &store[i], full[i], start, len, n, i < 3 ? c->dtype : TA_F32, strided);
    }
    const int64_t sl[3] = {c->B, c->H, view[0].shape[2]};
    TA_CHECK_OK(ta_tensor_empty(&store[5], 3, sl));
    view[5] = store[5];
    view[5].owned = NULL;
    ta_tensor dsinks = {0};
    if (c->sinks) TA_CHECK_OK(ta_tensor_full(&dsinks, 1, &c->H, 7.0f));
    ta_sdpa_opts opts = case_opts(c, causal, &w, NULL);
    opts.lse = &view[5];
    TA_CHECK_OK(ta_sdpa_context_parallel(MPI_COMM_WORLD, s, &view[4], &view[0], &view[1],
                                         &view[2], &opts, NULL));
    double err = fmax(shard_err(&view[4], &w.o, start, len, n),
                      shard_err(&view[5], &w.lse, start, len, n));
    opts.lse = NULL;
    opts.dsinks = c->sinks ? &dsinks : NULL;
    TA_CHECK_OK(ta_sdpa_context_parallel_backward(MPI_COMM_WORLD, s, &view[6], &view[7],
                                                  &view[8], &view[3], &view[0], &view[1],
                                                  &view[2], &view[4], &view[5], &opts, NULL));
    for (int i = 6; i < 9; i++) err = fmax(err, shard_err(&view[i], full[i], start, len, n));
    if (c->sinks) err = fmax(err, dsinks_err(&dsinks, &w.dsinks));
    ta_tensor_free(&dsinks);
    for (int i = 0; i < 9; i++) ta_tensor_free(&store[i]);
    whole_free(&w);
    return err;
}

void check_cases(const cp_case *cases, int ncases, const ta_cp_scheme *schemes, int ns)
{
    for (int i = 0; i < ncases; i++)
        for (int j = 0; j < ns; j++)
            for (int causal = 0; causal < 2; causal++) {
                double err = run_case(&cases[i], schemes[j], causal);
                if (!(err <= 1e-5))
                    fail_msg("P = %d, %s, case %d (L %lld, H %lld, Hkv %lld), %s: error %.3g",
                             P, ta_cp_scheme_name(schemes[j]), i, (long long)cases[i].L,
                             (long long)cases[i].H, (long long)cases[i].Hkv,
                             causal ? "causal" : "not causal", err);
            }
}

/* Even and odd lengths, GQA groups of 1, 2 and 4, D != Dv, a scale: every scheme (the
 * heads divisible by P, as Ulysses needs). */
static void test_schemes_match_single_process(void **state)
{
    (void)state;
    const int64_t p = P;
    const cp_case cases[] = {
        {.B = 2, .H = 2 * p, .Hkv = p, .L = 10 * p, .D = 16, .Dv = 8, .dtype = TA_F32},
        {.B = 1, .H = 4 * p, .Hkv = p, .L = 6 * p + 1, .D = 8, .Dv = 8, .scale = 0.3f,
         .dtype = TA_F32},
        {.B = 2, .H = p, .Hkv = p, .L = 2 * p + 3, .D = 4, .Dv = 12, .dtype = TA_F32},
        {.B = 1, .H = 2 * p, .Hkv = 2 * p, .L = 37, .D = 16, .Dv = 16, .dtype = TA_F32},
    };
    const ta_cp_scheme all[3] = {TA_CP_RING, TA_CP_ZIGZAG, TA_CP_ULYSSES};
    check_cases(cases, 4, all, 3);
}

/* Shards that are empty (L < P: some ranks hold no rows; zigzag's second chunks empty),
 * a ring split that is not the standard one (rank r holds r + 1 rows), strided views,
 * bfloat16 inputs, and calls long enough to be cut into pieces. */
static void test_uneven_strided_and_bf16(void **state)
{
    (void)state;
    const int64_t p = P;
    const cp_case small = {.B = 1, .H = p, .Hkv = p, .L = p > 1 ? p - 1 : 1, .D = 8, .Dv = 8,
                           .dtype = TA_F32};
    const cp_case custom = {.B = 2, .H = 2 * p, .Hkv = p, .L = p * (p + 1) / 2, .D = 8, .Dv = 4,
                            .dtype = TA_F32, .custom = true};
    const cp_case strided = {.B = 2, .H = 2 * p, .Hkv = 2 * p, .L = 4 * p + 1, .D = 8, .Dv = 8,
                             .dtype = TA_F32, .strided = true};
    const cp_case bf16 = {.B = 1, .H = 2 * p, .Hkv = p, .L = 4 * p, .D = 8, .Dv = 8,
                          .dtype = TA_BF16};
    /* long enough that a ring step cuts its calls into pieces of query rows (>= 256 rows
     * each) with MPI progressing between them */
    const cp_case pieces = {.B = 1, .H = 1, .Hkv = 1, .L = 520 * p + 7, .D = 4, .Dv = 4,
                            .dtype = TA_F32};
    const ta_cp_scheme all[3] = {TA_CP_RING, TA_CP_ZIGZAG, TA_CP_ULYSSES};
    const ta_cp_scheme contiguous[2] = {TA_CP_RING, TA_CP_ULYSSES};
    check_cases(&small, 1, all, 3);
    check_cases(&custom, 1, contiguous, 2);
    check_cases(&strided, 1, all, 3);
    check_cases(&bf16, 1, all, 3);
    check_cases(&pieces, 1, all, 2); /* ring and zigzag: Ulysses has no pieces */
}

/* Per-batch key lengths (global: of the whole sequence): 0, L, L - 1, and lengths that end
 * at the edge of a ring chunk and of zigzag chunks, and one row inside one; GQA, odd L;
 * then long calls cut into pieces, with lengths ending inside a piece. */
static void test_key_lengths(void **state)
{
    (void)state;
    const int64_t p = P, L = 8 * p + 3;
    int64_t ring_s[2], ring_n[2], zz_s[2], zz_n[2];
    ta_cp_shard(ring_s, ring_n, TA_CP_RING, L, P, 0);
    ta_cp_shard(zz_s, zz_n, TA_CP_ZIGZAG, L, P, P - 1); /* chunks P - 1 and P */
    const int64_t klen[8] = {0, L, L - 1, ring_n[0], zz_s[0] + zz_n[0], zz_s[1] + 1, zz_s[0],
                             ring_n[0] - 1};
    const cp_case cases[] = {
        {.B = 8, .H = 2 * p, .Hkv = p, .L = L, .D = 8, .Dv = 4, .dtype = TA_F32, .klen = klen},
        {.B = 8, .H = p, .Hkv = p, .L = L, .D = 4, .Dv = 8, .scale = 0.7f, .dtype = TA_F32,
         .klen = klen},
    };
    const ta_cp_scheme all[3] = {TA_CP_RING, TA_CP_ZIGZAG, TA_CP_ULYSSES};
    check_cases(cases, 2, all, 3);
    const int64_t Lp = 520 * p + 7, klen_p[3] = {Lp - 300, 260, 0};
    const cp_case pieces = {.B = 3, .H = p, .Hkv = p, .L = Lp, .D = 4, .Dv = 4, .dtype = TA_F32,
                            .klen = klen_p};
    check_cases(&pieces, 1, all, 3);
}

int main(int argc, char **argv)
{
    /* before MPI_Init: a clean error, not a crash */
    int64_t one[4] = {1, 1, 1, 1};
    ta_tensor t = {0};
    TA_CHECK_OK(ta_tensor_zeros(&t, 4, one));
    before_init_status = ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_RING, &t, &t, &t, &t,
                                                  NULL, NULL);
    snprintf(before_init_msg, sizeof before_init_msg, "%s", ta_last_error());
    ta_tensor_free(&t);
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_partitions_the_sequence),
        cmocka_unit_test(test_mpi_not_initialised),
        cmocka_unit_test(test_schemes_match_single_process),
        cmocka_unit_test(test_uneven_strided_and_bf16),
        cmocka_unit_test(test_key_lengths),
        cmocka_unit_test(test_variants_match_single_process),
        cmocka_unit_test(test_variants_with_key_lengths_and_pieces),
        cmocka_unit_test(test_deterministic_and_stats),
        cmocka_unit_test(test_unsupported_option_same_error_everywhere),
        cmocka_unit_test(test_one_rank_bad_shape_named),
        cmocka_unit_test(test_one_rank_out_of_memory),
        cmocka_unit_test(test_backward_out_of_memory_writes_nothing),
        cmocka_unit_test(test_ranks_disagree),
        cmocka_unit_test(test_variants_disagree_and_bad_values),
        cmocka_unit_test(test_scheme_requirements),
        cmocka_unit_test(test_intercommunicator_refused),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return failed;
}
