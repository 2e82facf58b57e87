/* Internal interface of scaled dot-product attention: the validated problem that every
 * path (reference now, fused later) runs from, and the row softmax they share. */
#ifndef TA_OPS_SDPA_H
#define TA_OPS_SDPA_H

#include "ops/mask.h"
#include "tensorattn.h"

#include <stdbool.h>
#include <stdint.h>

/* One ta_sdpa call after validation: shapes agree, outputs do not overlap inputs, the
 * mask plan is checked. Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv], O [B,H,Lq,Dv];
 * query head h reads key/value head h / (H / Hkv). */
typedef struct ta_sdpa_problem {
    ta_tensor *O;
    const ta_tensor *Q, *K, *V;
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    float scale;            /* the resolved scale (opts->scale or 1/sqrt(D)) */
    ta_mask_plan mask;
    ta_tensor *weights;     /* NULL or [B, H, Lq, Lk] */
    ta_tensor *lse;         /* NULL or [B, H, Lq] */
    ta_sdpa_path path;
} ta_sdpa_problem;

/* Validates ta_sdpa's arguments into *p (messages start with fn). Writes nothing else. */
ta_status ta_sdpa_validate(ta_sdpa_problem *p, const char *fn, ta_tensor *O, const ta_tensor *Q,
                           const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts);
/* The same, where O may be an input (o_is_output false: the backward's forward output,
 * which may be a broadcast view and is checked against its own outputs by the caller). */
ta_status ta_sdpa_validate_ext(ta_sdpa_problem *p, const char *fn, ta_tensor *O,
                               const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                               const ta_sdpa_opts *opts, bool o_is_output);

/* A 5-d view [B, Hkv, G, L, X] of a [B, H, L, X] tensor, splitting the head axis into
 * (kv head, group member): head h = k * G + g. Splitting one axis is always a view; the
 * reference paths contract over it for grouped-query attention without copying K, V. */
ta_tensor ta_sdpa_split_heads(const ta_tensor *t, int64_t G);

/* C [B,H,.,.] = A [B,H,.,.] x Bt [B,Hkv,.,.] with Bt shared by the G = H / Hkv query
 * heads of each group: spec4 ("bhid,bhjd->bhij") when G == 1, else spec5 on the
 * split-heads views ("bkgid,bkjd->bkgij"), so K and V are never repeated. */
ta_status ta_sdpa_group_einsum(const char *spec4, const char *spec5, ta_tensor *C,
                               const ta_tensor *A, const ta_tensor *Bt, int64_t G);

/* The seed's algorithm on a validated problem: einsum, scale, mask, softmax, einsum. */
ta_status ta_sdpa_reference_run(const ta_sdpa_problem *p);

/* The fused FlashAttention-2 forward (sdpa_fused.c) on a validated problem: tiles of
 * queries against tiles of keys with an online softmax, never materialising Lq x Lk.
 * Writes O and, when p->lse is set, the LSE. Refuses p->weights (TA_EUNSUPPORTED):
 * the weights need the reference path. Allocates O(threads * tile * (D + Dv)) floats
 * per call (plus the key-split partials of small-Lq problems) before writing O. */
ta_status ta_sdpa_fused_run(const ta_sdpa_problem *p);

/* One ta_sdpa_backward call after validation (sdpa_backward.c): the forward problem
 * (p.O is the forward's output, read only here; p.weights and p.lse are NULL), dO
 * [B,H,Lq,Dv] and the forward's LSE [B,H,Lq] (inputs), dQ [B,H,Lq,D], dK [B,Hkv,Lk,D],
 * dV [B,Hkv,Lk,Dv] (outputs, overlapping nothing). */
typedef struct ta_sdpa_grad_problem {
    ta_sdpa_problem p;
    const ta_tensor *dO, *lse;
    ta_tensor *dQ, *dK, *dV;
} ta_sdpa_grad_problem;

/* The materialised backward (sdpa_backward_reference.c): P and dP as [B,H,Lq,Lk] tensors
 * and the products on einsum; the oracle of the fused path. */
ta_status ta_sdpa_backward_reference_run(const ta_sdpa_grad_problem *g);

/* The fused FlashAttention-2 backward (sdpa_backward.c): never materialises Lq x Lk. */
ta_status ta_sdpa_backward_fused_run(const ta_sdpa_grad_problem *g);

/* Softmax of one row x[0], x[xs], ... (n entries) into out[0], out[os], ... (out may
 * be x: in place). Returns the row's log-sum-exp (natural log). Rules:
 *   a NaN anywhere            -> every entry NaN, LSE NaN;
 *   no NaN, a +inf            -> every entry NaN, LSE NaN (inf - inf: as PyTorch);
 *   every entry -inf (or n=0) -> every entry 0, LSE -inf (a row with nothing to attend);
 *   otherwise max-subtracted expf, the sum accumulated in double, entries e/sum. */
float ta_softmax_row(float *out, int64_t os, const float *x, int64_t xs, int64_t n);

/* Whether the element address ranges of a and b intersect (conservative: two
 * interleaved views that share no element still count as overlapping). */
static inline bool ta_tensors_overlap(const ta_tensor *a, const ta_tensor *b)
{
    uintptr_t lo[2], hi[2]; /* integers: comparing unrelated pointers is undefined */
    const ta_tensor *t[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        int64_t n = 1, neg = 0, pos = 0;
        for (int d = 0; d < t[k]->ndim; d++) {
            n *= t[k]->shape[d];
            int64_t span = (t[k]->shape[d] - 1) * t[k]->stride[d];
            if (span < 0) neg += span; else pos += span;
        }
        if (n == 0) return false;
        uintptr_t base = (uintptr_t)t[k]->data;
        lo[k] = base - (uintptr_t)(-neg) * sizeof(float);
        hi[k] = base + (uintptr_t)(pos + 1) * sizeof(float);
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

#endif
