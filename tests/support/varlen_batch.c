#include "varlen_batch.h"

#include "ta_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A [T, Hx, X] tensor in *store laid out as layout says, *view its [T, Hx, X] view. */
static void packed(ta_tensor *view, ta_tensor *store, int64_t T, int64_t Hx, int64_t X,
                   ta_test_varlen_layout layout)
{
    if (layout == TA_VARLEN_HEAD_MAJOR) {
        const int64_t s[3] = {Hx, T, X};
        const int perm[3] = {1, 0, 2};
        TA_CHECK_OK(ta_tensor_empty(store, 3, s));
        TA_CHECK_OK(ta_tensor_permute(view, store, perm));
    } else {
        const int64_t s[3] = {T, Hx, X};
        TA_CHECK_OK(ta_tensor_empty(store, 3, s));
        *view = *store;
        view->owned = NULL;
    }
}

/* The head slices [h0, h0 + n) of the [T, Hall, D] buffer. */
static void heads(ta_tensor *view, const ta_tensor *qkv, int64_t h0, int64_t n)
{
    TA_CHECK_OK(ta_tensor_slice(view, qkv, 1, h0, h0 + n, 1));
}

void ta_test_varlen_make(ta_test_varlen_batch *b, const ta_test_varlen_spec *s, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    b->s = *s;
    assert_true(s->n >= 0 && s->n <= TA_TEST_VARLEN_MAX);
    for (int i = 0; i < s->n; i++) {
        b->cq[i + 1] = b->cq[i] + s->lq[i];
        b->ck[i + 1] = b->ck[i] + s->lk[i];
    }
    b->Tq = b->cq[s->n];
    b->Tk = b->ck[s->n];
    const int64_t H = s->H, Hkv = s->Hkv, D = s->D, Dv = s->Dv, Tq = b->Tq, Tk = b->Tk;
    ta_test_varlen_layout lay = s->layout;
    if (lay == TA_VARLEN_QKV) {
        assert_true(Tq == Tk && D == Dv);
        const int64_t shape[3] = {Tq, H + 2 * Hkv, D};
        TA_CHECK_OK(ta_tensor_empty(&b->qkv, 3, shape));
        TA_CHECK_OK(ta_randn(&b->qkv, seed));
        heads(&b->q, &b->qkv, 0, H);
        heads(&b->k, &b->qkv, H, Hkv);
        heads(&b->v, &b->qkv, H + Hkv, Hkv);
        lay = TA_VARLEN_PACKED;
    } else {
        packed(&b->q, &b->sq, Tq, H, D, lay);
        packed(&b->k, &b->sk, Tk, Hkv, D, lay);
        packed(&b->v, &b->sv, Tk, Hkv, Dv, lay);
        TA_CHECK_OK(ta_randn(&b->q, seed));
        TA_CHECK_OK(ta_randn(&b->k, seed + 1));
        TA_CHECK_OK(ta_randn(&b->v, seed + 2));
    }
    packed(&b->dout, &b->sdout, Tq, H, Dv, lay);
    TA_CHECK_OK(ta_randn(&b->dout, seed + 3));
    packed(&b->o, &b->so, Tq, H, Dv, lay);
    packed(&b->dq, &b->sdq, Tq, H, D, lay);
    packed(&b->dk, &b->sdk, Tk, Hkv, D, lay);
    packed(&b->dv, &b->sdv, Tk, Hkv, Dv, lay);
    const int64_t ls[2] = {H, Tq};
    TA_CHECK_OK(ta_tensor_empty(&b->lse, 2, ls));
    ta_tensor *outs[] = {&b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    for (int i = 0; i < 5; i++) TA_CHECK_OK(ta_tensor_fill(outs[i], NAN));
    b->oracle = (ta_test_varlen){.n = s->n, .H = H, .Hkv = Hkv, .D = D, .Dv = Dv,
                                 .cq = b->cq, .ck = b->ck, .scale = s->scale,
                                 .causal = s->causal};
    b->opts = (ta_sdpa_opts){.scale = s->scale, .causal = s->causal, .lse = &b->lse,
                             .cu_seqlens_q = b->cq, .cu_seqlens_k = b->ck, .num_seqs = s->n};
}

void ta_test_varlen_free(ta_test_varlen_batch *b)
{
    ta_tensor *all[] = {&b->sq, &b->sk, &b->sv, &b->sdout, &b->so, &b->sdq, &b->sdk, &b->sdv,
                        &b->qkv, &b->lse};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ta_tensor_free(all[i]);
    memset(b, 0, sizeof *b);
}

ta_status ta_test_varlen_run(ta_test_varlen_batch *b, ta_sdpa_path path, int backward)
{
    ta_sdpa_opts o = b->opts;
    o.path = path;
    ta_status st = ta_sdpa(&b->o, &b->q, &b->k, &b->v, &o);
    if (st || !backward) return st;
    o.lse = NULL;
    return ta_sdpa_backward(&b->dq, &b->dk, &b->dv, &b->dout, &b->q, &b->k, &b->v, &b->o,
                            &b->lse, &o);
}

float *ta_test_varlen_outputs(const ta_test_varlen_batch *b, int64_t *n)
{
    const ta_tensor *t[5] = {&b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    int64_t total = 0;
    for (int i = 0; i < 5; i++) total += ta_tensor_numel(t[i]);
    float *x = malloc(sizeof(float) * (size_t)(total + 1)), *p = x;
    assert_non_null(x);
    for (int i = 0; i < 5; i++) {
        ta_tensor c;
        TA_CHECK_OK(ta_tensor_from_buffer(&c, p, t[i]->ndim, t[i]->shape, NULL));
        TA_CHECK_OK(ta_tensor_copy(&c, t[i]));
        p += ta_tensor_numel(t[i]);
    }
    *n = total;
    return x;
}
