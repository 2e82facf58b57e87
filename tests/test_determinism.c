/* ta-test: all-isas
 * Determinism: every operation gives bitwise identical results for 1, 2 and 7 threads
 * and across repeated runs (DESIGN.md: the thread split never changes the arithmetic
 * order). Sizes are chosen above the thresholds where the operations go parallel.
 * Covers ta_sgemm, ta_einsum (direct and packing paths), ta_softmax, ta_sdpa
 * (reference and fused) with its LSE and weights, ta_sdpa_backward
 * (reference and auto), and the attention layers' forward in both layouts. */
#include "ta_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int thread_counts[] = {1, 2, 7, 1, 2, 7}; /* twice: repeated runs too */
#define NRUNS ((int)(sizeof thread_counts / sizeof thread_counts[0]))

/* Runs op once per entry of thread_counts into out (n floats), comparing each result
 * bitwise with the first. */
static void check_bitwise(const char *name, ta_status (*op)(float *out), size_t n)
{
    float *first = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    int saved = ta_get_num_threads();
    for (int r = 0; r < NRUNS; r++) {
        TA_CHECK_OK(ta_set_num_threads(thread_counts[r]));
        memset(got, 0xCD, n * sizeof(float));
        ta_status st = op(r ? got : first);
        if (st != TA_OK) fail_msg("%s: %s", name, ta_last_error());
        if (r && memcmp(first, got, n * sizeof(float)) != 0) {
            size_t i = 0;
            while (i < n && memcmp(first + i, got + i, sizeof(float)) == 0) i++;
            fail_msg("%s: %d threads (run %d) differs from 1 thread at element %zu: %.9g vs %.9g",
                     name, thread_counts[r], r, i, (double)got[i], (double)first[i]);
        }
    }
    ta_set_num_threads(saved);
    free(first);
    free(got);
}

static ta_tensor randn(int ndim, const int64_t *shape, uint64_t seed)
{
    ta_tensor t;
    assert_int_equal(ta_tensor_empty(&t, ndim, shape), TA_OK);
    assert_int_equal(ta_randn(&t, seed), TA_OK);
    return t;
}

/* ---------------------------------------------------------------- GEMM */

enum { GM = 203, GN = 301, GK = 157 };
static ta_tensor ga, gb;

static ta_status op_gemm(float *out)
{
    ta_status st = ta_sgemm(out, GN, 1, ga.data, GK, 1, gb.data, GN, 1, GM, GN, GK, 1.0f, 0.0f);
    /* transposed operands and beta != 0 on top */
    if (!st) st = ta_sgemm(out, GN, 1, ga.data, 1, GM, gb.data, GN, 1, GM, GN, GK, 0.5f, 1.0f);
    return st;
}

static void test_gemm(void **s)
{
    (void)s;
    const int64_t sa[1] = {GM * GK}, sb[1] = {GK * GN};
    ga = randn(1, sa, 1);
    gb = randn(1, sb, 2);
    check_bitwise("ta_sgemm", op_gemm, (size_t)GM * GN);
    ta_tensor_free(&ga);
    ta_tensor_free(&gb);
}

/* -------------------------------------------------------------- einsum */

static ta_tensor eq, ek, esl;

static ta_status op_einsum(float *out)
{
    const int64_t so[4] = {2, 4, 96, 80};
    ta_tensor o;
    ta_tensor_from_buffer(&o, out, 4, so, NULL);
    return ta_einsum(&o, "bhid,bhjd->bhij", &eq, &ek);
}

static ta_status op_einsum_packed(float *out)
{
    /* "nqhd,nkhd->nhqk" on the sliced view: strides that force packing */
    const int64_t so[4] = {2, 4, 96, 40};
    ta_tensor o, qv;
    ta_tensor_from_buffer(&o, out, 4, so, NULL);
    ta_tensor_permute(&qv, &eq, (const int[]){0, 2, 1, 3});
    return ta_einsum(&o, "nqhd,nkhd->nhqk", &qv, &esl);
}

static ta_status op_einsum_reduce(float *out)
{
    const int64_t so[2] = {4, 48};
    ta_tensor o;
    ta_tensor_from_buffer(&o, out, 2, so, NULL);
    return ta_einsum1(&o, "bhid->hd", &eq);
}

static void test_einsum(void **s)
{
    (void)s;
    const int64_t sq[4] = {2, 4, 96, 48}, sk[4] = {2, 4, 80, 48};
    eq = randn(4, sq, 3);
    ek = randn(4, sk, 4);
    ta_tensor kp, tmp;
    ta_tensor_permute(&kp, &ek, (const int[]){0, 2, 1, 3}); /* [2, 80, 4, 48] */
    ta_tensor_slice(&tmp, &kp, 1, 0, 80, 2);                 /* [2, 40, 4, 48] */
    esl = tmp;
    check_bitwise("einsum bhid,bhjd->bhij", op_einsum, 2 * 4 * 96 * 80);
    check_bitwise("einsum packed nqhd,nkhd->nhqk", op_einsum_packed, 2 * 4 * 96 * 40);
    check_bitwise("einsum1 bhid->hd", op_einsum_reduce, 4 * 48);
    ta_tensor_free(&eq);
    ta_tensor_free(&ek);
}

/* ------------------------------------------------------------- softmax */

static ta_tensor sx;

static ta_status op_softmax(float *out)
{
    ta_tensor o;
    ta_tensor_from_buffer(&o, out, sx.ndim, sx.shape, NULL);
    return ta_softmax(&o, &sx, -1);
}

static void test_softmax(void **s)
{
    (void)s;
    const int64_t sh[3] = {8, 130, 257};
    sx = randn(3, sh, 5);
    check_bitwise("ta_softmax", op_softmax, 8 * 130 * 257);
    ta_tensor_free(&sx);
}

/* ---------------------------------------------------------------- sdpa */

enum { B = 2, H = 4, HKV = 2, LQ = 130, LK = 129, D = 40, DV = 24 };
static ta_tensor Q, K, V, M;
static ta_sdpa_path path;
static int with_weights;

/* out: O, then LSE, then (reference) the weights */
static ta_status op_sdpa(float *out)
{
    const int64_t so[4] = {B, H, LQ, DV}, sw[4] = {B, H, LQ, LK};
    ta_tensor O, L, W;
    ta_tensor_from_buffer(&O, out, 4, so, NULL);
    ta_tensor_from_buffer(&L, out + B * H * LQ * DV, 3, sw, NULL);
    ta_tensor_from_buffer(&W, out + B * H * LQ * DV + B * H * LQ, 4, sw, NULL);
    int64_t klen[B] = {LK, 77};
    ta_sdpa_opts o = {.path = path, .causal = TA_CAUSAL_BOTTOM_RIGHT, .lse = &L,
                      .mask = &M, .mask_mode = TA_MASK_ADDITIVE, .key_lengths = klen};
    if (with_weights) o.weights = &W;
    return ta_sdpa(&O, &Q, &K, &V, &o);
}

/* out: dQ, dK, dV of a forward run on one thread (its O and LSE are the inputs) */
static ta_status op_sdpa_backward(float *out)
{
    const int64_t so[4] = {B, H, LQ, DV}, sl[3] = {B, H, LQ}, sq[4] = {B, H, LQ, D};
    const int64_t sk[4] = {B, HKV, LK, D}, sv[4] = {B, HKV, LK, DV};
    static float o[B * H * LQ * DV], lse[B * H * LQ], dob[B * H * LQ * DV];
    ta_tensor O, L, dO, dQ, dK, dV;
    ta_tensor_from_buffer(&O, o, 4, so, NULL);
    ta_tensor_from_buffer(&L, lse, 3, sl, NULL);
    ta_tensor_from_buffer(&dO, dob, 4, so, NULL);
    ta_randn(&dO, 13);
    ta_tensor_from_buffer(&dQ, out, 4, sq, NULL);
    ta_tensor_from_buffer(&dK, out + B * H * LQ * D, 4, sk, NULL);
    ta_tensor_from_buffer(&dV, out + B * H * LQ * D + B * HKV * LK * D, 4, sv, NULL);
    int64_t klen[B] = {LK, 77};
    ta_sdpa_opts o1 = {.path = TA_SDPA_REFERENCE, .causal = TA_CAUSAL_BOTTOM_RIGHT, .lse = &L,
                       .mask = &M, .mask_mode = TA_MASK_ADDITIVE, .key_lengths = klen};
    ta_status st = ta_sdpa(&O, &Q, &K, &V, &o1);
    ta_sdpa_opts o2 = o1;
    o2.lse = NULL;
    o2.path = path;
    if (!st) st = ta_sdpa_backward(&dQ, &dK, &dV, &dO, &Q, &K, &V, &O, &L, &o2);
    return st;
}

static void test_sdpa(void **s)
{
    (void)s;
    const int64_t sq[4] = {B, H, LQ, D}, sk[4] = {B, HKV, LK, D}, sv[4] = {B, HKV, LK, DV};
    const int64_t sm[4] = {B, 1, 1, LK};
    Q = randn(4, sq, 6);
    K = randn(4, sk, 7);
    V = randn(4, sv, 8);
    M = randn(4, sm, 9);
    size_t n = (size_t)B * H * LQ * DV + (size_t)B * H * LQ + (size_t)B * H * LQ * LK;
    size_t nbwd = (size_t)B * H * LQ * D + (size_t)B * HKV * LK * D + (size_t)B * HKV * LK * DV;
    path = TA_SDPA_REFERENCE;
    with_weights = 1;
    check_bitwise("ta_sdpa reference (weights, LSE)", op_sdpa, n);
    with_weights = 0;
    check_bitwise("ta_sdpa reference", op_sdpa, n - (size_t)B * H * LQ * LK);
    path = TA_SDPA_REFERENCE;
    check_bitwise("ta_sdpa_backward reference", op_sdpa_backward, nbwd);
    path = TA_SDPA_AUTO;
    check_bitwise("ta_sdpa_backward auto", op_sdpa_backward, nbwd);
    path = TA_SDPA_FUSED;
    check_bitwise("ta_sdpa fused", op_sdpa, n - (size_t)B * H * LQ * LK);
    path = TA_SDPA_AUTO;
    check_bitwise("ta_sdpa auto", op_sdpa, n - (size_t)B * H * LQ * LK);
    ta_tensor_free(&Q);
    ta_tensor_free(&K);
    ta_tensor_free(&V);
    ta_tensor_free(&M);
}

/* -------------------------------------------------------------- layers */

static ta_attention *layer;
static ta_tensor X, KV;

static ta_status op_layer(float *out)
{
    const int64_t so[3] = {2, 70, 64};
    ta_tensor y;
    ta_tensor_from_buffer(&y, out, 3, so, NULL);
    ta_attention_opts o = {.causal = TA_CAUSAL_TOP_LEFT};
    ta_status st = ta_attention_forward(&y, layer, &X, &KV, &KV, &o);
    return st;
}

static void test_layers(void **s)
{
    (void)s;
    const int64_t sx[3] = {2, 70, 64}, skv[3] = {2, 90, 64};
    X = randn(3, sx, 10);
    KV = randn(3, skv, 11);
    const ta_layout layouts[2] = {TA_LAYOUT_SEED, TA_LAYOUT_TORCH};
    for (int l = 0; l < 2; l++) {
        TA_CHECK_OK(ta_attention_create(&layer, layouts[l], 64, 4, 12));
        check_bitwise(l ? "torch layer forward" : "seed layer forward", op_layer, 2 * 70 * 64);
        ta_attention_free(layer);
    }
    ta_tensor_free(&X);
    ta_tensor_free(&KV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),    cmocka_unit_test(test_einsum),
        cmocka_unit_test(test_softmax), cmocka_unit_test(test_sdpa),
        cmocka_unit_test(test_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
