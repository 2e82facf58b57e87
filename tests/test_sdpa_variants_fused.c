/* ta-test: all-isas
 * The fused forward and backward with the attention variants on shapes the fixtures do not reach:
 * many key tiles with a window (tiles left of every row's window skipped, tiles its left
 * bounds cut masked), the decode key split with a window (chunks left of the window
 * empty), rows a window blocks entirely with and without sinks, ALiBi [H] and [B, H],
 * GQA tiles that span heads. Oracle: the reference path (every score from its definition
 * in double), within 5e-5 for O and LSE, 2e-4 for dQ, dK, dV and dsinks (the backward
 * from the reference forward's O and LSE); and the fused results are the same bits on 1
 * and 3 threads. */
#include "ta_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define TOL 5e-5
#define TOL_GRAD 2e-4

typedef struct vcase {
    const char *name;
    int64_t B, H, Hkv, Lq, Lk, D;
    ta_causal causal;
    int has_window;
    int64_t left, right;
    float softcap;
    int alibi;   /* 0 none, 1 [H], 2 [B, H] */
    int sinks;
} vcase;

static void fill_seq(ta_tensor *t, float base, float step)
{
    float *d = t->data;
    for (int64_t i = 0; i < ta_tensor_numel(t); i++) d[i] = base + step * (float)(i % 7);
}

static void expect_close_tol(const char *c, const char *what, const ta_tensor *got,
                             const ta_tensor *want, double tol)
{
    const float *g = got->data, *w = want->data;
    for (int64_t i = 0; i < ta_tensor_numel(got); i++) {
        if (isinf(w[i]) && g[i] == w[i]) continue;
        if (!(fabs((double)g[i] - (double)w[i]) <= tol))
            fail_msg("%s: %s[%lld] fused %.9g, reference %.9g", c, what, (long long)i,
                     (double)g[i], (double)w[i]);
    }
}

static void expect_close(const char *c, const char *what, const ta_tensor *got,
                         const ta_tensor *want)
{
    expect_close_tol(c, what, got, want, TOL);
}

static bool same_bits(const ta_tensor *a, const ta_tensor *b)
{
    return !memcmp(a->data, b->data, sizeof(float) * (size_t)ta_tensor_numel(a));
}

/* The backward of the case: reference, fused on 1 and on 3 threads, from the reference
 * forward's O and LSE. */
static void backward(const vcase *c, const ta_sdpa_opts *opts, const ta_tensor *q,
                     const ta_tensor *k, const ta_tensor *v, const ta_tensor *o,
                     const ta_tensor *l)
{
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D};
    const int64_t hs[1] = {c->H};
    ta_tensor dO, g[3][4];
    TA_CHECK_OK(ta_tensor_empty(&dO, 4, qs));
    TA_CHECK_OK(ta_randn(&dO, 14));
    const int threads = ta_get_num_threads();
    for (int r = 0; r < 3; r++) {
        TA_CHECK_OK(ta_tensor_full(&g[r][0], 4, qs, 9.0f));
        TA_CHECK_OK(ta_tensor_full(&g[r][1], 4, ks, 9.0f));
        TA_CHECK_OK(ta_tensor_full(&g[r][2], 4, ks, 9.0f));
        TA_CHECK_OK(ta_tensor_full(&g[r][3], 1, hs, 9.0f));
        ta_sdpa_opts ro = *opts;
        ro.path = r == 0 ? TA_SDPA_REFERENCE : TA_SDPA_FUSED;
        ro.dsinks = c->sinks ? &g[r][3] : NULL;
        TA_CHECK_OK(ta_set_num_threads(r == 2 ? 3 : 1));
        TA_CHECK_OK(ta_sdpa_backward(&g[r][0], &g[r][1], &g[r][2], &dO, q, k, v, o, l, &ro));
    }
    TA_CHECK_OK(ta_set_num_threads(threads));
    const char *roles[4] = {"dQ", "dK", "dV", "dsinks"};
    for (int t = 0; t < (c->sinks ? 4 : 3); t++) {
        expect_close_tol(c->name, roles[t], &g[1][t], &g[0][t], TOL_GRAD);
        if (!same_bits(&g[1][t], &g[2][t]))
            fail_msg("%s: the fused backward's %s differs between 1 and 3 threads", c->name,
                     roles[t]);
    }
    ta_tensor_free(&dO);
    for (int r = 0; r < 3; r++)
        for (int t = 0; t < 4; t++) ta_tensor_free(&g[r][t]);
}

static void run_case(const vcase *c)
{
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->Hkv, c->Lk, c->D};
    const int64_t ls[3] = {c->B, c->H, c->Lq}, hs[1] = {c->H}, bhs[2] = {c->B, c->H};
    ta_tensor q, k, v, o[3], l[3], slopes = {0}, sinks = {0};
    TA_CHECK_OK(ta_tensor_empty(&q, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&v, 4, ks));
    TA_CHECK_OK(ta_randn(&q, 11));
    TA_CHECK_OK(ta_randn(&k, 12));
    TA_CHECK_OK(ta_randn(&v, 13));
    for (int r = 0; r < 3; r++) {
        TA_CHECK_OK(ta_tensor_full(&o[r], 4, qs, 9.0f));
        TA_CHECK_OK(ta_tensor_full(&l[r], 3, ls, 9.0f));
    }
    ta_sdpa_opts opts = {.causal = c->causal, .has_window = c->has_window,
                         .window_left = c->left, .window_right = c->right,
                         .softcap = c->softcap};
    if (c->alibi) {
        TA_CHECK_OK(c->alibi == 1 ? ta_tensor_empty(&slopes, 1, hs)
                                  : ta_tensor_empty(&slopes, 2, bhs));
        fill_seq(&slopes, 0.01f, 0.03f);
        opts.alibi_slopes = &slopes;
    }
    if (c->sinks) {
        TA_CHECK_OK(ta_tensor_empty(&sinks, 1, hs));
        fill_seq(&sinks, -1.0f, 0.5f);
        opts.sinks = &sinks;
    }
    const int threads = ta_get_num_threads();
    for (int r = 0; r < 3; r++) {
        ta_sdpa_opts ro = opts;
        ro.path = r == 0 ? TA_SDPA_REFERENCE : TA_SDPA_FUSED;
        ro.lse = &l[r];
        TA_CHECK_OK(ta_set_num_threads(r == 2 ? 3 : 1));
        TA_CHECK_OK(ta_sdpa(&o[r], &q, &k, &v, &ro));
    }
    TA_CHECK_OK(ta_set_num_threads(threads));
    expect_close(c->name, "O", &o[1], &o[0]);
    expect_close(c->name, "LSE", &l[1], &l[0]);
    if (!same_bits(&o[1], &o[2]) || !same_bits(&l[1], &l[2]))
        fail_msg("%s: the fused forward differs between 1 and 3 threads", c->name);
    opts.lse = NULL;
    backward(c, &opts, &q, &k, &v, &o[0], &l[0]);
    ta_tensor *all[] = {&q, &k, &v, &o[0], &o[1], &o[2], &l[0], &l[1], &l[2], &slopes, &sinks};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static void test_fused_variants(void **state)
{
    (void)state;
    static const vcase cases[] = {
        {"prefill window causal softcap alibi sinks", 1, 4, 2, 300, 300, 64,
         TA_CAUSAL_BOTTOM_RIGHT, 1, 64, 0, 20.0f, 1, 1},
        {"window both sides, no causal, [B,H] alibi", 2, 2, 1, 200, 260, 32, TA_CAUSAL_NONE,
         1, 40, 17, 0.0f, 2, 0},
        {"decode split, window", 1, 8, 1, 1, 3000, 64, TA_CAUSAL_BOTTOM_RIGHT, 1, 700, -1,
         0.0f, 1, 1},
        {"decode split, window, no sinks, softcap", 1, 4, 2, 3, 2500, 32, TA_CAUSAL_NONE, 1,
         100, 0, 5.0f, 0, 0},
        {"empty rows with sinks", 1, 3, 3, 100, 50, 16, TA_CAUSAL_NONE, 1, 10, 10, 0.0f, 0, 1},
        {"empty rows without sinks", 1, 3, 3, 100, 50, 16, TA_CAUSAL_NONE, 1, 10, 10, 0.0f, 0,
         0},
        {"top-left causal window", 2, 2, 2, 130, 1100, 16, TA_CAUSAL_TOP_LEFT, 1, 5, -1, 0.0f,
         1, 1},
        {"softcap alibi sinks, no window", 1, 6, 2, 77, 150, 24, TA_CAUSAL_NONE, 0, -1, -1,
         2.5f, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
}

/* Window bounds up to INT64_MAX (wider than any sequence) see what a bound of Lq + Lk
 * sees, forward and backward on both paths: the bounds are compared, not summed into an
 * overflow (a window of (INT64_MAX, INT64_MAX) blocked every key until session 33). */
static void test_windows_wider_than_any_sequence(void **state)
{
    (void)state;
    const int64_t qs[4] = {1, 2, 70, 16}, ks[4] = {1, 1, 90, 16}, big = INT64_MAX, fit = 160;
    ta_tensor q, k, v, o[2], g[2][3], dout;
    TA_CHECK_OK(ta_tensor_empty(&q, 4, qs));
    TA_CHECK_OK(ta_tensor_empty(&k, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&v, 4, ks));
    TA_CHECK_OK(ta_tensor_empty(&dout, 4, qs));
    TA_CHECK_OK(ta_randn(&q, 21));
    TA_CHECK_OK(ta_randn(&k, 22));
    TA_CHECK_OK(ta_randn(&v, 23));
    TA_CHECK_OK(ta_randn(&dout, 24));
    for (int r = 0; r < 2; r++) {
        TA_CHECK_OK(ta_tensor_empty(&o[r], 4, qs));
        TA_CHECK_OK(ta_tensor_empty(&g[r][0], 4, qs));
        TA_CHECK_OK(ta_tensor_empty(&g[r][1], 4, ks));
        TA_CHECK_OK(ta_tensor_empty(&g[r][2], 4, ks));
    }
    const int64_t bounds[3][2] = {{big, big}, {big, 0}, {0, big}};
    for (int path = 0; path < 2; path++)
        for (int causal = 0; causal < 2; causal++)
            for (int w = 0; w < 3; w++) {
                char name[96];
                snprintf(name, sizeof name, "%s, %s, window (%s, %s)",
                         path ? "fused" : "reference", causal ? "bottom-right" : "no causal",
                         bounds[w][0] ? "INT64_MAX" : "0", bounds[w][1] ? "INT64_MAX" : "0");
                for (int r = 0; r < 2; r++) { /* r 0: the bounds as given; 1: Lq + Lk */
                    ta_sdpa_opts opts = {
                        .path = path ? TA_SDPA_FUSED : TA_SDPA_REFERENCE,
                        .causal = causal ? TA_CAUSAL_BOTTOM_RIGHT : TA_CAUSAL_NONE,
                        .has_window = 1,
                        .window_left = bounds[w][0] ? (r ? fit : big) : 0,
                        .window_right = bounds[w][1] ? (r ? fit : big) : 0};
                    ta_tensor lse;
                    const int64_t ls[3] = {1, 2, 70};
                    TA_CHECK_OK(ta_tensor_empty(&lse, 3, ls));
                    opts.lse = &lse;
                    TA_CHECK_OK(ta_sdpa(&o[r], &q, &k, &v, &opts));
                    opts.lse = NULL;
                    TA_CHECK_OK(ta_sdpa_backward(&g[r][0], &g[r][1], &g[r][2], &dout, &q, &k,
                                                 &v, &o[r], &lse, &opts));
                    ta_tensor_free(&lse);
                }
                expect_close(name, "O", &o[0], &o[1]);
                expect_close_tol(name, "dQ", &g[0][0], &g[1][0], TOL_GRAD);
                expect_close_tol(name, "dK", &g[0][1], &g[1][1], TOL_GRAD);
                expect_close_tol(name, "dV", &g[0][2], &g[1][2], TOL_GRAD);
            }
    ta_tensor *all[] = {&q, &k, &v, &dout, &o[0], &o[1], &g[0][0], &g[0][1], &g[0][2],
                        &g[1][0], &g[1][1], &g[1][2]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fused_variants),
                                       cmocka_unit_test(test_windows_wider_than_any_sequence)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
