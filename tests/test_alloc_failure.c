/* Allocation failure along every public operation: the tests' allocation hook
 * (alloc_hook.h, installed with ta_set_allocator) fails its n-th call; each operation runs with n = 1, 2, ...
 * until it completes with no failure injected. Every run must return TA_OK or
 * TA_ENOMEM (with a message), never crash, and leave no block allocated through the
 * hook (the operation's own results are freed by the case itself on success). An
 * operation that writes into existing outputs (einsum into out, ta_sdpa and its backward
 * in every dtype, variant and path, varlen or not, ta_sdpa_kvcache, the layers' forward
 * and backward, an optimiser step) must also leave them untouched on TA_ENOMEM, a KV
 * cache's every byte included: its one scratch block is taken before anything is
 * written. For those (sweep_checked) a run without the hook first records the bits of
 * every call that returns TA_OK, and each run of the sweep must give the same bits.
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

/* The bits of the calls of one run that returned TA_OK (see watched_untouched). */
enum { MAX_OK = 64 };
static uint64_t ok_hash[MAX_OK];
static int ok_count, ok_recorded, ok_recording;

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
        ok_count = 0;
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

/* ------------------------------------------- byte snapshots, for any dtype */

/* What a call may write: its outputs (filled with a byte pattern first) and what it
 * updates in place (a KV cache: its bytes as they were). On TA_ENOMEM each must still
 * hold the bytes it held before the call. The copies are malloc'd, outside the hook. */
enum { MAX_WATCH = 8 };
static struct watched {
    const char *name;
    const unsigned char *p;
    size_t n;
    unsigned char *copy;
} watch[MAX_WATCH];
static int nwatch;

static size_t tensor_bytes(const ta_tensor *t) /* contiguous tensors only */
{
    return (size_t)ta_tensor_numel(t) * ta_dtype_size(t->dtype);
}

static void watch_bytes(const char *name, void *p, size_t n, int fill)
{
    assert_true(nwatch < MAX_WATCH);
    if (fill) memset(p, 0xA7, n);
    struct watched *w = &watch[nwatch++];
    *w = (struct watched){name, p, n, malloc(n ? n : 1)};
    assert_non_null(w->copy);
    memcpy(w->copy, p, n);
}

static void watch_output(const char *name, const ta_tensor *t)
{
    if (t) watch_bytes(name, t->data, tensor_bytes(t), 1);
}

static void watch_inplace(const char *name, const ta_tensor *t)
{
    watch_bytes(name, t->data, tensor_bytes(t), 0);
}

/* The watched bytes after each call that returned TA_OK, hashed (FNV-1a), in call order:
 * recorded by a run of the op without the hook (sweep_checked), then compared in every
 * run of the sweep, so that a call that returns TA_OK after an earlier call of the same
 * run failed (or on a fresh scratch block) must give the same bits. */

static uint64_t watched_hash(void)
{
    uint64_t h = 1469598103934665603u;
    for (int i = 0; i < nwatch; i++)
        for (size_t j = 0; j < watch[i].n; j++) h = (h ^ watch[i].p[j]) * 1099511628211u;
    return h;
}

/* Compares and forgets every watched buffer; st passes through. */
static ta_status watched_untouched(ta_status st, const char *what)
{
    const char *bad = NULL;
    size_t at = 0;
    int differs = 0;
    if (st == TA_OK && ok_count < MAX_OK) {
        const uint64_t h = watched_hash();
        if (ok_recording) ok_hash[ok_count] = h;
        else differs = ok_count < ok_recorded && ok_hash[ok_count] != h;
        ok_count++;
    }
    for (int i = 0; i < nwatch; i++) {
        const struct watched *w = &watch[i];
        for (size_t j = 0; st == TA_ENOMEM && !bad && j < w->n; j++)
            if (w->p[j] != w->copy[j]) bad = w->name, at = j;
        free(w->copy);
    }
    nwatch = 0;
    if (bad) fail_msg("%s: TA_ENOMEM but %s was written (byte %zu)", what, bad, at);
    if (differs)
        fail_msg("%s (TA_OK call %d of the run): its outputs differ from a run without the "
                 "hook", what, ok_count);
    return st;
}

/* sweep, after a run of op without the hook that records the bits of its TA_OK calls. */
static void sweep_checked(const char *name, ta_status (*op)(void))
{
    ok_recording = 1;
    ok_count = 0;
    ta_status st = op();
    ok_recording = 0;
    if (st) fail_msg("%s: the run without the hook failed: %s", name, ta_last_error());
    ok_recorded = ok_count;
    sweep(name, op);
    ok_recorded = 0;
}

/* A new contiguous tensor of dtype dt: N(0, 1) values from seed, or zeros (seed 0). */
static void make_tensor(ta_tensor *t, ta_dtype dt, int nd, const int64_t *s, uint64_t seed)
{
    TA_CHECK_OK(ta_tensor_zeros_dtype(t, dt, nd, s));
    if (seed) TA_CHECK_OK(ta_randn(t, seed));
}

/* The variants of current models, all at once (window, softcap, ALiBi, sinks). */
static float sink_b[H], dsink_b[H], slope_b[B * H];
static ta_tensor SINKS, DSINKS, SLOPES_H, SLOPES_BH;

static void variants_make(void)
{
    const int64_t sh[1] = {H}, sbh[2] = {B, H};
    ta_tensor_from_buffer(&SINKS, sink_b, 1, sh, NULL);
    ta_tensor_from_buffer(&DSINKS, dsink_b, 1, sh, NULL);
    ta_tensor_from_buffer(&SLOPES_H, slope_b, 1, sh, NULL);
    ta_tensor_from_buffer(&SLOPES_BH, slope_b, 2, sbh, NULL);
    for (int i = 0; i < H; i++) sink_b[i] = 0.5f * (float)i - 0.7f;
    for (int i = 0; i < B * H; i++) slope_b[i] = 0.25f / (float)(1 + i);
}

/* opts for variant set v (0: plain causal, 1: every variant) on path, with lse. */
static ta_sdpa_opts variant_opts(int v, ta_sdpa_path path, ta_tensor *lse, const ta_tensor *slopes)
{
    ta_sdpa_opts o = {.path = path, .causal = TA_CAUSAL_BOTTOM_RIGHT, .lse = lse};
    if (v) {
        o.causal = TA_CAUSAL_NONE;
        o.has_window = 1;
        o.window_left = 3;
        o.window_right = 2;
        o.softcap = 5.0f;
        o.alibi_slopes = slopes;
        o.sinks = &SINKS;
    }
    return o;
}

/* ------------------------------------------- ta_sdpa and backward, any dtype */

/* A dense problem [B, H, LQ, D] as above, each tensor in its own dtype. */
typedef struct dense {
    ta_tensor q, k, v, o, dout, dq, dk, dv, lse;
} dense;
static dense dn;

/* dtypes of q, k, v, o, dout, dq, dk, dv */
static void dense_make(dense *d, const ta_dtype dt[8])
{
    const int64_t sq[4] = {B, H, LQ, D}, sk[4] = {B, HKV, LK, D}, sv[4] = {B, HKV, LK, DV};
    const int64_t so[4] = {B, H, LQ, DV}, sl[3] = {B, H, LQ};
    make_tensor(&d->q, dt[0], 4, sq, 11);
    make_tensor(&d->k, dt[1], 4, sk, 12);
    make_tensor(&d->v, dt[2], 4, sv, 13);
    make_tensor(&d->o, dt[3], 4, so, 0);
    make_tensor(&d->dout, dt[4], 4, so, 14);
    make_tensor(&d->dq, dt[5], 4, sq, 0);
    make_tensor(&d->dk, dt[6], 4, sk, 0);
    make_tensor(&d->dv, dt[7], 4, sv, 0);
    make_tensor(&d->lse, TA_F32, 3, sl, 0);
}

static void dense_free(dense *d)
{
    ta_tensor *t[] = {&d->q, &d->k, &d->v, &d->o, &d->dout, &d->dq, &d->dk, &d->dv, &d->lse};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) ta_tensor_free(t[i]);
}

/* One forward with its outputs watched (the kept block dropped: every call allocates). */
static ta_status dense_forward(const ta_sdpa_opts *o)
{
    ta_scratch_cache_release();
    watch_output("O", &dn.o);
    watch_output("opts->lse", o->lse);
    watch_output("opts->weights", o->weights);
    return watched_untouched(ta_sdpa(&dn.o, &dn.q, &dn.k, &dn.v, o), "ta_sdpa");
}

static ta_status op_sdpa_dtypes(void)
{
    ta_status st = TA_OK;
    for (int path = 0; path < 2; path++)
        for (int v = 0; !st && v < 2; v++) {
            ta_sdpa_opts o = variant_opts(v, path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE, &dn.lse,
                                          &SLOPES_BH);
            if (!path && !v) o.weights = &W;
            st = dense_forward(&o);
        }
    return st;
}

/* The forward (O, LSE) then the backward with the same options, its gradients (and
 * dsinks) watched. */
static ta_sdpa_path bwd_path = TA_SDPA_FUSED;

/* The backward of t with the forward's options o (its LSE as the argument; variant set v
 * adds dsinks), every gradient watched. */
static ta_status backward_watched(dense *t, ta_sdpa_opts o, int v, const char *what)
{
    o.lse = NULL;
    if (v) o.dsinks = &DSINKS;
    ta_scratch_cache_release();
    watch_output("dQ", &t->dq);
    watch_output("dK", &t->dk);
    watch_output("dV", &t->dv);
    watch_output("opts->dsinks", o.dsinks);
    return watched_untouched(ta_sdpa_backward(&t->dq, &t->dk, &t->dv, &t->dout, &t->q, &t->k,
                                              &t->v, &t->o, &t->lse, &o),
                             what);
}

static ta_status op_sdpa_backward_dtypes(void)
{
    ta_status st = TA_OK;
    for (int v = 0; !st && v < 2; v++) {
        ta_sdpa_opts o = variant_opts(v, bwd_path, &dn.lse, &SLOPES_BH);
        st = ta_sdpa(&dn.o, &dn.q, &dn.k, &dn.v, &o);
        if (st) break;
        st = backward_watched(&dn, o, v, "ta_sdpa_backward");
    }
    return st;
}

static const struct dtype_set {
    const char *name;
    ta_dtype dt[8]; /* q, k, v, o, dout, dq, dk, dv */
} dtype_sets[] = {
    {"f32", {TA_F32, TA_F32, TA_F32, TA_F32, TA_F32, TA_F32, TA_F32, TA_F32}},
    {"f16", {TA_F16, TA_F16, TA_F16, TA_F16, TA_F16, TA_F16, TA_F16, TA_F16}},
    {"bf16", {TA_BF16, TA_BF16, TA_BF16, TA_BF16, TA_BF16, TA_BF16, TA_BF16, TA_BF16}},
    {"mixed", {TA_BF16, TA_F16, TA_F32, TA_F16, TA_BF16, TA_F32, TA_BF16, TA_F16}},
};

static void test_sdpa_dtypes(void **s)
{
    (void)s;
    char name[96];
    variants_make();
    for (size_t i = 1; i < sizeof dtype_sets / sizeof *dtype_sets; i++) {
        dense_make(&dn, dtype_sets[i].dt);
        snprintf(name, sizeof name, "ta_sdpa %s reference and fused, variants", dtype_sets[i].name);
        sweep_checked(name, op_sdpa_dtypes);
        dense_free(&dn);
    }
}

static void test_sdpa_backward_variants(void **s)
{
    (void)s;
    char name[96];
    variants_make();
    for (size_t i = 0; i < sizeof dtype_sets / sizeof *dtype_sets; i++) {
        dense_make(&dn, dtype_sets[i].dt);
        for (int path = 0; path < 2; path++) {
            bwd_path = path ? TA_SDPA_REFERENCE : TA_SDPA_FUSED;
            snprintf(name, sizeof name, "ta_sdpa_backward %s %s, variants", dtype_sets[i].name,
                     path ? "reference" : "fused");
            sweep_checked(name, op_sdpa_backward_dtypes);
        }
        dense_free(&dn);
    }
}

/* ------------------------------------------------- variable-length batches */

/* Three sequences, the middle one with no query: Tq = 7, Tk = 11; and a batch whose first
 * sequence has 1100 keys for 2 queries, which the fused forward splits into key chunks
 * (such a sequence runs alone, after the others' parallel region). */
enum { NSEQ = 3 };
static const struct varlen_case {
    const char *name;
    int32_t cu_q[NSEQ + 1], cu_k[NSEQ + 1];
} varlen_cases[2] = {
    {"", {0, 3, 3, 7}, {0, 5, 6, 11}},
    {" long keys", {0, 2, 2, 7}, {0, 1100, 1101, 1106}},
};
static const struct varlen_case *vc;
static dense pk; /* packed: q [Tq, H, D], lse [H, Tq]... */
static ta_sdpa_path varlen_path;

static void packed_make(dense *d, ta_dtype dt, int64_t tq, int64_t tk)
{
    const int64_t sq[3] = {tq, H, D}, sk[3] = {tk, HKV, D}, sv[3] = {tk, HKV, DV};
    const int64_t so[3] = {tq, H, DV}, sl[2] = {H, tq};
    make_tensor(&d->q, dt, 3, sq, 21);
    make_tensor(&d->k, dt, 3, sk, 22);
    make_tensor(&d->v, dt, 3, sv, 23);
    make_tensor(&d->o, dt, 3, so, 0);
    make_tensor(&d->dout, dt, 3, so, 24);
    make_tensor(&d->dq, dt, 3, sq, 0);
    make_tensor(&d->dk, dt, 3, sk, 0);
    make_tensor(&d->dv, dt, 3, sv, 0);
    make_tensor(&d->lse, TA_F32, 2, sl, 0);
}

/* Forward then backward (each variant set), outputs watched. */
static ta_status op_sdpa_varlen(void)
{
    /* ALiBi slopes [num_seqs, H] */
    static float slopes_b[NSEQ * H];
    const int64_t ss[2] = {NSEQ, H};
    ta_tensor slopes;
    ta_tensor_from_buffer(&slopes, slopes_b, 2, ss, NULL);
    for (int i = 0; i < NSEQ * H; i++) slopes_b[i] = 0.125f * (float)(i % 5 + 1);
    ta_status st = TA_OK;
    for (int v = 0; !st && v < 2; v++) {
        ta_sdpa_opts o = variant_opts(v, varlen_path, &pk.lse, &slopes);
        o.cu_seqlens_q = vc->cu_q;
        o.cu_seqlens_k = vc->cu_k;
        o.num_seqs = NSEQ;
        ta_scratch_cache_release();
        watch_output("O", &pk.o);
        watch_output("opts->lse", &pk.lse);
        st = watched_untouched(ta_sdpa(&pk.o, &pk.q, &pk.k, &pk.v, &o), "ta_sdpa varlen");
        if (st) break;
        st = backward_watched(&pk, o, v, "ta_sdpa_backward varlen");
    }
    return st;
}

static void test_sdpa_varlen(void **s)
{
    (void)s;
    char name[96];
    variants_make();
    const ta_dtype dts[3] = {TA_F32, TA_F16, TA_BF16};
    for (int c = 0; c < 2; c++) {
        vc = &varlen_cases[c];
        for (int i = 0; i < (c ? 2 : 3); i++) {
            packed_make(&pk, dts[i], vc->cu_q[NSEQ], vc->cu_k[NSEQ]);
            for (int path = 0; path < 3; path++) {
                varlen_path = path == 0   ? TA_SDPA_FUSED
                              : path == 1 ? TA_SDPA_REFERENCE
                                          : TA_SDPA_AUTO;
                snprintf(name, sizeof name, "varlen%s forward/backward %s %s", vc->name,
                         ta_dtype_name(dts[i]),
                         path == 0 ? "fused" : path == 1 ? "reference" : "auto");
                sweep_checked(name, op_sdpa_varlen);
            }
            dense_free(&pk);
        }
    }
}

/* ---------------------------------------------------------------- KV cache */

/* A cache of two sequences holding seqlens {5, 9} keys (capacity 12: contiguous
 * [2, 12, HKV, X] or paged [7, 4, HKV, X] in shuffled blocks, -1 past the used ones),
 * LNEW keys appended; a decode case (LQ 1) of 1100 keys splits the keys into chunks. */
enum { LNEW = 2 };
typedef struct kvset {
    ta_tensor kc, vc, kc0, vc0; /* the cache and its bytes before any call */
    ta_tensor q, kn, vn, o, lse;
    int32_t seqlens[B], table[B * 3];
    ta_kv_cache cache;
} kvset;
static kvset kv;
static ta_sdpa_path kv_path;

/* cache of dtype ct (paged or not, capacity cap), q/o of qt, k_new/v_new of nt, Lq lq. */
static void kv_make(kvset *c, int paged, int64_t cap, int64_t lq, ta_dtype ct, ta_dtype qt,
                    ta_dtype ot, ta_dtype nt, const int32_t seqlens[B])
{
    *c = (kvset){0};
    const int32_t table[B * 3] = {5, 1, 3, 0, 6, 2};
    memcpy(c->table, table, sizeof table);
    memcpy(c->seqlens, seqlens, sizeof c->seqlens);
    if (paged) c->table[2] = -1; /* sequence 0 uses 2 blocks: 5 + 2 keys */
    const int64_t l0 = paged ? 7 : B, l1 = paged ? 4 : cap;
    const int64_t ks[4] = {l0, l1, HKV, D}, vs[4] = {l0, l1, HKV, DV};
    make_tensor(&c->kc0, ct, 4, ks, 31);
    make_tensor(&c->vc0, ct, 4, vs, 32);
    make_tensor(&c->kc, ct, 4, ks, 0);
    make_tensor(&c->vc, ct, 4, vs, 0);
    const int64_t qs[4] = {B, lq, H, D}, os[4] = {B, lq, H, DV}, ls[3] = {B, H, lq};
    const int64_t ns[4] = {B, LNEW, HKV, D}, nvs[4] = {B, LNEW, HKV, DV};
    make_tensor(&c->q, qt, 4, qs, 33);
    make_tensor(&c->o, ot, 4, os, 0);
    make_tensor(&c->lse, TA_F32, 3, ls, 0);
    make_tensor(&c->kn, nt, 4, ns, 34);
    make_tensor(&c->vn, nt == TA_F32 ? TA_F16 : TA_F32, 4, nvs, 35);
    c->cache = (ta_kv_cache){.k = &c->kc, .v = &c->vc, .seqlens = c->seqlens,
                             .block_table = paged ? c->table : NULL, .max_blocks = 3};
}

static void kv_free(kvset *c)
{
    ta_tensor *t[] = {&c->kc, &c->vc, &c->kc0, &c->vc0, &c->q, &c->kn, &c->vn, &c->o, &c->lse};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) ta_tensor_free(t[i]);
}

/* Each variant set, with and without k_new / v_new, from the cache's first state: on
 * TA_ENOMEM the cache (every byte), O and LSE are as they were. */
static ta_status op_kvcache(void)
{
    ta_status st = TA_OK;
    for (int v = 0; !st && v < 2; v++)
        for (int append = 1; !st && append >= 0; append--) {
            ta_sdpa_opts o = variant_opts(v, kv_path, &kv.lse, &SLOPES_BH);
            TA_CHECK_OK(ta_tensor_copy(&kv.kc, &kv.kc0));
            TA_CHECK_OK(ta_tensor_copy(&kv.vc, &kv.vc0));
            ta_scratch_cache_release();
            watch_inplace("cache->k", &kv.kc);
            watch_inplace("cache->v", &kv.vc);
            watch_output("O", &kv.o);
            watch_output("opts->lse", &kv.lse);
            st = ta_sdpa_kvcache(&kv.o, &kv.q, &kv.cache, append ? &kv.kn : NULL,
                                 append ? &kv.vn : NULL, &o);
            st = watched_untouched(st, "ta_sdpa_kvcache");
        }
    return st;
}

static void test_kvcache(void **s)
{
    (void)s;
    variants_make();
    static const struct kv_case {
        const char *name;
        int paged;
        int64_t cap, lq;
        ta_dtype ct, qt, ot, nt;
        int32_t seqlens[B];
    } cases[] = {
        {"contiguous f32", 0, 12, 3, TA_F32, TA_F32, TA_F32, TA_F32, {5, 9}},
        {"paged f32", 1, 12, 3, TA_F32, TA_F32, TA_F32, TA_F32, {5, 9}},
        {"contiguous f16", 0, 12, 3, TA_F16, TA_F16, TA_BF16, TA_F32, {5, 9}},
        {"paged bf16", 1, 12, 3, TA_BF16, TA_BF16, TA_F32, TA_F16, {5, 9}},
        {"contiguous f16 decode, split keys", 0, 1100, 1, TA_F16, TA_F32, TA_F16, TA_F16,
         {1050, 700}},
    };
    char name[128];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct kv_case *c = &cases[i];
        kv_make(&kv, c->paged, c->cap, c->lq, c->ct, c->qt, c->ot, c->nt, c->seqlens);
        for (int path = 0; path < 2; path++) {
            kv_path = path ? TA_SDPA_REFERENCE : TA_SDPA_AUTO;
            snprintf(name, sizeof name, "ta_sdpa_kvcache %s %s", c->name,
                     path ? "reference" : "auto");
            sweep_checked(name, op_kvcache);
        }
        kv_free(&kv);
    }
}

/* ------------------------------------------------------- optimisers, dtypes */

/* SGD with momentum and AdamW: create, then two steps (the first allocates the state);
 * on TA_ENOMEM the parameters are untouched. */
static ta_status optim_case(int adamw)
{
    static float p_b[2][3 * 5], g_b[2][3 * 5];
    const int64_t s0[2] = {3, 5}, s1[1] = {7};
    ta_tensor p[2], g[2];
    ta_tensor_from_buffer(&p[0], p_b[0], 2, s0, NULL);
    ta_tensor_from_buffer(&p[1], p_b[1], 1, s1, NULL);
    ta_tensor_from_buffer(&g[0], g_b[0], 2, s0, NULL);
    ta_tensor_from_buffer(&g[1], g_b[1], 1, s1, NULL);
    for (int i = 0; i < 15; i++) {
        p_b[0][i] = p_b[1][i] = 0.1f * (float)i;
        g_b[0][i] = g_b[1][i] = 0.3f - 0.05f * (float)i;
    }
    ta_tensor *pp[2] = {&p[0], &p[1]};
    const ta_tensor *gp[2] = {&g[0], &g[1]};
    ta_optimizer *opt = NULL;
    const ta_sgd_opts so = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    ta_status st = adamw ? ta_optimizer_adamw(&opt, NULL) : ta_optimizer_sgd(&opt, &so);
    for (int step = 0; !st && step < 2; step++) {
        watch_inplace("params[0]", &p[0]);
        watch_inplace("params[1]", &p[1]);
        st = watched_untouched(ta_optimizer_step(opt, 2, pp, gp), "ta_optimizer_step");
        if (st == TA_ENOMEM && ta_optimizer_steps(opt) != 0)
            fail_msg("ta_optimizer_step: TA_ENOMEM but the step was counted");
    }
    ta_optimizer_free(opt);
    return st;
}

static ta_status op_optim_sgd(void) { return optim_case(0); }
static ta_status op_optim_adamw(void) { return optim_case(1); }

/* The constructors and readers in other dtypes, and an integer .npy file. */
static char path_int[160];

static ta_status op_dtypes_io(void)
{
    const int64_t s[3] = {3, 4, 5};
    ta_tensor a = {0}, b = {0}, c = {0}, d = {0}, e = {0}, f = {0}, g = {0}, h = {0};
    ta_status st = ta_tensor_zeros_dtype(&a, TA_F16, 3, s);
    if (!st) st = ta_tensor_empty_dtype(&g, TA_BF16, 3, s);
    ta_tensor_free(&g);
    if (!st) st = ta_tensor_zeros_dtype(&b, TA_BF16, 3, s);
    if (!st) st = ta_tensor_contiguous(&c, &b);
    if (!st) st = ta_npy_load_dtype(&d, path_npy, TA_BF16);
    if (!st) st = ta_npy_save(path_out, &a);
    if (!st) st = ta_npy_load(&g, path_out); /* '<f2' widened */
    ta_safetensors *sf = NULL;
    if (!st) st = ta_safetensors_open(&sf, path_st);
    if (!st) st = ta_safetensors_get_dtype(&e, sf, "v", TA_F16);
    ta_safetensors_free(sf);
    sf = NULL;
    const char *names[2] = {"a", "b"};
    const ta_tensor *ts[2] = {&a, &b};
    if (!st) st = ta_safetensors_save(path_out, 2, names, ts);
    if (!st) st = ta_safetensors_open(&sf, path_out);
    if (!st) st = ta_safetensors_get(&h, sf, "b"); /* BF16 widened */
    ta_safetensors_free(sf);
    int64_t *v = NULL, shape[TA_MAX_DIMS];
    int nd;
    if (!st) st = ta_npy_load_int64(&v, &nd, shape, path_int);
    ta_npy_free(v);
    if (!st) st = ta_tensor_contiguous(&f, &e);
    ta_tensor *all[] = {&a, &b, &c, &d, &e, &f, &g, &h};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    return st;
}

/* Self attention as training runs it: one dx for the three input gradients, the
 * head-averaged weights; and the empty cases of the allocating calls. */
static ta_status grads_untouched(ta_status st, const ta_attention *l);

static ta_status op_layer_self(void)
{
    ta_attention *l = NULL;
    ta_status st = ta_attention_create(&l, TA_LAYOUT_TORCH, 8, 2, 5);
    const int64_t xs[3] = {2, 5, 8}, ws[3] = {2, 5, 5}, es[2] = {0, 3};
    static float xb[2 * 5 * 8], yb[2 * 5 * 8], wgt[2 * 5 * 5], dxb[2 * 5 * 8];
    for (int i = 0; i < 2 * 5 * 8; i++) xb[i] = (float)(i % 11) * 0.1f - 0.4f;
    ta_tensor x, y, w, dx, e = {0}, ec = {0};
    ta_tensor_from_buffer(&x, xb, 3, xs, NULL);
    ta_tensor_from_buffer(&y, yb, 3, xs, NULL);
    ta_tensor_from_buffer(&w, wgt, 3, ws, NULL);
    ta_tensor_from_buffer(&dx, dxb, 3, xs, NULL);
    ta_attention_opts o = {.weights = &w, .average_weights = 1, .causal = TA_CAUSAL_TOP_LEFT};
    if (!st) {
        watch_output("out", &y);
        watch_output("weights", &w);
        st = watched_untouched(ta_attention_forward(&y, l, &x, &x, &x, &o), "layer forward");
    }
    o.weights = NULL;
    if (!st) {
        memset(dxb, 0, sizeof dxb);
        watch_inplace("dx", &dx);
        st = ta_attention_backward(&dx, &dx, &dx, l, &y, &x, &x, &x, &o);
        st = grads_untouched(watched_untouched(st, "layer backward"), l);
    }
    ta_attention_free(l);
    if (!st) st = ta_tensor_empty_dtype(&e, TA_F16, 2, es);
    if (!st) st = ta_tensor_contiguous(&ec, &e);
    ta_tensor_free(&e);
    ta_tensor_free(&ec);
    if (!st) st = ta_safetensors_save(path_out, 0, NULL, NULL);
    return st;
}

/* An '<i8' .npy file of 6 values, written by hand (the library writes floats only). */
static int write_int_npy(const char *path)
{
    char header[128 - 10];
    const char *dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }";
    memset(header, ' ', sizeof header);
    memcpy(header, dict, strlen(dict));
    header[sizeof header - 1] = '\n';
    const unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                     (unsigned char)sizeof header, 0};
    const int64_t values[6] = {1, -2, 3, 1 << 30, 5, 6};
    FILE *fp = fopen(path, "wb");
    if (!fp) return 1;
    int bad = fwrite(magic, 1, sizeof magic, fp) != sizeof magic ||
              fwrite(header, 1, sizeof header, fp) != sizeof header ||
              fwrite(values, sizeof values, 1, fp) != 1;
    return fclose(fp) != 0 || bad;
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
    snprintf(path_int, sizeof path_int, "%s", ta_test_path("int.npy"));
    if (write_int_npy(path_int)) return 1;
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
static void test_optim(void **s)
{
    (void)s;
    sweep_checked("SGD (momentum) create/step/step", op_optim_sgd);
    sweep_checked("AdamW create/step/step", op_optim_adamw);
}
static void test_layer_self(void **s)
{
    (void)s;
    sweep_checked("torch layer self attention, averaged weights, one dx", op_layer_self);
}
static void test_dtypes_io(void **s) { (void)s; sweep("half tensors, npy/safetensors dtypes, int64 npy", op_dtypes_io); }

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
        cmocka_unit_test(test_sdpa_dtypes),  cmocka_unit_test(test_sdpa_backward_variants),
        cmocka_unit_test(test_sdpa_varlen),  cmocka_unit_test(test_kvcache),
        cmocka_unit_test(test_optim),        cmocka_unit_test(test_dtypes_io),
        cmocka_unit_test(test_layer_self),
    };
    return cmocka_run_group_tests(tests, setup, ta_test_teardown_dir);
}
