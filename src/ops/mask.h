/* Mask evaluation shared by the SDPA paths (reference now, fused later).
 *
 * A ta_mask_plan answers, for a query row (b, h, i) and a run of keys j, whether a
 * key may be attended and what the masked score is, without ever materialising a
 * [B, H, Lq, Lk] mask: the user's mask tensor is read through broadcasting strides
 * (0 on broadcast dims), and the causal and key-length limits are folded into one
 * per-row bound `end`: keys j >= end are blocked for row (b, i) whatever the mask
 * tensor says. Keys below `end` are decided by the mask tensor alone.
 *
 * Semantics (the seed's masked_fill, then PyTorch's additive float mask):
 *   blocked key  (causal, key length, keep-mask 0, block-mask nonzero): score = -inf,
 *                overwriting whatever the product was (NaN included, like masked_fill);
 *   allowed key: score = s * scale, plus the mask value in additive mode (so an
 *                additive -inf blocks too, and an additive NaN propagates).
 * A mask element counts as nonzero when it compares != 0 (NaN is nonzero, as in
 * PyTorch's bool conversion). */
#ifndef TA_OPS_MASK_H
#define TA_OPS_MASK_H

#include "tensorattn.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ta_mask_plan {
    int64_t B, H, Lq, Lk;
    bool causal;
    int64_t causal_shift;        /* causal: key j allowed only if j <= i + causal_shift */
    const float *mask;           /* NULL: no mask tensor (or its data not given yet) */
    bool has_mask;               /* a mask tensor was given (its data may be absent) */
    int64_t mstride[4];          /* mask element strides over (b, h, i, j); 0 = broadcast */
    ta_mask_mode mode;
    const int64_t *key_lengths;  /* NULL, or B values in [0, Lk] */
} ta_mask_plan;

/* Validates and records the masking options for problem [B, H, Lq, Lk]: causal must be
 * a ta_causal value, mask (may be NULL) a float32 tensor of rank <= 4 broadcastable to
 * [B, H, Lq, Lk], mode a ta_mask_mode, key_lengths (may be NULL) B values in [0, Lk].
 * check_data false: neither the mask's data pointer nor the key lengths are read (a
 * problem described before its memory exists). Error messages start with fn. The plan
 * keeps pointers to mask data and key_lengths. */
ta_status ta_mask_plan_init(ta_mask_plan *p, const char *fn, int64_t B, int64_t H, int64_t Lq,
                            int64_t Lk, ta_causal causal, const ta_tensor *mask,
                            ta_mask_mode mode, const int64_t *key_lengths, bool check_data);

/* Keys [end, Lk) are blocked for every head of row (b, i) by the causal limit or the key
 * length; 0 <= end <= Lk. A row with end == 0 attends to nothing. */
static inline int64_t ta_mask_row_end(const ta_mask_plan *p, int64_t b, int64_t i)
{
    int64_t end = p->Lk;
    if (p->key_lengths && p->key_lengths[b] < end) end = p->key_lengths[b];
    if (p->causal) {
        int64_t c = i + p->causal_shift + 1; /* keys j <= i + shift */
        if (c < end) end = c;
    }
    return end < 0 ? 0 : end;
}

/* Whether mask element v blocks its key by itself: a zero in a keep mask, a nonzero in a
 * block mask (NaN counts as nonzero: kept by KEEP, blocked by BLOCK); an additive mask
 * blocks nothing this way (its -inf is added to the score). */
static inline bool ta_mask_value_blocks(ta_mask_mode mode, float v)
{
    return mode == TA_MASK_KEEP ? v == 0.0f : mode == TA_MASK_BLOCK && v != 0.0f;
}

/* Pointer to mask element (b, h, i, 0) (NULL without a mask tensor); element j of the
 * row is at [j * p->mstride[3]]. */
static inline const float *ta_mask_row_ptr(const ta_mask_plan *p, int64_t b, int64_t h,
                                           int64_t i)
{
    if (!p->mask) return NULL;
    return p->mask + b * p->mstride[0] + h * p->mstride[1] + i * p->mstride[2];
}

/* Applies the mask to the raw scores of keys j0 .. j0+n-1 of row (b, h, i), in place:
 * s[t * stride] becomes -inf when key j0+t is blocked, else s * scale (+ the mask
 * value in additive mode). The fused kernel calls it on a tile; the reference path on
 * a whole row. */
void ta_mask_apply(const ta_mask_plan *p, int64_t b, int64_t h, int64_t i, int64_t j0,
                   int64_t n, float scale, float *s, int64_t stride);

/* The additive form of the same mask: bias[t] for key j0+t is -inf (blocked), 0
 * (allowed) or the mask value (additive mode). scale * s + bias equals ta_mask_apply's
 * result except where s is NaN or +inf at a blocked key (apply gives -inf there). */
void ta_mask_row_bias(const ta_mask_plan *p, int64_t b, int64_t h, int64_t i, int64_t j0,
                      int64_t n, float *bias);

/* Single-pair queries (tests, slow paths): the bias of (b, h, i, j) as above, and
 * whether the pair is allowed (its bias is not -inf). */
float ta_mask_bias(const ta_mask_plan *p, int64_t b, int64_t h, int64_t i, int64_t j);
static inline bool ta_mask_allowed(const ta_mask_plan *p, int64_t b, int64_t h, int64_t i,
                                   int64_t j)
{
    return ta_mask_bias(p, b, h, i, j) != -INFINITY;
}

/* Mask strides of `mask` broadcast (trailing alignment) to a tensor of shape
 * shape[0..ndim-1]: out[d] is 0 on broadcast or missing dims. False when the shapes do
 * not broadcast (mask->ndim > ndim or an extent that is neither equal nor 1). */
bool ta_mask_broadcast_strides(int64_t *out, const ta_tensor *mask, int ndim,
                               const int64_t *shape);

#endif
