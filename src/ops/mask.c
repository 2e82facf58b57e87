/* Masks: ta_masked_fill, the causal and padding mask builders, and the mask plan the
 * SDPA paths evaluate row by row (see mask.h for the semantics). */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "ops/mask.h"

#include <math.h>

bool ta_mask_broadcast_strides(int64_t *out, const ta_tensor *mask, int ndim,
                               const int64_t *shape)
{
    if (mask->ndim > ndim) return false;
    int lead = ndim - mask->ndim; /* mask dims align with the trailing dims */
    for (int d = 0; d < ndim; d++) {
        if (d < lead) {
            out[d] = 0;
            continue;
        }
        int64_t m = mask->shape[d - lead];
        if (m == shape[d] && m != 1)
            out[d] = mask->stride[d - lead];
        else if (m == 1)
            out[d] = 0;
        else
            return false;
    }
    return true;
}

ta_status ta_mask_plan_init(ta_mask_plan *p, const char *fn, int64_t B, int64_t H, int64_t Lq,
                            int64_t Lk, ta_causal causal, const ta_tensor *mask,
                            ta_mask_mode mode, const int64_t *key_lengths, bool check_data)
{
    if (causal != TA_CAUSAL_NONE && causal != TA_CAUSAL_TOP_LEFT &&
        causal != TA_CAUSAL_BOTTOM_RIGHT)
        return ta_error(TA_EINVAL, "%s: causal = %d is not a ta_causal value", fn, (int)causal);
    ta_mask_plan q = {.B = B, .H = H, .Lq = Lq, .Lk = Lk, .mode = mode};
    q.causal = causal != TA_CAUSAL_NONE;
    /* bottom_right: the last query sees the last key, i.e. j <= i + Lk - Lq */
    q.causal_shift = causal == TA_CAUSAL_BOTTOM_RIGHT ? Lk - Lq : 0;
    if (mask) {
        if (mode != TA_MASK_KEEP && mode != TA_MASK_BLOCK && mode != TA_MASK_ADDITIVE)
            return ta_error(TA_EINVAL, "%s: mask_mode = %d is not a ta_mask_mode value", fn,
                            (int)mode);
        ta_status st = check_data ? ta_tensor_check(fn, "mask", mask)
                                  : ta_tensor_check_layout(fn, "mask", mask);
        if (st) return st;
        const int64_t full[4] = {B, H, Lq, Lk};
        if (!ta_mask_broadcast_strides(q.mstride, mask, 4, full)) {
            char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
            return ta_error(TA_ESHAPE, "%s: mask of shape %s does not broadcast to %s", fn,
                            ta_shape_str(s1, sizeof s1, mask->ndim, mask->shape),
                            ta_shape_str(s2, sizeof s2, 4, full));
        }
        q.mask = mask->data;
        q.has_mask = true;
    }
    if (key_lengths) {
        for (int64_t b = 0; check_data && b < B; b++)
            if (key_lengths[b] < 0 || key_lengths[b] > Lk)
                return ta_error(TA_EINVAL, "%s: key_lengths[%lld] = %lld is outside [0, %lld]",
                                fn, (long long)b, (long long)key_lengths[b], (long long)Lk);
        q.key_lengths = key_lengths;
    }
    *p = q;
    return TA_OK;
}

/* The masked score of one allowed-by-end key: m is its mask element. */
static inline float masked_score(ta_mask_mode mode, float m, float s, float scale)
{
    switch (mode) {
    case TA_MASK_KEEP: return m != 0.0f ? s * scale : -INFINITY;
    case TA_MASK_BLOCK: return m != 0.0f ? -INFINITY : s * scale;
    default: return s * scale + m;
    }
}

void ta_mask_apply(const ta_mask_plan *p, int64_t b, int64_t h, int64_t i, int64_t j0,
                   int64_t n, float scale, float *s, int64_t stride)
{
    int64_t end = ta_mask_row_end(p, b, i) - j0; /* first blocked t */
    if (end < 0) end = 0;
    if (end > n) end = n;
    const float *m = ta_mask_row_ptr(p, b, h, i);
    if (!m) {
        for (int64_t t = 0; t < end; t++) s[t * stride] *= scale;
    } else {
        int64_t ms = p->mstride[3];
        m += j0 * ms;
        ta_mask_mode mode = p->mode;
        for (int64_t t = 0; t < end; t++)
            s[t * stride] = masked_score(mode, m[t * ms], s[t * stride], scale);
    }
    for (int64_t t = end; t < n; t++) s[t * stride] = -INFINITY;
}

void ta_mask_row_bias(const ta_mask_plan *p, int64_t b, int64_t h, int64_t i, int64_t j0,
                      int64_t n, float *bias)
{
    int64_t end = ta_mask_row_end(p, b, i) - j0;
    if (end < 0) end = 0;
    if (end > n) end = n;
    const float *m = ta_mask_row_ptr(p, b, h, i);
    if (!m) {
        for (int64_t t = 0; t < end; t++) bias[t] = 0.0f;
    } else {
        int64_t ms = p->mstride[3];
        m += j0 * ms;
        for (int64_t t = 0; t < end; t++) {
            float v = m[t * ms];
            switch (p->mode) {
            case TA_MASK_KEEP: bias[t] = v != 0.0f ? 0.0f : -INFINITY; break;
            case TA_MASK_BLOCK: bias[t] = v != 0.0f ? -INFINITY : 0.0f; break;
            default: bias[t] = v; break;
            }
        }
    }
    for (int64_t t = end; t < n; t++) bias[t] = -INFINITY;
}

float ta_mask_bias(const ta_mask_plan *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    float bias;
    ta_mask_row_bias(p, b, h, i, j, 1, &bias);
    return bias;
}

/* ------------------------------------------------------------- public ops */

/* t: any shape; mask: broadcastable to t (trailing alignment). */
ta_status ta_masked_fill(ta_tensor *t, const ta_tensor *mask, float value)
{
    const char *fn = "ta_masked_fill";
    ta_status st = ta_tensor_check(fn, "t", t);
    if (!st) st = ta_tensor_check(fn, "mask", mask);
    if (!st) st = ta_tensor_check_unaliased(fn, "t", t);
    if (st) return st;
    /* t is written element by element: a mask sharing its memory would be read after
     * some of it was filled */
    if (ta_tensors_overlap(t, mask)) return ta_error(TA_EINVAL, "%s: mask overlaps t", fn);
    int64_t ms[TA_MAX_DIMS];
    if (!ta_mask_broadcast_strides(ms, mask, t->ndim, t->shape)) {
        char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
        return ta_error(TA_ESHAPE, "%s: mask of shape %s does not broadcast to t's shape %s", fn,
                        ta_shape_str(s1, sizeof s1, mask->ndim, mask->shape),
                        ta_shape_str(s2, sizeof s2, t->ndim, t->shape));
    }
    int64_t n = ta_tensor_numel(t);
    if (n == 0) return TA_OK;
    int nd = t->ndim;
    int64_t inner = nd ? t->shape[nd - 1] : 1;
    int64_t ts = nd ? t->stride[nd - 1] : 0, mis = nd ? ms[nd - 1] : 0;
    int64_t idx[TA_MAX_DIMS] = {0};
    for (int64_t done = 0; done < n; done += inner) {
        float *row = t->data;
        const float *mrow = mask->data;
        for (int d = 0; d < nd; d++) {
            row += idx[d] * t->stride[d];
            mrow += idx[d] * ms[d];
        }
        for (int64_t j = 0; j < inner; j++)
            if (mrow[j * mis] != 0.0f) row[j * ts] = value;
        if (nd) {
            idx[nd - 1] = inner - 1;
            ta_index_next(nd, t->shape, idx);
        }
    }
    return TA_OK;
}

/* mask: [..., Lq, Lk]; element (i, j) -> 1 if query i may attend key j, else 0. */
ta_status ta_causal_mask(ta_tensor *mask, ta_causal align)
{
    const char *fn = "ta_causal_mask";
    ta_status st = ta_tensor_check(fn, "mask", mask);
    if (!st) st = ta_tensor_check_unaliased(fn, "mask", mask);
    if (st) return st;
    if (mask->ndim < 2)
        return ta_error(TA_ESHAPE, "%s: mask must have at least 2 dims [..., Lq, Lk], got %d",
                        fn, mask->ndim);
    if (align != TA_CAUSAL_NONE && align != TA_CAUSAL_TOP_LEFT &&
        align != TA_CAUSAL_BOTTOM_RIGHT)
        return ta_error(TA_EINVAL, "%s: align = %d is not a ta_causal value", fn, (int)align);
    int nd = mask->ndim;
    int64_t Lq = mask->shape[nd - 2], Lk = mask->shape[nd - 1];
    int64_t shift = align == TA_CAUSAL_BOTTOM_RIGHT ? Lk - Lq : 0;
    int64_t n = ta_tensor_numel(mask);
    int64_t idx[TA_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        bool keep = align == TA_CAUSAL_NONE || idx[nd - 1] <= idx[nd - 2] + shift;
        *ta_tensor_at(mask, idx) = keep ? 1.0f : 0.0f;
        ta_index_next(nd, mask->shape, idx);
    }
    return TA_OK;
}

/* mask: [B, ..., Lk]; element (b, ..., j) -> 1 if j < lengths[b], else 0. */
ta_status ta_padding_mask(ta_tensor *mask, const int64_t *lengths)
{
    const char *fn = "ta_padding_mask";
    ta_status st = ta_tensor_check(fn, "mask", mask);
    if (!st) st = ta_tensor_check_unaliased(fn, "mask", mask);
    if (st) return st;
    if (mask->ndim < 2)
        return ta_error(TA_ESHAPE, "%s: mask must have at least 2 dims [B, ..., Lk], got %d",
                        fn, mask->ndim);
    int nd = mask->ndim;
    int64_t B = mask->shape[0], Lk = mask->shape[nd - 1];
    if (B > 0 && !lengths) return ta_error(TA_EINVAL, "%s: lengths is NULL", fn);
    for (int64_t b = 0; b < B; b++)
        if (lengths[b] < 0 || lengths[b] > Lk)
            return ta_error(TA_EINVAL, "%s: lengths[%lld] = %lld is outside [0, %lld]", fn,
                            (long long)b, (long long)lengths[b], (long long)Lk);
    int64_t n = ta_tensor_numel(mask);
    int64_t idx[TA_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        *ta_tensor_at(mask, idx) = idx[nd - 1] < lengths[idx[0]] ? 1.0f : 0.0f;
        ta_index_next(nd, mask->shape, idx);
    }
    return TA_OK;
}
