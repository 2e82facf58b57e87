/* Mask adaptation of the attention layers: the caller's mask, key padding mask and
 * causal flag (ta_attention_opts, documented in include/tensorattn.h) turned into what
 * ta_sdpa takes: at most one mask tensor (a broadcasting view, never expanded) plus key
 * lengths. With both masks, a key padding mask that blocks a suffix of every row becomes
 * key lengths (the mask stays a view); any other pattern is combined with the mask into
 * one additive mask [N, Hm, Lqm, Lk] in the call's scratch. */
#include "core/core.h"
#include "core/tensor_internal.h"
#include "nn/attention_internal.h"

#include <math.h>
#include <string.h>

/* The mask as a rank-4 view over (n, h, i, j): right-aligned broadcasting (PyTorch's
 * rule), except that the torch layout reads a rank-3 mask as [N*H, Lq, Lk] split
 * batch-major, as MultiheadAttention does. Extents must be 1 or the target's. */
static ta_status mask_view4(ta_tensor *v, const char *fn, const char *name, const ta_tensor *m,
                            ta_layout layout, const int64_t target[4])
{
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    ta_status st = ta_tensor_check(fn, name, m);
    if (st) return st;
    if (m->ndim > 4)
        return ta_error(TA_ESHAPE, "%s: %s has shape %s, which does not broadcast to [N, H, Lq, Lk] = %s",
                        fn, name, ta_shape_str(s1, sizeof s1, m->ndim, m->shape),
                        ta_shape_str(s2, sizeof s2, 4, target));
    memset(v, 0, sizeof *v);
    v->data = m->data;
    v->dtype = TA_F32;
    v->ndim = 4;
    if (layout == TA_LAYOUT_TORCH && m->ndim == 3) {
        if (m->shape[0] != target[0] * target[1] || m->shape[1] != target[2] ||
            m->shape[2] != target[3]) {
            int64_t want[3] = {target[0] * target[1], target[2], target[3]};
            return ta_error(TA_ESHAPE, "%s: %s has shape %s, but a 3-D attn_mask must be [N*H, Lq, Lk] = %s",
                            fn, name, ta_shape_str(s1, sizeof s1, 3, m->shape),
                            ta_shape_str(s2, sizeof s2, 3, want));
        }
        v->shape[0] = target[0];
        v->shape[1] = target[1];
        v->stride[0] = target[1] * m->stride[0];
        v->stride[1] = m->stride[0];
        v->shape[2] = m->shape[1];
        v->stride[2] = m->stride[1];
        v->shape[3] = m->shape[2];
        v->stride[3] = m->stride[2];
    } else {
        int pad = 4 - m->ndim;
        for (int d = 0; d < 4; d++) {
            v->shape[d] = d < pad ? 1 : m->shape[d - pad];
            v->stride[d] = d < pad ? 0 : m->stride[d - pad];
        }
    }
    for (int d = 0; d < 4; d++) {
        if (v->shape[d] != 1 && v->shape[d] != target[d])
            return ta_error(TA_ESHAPE, "%s: %s has shape %s, which does not broadcast to [N, H, Lq, Lk] = %s",
                            fn, name, ta_shape_str(s1, sizeof s1, m->ndim, m->shape),
                            ta_shape_str(s2, sizeof s2, 4, target));
        if (v->shape[d] == 1) v->stride[d] = 0;
    }
    return TA_OK;
}

static int mask_mode_ok(ta_mask_mode m)
{
    return m == TA_MASK_KEEP || m == TA_MASK_BLOCK || m == TA_MASK_ADDITIVE;
}

/* Whether a boolean mask element blocks. */
static int blocks(float v, ta_mask_mode mode)
{
    return mode == TA_MASK_KEEP ? v == 0.0f : v != 0.0f;
}

/* If the [N, Lk] boolean key padding mask is a suffix pattern (keys 0..len-1 visible,
 * the rest blocked, per batch), its lengths into len and 1; otherwise 0. */
static int padding_lengths(int64_t *len, const ta_tensor *kpm, ta_mask_mode mode)
{
    if (mode == TA_MASK_ADDITIVE) return 0;
    const float *p = kpm->data;
    for (int64_t n = 0; n < kpm->shape[0]; n++) {
        int64_t j = 0, Lk = kpm->shape[1];
        const float *row = p + n * kpm->stride[0];
        while (j < Lk && !blocks(row[j * kpm->stride[1]], mode)) j++;
        len[n] = j;
        for (; j < Lk; j++)
            if (!blocks(row[j * kpm->stride[1]], mode)) return 0;
    }
    return 1;
}

/* One value of a mask as an additive term: 0 or -inf for boolean modes. */
static float additive(float v, ta_mask_mode mode)
{
    if (mode == TA_MASK_ADDITIVE) return v;
    return blocks(v, mode) ? -INFINITY : 0.0f;
}

/* comb [N, Hm, Lqm, Lk] = mask (4-D view, broadcast) + key padding mask [N, Lk], both as
 * additive terms (0 / -inf for boolean modes). */
static void combine_masks(ta_tensor *comb, const ta_tensor *m4, ta_mask_mode mmode,
                          const ta_tensor *kpm, ta_mask_mode kmode)
{
    float *c = comb->data;
    const int64_t N = comb->shape[0], Hm = comb->shape[1], Lqm = comb->shape[2], Lk = comb->shape[3];
    const float *mp = m4->data, *kp = kpm->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < Hm; h++)
            for (int64_t i = 0; i < Lqm; i++)
                for (int64_t j = 0; j < Lk; j++) {
                    float a = additive(mp[n * m4->stride[0] + h * m4->stride[1] + i * m4->stride[2] +
                                          j * m4->stride[3]],
                                       mmode);
                    float b = additive(kp[n * kpm->stride[0] + j * kpm->stride[1]], kmode);
                    *c++ = a + b;
                }
}

/* [N, Lk] as [N, 1, 1, Lk]: ta_sdpa broadcasts it. */
static void key_padding_view(ta_tensor *v, const ta_tensor *kpm, int64_t N, int64_t Lk)
{
    memset(v, 0, sizeof *v);
    v->data = kpm->data;
    v->dtype = TA_F32;
    v->ndim = 4;
    v->shape[0] = N;
    v->shape[1] = v->shape[2] = 1;
    v->shape[3] = Lk;
    v->stride[0] = N > 1 ? kpm->stride[0] : 0;
    v->stride[3] = Lk > 1 ? kpm->stride[1] : 0;
}

ta_status ta_attention_masks_check(ta_attention_masks *m, const char *fn, ta_layout layout,
                                   const ta_attention_opts *opts, const int64_t target[4])
{
    /* target [N, H, Lq, Lk]; opts->mask -> target, opts->key_padding_mask [N, Lk] */
    char s1[TA_SHAPE_STR_MAX], s2[TA_SHAPE_STR_MAX];
    const ta_tensor *kpm = opts->key_padding_mask;
    ta_status st;
    memset(m, 0, sizeof *m);
    if (!mask_mode_ok(opts->mask_mode))
        return ta_error(TA_EINVAL, "%s: mask_mode %d is not a ta_mask_mode", fn, (int)opts->mask_mode);
    if (opts->causal != TA_CAUSAL_NONE && opts->causal != TA_CAUSAL_TOP_LEFT &&
        opts->causal != TA_CAUSAL_BOTTOM_RIGHT)
        return ta_error(TA_EINVAL, "%s: causal %d is not a ta_causal", fn, (int)opts->causal);
    if (!mask_mode_ok(opts->key_padding_mode))
        return ta_error(TA_EINVAL, "%s: key_padding_mode %d is not a ta_mask_mode", fn,
                        (int)opts->key_padding_mode);
    if (layout == TA_LAYOUT_SEED && opts->mask && opts->mask_mode == TA_MASK_ADDITIVE)
        return ta_error(TA_EINVAL, "%s: the seed layout's mask is boolean (TA_MASK_KEEP or "
                        "TA_MASK_BLOCK); TA_MASK_ADDITIVE is for the torch layout", fn);
    if (layout == TA_LAYOUT_SEED && kpm && opts->key_padding_mode == TA_MASK_ADDITIVE)
        return ta_error(TA_EINVAL, "%s: the seed layout's key_padding_mask is boolean (TA_MASK_KEEP "
                        "or TA_MASK_BLOCK); TA_MASK_ADDITIVE is for the torch layout", fn);
    if (opts->mask) {
        if ((st = mask_view4(&m->m4, fn, "mask", opts->mask, layout, target))) return st;
        m->mask = &m->m4;
    }
    if (kpm) {
        if ((st = ta_tensor_check(fn, "key_padding_mask", kpm))) return st;
        if (kpm->ndim != 2 || kpm->shape[0] != target[0] || kpm->shape[1] != target[3]) {
            int64_t want[2] = {target[0], target[3]};
            return ta_error(TA_ESHAPE, "%s: key_padding_mask has shape %s, expected [N, Lk] = %s", fn,
                            ta_shape_str(s1, sizeof s1, kpm->ndim, kpm->shape),
                            ta_shape_str(s2, sizeof s2, 2, want));
        }
    }
    m->kpm = kpm;
    m->mask_mode = opts->mask_mode;
    m->kpm_mode = opts->key_padding_mode;
    m->sdpa_mask = m->mask;
    m->sdpa_mode = opts->mask_mode;
    if (kpm && !m->mask) {
        key_padding_view(&m->kpm4, kpm, target[0], target[3]);
        m->sdpa_mask = &m->kpm4;
        m->sdpa_mode = opts->key_padding_mode;
    } else if (kpm) {
        m->combine = true; /* lengths or a combined mask: resolved once the data is seen */
        for (int d = 0; d < 4; d++) m->comb_shape[d] = m->m4.shape[d];
        m->comb_shape[0] = target[0];
        m->comb_shape[3] = target[3];
    }
    return TA_OK;
}

void ta_attention_masks_layout(ta_arena *a, ta_attention_masks *m)
{
    int64_t nc = 0;
    if (m->combine && !ta_shape_numel(&nc, 4, m->comb_shape)) a->overflow = true;
    m->lens = TA_ARENA_TAKE(a, int64_t, m->combine ? m->comb_shape[0] : 0);
    float *comb = TA_ARENA_TAKE(a, float, nc);
    if (m->combine) m->comb = ta_tensor_view(comb, 4, m->comb_shape);
}

void ta_attention_masks_resolve(ta_attention_masks *m)
{
    if (!m->combine) return;
    if (padding_lengths(m->lens, m->kpm, m->kpm_mode)) {
        m->key_lengths = m->lens; /* suffix padding: key lengths, the mask as it is */
        return;
    }
    combine_masks(&m->comb, m->mask, m->mask_mode, m->kpm, m->kpm_mode);
    m->sdpa_mask = &m->comb;
    m->sdpa_mode = TA_MASK_ADDITIVE;
}
