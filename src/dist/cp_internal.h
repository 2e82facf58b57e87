/* Internal pieces of the MPI layer (tensorattn_mpi.h). Blocks are computed by
 * ta_sdpa_at and ta_sdpa_backward_at (ops/sdpa.h: ta_sdpa and its backward with the
 * block's global diagonal offset for the window and ALiBi), errors recorded with
 * ta_set_error. */
#ifndef TA_CP_INTERNAL_H
#define TA_CP_INTERNAL_H

#include "tensorattn_mpi.h"

#include <stdbool.h>
#include <stdint.h>

enum { CP_FORWARD = 0, CP_BACKWARD = 1 };
enum { CP_MSG = 400 };

/* The attention variants as the ranks compare them (cp_variants.c): a window normalised
 * (no window: -1, -1), softcap's bits, and FNV-1a hashes of the slopes' and sinks' values. */
typedef struct cp_vdesc {
    int64_t left, right;
    uint32_t softcap_bits;
    int32_t alibi_ndim;  /* 0: no slopes, 1: [H], 2: [B, H] */
    int32_t has_sinks, has_dsinks;
    uint64_t alibi_hash, sinks_hash;
} cp_vdesc;

/* One call's state on one rank. */
typedef struct cp_ctx {
    MPI_Comm comm;          /* a duplicate of the caller's, MPI_ERRORS_RETURN */
    int P, rank;
    ta_cp_scheme scheme;
    int op;                 /* CP_FORWARD, CP_BACKWARD */
    const char *fn;         /* the public function's name, for messages */
    int64_t B, H, Hkv, D, Dv, L;
    int64_t *len;           /* [P]: rows each rank holds */
    int64_t *off;           /* [P]: ring, Ulysses: where each rank's chunk starts */
    int64_t max_len;        /* max of len[] */
    bool causal;
    const int64_t *key_lengths; /* NULL, or the caller's B global key lengths */
    int64_t *block_klen;    /* [B]: one block call's local key lengths */
    ta_sdpa_opts block_opts; /* the caller's options for the block calls: no lse, no
                                workspace, no causal (set per block), no sinks */
    int64_t win_left, win_right; /* the window (-1: unbounded; both -1: none) */
    bool positional;        /* a window or ALiBi: block calls need their global offset, so
                               a call never spans chunks that are not adjacent globally */
    const ta_tensor *sinks; /* the caller's sinks [H], or NULL */
    ta_tensor *dsinks;      /* backward: the caller's dsinks [H], or NULL */
    ta_status run_status;   /* first failure while computing (the ring goes on) */
    char run_msg[CP_MSG];
    ta_cp_stats stats;
    double t_start;
    ta_tensor buf;          /* the call's buffer (cp_buffer), released by cp_end */
    bool holds_kept;        /* buf is the process's kept buffer */
} cp_ctx;

/* A chunk of the sequence a rank holds: global rows start .. start + len - 1, at row
 * `local` of the rank's tensors. */
typedef struct cp_chunk {
    int64_t start, len, local;
} cp_chunk;

/* ---- cp_common.c */
/* Sets up ctx for a call (MPI initialised, comm duplicated); on failure nothing needs
 * cp_end. */
ta_status cp_begin(cp_ctx *ctx, MPI_Comm comm, ta_cp_scheme scheme, int op);
/* Frees what cp_begin and the agreement allocated; fills *stats when not NULL. */
void cp_end(cp_ctx *ctx, ta_cp_stats *stats);
/* Records ta_set_error's message "<fn> (<scheme>): <text>" and returns code. */
ta_status cp_error(const cp_ctx *ctx, ta_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Every rank's status (and the lowest failing rank's message) to every rank: returns
 * that status with the message recorded on every rank, TA_OK when none failed. */
ta_status cp_agree_status(cp_ctx *ctx, ta_status local);
/* The agreement before communicating: local validation result st (message in
 * ta_last_error()), this rank's shape Q [B, H, Lr, D], K [.., Hkv, ..], V [.., Dv], and the
 * options; checks that the ranks agree and that the shards fit the scheme; fills ctx's
 * shape, len, off. */
ta_status cp_agree_shapes(cp_ctx *ctx, ta_status st, const ta_tensor *Q, const ta_tensor *K,
                          const ta_tensor *V, const ta_sdpa_opts *opts, bool has_lse);
/* The chunks rank s holds (1 or 2); returns the count. */
int cp_rank_chunks(const cp_ctx *ctx, int s, cp_chunk chunk[2]);
/* An MPI call's result: true when it succeeded, else records TA_EIO "<fn> (<scheme>):
 * <what> failed: <MPI's string>" and returns false. */
bool cp_mpi_ok(const cp_ctx *ctx, int rc, const char *what);
/* Records the first failure of a block computation (keeps ta_last_error's message). */
void cp_note_failure(cp_ctx *ctx, ta_status st);
/* cp_agree_status on the computation's outcome (ctx->run_status and its message). */
ta_status cp_agree_run(cp_ctx *ctx);
double cp_now(void);

/* The local key lengths (into ctx->block_klen) of rows k0 .. k0 + n - 1 of a block made
 * of chunks blk[0 .. nblk-1]; NULL when the call has no key lengths. */
const int64_t *cp_block_klen(cp_ctx *ctx, const cp_chunk *blk, int nblk, int64_t k0, int64_t n);

/* Checks the options context parallelism takes (TA_EUNSUPPORTED for the others). */
ta_status cp_check_opts(const ta_sdpa_opts *opts);

/* ---- cp_variants.c */
/* This rank's view of opts' variants (opts validated). */
void cp_vdesc_of(cp_vdesc *d, const ta_sdpa_opts *opts);
/* The variant on which b differs from a, or NULL. */
const char *cp_vdesc_differs(const cp_vdesc *a, const cp_vdesc *b);
/* ctx's variant fields from the agreed options. */
void cp_variants_set(cp_ctx *ctx, const ta_sdpa_opts *opts);
/* The sinks join the merged rows ([B, H, Lr, Dv] and [B, H, Lr]) once, as one more part of
 * the merge: LSE sigma_h, output 0. Nothing without sinks. */
void cp_sinks_merge(const cp_ctx *ctx, float *o, float *lse, int64_t Lr);
/* dsinks (when asked for) summed over every rank's rows: a collective, on every rank
 * after a successful backward; part: 2 H doubles (allocated before the backward wrote
 * anything). */
ta_status cp_sinks_grad(cp_ctx *ctx, const ta_tensor *dO, const ta_tensor *O,
                        const ta_tensor *lse, double *part);

/* ---- cp_buffer.c */
/* The call's float32 buffer of n elements (one per call; the process's kept buffer when
 * no other call holds it), released by cp_end. */
ta_status cp_buffer(cp_ctx *ctx, int64_t n, float **data);
void cp_buffer_done(cp_ctx *ctx);
/* A 4-d view of a float32 buffer. */
ta_tensor cp_view4(float *data, int64_t s0, int64_t s1, int64_t s2, int64_t s3);
/* Rows r0 .. r0 + n - 1 (dim 2) of a 4-d tensor, or of the 3-d LSE (dim 2 as well). */
ta_tensor cp_rows(const ta_tensor *t, int64_t r0, int64_t n);

/* ---- cp_ring.c, cp_ring_backward.c, cp_ulysses.c: run after the agreement; failures
 * go to ctx->run_status (cp_note_failure), the communication always completes unless
 * MPI itself fails (then TA_EIO is returned at once). */
ta_status cp_ring_forward(cp_ctx *ctx, ta_tensor *O, ta_tensor *lse, const ta_tensor *Q,
                          const ta_tensor *K, const ta_tensor *V);
ta_status cp_ring_backward(cp_ctx *ctx, ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV,
                           const ta_tensor *dO, const ta_tensor *Q, const ta_tensor *K,
                           const ta_tensor *V, const ta_tensor *O, const ta_tensor *lse);
ta_status cp_ulysses_forward(cp_ctx *ctx, ta_tensor *O, ta_tensor *lse, const ta_tensor *Q,
                             const ta_tensor *K, const ta_tensor *V);
ta_status cp_ulysses_backward(cp_ctx *ctx, ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV,
                              const ta_tensor *dO, const ta_tensor *Q, const ta_tensor *K,
                              const ta_tensor *V, const ta_tensor *O, const ta_tensor *lse);

/* ---- cp_blocks.c: the block pairs of one ring step */
enum { CP_MAX_CALLS = 8 };
/* One ta_sdpa call of a step: local query rows q0 .. q0 + nq - 1 against the block's
 * rows k0 .. k0 + nk - 1; diag: the same chunk (nq == nk), top-left causal. qg, kg: the
 * global positions of rows q0 and k0 (a call's rows are globally contiguous when the
 * plan was split). */
typedef struct cp_call {
    int64_t q0, nq, k0, nk, qg, kg;
    bool diag;
} cp_call;
/* The calls of rank `me`'s chunks against the block of chunks `blk` (causal: blocks
 * below the diagonal whole, diagonal chunks causal, blocks above skipped; full blocks
 * coalesced into one call when they form a rectangle, unless split: then one call per
 * pair of chunks). Returns the count. */
int cp_plan_step(cp_call call[CP_MAX_CALLS], const cp_chunk *me, int nme, const cp_chunk *blk,
                 int nblk, bool causal, bool split);
/* A call cut into pieces of query rows (so MPI can progress between them): piece p of
 * n is rows a .. b - 1 of the call, against keys kb .. kb + nkeys - 1 of the block,
 * causal bottom-right when diag (the keys end where the rows do). delta: the piece's
 * global diagonal offset (position of row a minus position of key kb). With a window,
 * the piece shrinks to the rows that see a key of the block and the keys some row sees;
 * a == b: the window hides the block from every row (nothing to compute). */
typedef struct cp_piece {
    int64_t a, b, kb, nkeys, delta;
    ta_causal causal;
    const int64_t *key_lengths; /* the piece's local key lengths (cp_block_klen), or NULL */
} cp_piece;
int cp_pieces(const cp_call *c, bool want_many);
cp_piece cp_piece_at(const cp_ctx *ctx, const cp_call *c, int p, int n);
/* o_acc/lse_acc rows q0 .. q0 + n - 1 ([BH, Lr, Dv] and [BH, Lr]) merged with a partial
 * result ([BH, n, Dv], [BH, n]) through their log-sum-exp. */
void cp_merge(float *o_acc, float *lse_acc, const float *o_part, const float *lse_part,
              int64_t BH, int64_t Lr, int64_t q0, int64_t n, int64_t Dv);
/* acc rows r0 .. r0 + n - 1 of [X, Lacc, W] += part [X, n, W]. */
void cp_add_rows(float *acc, const float *part, int64_t X, int64_t Lacc, int64_t r0, int64_t n,
                 int64_t W);

#endif
