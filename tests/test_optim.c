/* Optimisers against their formulas, computed here in double for several steps (SGD:
 * plain, momentum with dampening, Nesterov, weight decay; AdamW: bias correction,
 * decoupled weight decay, eps outside the sqrt), and against PyTorch trajectories
 * (tests/fixtures/layers_grad.tafx, cases kind=optim: torch.optim.AdamW and
 * torch.optim.SGD(momentum, nesterov) on a small tensor with fixed gradients per step).
 * Also: strided parameters, state keyed by position, errors. */
#include "ta_test.h"
#include "fixtures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NP 2    /* parameters per test */
#define NSTEP 6

typedef struct hyper {
    int adamw;
    double lr, momentum, dampening, wd, b1, b2, eps;
    int nesterov;
} hyper;

/* The gradient of step t for element e of parameter i: varied signs and sizes. */
static double grad_at(int i, int e, int t)
{
    return sin(1.3 * e + 0.7 * i + 2.1 * t) * (1.0 + 0.5 * t) + (e % 3 == 0 ? 0.01 : 0.0);
}

static void run_formula_case(const hyper *h, const char *name)
{
    const int64_t n0 = 7, n1[2] = {3, 5};
    ta_tensor p[NP], g[NP];
    TA_CHECK_OK(ta_tensor_empty(&p[0], 1, &n0));
    TA_CHECK_OK(ta_tensor_empty(&p[1], 2, n1));
    TA_CHECK_OK(ta_tensor_empty(&g[0], 1, &n0));
    TA_CHECK_OK(ta_tensor_empty(&g[1], 2, n1));
    TA_CHECK_OK(ta_randn(&p[0], 1));
    TA_CHECK_OK(ta_randn(&p[1], 2));
    const int cnt[NP] = {7, 15};
    double ref[NP][16], s1[NP][16], s2[NP][16];
    for (int i = 0; i < NP; i++)
        for (int e = 0; e < cnt[i]; e++) {
            ref[i][e] = ((float *)p[i].data)[e];
            s1[i][e] = s2[i][e] = 0.0;
        }
    ta_optimizer *opt;
    if (h->adamw)
        TA_CHECK_OK(ta_optimizer_adamw(&opt, &(ta_adamw_opts){.lr = h->lr, .beta1 = h->b1, .beta2 = h->b2, .eps = h->eps, .weight_decay = h->wd}));
    else
        TA_CHECK_OK(ta_optimizer_sgd(&opt, &(ta_sgd_opts){.lr = h->lr, .momentum = h->momentum, .dampening = h->dampening, .weight_decay = h->wd, .nesterov = h->nesterov}));
    ta_tensor *pp[NP] = {&p[0], &p[1]};
    const ta_tensor *gp[NP] = {&g[0], &g[1]};
    double worst = 0.0;
    for (int t = 1; t <= NSTEP; t++) {
        for (int i = 0; i < NP; i++)
            for (int e = 0; e < cnt[i]; e++) ((float *)g[i].data)[e] = (float)grad_at(i, e, t);
        TA_CHECK_OK(ta_optimizer_step(opt, NP, pp, gp));
        assert_int_equal(ta_optimizer_steps(opt), t);
        for (int i = 0; i < NP; i++)
            for (int e = 0; e < cnt[i]; e++) {
                double gr = (float)grad_at(i, e, t), x = ref[i][e];
                if (h->adamw) {
                    x *= 1.0 - h->lr * h->wd;
                    s1[i][e] = h->b1 * s1[i][e] + (1.0 - h->b1) * gr;
                    s2[i][e] = h->b2 * s2[i][e] + (1.0 - h->b2) * gr * gr;
                    double mhat = s1[i][e] / (1.0 - pow(h->b1, t));
                    double vhat = s2[i][e] / (1.0 - pow(h->b2, t));
                    x -= h->lr * mhat / (sqrt(vhat) + h->eps);
                } else {
                    double d = gr + h->wd * x;
                    if (h->momentum != 0.0) {
                        s1[i][e] = t == 1 ? d : h->momentum * s1[i][e] + (1.0 - h->dampening) * d;
                        d = h->nesterov ? d + h->momentum * s1[i][e] : s1[i][e];
                    }
                    x -= h->lr * d;
                }
                ref[i][e] = x;
                double got = ((float *)p[i].data)[e], err = fabs(got - x) / (1.0 + fabs(x));
                worst = ta_test_worse(worst, err);
                if (!(err <= 2e-6))
                    fail_msg("%s: step %d, param %d[%d] = %.9g, formula %.9g", name, t, i, e, got, x);
            }
    }
    print_message("%-24s %d steps, max rel err %.2e\n", name, NSTEP, worst);
    ta_optimizer_free(opt);
    for (int i = 0; i < NP; i++) {
        ta_tensor_free(&p[i]);
        ta_tensor_free(&g[i]);
    }
}

static void test_sgd_matches_formula(void **state)
{
    (void)state;
    hyper plain = {.lr = 0.1};
    hyper mom = {.lr = 0.05, .momentum = 0.9, .dampening = 0.3};
    hyper nest = {.lr = 0.05, .momentum = 0.8, .nesterov = 1};
    hyper wd = {.lr = 0.05, .momentum = 0.9, .wd = 0.1, .nesterov = 1};
    hyper wd_plain = {.lr = 0.1, .wd = 0.2};
    run_formula_case(&plain, "sgd");
    run_formula_case(&mom, "sgd momentum+dampening");
    run_formula_case(&nest, "sgd nesterov");
    run_formula_case(&wd, "sgd nesterov+weight decay");
    run_formula_case(&wd_plain, "sgd weight decay");
}

static void test_adamw_matches_formula(void **state)
{
    (void)state;
    hyper a = {.adamw = 1, .lr = 1e-2, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .wd = 1e-2};
    hyper b = {.adamw = 1, .lr = 3e-2, .b1 = 0.5, .b2 = 0.9, .eps = 1e-3, .wd = 0.3};
    hyper c = {.adamw = 1, .lr = 1e-3, .b1 = 0.0, .b2 = 0.0, .eps = 0.0, .wd = 0.0};
    run_formula_case(&a, "adamw defaults");
    run_formula_case(&b, "adamw large eps, wd");
    run_formula_case(&c, "adamw betas 0 (sign-ish)");
}

/* A strided parameter (a transposed view) is updated like its contiguous twin, and the
 * state follows its logical order. */
static void test_strided_parameters(void **state)
{
    (void)state;
    const int64_t s[2] = {4, 6}, sT[2] = {6, 4};
    ta_tensor a, bbuf, bview, g;
    TA_CHECK_OK(ta_tensor_empty(&a, 2, s)); TA_CHECK_OK(ta_randn(&a, 3));
    TA_CHECK_OK(ta_tensor_empty(&bbuf, 2, sT));
    TA_CHECK_OK(ta_tensor_transpose(&bview, &bbuf, 0, 1));
    TA_CHECK_OK(ta_tensor_copy(&bview, &a));
    TA_CHECK_OK(ta_tensor_empty(&g, 2, s));
    ta_optimizer *o1, *o2;
    TA_CHECK_OK(ta_optimizer_adamw(&o1, &(ta_adamw_opts){.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1}));
    TA_CHECK_OK(ta_optimizer_adamw(&o2, &(ta_adamw_opts){.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1}));
    for (int t = 0; t < 4; t++) {
        TA_CHECK_OK(ta_randn(&g, 100 + (uint64_t)t));
        ta_tensor *pa = &a, *pb = &bview;
        const ta_tensor *gg = &g;
        TA_CHECK_OK(ta_optimizer_step(o1, 1, &pa, &gg));
        TA_CHECK_OK(ta_optimizer_step(o2, 1, &pb, &gg));
    }
    ta_tensor c;
    TA_CHECK_OK(ta_tensor_contiguous(&c, &bview));
    assert_memory_equal(c.data, a.data, sizeof(float) * 24);
    ta_tensor_free(&c);
    ta_optimizer_free(o1);
    ta_optimizer_free(o2);
    ta_tensor_free(&a); ta_tensor_free(&bbuf); ta_tensor_free(&g);
}

static void test_optimizer_errors(void **state)
{
    (void)state;
    ta_optimizer *o = NULL;
    TA_CHECK_ERR(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = 0.1, .momentum = 0.0, .dampening = 0.0, .weight_decay = 0.0, .nesterov = 1}), TA_EINVAL, "Nesterov momentum requires");
    TA_CHECK_ERR(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.0, .nesterov = 1}), TA_EINVAL, "zero dampening");
    TA_CHECK_ERR(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = -1.0, .momentum = 0.0, .dampening = 0.0, .weight_decay = 0.0, .nesterov = 0}), TA_EINVAL, "lr must be");
    TA_CHECK_ERR(ta_optimizer_adamw(&o, &(ta_adamw_opts){.lr = 1e-3, .beta1 = 1.0, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0}), TA_EINVAL, "beta1 must be in [0, 1)");
    TA_CHECK_ERR(ta_optimizer_adamw(&o, &(ta_adamw_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = -0.1, .eps = 1e-8, .weight_decay = 0.0}), TA_EINVAL, "beta2");
    TA_CHECK_ERR(ta_optimizer_adamw(NULL, &(ta_adamw_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.9, .eps = 1e-8, .weight_decay = 0.0}), TA_EINVAL, "opt is NULL");
    assert_null(o);
    TA_CHECK_OK(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = 0.1, .momentum = 0.9, .dampening = 0.0, .weight_decay = 0.0, .nesterov = 0}));
    const int64_t s3 = 3, s4 = 4;
    ta_tensor p, g, p4;
    TA_CHECK_OK(ta_tensor_zeros(&p, 1, &s3));
    TA_CHECK_OK(ta_tensor_zeros(&g, 1, &s4));
    TA_CHECK_OK(ta_tensor_zeros(&p4, 1, &s4));
    ta_tensor *pp = &p;
    const ta_tensor *gp = &g;
    TA_CHECK_ERR(ta_optimizer_step(o, 1, &pp, &gp), TA_ESHAPE, "params[0] has shape [3] but grads[0] has [4]");
    ta_tensor *pp4 = &p4;
    TA_CHECK_OK(ta_optimizer_step(o, 1, &pp4, &gp));
    /* the state is per position: another size at position 0 is refused */
    const ta_tensor *gp3 = &p;
    TA_CHECK_ERR(ta_optimizer_step(o, 1, &pp, &gp3), TA_ESHAPE, "had 4 at the first step");
    ta_tensor *two[2] = {&p4, &p4};
    const ta_tensor *gtwo[2] = {&g, &g};
    TA_CHECK_ERR(ta_optimizer_step(o, 2, two, gtwo), TA_EINVAL, "state is for 1");
    TA_CHECK_ERR(ta_optimizer_set_lr(o, NAN), TA_EINVAL, "lr must be");
    TA_CHECK_OK(ta_optimizer_set_lr(o, 0.5));
    assert_true(ta_optimizer_lr(o) == 0.5);
    ta_optimizer_free(o);
    ta_optimizer_free(NULL);
    ta_tensor_free(&p); ta_tensor_free(&g); ta_tensor_free(&p4);
}

/* A parameter sharing memory with a gradient or another parameter is refused before
 * anything is updated: element by element, p = buf[1..8] with g = buf[0..7] read the
 * gradient after writing it (SGD lr 1 gave p 1 2 2 3 3 4 4 5 instead of all 1, TA_OK). */
static void test_overlapping_params_refused(void **state)
{
    (void)state;
    float buf[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, other[8] = {0};
    const int64_t n8 = 8;
    ta_tensor p, g, q, h;
    TA_CHECK_OK(ta_tensor_from_buffer(&p, buf + 1, 1, &n8, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&g, buf, 1, &n8, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&h, other, 1, &n8, NULL));
    ta_optimizer *o;
    TA_CHECK_OK(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = 1.0}));
    ta_tensor *pp[2] = {&p, &q};
    const ta_tensor *gp[2] = {&g, &h};
    TA_CHECK_ERR(ta_optimizer_step(o, 1, pp, gp), TA_EINVAL, "params[0] overlaps grads[0]");
    /* another position's gradient, and two parameters on one buffer */
    TA_CHECK_OK(ta_tensor_from_buffer(&q, other, 1, &n8, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&h, buf + 1, 1, &n8, NULL));
    gp[0] = &h;
    gp[1] = &g;
    TA_CHECK_ERR(ta_optimizer_step(o, 2, pp, gp), TA_EINVAL, "overlaps grads[");
    float gbuf[16] = {0};
    ta_tensor g1, g2;
    TA_CHECK_OK(ta_tensor_from_buffer(&g1, gbuf, 1, &n8, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&g2, gbuf + 8, 1, &n8, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&q, buf, 1, &n8, NULL));
    gp[0] = &g1;
    gp[1] = &g2;
    TA_CHECK_ERR(ta_optimizer_step(o, 2, pp, gp), TA_EINVAL, "params[1] overlaps params[0]");
    for (int e = 0; e < 9; e++) assert_true(buf[e] == (float)(e + 1));
    assert_int_equal(ta_optimizer_steps(o), 0);
    /* apart, the same call runs (the gradients may share memory: they are only read) */
    TA_CHECK_OK(ta_tensor_from_buffer(&q, other, 1, &n8, NULL));
    gp[1] = &g1;
    TA_CHECK_OK(ta_optimizer_step(o, 2, pp, gp));
    ta_optimizer_free(o);
}

/* A parameter with a stride-0 dim of more than one element aliases its elements (each
 * update would read the previous one's result): refused. An empty parameter has no
 * elements to alias, whatever its strides (NumPy gives a [2, 0, 3] array the strides
 * [0, 0, 0]): taken, and the step updates the others as SGD's formula says. */
static void test_stride0_params(void **state)
{
    (void)state;
    float pb[4] = {1, 2, 3, 4}, gb[4] = {0.5f, -1, 2, 0.25f}, eb[1] = {0};
    const int64_t n4 = 4, s3[3] = {2, 0, 3}, z3[3] = {0, 0, 0}, s2 = 2, z1 = 0;
    ta_tensor p, g, pe, ge, pa;
    TA_CHECK_OK(ta_tensor_from_buffer(&p, pb, 1, &n4, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&g, gb, 1, &n4, NULL));
    TA_CHECK_OK(ta_tensor_from_buffer(&pe, eb, 3, s3, z3));
    TA_CHECK_OK(ta_tensor_from_buffer(&ge, eb, 3, s3, z3));
    ta_optimizer *o;
    TA_CHECK_OK(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = 0.5}));
    ta_tensor *pp[2] = {&pe, &p};
    const ta_tensor *gp[2] = {&ge, &g};
    TA_CHECK_OK(ta_optimizer_step(o, 2, pp, gp));
    for (int e = 0; e < 4; e++) assert_true(pb[e] == (float)((e + 1) - 0.5 * gb[e]));
    ta_optimizer_free(o);
    /* two elements on one address */
    TA_CHECK_OK(ta_tensor_from_buffer(&pa, pb, 1, &s2, &z1));
    TA_CHECK_OK(ta_tensor_from_buffer(&g, gb, 1, &s2, NULL));
    TA_CHECK_OK(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = 0.5}));
    ta_tensor *pa1 = &pa;
    const ta_tensor *g1 = &g;
    TA_CHECK_ERR(ta_optimizer_step(o, 1, &pa1, &g1), TA_EINVAL,
                 "params[0] has stride 0 in dim 0, so its elements alias");
    ta_optimizer_free(o);
}

/* PyTorch trajectories: records p0 (initial), grads [T, ...] and params [T, ...]
 * (after each step), hyperparameters in the case metadata. */
static double meta_f(const char *meta, const char *key)
{
    char buf[64];
    if (!ta_fixture_meta_get(meta, key, buf, sizeof buf)) fail_msg("no meta '%s'", key);
    return atof(buf);
}

static void test_optimizers_match_pytorch(void **state)
{
    (void)state;
    ta_fixture_file *f;
    TA_CHECK_OK(ta_fixture_open(&f, "layers_grad.tafx"));
    int ran = 0;
    for (int ci = 0; ci < ta_fixture_case_count(f); ci++) {
        const char *c = ta_fixture_case_name(f, ci);
        const char *meta = ta_fixture_case_meta(f, c);
        char kind[16], opt_name[16];
        ta_fixture_meta_get(meta, "kind", kind, sizeof kind);
        if (strcmp(kind, "optim")) continue;
        ta_fixture_meta_get(meta, "optimizer", opt_name, sizeof opt_name);
        ta_optimizer *o;
        if (!strcmp(opt_name, "adamw"))
            TA_CHECK_OK(ta_optimizer_adamw(&o, &(ta_adamw_opts){.lr = meta_f(meta, "lr"), .beta1 = meta_f(meta, "beta1"), .beta2 = meta_f(meta, "beta2"), .eps = meta_f(meta, "eps"), .weight_decay = meta_f(meta, "weight_decay")}));
        else
            TA_CHECK_OK(ta_optimizer_sgd(&o, &(ta_sgd_opts){.lr = meta_f(meta, "lr"), .momentum = meta_f(meta, "momentum"), .dampening = meta_f(meta, "dampening"), .weight_decay = meta_f(meta, "weight_decay"), .nesterov = (int)meta_f(meta, "nesterov")}));
        ta_tensor p, gall, pall;
        TA_CHECK_OK(ta_fixture_tensor(&p, ta_fixture_case_record(f, c, "p0")));
        TA_CHECK_OK(ta_fixture_tensor(&gall, ta_fixture_case_record(f, c, "grads")));
        TA_CHECK_OK(ta_fixture_tensor(&pall, ta_fixture_case_record(f, c, "params")));
        const int64_t T = gall.shape[0], n = ta_tensor_numel(&p);
        double worst = 0.0;
        for (int64_t t = 0; t < T; t++) {
            ta_tensor g;
            TA_CHECK_OK(ta_tensor_from_buffer(&g, (float *)gall.data + t * n, p.ndim, p.shape, NULL));
            ta_tensor *pp = &p;
            const ta_tensor *gp = &g;
            TA_CHECK_OK(ta_optimizer_step(o, 1, &pp, &gp));
            for (int64_t e = 0; e < n; e++) {
                double want = ((float *)pall.data)[t * n + e], got = ((float *)p.data)[e];
                double err = fabs(got - want);
                worst = ta_test_worse(worst, err);
                if (!(err <= 1e-5 * (1.0 + fabs(want))))
                    fail_msg("%s: step %lld element %lld: %.9g, torch %.9g", c, (long long)t + 1,
                             (long long)e, got, want);
            }
        }
        print_message("%-24s %lld steps, max |p - torch| %.2e\n", c, (long long)T, worst);
        ta_optimizer_free(o);
        ta_tensor_free(&p); ta_tensor_free(&gall); ta_tensor_free(&pall);
        ran++;
    }
    if (ran < 3) fail_msg("only %d optimiser cases in layers_grad.tafx (expected >= 3)", ran);
    ta_fixture_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_matches_formula),
        cmocka_unit_test(test_adamw_matches_formula),
        cmocka_unit_test(test_strided_parameters),
        cmocka_unit_test(test_optimizer_errors),
        cmocka_unit_test(test_overlapping_params_refused),
        cmocka_unit_test(test_stride0_params),
        cmocka_unit_test(test_optimizers_match_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
