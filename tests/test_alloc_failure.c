/* Allocation failure along every public operation: the tests' allocation hook
 * (alloc_hook.h, installed with ta_set_allocator) fails its n-th call; each operation runs with n = 1, 2, ...
 * until it completes with no failure injected. Every run must return TA_OK or
 * TA_ENOMEM (with a message), never crash, and leave no block allocated through the
 * hook (the operation's own results are freed by the case itself on success). An
 * operation that writes into existing outputs (einsum into out, ta_sdpa, its backward,
 * the layers' forward and backward) must also leave them untouched on TA_ENOMEM: its one
 * scratch block is taken before anything is written.
 * OpenMP and cJSON allocate with malloc, outside the hook: not covered here (the
 * sanitizer and valgrind runs watch those). */
#include "ta_test.h"
#include "alloc_hook.h"
#include "core/workspace.h" /* ta_scratch_cache_release: a block is kept between calls */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path_npy[160], path_st[160], path_layer[160], path_out[160];

/* Runs op with the n-th allocation failing, for n = 1, 2, ... until a run sees no
 * injected failure. Returns the number of allocations of the clean run. */
static long sweep(const char *name, ta_status (*op)(void))
{
    /* The library keeps a scratch block between calls (allocated through the hook):
     * the hook drops it when installed, and it is dropped after each run, so that only
     * blocks the operation itself leaked are counted. */
    long n, calls = 0;
    for (n = 1; n < 100000; n++) {
        ta_test_fail_allocation_at(n);
        ta_status st = op();
        ta_scratch_cache_release();
        const long injected = ta_test_alloc_injected;
        calls = ta_test_alloc_count;
        if (ta_test_alloc_outstanding != 0)
            fail_msg("%s: failing allocation %ld leaked %ld block(s) (status %s)", name, n,
                     ta_test_alloc_outstanding, ta_status_name(st));
        if (st != TA_OK && st != TA_ENOMEM)
            fail_msg("%s: failing allocation %ld gave %s (%s), expected TA_ENOMEM", name, n,
                     ta_status_name(st), ta_last_error());
        if (st == TA_ENOMEM && ta_last_error()[0] == '\0')
            fail_msg("%s: TA_ENOMEM without a message", name);
        if (st == TA_ENOMEM && !injected)
            fail_msg("%s: TA_ENOMEM but no allocation failed: %s", name, ta_last_error());
        if (!injected) {
            if (st != TA_OK) fail_msg("%s: clean run failed: %s", name, ta_last_error());
            break;
        }
    }
    ta_test_stop_counting();
    assert_true(n > 1 || calls == 0); /* each op allocates, so n = 1 did fail */
    print_message("  %s: %ld allocation(s), each made to fail once\n", name, n - 1);
    return calls;
}

/* ---------------------------------------------------------------- operations */

static ta_status op_constructors(void)
{
    const int64_t s[3] = {3, 4, 5};
    ta_tensor a = {0}, b = {0}, c = {0}, d = {0};
    ta_status st = ta_tensor_zeros(&a, 3, s);
    if (!st) st = ta_tensor_ones(&b, 3, s);
    ta_tensor t;
    if (!st) st = ta_tensor_transpose(&t, &b, 0, 2);
    if (!st) st = ta_tensor_contiguous(&c, &t);
    if (!st) st = ta_tensor_full(&d, 0, NULL, 2.0f);
    ta_tensor_free(&a);
    ta_tensor_free(&b);
    ta_tensor_free(&c);
    ta_tensor_free(&d);
    return st;
}

static float abuf[2 * 3 * 17 * 9], bbuf[2 * 3 * 13 * 9];

static ta_status einsum_case(const char *spec, const ta_tensor *a, const ta_tensor *b)
{
    ta_tensor out = {0};
    ta_status st = b ? ta_einsum_alloc(&out, spec, a, b) : ta_einsum1_alloc(&out, spec, a);
    ta_tensor_free(&out);
    return st;
}

/* Into an existing out: the scratch is taken before anything is written, so a failed
 * allocation leaves out untouched. The kept block is dropped before each case so that
 * every case allocates its own. */
static float obuf[2 * 3 * 17 * 13 * 9];

static ta_status einsum_into(const char *spec, const ta_tensor *a, const ta_tensor *b)
{
    int nd;
    int64_t shape[TA_MAX_DIMS], n = 1;
    ta_status st = ta_einsum_shape(&nd, shape, spec, a, b);
    if (st) return st;
    for (int d = 0; d < nd; d++) n *= shape[d];
    assert_true(n <= (int64_t)(sizeof obuf / sizeof obuf[0]));
    ta_tensor out;
    ta_tensor_from_buffer(&out, obuf, nd, shape, NULL);
    for (int64_t i = 0; i < n; i++) obuf[i] = -5.0f;
    ta_scratch_cache_release();
    st = b ? ta_einsum(&out, spec, a, b) : ta_einsum1(&out, spec, a);
    for (int64_t i = 0; st == TA_ENOMEM && i < n; i++)
        if (obuf[i] != -5.0f)
            fail_msg("einsum '%s': TA_ENOMEM but out[%lld] was written", spec, (long long)i);
    return st;
}

/* Every einsum path, each case run through one entry (allocating, or into out). */
static ta_status einsum_cases(ta_status (*run)(const char *, const ta_tensor *, const ta_tensor *))
{
    const int64_t sa[4] = {2, 3, 17, 9}, sb[4] = {2, 3, 13, 9};
    ta_tensor a, b, at, bs;
    ta_tensor_from_buffer(&a, abuf, 4, sa, NULL);
    ta_tensor_from_buffer(&b, bbuf, 4, sb, NULL);
    /* strided views that force the packing paths */
    ta_tensor_transpose(&at, &a, 1, 3);
    ta_tensor_slice(&bs, &b, 2, 0, 13, 2);
    ta_status st = run("bhid,bhjd->bhij", &a, &b);     /* GEMM */
    if (!st) st = run("bdia,bdja->bdij", &at, &at);    /* GEMM on views */
    if (!st) st = run("bhid,bhjd->bhji", &a, &bs);     /* transposed */
    if (!st) st = run("bhid,bhjd->dij", &a, &b);       /* packed */
    if (!st) st = run("bhid,bhjd->bh", &a, &b);        /* pre-reduced */
    if (!st) st = run("bhid,bhjd->bhijd", &a, &b);     /* product */
    if (!st) st = run("bhid->bdi", &at, NULL);         /* one operand */
    if (!st) st = run("bhid->", &a, NULL);
    if (!st) st = run("...d,...d->...", &a, &a);
    return st;
}

static ta_status op_einsum(void) { return einsum_cases(einsum_case); }
static ta_status op_einsum_into(void) { return einsum_cases(einsum_into); }

/* The outputs of a call that may fail: poisoned before it, and on TA_ENOMEM still
 * poisoned after it. */
#define POISON (-5.0f)
static void poison(float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) buf[i] = POISON;
}

static ta_status untouched(ta_status st, const char *what, const float *buf, size_t n)
{
    for (size_t i = 0; st == TA_ENOMEM && i < n; i++)
        if (buf[i] != POISON) fail_msg("%s: TA_ENOMEM but element %zu was written", what, i);
    return st;
}
#define POISON_ALL(buf) poison(buf, sizeof buf / sizeof buf[0])
#define UNTOUCHED(st, what, buf) untouched(st, what, buf, sizeof buf / sizeof buf[0])

static ta_status op_gemm(void)
{
    static float A[96 * 80], Bm[80 * 70], Cm[96 * 70];
    ta_status st = ta_sgemm(Cm, 70, 1, A, 80, 1, Bm, 70, 1, 96, 70, 80, 1.0f, 0.0f);
    if (!st) st = ta_sgemm(Cm, 1, 96, A, 1, 96, Bm, 70, 1, 96, 70, 80, 1.0f, 0.5f);
    return st;
}

enum { B = 2, H = 4, HKV = 2, LQ = 7, LK = 11, D = 8, DV = 5 };
static float qb[B * H * LQ * D], kb[B * HKV * LK * D], vb[B * HKV * LK * DV];
static float ob[B * H * LQ * DV], wb[B * H * LQ * LK], lb[B * H * LQ], mb[LQ * LK];
static ta_tensor Q, K, V, O, W, LSE, M;
static ta_sdpa_path sdpa_path = TA_SDPA_REFERENCE;

/* One ta_sdpa call with O, the weights and the LSE poisoned before it, and no kept
 * scratch block (so that each call allocates, and each allocation is made to fail). */
static ta_status sdpa_call(const ta_sdpa_opts *o)
{
    ta_scratch_cache_release();
    POISON_ALL(ob);
    POISON_ALL(wb);
    POISON_ALL(lb);
    ta_status st = ta_sdpa(&O, &Q, &K, &V, o);
    UNTOUCHED(st, "ta_sdpa O", ob);
    UNTOUCHED(st, "ta_sdpa weights", wb);
    return UNTOUCHED(st, "ta_sdpa LSE", lb);
}

static ta_status op_sdpa(void)
{
    int64_t klen[B] = {11, 4};
    ta_sdpa_opts o = {.path = sdpa_path, .causal = TA_CAUSAL_BOTTOM_RIGHT, .lse = &LSE};
    ta_status st = sdpa_call(&o);
    ta_sdpa_opts o2 = {.path = sdpa_path, .mask = &M, .mask_mode = TA_MASK_ADDITIVE,
                       .key_lengths = klen};
    if (!st) st = sdpa_call(&o2);
    if (!st && sdpa_path == TA_SDPA_REFERENCE) {
        ta_sdpa_opts o3 = {.path = sdpa_path, .weights = &W, .lse = &LSE};
        st = sdpa_call(&o3);
    }
    return st;
}

/* The gradients (written while this test was: covered once they landed). */
static float dqb[B * H * LQ * D], dkb[B * HKV * LK * D], dvb[B * HKV * LK * DV];
static ta_status op_sdpa_backward(void)
{
    const int64_t sq[4] = {B, H, LQ, D}, sk[4] = {B, HKV, LK, D}, sv[4] = {B, HKV, LK, DV};
    ta_tensor dQ, dK, dV;
    ta_tensor_from_buffer(&dQ, dqb, 4, sq, NULL);
    ta_tensor_from_buffer(&dK, dkb, 4, sk, NULL);
    ta_tensor_from_buffer(&dV, dvb, 4, sv, NULL);
    int64_t klen[B] = {11, 4};
    ta_sdpa_opts o = {.path = sdpa_path, .causal = TA_CAUSAL_BOTTOM_RIGHT, .key_lengths = klen};
    POISON_ALL(dqb);
    POISON_ALL(dkb);
    POISON_ALL(dvb);
    /* dO = O: any tensor of O's shape will do */
    ta_status st = ta_sdpa_backward(&dQ, &dK, &dV, &O, &Q, &K, &V, &O, &LSE, &o);
    UNTOUCHED(st, "ta_sdpa_backward dQ", dqb);
    UNTOUCHED(st, "ta_sdpa_backward dK", dkb);
    return UNTOUCHED(st, "ta_sdpa_backward dV", dvb);
}

static ta_status op_npy(void)
{
    ta_status st = ta_npy_save(path_out, &Q);
    ta_tensor t = {0};
    if (!st) st = ta_npy_load(&t, path_npy);
    ta_tensor_free(&t);
    int64_t *v = NULL;
    int nd;
    int64_t shape[TA_MAX_DIMS];
    if (!st) { /* a float32 file: TA_EUNSUPPORTED is this call's right answer */
        st = ta_npy_load_int64(&v, &nd, shape, path_out);
        if (st == TA_EUNSUPPORTED && !strstr(ta_last_error(), "unsupported dtype '<f4'"))
            fail_msg("ta_npy_load_int64 of a float32 file: %s", ta_last_error());
        if (st != TA_EUNSUPPORTED && st != TA_ENOMEM)
            fail_msg("ta_npy_load_int64 of a float32 file gave %s (%s), expected "
                     "TA_EUNSUPPORTED or TA_ENOMEM", ta_status_name(st), ta_last_error());
        if (st == TA_EUNSUPPORTED) st = TA_OK;
    }
    ta_npy_free(v);
    return st;
}

static ta_status op_safetensors(void)
{
    const char *names[3] = {"q", "k", "v"};
    const ta_tensor *ts[3] = {&Q, &K, &V};
    ta_status st = ta_safetensors_save(path_out, 3, names, ts);
    ta_safetensors *sf = NULL;
    if (!st) st = ta_safetensors_open(&sf, path_st);
    ta_tensor t = {0};
    if (!st) st = ta_safetensors_get(&t, sf, "k");
    ta_tensor_free(&t);
    ta_safetensors_free(sf);
    return st;
}

/* Every parameter gradient of l is still 0 (nothing accumulated). */
static ta_status grads_untouched(ta_status st, const ta_attention *l)
{
    for (int i = 0; st == TA_ENOMEM && i < ta_attention_param_count(l); i++) {
        ta_tensor g;
        TA_CHECK_OK(ta_attention_grad(&g, l, ta_attention_param_name(l, i)));
        for (int64_t j = 0; j < ta_tensor_numel(&g); j++)
            if (((float *)g.data)[j] != 0.0f)
                fail_msg("ta_attention_backward: TA_ENOMEM but %s was accumulated",
                         ta_attention_param_name(l, i));
    }
    return st;
}

static ta_status layer_case(ta_layout layout)
{
    ta_attention *l = NULL;
    ta_status st = ta_attention_create(&l, layout, 8, 2, 3);
    const int64_t xs[3] = {2, 7, 8}, ks[3] = {2, 11, 8}, kpm_s[2] = {2, 11}, ws[4] = {2, 2, 7, 11};
    float xb[2 * 7 * 8], kvb[2 * 11 * 8], yb[2 * 7 * 8], kpmb[2 * 11], wgt[2 * 2 * 7 * 11];
    float dxb[2 * 7 * 8];
    for (int i = 0; i < 2 * 7 * 8; i++) xb[i] = (float)(i % 13) * 0.1f;
    for (int i = 0; i < 2 * 11 * 8; i++) kvb[i] = (float)(i % 7) * 0.2f - 0.5f;
    for (int i = 0; i < 2 * 11; i++) kpmb[i] = i % 11 < 9;
    ta_tensor x, kv, y, kpm;
    ta_tensor_from_buffer(&x, xb, 3, xs, NULL);
    ta_tensor_from_buffer(&kv, kvb, 3, ks, NULL);
    ta_tensor_from_buffer(&y, yb, 3, xs, NULL);
    ta_tensor_from_buffer(&kpm, kpmb, 2, kpm_s, NULL);
    ta_tensor w, dx;
    ta_tensor_from_buffer(&w, wgt, 4, ws, NULL);
    ta_tensor_from_buffer(&dx, dxb, 3, xs, NULL);
    ta_attention_opts o = {.causal = TA_CAUSAL_TOP_LEFT, .key_padding_mask = &kpm};
    ta_attention_opts ow = {.key_padding_mask = &kpm, .weights = &w};
    if (!st) {
        POISON_ALL(yb);
        st = UNTOUCHED(ta_attention_forward(&y, l, &x, &x, &x, NULL), "layer forward out", yb);
    }
    if (!st) {
        POISON_ALL(yb);
        st = UNTOUCHED(ta_attention_forward(&y, l, &x, &kv, &kv, &o), "layer forward out", yb);
    }
    if (!st) { /* the reference path, for the weights */
        POISON_ALL(yb);
        POISON_ALL(wgt);
        st = ta_attention_forward(&y, l, &x, &kv, &kv, &ow);
        UNTOUCHED(st, "layer forward out", yb);
        UNTOUCHED(st, "layer forward weights", wgt);
    }
    if (!st) { /* dL/dy = y: nothing accumulates on failure */
        POISON_ALL(dxb);
        st = ta_attention_backward(&dx, NULL, NULL, l, &y, &x, &kv, &kv, &o);
        UNTOUCHED(st, "layer backward d_queries", dxb);
        st = grads_untouched(st, l);
    }
    if (!st) st = ta_attention_save(path_out, l);
    ta_attention_free(l);
    return st;
}

static ta_status op_layer_seed(void) { return layer_case(TA_LAYOUT_SEED); }
static ta_status op_layer_torch(void) { return layer_case(TA_LAYOUT_TORCH); }

static ta_status op_layer_load(void)
{
    ta_attention *l = NULL;
    ta_status st = ta_attention_load(&l, path_layer, TA_LAYOUT_TORCH, 2);
    ta_attention_free(l);
    return st;
}

/* ---------------------------------------------------------------- tests */

static int setup(void **state)
{
    (void)state;
    if (ta_test_make_dir("ta_allocfail")) return 1;
    snprintf(path_npy, sizeof path_npy, "%s", ta_test_path("q.npy"));
    snprintf(path_st, sizeof path_st, "%s", ta_test_path("qkv.safetensors"));
    snprintf(path_layer, sizeof path_layer, "%s", ta_test_path("layer.safetensors"));
    snprintf(path_out, sizeof path_out, "%s", ta_test_path("out.bin"));
    const int64_t sq[4] = {B, H, LQ, D}, sk[4] = {B, HKV, LK, D}, sv[4] = {B, HKV, LK, DV};
    const int64_t so[4] = {B, H, LQ, DV}, sw[4] = {B, H, LQ, LK}, sm[2] = {LQ, LK};
    ta_tensor_from_buffer(&Q, qb, 4, sq, NULL);
    ta_tensor_from_buffer(&K, kb, 4, sk, NULL);
    ta_tensor_from_buffer(&V, vb, 4, sv, NULL);
    ta_tensor_from_buffer(&O, ob, 4, so, NULL);
    ta_tensor_from_buffer(&W, wb, 4, sw, NULL);
    ta_tensor_from_buffer(&LSE, lb, 3, sw, NULL);
    ta_tensor_from_buffer(&M, mb, 2, sm, NULL);
    ta_randn(&Q, 1);
    ta_randn(&K, 2);
    ta_randn(&V, 3);
    ta_randn(&M, 4);
    const int64_t sa[1] = {(int64_t)(sizeof abuf / sizeof abuf[0])};
    const int64_t sb[1] = {(int64_t)(sizeof bbuf / sizeof bbuf[0])};
    ta_tensor a, b;
    ta_tensor_from_buffer(&a, abuf, 1, sa, NULL);
    ta_tensor_from_buffer(&b, bbuf, 1, sb, NULL);
    ta_randn(&a, 5);
    ta_randn(&b, 6);
    if (ta_npy_save(path_npy, &Q)) return 1;
    const char *names[3] = {"q", "k", "v"};
    const ta_tensor *ts[3] = {&Q, &K, &V};
    if (ta_safetensors_save(path_st, 3, names, ts)) return 1;
    ta_attention *l = NULL;
    if (ta_attention_create(&l, TA_LAYOUT_TORCH, 8, 2, 1)) return 1;
    ta_status st = ta_attention_save(path_layer, l);
    ta_attention_free(l);
    return st != TA_OK;
}

static void test_constructors(void **s) { (void)s; sweep("constructors", op_constructors); }
static void test_einsum(void **s) { (void)s; sweep("einsum", op_einsum); }
static void test_einsum_into(void **s) { (void)s; sweep("einsum into out", op_einsum_into); }
static void test_gemm(void **s) { (void)s; sweep("sgemm", op_gemm); }
static void test_npy(void **s) { (void)s; sweep("npy save/load", op_npy); }
static void test_safetensors(void **s) { (void)s; sweep("safetensors save/open/get", op_safetensors); }
static void test_layer_seed(void **s) { (void)s; sweep("seed layer create/forward/backward/save", op_layer_seed); }
static void test_layer_torch(void **s) { (void)s; sweep("torch layer create/forward/backward/save", op_layer_torch); }
static void test_layer_load(void **s) { (void)s; sweep("layer load", op_layer_load); }

static void test_sdpa_reference(void **s)
{
    (void)s;
    sdpa_path = TA_SDPA_REFERENCE;
    sweep("ta_sdpa reference", op_sdpa);
}

static void test_sdpa_backward(void **s)
{
    (void)s;
    /* the forward's O and LSE, with the same options */
    int64_t klen[B] = {11, 4};
    ta_sdpa_opts f = {.path = TA_SDPA_REFERENCE, .causal = TA_CAUSAL_BOTTOM_RIGHT,
                      .key_lengths = klen, .lse = &LSE};
    TA_CHECK_OK(ta_sdpa(&O, &Q, &K, &V, &f));
    sdpa_path = TA_SDPA_REFERENCE;
    sweep("ta_sdpa_backward reference", op_sdpa_backward);
    sdpa_path = TA_SDPA_AUTO;
    sweep("ta_sdpa_backward auto", op_sdpa_backward);
}

static void test_sdpa_fused(void **s)
{
    (void)s;
    sdpa_path = TA_SDPA_FUSED;
    sweep("ta_sdpa fused", op_sdpa);
    sdpa_path = TA_SDPA_AUTO;
    sweep("ta_sdpa auto", op_sdpa);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constructors), cmocka_unit_test(test_einsum),
        cmocka_unit_test(test_einsum_into),
        cmocka_unit_test(test_gemm),         cmocka_unit_test(test_sdpa_reference),
        cmocka_unit_test(test_sdpa_fused),   cmocka_unit_test(test_sdpa_backward),
        cmocka_unit_test(test_npy),
        cmocka_unit_test(test_safetensors),  cmocka_unit_test(test_layer_seed),
        cmocka_unit_test(test_layer_torch),  cmocka_unit_test(test_layer_load),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
