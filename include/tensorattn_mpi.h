/* tensorattn_mpi.h -- context parallelism: one attention split across MPI processes.
 *
 * When a sequence is too long for one machine, each process (rank) of an MPI
 * communicator holds a shard of the sequence: some rows of Q, K, V (all batches, all
 * heads). ta_sdpa_context_parallel computes, on every rank at once, the rows of
 * softmax(Q K^T * scale) V that the rank holds, equal to the single-process ta_sdpa of
 * the whole sequence (within float32 rounding of the merges: 1e-5); its backward gives
 * each rank the gradients of its rows. Built on ta_sdpa and ta_sdpa_backward, run on
 * blocks of the sequence. A tour, on every rank:
 *
 *     MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
 *     int64_t start[2], len[2];                       // the rows this rank holds
 *     int n = ta_cp_shard(start, len, TA_CP_ZIGZAG, L, P, rank);
 *     // q, k, v: [B, H|Hkv, len[0] + len[1], D], rows start[c] .. start[c] + len[c]
 *     // of the whole sequence for c < n, one chunk after the other; o likewise
 *     ta_sdpa_opts opts = {.causal = TA_CAUSAL_TOP_LEFT, .lse = &lse};
 *     if (ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, &o, &q, &k, &v, &opts,
 *                                  NULL) != TA_OK)
 *         fprintf(stderr, "%s\n", ta_last_error());   // the same message on every rank
 *
 * Schemes (docs/context_parallel.md has the costs):
 * - TA_CP_RING: rank r holds one contiguous chunk, rank order = sequence order (any
 *   lengths: the ranks' local lengths say where each chunk starts). K/V blocks travel
 *   around the ring (rank r sends to r + 1) with non-blocking sends overlapped with the
 *   computation on the block in hand; each rank merges its partial outputs exactly
 *   through their log-sum-exp. Causal: a block below the diagonal is unmasked, the
 *   diagonal block top-left causal, blocks above it skipped (so rank P-1 works P times as
 *   much as rank 0).
 * - TA_CP_ZIGZAG: the ring over the sequence cut into 2P chunks, rank r holding chunks
 *   r and 2P-1-r (in that order in its tensors), so causal work is equal on every rank.
 *   The chunks are ta_cp_shard's: L = 2P*c + rem gives the first rem chunks c + 1 rows.
 * - TA_CP_ULYSSES: DeepSpeed-Ulysses. Rank r holds one contiguous chunk (any lengths, as
 *   for the ring); an all-to-all turns sequence shards into head shards (rank r gets
 *   query heads r*H/P .. (r+1)*H/P - 1 and key/value heads r*Hkv/P .., whole sequences),
 *   one ta_sdpa runs per rank, and a second all-to-all turns the output back. Needs
 *   H % P == 0 and Hkv % P == 0.
 *
 * Arguments, on rank r (every rank calls with the same scheme and options):
 *   Q [B, H, Lr, D], K [B, Hkv, Lr, D], V [B, Hkv, Lr, Dv] -> O [B, H, Lr, Dv]: the Lr rows
 *   this rank holds (self-attention: Q, K and V hold the same rows); any strides; dtypes
 *   as ta_sdpa (f32, f16, bf16; blocks travel as float32).
 *   opts: scale, causal (TA_CAUSAL_TOP_LEFT or TA_CAUSAL_BOTTOM_RIGHT, the same thing when
 *   Lq == Lk), path, and lse (output [B, H, Lr], float32, the global log-sum-exp of each
 *   row: what the backward needs), key_lengths (B global lengths in [0, L], L the whole
 *   sequence, the same on every rank: keys at global positions >= key_lengths[b] are
 *   padding), and the variants of include/tensorattn.h on global positions (rel = j - i
 *   of the whole sequence): the window, softcap, alibi_slopes ([H] or [B, H]) and sinks
 *   (each row's sink joins its denominator once; the backward's opts->dsinks [H] is summed
 *   over every rank's rows and is the same on every rank). mask, weights and cu_seqlens
 *   are refused (TA_EUNSUPPORTED). opts->workspace is not
 *   used: a call takes one buffer before communicating (kept between calls: ta_cp_release).
 *   stats: NULL, or this rank's timings and traffic for the call (ta_cp_stats).
 * Agreement: before any data moves, the ranks exchange their shapes, options and local
 *   validation results, and every rank returns the same status with the same message
 *   (naming the scheme, and the rank when one rank's arguments are wrong) -- a mistake on
 *   one rank never leaves the others waiting. A failure during the computation (memory)
 *   is agreed on the same way at the end. Only a failing MPI call itself (a broken
 *   communicator) returns TA_EIO without agreement.
 * Deterministic: the same bits for the same P, shapes and data, whatever the thread
 *   count and timing. Not bitwise equal to ta_sdpa: the merges round differently.
 * The communicator is duplicated for the call (its own tags), so it may carry other
 * traffic; it must be an intracommunicator (an intercommunicator is TA_EINVAL on every
 * process of it). MPI must be initialised; only the calling thread makes MPI calls
 * (MPI_THREAD_FUNNELED is enough) while OpenMP threads compute.
 * Errors: TA_EINVAL (NULL, MPI not initialised, an intercommunicator, a bad scheme, ranks
 *   that disagree --
 *   options, key lengths, the variants and their slopes' and sinks' values --, key
 *   lengths outside [0, L], a variant's bad value as ta_sdpa gives it),
 *   TA_ESHAPE (shapes, Lq != Lk, a shard that does not fit the scheme, H or Hkv not
 *   divisible by P for Ulysses), TA_EUNSUPPORTED (options above), TA_ENOMEM, TA_EIO (MPI).
 *   On error the outputs are untouched. */
#ifndef TENSORATTN_MPI_H
#define TENSORATTN_MPI_H

#include <mpi.h>

#include "tensorattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ta_cp_scheme {
    TA_CP_RING = 0,
    TA_CP_ZIGZAG = 1,
    TA_CP_ULYSSES = 2
} ta_cp_scheme;

/* "ring", "zigzag", "ulysses"; "unknown" out of range. */
const char *ta_cp_scheme_name(ta_cp_scheme scheme);
/* The scheme called name (as ta_cp_scheme_name spells it) into *scheme; TA_EINVAL with a
 * message listing the schemes otherwise. */
ta_status ta_cp_scheme_parse(ta_cp_scheme *scheme, const char *name);

/* The rows of a sequence of length L that rank `rank` of P holds under `scheme` in the
 * standard split (the one the command line uses, and the only one zigzag takes): chunk c
 * (c < the returned count, 1 or 2) is rows start[c] .. start[c] + len[c] - 1, stored in
 * that order. The sequence is cut into n = P chunks (2P for zigzag) of L / n rows, the
 * first L % n of them one row longer; ring and Ulysses give rank r chunk r, zigzag chunks
 * r and 2P-1-r. Chunks may be empty when L < n. Returns 0 for bad arguments (P < 1, rank
 * outside [0, P), L < 0, a bad scheme). */
int ta_cp_shard(int64_t start[2], int64_t len[2], ta_cp_scheme scheme, int64_t L, int P,
                int rank);

/* What one rank spent in a call. */
typedef struct ta_cp_stats {
    double total_s;      /* wall time of the call */
    double compute_s;    /* in ta_sdpa / ta_sdpa_backward calls, merges and packing */
    double blocked_s;    /* waiting for data in MPI: transfers (ring), all-to-alls (Ulysses) */
    double sync_s;       /* in the agreements: waiting for the slowest rank to arrive */
    int64_t bytes_sent;  /* payload bytes this rank sent (to other ranks) */
    int steps;           /* ring steps (P), or all-to-all exchanges (Ulysses) */
} ta_cp_stats;

/* The calls keep one buffer (K/V blocks, accumulators: tens to hundreds of MiB) between
 * calls, so that steady calls reuse memory already touched; it is released at
 * MPI_Finalize, or now by ta_cp_release (call it before ta_set_allocator: the buffer came
 * from the old hook). */
void ta_cp_release(void);

/* Context-parallel ta_sdpa (see the top of this header). */
ta_status ta_sdpa_context_parallel(MPI_Comm comm, ta_cp_scheme scheme, ta_tensor *O,
                                   const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                                   const ta_sdpa_opts *opts, ta_cp_stats *stats);

/* Context-parallel ta_sdpa_backward: on rank r, given its rows of dO, Q, K, V, and of the
 * forward's O and LSE (the global ones, as ta_sdpa_context_parallel returns them),
 *   dQ [B, H, Lr, D], dK [B, Hkv, Lr, D], dV [B, Hkv, Lr, Dv] (overwritten).
 * Ring and zigzag pass every block the global O and LSE, so each block's
 * P_ij = exp(s_ij - LSE_i) and D_i = rowsum(dO_i * O_i) are the whole row's, and a block's
 * gradients are exact parts of the sum; the dK/dV accumulators travel around the ring
 * behind their K/V blocks and arrive home after P steps. Ulysses runs one
 * ta_sdpa_backward per head shard. opts as the forward's, with opts->lse NULL. */
ta_status ta_sdpa_context_parallel_backward(MPI_Comm comm, ta_cp_scheme scheme, ta_tensor *dQ,
                                            ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                                            const ta_tensor *Q, const ta_tensor *K,
                                            const ta_tensor *V, const ta_tensor *O,
                                            const ta_tensor *lse, const ta_sdpa_opts *opts,
                                            ta_cp_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
