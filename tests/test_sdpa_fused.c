/* ta-test: all-isas
 * The fused SDPA forward (ta_sdpa_fused_run) against a float64 SDPA written here with
 * plain loops and against the reference path (ta_sdpa_reference_run), on every option:
 * scale, causal alignments with Lq != Lk both ways, mask modes with broadcasting, key
 * lengths 0 / partial, GQA (tiles within and across heads), Dv != D, odd sizes, head
 * dims 1..256, empty rows, NaN propagation, strided views of Q/K/V/O/LSE, guard-page
 * tails, decode shapes (the key-split path), bitwise equality over thread counts; and
 * the expf kernel against double exp. */
#include "ta_test.h"
#include "sdpa_oracle.h"

#include "core/core.h"
#include "core/tensor_internal.h"
#include "guard.h"
#include "kernels/kernels.h"
#include "ops/sdpa.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* max |a - b| over a strided [n0, n1, n2, n3] float tensor vs C-order doubles; NaN must
 * meet NaN and infinities must be equal. */
static double max_err(const ta_tensor *t, const double *ref, double rel)
{
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(t);
    double worst = 0;
    for (int64_t e = 0; e < n; e++) {
        double a = *ta_tensor_at_const(t, idx), b = ref[e];
        double d;
        if (isnan(a) || isnan(b)) d = isnan(a) && isnan(b) ? 0 : INFINITY;
        else if (isinf(a) || isinf(b)) d = a == b ? 0 : INFINITY;
        else d = fabs(a - b) / (1.0 + rel * fabs(b));
        if (d > worst) worst = d;
        ta_index_next(t->ndim, t->shape, idx);
    }
    return worst;
}

/* ------------------------------------------------------------------ cases */

enum { MASK_NONE, MASK_LQLK, MASK_B11LK, MASK_1HLQLK, MASK_FULL };
enum { VIEW_CONTIG, VIEW_STRIDED, VIEW_GUARD };

typedef struct fcase {
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    float scale;
    ta_causal causal;
    int mask_kind;
    ta_mask_mode mode;
    int lengths;  /* 0 none; 1: cycling 0, Lk, Lk/2 + 1, 1; 2: all Lk - 3 (>= 0) */
    int view;
    uint64_t seed;
} fcase;

typedef struct tensors {
    ta_tensor q, k, v, o, lse, mask;           /* views used by the call */
    ta_tensor qb, kb, vb, ob, lb;              /* owning buffers behind strided views */
    ta_guard gk, gv;
    int64_t *lengths;
} tensors;

/* A [a0, a1, a2, a3] view: contiguous, or a permuted / sliced view of a bigger buffer
 * (layout [a0, a2, a1, 2 * a3] sliced every 2nd element of the last dim, so no dim is
 * unit-stride-contiguous except through the permute). */
static void make_view(ta_tensor *view, ta_tensor *buf, const int64_t s[4], int strided)
{
    if (!strided) {
        TA_CHECK_OK(ta_tensor_empty(view, 4, s));
        return;
    }
    const int64_t bs[4] = {s[0], s[2], s[1], 2 * s[3] + 1};
    TA_CHECK_OK(ta_tensor_empty(buf, 4, bs));
    TA_CHECK_OK(ta_tensor_fill(buf, NAN)); /* any element the view misses is poison */
    ta_tensor t;
    const int perm[4] = {0, 2, 1, 3};
    TA_CHECK_OK(ta_tensor_permute(&t, buf, perm));
    TA_CHECK_OK(ta_tensor_slice(view, &t, 3, 1, 1 + 2 * s[3], 2));
}

static void make_mask(ta_tensor *m, const fcase *c)
{
    int64_t s[4];
    int nd = 0;
    switch (c->mask_kind) {
    case MASK_LQLK: nd = 2; s[0] = c->Lq; s[1] = c->Lk; break;
    case MASK_B11LK: nd = 4; s[0] = c->B; s[1] = 1; s[2] = 1; s[3] = c->Lk; break;
    case MASK_1HLQLK: nd = 4; s[0] = 1; s[1] = c->H; s[2] = c->Lq; s[3] = c->Lk; break;
    case MASK_FULL: nd = 4; s[0] = c->B; s[1] = c->H; s[2] = c->Lq; s[3] = c->Lk; break;
    }
    TA_CHECK_OK(ta_tensor_empty(m, nd, s));
    TA_CHECK_OK(ta_randn(m, c->seed + 99));
    float *p = m->data;
    int64_t n = ta_tensor_numel(m);
    for (int64_t e = 0; e < n; e++) {
        if (c->mode == TA_MASK_ADDITIVE)
            p[e] = (e % 7 == 3) ? -INFINITY : p[e];
        else
            p[e] = p[e] > -0.6f ? (c->mode == TA_MASK_KEEP ? 1.0f : 0.0f)
                                : (c->mode == TA_MASK_KEEP ? 0.0f : 1.0f);
    }
}

static void make_tensors(tensors *t, const fcase *c)
{
    memset(t, 0, sizeof *t);
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Lk, c->Dv}, os[4] = {c->B, c->H, c->Lq, c->Dv};
    int strided = c->view == VIEW_STRIDED;
    make_view(&t->q, &t->qb, qs, strided);
    make_view(&t->o, &t->ob, os, strided);
    if (c->view == VIEW_GUARD) {
        /* K and V end exactly at a PROT_NONE page: a SIMD tail reading past the last
         * row crashes. */
        size_t nk = (size_t)(c->B * c->Hkv * c->Lk * c->D), nv = (size_t)(c->B * c->Hkv * c->Lk * c->Dv);
        float *kp = ta_guard_floats(&t->gk, nk ? nk : 1), *vp = ta_guard_floats(&t->gv, nv ? nv : 1);
        assert_non_null(kp);
        assert_non_null(vp);
        TA_CHECK_OK(ta_tensor_from_buffer(&t->k, kp, 4, ks, NULL));
        TA_CHECK_OK(ta_tensor_from_buffer(&t->v, vp, 4, vs, NULL));
    } else {
        make_view(&t->k, &t->kb, ks, strided);
        make_view(&t->v, &t->vb, vs, strided);
    }
    TA_CHECK_OK(ta_randn(&t->q, c->seed));
    TA_CHECK_OK(ta_randn(&t->k, c->seed + 1));
    TA_CHECK_OK(ta_randn(&t->v, c->seed + 2));
    if (strided) { /* LSE [B, H, Lq] as a transposed view of [B, Lq, H] */
        const int64_t ls[3] = {c->B, c->Lq, c->H};
        TA_CHECK_OK(ta_tensor_empty(&t->lb, 3, ls));
        TA_CHECK_OK(ta_tensor_transpose(&t->lse, &t->lb, 1, 2));
    } else {
        const int64_t ls[3] = {c->B, c->H, c->Lq};
        TA_CHECK_OK(ta_tensor_empty(&t->lse, 3, ls));
    }
    if (c->mask_kind != MASK_NONE) make_mask(&t->mask, c);
    if (c->lengths) {
        t->lengths = malloc(sizeof(int64_t) * (size_t)(c->B ? c->B : 1));
        const int64_t cyc[4] = {0, c->Lk, c->Lk / 2 + 1, 1};
        for (int64_t b = 0; b < c->B; b++)
            t->lengths[b] = c->lengths == 1 ? TA_MIN(cyc[b % 4], c->Lk) : TA_MAX(c->Lk - 3, 0);
    }
}

static void free_tensors(tensors *t)
{
    ta_tensor *own[] = {&t->qb, &t->kb, &t->vb, &t->ob, &t->lb, &t->mask};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) ta_tensor_free(own[i]);
    if (!t->qb.data) ta_tensor_free(&t->q);
    if (!t->ob.data) ta_tensor_free(&t->o);
    if (!t->lb.data) ta_tensor_free(&t->lse);
    if (t->gk.base) ta_guard_release(&t->gk);
    else if (!t->kb.data) ta_tensor_free(&t->k);
    if (t->gv.base) ta_guard_release(&t->gv);
    else if (!t->vb.data) ta_tensor_free(&t->v);
    free(t->lengths);
}

static ta_sdpa_opts opts_of(const fcase *c, tensors *t)
{
    ta_sdpa_opts o = {.scale = c->scale, .causal = c->causal, .mask_mode = c->mode,
                      .key_lengths = t->lengths, .lse = &t->lse, .path = TA_SDPA_FUSED};
    if (c->mask_kind != MASK_NONE) o.mask = &t->mask;
    return o;
}

static void run_fused(tensors *t, const ta_sdpa_opts *o)
{
    ta_sdpa_opts f = *o;
    f.path = TA_SDPA_FUSED;
    TA_CHECK_OK(ta_sdpa(&t->o, &t->q, &t->k, &t->v, &f));
}

/* Fused vs float64 (and vs the reference path, which must agree just as well). */
static void check_case(const fcase *c)
{
    tensors t;
    make_tensors(&t, c);
    ta_sdpa_opts o = opts_of(c, &t);
    run_fused(&t, &o);

    size_t nO = (size_t)(c->B * c->H * c->Lq * c->Dv), nL = (size_t)(c->B * c->H * c->Lq);
    double *O = malloc(sizeof(double) * (nO ? nO : 1)), *L = malloc(sizeof(double) * (nL ? nL : 1));
    double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)c->D);
    ta_test_sdpa_f64(O, NULL, L, &t.q, &t.k, &t.v, &o, scale, true);
    double eo = max_err(&t.o, O, 0.0), el = max_err(&t.lse, L, 1.0);
    if (!(eo <= 1e-5) || !(el <= 1e-5))
        fail_msg("fused vs f64: B%lld H%lld/%lld Lq%lld Lk%lld D%lld Dv%lld causal %d mask %d/%d "
                 "len %d view %d: O err %.3g, LSE err %.3g",
                 (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->Lq,
                 (long long)c->Lk, (long long)c->D, (long long)c->Dv, (int)c->causal,
                 c->mask_kind, (int)c->mode, c->lengths, c->view, eo, el);

    /* The reference path on the same inputs must agree with the oracle too (so the two
     * paths agree with each other within twice the bound). */
    ta_tensor o2, l2;
    const int64_t os[4] = {c->B, c->H, c->Lq, c->Dv}, ls[3] = {c->B, c->H, c->Lq};
    TA_CHECK_OK(ta_tensor_empty(&o2, 4, os));
    TA_CHECK_OK(ta_tensor_empty(&l2, 3, ls));
    ta_sdpa_opts r = o;
    r.lse = &l2;
    r.path = TA_SDPA_REFERENCE;
    TA_CHECK_OK(ta_sdpa(&o2, &t.q, &t.k, &t.v, &r));
    eo = max_err(&o2, O, 0.0);
    el = max_err(&l2, L, 1.0);
    if (!(eo <= 1e-5) || !(el <= 1e-5))
        fail_msg("reference vs f64 (Lq%lld Lk%lld D%lld): O err %.3g, LSE err %.3g",
                 (long long)c->Lq, (long long)c->Lk, (long long)c->D, eo, el);
    ta_tensor_free(&o2);
    ta_tensor_free(&l2);
    free(O);
    free(L);
    free_tensors(&t);
}

static fcase base(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv)
{
    return (fcase){.B = B, .H = H, .Hkv = Hkv, .Lq = Lq, .Lk = Lk, .D = D, .Dv = Dv, .seed = 7};
}

/* ------------------------------------------------------------------- tests */

static void test_head_dims_1_to_256(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 8, 63, 64, 65, 128, 256};
    for (size_t n = 0; n < sizeof dims / sizeof *dims; n++) {
        fcase c = base(1, 2, 2, 33, 70, dims[n], dims[n]);
        check_case(&c);
        c.causal = TA_CAUSAL_TOP_LEFT;
        c.seed = 11 + n;
        check_case(&c);
    }
}

static void test_odd_sizes_and_causal_alignments(void **state)
{
    (void)state;
    const int64_t L[] = {1, 3, 17, 129, 257};
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 5; b++) {
            if (L[a] * L[b] > 257 * 129) continue; /* keep it fast: 257 x 257 once below */
            for (int cz = 0; cz < 3; cz++) {
                fcase c = base(1, 1, 1, L[a], L[b], 16, 16);
                c.causal = (ta_causal)cz;
                c.seed = 100 + a * 10 + b;
                check_case(&c);
            }
        }
    fcase c = base(1, 1, 1, 257, 257, 64, 64);
    c.causal = TA_CAUSAL_TOP_LEFT;
    check_case(&c);
}

static void test_lq_differs_from_lk_both_ways(void **state)
{
    (void)state;
    /* Lq > Lk with bottom_right: the first Lq - Lk rows see no key (output 0, LSE -inf). */
    const int64_t shapes[][2] = {{100, 37}, {37, 100}, {130, 64}, {5, 300}};
    for (size_t s = 0; s < 4; s++)
        for (int cz = 1; cz <= 2; cz++) {
            fcase c = base(2, 2, 1, shapes[s][0], shapes[s][1], 32, 24);
            c.causal = (ta_causal)cz;
            c.seed = 200 + s;
            check_case(&c);
        }
}

static void test_scale_and_value_dim(void **state)
{
    (void)state;
    fcase c = base(2, 3, 3, 19, 41, 64, 17);
    c.scale = 0.37f;
    check_case(&c);
    c = base(1, 2, 1, 50, 90, 8, 128);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    check_case(&c);
    c = base(1, 1, 1, 20, 20, 128, 1);
    check_case(&c);
}

static void test_mask_modes_and_broadcasting(void **state)
{
    (void)state;
    const int kinds[] = {MASK_LQLK, MASK_B11LK, MASK_1HLQLK, MASK_FULL};
    const ta_mask_mode modes[] = {TA_MASK_KEEP, TA_MASK_BLOCK, TA_MASK_ADDITIVE};
    for (int k = 0; k < 4; k++)
        for (int m = 0; m < 3; m++) {
            fcase c = base(2, 2, 2, 53, 77, 32, 32);
            c.mask_kind = kinds[k];
            c.mode = modes[m];
            c.causal = (ta_causal)((k + m) % 3);
            c.lengths = (k + m) % 2 ? 2 : 0;
            c.seed = 300 + k * 3 + m;
            check_case(&c);
        }
    /* grouped heads packed into one tile (Lq < the tile height): a mask shared by the
     * tile's rows ([B,1,1,Lk]) and one that differs per head ([1,H,Lq,Lk]) */
    for (int k = 1; k <= 2; k++)
        for (int m = 0; m < 3; m++) {
            fcase c = base(2, 4, 1, 3, 77, 32, 32);
            c.mask_kind = kinds[k];
            c.mode = modes[m];
            c.seed = 320 + k * 3 + m;
            check_case(&c);
        }
}

/* A causal mask given as a tensor (the seed's triu(ones, 1) in block mode): key tiles it
 * blocks for every row are skipped like the ones opts.causal hides; the result matches
 * the reference path on the same mask and the fused path with opts.causal. */
static void test_mask_tensor_blocking_whole_tiles(void **state)
{
    (void)state;
    const int64_t s4[4] = {2, 3, 200, 40}, ms[2] = {200, 200};
    ta_tensor q, k, v, o1, o2, o3, m;
    TA_CHECK_OK(ta_tensor_empty(&q, 4, s4)); TA_CHECK_OK(ta_randn(&q, 81));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, s4)); TA_CHECK_OK(ta_randn(&k, 82));
    TA_CHECK_OK(ta_tensor_empty(&v, 4, s4)); TA_CHECK_OK(ta_randn(&v, 83));
    TA_CHECK_OK(ta_tensor_empty(&o1, 4, s4));
    TA_CHECK_OK(ta_tensor_empty(&o2, 4, s4));
    TA_CHECK_OK(ta_tensor_empty(&o3, 4, s4));
    TA_CHECK_OK(ta_tensor_ones(&m, 2, ms));
    TA_CHECK_OK(ta_tensor_triu(&m, 1));
    ta_sdpa_opts fused = {.mask = &m, .mask_mode = TA_MASK_BLOCK, .path = TA_SDPA_FUSED};
    ta_sdpa_opts ref = fused, causal = {.causal = TA_CAUSAL_TOP_LEFT, .path = TA_SDPA_FUSED};
    ref.path = TA_SDPA_REFERENCE;
    TA_CHECK_OK(ta_sdpa(&o1, &q, &k, &v, &fused));
    TA_CHECK_OK(ta_sdpa(&o2, &q, &k, &v, &ref));
    TA_CHECK_OK(ta_sdpa(&o3, &q, &k, &v, &causal));
    const float *a = o1.data, *b = o2.data, *c = o3.data;
    for (int64_t e = 0; e < ta_tensor_numel(&o1); e++) {
        if (!(fabsf(a[e] - b[e]) <= 1e-5f)) fail_msg("element %lld: fused %g, reference %g", (long long)e, (double)a[e], (double)b[e]);
        if (!(fabsf(a[e] - c[e]) <= 1e-6f)) fail_msg("element %lld: mask %g, causal %g", (long long)e, (double)a[e], (double)c[e]);
    }
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v); ta_tensor_free(&m);
    ta_tensor_free(&o1); ta_tensor_free(&o2); ta_tensor_free(&o3);
}

static void test_key_lengths_zero_and_partial(void **state)
{
    (void)state;
    fcase c = base(5, 2, 2, 40, 131, 64, 64); /* lengths 0, Lk, 66, 1, 0 */
    c.lengths = 1;
    check_case(&c);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    check_case(&c);
    c = base(4, 1, 1, 1, 2000, 64, 64); /* decode split with lengths */
    c.lengths = 1;
    check_case(&c);
}

static void test_grouped_query_attention(void **state)
{
    (void)state;
    /* Lq small: tiles span the heads of a group; Lq large: tiles within a head. */
    const int64_t lq[] = {1, 5, 70};
    for (size_t n = 0; n < 3; n++)
        for (int cz = 0; cz < 3; cz++) {
            fcase c = base(2, 6, 2, lq[n], 83, 64, 40);
            c.causal = (ta_causal)cz;
            c.mask_kind = n == 1 ? MASK_1HLQLK : MASK_NONE;
            c.seed = 400 + n * 3 + cz;
            check_case(&c);
        }
}

static void test_fully_masked_rows(void **state)
{
    (void)state;
    fcase c = base(2, 2, 1, 30, 45, 16, 16);
    c.mask_kind = MASK_FULL;
    c.mode = TA_MASK_KEEP;
    tensors t;
    make_tensors(&t, &c);
    /* Row (0, 1, 4) keeps nothing; row (1, 0, 7) keeps one key. */
    for (int64_t j = 0; j < 45; j++) {
        int64_t a[4] = {0, 1, 4, j}, b[4] = {1, 0, 7, j};
        *ta_tensor_at(&t.mask, a) = 0.0f;
        *ta_tensor_at(&t.mask, b) = j == 20 ? 1.0f : 0.0f;
    }
    ta_sdpa_opts o = opts_of(&c, &t);
    run_fused(&t, &o);
    for (int64_t d = 0; d < 16; d++) {
        int64_t a[4] = {0, 1, 4, d}, b[4] = {1, 0, 7, d}, vj[4] = {1, 0, 20, d};
        assert_true(*ta_tensor_at(&t.o, a) == 0.0f);
        assert_true(fabsf(*ta_tensor_at(&t.o, b) - *ta_tensor_at(&t.v, vj)) < 1e-6f);
    }
    int64_t la[3] = {0, 1, 4};
    assert_true(*ta_tensor_at(&t.lse, la) == -INFINITY);
    free_tensors(&t);
}

static void test_nan_propagates_and_blocked_nan_is_discarded(void **state)
{
    (void)state;
    fcase c = base(1, 2, 2, 70, 70, 64, 64);
    c.causal = TA_CAUSAL_TOP_LEFT;
    tensors t;
    make_tensors(&t, &c);
    int64_t qi[4] = {0, 0, 3, 5}, kj[4] = {0, 1, 50, 9}, vj[4] = {0, 0, 0, 2};
    *ta_tensor_at(&t.q, qi) = NAN;  /* row (0, 0, 3): NaN */
    *ta_tensor_at(&t.k, kj) = NAN;  /* head 1: rows i >= 50 see it -> NaN; rows < 50 not */
    *ta_tensor_at(&t.v, vj) = NAN;  /* head 0, key 0 (seen by every row): column 2 NaN */
    ta_sdpa_opts o = opts_of(&c, &t);
    run_fused(&t, &o);
    double O[2 * 70 * 64], L[2 * 70];
    ta_test_sdpa_f64(O, NULL, L, &t.q, &t.k, &t.v, &o, 1.0 / 8.0, true);
    assert_true(max_err(&t.o, O, 0.0) <= 1e-5);
    assert_true(max_err(&t.lse, L, 1.0) <= 1e-5);
    int64_t a[4] = {0, 1, 49, 0}, b[4] = {0, 1, 50, 0}, l3[3] = {0, 0, 3};
    assert_false(isnan(*ta_tensor_at(&t.o, a)));
    assert_true(isnan(*ta_tensor_at(&t.o, b)));
    assert_true(isnan(*ta_tensor_at(&t.lse, l3)));
    /* +inf through an additive mask: the row is NaN, as softmax's inf - inf. */
    free_tensors(&t);
    c.causal = TA_CAUSAL_NONE;
    c.mask_kind = MASK_FULL;
    c.mode = TA_MASK_ADDITIVE;
    make_tensors(&t, &c);
    int64_t mi[4] = {0, 1, 7, 33};
    *ta_tensor_at(&t.mask, mi) = INFINITY;
    o = opts_of(&c, &t);
    run_fused(&t, &o);
    ta_test_sdpa_f64(O, NULL, L, &t.q, &t.k, &t.v, &o, 1.0 / 8.0, true);
    assert_true(max_err(&t.o, O, 0.0) <= 1e-5);
    int64_t r7[4] = {0, 1, 7, 0};
    assert_true(isnan(*ta_tensor_at(&t.o, r7)));
    free_tensors(&t);
}

static void test_strided_views_and_guard_pages(void **state)
{
    (void)state;
    fcase c = base(2, 4, 2, 37, 75, 65, 33);
    c.view = VIEW_STRIDED;
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    check_case(&c);
    c = base(1, 2, 2, 50, 66, 64, 64);
    c.view = VIEW_STRIDED;
    check_case(&c);
    /* Dv and D odd, K and V ending at a guard page. */
    const int64_t dv[] = {1, 17, 63, 65, 129};
    for (size_t n = 0; n < 5; n++) {
        c = base(1, 2, 1, 9, 67, dv[n], dv[n]);
        c.view = VIEW_GUARD;
        check_case(&c);
    }
}

static void test_decode_shapes(void **state)
{
    (void)state;
    fcase c = base(1, 8, 2, 1, 4096, 128, 128); /* key-split path */
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    check_case(&c);
    c = base(2, 4, 4, 3, 4096, 64, 64);
    c.causal = TA_CAUSAL_BOTTOM_RIGHT;
    c.mask_kind = MASK_B11LK;
    c.mode = TA_MASK_KEEP;
    check_case(&c);
    c = base(1, 1, 1, 1, 1500, 1, 1); /* ragged last chunk */
    check_case(&c);
}

/* Same inputs, 1, 2 and 3 threads: outputs must be bitwise equal (both schedules). */
static void test_threads_bitwise_identical(void **state)
{
    (void)state;
    const fcase cases[] = {
        {.B = 2, .H = 4, .Hkv = 2, .Lq = 200, .Lk = 200, .D = 64, .Dv = 64,
         .causal = TA_CAUSAL_TOP_LEFT, .seed = 5},
        {.B = 1, .H = 4, .Hkv = 1, .Lq = 2, .Lk = 3000, .D = 128, .Dv = 128,
         .causal = TA_CAUSAL_BOTTOM_RIGHT, .seed = 6},
    };
    int saved = ta_get_num_threads();
    for (size_t n = 0; n < 2; n++) {
        tensors t;
        make_tensors(&t, &cases[n]);
        ta_sdpa_opts o = opts_of(&cases[n], &t);
        size_t no = (size_t)ta_tensor_numel(&t.o), nl = (size_t)ta_tensor_numel(&t.lse);
        float *o1 = malloc(no * sizeof(float)), *l1 = malloc(nl * sizeof(float));
        for (int th = 1; th <= 3; th++) {
            TA_CHECK_OK(ta_set_num_threads(th));
            run_fused(&t, &o);
            if (th == 1) {
                memcpy(o1, t.o.data, no * sizeof(float));
                memcpy(l1, t.lse.data, nl * sizeof(float));
            } else {
                assert_memory_equal(o1, t.o.data, no * sizeof(float));
                assert_memory_equal(l1, t.lse.data, nl * sizeof(float));
            }
        }
        free(o1);
        free(l1);
        free_tensors(&t);
    }
    TA_CHECK_OK(ta_set_num_threads(saved));
}

static void test_weights_are_refused(void **state)
{
    (void)state;
    fcase c = base(1, 1, 1, 4, 4, 8, 8);
    tensors t;
    make_tensors(&t, &c);
    ta_tensor w;
    const int64_t ws[4] = {1, 1, 4, 4};
    TA_CHECK_OK(ta_tensor_empty(&w, 4, ws));
    ta_sdpa_opts o = opts_of(&c, &t);
    o.weights = &w;
    o.path = TA_SDPA_FUSED;
    TA_CHECK_ERR(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o), TA_EUNSUPPORTED, "weights");
    ta_tensor_free(&w);
    free_tensors(&t);
}

/* The expf kernel over the softmax's domain [-104, 0] (x = s - max <= 0), against
 * double exp: within 2 ulp where the result is normal; below FLT_MIN within FLT_MIN
 * (AVX2 and scalar flush those to 0; AVX-512 rounds them into denormals). Exact at 0,
 * 0 at -inf, NaN at NaN. */
static void test_expf_kernel_accuracy(void **state)
{
    (void)state;
    const ta_kernels *k = ta_kernels_active();
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    double worst_ulp = 0;
    for (int pass = 0; pass < 8; pass++) {
        for (int n = 0; n < N; n++) x[n] = -104.0f * (float)(pass * N + n) / (8.0f * N);
        k->attn_exp(y, x, N - pass); /* odd lengths exercise the tail */
        for (int n = 0; n < N - pass; n++) {
            double e = exp((double)x[n]);
            if (e < FLT_MIN) {
                if (!(fabs(y[n] - e) <= FLT_MIN)) fail_msg("exp(%a) = %a, want %a", x[n], y[n], e);
                continue;
            }
            double ulp = ldexp(1.0, ilogb(e) - 23), err = fabs(y[n] - e) / ulp;
            if (err > worst_ulp) worst_ulp = err;
        }
    }
    if (!(worst_ulp <= 2.0)) fail_msg("expf kernel: %.2f ulp", worst_ulp);
    float sp[4] = {0.0f, -INFINITY, NAN, -1e-30f}, r[4];
    k->attn_exp(r, sp, 4);
    assert_true(r[0] == 1.0f);
    assert_true(r[1] == 0.0f);
    assert_true(isnan(r[2]));
    assert_true(r[3] == 1.0f);
    free(x);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_kernel_accuracy),
        cmocka_unit_test(test_head_dims_1_to_256),
        cmocka_unit_test(test_odd_sizes_and_causal_alignments),
        cmocka_unit_test(test_lq_differs_from_lk_both_ways),
        cmocka_unit_test(test_scale_and_value_dim),
        cmocka_unit_test(test_mask_modes_and_broadcasting),
        cmocka_unit_test(test_mask_tensor_blocking_whole_tiles),
        cmocka_unit_test(test_key_lengths_zero_and_partial),
        cmocka_unit_test(test_grouped_query_attention),
        cmocka_unit_test(test_fully_masked_rows),
        cmocka_unit_test(test_nan_propagates_and_blocked_nan_is_discarded),
        cmocka_unit_test(test_strided_views_and_guard_pages),
        cmocka_unit_test(test_decode_shapes),
        cmocka_unit_test(test_threads_bitwise_identical),
        cmocka_unit_test(test_weights_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
