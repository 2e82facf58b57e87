/* Context parallelism: scheme names, the standard split, a call's set-up and the
 * agreement between ranks (every rank returns the same status and message, and no rank
 * starts communicating data unless all of them can). */
#include "dist/cp_internal.h"

#include "core/core.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const scheme_names[] = {"ring", "zigzag", "ulysses"};

const char *ta_cp_scheme_name(ta_cp_scheme scheme)
{
    return (unsigned)scheme < 3 ? scheme_names[scheme] : "unknown";
}

ta_status ta_cp_scheme_parse(ta_cp_scheme *scheme, const char *name)
{
    for (int s = 0; name && s < 3; s++)
        if (strcmp(name, scheme_names[s]) == 0) {
            if (scheme) *scheme = (ta_cp_scheme)s;
            return TA_OK;
        }
    return ta_set_error(TA_EINVAL, "ta_cp_scheme_parse: unknown scheme '%s' (ring, zigzag or "
                        "ulysses)", name ? name : "(null)");
}

/* Chunk i of n over L rows: L / n rows each, the first L % n one more. */
static void balanced(int64_t *start, int64_t *len, int64_t L, int64_t n, int64_t i)
{
    int64_t q = L / n, rem = L % n;
    *len = q + (i < rem);
    *start = i * q + (i < rem ? i : rem);
}

int ta_cp_shard(int64_t start[2], int64_t len[2], ta_cp_scheme scheme, int64_t L, int P, int rank)
{
    if (!start || !len || P < 1 || rank < 0 || rank >= P || L < 0 || (unsigned)scheme > 2)
        return 0;
    if (scheme != TA_CP_ZIGZAG) {
        balanced(&start[0], &len[0], L, P, rank);
        return 1;
    }
    balanced(&start[0], &len[0], L, 2 * (int64_t)P, rank);
    balanced(&start[1], &len[1], L, 2 * (int64_t)P, 2 * (int64_t)P - 1 - rank);
    return 2;
}

double cp_now(void) { return MPI_Wtime(); }

ta_status cp_error(const cp_ctx *ctx, ta_status code, const char *fmt, ...)
{
    char text[CP_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return ta_set_error(code, "%s (%s): %s", ctx->fn, ta_cp_scheme_name(ctx->scheme), text);
}

bool cp_mpi_ok(const cp_ctx *ctx, int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return true;
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    cp_error(ctx, TA_EIO, "%s failed: %s", what, text);
    return false;
}

void cp_note_failure(cp_ctx *ctx, ta_status st)
{
    if (st == TA_OK || ctx->run_status != TA_OK) return;
    ctx->run_status = st;
    snprintf(ctx->run_msg, sizeof ctx->run_msg, "%s", ta_last_error());
}

ta_status cp_begin(cp_ctx *ctx, MPI_Comm comm, ta_cp_scheme scheme, int op)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->scheme = scheme;
    ctx->op = op;
    ctx->fn = op == CP_FORWARD ? "ta_sdpa_context_parallel" : "ta_sdpa_context_parallel_backward";
    ctx->comm = MPI_COMM_NULL;
    ctx->t_start = 0.0;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return cp_error(ctx, TA_EINVAL, "MPI is %s (call it between MPI_Init and MPI_Finalize)",
                        fin ? "finalised" : "not initialised");
    ctx->t_start = cp_now();
    if (comm == MPI_COMM_NULL) return cp_error(ctx, TA_EINVAL, "comm is MPI_COMM_NULL");
    /* an intercommunicator's collectives and ranks address the other group: the ring would
     * pair one group's queries with the other's keys. Every process of it sees the flag, so
     * every one returns here, none waiting in a collective. */
    int inter = 0;
    if (!cp_mpi_ok(ctx, MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter")) return TA_EIO;
    if (inter)
        return cp_error(ctx, TA_EINVAL, "comm is an intercommunicator: context parallelism "
                        "needs an intracommunicator (MPI_Intercomm_merge makes one)");
    /* the scheme is checked in the agreement, so that every rank hears of a bad one */
    if (!cp_mpi_ok(ctx, MPI_Comm_dup(comm, &ctx->comm), "MPI_Comm_dup")) return TA_EIO;
    if (!cp_mpi_ok(ctx, MPI_Comm_set_errhandler(ctx->comm, MPI_ERRORS_RETURN),
                   "MPI_Comm_set_errhandler") ||
        !cp_mpi_ok(ctx, MPI_Comm_size(ctx->comm, &ctx->P), "MPI_Comm_size") ||
        !cp_mpi_ok(ctx, MPI_Comm_rank(ctx->comm, &ctx->rank), "MPI_Comm_rank")) {
        MPI_Comm_free(&ctx->comm);
        return TA_EIO;
    }
    return TA_OK;
}

void cp_end(cp_ctx *ctx, ta_cp_stats *stats)
{
    cp_buffer_done(ctx);
    if (ctx->comm != MPI_COMM_NULL) MPI_Comm_free(&ctx->comm);
    ta_free(ctx->len);
    ta_free(ctx->off);
    ta_free(ctx->block_klen);
    ctx->len = ctx->off = NULL;
    ctx->block_klen = NULL;
    ctx->stats.total_s = ctx->t_start > 0.0 ? cp_now() - ctx->t_start : 0.0;
    if (stats) *stats = ctx->stats;
}

/* What each rank tells the others before any data moves. */
typedef struct cp_desc {
    int32_t status, op, scheme, causal, path, has_lse;
    float scale;
    int32_t has_klen;
    uint64_t klen_hash; /* FNV-1a of the key lengths */
    int64_t shape[6]; /* B, H, Hkv, D, Dv, Lr */
    cp_vdesc var;     /* window, softcap, ALiBi, sinks */
    char msg[CP_MSG];
} cp_desc;

static bool gather(cp_ctx *ctx, const cp_desc *mine, cp_desc *all)
{
    double t = cp_now();
    int rc = MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE,
                           ctx->comm);
    ctx->stats.sync_s += cp_now() - t;
    return cp_mpi_ok(ctx, rc, "MPI_Allgather");
}

/* The lowest failing rank's status, its message recorded (naming the rank unless every
 * rank failed alike); TA_OK when none failed. */
static ta_status first_failure(const cp_ctx *ctx, const cp_desc *all)
{
    int bad = -1;
    bool alike = true;
    for (int s = 0; s < ctx->P; s++) {
        if (all[s].status == TA_OK) {
            alike = false;
            continue;
        }
        if (bad < 0) bad = s;
        else if (all[s].status != all[bad].status || strcmp(all[s].msg, all[bad].msg) != 0)
            alike = false;
    }
    if (bad < 0) return TA_OK;
    if (alike || ctx->P == 1) return cp_error(ctx, (ta_status)all[bad].status, "%s", all[bad].msg);
    return cp_error(ctx, (ta_status)all[bad].status, "rank %d: %s", bad, all[bad].msg);
}

/* Whether every rank allocated what an agreement gathers into (ok: this one did). A rank
 * whose allocation failed must still meet the others in a collective: had it returned
 * alone, they would wait in the gather for ever. */
static ta_status all_allocated(cp_ctx *ctx, bool ok, const char *what)
{
    int mine = ok, all = 0;
    double t = cp_now();
    int rc = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, ctx->comm);
    ctx->stats.sync_s += cp_now() - t;
    if (!cp_mpi_ok(ctx, rc, "MPI_Allreduce")) return TA_EIO;
    if (all) return TA_OK;
    return cp_error(ctx, TA_ENOMEM, "out of memory for %d ranks' %s (on one rank or more)",
                    ctx->P, what);
}

ta_status cp_agree_status(cp_ctx *ctx, ta_status local)
{
    cp_desc mine, *all = ta_alloc(sizeof(cp_desc) * (size_t)ctx->P);
    ta_status ast = all_allocated(ctx, all != NULL, "status");
    if (ast) {
        ta_free(all);
        return ast;
    }
    memset(&mine, 0, sizeof mine);
    mine.status = (int32_t)local;
    if (local) snprintf(mine.msg, sizeof mine.msg, "%s", ta_last_error());
    ta_status st = gather(ctx, &mine, all) ? first_failure(ctx, all) : TA_EIO;
    ta_free(all);
    return st;
}

ta_status cp_agree_run(cp_ctx *ctx)
{
    if (ctx->run_status) ta_set_error(ctx->run_status, "%s", ctx->run_msg);
    return cp_agree_status(ctx, ctx->run_status);
}

ta_status cp_check_opts(const ta_sdpa_opts *o)
{
    const char *what = o->mask                               ? "a mask (opts->mask)"
                       : o->weights                          ? "attention weights (opts->weights)"
                       : o->cu_seqlens_q || o->cu_seqlens_k
                           ? "variable-length batches (cu_seqlens)"
                           : NULL;
    if (what)
        return ta_set_error(TA_EUNSUPPORTED, "%s does not combine with context parallelism "
                            "(it takes scale, causal, GQA, key lengths, LSE, the window, "
                            "softcap, ALiBi and sinks)", what);
    if (o->causal != TA_CAUSAL_NONE && o->causal != TA_CAUSAL_TOP_LEFT &&
        o->causal != TA_CAUSAL_BOTTOM_RIGHT)
        return ta_set_error(TA_EINVAL, "opts->causal is %d, not a ta_causal", (int)o->causal);
    return TA_OK;
}

/* The option or extent on which b disagrees with a, or NULL; for an extent, *extent is set
 * and *va, *vb hold the two values. */
static const char *disagreement(const cp_desc *a, const cp_desc *b, bool *extent, int64_t *va,
                                int64_t *vb)
{
    static const char *const names[6] = {"B", "H", "Hkv", "D", "Dv", NULL};
    if (a->op != b->op) return "the direction (forward or backward)";
    if (a->scheme != b->scheme) return "the scheme";
    if (a->causal != b->causal) return "causal";
    if (a->path != b->path) return "opts->path";
    if (a->has_lse != b->has_lse) return "whether opts->lse is given";
    if (a->has_klen != b->has_klen || a->klen_hash != b->klen_hash) return "opts->key_lengths";
    if (memcmp(&a->scale, &b->scale, sizeof a->scale) != 0) return "opts->scale";
    const char *var = cp_vdesc_differs(&a->var, &b->var);
    if (var) return var;
    for (int i = 0; i < 5; i++)
        if (a->shape[i] != b->shape[i]) {
            *extent = true;
            *va = a->shape[i];
            *vb = b->shape[i];
            return names[i];
        }
    return NULL;
}

/* Ring (and Ulysses): rank s starts where s - 1 ends. Zigzag: the standard split. */
static ta_status check_split(cp_ctx *ctx)
{
    int64_t L = 0;
    for (int s = 0; s < ctx->P; s++) {
        ctx->off[s] = L;
        L += ctx->len[s];
        if (ctx->len[s] > ctx->max_len) ctx->max_len = ctx->len[s];
    }
    ctx->L = L;
    for (int s = 0; ctx->scheme == TA_CP_ZIGZAG && s < ctx->P; s++) {
        int64_t start[2], len[2];
        ta_cp_shard(start, len, TA_CP_ZIGZAG, L, ctx->P, s);
        if (len[0] + len[1] != ctx->len[s])
            return cp_error(ctx, TA_ESHAPE, "rank %d holds %lld rows, but zigzag's split of L = "
                            "%lld over P = %d ranks gives it %lld (chunks %d and %d of %d, "
                            "ta_cp_shard)", s, (long long)ctx->len[s], (long long)L, ctx->P,
                            (long long)(len[0] + len[1]), s, 2 * ctx->P - 1 - s, 2 * ctx->P);
    }
    for (int64_t b = 0; ctx->key_lengths && b < ctx->B; b++)
        if (ctx->key_lengths[b] < 0 || ctx->key_lengths[b] > L)
            return cp_error(ctx, TA_EINVAL, "opts->key_lengths[%lld] = %lld is outside [0, L = "
                            "%lld] (the lengths are global: of the whole sequence)",
                            (long long)b, (long long)ctx->key_lengths[b], (long long)L);
    if (ctx->scheme == TA_CP_ULYSSES && (ctx->H % ctx->P || ctx->Hkv % ctx->P))
        return cp_error(ctx, TA_ESHAPE, "H = %lld and Hkv = %lld must both be divisible by the "
                        "number of ranks P = %d (each rank takes H/P query heads and Hkv/P "
                        "key/value heads)", (long long)ctx->H, (long long)ctx->Hkv, ctx->P);
    /* MPI counts are ints: one message (a K/V block, or one rank's share of an
     * all-to-all, with its displacements) must stay below INT_MAX floats */
    const double wmax = (double)(ctx->D > ctx->Dv ? ctx->D : ctx->Dv);
    const double rows = (double)ctx->max_len * ctx->P > (double)L ? (double)ctx->max_len * ctx->P
                                                                  : (double)L;
    double n = ctx->scheme == TA_CP_ULYSSES
                   ? (double)ctx->B * (double)(ctx->H / ctx->P) * rows * wmax
                   : (double)ctx->B * (double)ctx->Hkv * (double)ctx->max_len * 2.0 * wmax;
    if (n > (double)INT_MAX)
        return cp_error(ctx, TA_EUNSUPPORTED, "a message of %.0f floats exceeds MPI's int "
                        "counts (%d): use more ranks", n, INT_MAX);
    return TA_OK;
}

ta_status cp_agree_shapes(cp_ctx *ctx, ta_status st, const ta_tensor *Q, const ta_tensor *K,
                          const ta_tensor *V, const ta_sdpa_opts *opts, bool has_lse)
{
    cp_desc mine, *all = ta_alloc(sizeof(cp_desc) * (size_t)ctx->P);
    ctx->len = ta_alloc_zeroed(sizeof(int64_t) * (size_t)ctx->P);
    ctx->off = ta_alloc_zeroed(sizeof(int64_t) * (size_t)ctx->P);
    ta_status ast = all_allocated(ctx, all && ctx->len && ctx->off, "shapes");
    if (ast) {
        ta_free(all);
        return ast; /* len and off: cp_ctx_end */
    }
    memset(&mine, 0, sizeof mine);
    if (!st && (unsigned)ctx->scheme > 2)
        st = ta_set_error(TA_EINVAL, "scheme %d is not a ta_cp_scheme (ring, zigzag, ulysses)",
                          (int)ctx->scheme);
    mine.op = ctx->op;
    mine.scheme = (int32_t)ctx->scheme;
    if (opts) {
        mine.causal = opts->causal != TA_CAUSAL_NONE;
        mine.path = (int32_t)opts->path;
        mine.scale = opts->scale;
    }
    mine.has_lse = has_lse;
    if (!st && opts && opts->key_lengths &&
        !(ctx->block_klen = ta_alloc_zeroed(sizeof(int64_t) * ((size_t)Q->shape[0] + 1))))
        st = ta_set_error(TA_ENOMEM, "out of memory for %lld key lengths",
                          (long long)Q->shape[0]);
    mine.status = (int32_t)st;
    if (st) snprintf(mine.msg, sizeof mine.msg, "%s", ta_last_error());
    if (!st && opts && opts->key_lengths) {
        mine.has_klen = 1;
        mine.klen_hash = 1469598103934665603ull;
        for (int64_t b = 0; b < Q->shape[0]; b++)
            for (int i = 0; i < 8; i++) {
                mine.klen_hash ^= (uint64_t)opts->key_lengths[b] >> (8 * i) & 0xff;
                mine.klen_hash *= 1099511628211ull;
            }
    }
    if (!st) {
        const int64_t shape[6] = {Q->shape[0], Q->shape[1], K->shape[1], Q->shape[3],
                                  V->shape[3], Q->shape[2]};
        memcpy(mine.shape, shape, sizeof shape);
        cp_vdesc_of(&mine.var, opts ? opts : &(const ta_sdpa_opts){0});
    }
    if (!gather(ctx, &mine, all)) {
        ta_free(all);
        return TA_EIO;
    }
    /* messages name rank 0's call, so that they are the same on every rank even when the
     * ranks disagree on the scheme or the direction */
    ctx->scheme = (ta_cp_scheme)all[0].scheme;
    ctx->fn = all[0].op == CP_FORWARD ? "ta_sdpa_context_parallel"
                                      : "ta_sdpa_context_parallel_backward";
    st = first_failure(ctx, all);
    for (int s = 1; !st && s < ctx->P; s++) {
        int64_t v0 = 0, vs = 0;
        bool extent = false;
        const char *what = disagreement(&all[0], &all[s], &extent, &v0, &vs);
        if (what && extent)
            st = cp_error(ctx, TA_ESHAPE, "the ranks disagree: rank %d has %s = %lld but rank 0 "
                          "has %lld", s, what, (long long)vs, (long long)v0);
        else if (what)
            st = cp_error(ctx, TA_EINVAL, "the ranks disagree: rank %d differs from rank 0 in "
                          "%s (every rank must make the same call)", s, what);
    }
    if (!st) {
        ctx->B = all[0].shape[0];
        ctx->H = all[0].shape[1];
        ctx->Hkv = all[0].shape[2];
        ctx->D = all[0].shape[3];
        ctx->Dv = all[0].shape[4];
        ctx->causal = all[0].causal;
        ctx->key_lengths = opts && all[0].has_klen ? opts->key_lengths : NULL;
        if (opts) cp_variants_set(ctx, opts);
        for (int s = 0; s < ctx->P; s++) ctx->len[s] = all[s].shape[5];
        if (!st) st = check_split(ctx);
    }
    ta_free(all);
    return st;
}

int cp_rank_chunks(const cp_ctx *ctx, int s, cp_chunk chunk[2])
{
    if (ctx->scheme != TA_CP_ZIGZAG) {
        chunk[0] = (cp_chunk){.start = ctx->off[s], .len = ctx->len[s], .local = 0};
        return 1;
    }
    int64_t start[2], len[2];
    ta_cp_shard(start, len, TA_CP_ZIGZAG, ctx->L, ctx->P, s);
    chunk[0] = (cp_chunk){.start = start[0], .len = len[0], .local = 0};
    chunk[1] = (cp_chunk){.start = start[1], .len = len[1], .local = len[0]};
    return 2;
}

const int64_t *cp_block_klen(cp_ctx *ctx, const cp_chunk *blk, int nblk, int64_t k0, int64_t n)
{
    if (!ctx->key_lengths) return NULL;
    /* a block's chunks lie in increasing global order, so the keys below a global length
     * are a prefix of the block (a chunk not filled leaves the later ones empty) and of
     * any rows k0 .. k0 + n - 1 of it */
    for (int64_t b = 0; b < ctx->B; b++) {
        int64_t count = 0;
        for (int j = 0; j < nblk; j++) {
            int64_t valid = ctx->key_lengths[b] - blk[j].start;
            valid = valid < 0 ? 0 : valid > blk[j].len ? blk[j].len : valid;
            int64_t lo = blk[j].local > k0 ? blk[j].local : k0;
            int64_t hi = blk[j].local + valid < k0 + n ? blk[j].local + valid : k0 + n;
            count += hi > lo ? hi - lo : 0;
        }
        ctx->block_klen[b] = count;
    }
    return ctx->block_klen;
}
