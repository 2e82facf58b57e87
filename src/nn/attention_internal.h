/* Internal interface of the attention layers: parameters (attention_params.c), mask
 * adaptation (attention_masks.c), the forward's stages (attention.c) and the backward
 * (attention_backward.c), which reruns the forward's stages in its own arena. */
#ifndef TA_NN_ATTENTION_INTERNAL_H
#define TA_NN_ATTENTION_INTERNAL_H

#include "core/workspace.h"
#include "ops/linear.h"
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
    /* The scratch of forward and backward calls without a caller workspace: one block,
     * grown to the largest measured layout, never shrunk (steady calls allocate nothing). */
    unsigned char *scratch;
    size_t scratch_bytes;
};

/* Parameter indices (the state_dict order documented in the header). */
enum { TA_SEED_VALUES = 0, TA_SEED_KEYS = 1, TA_SEED_QUERIES = 2, TA_SEED_FC_W = 3, TA_SEED_FC_B = 4 };
enum { TA_TORCH_IN_W = 0, TA_TORCH_IN_B = 1, TA_TORCH_OUT_W = 2, TA_TORCH_OUT_B = 3 };

/* ------------------------------------------------------------ projections */

/* One of the layer's Linear maps, F features in and out: the seed's D x D Linear applied
 * to every head's slice (rows (n, l, h), no bias), or an E x E slice of torch's in_proj
 * (rows (n, l)), or the output projection (rows (n, l)). */
typedef struct ta_attention_proj {
    const float *W, *b; /* b NULL: no bias */
    float *dW, *db;     /* their gradient buffers */
    int64_t F;
    int64_t heads;      /* rows per (n, l): H for the seed's input projections, else 1 */
} ta_attention_proj;

/* Input projection i (0 queries, 1 keys, 2 values) and the output projection. */
ta_attention_proj ta_attention_input_proj(const ta_attention *l, int i);
ta_attention_proj ta_attention_output_proj(const ta_attention *l);

/* ------------------------------------------------------------------ masks */

/* How a call's masks reach ta_sdpa: at most one mask tensor plus key lengths. The
 * sdpa_* fields point into this struct, so it must stay where it is while they are used. */
typedef struct ta_attention_masks {
    const ta_tensor *kpm;      /* opts->key_padding_mask (NULL: none) */
    ta_mask_mode mask_mode, kpm_mode;
    const ta_tensor *mask;     /* &m4, or NULL: no opts->mask */
    ta_tensor m4;              /* opts->mask as a view over [N, H, Lq, Lk] */
    ta_tensor kpm4;            /* kpm as a view [N, 1, 1, Lk] (kpm without a mask) */
    bool combine;              /* both: key lengths or comb, chosen from the data */
    int64_t comb_shape[4];     /* [N, Hm, Lqm, Lk] */
    ta_tensor comb;            /* both masks as one additive mask (in scratch) */
    int64_t *lens;             /* N key lengths (in scratch; combine only) */
    const ta_tensor *sdpa_mask;
    ta_mask_mode sdpa_mode;
    const int64_t *key_lengths;
} ta_attention_masks;

/* Validates opts' masks and causal for target [N, H, Lq, Lk] (messages name fn) and
 * builds the views. */
ta_status ta_attention_masks_check(ta_attention_masks *m, const char *fn, ta_layout layout,
                                   const ta_attention_opts *opts, const int64_t target[4]);
/* Lays out (or measures) the masks' scratch: key lengths and the combined mask. */
void ta_attention_masks_layout(ta_arena *a, ta_attention_masks *m);
/* After carving: with both masks, key lengths when the padding is a suffix of every
 * row, else the combined additive mask. */
void ta_attention_masks_resolve(ta_attention_masks *m);

/* ---------------------------------------------------------------- forward */

/* One forward call, validated, and its scratch. For the backward (for_backward): no out
 * (no output projection), no weights, the LSE always; the projected Q, K, V, the
 * attention output Ob ([N, L, H, D] = [N, L, E] contiguous) and the LSE [N, H, Lq] are
 * left in the scratch, and so holds the options the core ran with. Seed layout: rows
 * with LSE -inf are the uniform rows whose Ob the forward rewrote. */
typedef struct ta_attention_fwd {
    const char *fn; /* the public function, for messages (the attention core's too) */
    const ta_attention *layer;
    const ta_tensor *queries, *keys, *values;
    const ta_tensor *out; /* NULL: stop before the output projection (its data is written) */
    ta_tensor *weights;  /* opts->weights, or NULL */
    bool average;        /* weights averaged over heads */
    bool want_lse;
    ta_causal causal;
    int64_t N, Lq, Lk;
    ta_attention_masks masks;
    /* carved from the call's arena */
    float *Qp, *Kp, *Vp, *Ob, *lse, *wheads;
    ta_linear_pack pack; /* the GEMMs' packing, shared with the backward's */
    ta_arena sdpa;       /* ta_sdpa's scratch (a backward lays it out: shared with its own) */
    bool for_backward;
    /* set by the attend stage */
    ta_tensor lse_t, wheads_t;
    ta_tensor *w4; /* where ta_sdpa wrote per-head weights, or NULL */
    ta_sdpa_opts so;
} ta_attention_fwd;

/* Validates a forward call (messages start with fn); touches no memory. */
ta_status ta_attention_fwd_prepare(ta_attention_fwd *f, const char *fn, const ta_tensor *out,
                                   const ta_attention *layer, const ta_tensor *queries,
                                   const ta_tensor *keys, const ta_tensor *values,
                                   const ta_attention_opts *opts, bool for_backward);
/* Lays out (or measures) the forward's buffers and adds its GEMMs to f->pack, which the
 * caller lays out (ta_linear_layout) once every GEMM of the call is added. */
void ta_attention_fwd_layout(ta_arena *a, ta_attention_fwd *f);
/* The bytes of the attend stage's ta_sdpa scratch (shapes and options only). */
size_t ta_attention_fwd_sdpa_bytes(ta_attention_fwd *f);
/* The forward's stages on the carved scratch. */
ta_status ta_attention_fwd_run(ta_attention_fwd *f);

/* The block a call lays its scratch out in: opts->workspace when its data is set, else
 * the layer's own block, grown to bytes if needed (SIZE_MAX: the layout overflowed).
 * opts may be NULL. */
ta_status ta_attention_scratch(ta_scratch *s, ta_attention *layer, const char *fn,
                               const ta_attention_opts *opts, size_t bytes);

/* A call's layout function: lays out (or measures) everything the call needs in a. */
typedef void (*ta_attention_layout_fn)(ta_arena *a, void *call);
/* Measures layout, acquires the block (ta_attention_scratch) and carves it with the same
 * layout, before anything is written; release s with ta_scratch_release. */
ta_status ta_attention_plan(ta_scratch *s, ta_attention *layer, const char *fn,
                            const ta_attention_opts *opts, ta_attention_layout_fn layout,
                            void *call);
/* The bytes a caller's workspace needs for layout (the public size queries). */
ta_status ta_attention_measure(size_t *bytes, const char *fn, ta_attention_layout_fn layout,
                               void *call);

/* Checks an input [N, L, E] (messages name fn and name). */
ta_status ta_attention_check_input(const char *fn, const char *name, const ta_tensor *x, int64_t E);
/* A view of a contiguous [N, L, H, D] buffer as [N, H, L, D] (the head axis moves: the
 * seed's "nqhd -> nhqd", a strided view, not a copy). */
void ta_heads_view(ta_tensor *t, float *buf, int64_t N, int64_t L, int64_t H, int64_t D);

#endif
