/* ta-test: all-isas
 * The attention variants (window, softcap, ALiBi, sinks) against PyTorch:
 * tests/fixtures/sdpa_variants.tafx (tools/fixtures_variants.py) holds float32 inputs and
 * the float64 out, LSE, weights and the autograd gradients dq, dk, dv, dsinks of
 * sum(dO * out) for DESIGN.md's definitions run literally in torch, each variant alone and
 * combined with causal (both alignments), Lq != Lk, masks, key lengths and GQA, and rows
 * that a window blocks entirely, with and without sinks. Every case runs the forward on the
 * reference path (with weights), the fused one and the automatic one, within 5e-5, and
 * the backward on all three (fused: the fused backward),
 * both, from the fixture's out and LSE rounded to float32, within 2e-4 (the issue's
 * tolerances; the generator checks torch's own float32 math lands within half of them). */
#include "ta_test.h"

#include "fixture_cases.h"
#include "sdpa_oracle.h"
#include "sdpa_variants_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_FWD 5e-5
#define TOL_GRAD 2e-4

/* What the file must hold, counted from the cases' tags and records. */
typedef struct tally {
    int cases, window, softcap, alibi, sinks, empty_with_sinks, empty_without_sinks, combined;
} tally;

static void count(tally *t, const ta_fixture_file *f, const char *c)
{
    const char *meta = ta_fixture_case_meta(f, c);
    char tags[256], empty[32];
    ta_fixture_meta_get(meta, "tags", tags, sizeof tags);
    ta_fixture_meta_get(meta, "empty_rows", empty, sizeof empty);
    const int sinks = ta_fixture_case_record(f, c, "sinks") != NULL;
    t->cases++;
    t->window += strstr(tags, "window") != NULL;
    t->softcap += strstr(tags, "softcap") != NULL;
    t->alibi += ta_fixture_case_record(f, c, "alibi") != NULL;
    t->sinks += sinks;
    t->combined += strstr(tags, "combined") != NULL;
    if (atoi(empty) > 0) *(sinks ? &t->empty_with_sinks : &t->empty_without_sinks) += 1;
}

static void forward(const ta_fixture_file *f, const char *c, const ta_test_sdpa_inputs *in,
                    const ta_sdpa_opts *vo)
{
    const int64_t *sh = in->m.shape;
    const int64_t os[4] = {sh[0], sh[1], sh[3], sh[6]}, ws[4] = {sh[0], sh[1], sh[3], sh[4]};
    ta_tensor O, Os, W, L;
    ta_test_tensor4(&O, &Os, os, in->layout, NULL);
    TA_CHECK_OK(ta_tensor_full(&W, 4, ws, 7.0f));
    TA_CHECK_OK(ta_tensor_full(&L, 3, ws, 7.0f));
    const ta_fixture_record *want_w = ta_fixture_case_record(f, c, "weights");
    const ta_sdpa_path paths[3] = {TA_SDPA_REFERENCE, TA_SDPA_FUSED, TA_SDPA_AUTO};
    const char *names[3] = {"reference", "fused", "auto"};
    for (int path = 0; path < 3; path++) {
        ta_sdpa_opts o = *vo;
        o.lse = &L;
        o.path = paths[path];
        o.weights = path == 0 && want_w ? &W : NULL;
        TA_CHECK_OK(ta_tensor_fill(&O, 9.0f));
        TA_CHECK_OK(ta_sdpa(&O, &in->q, &in->k, &in->v, &o));
        const char *what = names[path];
        char name[64];
        snprintf(name, sizeof name, "out (%s)", what);
        ta_fixture_expect_close(c, name, &O, ta_fixture_need(f, c, "out"), 0.0, TOL_FWD);
        snprintf(name, sizeof name, "lse (%s)", what);
        ta_fixture_expect_close(c, name, &L, ta_fixture_need(f, c, "lse"), 1.0, TOL_FWD);
        if (o.weights) ta_fixture_expect_close(c, "weights", &W, want_w, 0.0, TOL_FWD);
    }
    ta_tensor_free(&Os);
    ta_tensor_free(&W);
    ta_tensor_free(&L);
}

static void backward(const ta_fixture_file *f, const char *c, const ta_test_sdpa_inputs *in,
                     const ta_sdpa_opts *vo)
{
    ta_tensor do0, o0, l0, dO, O, dQ, dK, dV, sdO, sO, sdQ, sdK, sdV, dS = {0};
    TA_CHECK_OK(ta_fixture_tensor(&do0, ta_fixture_need(f, c, "dout")));
    TA_CHECK_OK(ta_fixture_tensor(&o0, ta_fixture_need(f, c, "out")));
    TA_CHECK_OK(ta_fixture_tensor(&l0, ta_fixture_need(f, c, "lse")));
    ta_test_tensor4(&dO, &sdO, do0.shape, in->layout, &do0);
    ta_test_tensor4(&O, &sO, o0.shape, in->layout, &o0);
    ta_test_tensor4(&dQ, &sdQ, in->q.shape, in->layout, NULL);
    ta_test_tensor4(&dK, &sdK, in->k.shape, in->layout, NULL);
    ta_test_tensor4(&dV, &sdV, in->v.shape, in->layout, NULL);
    const ta_fixture_record *want_ds = ta_fixture_case_record(f, c, "dsinks");
    assert_true(!want_ds == !vo->sinks);
    if (want_ds) TA_CHECK_OK(ta_tensor_empty(&dS, 1, &in->m.shape[1]));
    const ta_sdpa_path paths[3] = {TA_SDPA_REFERENCE, TA_SDPA_FUSED, TA_SDPA_AUTO};
    const char *names[3] = {"reference", "fused", "auto"};
    for (int path = 0; path < 3; path++) {
        ta_sdpa_opts o = *vo;
        o.path = paths[path];
        o.dsinks = want_ds ? &dS : NULL;
        ta_tensor *outs[4] = {&dQ, &dK, &dV, &dS};
        for (int i = 0; i < (want_ds ? 4 : 3); i++) TA_CHECK_OK(ta_tensor_fill(outs[i], 9.0f));
        TA_CHECK_OK(ta_sdpa_backward(&dQ, &dK, &dV, &dO, &in->q, &in->k, &in->v, &O, &l0, &o));
        const char *roles[4] = {"dq", "dk", "dv", "dsinks"};
        for (int i = 0; i < (want_ds ? 4 : 3); i++) {
            char name[64];
            snprintf(name, sizeof name, "%s (%s)", roles[i], names[path]);
            ta_fixture_expect_close(c, name, outs[i], ta_fixture_need(f, c, roles[i]), 0.0,
                                    TOL_GRAD);
        }
    }
    ta_tensor *all[] = {&do0, &o0, &l0, &sdO, &sO, &sdQ, &sdK, &sdV, &dS};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
}

static void run_case(const ta_fixture_file *f, const char *c, void *ctx)
{
    count(ctx, f, c);
    ta_test_sdpa_inputs in;
    ta_test_sdpa_inputs_load(&in, f, c);
    ta_test_variants v;
    ta_sdpa_opts o = in.opts;
    ta_test_variants_load(&v, f, c, &o);
    forward(f, c, &in, &o);
    backward(f, c, &in, &o);
    ta_test_variants_free(&v);
    ta_test_sdpa_inputs_free(&in);
}

static void test_variants_match_pytorch(void **state)
{
    (void)state;
    tally t = {0};
    ta_fixture_cases_run("sdpa_variants.tafx", NULL, NULL, run_case, &t);
    if (t.cases < 30 || t.window < 10 || t.softcap < 6 || t.alibi < 6 || t.sinks < 10 ||
        t.empty_with_sinks < 3 || t.empty_without_sinks < 1 || t.combined < 3)
        fail_msg("sdpa_variants.tafx: %d cases: window %d, softcap %d, ALiBi %d, sinks %d, "
                 "combined %d; empty rows with sinks %d, without %d", t.cases, t.window,
                 t.softcap, t.alibi, t.sinks, t.combined, t.empty_with_sinks,
                 t.empty_without_sinks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_variants_match_pytorch)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
