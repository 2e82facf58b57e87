/* Scaled dot-product attention inside the library: the one problem description that the
 * front door (sdpa.c) builds from a public call, forward or backward, and the interface
 * of the four implementations behind it:
 *
 *     ta_sdpa / ta_sdpa_backward / *_workspace_size          sdpa.c: validate, check
 *        |  (ta_sdpa_prepare*: one ta_sdpa_problem)             overlaps, normalise options,
 *        |  (cu_seqlens: sdpa_seqs.c, one problem per sequence) resolve the path, plan the
 *        v                                                      scratch, dispatch
 *     ta_sdpa_run(problem, scratch arena)
 *        |-- forward,  reference  sdpa_forward_reference.c   the seed's algorithm on einsum
 *        |-- forward,  fused      sdpa_forward_fused.c       FlashAttention-2, tiles in L1
 *        |-- backward, reference  sdpa_backward_reference.c  materialised P and dP (oracle)
 *        '-- backward, fused      sdpa_backward_fused.c      FlashAttention-2 backward
 *
 * Every implementation has a scratch size (from shapes, strides, options and the thread
 * count only: never from data) and a run that carves that scratch from the arena it is
 * given and never allocates. A feature that extends attention (dtypes, sequence
 * offsets, score modifiers) enters here, in ta_sdpa_problem, and reaches the kernels
 * through the implementations' contracts. */
#ifndef TA_OPS_SDPA_H
#define TA_OPS_SDPA_H

#include "core/tensor_internal.h"
#include "core/workspace.h"
#include "ops/mask.h"
#include "ops/sdpa_variants.h"
#include "tensorattn.h"

#include <stdbool.h>
#include <stdint.h>

/* Paged K and V (a KV cache's blocks, sdpa_kvcache.c): key j of the problem is row
 * j % block_size of block table[j / block_size], so K's element (b, hkv, j, d) sits at
 *   K->data + table[j / block_size] * k_block_stride + (j % block_size) * K->stride[2]
 *           + b * K->stride[0] + hkv * K->stride[1] + d * K->stride[3]
 * (V alike, with v_block_stride). Keys are uniformly strided only inside a block, so
 * whatever reads K or V takes them through ta_sdpa_kv_offset and ta_sdpa_kv_run. table
 * NULL: K and V are plain strided tensors. Only the fused forward reads paged K and V. */
typedef struct ta_sdpa_pages {
    const int32_t *table; /* the blocks of the problem's keys, in key order */
    int64_t block_size, k_block_stride, v_block_stride;
} ta_sdpa_pages;

/* One validated call. Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv], O [B,H,Lq,Dv]; query
 * head h reads key/value head h / G (G = H / Hkv). A backward also has dO [B,H,Lq,Dv] and
 * the forward's LSE [B,H,Lq] (inputs; O is then an input too) and dQ [B,H,Lq,D],
 * dK [B,Hkv,Lk,D], dV [B,Hkv,Lk,Dv] (outputs, overlapping nothing). */
typedef struct ta_sdpa_problem {
    const char *fn;           /* the public function, for messages */
    bool backward;
    ta_sdpa_path path;        /* resolved: TA_SDPA_REFERENCE or TA_SDPA_FUSED */
    int64_t B, H, Hkv, G, Lq, Lk, D, Dv;
    float scale;              /* opts->scale or 1/sqrt(D) */
    ta_mask_plan mask;        /* causal, mask tensor, key lengths */
    ta_sdpa_variants var;     /* window, softcap, ALiBi, sinks (sdpa_variants.h); dsinks
                                 is a backward output */
    const ta_tensor *Q, *K, *V;
    ta_tensor *O;             /* the forward's output (an input of the backward) */
    ta_tensor *weights;       /* forward: NULL or [B, H, Lq, Lk] */
    ta_tensor *lse;           /* forward: NULL or [B, H, Lq] */
    const ta_tensor *dO, *fwd_lse; /* backward inputs */
    ta_tensor *dQ, *dK, *dV;       /* backward outputs */
    ta_sdpa_pages pages;           /* K and V in blocks (forward, fused only); {0}: not */
} ta_sdpa_problem;

/* The element offset in K (value false) or V (value true) of key j's row (its d = 0) for
 * batch b and kv head hkv, paged or not: the one addressing of keys and values. */
static inline int64_t ta_sdpa_kv_offset(const ta_sdpa_problem *p, bool value, int64_t b,
                                        int64_t hkv, int64_t j)
{
    const ta_tensor *t = value ? p->V : p->K;
    const int64_t head = b * t->stride[0] + hkv * t->stride[1];
    if (!p->pages.table) return head + j * t->stride[2];
    const int64_t bs = p->pages.block_size;
    const int64_t block = p->pages.table[j / bs];
    return head + block * (value ? p->pages.v_block_stride : p->pages.k_block_stride) +
           (j % bs) * t->stride[2];
}

/* Whether a tile of `rows` rows of t (float32, unit-stride, cols floats each) lands on
 * so few sets of a 64-set L1 data cache that it cannot stay there while kernels reread
 * it: a row stride that is a multiple of a large power of two, as a head's rows in a
 * [B, L, H, D] tensor (sdpa_forward_fused.c). The fused paths read such tensors through
 * a contiguous copy. */
bool ta_sdpa_rows_alias(const ta_tensor *t, int64_t cols, int64_t rows);

/* Output rows written with non-temporal stores (sdpa_fused_items.c): whether the fused
 * paths stream t's rows (float32, unit-stride, cols a multiple of 4, where SSE is, and t
 * at least min_bytes: larger than the cores' L2, each line would be read for ownership
 * and evicted before anyone reads it; the kernels' attn_scale_row stores them), and the
 * fence each thread that streamed runs before its parallel region ends. The least sizes,
 * measured on the two-port Xeon (docs/performance.md, sessions 8 and 25): 16 MiB, and
 * for a forward's O whose rows lie apart (a [B, L, H, D] layout, a varlen call's packed
 * O) 4 MiB. */
#define TA_SDPA_STREAM_MIN ((int64_t)16 << 20)
#define TA_SDPA_STREAM_MIN_APART ((int64_t)4 << 20)
bool ta_sdpa_stream_rows(const ta_tensor *t, int64_t cols, int64_t min_bytes);
/* The same for a call that writes `numel` elements of tensors like t (the sequences of
 * a variable-length call in one region: each a small view of the packed output, which
 * together they fill). */
bool ta_sdpa_stream_rows_of(const ta_tensor *t, int64_t cols, int64_t numel, int64_t min_bytes);
/* One of many problems in one parallel region and what its work costs; the problems in
 * order, the costliest first (ties in the order s gives), as the regions claim them
 * (sdpa_fused_items.c; the fused forward's and backward's ..._seqs). */
typedef struct ta_sdpa_cost {
    double cost;
    int64_t s;
} ta_sdpa_cost;
void ta_sdpa_order_by_cost(ta_sdpa_cost *keys, int64_t n, int64_t *order);
/* A forward's least O for streaming: TA_SDPA_STREAM_MIN_APART where O's rows (cols
 * floats each) lie apart, else TA_SDPA_STREAM_MIN. */
int64_t ta_sdpa_o_stream_min(const ta_tensor *O, int64_t cols);
void ta_sdpa_stream_fence(void);

/* How many keys from key j on follow it at stride[2] in K and V: to the end of j's
 * block when paged, else to Lk. A tile of keys never reaches past it. */
static inline int64_t ta_sdpa_kv_run(const ta_sdpa_problem *p, int64_t j)
{
    if (!p->pages.table) return p->Lk - j;
    const int64_t rest = p->pages.block_size - j % p->pages.block_size;
    return rest < p->Lk - j ? rest : p->Lk - j;
}

/* How much of a call's arguments to check. The layers size SDPA's scratch inside their
 * own before their buffers exist: TA_SDPA_SHAPES_ONLY checks shapes, strides and options
 * but reads or compares no data pointer (no NULL data, overlap or key-length checks); a
 * problem prepared so may be sized but not run. */
typedef enum ta_sdpa_check { TA_SDPA_CHECK_ALL = 0, TA_SDPA_SHAPES_ONLY = 1 } ta_sdpa_check;

/* Q [B,H,Lq,D], K [B,Hkv,Lk,D], V [B,Hkv,Lk,Dv]: ranks, and the extents they share. */
ta_status ta_sdpa_check_qkv(const char *fn, const ta_tensor *Q, const ta_tensor *K,
                            const ta_tensor *V, ta_sdpa_check check);
/* The front door's validation of ta_sdpa's arguments into *p (messages start with fn);
 * writes nothing else. */
ta_status ta_sdpa_prepare(ta_sdpa_problem *p, const char *fn, ta_tensor *O, const ta_tensor *Q,
                          const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts,
                          ta_sdpa_check check);
/* The same for ta_sdpa_backward's arguments. */
ta_status ta_sdpa_prepare_backward(ta_sdpa_problem *p, const char *fn, ta_tensor *dQ,
                                   ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                                   const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                                   const ta_tensor *O, const ta_tensor *lse,
                                   const ta_sdpa_opts *opts, ta_sdpa_check check);

/* Storage dtypes (sdpa_dtype.c). Q, K, V, O, dO, dQ, dK, dV may be float32, float16 or
 * bfloat16. An implementation computes in float32; the tensors it does not convert itself
 * (ta_sdpa_native_dtypes) get contiguous float32 stand-ins at the start of the scratch:
 * inputs widened before the run, outputs rounded after it. ta_sdpa_scratch_bytes and
 * ta_sdpa_run include this, so every caller gets it. */
enum { TA_SDPA_T_Q, TA_SDPA_T_K, TA_SDPA_T_V, TA_SDPA_T_O, TA_SDPA_T_DO, TA_SDPA_T_DQ,
       TA_SDPA_T_DK, TA_SDPA_T_DV, TA_SDPA_T_COUNT };
typedef struct ta_sdpa_staging {
    ta_sdpa_problem p;                     /* what the implementation runs */
    ta_tensor t[TA_SDPA_T_COUNT];          /* the float32 stand-ins */
    const ta_tensor *orig[TA_SDPA_T_COUNT]; /* the caller's tensor of a staged role, or NULL */
} ta_sdpa_staging;
/* Whether the implementation p resolves to reads and writes every tensor in its own
 * dtype (converting in its tile and row loops: the fused paths), so that none is staged. */
bool ta_sdpa_native_dtypes(const ta_sdpa_problem *p);
/* Whether the bfloat16 dot product (AVX512_BF16's vdpbf16ps: bfloat16 subnormals read as
 * zero, subnormal products and partial sums flush to zero) computes the products of the
 * bfloat16 tensor x (rows of cols elements along its last dim) with any bfloat16
 * operand, times factor, as the float32 path would within float32 rounding: x holds no
 * subnormal, inf or NaN (an inf times a flushed subnormal is NaN, not inf), and
 * |factor| cols max(1, max |x|) <= 2^100, so that what the instruction drops (the
 * other operand's subnormals times x, subnormal products and sums: each below
 * max(1, |x|) 2^-126) moves a result by at most 2^-26. Reads x: run time only, never
 * in a size query (the plans' scratch does not depend on it). */
bool ta_sdpa_bf16_dot_exact(const ta_tensor *x, int64_t cols, float factor);
/* The same test in parts, for rows that a kernel reads anyway: ta_bf16_scan folds n
 * bfloat16 values s apart into *most (the largest magnitude's bits; inf and NaN above
 * every finite value) and *sub (nonzero once a subnormal occurs), branch-free (a Q of
 * 8 Mi elements: 0.9 ms on one Zen 4 thread, ~6 with a branch an element);
 * ta_bf16_dot_fits says whether values of that scan pass. */
void ta_bf16_scan(const uint16_t *x, int64_t n, int64_t s, uint16_t *most, uint16_t *sub);
bool ta_bf16_dot_fits(uint16_t most, uint16_t sub, int64_t cols, float factor);
/* Which tensors of p are staged (no memory yet), and their scratch bytes. */
void ta_sdpa_stage_plan(ta_sdpa_staging *s, const ta_sdpa_problem *p);
size_t ta_sdpa_stage_bytes(ta_sdpa_staging *s);
/* Carves the stand-ins from a and widens the staged inputs into them; then, after the
 * implementation ran on s->p, ta_sdpa_stage_out rounds the staged outputs back. */
ta_status ta_sdpa_stage_in(ta_sdpa_staging *s, ta_arena *a);
void ta_sdpa_stage_out(const ta_sdpa_staging *s);
/* The front door's checks, for the other entries that build problems (sdpa_kvcache.c):
 * t a valid float32 tensor of rank 4 (dims names its extents in the message); every
 * output against every input and every other output (NULL entries are absent). */
ta_status ta_sdpa_check_rank4(const char *fn, const char *name, const ta_tensor *t,
                              const char *dims);
ta_status ta_sdpa_check_overlaps(const char *fn, int nout, ta_tensor *const *outs,
                                 const char *const *out_names, int nin,
                                 const ta_tensor *const *ins, const char *const *in_names);

/* Scratch bytes of a prepared problem on the library's current thread count (SIZE_MAX
 * when it does not fit size_t). */
size_t ta_sdpa_scratch_bytes(const ta_sdpa_problem *p);
/* At least ta_sdpa_scratch_bytes of every problem like p with Lq' <= Lq and Lk' <= Lk
 * (the sequences of a variable-length batch whose whole is p), from shapes only; fused
 * paths only (the reference paths' einsum packing is no monotonic function of Lq, Lk). */
size_t ta_sdpa_scratch_bound(const ta_sdpa_problem *p);
/* Runs a fully checked problem in scratch (an arena of at least ta_sdpa_scratch_bytes:
 * a caller's sub-arena, e.g. a layer's); never allocates. */
ta_status ta_sdpa_run(const ta_sdpa_problem *p, ta_arena *scratch);

/* The implementations: scratch bytes, and a run that lays its scratch out in `scratch`
 * with the same code. */
size_t ta_sdpa_forward_reference_scratch(const ta_sdpa_problem *p);
ta_status ta_sdpa_forward_reference(const ta_sdpa_problem *p, ta_arena *scratch);
size_t ta_sdpa_forward_fused_scratch(const ta_sdpa_problem *p);
ta_status ta_sdpa_forward_fused(const ta_sdpa_problem *p, ta_arena *scratch);
size_t ta_sdpa_backward_reference_scratch(const ta_sdpa_problem *p);
ta_status ta_sdpa_backward_reference(const ta_sdpa_problem *p, ta_arena *scratch);
size_t ta_sdpa_backward_fused_scratch(const ta_sdpa_problem *p);
ta_status ta_sdpa_backward_fused(const ta_sdpa_problem *p, ta_arena *scratch);
/* The fused paths' ta_sdpa_scratch_bound (their plans change with the shape). */
size_t ta_sdpa_forward_fused_scratch_bound(const ta_sdpa_problem *p);
/* The sequences of a variable-length forward or a KV cache's batch on the fused path
 * (ps[0 .. n), dense problems on views of the packed tensors or the cache) in one
 * parallel region where their plans and the scratch allow (sdpa_forward_fused.c), the
 * others one by one after it; bitwise the results of running each alone. Its scratch: at
 * most ta_sdpa_forward_fused_seqs_bound(whole, n, alone) for a varlen call (whole: B = 1,
 * Lq = Tq, Lk = Tk; alone: the most scratch one sequence needs), or
 * ta_sdpa_forward_fused_batch_bound for same-shaped problems. */
size_t ta_sdpa_forward_fused_seqs_bound(const ta_sdpa_problem *whole, int64_t n, size_t alone);
/* The same for n problems shaped like p (a KV cache's sequences: every one's problem has
 * the same shapes and capacity), split ones' partials included. */
size_t ta_sdpa_forward_fused_batch_bound(const ta_sdpa_problem *p, int64_t n, size_t alone);
/* Whether n problems like p (a sequence of the call) run that way: a fused forward of
 * several, whose tensors need no float32 stand-ins (ta_sdpa_run's staging). */
bool ta_sdpa_forward_fused_together(const ta_sdpa_problem *p, int64_t n);
ta_status ta_sdpa_forward_fused_seqs(const ta_sdpa_problem *ps, int64_t n, ta_arena *scratch);
size_t ta_sdpa_backward_fused_scratch_bound(const ta_sdpa_problem *p);
/* The backward's counterparts for a variable-length call (sdpa_backward_fused.c): the
 * sequences in plan "group" (whatever their number of groups) in one region, their
 * groups claimed from one counter, the others (a dQ buffer too large, a whole-tensor
 * copy) alone after it; bitwise each alone. */
bool ta_sdpa_backward_fused_together(const ta_sdpa_problem *p, int64_t n);
size_t ta_sdpa_backward_fused_seqs_bound(const ta_sdpa_problem *whole, int64_t n, size_t alone);
ta_status ta_sdpa_backward_fused_seqs(const ta_sdpa_problem *ps, int64_t n, ta_arena *scratch);

/* ta_sdpa and ta_sdpa_backward (dense batches only, no cu_seqlens) with the diagonal
 * offset of the window and ALiBi given: query i and key j of the call are at
 * rel = j - (i + delta) whatever Lq, Lk and opts->causal say (opts->causal still blocks
 * by its own alignment). For a block of a longer sequence -- queries at global positions
 * qs .. qs + Lq - 1 against keys at ks .. ks + Lk - 1 of a sequence whose own offset is
 * 0 -- delta = qs - ks (context parallelism, src/dist). Messages name ta_sdpa and
 * ta_sdpa_backward. */
TA_DIST_EXPORT
ta_status ta_sdpa_at(ta_tensor *O, const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                     const ta_sdpa_opts *opts, int64_t delta);
TA_DIST_EXPORT
ta_status ta_sdpa_backward_at(ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                              const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                              const ta_tensor *O, const ta_tensor *lse, const ta_sdpa_opts *opts,
                              int64_t delta);

/* Variable-length batches (sdpa_seqs.c): the public entries hand a call over when
 * ta_sdpa_seqs_given(opts) (cu_seqlens_q, cu_seqlens_k or num_seqs set). Each sequence
 * runs as a dense problem (B = 1) on strided views of the packed tensors. With bytes
 * non-NULL the call is the workspace query: validated the same, nothing run. */
bool ta_sdpa_seqs_given(const ta_sdpa_opts *opts);
ta_status ta_sdpa_seqs_forward(size_t *bytes, const char *fn, ta_tensor *O, const ta_tensor *Q,
                               const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts);
ta_status ta_sdpa_seqs_backward(size_t *bytes, const char *fn, ta_tensor *dQ, ta_tensor *dK,
                                ta_tensor *dV, const ta_tensor *dO, const ta_tensor *Q,
                                const ta_tensor *K, const ta_tensor *V, const ta_tensor *O,
                                const ta_tensor *lse, const ta_sdpa_opts *opts);

/* Shared by the two reference paths (sdpa_forward_reference.c). */

/* One product of a reference path, an einsum over the heads: C = A B with spec4 over
 * [B, H, ...] tensors when G == 1; with grouped-query attention (G > 1) spec5 on 5-d
 * views [B, Hkv, G, ...] of the operands whose head axis has all H heads (bits of
 * `split`: 1 C, 2 A, 4 B), so K and V are shared by the einsum itself, never repeated. */
typedef struct ta_sdpa_product {
    const char *spec;
    ta_tensor c, a, b;
} ta_sdpa_product;
enum { TA_SPLIT_C = 1, TA_SPLIT_A = 2, TA_SPLIT_B = 4 };
ta_sdpa_product ta_sdpa_product_of(const char *spec4, const char *spec5, const ta_tensor *C,
                                   const ta_tensor *A, const ta_tensor *B, int64_t G, int split);
/* Scratch bytes of the product (its einsum's), and the product run in scratch. */
size_t ta_sdpa_product_scratch(const ta_sdpa_problem *p, const ta_sdpa_product *pr);
ta_status ta_sdpa_product_run(const ta_sdpa_problem *p, const ta_sdpa_product *pr,
                              ta_arena *scratch);

#endif
