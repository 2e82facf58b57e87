/* Internal interface of the attention layers, shared by the forward (attention.c) and
 * the backward (attention_backward.c). */
#ifndef TA_NN_ATTENTION_INTERNAL_H
#define TA_NN_ATTENTION_INTERNAL_H

#include "tensorattn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TA_ATTN_MAX_PARAMS 5

typedef struct ta_attention_param_slot {
    const char *name;
    ta_tensor value; /* owning, contiguous */
    ta_tensor grad;  /* owning, contiguous, same shape; accumulated by backward */
} ta_attention_param_slot;

struct ta_attention {
    ta_layout layout;
    int64_t E, H, D;
    int nparams;
    ta_attention_param_slot p[TA_ATTN_MAX_PARAMS];
    unsigned char *ws; /* forward scratch, grown on demand */
    size_t ws_bytes;
    unsigned char *bws; /* backward scratch, grown on demand */
    size_t bws_bytes;
};

/* Parameter indices (the state_dict order documented in the header). */
enum { TA_SEED_VALUES = 0, TA_SEED_KEYS = 1, TA_SEED_QUERIES = 2, TA_SEED_FC_W = 3, TA_SEED_FC_B = 4 };
enum { TA_TORCH_IN_W = 0, TA_TORCH_IN_B = 1, TA_TORCH_OUT_W = 2, TA_TORCH_OUT_B = 3 };

/* What a forward leaves behind for the backward: the projected inputs and the attention
 * output, contiguous [N, L, H, D] = [N, L, E] buffers in layer->ws, the LSE [N, H, Lq],
 * and the ta_sdpa options the core ran with (weights and lse cleared; its mask pointers
 * point into this struct, so it must stay where it is while so is used). Seed layout:
 * rows with LSE -inf are the uniform rows whose Ob the forward rewrote. */
typedef struct ta_attention_fwd {
    int64_t N, Lq, Lk;
    float *Qp, *Kp, *Vp, *Ob, *lse;
    ta_tensor m4, kpm4, comb;
    ta_sdpa_opts so;
} ta_attention_fwd;

/* The forward of ta_attention_forward with its validation (messages start with fn).
 * keep == NULL: the public forward (out required, opts->weights honoured).
 * keep != NULL: for backward: out may be NULL (no output projection), opts->weights is
 * ignored, the LSE is always computed, and *keep describes the intermediates. */
ta_status ta_attention_run(ta_attention_fwd *keep, const char *fn, ta_tensor *out,
                           ta_attention *layer, const ta_tensor *queries, const ta_tensor *keys,
                           const ta_tensor *values, const ta_attention_opts *opts);

/* Checks an input [N, L, E] (messages name fn and name). */
/* A view of a contiguous [N, L, H, D] buffer as [N, H, L, D] (the head axis moves: the
 * seed's "nqhd -> nhqd", a strided view, not a copy). */
void ta_heads_view(ta_tensor *t, float *buf, int64_t N, int64_t L, int64_t H, int64_t D);

ta_status ta_attention_check_input(const char *fn, const char *name, const ta_tensor *x, int64_t E);

#endif
