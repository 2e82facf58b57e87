/* The attention layers' caller workspace (ta_attention_opts.workspace sized by
 * ta_attention_workspace_size / ta_attention_backward_workspace_size): results bitwise
 * equal to the calls without it (both layouts, masks, key padding, weights, strided
 * views), a workspace one byte too small refused with TA_EINVAL before anything is
 * written, and no allocation by the layer code when one is given (counted through the
 * allocation hook). Every workspace ends at a guard page (tests/support/guard.h), so a
 * call that uses a byte more than its size query measured crashes. */
#include "ta_test.h"
#include "alloc_hook.h"
#include "guard.h"
#include "core/workspace.h" /* ta_scratch_cache_release: a block is kept between calls */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ cases */

typedef struct wcase {
    const char *name;
    ta_layout layout;
    int64_t N, Lq, Lk, E, H;
    int mask;               /* 0 none, 1 [Lq, Lk], 2 [N, 1, Lq, Lk] */
    ta_mask_mode mask_mode;
    int kpm;                /* 0 none, 1 a suffix of each row blocked, 2 scattered keys */
    ta_mask_mode kpm_mode;
    ta_causal causal;
    int weights;            /* 0 none, 1 per head, 2 averaged over heads */
    int strided;            /* queries read and out written through transposed views */
} wcase;

static const wcase CASES[] = {
    /* seed: a mask with an all-blocked row (uniform weights), scattered padding (the
     * masks are combined into one additive mask), per-head weights */
    {"seed mask+kpm weights", TA_LAYOUT_SEED, 2, 5, 7, 8, 2, 1, TA_MASK_KEEP, 2, TA_MASK_BLOCK,
     TA_CAUSAL_NONE, 1, 0},
    /* seed: rank-4 mask, suffix padding (key lengths), averaged weights, strided */
    {"seed mask4+lengths avg strided", TA_LAYOUT_SEED, 2, 6, 6, 12, 3, 2, TA_MASK_BLOCK, 1,
     TA_MASK_KEEP, TA_CAUSAL_TOP_LEFT, 2, 1},
    /* torch: additive mask and boolean padding combined, averaged weights, strided */
    {"torch additive+kpm avg strided", TA_LAYOUT_TORCH, 2, 6, 9, 12, 3, 1, TA_MASK_ADDITIVE, 2,
     TA_MASK_BLOCK, TA_CAUSAL_NONE, 2, 1},
    /* torch: padding alone, causal, per-head weights */
    {"torch kpm causal weights", TA_LAYOUT_TORCH, 3, 4, 4, 8, 2, 0, TA_MASK_KEEP, 1, TA_MASK_BLOCK,
     TA_CAUSAL_TOP_LEFT, 1, 0},
    /* torch: nothing but bottom-right causal (the fused path) */
    {"torch bottom-right", TA_LAYOUT_TORCH, 2, 3, 8, 16, 4, 0, TA_MASK_KEEP, 0, TA_MASK_KEEP,
     TA_CAUSAL_BOTTOM_RIGHT, 0, 0},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

/* A mask element that blocks in `mode`, or lets the key through (additive: a bias). */
static float encode(int blocked, ta_mask_mode mode, float bias)
{
    if (mode == TA_MASK_ADDITIVE) return blocked ? -INFINITY : bias;
    if (mode == TA_MASK_BLOCK) return blocked ? 1.0f : 0.0f;
    return blocked ? 0.0f : 1.0f;
}

/* One case's layer and tensors: views into storages (transposed when strided). */
typedef struct setup {
    ta_attention *layer;
    ta_tensor qs, k, v, outs, mask, kpm, w, dout, dq, dk, dv;
    ta_tensor q, out; /* views of qs, outs */
    ta_attention_opts o;
} setup;

/* [N, L, E] as a view of a storage [N, E, L] (strided) or the storage itself. */
static void make_input(ta_tensor *storage, ta_tensor *view, const wcase *c, int64_t L, int strided,
                       uint64_t seed)
{
    const int64_t s[3] = {c->N, strided ? c->E : L, strided ? L : c->E};
    TA_CHECK_OK(ta_tensor_empty(storage, 3, s));
    TA_CHECK_OK(ta_rand_uniform(storage, -1.0f, 1.0f, seed));
    *view = *storage;
    view->owned = NULL;
    if (strided) TA_CHECK_OK(ta_tensor_transpose(view, storage, 1, 2));
}

static void setup_case(setup *s, const wcase *c)
{
    memset(s, 0, sizeof *s);
    TA_CHECK_OK(ta_attention_create(&s->layer, c->layout, c->E, c->H, 11));
    ta_tensor kv_view;
    make_input(&s->qs, &s->q, c, c->Lq, c->strided, 1);
    make_input(&s->k, &kv_view, c, c->Lk, 0, 2);
    make_input(&s->v, &kv_view, c, c->Lk, 0, 3);
    make_input(&s->outs, &s->out, c, c->Lq, c->strided, 4);
    make_input(&s->dout, &kv_view, c, c->Lq, 0, 5);
    const int64_t qs[3] = {c->N, c->Lq, c->E}, ks[3] = {c->N, c->Lk, c->E};
    TA_CHECK_OK(ta_tensor_zeros(&s->dq, 3, qs));
    TA_CHECK_OK(ta_tensor_zeros(&s->dk, 3, ks));
    TA_CHECK_OK(ta_tensor_zeros(&s->dv, 3, ks));
    s->o.causal = c->causal;
    if (c->mask) {
        const int64_t m2[2] = {c->Lq, c->Lk}, m4[4] = {c->N, 1, c->Lq, c->Lk};
        TA_CHECK_OK(c->mask == 1 ? ta_tensor_empty(&s->mask, 2, m2) : ta_tensor_empty(&s->mask, 4, m4));
        float *m = s->mask.data;
        int64_t rows = ta_tensor_numel(&s->mask) / c->Lk;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < c->Lk; j++) /* row 1 of each batch blocks every key */
                m[r * c->Lk + j] = encode(r % c->Lq == 1 || (r + 2 * j) % 5 == 0, c->mask_mode,
                                          -0.25f * (float)(j % 3));
        s->o.mask = &s->mask;
        s->o.mask_mode = c->mask_mode;
    }
    if (c->kpm) {
        const int64_t ps[2] = {c->N, c->Lk};
        TA_CHECK_OK(ta_tensor_empty(&s->kpm, 2, ps));
        float *p = s->kpm.data;
        for (int64_t n = 0; n < c->N; n++)
            for (int64_t j = 0; j < c->Lk; j++)
                p[n * c->Lk + j] = encode(c->kpm == 1 ? j >= c->Lk - 1 - n : j % 3 == 1,
                                          c->kpm_mode, 0.0f);
        s->o.key_padding_mask = &s->kpm;
        s->o.key_padding_mode = c->kpm_mode;
    }
    if (c->weights) {
        const int64_t w4[4] = {c->N, c->H, c->Lq, c->Lk}, w3[3] = {c->N, c->Lq, c->Lk};
        TA_CHECK_OK(c->weights == 1 ? ta_tensor_empty(&s->w, 4, w4) : ta_tensor_empty(&s->w, 3, w3));
        s->o.weights = &s->w;
        s->o.average_weights = c->weights == 2;
    }
}

static void free_case(setup *s)
{
    ta_tensor *t[] = {&s->qs, &s->k, &s->v, &s->outs, &s->mask, &s->kpm, &s->w, &s->dout,
                      &s->dq, &s->dk, &s->dv};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) ta_tensor_free(t[i]);
    ta_attention_free(s->layer);
}

static size_t bytes_of(const ta_tensor *t) { return sizeof(float) * (size_t)ta_tensor_numel(t); }

/* A buffer of exactly `bytes`, one byte past a 64-byte boundary (the size query covers
 * any alignment), ending at a guard page (ta_guard_workspace). */
static ta_workspace workspace(ta_guard *g, size_t bytes)
{
    ta_workspace ws = ta_guard_workspace(g, bytes, 1);
    assert_non_null(ws.data);
    return ws;
}

static ta_status forward(setup *s) { return ta_attention_forward(&s->out, s->layer, &s->q, &s->k, &s->v, &s->o); }

static ta_status backward(setup *s)
{
    return ta_attention_backward(&s->dq, &s->dk, &s->dv, s->layer, &s->dout, &s->q, &s->k, &s->v, &s->o);
}

/* Every gradient the backward writes, concatenated: the parameters', then the inputs'. */
static float *grads(setup *s, size_t *n)
{
    size_t total = bytes_of(&s->dq) + bytes_of(&s->dk) + bytes_of(&s->dv);
    for (int i = 0; i < ta_attention_param_count(s->layer); i++) {
        ta_tensor g;
        TA_CHECK_OK(ta_attention_grad(&g, s->layer, ta_attention_param_name(s->layer, i)));
        total += bytes_of(&g);
    }
    unsigned char *all = malloc(total), *p = all;
    assert_non_null(all);
    for (int i = 0; i < ta_attention_param_count(s->layer); i++) {
        ta_tensor g;
        TA_CHECK_OK(ta_attention_grad(&g, s->layer, ta_attention_param_name(s->layer, i)));
        memcpy(p, g.data, bytes_of(&g));
        p += bytes_of(&g);
    }
    const ta_tensor *d[3] = {&s->dq, &s->dk, &s->dv};
    for (int i = 0; i < 3; i++) {
        memcpy(p, d[i]->data, bytes_of(d[i]));
        p += bytes_of(d[i]);
    }
    *n = total;
    return (float *)all;
}

/* Gradient buffers (parameters' and inputs') all set to v. */
static void fill_grads(setup *s, float v)
{
    for (int i = 0; i < ta_attention_param_count(s->layer); i++) {
        ta_tensor g;
        TA_CHECK_OK(ta_attention_grad(&g, s->layer, ta_attention_param_name(s->layer, i)));
        TA_CHECK_OK(ta_tensor_fill(&g, v));
    }
    TA_CHECK_OK(ta_tensor_fill(&s->dq, v));
    TA_CHECK_OK(ta_tensor_fill(&s->dk, v));
    TA_CHECK_OK(ta_tensor_fill(&s->dv, v));
}

/* -------------------------------------------------------------------- tests */

static void forward_bitwise(setup *s, const wcase *c)
{
    TA_CHECK_OK(forward(s));
    float *out0 = malloc(bytes_of(&s->outs)), *w0 = malloc(bytes_of(&s->w));
    memcpy(out0, s->outs.data, bytes_of(&s->outs));
    if (c->weights) memcpy(w0, s->w.data, bytes_of(&s->w));
    size_t bytes = 0;
    TA_CHECK_OK(ta_attention_workspace_size(&bytes, &s->out, s->layer, &s->q, &s->k, &s->v, &s->o));
    assert_true(bytes > 0);
    ta_guard block;
    s->o.workspace = workspace(&block, bytes);
    TA_CHECK_OK(ta_tensor_fill(&s->outs, NAN));
    if (c->weights) TA_CHECK_OK(ta_tensor_fill(&s->w, NAN));
    TA_CHECK_OK(forward(s));
    if (memcmp(out0, s->outs.data, bytes_of(&s->outs)))
        fail_msg("%s: out differs with a workspace", c->name);
    if (c->weights && memcmp(w0, s->w.data, bytes_of(&s->w)))
        fail_msg("%s: weights differ with a workspace", c->name);
    ta_guard_release(&block);
    free(out0);
    free(w0);
}

static void backward_bitwise(setup *s, const wcase *c)
{
    s->o.weights = NULL; /* ignored by the backward */
    TA_CHECK_OK(backward(s));
    size_t n0, n1;
    float *g0 = grads(s, &n0);
    size_t bytes = 0;
    TA_CHECK_OK(ta_attention_backward_workspace_size(&bytes, &s->dq, &s->dk, &s->dv, s->layer,
                                                     &s->dout, &s->q, &s->k, &s->v, &s->o));
    ta_guard block;
    s->o.workspace = workspace(&block, bytes);
    fill_grads(s, 0.0f);
    TA_CHECK_OK(backward(s));
    float *g1 = grads(s, &n1);
    assert_int_equal(n0, n1);
    if (memcmp(g0, g1, n0)) fail_msg("%s: gradients differ with a workspace", c->name);
    free(g0);
    free(g1);
    ta_guard_release(&block);
}

static void too_small(setup *s, const wcase *c)
{
    size_t fb = 0, bb = 0;
    TA_CHECK_OK(ta_attention_workspace_size(&fb, &s->out, s->layer, &s->q, &s->k, &s->v, &s->o));
    TA_CHECK_OK(ta_attention_backward_workspace_size(&bb, &s->dq, &s->dk, &s->dv, s->layer,
                                                     &s->dout, &s->q, &s->k, &s->v, &s->o));
    assert_true(bb > fb); /* the backward's arena holds the rerun forward's */
    ta_guard block;
    /* forward: one byte short; out and weights keep their sentinel */
    s->o.workspace = workspace(&block, fb - 1);
    TA_CHECK_OK(ta_tensor_fill(&s->outs, 3.25f));
    if (c->weights) TA_CHECK_OK(ta_tensor_fill(&s->w, 3.25f));
    TA_CHECK_ERR(forward(s), TA_EINVAL, "ta_attention_forward: the workspace has");
    for (int64_t i = 0; i < ta_tensor_numel(&s->outs); i++)
        assert_true(((const float *)s->outs.data)[i] == 3.25f);
    for (int64_t i = 0; c->weights && i < ta_tensor_numel(&s->w); i++)
        assert_true(((const float *)s->w.data)[i] == 3.25f);
    ta_guard_release(&block);
    /* backward: the forward's size is too small, and so is one byte short */
    fill_grads(s, 0.5f);
    size_t n0;
    float *g0 = grads(s, &n0);
    const size_t tries[2] = {fb, bb - 1};
    for (int t = 0; t < 2; t++) {
        s->o.workspace = workspace(&block, tries[t]);
        TA_CHECK_ERR(backward(s), TA_EINVAL, "ta_attention_backward: the workspace has");
        size_t n1;
        float *g1 = grads(s, &n1);
        if (memcmp(g0, g1, n0)) fail_msg("%s: a refused backward accumulated", c->name);
        free(g1);
        ta_guard_release(&block);
    }
    free(g0);
}

/* A check run on each case's freshly made layer and tensors (a cmocka test's state). */
typedef struct case_check {
    void (*body)(setup *s, const wcase *c);
} case_check;

static case_check FORWARD_BITWISE = {forward_bitwise}, BACKWARD_BITWISE = {backward_bitwise},
                  TOO_SMALL = {too_small};

static void test_each_case(void **state)
{
    const case_check *check = *state;
    for (size_t ci = 0; ci < NCASES; ci++) {
        setup s;
        setup_case(&s, &CASES[ci]);
        check->body(&s, &CASES[ci]);
        free_case(&s);
    }
}

/* The size queries check their arguments as the calls do (and name themselves). */
static void test_size_query_errors(void **state)
{
    (void)state;
    setup s;
    setup_case(&s, &CASES[2]);
    size_t bytes = 7;
    TA_CHECK_ERR(ta_attention_workspace_size(&bytes, &s.out, s.layer, &s.q, &s.k, &s.q, &s.o),
                 TA_ESHAPE, "ta_attention_workspace_size: keys has shape");
    TA_CHECK_ERR(ta_attention_workspace_size(NULL, &s.out, s.layer, &s.q, &s.k, &s.v, &s.o),
                 TA_EINVAL, "bytes is NULL");
    TA_CHECK_ERR(ta_attention_backward_workspace_size(&bytes, &s.dk, NULL, NULL, s.layer, &s.dout,
                                                      &s.q, &s.k, &s.v, &s.o),
                 TA_ESHAPE, "ta_attention_backward_workspace_size: d_queries has shape");
    assert_int_equal(bytes, 7); /* untouched on error */
    free_case(&s);
}

/* A workspace sharing memory with an input or an output of the call is refused before
 * anything is written (the layer would write its projections over it): keys inside the
 * forward's workspace, d_out inside the backward's. */
static void test_workspace_overlapping_a_tensor(void **state)
{
    (void)state;
    ta_attention *layer;
    TA_CHECK_OK(ta_attention_create(&layer, TA_LAYOUT_TORCH, 8, 2, 3));
    const int64_t xs[3] = {2, 5, 8}, n = 1 << 16;
    ta_tensor block, x, out, dx, view;
    TA_CHECK_OK(ta_tensor_zeros(&block, 1, &n));
    TA_CHECK_OK(ta_tensor_empty(&x, 3, xs));
    TA_CHECK_OK(ta_randn(&x, 1));
    TA_CHECK_OK(ta_tensor_full(&out, 3, xs, 7.0f));
    TA_CHECK_OK(ta_tensor_zeros(&dx, 3, xs));
    TA_CHECK_OK(ta_tensor_from_buffer(&view, (float *)block.data + 100, 3, xs, NULL));
    TA_CHECK_OK(ta_tensor_copy(&view, &x));
    ta_attention_opts o = {.workspace = {block.data, (size_t)n * sizeof(float)}};
    TA_CHECK_ERR(ta_attention_forward(&out, layer, &x, &view, &x, &o), TA_EINVAL,
                 "the workspace overlaps keys");
    assert_memory_equal(view.data, x.data, sizeof(float) * (size_t)ta_tensor_numel(&x));
    for (int64_t i = 0; i < ta_tensor_numel(&out); i++) assert_true(((float *)out.data)[i] == 7.0f);
    TA_CHECK_ERR(ta_attention_backward(&dx, NULL, NULL, layer, &view, &x, &x, &x, &o),
                 TA_EINVAL, "the workspace overlaps d_out");
    assert_memory_equal(view.data, x.data, sizeof(float) * (size_t)ta_tensor_numel(&x));
    for (int64_t i = 0; i < ta_tensor_numel(&dx); i++) assert_true(((float *)dx.data)[i] == 0.0f);
    ta_tensor *all[4] = {&block, &x, &out, &dx};
    for (int i = 0; i < 4; i++) ta_tensor_free(all[i]);
    ta_attention_free(layer);
}

/* ------------------------------------------------------------- allocations */

static long count(ta_status (*call)(setup *), setup *s)
{
    ta_test_alloc_count = 0;
    TA_CHECK_OK(call(s));
    return ta_test_alloc_count;
}

/* With a workspace a layer call allocates nothing at all, ta_sdpa's scratch included (it
 * is part of the layer's arena), for every case: both layouts, every mask kind, weights
 * (the reference path) or not (the fused path). Without one, the layer grows its own
 * block on the first call of a larger layout and reuses it after. */
static void allocation_case(const wcase *c)
{
    setup s;
    setup_case(&s, c);
    ta_attention_free(s.layer); /* made again under the counting hook, freed under it */
    ta_test_count_allocations();
    TA_CHECK_OK(ta_attention_create(&s.layer, c->layout, c->E, c->H, 11));
    size_t fb = 0, bb = 0;
    TA_CHECK_OK(ta_attention_workspace_size(&fb, &s.out, s.layer, &s.q, &s.k, &s.v, &s.o));
    TA_CHECK_OK(ta_attention_backward_workspace_size(&bb, &s.dq, &s.dk, &s.dv, s.layer, &s.dout,
                                                     &s.q, &s.k, &s.v, &s.o));
    ta_guard fblock, bblock;
    s.o.workspace = workspace(&fblock, fb);
    if (count(forward, &s) != 0) fail_msg("%s: forward with a workspace allocated", c->name);
    s.o.workspace = workspace(&bblock, bb);
    if (count(backward, &s) != 0) fail_msg("%s: backward with a workspace allocated", c->name);
    s.o.workspace = (ta_workspace){0};
    assert_int_equal(count(forward, &s), 1); /* the layer's block */
    assert_int_equal(count(forward, &s), 0);
    assert_int_equal(count(backward, &s), 1); /* grown: the backward's arena is larger */
    assert_int_equal(count(backward, &s), 0);
    assert_int_equal(count(forward, &s), 0);
    ta_attention_free(s.layer);
    s.layer = NULL;
    ta_test_stop_counting();
    ta_guard_release(&fblock);
    ta_guard_release(&bblock);
    free_case(&s);
}

static void test_allocations(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCASES; i++) allocation_case(&CASES[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        {.name = "forward_bitwise", .test_func = test_each_case, .initial_state = &FORWARD_BITWISE},
        {.name = "backward_bitwise", .test_func = test_each_case, .initial_state = &BACKWARD_BITWISE},
        {.name = "too_small", .test_func = test_each_case, .initial_state = &TOO_SMALL},
        cmocka_unit_test(test_size_query_errors),
        cmocka_unit_test(test_allocations),
        cmocka_unit_test(test_workspace_overlapping_a_tensor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
