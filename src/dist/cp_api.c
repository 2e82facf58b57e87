/* ta_sdpa_context_parallel and its backward: local validation (what ta_sdpa would say of
 * this rank's shard), the agreement between ranks, then the scheme. */
#include "dist/cp_internal.h"
#include "core/core.h"

#include <string.h>

/* Context parallelism is self-attention: Q, K and V hold the same rows. */
static ta_status check_tensors(const ta_tensor *const *t, const char *const *name, int n,
                               const ta_tensor *Q, const ta_tensor *K)
{
    for (int i = 0; i < n; i++)
        if (!t[i]) return ta_set_error(TA_EINVAL, "%s is NULL", name[i]);
    for (int i = 0; i < n; i++)
        if (t[i]->ndim != (strcmp(name[i], "lse") == 0 ? 3 : 4))
            return ta_set_error(TA_ESHAPE, "%s must have %s dims, got %d", name[i],
                                strcmp(name[i], "lse") == 0 ? "3 [B, H, Lr]" : "4 [B, heads, Lr, .]",
                                t[i]->ndim);
    if (Q->shape[2] != K->shape[2])
        return ta_set_error(TA_ESHAPE, "Q holds %lld rows but K holds %lld: context parallelism "
                            "is self-attention (Lq == Lk), every rank passing the same rows of "
                            "Q, K and V", (long long)Q->shape[2], (long long)K->shape[2]);
    return TA_OK;
}

/* The options the library checks on this rank's shard: the caller's, without the key
 * lengths (global, checked against the whole sequence in the agreement) and the
 * workspace (not used). */
static ta_sdpa_opts local_opts(const ta_sdpa_opts *opts)
{
    ta_sdpa_opts o = *opts;
    o.key_lengths = NULL;
    o.workspace = (ta_workspace){0};
    return o;
}

/* The options of the block calls: the caller's scale, path, window, softcap and ALiBi;
 * causal, key lengths and lse are set per call; the sinks join once, in the merge
 * (cp_variants.c), not in every block. */
static ta_sdpa_opts block_opts(const ta_sdpa_opts *opts)
{
    ta_sdpa_opts o = local_opts(opts);
    o.causal = TA_CAUSAL_NONE;
    o.lse = NULL;
    o.weights = NULL;
    o.sinks = NULL;
    o.dsinks = NULL;
    return o;
}

/* cp_begin, the statistics zeroed when it fails */
static ta_status begin(cp_ctx *c, MPI_Comm comm, ta_cp_scheme scheme, int op, ta_cp_stats *stats)
{
    ta_status st = cp_begin(c, comm, scheme, op);
    if (st && stats) memset(stats, 0, sizeof *stats);
    return st;
}

ta_status ta_sdpa_context_parallel(MPI_Comm comm, ta_cp_scheme scheme, ta_tensor *O,
                                   const ta_tensor *Q, const ta_tensor *K, const ta_tensor *V,
                                   const ta_sdpa_opts *opts, ta_cp_stats *stats)
{
    cp_ctx c;
    ta_status st = begin(&c, comm, scheme, CP_FORWARD, stats);
    if (st) return st;
    const ta_sdpa_opts defaults = {0};
    if (!opts) opts = &defaults;
    const ta_tensor *t[4] = {O, Q, K, V};
    const char *const name[4] = {"O", "Q", "K", "V"};
    st = check_tensors(t, name, 4, Q, K);
    if (!st) st = cp_check_opts(opts);
    if (!st) { /* the library's own checks on this rank's shard */
        size_t bytes;
        ta_sdpa_opts o = local_opts(opts);
        st = ta_sdpa_workspace_size(&bytes, O, Q, K, V, &o);
    }
    c.block_opts = block_opts(opts);
    st = cp_agree_shapes(&c, st, Q, K, V, opts, opts->lse != NULL);
    if (!st)
        st = scheme == TA_CP_ULYSSES ? cp_ulysses_forward(&c, O, opts->lse, Q, K, V)
                                     : cp_ring_forward(&c, O, opts->lse, Q, K, V);
    cp_end(&c, stats);
    return st;
}

ta_status ta_sdpa_context_parallel_backward(MPI_Comm comm, ta_cp_scheme scheme, ta_tensor *dQ,
                                            ta_tensor *dK, ta_tensor *dV, const ta_tensor *dO,
                                            const ta_tensor *Q, const ta_tensor *K,
                                            const ta_tensor *V, const ta_tensor *O,
                                            const ta_tensor *lse, const ta_sdpa_opts *opts,
                                            ta_cp_stats *stats)
{
    cp_ctx c;
    ta_status st = begin(&c, comm, scheme, CP_BACKWARD, stats);
    if (st) return st;
    const ta_sdpa_opts defaults = {0};
    if (!opts) opts = &defaults;
    const ta_tensor *t[9] = {dQ, dK, dV, dO, Q, K, V, O, lse};
    const char *const name[9] = {"dQ", "dK", "dV", "dO", "Q", "K", "V", "O", "lse"};
    st = check_tensors(t, name, 9, Q, K);
    if (!st && opts->lse)
        st = ta_set_error(TA_EINVAL, "opts->lse must be NULL in the backward (the forward's LSE "
                          "is the lse argument)");
    if (!st) st = cp_check_opts(opts);
    if (!st) {
        size_t bytes;
        ta_sdpa_opts o = local_opts(opts);
        st = ta_sdpa_backward_workspace_size(&bytes, dQ, dK, dV, dO, Q, K, V, O, lse, &o);
    }
    /* the sinks' sums are allocated before anything is written: a failure later would
     * leave the gradients written */
    double *sink_sums = NULL;
    if (!st && opts->dsinks) {
        sink_sums = ta_alloc(sizeof(double) * 2 * (size_t)Q->shape[1]);
        if (!sink_sums)
            st = ta_set_error(TA_ENOMEM, "out of memory for the sums of %lld sinks",
                              (long long)Q->shape[1]);
    }
    c.block_opts = block_opts(opts);
    st = cp_agree_shapes(&c, st, Q, K, V, opts, true);
    if (!st)
        st = scheme == TA_CP_ULYSSES ? cp_ulysses_backward(&c, dQ, dK, dV, dO, Q, K, V, O, lse)
                                     : cp_ring_backward(&c, dQ, dK, dV, dO, Q, K, V, O, lse);
    if (!st) st = cp_sinks_grad(&c, dO, O, lse, sink_sums); /* summed over every rank's rows */
    ta_free(sink_sums);
    cp_end(&c, stats);
    return st;
}
