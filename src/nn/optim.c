/* Optimisers: SGD (momentum, dampening, Nesterov, weight decay) and AdamW, with
 * PyTorch 1.13's formulas (torch/optim/sgd.py, adamw.py, the single-tensor path) in the
 * same float32 operation order, hyperparameters kept in double as Python passes them.
 *
 * State (momentum buffers, Adam moments) is kept per parameter position: the i-th tensor
 * of every step call is the same parameter. The first step records each position's
 * element count; a later call with another count, or another n, is an error. State
 * elements follow the parameter's row-major (logical) order, so any strides work.
 * Every update is elementwise: bitwise identical for any thread count. */
#include "core/core.h"
#include "core/tensor_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { OPT_SGD = 0, OPT_ADAMW = 1 } opt_kind;

struct ta_optimizer {
    opt_kind kind;
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
    int nesterov;
    int64_t steps;   /* completed steps */
    int n;           /* parameter count, fixed by the first step (0 before it) */
    int64_t *numel;  /* [n] */
    float **s1;      /* [n]: momentum buffer (SGD) or exp_avg (AdamW); NULL when unused */
    float **s2;      /* [n]: exp_avg_sq (AdamW) */
};

static ta_optimizer *opt_new(opt_kind kind)
{
    ta_optimizer *o = ta_alloc_zeroed(sizeof *o);
    if (o) o->kind = kind;
    return o;
}

ta_status ta_optimizer_sgd(ta_optimizer **opt, const ta_sgd_opts *opts)
{
    const char *fn = "ta_optimizer_sgd";
    if (!opt) return ta_error(TA_EINVAL, "%s: opt is NULL", fn);
    if (!opts) return ta_error(TA_EINVAL, "%s: opts is NULL (SGD has no default lr)", fn);
    const double lr = opts->lr, momentum = opts->momentum, dampening = opts->dampening,
                 weight_decay = opts->weight_decay;
    const int nesterov = opts->nesterov;
    if (!(lr >= 0.0) || !isfinite(lr))
        return ta_error(TA_EINVAL, "%s: lr must be finite and >= 0, got %g", fn, lr);
    if (!(momentum >= 0.0) || !isfinite(momentum))
        return ta_error(TA_EINVAL, "%s: momentum must be finite and >= 0, got %g", fn, momentum);
    if (!isfinite(dampening))
        return ta_error(TA_EINVAL, "%s: dampening must be finite, got %g", fn, dampening);
    if (!(weight_decay >= 0.0) || !isfinite(weight_decay))
        return ta_error(TA_EINVAL, "%s: weight_decay must be finite and >= 0, got %g", fn,
                        weight_decay);
    if (nesterov && (momentum <= 0.0 || dampening != 0.0))
        return ta_error(TA_EINVAL,
                        "%s: Nesterov momentum requires a momentum > 0 and zero dampening "
                        "(momentum %g, dampening %g)", fn, momentum, dampening);
    ta_optimizer *o = opt_new(OPT_SGD);
    if (!o) return TA_ENOMEM;
    o->lr = lr;
    o->momentum = momentum;
    o->dampening = dampening;
    o->weight_decay = weight_decay;
    o->nesterov = nesterov != 0;
    *opt = o;
    return TA_OK;
}

ta_status ta_optimizer_adamw(ta_optimizer **opt, const ta_adamw_opts *opts)
{
    const char *fn = "ta_optimizer_adamw";
    if (!opt) return ta_error(TA_EINVAL, "%s: opt is NULL", fn);
    const ta_adamw_opts h = opts ? *opts : TA_ADAMW_DEFAULTS;
    const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, eps = h.eps,
                 weight_decay = h.weight_decay;
    if (!(lr >= 0.0) || !isfinite(lr))
        return ta_error(TA_EINVAL, "%s: lr must be finite and >= 0, got %g", fn, lr);
    if (!(beta1 >= 0.0 && beta1 < 1.0))
        return ta_error(TA_EINVAL, "%s: beta1 must be in [0, 1), got %g", fn, beta1);
    if (!(beta2 >= 0.0 && beta2 < 1.0))
        return ta_error(TA_EINVAL, "%s: beta2 must be in [0, 1), got %g", fn, beta2);
    if (!(eps >= 0.0) || !isfinite(eps))
        return ta_error(TA_EINVAL, "%s: eps must be finite and >= 0, got %g", fn, eps);
    if (!(weight_decay >= 0.0) || !isfinite(weight_decay))
        return ta_error(TA_EINVAL, "%s: weight_decay must be finite and >= 0, got %g", fn,
                        weight_decay);
    ta_optimizer *o = opt_new(OPT_ADAMW);
    if (!o) return TA_ENOMEM;
    o->lr = lr;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    *opt = o;
    return TA_OK;
}

static void free_state(ta_optimizer *o)
{
    for (int i = 0; i < o->n; i++) {
        if (o->s1) ta_free(o->s1[i]);
        if (o->s2) ta_free(o->s2[i]);
    }
    ta_free(o->s1);
    ta_free(o->s2);
    ta_free(o->numel);
    o->s1 = o->s2 = NULL;
    o->numel = NULL;
    o->n = 0;
}

void ta_optimizer_free(ta_optimizer *opt)
{
    if (!opt) return;
    free_state(opt);
    ta_free(opt);
}

ta_status ta_optimizer_set_lr(ta_optimizer *opt, double lr)
{
    if (!opt) return ta_error(TA_EINVAL, "ta_optimizer_set_lr: opt is NULL");
    if (!(lr >= 0.0) || !isfinite(lr))
        return ta_error(TA_EINVAL, "ta_optimizer_set_lr: lr must be finite and >= 0, got %g", lr);
    opt->lr = lr;
    return TA_OK;
}

double ta_optimizer_lr(const ta_optimizer *opt)
{
    return opt ? opt->lr : 0.0;
}

int64_t ta_optimizer_steps(const ta_optimizer *opt)
{
    return opt ? opt->steps : 0;
}

/* First step: one state array (or two) per parameter, zeroed. */
static ta_status alloc_state(ta_optimizer *o, int n, ta_tensor *const *params)
{
    const int need1 = o->kind == OPT_ADAMW || o->momentum != 0.0, need2 = o->kind == OPT_ADAMW;
    o->numel = ta_alloc_zeroed(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    o->s1 = ta_alloc_zeroed(sizeof(float *) * (size_t)(n > 0 ? n : 1));
    o->s2 = ta_alloc_zeroed(sizeof(float *) * (size_t)(n > 0 ? n : 1));
    if (!o->numel || !o->s1 || !o->s2) goto fail;
    o->n = n;
    for (int i = 0; i < n; i++) {
        int64_t c = ta_tensor_numel(params[i]);
        size_t bytes = sizeof(float) * (size_t)(c > 0 ? c : 1);
        o->numel[i] = c;
        if (need1 && !(o->s1[i] = ta_alloc_zeroed(bytes))) goto fail;
        if (need2 && !(o->s2[i] = ta_alloc_zeroed(bytes))) goto fail;
    }
    return TA_OK;
fail:
    free_state(o);
    return ta_error(TA_ENOMEM, "ta_optimizer_step: cannot allocate the optimiser state");
}

/* The per-element updates on one contiguous run of `count` elements: p, g with element
 * strides ps, gs; state contiguous. first: the SGD momentum buffer's first step. */
typedef struct step_consts {
    float wd, mom, damp1, neg_lr;                  /* SGD */
    float decay, b1, omb1, b2, omb2, bc2s, eps, neg_step; /* AdamW */
    int nesterov, first, has_mom;
} step_consts;

static void sgd_run(float *p, int64_t ps, const float *g, int64_t gs, float *buf, int64_t count,
                    const step_consts *c)
{
    for (int64_t e = 0; e < count; e++) {
        float pv = p[e * ps];
        float d = g[e * gs];
        if (c->wd != 0.0f) d = d + c->wd * pv;
        if (c->has_mom) {
            float b = c->first ? d : buf[e] * c->mom + c->damp1 * d;
            buf[e] = b;
            d = c->nesterov ? d + c->mom * b : b;
        }
        p[e * ps] = pv + c->neg_lr * d;
    }
}

static void adamw_run(float *p, int64_t ps, const float *g, int64_t gs, float *m, float *v,
                      int64_t count, const step_consts *c)
{
    for (int64_t e = 0; e < count; e++) {
        float pv = p[e * ps] * c->decay;
        float gv = g[e * gs];
        float mv = m[e] * c->b1 + c->omb1 * gv;
        float vv = v[e] * c->b2 + c->omb2 * gv * gv;
        m[e] = mv;
        v[e] = vv;
        float denom = sqrtf(vv) / c->bc2s + c->eps;
        p[e * ps] = pv + c->neg_step * (mv / denom);
    }
}

/* Runs the update over a tensor of any strides: the innermost dim is the run; the outer
 * index walks row-major, so the state offset is the logical element number. */
static void step_tensor(const ta_optimizer *o, ta_tensor *p, const ta_tensor *g, float *s1,
                        float *s2, const step_consts *c)
{
    const int nd = p->ndim;
    const int64_t inner = nd ? p->shape[nd - 1] : 1;
    const int64_t ps = nd ? p->stride[nd - 1] : 1, gs = nd ? g->stride[nd - 1] : 1;
    int64_t outer = 1;
    for (int d = 0; d + 1 < nd; d++) outer *= p->shape[d];
    if (inner == 0 || outer == 0) return;
    /* rows are independent: one thread per block of rows, same arithmetic for any split */
#pragma omp parallel for num_threads(ta_threads()) schedule(static) if (outer * inner > 32768)
    for (int64_t r = 0; r < outer; r++) {
        int64_t po = 0, go = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % p->shape[d];
            rem /= p->shape[d];
            po += i * p->stride[d];
            go += i * g->stride[d];
        }
        float *pp = (float *)p->data + po;
        const float *gp = (const float *)g->data + go;
        if (o->kind == OPT_SGD)
            sgd_run(pp, ps, gp, gs, s1 ? s1 + r * inner : NULL, inner, c);
        else
            adamw_run(pp, ps, gp, gs, s1 + r * inner, s2 + r * inner, inner, c);
    }
}

ta_status ta_optimizer_step(ta_optimizer *opt, int n, ta_tensor *const *params,
                            const ta_tensor *const *grads)
{
    /* params[i], grads[i]: any shapes, the two of one position equal */
    const char *fn = "ta_optimizer_step";
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    if (!opt) return ta_error(TA_EINVAL, "%s: opt is NULL", fn);
    if (n < 0) return ta_error(TA_EINVAL, "%s: n must be >= 0, got %d", fn, n);
    if (n > 0 && (!params || !grads)) return ta_error(TA_EINVAL, "%s: params or grads is NULL", fn);
    if (opt->steps > 0 && n != opt->n)
        return ta_error(TA_EINVAL, "%s: %d parameters, but the optimiser's state is for %d "
                        "(the i-th tensor of every step is the same parameter)", fn, n, opt->n);
    for (int i = 0; i < n; i++) {
        char pn[32], gn[32];
        snprintf(pn, sizeof pn, "params[%d]", i);
        snprintf(gn, sizeof gn, "grads[%d]", i);
        ta_status st;
        if ((st = ta_tensor_check(fn, pn, params[i]))) return st;
        if ((st = ta_tensor_check(fn, gn, grads[i]))) return st;
        int same = params[i]->ndim == grads[i]->ndim;
        for (int d = 0; same && d < params[i]->ndim; d++)
            same = params[i]->shape[d] == grads[i]->shape[d];
        if (!same)
            return ta_error(TA_ESHAPE, "%s: params[%d] has shape %s but grads[%d] has %s", fn, i,
                            ta_shape_str(s1, sizeof s1, params[i]->ndim, params[i]->shape), i,
                            ta_shape_str(s2, sizeof s2, grads[i]->ndim, grads[i]->shape));
        if ((st = ta_tensor_check_unaliased(fn, pn, params[i]))) return st;
        if (opt->steps > 0 && ta_tensor_numel(params[i]) != opt->numel[i])
            return ta_error(TA_ESHAPE, "%s: params[%d] has %lld elements, but had %lld at the "
                            "first step (the i-th tensor of every step is the same parameter)",
                            fn, i, (long long)ta_tensor_numel(params[i]), (long long)opt->numel[i]);
    }
    /* updates run tensor by tensor, element by element: a parameter that shares memory
     * with a gradient (its own or another's) or with another parameter would read values
     * already updated (torch refuses such in-place ops too) */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (ta_tensors_overlap(params[i], grads[j]))
                return ta_error(TA_EINVAL, "%s: params[%d] overlaps grads[%d]", fn, i, j);
            if (j < i && ta_tensors_overlap(params[i], params[j]))
                return ta_error(TA_EINVAL, "%s: params[%d] overlaps params[%d]", fn, i, j);
        }
    if (opt->steps == 0) {
        free_state(opt);
        ta_status st = alloc_state(opt, n, params);
        if (st) return st;
    }
    step_consts c;
    memset(&c, 0, sizeof c);
    const int64_t t = opt->steps + 1;
    if (opt->kind == OPT_SGD) {
        c.wd = (float)opt->weight_decay;
        c.mom = (float)opt->momentum;
        c.damp1 = (float)(1.0 - opt->dampening);
        c.neg_lr = (float)-opt->lr;
        c.nesterov = opt->nesterov;
        c.has_mom = opt->momentum != 0.0;
        c.first = t == 1;
    } else {
        /* Python computes these scalars in double and torch rounds them to float */
        const double bc1 = 1.0 - pow(opt->beta1, (double)t), bc2 = 1.0 - pow(opt->beta2, (double)t);
        c.decay = (float)(1.0 - opt->lr * opt->weight_decay);
        c.b1 = (float)opt->beta1;
        c.omb1 = (float)(1.0 - opt->beta1);
        c.b2 = (float)opt->beta2;
        c.omb2 = (float)(1.0 - opt->beta2);
        c.bc2s = (float)sqrt(bc2);
        c.eps = (float)opt->eps;
        c.neg_step = (float)-(opt->lr / bc1);
    }
    for (int i = 0; i < n; i++)
        step_tensor(opt, params[i], grads[i], opt->s1[i], opt->s2[i], &c);
    opt->steps = t;
    return TA_OK;
}
