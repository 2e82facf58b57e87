/* Attention layers (seed and torch layouts): forward against float64 plain-loop
 * implementations of both PyTorch modules written here, every mask kind, weights,
 * initialisation, save/load, workspace reuse, thread invariance and error messages.
 * ta-test: all-isas */
#include "ta_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ float64 oracles */

/* A problem: inputs contiguous [N, L, E] floats, parameters as doubles. */
typedef struct ref_problem {
    int64_t N, Lq, Lk, E, H;
    const float *q, *k, *v;
    /* Per (n, h, i, j): additive term (0, -inf or a float). Seed: only 0 / -inf are used,
     * -inf meaning "mask == 0" (filled with -1e20 before the scaling). NULL: none. */
    const double *bias4;
} ref_problem;

static double *param_f64(const ta_attention *l, const char *name, int64_t *count)
{
    ta_tensor t;
    TA_CHECK_OK(ta_attention_param(&t, l, name));
    int64_t n = ta_tensor_numel(&t);
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = ((const float *)t.data)[i];
    if (count) *count = n;
    return d;
}

/* y[r, o] = sum_i x[r, i] W[o, i] + b[o] */
static void linear_ref(double *y, const double *x, int64_t rows, int64_t in, int64_t outf,
                       const double *W, const double *b)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < outf; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < in; i++) s += x[r * in + i] * W[o * in + i];
            y[r * outf + o] = s;
        }
}

/* softmax over n entries in place; an all -inf row becomes zeros (our torch convention). */
static void softmax_ref(double *x, int64_t n)
{
    double m = -INFINITY;
    for (int64_t j = 0; j < n; j++) if (x[j] > m) m = x[j];
    if (m == -INFINITY) {
        for (int64_t j = 0; j < n; j++) x[j] = 0.0;
        return;
    }
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += (x[j] = exp(x[j] - m));
    for (int64_t j = 0; j < n; j++) x[j] /= s;
}

/* The seed's SelfAttention.forward, literally, in double. out [N, Lq, E]; att [N, H, Lq, Lk]. */
static void seed_ref(double *out, double *att, const ta_attention *l, const ref_problem *p)
{
    const int64_t N = p->N, Lq = p->Lq, Lk = p->Lk, E = p->E, H = p->H, D = E / H;
    double *Wv = param_f64(l, "values.weight", NULL), *Wk = param_f64(l, "keys.weight", NULL);
    double *Wq = param_f64(l, "queries.weight", NULL), *Wo = param_f64(l, "fc_out.weight", NULL);
    double *bo = param_f64(l, "fc_out.bias", NULL);
    double *xq = malloc(sizeof(double) * (size_t)(N * Lq * E + 1));
    double *xk = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *xv = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *qp = malloc(sizeof(double) * (size_t)(N * Lq * E + 1));
    double *kp = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *vp = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *heads = calloc((size_t)(N * Lq * E + 1), sizeof(double));
    for (int64_t i = 0; i < N * Lq * E; i++) xq[i] = p->q[i];
    for (int64_t i = 0; i < N * Lk * E; i++) { xk[i] = p->k[i]; xv[i] = p->v[i]; }
    /* reshape(N, L, H, D) then Linear(D, D) on the last axis: rows (n, l, h) */
    linear_ref(qp, xq, N * Lq * H, D, D, Wq, NULL);
    linear_ref(kp, xk, N * Lk * H, D, D, Wk, NULL);
    linear_ref(vp, xv, N * Lk * H, D, D, Wv, NULL);
    double *row = malloc(sizeof(double) * (size_t)(Lk + 1));
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                for (int64_t j = 0; j < Lk; j++) {
                    double e = 0.0; /* einsum nqhd,nkhd->nhqk */
                    for (int64_t d = 0; d < D; d++)
                        e += qp[((n * Lq + i) * H + h) * D + d] * kp[((n * Lk + j) * H + h) * D + d];
                    if (p->bias4 && p->bias4[((n * H + h) * Lq + i) * Lk + j] == -INFINITY)
                        e = (double)-1e20f; /* masked_fill(mask == 0, -1e20) */
                    row[j] = e / sqrt((double)D);
                }
                softmax_ref(row, Lk);
                for (int64_t j = 0; j < Lk; j++) {
                    if (att) att[((n * H + h) * Lq + i) * Lk + j] = row[j];
                    for (int64_t d = 0; d < D; d++) /* einsum nhql,nlhd->nqhd */
                        heads[((n * Lq + i) * H + h) * D + d] += row[j] * vp[((n * Lk + j) * H + h) * D + d];
                }
            }
    linear_ref(out, heads, N * Lq, E, E, Wo, bo);
    free(Wv); free(Wk); free(Wq); free(Wo); free(bo);
    free(xq); free(xk); free(xv); free(qp); free(kp); free(vp); free(heads); free(row);
}

/* nn.MultiheadAttention(batch_first=True).forward in double; all-blocked rows give
 * zeros (PyTorch: NaN). att [N, H, Lq, Lk] per head. */
static void torch_ref(double *out, double *att, const ta_attention *l, const ref_problem *p)
{
    const int64_t N = p->N, Lq = p->Lq, Lk = p->Lk, E = p->E, H = p->H, D = E / H;
    double *Win = param_f64(l, "in_proj_weight", NULL), *bin = param_f64(l, "in_proj_bias", NULL);
    double *Wo = param_f64(l, "out_proj.weight", NULL), *bo = param_f64(l, "out_proj.bias", NULL);
    double *xq = malloc(sizeof(double) * (size_t)(N * Lq * E + 1));
    double *xk = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *xv = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *qp = malloc(sizeof(double) * (size_t)(N * Lq * E + 1));
    double *kp = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *vp = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *heads = calloc((size_t)(N * Lq * E + 1), sizeof(double));
    for (int64_t i = 0; i < N * Lq * E; i++) xq[i] = p->q[i];
    for (int64_t i = 0; i < N * Lk * E; i++) { xk[i] = p->k[i]; xv[i] = p->v[i]; }
    linear_ref(qp, xq, N * Lq, E, E, Win, bin);
    linear_ref(kp, xk, N * Lk, E, E, Win + E * E, bin + E);
    linear_ref(vp, xv, N * Lk, E, E, Win + 2 * E * E, bin + 2 * E);
    double *row = malloc(sizeof(double) * (size_t)(Lk + 1));
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                for (int64_t j = 0; j < Lk; j++) {
                    double e = 0.0;
                    for (int64_t d = 0; d < D; d++)
                        e += qp[(n * Lq + i) * E + h * D + d] * kp[(n * Lk + j) * E + h * D + d];
                    row[j] = e / sqrt((double)D) + (p->bias4 ? p->bias4[((n * H + h) * Lq + i) * Lk + j] : 0.0);
                }
                softmax_ref(row, Lk);
                for (int64_t j = 0; j < Lk; j++) {
                    if (att) att[((n * H + h) * Lq + i) * Lk + j] = row[j];
                    for (int64_t d = 0; d < D; d++)
                        heads[(n * Lq + i) * E + h * D + d] += row[j] * vp[(n * Lk + j) * E + h * D + d];
                }
            }
    linear_ref(out, heads, N * Lq, E, E, Wo, bo);
    free(Win); free(bin); free(Wo); free(bo);
    free(xq); free(xk); free(xv); free(qp); free(kp); free(vp); free(heads); free(row);
}

/* ------------------------------------------------------------------ helpers */

static ta_tensor randn3(int64_t N, int64_t L, int64_t E, uint64_t seed)
{
    int64_t s[3] = {N, L, E};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_empty(&t, 3, s));
    TA_CHECK_OK(ta_randn(&t, seed));
    return t;
}

/* Runs the layer and its oracle; checks out (and weights when want_w: 1 per head, 2
 * averaged) within tol. Returns the max error seen. */
static double run_case_at(int line, ta_attention *l, const ta_tensor *q, const ta_tensor *k, const ta_tensor *v,
                       const ta_attention_opts *opts_in, const double *bias4, int want_w, double tol)
{
    const int64_t N = q->shape[0], Lq = q->shape[1], Lk = k->shape[1];
    const int64_t E = ta_attention_embed_size(l), H = ta_attention_heads(l);
    ta_attention_opts opts = opts_in ? *opts_in : (ta_attention_opts){0};
    ta_tensor out, w = {0};
    int64_t os[3] = {N, Lq, E};
    TA_CHECK_OK(ta_tensor_full(&out, 3, os, NAN));
    if (want_w == 1) {
        int64_t ws[4] = {N, H, Lq, Lk};
        TA_CHECK_OK(ta_tensor_full(&w, 4, ws, NAN));
    } else if (want_w == 2) {
        int64_t ws[3] = {N, Lq, Lk};
        TA_CHECK_OK(ta_tensor_full(&w, 3, ws, NAN));
    }
    if (want_w) {
        opts.weights = &w;
        opts.average_weights = want_w == 2;
    }
    TA_CHECK_OK(ta_attention_forward(&out, l, q, k, v, &opts));

    /* The oracle reads contiguous inputs. */
    ta_tensor qc, kc, vc;
    TA_CHECK_OK(ta_tensor_contiguous(&qc, q));
    TA_CHECK_OK(ta_tensor_contiguous(&kc, k));
    TA_CHECK_OK(ta_tensor_contiguous(&vc, v));
    ref_problem p = {N, Lq, Lk, E, H, qc.data, kc.data, vc.data, bias4};
    double *ref = malloc(sizeof(double) * (size_t)(N * Lq * E + 1));
    double *att = malloc(sizeof(double) * (size_t)(N * H * Lq * Lk + 1));
    if (ta_attention_layout(l) == TA_LAYOUT_SEED) seed_ref(ref, att, l, &p);
    else torch_ref(ref, att, l, &p);
    double err = ta_test_max_abs_diff(out.data, ref, (size_t)(N * Lq * E));
    if (!(err <= tol)) fail_msg("line %d: output differs from the float64 oracle by %g (tol %g)", line, err, tol);
    if (want_w == 1) {
        double werr = ta_test_max_abs_diff(w.data, att, (size_t)(N * H * Lq * Lk));
        if (!(werr <= tol)) fail_msg("line %d: weights differ by %g (tol %g)", line, werr, tol);
    } else if (want_w == 2) {
        double *avg = calloc((size_t)(N * Lq * Lk + 1), sizeof(double));
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t ij = 0; ij < Lq * Lk; ij++) avg[n * Lq * Lk + ij] += att[(n * H + h) * Lq * Lk + ij] / (double)H;
        double werr = ta_test_max_abs_diff(w.data, avg, (size_t)(N * Lq * Lk));
        if (!(werr <= tol)) fail_msg("line %d: averaged weights differ by %g (tol %g)", line, werr, tol);
        free(avg);
    }
    free(ref);
    free(att);
    ta_tensor_free(&qc); ta_tensor_free(&kc); ta_tensor_free(&vc);
    ta_tensor_free(&out);
    ta_tensor_free(&w);
    return err;
}

#define run_case(...) run_case_at(__LINE__, __VA_ARGS__)

/* A [N, H, Lq, Lk] additive table from a boolean predicate filled by the caller. */
static double *bias_new(int64_t N, int64_t H, int64_t Lq, int64_t Lk)
{
    return calloc((size_t)(N * H * Lq * Lk + 1), sizeof(double));
}
#define B4(b, n, h, i, j) (b)[(((n) * H + (h)) * Lq + (i)) * Lk + (j)]

/* ------------------------------------------------------------------- seed */

static void test_seed_example_self_attention(void **state)
{
    (void)state;
    /* The seed's example: embed 8, heads 2, batch 1, seq 4, x used for all three. */
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 42));
    ta_tensor x;
    int64_t s[3] = {1, 4, 8};
    TA_CHECK_OK(ta_tensor_empty(&x, 3, s));
    TA_CHECK_OK(ta_rand(&x, 7)); /* torch.rand */
    run_case(l, &x, &x, &x, NULL, NULL, 0, 1e-6);
    run_case(l, &x, &x, &x, NULL, NULL, 1, 1e-6);
    ta_tensor_free(&x);
    ta_attention_free(l);
}

static void test_seed_large_cross_attention(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 64, 8, 3));
    ta_tensor q = randn3(3, 7, 64, 11), k = randn3(3, 13, 64, 12), v = randn3(3, 13, 64, 13);
    run_case(l, &q, &k, &v, NULL, NULL, 0, 1e-5);
    run_case(l, &q, &k, &v, NULL, NULL, 1, 1e-5);
    run_case(l, &q, &k, &v, NULL, NULL, 2, 1e-5);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

static void test_seed_causal_tril_mask(void **state)
{
    (void)state;
    const int64_t N = 2, H = 8, Lq = 17, Lk = 17, E = 64;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, E, H, 5));
    ta_tensor x = randn3(N, Lq, E, 21);
    /* mask = torch.tril(torch.ones(L, L)): nonzero = keep */
    int64_t ms[2] = {Lq, Lk};
    ta_tensor m;
    TA_CHECK_OK(ta_tensor_ones(&m, 2, ms));
    TA_CHECK_OK(ta_tensor_tril(&m, 0));
    double *b = bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = i + 1; j < Lk; j++) B4(b, n, h, i, j) = -INFINITY;
    ta_attention_opts o = {.mask = &m, .mask_mode = TA_MASK_KEEP};
    run_case(l, &x, &x, &x, &o, b, 1, 1e-5);
    /* the same through the causal flag, and through the block convention (triu(1)) */
    ta_attention_opts oc = {.causal = TA_CAUSAL_TOP_LEFT};
    run_case(l, &x, &x, &x, &oc, b, 2, 1e-5);
    TA_CHECK_OK(ta_tensor_fill(&m, 1.0f));
    TA_CHECK_OK(ta_tensor_triu(&m, 1));
    ta_attention_opts ob = {.mask = &m, .mask_mode = TA_MASK_BLOCK};
    run_case(l, &x, &x, &x, &ob, b, 0, 1e-5);
    free(b);
    ta_tensor_free(&m);
    ta_tensor_free(&x);
    ta_attention_free(l);
}

static void test_seed_padding_mask_and_fully_masked_rows(void **state)
{
    (void)state;
    /* A padding mask [N, 1, 1, Lk] whose last batch masks every key: PyTorch's seed
     * layer then gives uniform weights 1/Lk over all keys (the -1e20 fill is finite). */
    const int64_t N = 3, H = 4, Lq = 5, Lk = 9, E = 32;
    const int64_t len[3] = {6, 9, 0};
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, E, H, 8));
    ta_tensor q = randn3(N, Lq, E, 31), k = randn3(N, Lk, E, 32), v = randn3(N, Lk, E, 33);
    int64_t ms[4] = {N, 1, 1, Lk};
    ta_tensor m;
    TA_CHECK_OK(ta_tensor_zeros(&m, 4, ms));
    double *b = bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < Lk; j++) {
            ((float *)m.data)[n * Lk + j] = j < len[n] ? 1.0f : 0.0f;
            for (int64_t h = 0; h < H; h++) for (int64_t i = 0; i < Lq; i++)
                B4(b, n, h, i, j) = j < len[n] ? 0.0 : -INFINITY;
        }
    ta_attention_opts o = {.mask = &m, .mask_mode = TA_MASK_KEEP};
    run_case(l, &q, &k, &v, &o, b, 1, 1e-5);
    run_case(l, &q, &k, &v, &o, b, 2, 1e-5);
    /* Check the uniform rows explicitly (not only through the oracle). */
    ta_tensor out, w;
    int64_t os[3] = {N, Lq, E}, ws[4] = {N, H, Lq, Lk};
    TA_CHECK_OK(ta_tensor_empty(&out, 3, os));
    TA_CHECK_OK(ta_tensor_empty(&w, 4, ws));
    o.weights = &w;
    TA_CHECK_OK(ta_attention_forward(&out, l, &q, &k, &v, &o));
    for (int64_t x = 0; x < H * Lq * Lk; x++)
        assert_float_equal(((float *)w.data)[2 * H * Lq * Lk + x], 1.0f / 9.0f, 1e-7);
    /* The same mask as a key_padding_mask [N, Lk] (a suffix pattern: key lengths), and
     * as a random keep pattern combined with a causal flag. */
    ta_tensor kpm;
    int64_t ks[2] = {N, Lk};
    TA_CHECK_OK(ta_tensor_empty(&kpm, 2, ks));
    memcpy(kpm.data, m.data, sizeof(float) * (size_t)(N * Lk));
    ta_attention_opts ok = {.key_padding_mask = &kpm, .key_padding_mode = TA_MASK_KEEP};
    run_case(l, &q, &k, &v, &ok, b, 1, 1e-5);
    ta_tensor x = randn3(N, Lk, E, 34);
    int64_t pattern[3 * 9];
    TA_CHECK_OK(ta_randint(pattern, (size_t)(N * Lk), 0, 2, 99));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < Lk; j++) {
            int keep = n == 1 ? 0 : (int)pattern[n * Lk + j]; /* batch 1: all masked */
            ((float *)kpm.data)[n * Lk + j] = keep ? 0.0f : 1.0f; /* block mode */
        }
    const int64_t L = Lk, HL = H;
    double *bc = calloc((size_t)(N * HL * L * L), sizeof(double));
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < HL; h++)
        for (int64_t i = 0; i < L; i++) for (int64_t j = 0; j < L; j++)
            bc[((n * HL + h) * L + i) * L + j] =
                (j > i || ((float *)kpm.data)[n * L + j] != 0.0f) ? -INFINITY : 0.0;
    ta_attention_opts oc = {.key_padding_mask = &kpm, .key_padding_mode = TA_MASK_BLOCK, .causal = TA_CAUSAL_TOP_LEFT};
    run_case(l, &x, &x, &x, &oc, bc, 1, 1e-5);
    free(bc);
    ta_tensor_free(&x);
    ta_tensor_free(&kpm);
    ta_tensor_free(&out); ta_tensor_free(&w);
    free(b);
    ta_tensor_free(&m);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

static void test_seed_mask_and_padding_combined(void **state)
{
    (void)state;
    /* A tril mask plus a non-suffix key padding mask: the combined-mask path. */
    const int64_t N = 2, H = 2, Lq = 6, Lk = 6, E = 8;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, E, H, 9));
    ta_tensor x = randn3(N, Lq, E, 41);
    int64_t ms[2] = {Lq, Lk}, ks[2] = {N, Lk};
    ta_tensor m, kpm;
    TA_CHECK_OK(ta_tensor_ones(&m, 2, ms));
    TA_CHECK_OK(ta_tensor_tril(&m, 0));
    TA_CHECK_OK(ta_tensor_ones(&kpm, 2, ks));
    float *kp = kpm.data;
    kp[0] = 0.0f; /* batch 0: key 0 masked, so row 0 (which sees key 0 only) is empty */
    kp[Lk + 2] = 0.0f;
    double *b = bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = (j > i || kp[n * Lk + j] == 0.0f) ? -INFINITY : 0.0;
    ta_attention_opts o = {.mask = &m, .key_padding_mask = &kpm};
    run_case(l, &x, &x, &x, &o, b, 1, 1e-5);
    free(b);
    ta_tensor_free(&m); ta_tensor_free(&kpm); ta_tensor_free(&x);
    ta_attention_free(l);
}

/* ------------------------------------------------------------------ torch */

static void test_torch_no_mask_self_and_cross(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, 64, 8, 4));
    /* give the zero-initialised biases values, so they are exercised */
    ta_tensor b;
    TA_CHECK_OK(ta_attention_param(&b, l, "in_proj_bias"));
    TA_CHECK_OK(ta_rand_uniform(&b, -0.5f, 0.5f, 77));
    TA_CHECK_OK(ta_attention_param(&b, l, "out_proj.bias"));
    TA_CHECK_OK(ta_rand_uniform(&b, -0.5f, 0.5f, 78));
    ta_tensor x = randn3(2, 9, 64, 51), k = randn3(2, 11, 64, 52), v = randn3(2, 11, 64, 53);
    run_case(l, &x, &x, &x, NULL, NULL, 0, 1e-5);
    run_case(l, &x, &k, &v, NULL, NULL, 1, 1e-5);
    run_case(l, &x, &k, &v, NULL, NULL, 2, 1e-5);
    ta_tensor_free(&x); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

static void test_torch_every_mask_kind(void **state)
{
    (void)state;
    const int64_t N = 2, H = 4, Lq = 7, Lk = 10, E = 32;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, E, H, 6));
    ta_tensor pb;
    TA_CHECK_OK(ta_attention_param(&pb, l, "in_proj_bias"));
    TA_CHECK_OK(ta_rand_uniform(&pb, -0.2f, 0.2f, 79));
    ta_tensor q = randn3(N, Lq, E, 61), k = randn3(N, Lk, E, 62), v = randn3(N, Lk, E, 63);
    double *b = bias_new(N, H, Lq, Lk);
    int64_t bits[4 * 2 * 7 * 10];
    TA_CHECK_OK(ta_randint(bits, (size_t)(N * H * Lq * Lk), 0, 4, 5));

    /* bool attn_mask 2-D [Lq, Lk], True = blocked (about a quarter) */
    int64_t s2[2] = {Lq, Lk}, s3[3] = {N * H, Lq, Lk}, sk[2] = {N, Lk};
    ta_tensor m2, m3, mf, kpm;
    TA_CHECK_OK(ta_tensor_zeros(&m2, 2, s2));
    for (int64_t ij = 0; ij < Lq * Lk; ij++) ((float *)m2.data)[ij] = bits[ij] == 0;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = ((float *)m2.data)[i * Lk + j] != 0.0f ? -INFINITY : 0.0;
    ta_attention_opts o = {.mask = &m2, .mask_mode = TA_MASK_BLOCK};
    run_case(l, &q, &k, &v, &o, b, 1, 1e-5);

    /* bool attn_mask 3-D [N*H, Lq, Lk], batch-major */
    TA_CHECK_OK(ta_tensor_zeros(&m3, 3, s3));
    for (int64_t x = 0; x < N * H * Lq * Lk; x++) ((float *)m3.data)[x] = bits[x] == 1;
    for (int64_t x = 0; x < N * H * Lq * Lk; x++) b[x] = ((float *)m3.data)[x] != 0.0f ? -INFINITY : 0.0;
    o.mask = &m3;
    run_case(l, &q, &k, &v, &o, b, 2, 1e-5);

    /* float attn_mask, additive */
    TA_CHECK_OK(ta_tensor_empty(&mf, 2, s2));
    TA_CHECK_OK(ta_rand_uniform(&mf, -3.0f, 1.0f, 81));
    ((float *)mf.data)[3] = -INFINITY;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = ((float *)mf.data)[i * Lk + j];
    ta_attention_opts of = {.mask = &mf, .mask_mode = TA_MASK_ADDITIVE};
    run_case(l, &q, &k, &v, &of, b, 1, 1e-5);

    /* key_padding_mask bool [N, Lk], True = ignore: a suffix (key lengths) ... */
    TA_CHECK_OK(ta_tensor_zeros(&kpm, 2, sk));
    const int64_t len[2] = {4, 10};
    for (int64_t n = 0; n < N; n++) for (int64_t j = 0; j < Lk; j++) ((float *)kpm.data)[n * Lk + j] = j >= len[n];
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = j >= len[n] ? -INFINITY : 0.0;
    ta_attention_opts ok = {.key_padding_mask = &kpm, .key_padding_mode = TA_MASK_BLOCK};
    run_case(l, &q, &k, &v, &ok, b, 1, 1e-5);
    /* ... combined with the float attn_mask (torch: masked_fill(kpm, -inf)) ... */
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = j >= len[n] ? -INFINITY : ((float *)mf.data)[i * Lk + j];
    ok.mask = &mf;
    ok.mask_mode = TA_MASK_ADDITIVE;
    run_case(l, &q, &k, &v, &ok, b, 2, 1e-5);
    /* ... a non-suffix pattern with the 3-D bool mask (logical_or) and causal */
    ((float *)kpm.data)[1] = 1.0f;
    ((float *)kpm.data)[Lk + 5] = 1.0f;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++) {
            int blocked = ((float *)kpm.data)[n * Lk + j] != 0.0f ||
                          ((float *)m3.data)[((n * H + h) * Lq + i) * Lk + j] != 0.0f || j > i;
            B4(b, n, h, i, j) = blocked ? -INFINITY : 0.0;
        }
    ta_attention_opts oall = {.mask = &m3, .mask_mode = TA_MASK_BLOCK, .key_padding_mask = &kpm,
                              .key_padding_mode = TA_MASK_BLOCK, .causal = TA_CAUSAL_TOP_LEFT};
    run_case(l, &q, &k, &v, &oall, b, 1, 1e-5);
    /* float key_padding_mask, additive */
    TA_CHECK_OK(ta_rand_uniform(&kpm, -2.0f, 2.0f, 82));
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = 0; j < Lk; j++)
            B4(b, n, h, i, j) = ((float *)kpm.data)[n * Lk + j] + ((float *)mf.data)[i * Lk + j];
    ta_attention_opts oaf = {.mask = &mf, .mask_mode = TA_MASK_ADDITIVE, .key_padding_mask = &kpm,
                             .key_padding_mode = TA_MASK_ADDITIVE};
    run_case(l, &q, &k, &v, &oaf, b, 1, 1e-5);

    free(b);
    ta_tensor_free(&m2); ta_tensor_free(&m3); ta_tensor_free(&mf); ta_tensor_free(&kpm);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
    ta_attention_free(l);
}

/* Bottom-right causal cross attention (queries that continue a cached sequence): query i
 * sees keys j <= i + Lk - Lq, in both layouts. */
static void test_causal_bottom_right_cross(void **state)
{
    (void)state;
    const int64_t N = 2, H = 4, Lq = 5, Lk = 13, E = 32;
    ta_tensor q = randn3(N, Lq, E, 91), k = randn3(N, Lk, E, 92), v = randn3(N, Lk, E, 93);
    double *b = bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t j = i + Lk - Lq + 1; j < Lk; j++) B4(b, n, h, i, j) = -INFINITY;
    ta_attention_opts oc = {.causal = TA_CAUSAL_BOTTOM_RIGHT};
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *l;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, E, H, 94));
        run_case(l, &q, &k, &v, &oc, b, 1, 1e-5);
        ta_attention_free(l);
    }
    free(b);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v);
}

static void test_torch_causal_and_fully_blocked_rows(void **state)
{
    (void)state;
    const int64_t N = 2, H = 8, Lq = 13, Lk = 13, E = 64;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_TORCH, E, H, 10));
    ta_tensor ob;
    TA_CHECK_OK(ta_attention_param(&ob, l, "out_proj.bias"));
    TA_CHECK_OK(ta_rand_uniform(&ob, -1.0f, 1.0f, 83));
    ta_tensor x = randn3(N, Lq, E, 71);
    double *b = bias_new(N, H, Lq, Lk);
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++) for (int64_t j = i + 1; j < Lk; j++) B4(b, n, h, i, j) = -INFINITY;
    ta_attention_opts oc = {.causal = TA_CAUSAL_TOP_LEFT};
    run_case(l, &x, &x, &x, &oc, b, 1, 1e-5);
    /* A row blocked everywhere: torch gives NaN, we give out_proj.bias and weights 0. */
    int64_t s2[2] = {Lq, Lk};
    ta_tensor m;
    TA_CHECK_OK(ta_tensor_zeros(&m, 2, s2));
    for (int64_t j = 0; j < Lk; j++) ((float *)m.data)[4 * Lk + j] = 1.0f;
    ta_attention_opts om = {.mask = &m, .mask_mode = TA_MASK_BLOCK};
    for (int64_t x2 = 0; x2 < N * H * Lq * Lk; x2++) b[x2] = 0.0;
    for (int64_t n = 0; n < N; n++) for (int64_t h = 0; h < H; h++)
        for (int64_t j = 0; j < Lk; j++) B4(b, n, h, 4, j) = -INFINITY;
    run_case(l, &x, &x, &x, &om, b, 1, 1e-5);
    ta_tensor out;
    int64_t os[3] = {N, Lq, E};
    TA_CHECK_OK(ta_tensor_empty(&out, 3, os));
    TA_CHECK_OK(ta_attention_forward(&out, l, &x, &x, &x, &om));
    for (int64_t n = 0; n < N; n++)
        for (int64_t e = 0; e < E; e++)
            assert_true(((float *)out.data)[(n * Lq + 4) * E + e] == ((float *)ob.data)[e]);
    ta_tensor_free(&out);
    ta_tensor_free(&m);
    free(b);
    ta_tensor_free(&x);
    ta_attention_free(l);
}

/* ------------------------------------------------ strides, workspace, threads */

static void test_strided_inputs_and_output(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        const int64_t N = 3, L = 5, E = 24, H = 3;
        ta_attention *l;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, E, H, 12));
        /* queries stored [L, N, E] and viewed [N, L, E]; keys a slice with a step */
        int64_t sp[3] = {L, N, E}, sk[3] = {N, 2 * L + 1, E};
        ta_tensor qs, qv, ks, kv;
        TA_CHECK_OK(ta_tensor_empty(&qs, 3, sp));
        TA_CHECK_OK(ta_randn(&qs, 91));
        TA_CHECK_OK(ta_tensor_transpose(&qv, &qs, 0, 1));
        TA_CHECK_OK(ta_tensor_empty(&ks, 3, sk));
        TA_CHECK_OK(ta_randn(&ks, 92));
        TA_CHECK_OK(ta_tensor_slice(&kv, &ks, 1, 0, 2 * L + 1, 2)); /* 6 keys */
        ta_tensor vv = randn3(N, 6, E, 93);
        run_case(l, &qv, &kv, &vv, NULL, NULL, 1, 1e-5);
        /* out as a transposed view: compare with a contiguous out */
        ta_tensor o1, o2s, o2;
        int64_t os[3] = {N, L, E}, ost[3] = {L, N, E};
        TA_CHECK_OK(ta_tensor_empty(&o1, 3, os));
        TA_CHECK_OK(ta_tensor_empty(&o2s, 3, ost));
        TA_CHECK_OK(ta_tensor_transpose(&o2, &o2s, 0, 1));
        TA_CHECK_OK(ta_attention_forward(&o1, l, &qv, &kv, &vv, NULL));
        TA_CHECK_OK(ta_attention_forward(&o2, l, &qv, &kv, &vv, NULL));
        int64_t idx[3];
        for (idx[0] = 0; idx[0] < N; idx[0]++) for (idx[1] = 0; idx[1] < L; idx[1]++)
            for (idx[2] = 0; idx[2] < E; idx[2]++)
                assert_true(*ta_tensor_at(&o1, idx) == *ta_tensor_at(&o2, idx));
        ta_tensor_free(&o1); ta_tensor_free(&o2s);
        ta_tensor_free(&qs); ta_tensor_free(&ks); ta_tensor_free(&vv);
        ta_attention_free(l);
    }
}

static void test_workspace_reuse_and_thread_invariance(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *l, *fresh;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, 32, 4, 13));
        TA_CHECK_OK(ta_attention_create(&fresh, (ta_layout)layout, 32, 4, 13));
        const int64_t lens[4] = {3, 19, 2, 19};
        for (int c = 0; c < 4; c++) {
            ta_tensor x = randn3(2, lens[c], 32, 100 + (uint64_t)c), o1, o2, o3;
            int64_t os[3] = {2, lens[c], 32};
            TA_CHECK_OK(ta_tensor_empty(&o1, 3, os));
            TA_CHECK_OK(ta_tensor_empty(&o2, 3, os));
            TA_CHECK_OK(ta_tensor_empty(&o3, 3, os));
            ta_attention_opts oc = {.causal = TA_CAUSAL_TOP_LEFT};
            int nt = ta_get_num_threads();
            TA_CHECK_OK(ta_attention_forward(&o1, l, &x, &x, &x, &oc));
            ta_attention *f2;
            TA_CHECK_OK(ta_attention_create(&f2, (ta_layout)layout, 32, 4, 13));
            TA_CHECK_OK(ta_set_num_threads(1));
            TA_CHECK_OK(ta_attention_forward(&o2, f2, &x, &x, &x, &oc));
            TA_CHECK_OK(ta_set_num_threads(3));
            TA_CHECK_OK(ta_attention_forward(&o3, fresh, &x, &x, &x, &oc));
            TA_CHECK_OK(ta_set_num_threads(nt));
            assert_memory_equal(o1.data, o2.data, sizeof(float) * (size_t)(2 * lens[c] * 32));
            assert_memory_equal(o1.data, o3.data, sizeof(float) * (size_t)(2 * lens[c] * 32));
            /* in place: out is the input */
            TA_CHECK_OK(ta_attention_forward(&x, l, &x, &x, &x, &oc));
            assert_memory_equal(o1.data, x.data, sizeof(float) * (size_t)(2 * lens[c] * 32));
            ta_attention_free(f2);
            ta_tensor_free(&x); ta_tensor_free(&o1); ta_tensor_free(&o2); ta_tensor_free(&o3);
        }
        ta_attention_free(l);
        ta_attention_free(fresh);
    }
}

static void test_zero_sizes(void **state)
{
    (void)state;
    ta_attention *l;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 1));
    ta_tensor q = randn3(2, 3, 8, 1), k = randn3(2, 0, 8, 2), out;
    int64_t os[3] = {2, 3, 8};
    TA_CHECK_OK(ta_tensor_empty(&out, 3, os));
    /* no keys: the softmax is empty and the einsum sums nothing: out = fc_out.bias */
    TA_CHECK_OK(ta_attention_forward(&out, l, &q, &k, &k, NULL));
    ta_tensor b;
    TA_CHECK_OK(ta_attention_param(&b, l, "fc_out.bias"));
    for (int64_t r = 0; r < 6; r++)
        for (int64_t e = 0; e < 8; e++) assert_true(((float *)out.data)[r * 8 + e] == ((float *)b.data)[e]);
    ta_tensor q0 = randn3(0, 3, 8, 1), o0;
    int64_t os0[3] = {0, 3, 8};
    TA_CHECK_OK(ta_tensor_empty(&o0, 3, os0));
    TA_CHECK_OK(ta_attention_forward(&o0, l, &q0, &q0, &q0, NULL));
    ta_tensor_free(&q0); ta_tensor_free(&o0);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&out);
    ta_attention_free(l);
}

/* ------------------------------------------------------------ initialisation */

static void check_uniform(const ta_attention *l, const char *name, double bound)
{
    int64_t n;
    double *p = param_f64(l, name, &n);
    double mean = 0.0, var = 0.0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        mean += p[i];
        if (p[i] < lo) lo = p[i];
        if (p[i] > hi) hi = p[i];
    }
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) var += (p[i] - mean) * (p[i] - mean);
    var /= (double)n;
    if (bound == 0.0) {
        if (lo != 0.0 || hi != 0.0) fail_msg("%s: expected zeros, range [%g, %g]", name, lo, hi);
        free(p);
        return;
    }
    /* U(-b, b): inside the bounds, reaching near them, mean 0 (sd b/sqrt(3n)), variance
     * b^2/3 (relative sd about sqrt(0.8/n)); 5 sigma limits. */
    if (lo < -bound || hi > bound) fail_msg("%s: range [%g, %g] exceeds +-%g", name, lo, hi, bound);
    if (lo > -bound * (1 - 20.0 / (double)n) || hi < bound * (1 - 20.0 / (double)n))
        fail_msg("%s: range [%g, %g] does not reach +-%g", name, lo, hi, bound);
    double sd_mean = bound / sqrt(3.0 * (double)n);
    if (fabs(mean) > 5 * sd_mean) fail_msg("%s: mean %g (bound %g, n %lld)", name, mean, bound, (long long)n);
    double want = bound * bound / 3.0;
    if (fabs(var / want - 1.0) > 5 * sqrt(0.8 / (double)n))
        fail_msg("%s: variance %g, expected %g", name, var, want);
    free(p);
}

static void test_init_matches_pytorch_defaults(void **state)
{
    (void)state;
    ta_attention *s, *t, *s2, *s3;
    TA_CHECK_OK(ta_attention_create(&s, TA_LAYOUT_SEED, 256, 4, 1234)); /* D = 64 */
    check_uniform(s, "values.weight", 1.0 / sqrt(64.0));
    check_uniform(s, "keys.weight", 1.0 / sqrt(64.0));
    check_uniform(s, "queries.weight", 1.0 / sqrt(64.0));
    check_uniform(s, "fc_out.weight", 1.0 / sqrt(256.0));
    assert_int_equal(ta_attention_param_count(s), 5);
    TA_CHECK_OK(ta_attention_create(&t, TA_LAYOUT_TORCH, 256, 8, 1234));
    check_uniform(t, "in_proj_weight", sqrt(6.0 / (256.0 + 3 * 256.0)));
    check_uniform(t, "in_proj_bias", 0.0);
    check_uniform(t, "out_proj.weight", 1.0 / sqrt(256.0));
    check_uniform(t, "out_proj.bias", 0.0);
    assert_int_equal(ta_attention_param_count(t), 4);
    assert_string_equal(ta_attention_param_name(t, 2), "out_proj.weight");
    assert_null(ta_attention_param_name(t, 4));
    /* fc_out.bias has only E values: bounds only */
    int64_t n;
    double *b = param_f64(s, "fc_out.bias", &n);
    for (int64_t i = 0; i < n; i++) assert_true(fabs(b[i]) <= 1.0 / 16.0);
    free(b);
    /* same seed, same layer; another seed, another; parameters are distinct streams */
    TA_CHECK_OK(ta_attention_create(&s2, TA_LAYOUT_SEED, 256, 4, 1234));
    TA_CHECK_OK(ta_attention_create(&s3, TA_LAYOUT_SEED, 256, 4, 1235));
    ta_tensor a, c, d;
    TA_CHECK_OK(ta_attention_param(&a, s, "keys.weight"));
    TA_CHECK_OK(ta_attention_param(&c, s2, "keys.weight"));
    TA_CHECK_OK(ta_attention_param(&d, s3, "keys.weight"));
    assert_memory_equal(a.data, c.data, sizeof(float) * 64 * 64);
    assert_memory_not_equal(a.data, d.data, sizeof(float) * 64 * 64);
    TA_CHECK_OK(ta_attention_param(&c, s, "values.weight"));
    assert_memory_not_equal(a.data, c.data, sizeof(float) * 64 * 64);
    ta_attention_free(s); ta_attention_free(t); ta_attention_free(s2); ta_attention_free(s3);
}

/* -------------------------------------------------------------- save / load */

static char tmpdir[64];

static int setup_tmp(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/ta_attn_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp(const char *name)
{
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void test_save_load_round_trip(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *l, *m;
        TA_CHECK_OK(ta_attention_create(&l, (ta_layout)layout, 48, 6, 21));
        if (layout == TA_LAYOUT_TORCH) {
            ta_tensor b;
            TA_CHECK_OK(ta_attention_param(&b, l, "in_proj_bias"));
            TA_CHECK_OK(ta_rand_uniform(&b, -1.0f, 1.0f, 22));
        }
        const char *path = tmp(layout ? "torch.safetensors" : "seed.safetensors");
        TA_CHECK_OK(ta_attention_save(l, path));
        TA_CHECK_OK(ta_attention_load(&m, path, (ta_layout)layout, 6));
        assert_int_equal(ta_attention_embed_size(m), 48);
        assert_int_equal(ta_attention_heads(m), 6);
        assert_int_equal(ta_attention_layout(m), layout);
        for (int i = 0; i < ta_attention_param_count(l); i++) {
            ta_tensor a, b;
            const char *name = ta_attention_param_name(l, i);
            TA_CHECK_OK(ta_attention_param(&a, l, name));
            TA_CHECK_OK(ta_attention_param(&b, m, name));
            assert_int_equal(a.ndim, b.ndim);
            assert_memory_equal(a.shape, b.shape, sizeof(int64_t) * (size_t)a.ndim);
            assert_memory_equal(a.data, b.data, sizeof(float) * (size_t)ta_tensor_numel(&a));
        }
        /* the file holds exactly the state_dict names */
        ta_safetensors *sf;
        TA_CHECK_OK(ta_safetensors_open(&sf, path));
        assert_int_equal(ta_safetensors_count(sf), ta_attention_param_count(l));
        for (int i = 0; i < ta_attention_param_count(l); i++)
            assert_true(ta_safetensors_find(sf, ta_attention_param_name(l, i)) >= 0);
        ta_safetensors_free(sf);
        /* same forward */
        ta_tensor x = randn3(2, 5, 48, 23), o1, o2;
        int64_t os[3] = {2, 5, 48};
        TA_CHECK_OK(ta_tensor_empty(&o1, 3, os));
        TA_CHECK_OK(ta_tensor_empty(&o2, 3, os));
        TA_CHECK_OK(ta_attention_forward(&o1, l, &x, &x, &x, NULL));
        TA_CHECK_OK(ta_attention_forward(&o2, m, &x, &x, &x, NULL));
        assert_memory_equal(o1.data, o2.data, sizeof(float) * 2 * 5 * 48);
        /* another head count reads the same file (E from the file, D from heads) */
        ta_attention *m2;
        if (layout == TA_LAYOUT_TORCH) {
            TA_CHECK_OK(ta_attention_load(&m2, path, TA_LAYOUT_TORCH, 4));
            ta_attention_free(m2);
        }
        ta_tensor_free(&x); ta_tensor_free(&o1); ta_tensor_free(&o2);
        ta_attention_free(l);
        ta_attention_free(m);
    }
}

/* Writes a seed-layout file with tensors given as (name, shape) pairs. */
static void write_file(const char *path, int n, const char *const *names, int64_t (*shapes)[2],
                       const int *ndims)
{
    ta_tensor t[8];
    const ta_tensor *tp[8];
    for (int i = 0; i < n; i++) {
        TA_CHECK_OK(ta_tensor_zeros(&t[i], ndims[i], shapes[i]));
        tp[i] = &t[i];
    }
    TA_CHECK_OK(ta_safetensors_save(path, n, names, tp));
    for (int i = 0; i < n; i++) ta_tensor_free(&t[i]);
}

static void test_load_errors(void **state)
{
    (void)state;
    ta_attention *l = (ta_attention *)&l; /* sentinel: must stay untouched */
    ta_attention *const sentinel = l;
    const char *names[5] = {"values.weight", "keys.weight", "queries.weight", "fc_out.weight", "fc_out.bias"};
    int64_t shapes[5][2] = {{4, 4}, {4, 4}, {4, 4}, {8, 8}, {8, 0}};
    int nd[5] = {2, 2, 2, 2, 1};
    /* missing fc_out.bias */
    const char *p1 = tmp("missing.safetensors");
    write_file(p1, 4, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p1, TA_LAYOUT_SEED, 2), TA_EFORMAT,
                 "has no tensor 'fc_out.bias' (seed layout)");
    assert_ptr_equal(l, sentinel);
    /* a torch file read as seed, and the other way round */
    TA_CHECK_ERR(ta_attention_load(&l, p1, TA_LAYOUT_TORCH, 2), TA_EFORMAT,
                 "has no tensor 'in_proj_weight' (torch layout)");
    /* wrong shape of fc_out.weight */
    const char *p2 = tmp("shape.safetensors");
    shapes[3][1] = 4;
    write_file(p2, 5, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p2, TA_LAYOUT_SEED, 2), TA_ESHAPE,
                 "fc_out.weight has shape [8, 4], expected [8, 8]");
    /* wrong shape of keys.weight (D = 4 for E 8, heads 2) */
    const char *p3 = tmp("keys.safetensors");
    shapes[3][1] = 8;
    shapes[1][0] = 3;
    write_file(p3, 5, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p3, TA_LAYOUT_SEED, 2), TA_ESHAPE,
                 "keys.weight has shape [3, 4], expected [4, 4]");
    /* heads not dividing E, heads invalid, a missing file */
    shapes[1][0] = 4;
    const char *p4 = tmp("ok.safetensors");
    write_file(p4, 5, names, shapes, nd);
    TA_CHECK_ERR(ta_attention_load(&l, p4, TA_LAYOUT_SEED, 3), TA_EINVAL,
                 "embed_size 8 is not divisible by heads 3");
    TA_CHECK_ERR(ta_attention_load(&l, p4, TA_LAYOUT_SEED, 0), TA_EINVAL, "heads must be >= 1");
    TA_CHECK_ERR(ta_attention_load(&l, tmp("nope.safetensors"), TA_LAYOUT_SEED, 2), TA_EIO,
                 "nope.safetensors");
    TA_CHECK_ERR(ta_attention_load(NULL, p4, TA_LAYOUT_SEED, 2), TA_EINVAL, "layer is NULL");
    TA_CHECK_ERR(ta_attention_load(&l, NULL, TA_LAYOUT_SEED, 2), TA_EINVAL, "path is NULL");
    TA_CHECK_ERR(ta_attention_load(&l, p4, (ta_layout)7, 2), TA_EINVAL, "layout 7");
    assert_ptr_equal(l, sentinel);
    TA_CHECK_OK(ta_attention_load(&l, p4, TA_LAYOUT_SEED, 2));
    ta_attention_free(l);
    TA_CHECK_ERR(ta_attention_save(NULL, p4), TA_EINVAL, "layer is NULL");
}

static void test_create_and_param_errors(void **state)
{
    (void)state;
    ta_attention *l = NULL;
    TA_CHECK_ERR(ta_attention_create(&l, TA_LAYOUT_SEED, 10, 3, 0), TA_EINVAL,
                 "ta_attention_create: embed_size 10 is not divisible by heads 3");
    TA_CHECK_ERR(ta_attention_create(&l, TA_LAYOUT_TORCH, 8, 0, 0), TA_EINVAL, "heads must be >= 1, got 0");
    TA_CHECK_ERR(ta_attention_create(&l, TA_LAYOUT_TORCH, 0, 1, 0), TA_EINVAL, "embed_size must be >= 1");
    TA_CHECK_ERR(ta_attention_create(&l, (ta_layout)2, 8, 2, 0), TA_EINVAL, "layout 2");
    TA_CHECK_ERR(ta_attention_create(NULL, TA_LAYOUT_SEED, 8, 2, 0), TA_EINVAL, "layer is NULL");
    assert_null(l);
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 0));
    ta_tensor v;
    TA_CHECK_ERR(ta_attention_param(&v, l, "in_proj_weight"), TA_EINVAL,
                 "the seed layout has no parameter 'in_proj_weight'");
    TA_CHECK_ERR(ta_attention_param(NULL, l, "fc_out.bias"), TA_EINVAL, "view is NULL");
    TA_CHECK_OK(ta_attention_param(&v, l, "fc_out.weight"));
    assert_int_equal(v.ndim, 2);
    assert_int_equal(v.shape[0], 8);
    assert_null(v.owned);
    ta_tensor_free(&v); /* a view: releases nothing */
    TA_CHECK_OK(ta_attention_param(&v, l, "fc_out.weight"));
    assert_non_null(v.data);
    ta_attention_free(l);
    ta_attention_free(NULL);
}

static void test_forward_errors(void **state)
{
    (void)state;
    ta_attention *l, *t;
    TA_CHECK_OK(ta_attention_create(&l, TA_LAYOUT_SEED, 8, 2, 0));
    TA_CHECK_OK(ta_attention_create(&t, TA_LAYOUT_TORCH, 8, 2, 0));
    ta_tensor q = randn3(2, 4, 8, 1), k = randn3(2, 5, 8, 2), v6 = randn3(2, 6, 8, 3);
    ta_tensor bad = randn3(2, 4, 7, 4), k3 = randn3(3, 5, 8, 5), out, w;
    int64_t os[3] = {2, 4, 8};
    TA_CHECK_OK(ta_tensor_full(&out, 3, os, 123.0f));
    const char *fn = "ta_attention_forward: ";
    (void)fn;
    TA_CHECK_ERR(ta_attention_forward(&out, l, &bad, &k, &k, NULL), TA_ESHAPE,
                 "ta_attention_forward: queries has shape [2, 4, 7], expected [N, L, 8] (embed_size 8)");
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k, &v6, NULL), TA_ESHAPE,
                 "keys has shape [2, 5, 8] but values has [2, 6, 8]");
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k3, &k3, NULL), TA_ESHAPE,
                 "keys has shape [3, 5, 8] but queries has [2, 4, 8] (batch sizes differ)");
    TA_CHECK_ERR(ta_attention_forward(&k, l, &q, &k, &k, NULL), TA_ESHAPE,
                 "out has shape [2, 5, 8], expected [N, Lq, E] = [2, 4, 8]");
    TA_CHECK_ERR(ta_attention_forward(NULL, l, &q, &k, &k, NULL), TA_EINVAL, "out is NULL");
    TA_CHECK_ERR(ta_attention_forward(&out, NULL, &q, &k, &k, NULL), TA_EINVAL, "layer is NULL");
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, NULL, &k, NULL), TA_EINVAL, "keys is NULL");
    /* masks */
    int64_t s33[2] = {3, 3}, s3[3] = {3, 4, 5}, s45[2] = {4, 5}, sk[2] = {2, 4};
    ta_tensor m33, m3, m45, kbad;
    TA_CHECK_OK(ta_tensor_ones(&m33, 2, s33));
    TA_CHECK_OK(ta_tensor_ones(&m3, 3, s3));
    TA_CHECK_OK(ta_tensor_ones(&m45, 2, s45));
    TA_CHECK_OK(ta_tensor_ones(&kbad, 2, sk));
    ta_attention_opts o = {.mask = &m33};
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k, &k, &o), TA_ESHAPE,
                 "mask has shape [3, 3], which does not broadcast to [N, H, Lq, Lk] = [2, 2, 4, 5]");
    o.mask = &m3;
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &o), TA_ESHAPE,
                 "mask has shape [3, 4, 5], but a 3-D attn_mask must be [N*H, Lq, Lk] = [4, 4, 5]");
    o.mask = &m45;
    o.mask_mode = TA_MASK_ADDITIVE;
    TA_CHECK_ERR(ta_attention_forward(&out, l, &q, &k, &k, &o), TA_EINVAL,
                 "the seed layout's mask is boolean");
    o.mask_mode = (ta_mask_mode)9;
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &o), TA_EINVAL, "mask_mode 9 is not a ta_mask_mode");
    ta_attention_opts ok = {.key_padding_mask = &kbad, .key_padding_mode = TA_MASK_BLOCK};
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &ok), TA_ESHAPE,
                 "key_padding_mask has shape [2, 4], expected [N, Lk] = [2, 5]");
    /* weights */
    int64_t ws[4] = {2, 2, 4, 4};
    TA_CHECK_OK(ta_tensor_empty(&w, 4, ws));
    ta_attention_opts ow = {.weights = &w};
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &ow), TA_ESHAPE,
                 "weights has shape [2, 2, 4, 4], expected [N, H, Lq, Lk] = [2, 2, 4, 5]");
    ow.average_weights = 1;
    TA_CHECK_ERR(ta_attention_forward(&out, t, &q, &k, &k, &ow), TA_ESHAPE,
                 "expected [N, Lq, Lk] (averaged over heads) = [2, 4, 5]");
    /* out untouched by every failure */
    for (int i = 0; i < 64; i++) assert_true(((float *)out.data)[i] == 123.0f);
    ta_tensor_free(&m33); ta_tensor_free(&m3); ta_tensor_free(&m45); ta_tensor_free(&kbad);
    ta_tensor_free(&w);
    ta_tensor_free(&q); ta_tensor_free(&k); ta_tensor_free(&v6); ta_tensor_free(&bad);
    ta_tensor_free(&k3); ta_tensor_free(&out);
    ta_attention_free(l);
    ta_attention_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_example_self_attention),
        cmocka_unit_test(test_seed_large_cross_attention),
        cmocka_unit_test(test_seed_causal_tril_mask),
        cmocka_unit_test(test_seed_padding_mask_and_fully_masked_rows),
        cmocka_unit_test(test_seed_mask_and_padding_combined),
        cmocka_unit_test(test_torch_no_mask_self_and_cross),
        cmocka_unit_test(test_torch_every_mask_kind),
        cmocka_unit_test(test_torch_causal_and_fully_blocked_rows),
        cmocka_unit_test(test_causal_bottom_right_cross),
        cmocka_unit_test(test_strided_inputs_and_output),
        cmocka_unit_test(test_workspace_reuse_and_thread_invariance),
        cmocka_unit_test(test_zero_sizes),
        cmocka_unit_test(test_init_matches_pytorch_defaults),
        cmocka_unit_test(test_save_load_round_trip),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_create_and_param_errors),
        cmocka_unit_test(test_forward_errors),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
