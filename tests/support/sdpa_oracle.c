#include "sdpa_oracle.h"
#include "fixture_cases.h"
#include "ta_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ta_test_at4(const ta_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t idx[4] = {a, b, c, d};
    return *ta_tensor_at_const(t, idx);
}

double ta_test_mask_at(const ta_tensor *m, int64_t b, int64_t h, int64_t i, int64_t j)
{
    int64_t full[4] = {b, h, i, j}, idx[4];
    int lead = 4 - m->ndim;
    for (int d = 0; d < m->ndim; d++) idx[d] = m->shape[d] == 1 ? 0 : full[d + lead];
    return *ta_tensor_at_const(m, idx);
}

void ta_test_sdpa_f64(double *O, double *W, double *L, const ta_tensor *Q, const ta_tensor *K,
                      const ta_tensor *V, const ta_sdpa_opts *op, double scale,
                      bool skip_zero_weights)
{
    int64_t B = Q->shape[0], H = Q->shape[1], Lq = Q->shape[2], D = Q->shape[3];
    int64_t Hkv = K->shape[1], Lk = K->shape[2], Dv = V->shape[3], G = H / Hkv;
    double *s = malloc(sizeof(double) * (size_t)(Lk ? Lk : 1));
    double *w = malloc(sizeof(double) * (size_t)(Lk ? Lk : 1));
    /* Q, K, V in C order as doubles: element (b, h, l, d) of X [B, Hx, L, Dx] at
     * ((b * Hx + h) * L + l) * Dx + d. */
    double *q = ta_test_to_f64(Q), *k = ta_test_to_f64(K), *v = ta_test_to_f64(V);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                int64_t kh = h / G, row = (b * H + h) * Lq + i;
                int bad = 0;
                double mx = -INFINITY;
                for (int64_t j = 0; j < Lk; j++) {
                    int blocked = (op->key_lengths && j >= op->key_lengths[b]) ||
                                  (op->causal == TA_CAUSAL_TOP_LEFT && j > i) ||
                                  (op->causal == TA_CAUSAL_BOTTOM_RIGHT && j > i + Lk - Lq);
                    double mv = op->mask ? ta_test_mask_at(op->mask, b, h, i, j) : 0.0;
                    if (op->mask && op->mask_mode == TA_MASK_KEEP && mv == 0) blocked = 1;
                    if (op->mask && op->mask_mode == TA_MASK_BLOCK && mv != 0) blocked = 1;
                    if (blocked) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    const double *qr = q + row * D, *kr = k + ((b * Hkv + kh) * Lk + j) * D;
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++) acc += qr[d] * kr[d];
                    s[j] = acc * scale + (op->mask && op->mask_mode == TA_MASK_ADDITIVE ? mv : 0.0);
                    if (isnan(s[j]) || s[j] == INFINITY) bad = 1;
                    else if (s[j] > mx) mx = s[j];
                }
                double *out = O + row * Dv;
                if (bad || mx == -INFINITY) { /* NaN row, or nothing to attend */
                    for (int64_t j = 0; j < Lk; j++) w[j] = bad ? NAN : 0.0;
                    for (int64_t d = 0; d < Dv; d++) out[d] = bad ? NAN : 0.0;
                    L[row] = bad ? NAN : -INFINITY;
                } else {
                    double sum = 0;
                    for (int64_t j = 0; j < Lk; j++) sum += exp(s[j] - mx);
                    for (int64_t j = 0; j < Lk; j++) w[j] = exp(s[j] - mx) / sum;
                    L[row] = mx + log(sum);
                    for (int64_t d = 0; d < Dv; d++) {
                        double acc = 0;
                        for (int64_t j = 0; j < Lk; j++)
                            if (!skip_zero_weights || w[j] != 0)
                                acc += w[j] * v[((b * Hkv + kh) * Lk + j) * Dv + d];
                        out[d] = acc;
                    }
                }
                if (W)
                    for (int64_t j = 0; j < Lk; j++) W[row * Lk + j] = w[j];
            }
    free(q);
    free(k);
    free(v);
    free(w);
    free(s);
}

ta_test_sdpa_meta ta_test_sdpa_case_meta(const char *meta)
{
    ta_test_sdpa_meta m = {.mode = TA_MASK_KEEP};
    assert_int_equal(ta_fixture_meta_ints(meta, "shape", m.shape, 7), 7);
    char buf[64];
    ta_fixture_meta_get(meta, "scale", buf, sizeof buf);
    m.scale = (float)strtod(buf, NULL);
    ta_fixture_meta_get(meta, "causal", buf, sizeof buf);
    m.causal = !strcmp(buf, "top_left") ? TA_CAUSAL_TOP_LEFT
               : !strcmp(buf, "bottom_right") ? TA_CAUSAL_BOTTOM_RIGHT
                                              : TA_CAUSAL_NONE;
    if (ta_fixture_meta_get(meta, "mask_mode", buf, sizeof buf))
        m.mode = !strcmp(buf, "block") ? TA_MASK_BLOCK
                 : !strcmp(buf, "additive") ? TA_MASK_ADDITIVE : TA_MASK_KEEP;
    ta_fixture_meta_get(meta, "layout", buf, sizeof buf);
    m.blhd = !strcmp(buf, "blhd");
    return m;
}

void ta_test_sdpa_inputs_load(ta_test_sdpa_inputs *in, const ta_fixture_file *f, const char *c)
{
    memset(in, 0, sizeof *in);
    in->m = ta_test_sdpa_case_meta(ta_fixture_case_meta(f, c));
    in->layout = in->m.blhd ? TA_TEST_BLHD : TA_TEST_BHLD;
    ta_tensor *views[3] = {&in->q, &in->k, &in->v}, *stores[3] = {&in->qs, &in->ks, &in->vs};
    const char *roles[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        ta_tensor t;
        TA_CHECK_OK(ta_fixture_tensor(&t, ta_fixture_need(f, c, roles[i])));
        assert_int_equal(t.ndim, 4);
        ta_test_tensor4(views[i], stores[i], t.shape, in->layout, &t);
        ta_tensor_free(&t);
    }
    const ta_fixture_record *mr = ta_fixture_case_record(f, c, "mask");
    if (mr) TA_CHECK_OK(ta_fixture_tensor(&in->mask, mr));
    in->key_lengths = ta_fixture_case_i64(f, c, "key_lengths");
    in->opts = (ta_sdpa_opts){.scale = in->m.scale, .causal = in->m.causal,
                              .mask = mr ? &in->mask : NULL, .mask_mode = in->m.mode,
                              .key_lengths = in->key_lengths};
}

void ta_test_sdpa_inputs_free(ta_test_sdpa_inputs *in)
{
    ta_tensor *all[] = {&in->qs, &in->ks, &in->vs, &in->mask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    free(in->key_lengths);
    memset(in, 0, sizeof *in);
}
