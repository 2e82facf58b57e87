/* The attention layers' forward in float64, written from the two PyTorch modules with
 * plain loops (the seed's SelfAttention literally; nn.MultiheadAttention(batch_first=True)
 * with rows that attend to nothing giving zeros, where PyTorch gives NaN), and the check
 * of ta_attention_forward against them. */
#include "layer_oracle.h"
#include "ta_test.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------ float64 oracles */

/* A problem: inputs contiguous [N, L, E] floats, parameters as doubles. */
typedef struct ref_problem {
    int64_t N, Lq, Lk, E, H;
    const float *q, *k, *v;
    /* Per (n, h, i, j): additive term (0, -inf or a float). Seed: only 0 / -inf are used,
     * -inf meaning "mask == 0" (filled with -1e20 before the scaling). NULL: none. */
    const double *bias4;
} ref_problem;

double *ta_test_layer_param_f64(const ta_attention *l, const char *name, int64_t *count)
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

/* The layer's forward in double. out [N, Lq, E]; att [N, H, Lq, Lk] per head.
 * Seed layout: the seed's SelfAttention.forward, literally: x.reshape(N, L, H, D), a
 * Linear(D, D) without bias per projection on the last axis, masked_fill(mask == 0,
 * -1e20) before the 1/sqrt(D) scaling. Torch layout: nn.MultiheadAttention(batch_first=
 * True).forward: in_proj (E -> 3E with bias), the additive mask after the scaling, and
 * rows with nothing to attend give zeros (PyTorch: NaN). Both keep the projected
 * heads as [N, L, H, D], so (n, l, h, d) is element (n * L + l) * E + h * D + d. */
static void layer_ref(double *out, double *att, const ta_attention *l, const ref_problem *p)
{
    const int64_t N = p->N, Lq = p->Lq, Lk = p->Lk, E = p->E, H = p->H, D = E / H;
    const int seed = ta_attention_layout(l) == TA_LAYOUT_SEED;
    double *xq = malloc(sizeof(double) * (size_t)(N * Lq * E + 1));
    double *xk = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *xv = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *qp = malloc(sizeof(double) * (size_t)(N * Lq * E + 1));
    double *kp = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *vp = malloc(sizeof(double) * (size_t)(N * Lk * E + 1));
    double *heads = calloc((size_t)(N * Lq * E + 1), sizeof(double));
    double *row = malloc(sizeof(double) * (size_t)(Lk + 1));
    for (int64_t i = 0; i < N * Lq * E; i++) xq[i] = p->q[i];
    for (int64_t i = 0; i < N * Lk * E; i++) { xk[i] = p->k[i]; xv[i] = p->v[i]; }
    double *Wo, *bo;
    if (seed) { /* rows (n, l, h) of D values */
        double *Wq = ta_test_layer_param_f64(l, "queries.weight", NULL);
        double *Wk = ta_test_layer_param_f64(l, "keys.weight", NULL);
        double *Wv = ta_test_layer_param_f64(l, "values.weight", NULL);
        linear_ref(qp, xq, N * Lq * H, D, D, Wq, NULL);
        linear_ref(kp, xk, N * Lk * H, D, D, Wk, NULL);
        linear_ref(vp, xv, N * Lk * H, D, D, Wv, NULL);
        free(Wq); free(Wk); free(Wv);
        Wo = ta_test_layer_param_f64(l, "fc_out.weight", NULL);
        bo = ta_test_layer_param_f64(l, "fc_out.bias", NULL);
    } else { /* rows (n, l) of E values; in_proj_weight stacks q, k, v */
        double *Win = ta_test_layer_param_f64(l, "in_proj_weight", NULL);
        double *bin = ta_test_layer_param_f64(l, "in_proj_bias", NULL);
        linear_ref(qp, xq, N * Lq, E, E, Win, bin);
        linear_ref(kp, xk, N * Lk, E, E, Win + E * E, bin + E);
        linear_ref(vp, xv, N * Lk, E, E, Win + 2 * E * E, bin + 2 * E);
        free(Win); free(bin);
        Wo = ta_test_layer_param_f64(l, "out_proj.weight", NULL);
        bo = ta_test_layer_param_f64(l, "out_proj.bias", NULL);
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                for (int64_t j = 0; j < Lk; j++) {
                    double e = 0.0; /* einsum nqhd,nkhd->nhqk */
                    for (int64_t d = 0; d < D; d++)
                        e += qp[(n * Lq + i) * E + h * D + d] * kp[(n * Lk + j) * E + h * D + d];
                    double bias = p->bias4 ? p->bias4[((n * H + h) * Lq + i) * Lk + j] : 0.0;
                    if (seed && bias == -INFINITY) e = (double)-1e20f; /* masked_fill(mask == 0, -1e20) */
                    row[j] = e / sqrt((double)D) + (seed ? 0.0 : bias);
                }
                softmax_ref(row, Lk);
                for (int64_t j = 0; j < Lk; j++) {
                    if (att) att[((n * H + h) * Lq + i) * Lk + j] = row[j];
                    for (int64_t d = 0; d < D; d++) /* einsum nhql,nlhd->nqhd */
                        heads[(n * Lq + i) * E + h * D + d] += row[j] * vp[(n * Lk + j) * E + h * D + d];
                }
            }
    linear_ref(out, heads, N * Lq, E, E, Wo, bo);
    free(Wo); free(bo);
    free(xq); free(xk); free(xv); free(qp); free(kp); free(vp); free(heads); free(row);
}

ta_tensor ta_test_randn3(int64_t N, int64_t L, int64_t E, uint64_t seed)
{
    int64_t s[3] = {N, L, E};
    ta_tensor t;
    TA_CHECK_OK(ta_tensor_empty(&t, 3, s));
    TA_CHECK_OK(ta_randn(&t, seed));
    return t;
}

double ta_test_layer_check_at(int line, ta_attention *l, const ta_tensor *q, const ta_tensor *k,
                              const ta_tensor *v, const ta_attention_opts *opts_in,
                              const double *bias4, int want_w, double tol)
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
    layer_ref(ref, att, l, &p);
    double err = ta_test_max_err(&out, ref, 0.0, 0, NULL);
    if (!(err <= tol)) fail_msg("line %d: output differs from the float64 oracle by %g (tol %g)", line, err, tol);
    if (want_w == 1) {
        double werr = ta_test_max_err(&w, att, 0.0, 0, NULL);
        if (!(werr <= tol)) fail_msg("line %d: weights differ by %g (tol %g)", line, werr, tol);
    } else if (want_w == 2) {
        double *avg = calloc((size_t)(N * Lq * Lk + 1), sizeof(double));
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t ij = 0; ij < Lq * Lk; ij++) avg[n * Lq * Lk + ij] += att[(n * H + h) * Lq * Lk + ij] / (double)H;
        double werr = ta_test_max_err(&w, avg, 0.0, 0, NULL);
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

double *ta_test_bias_new(int64_t N, int64_t H, int64_t Lq, int64_t Lk)
{
    return calloc((size_t)(N * H * Lq * Lk + 1), sizeof(double));
}

void ta_test_layer_check_weights_at(int line, ta_attention *l, const ta_tensor *q,
                                    const ta_tensor *k, const ta_tensor *v,
                                    const ta_attention_opts *opts, const double *bias4, double tol)
{
    for (int want_w = 0; want_w <= 2; want_w++)
        ta_test_layer_check_at(line, l, q, k, v, opts, bias4, want_w, tol);
}
