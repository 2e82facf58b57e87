/* The tensors and checks of the SDPA case table (see sdpa_cases.h). */
#include "sdpa_cases.h"
#include "sdpa_oracle.h"
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ta_sdpa_case ta_sdpa_case_shape(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk,
                                int64_t D, int64_t Dv, uint64_t seed)
{
    return (ta_sdpa_case){.B = B, .H = H, .Hkv = Hkv, .Lq = Lq, .Lk = Lk, .D = D, .Dv = Dv,
                          .seed = seed};
}

/* A [s0, s1, s2, s3] view: contiguous, or a permuted and sliced view of a bigger buffer
 * (layout [s0, s2, s1, 2 * s3 + 1] read every 2nd element of the last dim, so no dim is
 * unit-stride-contiguous except through the permute). Either way filled with NaN: an
 * element the view misses, or an output element a path does not write, is poison. */
static void make_view(ta_tensor *view, ta_tensor *buf, const int64_t s[4], int strided)
{
    if (!strided) {
        TA_CHECK_OK(ta_tensor_full(view, 4, s, NAN));
        return;
    }
    const int64_t bs[4] = {s[0], s[2], s[1], 2 * s[3] + 1};
    const int perm[4] = {0, 2, 1, 3};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_full(buf, 4, bs, NAN));
    TA_CHECK_OK(ta_tensor_permute(&t, buf, perm));
    TA_CHECK_OK(ta_tensor_slice(view, &t, 3, 1, 1 + 2 * s[3], 2));
}

/* Random mask values made into the mode's kind: keep/block 0/1 (about a quarter of the
 * keys blocked), additive randn with every 7th entry -inf. */
static void make_mask(ta_tensor *m, const ta_sdpa_case *c)
{
    int64_t s[4] = {0};
    int nd = 0;
    switch (c->mask) {
    case TA_TEST_MASK_NONE: return;
    case TA_TEST_MASK_LQLK: nd = 2; s[0] = c->Lq; s[1] = c->Lk; break;
    case TA_TEST_MASK_B11LK: nd = 4; s[0] = c->B; s[1] = 1; s[2] = 1; s[3] = c->Lk; break;
    case TA_TEST_MASK_1HLQLK: nd = 4; s[0] = 1; s[1] = c->H; s[2] = c->Lq; s[3] = c->Lk; break;
    case TA_TEST_MASK_FULL: nd = 4; s[0] = c->B; s[1] = c->H; s[2] = c->Lq; s[3] = c->Lk; break;
    case TA_TEST_MASK_LK: nd = 1; s[0] = c->Lk; break;
    case TA_TEST_MASK_H1LK: nd = 3; s[0] = c->H; s[1] = 1; s[2] = c->Lk; break;
    }
    TA_CHECK_OK(ta_tensor_empty(m, nd, s));
    TA_CHECK_OK(ta_randn(m, c->seed + 99));
    float *p = m->data;
    const float keep = c->mode == TA_MASK_KEEP ? 1.0f : 0.0f;
    for (int64_t e = 0, n = ta_tensor_numel(m); e < n; e++) {
        if (c->mode == TA_MASK_ADDITIVE) p[e] = (e % 7 == 3) ? -INFINITY : p[e];
        else p[e] = p[e] > -0.6f ? keep : 1.0f - keep;
    }
    if (!c->prefix || c->mode == TA_MASK_ADDITIVE || c->Lk == 0) return;
    /* NaN counts as nonzero: kept in KEEP mode, blocked in BLOCK mode */
    const float nan_keep = c->mode == TA_MASK_KEEP ? NAN : 0.0f;
    const float nan_block = c->mode == TA_MASK_BLOCK ? NAN : 0.0f;
    const int64_t lk = c->Lk, rows = ta_tensor_numel(m) / lk;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t P = (r * 5 + 3) % (lk + 1);
        float *row = p + r * lk;
        for (int64_t j = 0; j < lk; j++) row[j] = j < P ? keep : 1.0f - keep;
        if (P > 1 && r % 2) row[P / 2] = c->mode == TA_MASK_KEEP ? nan_keep : row[P / 2];
        if (P + 1 < lk && r % 2 == 0 && c->mode == TA_MASK_BLOCK) row[P + 1] = nan_block;
        if (c->prefix == 2 && r % 3 == 0) row[lk - 1] = keep;
    }
}

static int64_t *make_lengths(const ta_sdpa_case *c)
{
    if (c->lengths == TA_TEST_LEN_NONE) return NULL;
    int64_t *kl = malloc(sizeof(int64_t) * (size_t)(c->B ? c->B : 1));
    assert_non_null(kl);
    const int64_t cyc[4] = {0, c->Lk, c->Lk / 2 + 1, 1};
    for (int64_t b = 0; b < c->B; b++) {
        int64_t v = c->lengths == TA_TEST_LEN_CYCLE           ? cyc[b % 4]
                    : c->lengths == TA_TEST_LEN_CYCLE_FROM_LK ? cyc[(b + 1) % 4]
                                                              : c->Lk - 3;
        kl[b] = v < 0 ? 0 : v > c->Lk ? c->Lk : v;
    }
    return kl;
}

void ta_sdpa_case_make(ta_sdpa_case_tensors *t, const ta_sdpa_case *c)
{
    memset(t, 0, sizeof *t);
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Lk, c->Dv}, os[4] = {c->B, c->H, c->Lq, c->Dv};
    const int strided = c->view == TA_TEST_VIEW_STRIDED;
    make_view(&t->q, &t->qb, qs, strided);
    make_view(&t->o, &t->ob, os, strided);
    if (c->view == TA_TEST_VIEW_GUARD) {
        /* A SIMD tail reading past the last key row crashes. */
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
        TA_CHECK_OK(ta_tensor_full(&t->lb, 3, ls, NAN));
        TA_CHECK_OK(ta_tensor_transpose(&t->lse, &t->lb, 1, 2));
    } else {
        const int64_t ls[3] = {c->B, c->H, c->Lq};
        TA_CHECK_OK(ta_tensor_full(&t->lse, 3, ls, NAN));
    }
    make_mask(&t->mask, c);
    t->lengths = make_lengths(c);
}

void ta_sdpa_case_free(ta_sdpa_case_tensors *t)
{
    /* ta_tensor_free releases owning tensors and leaves views alone. */
    ta_tensor *all[] = {&t->q, &t->k, &t->v, &t->o, &t->lse, &t->mask,
                        &t->qb, &t->kb, &t->vb, &t->ob, &t->lb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    ta_guard_release(&t->gk);
    ta_guard_release(&t->gv);
    free(t->lengths);
    memset(t, 0, sizeof *t);
}

ta_sdpa_opts ta_sdpa_case_opts(const ta_sdpa_case *c, ta_sdpa_case_tensors *t, ta_sdpa_path path)
{
    ta_sdpa_opts o = {.scale = c->scale, .causal = c->causal, .mask_mode = c->mode,
                      .key_lengths = t->lengths, .lse = &t->lse, .path = path};
    if (c->mask != TA_TEST_MASK_NONE) o.mask = &t->mask;
    return o;
}

const char *ta_sdpa_case_name(const ta_sdpa_case *c, char *buf, size_t size)
{
    snprintf(buf, size,
             "B%lld H%lld/%lld Lq%lld Lk%lld D%lld Dv%lld causal %d mask %d/%d/%d len %d view %d "
             "scale %g seed %llu",
             (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->Lq,
             (long long)c->Lk, (long long)c->D, (long long)c->Dv, (int)c->causal, (int)c->mask,
             (int)c->mode, c->prefix, (int)c->lengths, (int)c->view, (double)c->scale,
             (unsigned long long)c->seed);
    return buf;
}

static const char *path_name(ta_sdpa_path path)
{
    return path == TA_SDPA_FUSED ? "fused" : path == TA_SDPA_REFERENCE ? "reference" : "auto";
}

/* Fails unless a and b (same shape, any strides) hold the same bits everywhere. */
static void expect_same_bits(const ta_tensor *a, const ta_tensor *b, const char *what)
{
    int64_t idx[TA_MAX_DIMS] = {0}, n = ta_tensor_numel(a);
    for (int64_t e = 0; e < n; e++) {
        const float *x = ta_tensor_at_const(a, idx), *y = ta_tensor_at_const(b, idx);
        if (memcmp(x, y, sizeof(float)) != 0)
            fail_msg("%s: element %lld is %.9g, then %.9g", what, (long long)e, (double)*x,
                     (double)*y);
        ta_test_next_index(a->ndim, a->shape, idx);
    }
}

void ta_sdpa_case_check(const ta_sdpa_case *c, ta_sdpa_path path)
{
    char name[256];
    ta_sdpa_case_name(c, name, sizeof name);
    ta_sdpa_case_tensors t;
    ta_sdpa_case_make(&t, c);
    ta_sdpa_opts o = ta_sdpa_case_opts(c, &t, path);
    ta_tensor w = {0};
    const int64_t ws[4] = {c->B, c->H, c->Lq, c->Lk}, os[4] = {c->B, c->H, c->Lq, c->Dv};
    if (path == TA_SDPA_REFERENCE) { /* the weights exist on the reference path only */
        TA_CHECK_OK(ta_tensor_full(&w, 4, ws, NAN));
        o.weights = &w;
    }
    TA_CHECK_OK(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &o));

    size_t nO = (size_t)ta_tensor_numel(&t.o), nL = (size_t)ta_tensor_numel(&t.lse),
           nW = (size_t)(c->B * c->H * c->Lq * c->Lk);
    double *O = malloc(sizeof(double) * (nO + 1)), *L = malloc(sizeof(double) * (nL + 1)),
           *W = o.weights ? malloc(sizeof(double) * (nW + 1)) : NULL;
    assert_true(O && L && (W || !o.weights));
    const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)c->D);
    /* The fused path never reads V at a key of weight 0; the reference path multiplies
     * it by 0 (as PyTorch), which the oracle follows per path. */
    ta_test_sdpa_f64(O, W, L, &t.q, &t.k, &t.v, &o, scale, path == TA_SDPA_FUSED);
    double eo = ta_test_max_err(&t.o, O, 0.0, 0, NULL), el = ta_test_max_err(&t.lse, L, 1.0, 0, NULL);
    double ew = W ? ta_test_max_err(&w, W, 0.0, 0, NULL) : 0.0;
    if (!(eo <= 1e-5 && el <= 1e-5 && ew <= 1e-5))
        fail_msg("%s vs float64: %s: max err O %.3g, LSE %.3g, weights %.3g", path_name(path),
                 name, eo, el, ew);

    /* Without the optional outputs the result is the same, bit for bit. */
    ta_tensor o2;
    TA_CHECK_OK(ta_tensor_full(&o2, 4, os, NAN));
    o.weights = NULL;
    o.lse = NULL;
    TA_CHECK_OK(ta_sdpa(&o2, &t.q, &t.k, &t.v, &o));
    expect_same_bits(&t.o, &o2, name);

    free(O);
    free(L);
    free(W);
    ta_tensor_free(&o2);
    ta_tensor_free(&w);
    ta_sdpa_case_free(&t);
}

void ta_sdpa_case_check_agree(const ta_sdpa_case *c)
{
    char name[256];
    ta_sdpa_case_name(c, name, sizeof name);
    ta_sdpa_case_tensors t;
    ta_sdpa_case_make(&t, c);
    ta_sdpa_opts f = ta_sdpa_case_opts(c, &t, TA_SDPA_FUSED);
    TA_CHECK_OK(ta_sdpa(&t.o, &t.q, &t.k, &t.v, &f));
    ta_tensor o2, l2;
    const int64_t os[4] = {c->B, c->H, c->Lq, c->Dv}, ls[3] = {c->B, c->H, c->Lq};
    TA_CHECK_OK(ta_tensor_full(&o2, 4, os, NAN));
    TA_CHECK_OK(ta_tensor_full(&l2, 3, ls, NAN));
    ta_sdpa_opts r = f;
    r.lse = &l2;
    r.path = TA_SDPA_REFERENCE;
    TA_CHECK_OK(ta_sdpa(&o2, &t.q, &t.k, &t.v, &r));
    double *O = ta_test_to_f64(&o2), *L = ta_test_to_f64(&l2);
    double eo = ta_test_max_err(&t.o, O, 0.0, 0, NULL), el = ta_test_max_err(&t.lse, L, 1.0, 0, NULL);
    if (!(eo <= 1e-5 && el <= 1e-5))
        fail_msg("fused vs reference: %s: max err O %.3g, LSE %.3g", name, eo, el);
    free(O);
    free(L);
    ta_tensor_free(&o2);
    ta_tensor_free(&l2);
    ta_sdpa_case_free(&t);
}

void ta_sdpa_case_add(ta_sdpa_case_list *l, ta_sdpa_case c)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        ta_sdpa_case *v = realloc(l->v, cap * sizeof *v);
        assert_non_null(v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = c;
}
