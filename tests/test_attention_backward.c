/* ta-test: all-isas
 * Backward of the attention layers against float64 finite differences.
 *
 * The oracle is an independent float64 forward of each layout written here with naive
 * loops (the seed's SelfAttention: one D x D Linear per role shared by the heads,
 * masked_fill(mask == 0, -1e20) before scaling; nn.MultiheadAttention: in_proj with
 * bias, -inf for blocked keys, additive float masks, empty rows -> 0 as tensorattn
 * documents). The loss is L = sum(out * G) for a random G, so dL/dtheta is what
 * ta_attention_backward must accumulate with d_out = G; every parameter element and
 * every input element is checked against the central difference (h = 1e-6) of the
 * float64 oracle. Then: accumulation (two calls = 2x, bitwise), zero_grad, NULL input
 * gradients, self attention through one buffer passed three times, strided inputs,
 * thread-count independence (bitwise) and argument errors. */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-4 /* float32 analytic gradients vs float64 finite differences */

/* ------------------------------------------------------------ float64 oracle */

typedef struct oracle {
    ta_layout layout;
    int64_t E, H, D, N, Lq, Lk;
    double *p[5];      /* parameters in state_dict order */
    int64_t pn[5];     /* their sizes */
    int np;
    const double *vis; /* [N, H, Lq, Lk]: 1 visible, 0 masked (NULL: all visible) */
    const double *add; /* [N, H, Lq, Lk]: additive term (torch) or NULL */
} oracle;

#define IDX4(n, h, i, j) ((((n) * o->H + (h)) * o->Lq + (i)) * o->Lk + (j))

/* y [R, F] = x [R, F] W^T (+ b) for W [F, F] (F = in = out). */
static void linear64(double *y, const double *x, const double *W, const double *b, int64_t R,
                     int64_t F)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < F; j++) {
            double s = b ? b[j] : 0.0;
            for (int64_t k = 0; k < F; k++) s += x[r * F + k] * W[j * F + k];
            y[r * F + j] = s;
        }
}

static void oracle_forward(double *out, const oracle *o, const double *xq, const double *xk,
                           const double *xv)
{
    const int64_t E = o->E, H = o->H, D = o->D, N = o->N, Lq = o->Lq, Lk = o->Lk;
    double *qp = malloc(sizeof(double) * (size_t)(N * Lq * E));
    double *kp = malloc(sizeof(double) * (size_t)(N * Lk * E));
    double *vp = malloc(sizeof(double) * (size_t)(N * Lk * E));
    double *att = malloc(sizeof(double) * (size_t)(N * Lq * E));
    double *s = malloc(sizeof(double) * (size_t)(Lk + 1));
    if (o->layout == TA_LAYOUT_SEED) {
        /* [N, L, H, D] rows share one D x D weight */
        linear64(qp, xq, o->p[2], NULL, N * Lq * H, D);
        linear64(kp, xk, o->p[1], NULL, N * Lk * H, D);
        linear64(vp, xv, o->p[0], NULL, N * Lk * H, D);
    } else {
        for (int64_t r = 0; r < N * Lq; r++)
            for (int64_t j = 0; j < E; j++) {
                double a = o->p[1][j];
                for (int64_t c = 0; c < E; c++) a += xq[r * E + c] * o->p[0][j * E + c];
                qp[r * E + j] = a;
            }
        for (int64_t r = 0; r < N * Lk; r++)
            for (int64_t j = 0; j < E; j++) {
                double a = o->p[1][E + j], b = o->p[1][2 * E + j];
                for (int64_t c = 0; c < E; c++) {
                    a += xk[r * E + c] * o->p[0][(E + j) * E + c];
                    b += xv[r * E + c] * o->p[0][(2 * E + j) * E + c];
                }
                kp[r * E + j] = a;
                vp[r * E + j] = b;
            }
    }
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                double m = -INFINITY;
                for (int64_t j = 0; j < Lk; j++) {
                    double e = 0.0;
                    for (int64_t d = 0; d < D; d++)
                        e += qp[(n * Lq + i) * E + h * D + d] * kp[(n * Lk + j) * E + h * D + d];
                    int visible = !o->vis || o->vis[IDX4(n, h, i, j)] != 0.0;
                    if (o->layout == TA_LAYOUT_SEED) {
                        if (!visible) e = -1e20; /* masked_fill before the scaling */
                        e *= scale;
                    } else {
                        e = visible ? e * scale + (o->add ? o->add[IDX4(n, h, i, j)] : 0.0) : -INFINITY;
                    }
                    s[j] = e;
                    if (e > m) m = e;
                }
                double z = 0.0;
                for (int64_t j = 0; j < Lk; j++) {
                    s[j] = isinf(m) ? 0.0 : exp(s[j] - m);
                    z += s[j];
                }
                for (int64_t d = 0; d < D; d++) {
                    double a = 0.0;
                    for (int64_t j = 0; j < Lk; j++)
                        if (z > 0) a += s[j] / z * vp[(n * Lk + j) * E + h * D + d];
                    att[(n * Lq + i) * E + h * D + d] = a;
                }
            }
    linear64(out, att, o->p[o->np - 2], o->p[o->np - 1], N * Lq, E);
    free(qp); free(kp); free(vp); free(att); free(s);
}

/* ------------------------------------------------------------ helpers */

/* a contiguous float32 tensor as doubles */
static double *to64(const ta_tensor *t)
{
    int64_t n = ta_tensor_numel(t);
    assert_true(ta_tensor_is_contiguous(t));
    double *d = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) d[i] = ((const float *)t->data)[i];
    return d;
}

/* sum(out * G) of the oracle */
static double loss64(const oracle *o, const double *q, const double *k, const double *v,
                     const double *G)
{
    int64_t n = o->N * o->Lq * o->E;
    double *out = malloc(sizeof(double) * (size_t)n);
    oracle_forward(out, o, q, k, v);
    double l = 0.0;
    for (int64_t i = 0; i < n; i++) l += out[i] * G[i];
    free(out);
    return l;
}

/* central difference of the loss w.r.t. x[i] */
static double fd(const oracle *o, double *x, int64_t i, const double *q, const double *k,
                 const double *v, const double *G)
{
    const double h = 1e-6, x0 = x[i];
    x[i] = x0 + h;
    double lp = loss64(o, q, k, v, G);
    x[i] = x0 - h;
    double lm = loss64(o, q, k, v, G);
    x[i] = x0;
    return (lp - lm) / (2 * h);
}

typedef struct gcase {
    const char *name;
    ta_layout layout;
    int64_t E, H, N, Lq, Lk;
    int self;
    int causal;
    int mask;       /* 0 none; 1 keep/block [Lq, Lk] with one row fully masked (seed)
                       or bool block (torch); 2 additive float [Lq, Lk] (torch) */
    int kpm;        /* key padding mask [N, Lk]: 1 = seed keep with one batch all padded;
                       torch block with a non-suffix pattern */
} gcase;

/* The test's own visibility / additive arrays for the masks the layer receives. */
static void build_masks(const gcase *c, ta_tensor *mask, ta_tensor *kpm, ta_attention_opts *opts,
                        double *vis, double *add)
{
    const int64_t N = c->N, H = c->H, Lq = c->Lq, Lk = c->Lk;
    memset(opts, 0, sizeof *opts);
    opts->causal = c->causal;
    if (c->mask) {
        int64_t ms[2] = {Lq, Lk};
        TA_CHECK_OK(ta_tensor_empty(mask, 2, ms));
        float *m = mask->data;
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t j = 0; j < Lk; j++) {
                if (c->mask == 2) {
                    m[i * Lk + j] = (float)(0.7 * sin((double)(3 * i + 5 * j + 1)));
                } else {
                    int keep = ((i + 2 * j) % 3 != 0) || j == 0;
                    if (c->layout == TA_LAYOUT_SEED && i == Lq - 1) keep = 0; /* a uniform row */
                    m[i * Lk + j] = c->layout == TA_LAYOUT_SEED ? (float)keep : (float)!keep;
                }
            }
        opts->mask = mask;
        opts->mask_mode = c->mask == 2 ? TA_MASK_ADDITIVE
                          : c->layout == TA_LAYOUT_SEED ? TA_MASK_KEEP : TA_MASK_BLOCK;
    }
    if (c->kpm) {
        int64_t ks[2] = {N, Lk};
        TA_CHECK_OK(ta_tensor_empty(kpm, 2, ks));
        float *m = kpm->data;
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < Lk; j++) {
                int pad = c->layout == TA_LAYOUT_SEED ? (n == N - 1) /* all padded: uniform */
                                                      : (j == 1 && n == 0) || (j == Lk - 1);
                m[n * Lk + j] = c->layout == TA_LAYOUT_SEED ? (float)!pad : (float)pad;
            }
        opts->key_padding_mask = kpm;
        opts->key_padding_mode = c->layout == TA_LAYOUT_SEED ? TA_MASK_KEEP : TA_MASK_BLOCK;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++)
                for (int64_t j = 0; j < Lk; j++) {
                    int64_t x = ((n * H + h) * Lq + i) * Lk + j;
                    int visible = 1;
                    double a = 0.0;
                    if (c->causal && j > i) visible = 0;
                    if (c->mask == 2) a = ((float *)mask->data)[i * Lk + j];
                    else if (c->mask) {
                        float m = ((float *)mask->data)[i * Lk + j];
                        if (c->layout == TA_LAYOUT_SEED ? m == 0.0f : m != 0.0f) visible = 0;
                    }
                    if (c->kpm) {
                        float m = ((float *)kpm->data)[n * Lk + j];
                        if (c->layout == TA_LAYOUT_SEED ? m == 0.0f : m != 0.0f) visible = 0;
                    }
                    vis[x] = visible;
                    add[x] = a;
                }
}

static void randomize_params(ta_attention *l, uint64_t seed)
{
    /* biases non-zero (torch's default init leaves them 0) so their use is tested */
    for (int i = 0; i < ta_attention_param_count(l); i++) {
        ta_tensor p;
        TA_CHECK_OK(ta_attention_param(&p, l, ta_attention_param_name(l, i)));
        TA_CHECK_OK(ta_rand_uniform(&p, -0.8f, 0.8f, seed + (uint64_t)i));
    }
}

/* Every element of the gradient g (contiguous) against central differences over x;
 * returns the worst |g - fd|. */
static double check_fd(const char *cname, const char *what, const ta_tensor *g, const oracle *o,
                       double *x, const double *q64, const double *k64, const double *v64,
                       const double *G64)
{
    double worst = 0.0;
    for (int64_t e = 0; e < ta_tensor_numel(g); e++) {
        double want = fd(o, x, e, q64, k64, v64, G64);
        double got = ((const float *)g->data)[e];
        double err = fabs(got - want);
        worst = ta_test_worse(worst, err);
        if (!(err <= TOL * (1.0 + fabs(want))))
            fail_msg("%s: d %s[%lld] = %.8g, finite differences %.8g", cname, what, (long long)e,
                     got, want);
    }
    return worst;
}

static void run_gradcheck(const gcase *c)
{
    const int64_t E = c->E, H = c->H, N = c->N, Lq = c->Lq, Lk = c->self ? c->Lq : c->Lk;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, c->layout, E, H, 7));
    randomize_params(l, 100);
    int64_t qs[3] = {N, Lq, E}, ks[3] = {N, Lk, E};
    ta_tensor q, k, v, G, dq, dk, dv, mask = {0}, kpm = {0};
    TA_CHECK_OK(ta_tensor_empty(&q, 3, qs)); TA_CHECK_OK(ta_randn(&q, 11));
    TA_CHECK_OK(ta_tensor_empty(&k, 3, ks)); TA_CHECK_OK(ta_randn(&k, 12));
    TA_CHECK_OK(ta_tensor_empty(&v, 3, ks)); TA_CHECK_OK(ta_randn(&v, 13));
    TA_CHECK_OK(ta_tensor_empty(&G, 3, qs)); TA_CHECK_OK(ta_randn(&G, 14));
    TA_CHECK_OK(ta_tensor_zeros(&dq, 3, qs));
    TA_CHECK_OK(ta_tensor_zeros(&dk, 3, ks));
    TA_CHECK_OK(ta_tensor_zeros(&dv, 3, ks));
    const ta_tensor *kk = c->self ? &q : &k, *vv = c->self ? &q : &v;
    ta_tensor *dkk = c->self ? &dq : &dk, *dvv = c->self ? &dq : &dv;

    oracle o = {.layout = c->layout, .E = E, .H = H, .D = E / H, .N = N, .Lq = Lq, .Lk = Lk};
    double *vis = malloc(sizeof(double) * (size_t)(N * H * Lq * Lk));
    double *add = malloc(sizeof(double) * (size_t)(N * H * Lq * Lk));
    ta_attention_opts opts;
    build_masks(c, &mask, &kpm, &opts, vis, add);
    o.vis = vis;
    o.add = c->mask == 2 ? add : NULL;
    o.np = ta_attention_param_count(l);
    for (int i = 0; i < o.np; i++) {
        ta_tensor p;
        TA_CHECK_OK(ta_attention_param(&p, l, ta_attention_param_name(l, i)));
        o.p[i] = to64(&p);
        o.pn[i] = ta_tensor_numel(&p);
    }
    TA_CHECK_OK(ta_attention_backward(&dq, dkk, dvv, l, &G, &q, kk, vv, &opts));

    double *q64 = to64(&q), *k64 = c->self ? q64 : to64(&k), *v64 = c->self ? q64 : to64(&v);
    double *G64 = to64(&G);
    double worst = 0.0;
    for (int i = 0; i < o.np; i++) {
        ta_tensor g;
        const char *name = ta_attention_param_name(l, i);
        TA_CHECK_OK(ta_attention_grad(&g, l, name));
        worst = ta_test_worse(worst, check_fd(c->name, name, &g, &o, o.p[i], q64, k64, v64, G64));
    }
    struct { const char *name; double *x; const ta_tensor *g; } ins[3] = {
        {"queries", q64, &dq}, {"keys", k64, &dk}, {"values", v64, &dv}};
    /* self attention: the one input's total derivative, through one buffer */
    for (int t = 0; t < (c->self ? 1 : 3); t++)
        worst = ta_test_worse(worst, check_fd(c->name, ins[t].name, ins[t].g, &o, ins[t].x, q64, k64, v64, G64));
    print_message("%-28s max |grad - fd| %.2e\n", c->name, worst);
    for (int i = 0; i < o.np; i++) free(o.p[i]);
    free(q64);
    if (!c->self) { free(k64); free(v64); }
    free(G64); free(vis); free(add);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v); ta_tensor_free(&G);
    ta_tensor_free(&dq); ta_tensor_free(&dk); ta_tensor_free(&dv);
    ta_tensor_free(&mask); ta_tensor_free(&kpm);
    ta_attention_free(l);
}

static const gcase gradcheck_cases[] = {
    {"seed self", TA_LAYOUT_SEED, 4, 2, 2, 3, 3, 1, 0, 0, 0},
    {"seed cross", TA_LAYOUT_SEED, 6, 3, 2, 3, 4, 0, 0, 0, 0},
    {"seed cross mask+uniform row", TA_LAYOUT_SEED, 4, 2, 2, 3, 4, 0, 0, 1, 0},
    {"seed kpm all padded batch", TA_LAYOUT_SEED, 4, 2, 2, 3, 4, 0, 0, 0, 1},
    {"seed self causal", TA_LAYOUT_SEED, 4, 2, 1, 4, 4, 1, 1, 0, 0},
    {"torch self", TA_LAYOUT_TORCH, 4, 2, 2, 3, 3, 1, 0, 0, 0},
    {"torch cross", TA_LAYOUT_TORCH, 6, 3, 2, 3, 4, 0, 0, 0, 0},
    {"torch cross bool mask", TA_LAYOUT_TORCH, 4, 2, 2, 3, 4, 0, 0, 1, 0},
    {"torch cross float mask+kpm", TA_LAYOUT_TORCH, 4, 2, 2, 3, 4, 0, 0, 2, 1},
    {"torch self causal", TA_LAYOUT_TORCH, 4, 1, 2, 4, 4, 1, 1, 0, 0},
    {"torch self causal+kpm", TA_LAYOUT_TORCH, 4, 2, 2, 4, 4, 1, 1, 0, 1},
};

/* Every case of the table in one layout. */
static void gradcheck_layout(ta_layout layout)
{
    int ran = 0;
    for (size_t i = 0; i < sizeof gradcheck_cases / sizeof gradcheck_cases[0]; i++)
        if (gradcheck_cases[i].layout == layout) {
            run_gradcheck(&gradcheck_cases[i]);
            ran++;
        }
    assert_true(ran >= 5);
}

static void test_seed_layout_gradients_match_finite_differences(void **state)
{
    (void)state;
    gradcheck_layout(TA_LAYOUT_SEED);
}

static void test_torch_layout_gradients_match_finite_differences(void **state)
{
    (void)state;
    gradcheck_layout(TA_LAYOUT_TORCH);
}

/* ------------------------------------------------------- accumulation and API */

typedef struct snapshot {
    float *g[5];
    int64_t n[5];
    int np;
} snapshot;

static void snap(snapshot *s, const ta_attention *l)
{
    s->np = ta_attention_param_count(l);
    for (int i = 0; i < s->np; i++) {
        ta_tensor g;
        TA_CHECK_OK(ta_attention_grad(&g, l, ta_attention_param_name(l, i)));
        s->n[i] = ta_tensor_numel(&g);
        s->g[i] = malloc(sizeof(float) * (size_t)s->n[i]);
        memcpy(s->g[i], g.data, sizeof(float) * (size_t)s->n[i]);
    }
}

static void snap_free(snapshot *s)
{
    for (int i = 0; i < s->np; i++) free(s->g[i]);
}

static void test_backward_accumulates_like_pytorch_grad(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *l;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, 8, 2, 3));
        randomize_params(l, 5);
        int64_t s[3] = {2, 5, 8};
        ta_tensor x, G, dx;
        TA_CHECK_OK(ta_tensor_empty(&x, 3, s)); TA_CHECK_OK(ta_randn(&x, 1));
        TA_CHECK_OK(ta_tensor_empty(&G, 3, s)); TA_CHECK_OK(ta_randn(&G, 2));
        TA_CHECK_OK(ta_tensor_zeros(&dx, 3, s));
        ta_attention_opts o = {0};
        o.causal = TA_CAUSAL_TOP_LEFT;
        /* fresh layers start with zero gradients */
        snapshot z, one, two;
        snap(&z, l);
        for (int i = 0; i < z.np; i++)
            for (int64_t e = 0; e < z.n[i]; e++) assert_true(z.g[i][e] == 0.0f);
        TA_CHECK_OK(ta_attention_backward(&dx, &dx, &dx, l, &G, &x, &x, &x, &o));
        snap(&one, l);
        float *dx1 = malloc(sizeof(float) * 80);
        memcpy(dx1, dx.data, sizeof(float) * 80);
        TA_CHECK_OK(ta_attention_backward(&dx, &dx, &dx, l, &G, &x, &x, &x, &o));
        snap(&two, l);
        for (int i = 0; i < one.np; i++)
            for (int64_t e = 0; e < one.n[i]; e++) assert_true(two.g[i][e] == 2.0f * one.g[i][e]);
        /* dx gathers three contributions per call, so the second call rounds differently
         * from 2x (((s + a) + b) + c): equal to float rounding */
        for (int e = 0; e < 80; e++)
            assert_true(fabsf(((float *)dx.data)[e] - 2.0f * dx1[e]) <= 1e-6f * (1.0f + fabsf(dx1[e])));
        /* zero_grad, then one call reproduces the first bit for bit */
        TA_CHECK_OK(ta_attention_zero_grad(l));
        snapshot again;
        snap(&again, l);
        for (int i = 0; i < again.np; i++)
            for (int64_t e = 0; e < again.n[i]; e++) assert_true(again.g[i][e] == 0.0f);
        snap_free(&again);
        TA_CHECK_OK(ta_attention_backward(NULL, NULL, NULL, l, &G, &x, &x, &x, &o));
        snap(&again, l);
        for (int i = 0; i < one.np; i++)
            assert_memory_equal(again.g[i], one.g[i], sizeof(float) * (size_t)one.n[i]);
        snap_free(&z); snap_free(&one); snap_free(&two); snap_free(&again);
        free(dx1);
        ta_tensor_free(&x); ta_tensor_free(&G); ta_tensor_free(&dx);
        ta_attention_free(l);
    }
}

/* Strided inputs, d_out and input gradients (views of permuted buffers) give the same
 * gradients as contiguous ones, and the thread count changes no bit. */
static void test_strided_and_thread_independent(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        const int64_t N = 3, L = 7, E = 16, Lk = 9;
        int64_t qs[3] = {N, L, E}, ks[3] = {N, Lk, E};
        ta_tensor q, k, v, G, dq, dk, dv;
        TA_CHECK_OK(ta_tensor_empty(&q, 3, qs)); TA_CHECK_OK(ta_randn(&q, 21));
        TA_CHECK_OK(ta_tensor_empty(&k, 3, ks)); TA_CHECK_OK(ta_randn(&k, 22));
        TA_CHECK_OK(ta_tensor_empty(&v, 3, ks)); TA_CHECK_OK(ta_randn(&v, 23));
        TA_CHECK_OK(ta_tensor_empty(&G, 3, qs)); TA_CHECK_OK(ta_randn(&G, 24));
        TA_CHECK_OK(ta_tensor_zeros(&dq, 3, qs));
        TA_CHECK_OK(ta_tensor_zeros(&dk, 3, ks));
        TA_CHECK_OK(ta_tensor_zeros(&dv, 3, ks));
        ta_attention *l;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, E, 4, 9));
        randomize_params(l, 50);
        int saved = ta_get_num_threads();
        TA_CHECK_OK(ta_set_num_threads(1));
        TA_CHECK_OK(ta_attention_backward(&dq, &dk, &dv, l, &G, &q, &k, &v, NULL));
        snapshot ref;
        snap(&ref, l);

        /* the same values in [L, N, E]-ordered memory, seen as [N, L, E] views */
        int64_t qsT[3] = {L, N, E}, ksT[3] = {Lk, N, E};
        ta_tensor bq, bk, bv, bG, bdq, bdk, bdv, vq, vk, vvv, vG, vdq, vdk, vdv;
        TA_CHECK_OK(ta_tensor_empty(&bq, 3, qsT)); TA_CHECK_OK(ta_tensor_empty(&bG, 3, qsT));
        TA_CHECK_OK(ta_tensor_empty(&bk, 3, ksT)); TA_CHECK_OK(ta_tensor_empty(&bv, 3, ksT));
        TA_CHECK_OK(ta_tensor_zeros(&bdq, 3, qsT));
        TA_CHECK_OK(ta_tensor_zeros(&bdk, 3, ksT)); TA_CHECK_OK(ta_tensor_zeros(&bdv, 3, ksT));
        TA_CHECK_OK(ta_tensor_transpose(&vq, &bq, 0, 1)); TA_CHECK_OK(ta_tensor_copy(&vq, &q));
        TA_CHECK_OK(ta_tensor_transpose(&vk, &bk, 0, 1)); TA_CHECK_OK(ta_tensor_copy(&vk, &k));
        TA_CHECK_OK(ta_tensor_transpose(&vvv, &bv, 0, 1)); TA_CHECK_OK(ta_tensor_copy(&vvv, &v));
        TA_CHECK_OK(ta_tensor_transpose(&vG, &bG, 0, 1)); TA_CHECK_OK(ta_tensor_copy(&vG, &G));
        TA_CHECK_OK(ta_tensor_transpose(&vdq, &bdq, 0, 1));
        TA_CHECK_OK(ta_tensor_transpose(&vdk, &bdk, 0, 1));
        TA_CHECK_OK(ta_tensor_transpose(&vdv, &bdv, 0, 1));
        TA_CHECK_OK(ta_set_num_threads(2));
        TA_CHECK_OK(ta_attention_zero_grad(l));
        TA_CHECK_OK(ta_attention_backward(&vdq, &vdk, &vdv, l, &vG, &vq, &vk, &vvv, NULL));
        TA_CHECK_OK(ta_set_num_threads(saved));
        snapshot got;
        snap(&got, l);
        for (int i = 0; i < ref.np; i++)
            assert_memory_equal(got.g[i], ref.g[i], sizeof(float) * (size_t)ref.n[i]);
        ta_tensor cq, ck, cv;
        TA_CHECK_OK(ta_tensor_contiguous(&cq, &vdq));
        TA_CHECK_OK(ta_tensor_contiguous(&ck, &vdk));
        TA_CHECK_OK(ta_tensor_contiguous(&cv, &vdv));
        assert_memory_equal(cq.data, dq.data, sizeof(float) * (size_t)(N * L * E));
        assert_memory_equal(ck.data, dk.data, sizeof(float) * (size_t)(N * Lk * E));
        assert_memory_equal(cv.data, dv.data, sizeof(float) * (size_t)(N * Lk * E));
        snap_free(&ref); snap_free(&got);
        ta_tensor *all[] = {&q, &k, &v, &G, &dq, &dk, &dv, &bq, &bk, &bv, &bG, &bdq, &bdk, &bdv,
                            &cq, &ck, &cv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ta_tensor_free(all[i]);
        ta_attention_free(l);
    }
}

static void test_backward_errors_name_the_argument(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, 8, 2, 1));
    int64_t s[3] = {2, 5, 8}, bad[3] = {2, 4, 8};
    ta_tensor x, G, Gbad, dbad;
    TA_CHECK_OK(ta_tensor_zeros(&x, 3, s));
    TA_CHECK_OK(ta_tensor_zeros(&G, 3, s));
    TA_CHECK_OK(ta_tensor_zeros(&Gbad, 3, bad));
    TA_CHECK_OK(ta_tensor_zeros(&dbad, 3, bad));
    TA_CHECK_ERR(ta_attention_backward(NULL, NULL, NULL, NULL, &G, &x, &x, &x, NULL), TA_EINVAL,
                 "layer is NULL");
    TA_CHECK_ERR(ta_attention_backward(NULL, NULL, NULL, l, &Gbad, &x, &x, &x, NULL), TA_ESHAPE,
                 "d_out has shape [2, 4, 8], expected [N, Lq, E] = [2, 5, 8]");
    TA_CHECK_ERR(ta_attention_backward(NULL, &dbad, NULL, l, &G, &x, &x, &x, NULL), TA_ESHAPE,
                 "d_keys has shape [2, 4, 8] but keys has [2, 5, 8]");
    TA_CHECK_ERR(ta_attention_backward(NULL, NULL, NULL, l, NULL, &x, &x, &x, NULL), TA_EINVAL,
                 "d_out");
    ta_tensor bcast; /* a non-empty gradient whose elements alias is still refused */
    const int64_t bstride[3] = {0, 8, 1};
    TA_CHECK_OK(ta_tensor_from_buffer(&bcast, G.data, 3, s, bstride));
    TA_CHECK_ERR(ta_attention_backward(&bcast, NULL, NULL, l, &G, &x, &x, &x, NULL), TA_EINVAL,
                 "d_queries has stride 0 in dim 0");
    ta_tensor g;
    TA_CHECK_ERR(ta_attention_grad(&g, l, "fc_out.bias"), TA_EINVAL, "no parameter 'fc_out.bias'");
    TA_CHECK_ERR(ta_attention_zero_grad(NULL), TA_EINVAL, "layer is NULL");
    /* nothing was accumulated by the failed calls */
    TA_CHECK_OK(ta_attention_grad(&g, l, "out_proj.bias"));
    for (int i = 0; i < 8; i++) assert_true(((float *)g.data)[i] == 0.0f);
    ta_tensor_free(&x); ta_tensor_free(&G); ta_tensor_free(&Gbad); ta_tensor_free(&dbad);
    ta_attention_free(l);
}

/* Empty inputs whose gradient views have NumPy's strides for a zero-size array (all 0:
 * np.zeros((2, 0, 8)).strides == (0, 0, 0)): such a view has no element to alias, so
 * the backward takes it, as the forward takes such an out. With no keys the attention
 * output is 0 and the layer's output is out_proj.bias: out_proj.bias gets the sum of
 * d_out over (n, q) and nothing else gets a gradient. With no queries nothing does. */
static void test_empty_gradients_with_zero_strides(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, 8, 2, 5));
    const int64_t zs[3] = {0, 0, 0};
    float cell = 0.0f;
    for (int no_queries = 0; no_queries < 2; no_queries++) {
        const int64_t qs[3] = {2, no_queries ? 0 : 5, 8}, ks[3] = {2, no_queries ? 3 : 0, 8};
        ta_tensor q, k, G, dq, dk, dv, x0, out0;
        TA_CHECK_OK(ta_tensor_empty(&q, 3, qs)); TA_CHECK_OK(ta_randn(&q, 31));
        TA_CHECK_OK(ta_tensor_empty(&k, 3, ks)); TA_CHECK_OK(ta_randn(&k, 32));
        TA_CHECK_OK(ta_tensor_empty(&G, 3, qs)); TA_CHECK_OK(ta_randn(&G, 33));
        TA_CHECK_OK(ta_tensor_zeros(&dq, 3, qs));
        TA_CHECK_OK(ta_tensor_zeros(&dk, 3, ks));
        TA_CHECK_OK(ta_tensor_zeros(&dv, 3, ks));
        /* the empty one of each pair as NumPy lays it out */
        TA_CHECK_OK(ta_tensor_from_buffer(&x0, &cell, 3, no_queries ? qs : ks, zs));
        TA_CHECK_OK(ta_tensor_from_buffer(&out0, &cell, 3, qs, zs));
        if (no_queries) TA_CHECK_OK(ta_attention_forward(&out0, l, &x0, &k, &k, NULL));
        TA_CHECK_OK(ta_attention_zero_grad(l));
        if (no_queries)
            TA_CHECK_OK(ta_attention_backward(&x0, &dk, &dv, l, &x0, &x0, &k, &k, NULL));
        else
            TA_CHECK_OK(ta_attention_backward(&dq, &x0, &x0, l, &G, &q, &x0, &x0, NULL));
        for (int i = 0; i < ta_attention_param_count(l); i++) {
            const char *name = ta_attention_param_name(l, i);
            ta_tensor g;
            TA_CHECK_OK(ta_attention_grad(&g, l, name));
            const float *gp = g.data;
            for (int64_t j = 0; j < ta_tensor_numel(&g); j++) {
                double want = 0.0;
                if (!no_queries && !strcmp(name, "out_proj.bias"))
                    for (int64_t r = 0; r < qs[0] * qs[1]; r++)
                        want += ((const float *)G.data)[r * 8 + j];
                assert_true(fabs(gp[j] - want) <= 1e-5);
            }
        }
        const ta_tensor *grads[3] = {&dq, &dk, &dv};
        for (int t = 0; t < 3; t++)
            for (int64_t j = 0; j < ta_tensor_numel(grads[t]); j++)
                assert_true(((const float *)grads[t]->data)[j] == 0.0f);
        ta_tensor *all[] = {&q, &k, &G, &dq, &dk, &dv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ta_tensor_free(all[i]);
    }
    ta_attention_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_layout_gradients_match_finite_differences),
        cmocka_unit_test(test_torch_layout_gradients_match_finite_differences),
        cmocka_unit_test(test_backward_accumulates_like_pytorch_grad),
        cmocka_unit_test(test_strided_and_thread_independent),
        cmocka_unit_test(test_backward_errors_name_the_argument),
        cmocka_unit_test(test_empty_gradients_with_zero_strides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
