/* Ring and zigzag attention, forward and backward (Liu et al., "Ring Attention with
 * Blockwise Transformers", 2023; the zigzag layout of zhuzilin/ring-flash-attention).
 *
 * P steps; at step t rank r holds the K/V block of rank src = r - t (mod P). It posts the
 * non-blocking exchange of that block (to r + 1, the next one from r - 1) first, then
 * computes its query chunks against the block's chunks in pieces, letting MPI progress
 * between pieces, and waits only at the end of the step. Forward: each piece gives a
 * partial output and LSE, merged exactly into the rank's accumulator. Backward: each
 * piece gets the global O and LSE rows, so its dQ, dK, dV are exact parts of the sums; dQ
 * stays home, dK/dV accumulate in a buffer that follows the block one step behind (sent
 * after the step's compute, received and added at the end of the next) and reaches its
 * owner after P steps. */
#include "dist/cp_internal.h"

#include "ops/sdpa.h"

#include <math.h>
#include <string.h>

enum { TAG_KV = 1, TAG_GRAD = 2 };

/* K and V (or dK and dV) of a block of n rows in one buffer: [B, Hkv, n, D] then
 * [B, Hkv, n, Dv]. */
static int64_t kv_count(const cp_ctx *c, int64_t n) { return c->B * c->Hkv * n * (c->D + c->Dv); }
static ta_tensor kv_k(const cp_ctx *c, float *buf, int64_t n)
{
    return cp_view4(buf, c->B, c->Hkv, n, c->D);
}
static ta_tensor kv_v(const cp_ctx *c, float *buf, int64_t n)
{
    return cp_view4(buf + c->B * c->Hkv * n * c->D, c->B, c->Hkv, n, c->Dv);
}

static ta_tensor view3(float *data, int64_t s0, int64_t s1, int64_t s2)
{
    const int64_t shape[3] = {s0, s1, s2};
    ta_tensor t = {0};
    ta_tensor_from_buffer(&t, data, 3, shape, NULL);
    return t;
}

/* Packs this rank's K and V into buf (float32, the block layout). */
static ta_status pack_kv(const cp_ctx *c, float *buf, const ta_tensor *K, const ta_tensor *V)
{
    int64_t n = c->len[c->rank];
    ta_tensor k = kv_k(c, buf, n), v = kv_v(c, buf, n);
    ta_status st = ta_tensor_copy(&k, K);
    return st ? st : ta_tensor_copy(&v, V);
}

/* The exchange of one step: receive n_in floats from the left into in, send n_out from out
 * to the right. */
static bool exchange(cp_ctx *c, MPI_Request req[2], float *in, int64_t n_in, float *out,
                     int64_t n_out, int tag)
{
    const int left = (c->rank + c->P - 1) % c->P, right = (c->rank + 1) % c->P;
    double t = cp_now();
    bool ok = cp_mpi_ok(c, MPI_Irecv(in, (int)n_in, MPI_FLOAT, left, tag, c->comm, &req[0]),
                        "MPI_Irecv") &&
              cp_mpi_ok(c, MPI_Isend(out, (int)n_out, MPI_FLOAT, right, tag, c->comm, &req[1]),
                        "MPI_Isend");
    c->stats.bytes_sent += n_out * (int64_t)sizeof(float);
    c->stats.blocked_s += cp_now() - t;
    return ok;
}

static bool progress(cp_ctx *c, MPI_Request *req, int n)
{
    int flag = 0;
    double t = cp_now();
    int rc = MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
    c->stats.blocked_s += cp_now() - t;
    return cp_mpi_ok(c, rc, "MPI_Testall");
}

static bool wait_all(cp_ctx *c, MPI_Request *req, int n)
{
    double t = cp_now();
    int rc = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    c->stats.blocked_s += cp_now() - t;
    return cp_mpi_ok(c, rc, "MPI_Waitall");
}

/* After a failed MPI call: TA_EIO (the message is recorded); requests may still point into
 * the call's buffer, which stays allocated. */
static ta_status mpi_failed(void) { return TA_EIO; }

/* What a piece computes: rows a .. b-1 of call cl against the block in kv (nblk rows). */
typedef void (*piece_fn)(cp_ctx *c, const cp_call *cl, const cp_piece *pc, float *kv,
                         int64_t nblk, void *arg);

/* One step's compute on the block of rank src (in kv): its calls, each cut into pieces
 * while transfers are pending (more), the requests progressing between pieces. */
static bool run_step(cp_ctx *c, int src, float *kv, bool more, MPI_Request *req, int nreq,
                     piece_fn fn, void *arg)
{
    cp_chunk me[2], blk[2];
    const int nme = cp_rank_chunks(c, c->rank, me);
    cp_call call[CP_MAX_CALLS];
    const int nblk = cp_rank_chunks(c, src, blk);
    const int ncall = cp_plan_step(call, me, nme, blk, nblk, c->causal, c->positional);
    for (int i = 0; i < ncall; i++) {
        const int np = cp_pieces(&call[i], more);
        for (int p = 0; p < np; p++) {
            cp_piece pc = cp_piece_at(c, &call[i], p, np);
            pc.key_lengths = cp_block_klen(c, blk, nblk, pc.kb, pc.nkeys);
            if (pc.b > pc.a) fn(c, &call[i], &pc, kv, c->len[src], arg);
            if (more && !progress(c, req, nreq)) return false;
        }
    }
    return true;
}

/* The forward's inputs and accumulators: Q rows; o_acc / l_acc [B, H, Lr, Dv], [B, H, Lr];
 * one piece's partial output and LSE. */
typedef struct fwd_acc {
    const ta_tensor *Q;
    float *o_acc, *l_acc, *o_part, *l_part;
} fwd_acc;

/* One forward piece, merged into the accumulators. */
static void forward_piece(cp_ctx *c, const cp_call *cl, const cp_piece *pc, float *kv,
                          int64_t nblk, void *arg)
{
    if (c->run_status) return;
    const fwd_acc *f = arg;
    const ta_tensor *Q = f->Q;
    float *o_part = f->o_part, *l_part = f->l_part;
    const int64_t n = pc->b - pc->a, q0 = cl->q0 + pc->a;
    double t = cp_now();
    ta_tensor kb = kv_k(c, kv, nblk), vb = kv_v(c, kv, nblk);
    ta_tensor q = cp_rows(Q, q0, n), k = cp_rows(&kb, pc->kb, pc->nkeys);
    ta_tensor v = cp_rows(&vb, pc->kb, pc->nkeys);
    ta_tensor o = cp_view4(o_part, c->B, c->H, n, c->Dv), l = view3(l_part, c->B, c->H, n);
    ta_sdpa_opts opts = c->block_opts;
    opts.causal = pc->causal;
    opts.key_lengths = pc->key_lengths;
    opts.lse = &l;
    ta_status st = ta_sdpa_at(&o, &q, &k, &v, &opts, pc->delta);
    cp_note_failure(c, st);
    if (!st) cp_merge(f->o_acc, f->l_acc, o_part, l_part, c->B * c->H, c->len[c->rank], q0, n, c->Dv);
    c->stats.compute_s += cp_now() - t;
}

ta_status cp_ring_forward(cp_ctx *c, ta_tensor *O, ta_tensor *lse, const ta_tensor *Q,
                          const ta_tensor *K, const ta_tensor *V)
{
    const int P = c->P, r = c->rank;
    const int64_t Lr = c->len[r], BH = c->B * c->H, nkv = kv_count(c, c->max_len);
    const int64_t no = BH * Lr * c->Dv;
    float *p;
    ta_status st = cp_buffer(c, 2 * nkv + 2 * (no + BH * Lr), &p);
    if ((st = cp_agree_status(c, st))) return st;
    float *kv[2] = {p, p + nkv};
    float *o_acc = kv[1] + nkv, *o_part = o_acc + no, *l_acc = o_part + no, *l_part = l_acc + BH * Lr;
    double t0 = cp_now();
    cp_note_failure(c, pack_kv(c, kv[0], K, V));
    memset(o_acc, 0, sizeof(float) * (size_t)no);
    for (int64_t i = 0; i < BH * Lr; i++) l_acc[i] = -INFINITY;
    c->stats.compute_s += cp_now() - t0;
    fwd_acc acc = {.Q = Q, .o_acc = o_acc, .l_acc = l_acc, .o_part = o_part, .l_part = l_part};
    for (int t = 0, cur = 0; t < P; t++, cur ^= 1) {
        const int src = (r - t + P) % P, next = (src - 1 + P) % P;
        const bool more = t < P - 1;
        MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        if (more && !exchange(c, req, kv[cur ^ 1], kv_count(c, c->len[next]), kv[cur],
                              kv_count(c, c->len[src]), TAG_KV))
            return mpi_failed();
        if (!run_step(c, src, kv[cur], more, req, 2, forward_piece, &acc) ||
            (more && !wait_all(c, req, 2)))
            return mpi_failed();
    }
    c->stats.steps = P;
    st = cp_agree_run(c);
    if (!st) {
        cp_sinks_merge(c, o_acc, l_acc, Lr);
        ta_tensor o = cp_view4(o_acc, c->B, c->H, Lr, c->Dv);
        st = ta_tensor_copy(O, &o);
        if (!st && lse) {
            ta_tensor l = view3(l_acc, c->B, c->H, Lr);
            st = ta_tensor_copy(lse, &l);
        }
    }
    return st;
}

/* The backward's buffers, carved from one allocation. */
typedef struct bwd_bufs {
    float *kv[2];   /* K/V blocks: the one in hand, the next */
    float *g_part;  /* dK/dV of the block in hand: this step's parts, then the sum so far */
    float *g_send;  /* the sum sent to the right at the previous step (in flight) */
    float *g_in;    /* the sum received from the left */
    float *dq_acc;  /* [B, H, Lr, D] */
    float *dq_t, *dk_t, *dv_t; /* one piece's gradients */
} bwd_bufs;

static ta_status bwd_alloc(cp_ctx *c, bwd_bufs *b)
{
    const int64_t nkv = kv_count(c, c->max_len), nq = c->B * c->H * c->len[c->rank] * c->D;
    const int64_t nk = c->B * c->Hkv * c->max_len * c->D, nv = c->B * c->Hkv * c->max_len * c->Dv;
    float *p;
    ta_status st = cp_buffer(c, 5 * nkv + 2 * nq + nk + nv, &p);
    if (st) return st;
    b->kv[0] = p;
    b->kv[1] = p + nkv;
    b->g_part = p + 2 * nkv;
    b->g_send = p + 3 * nkv;
    b->g_in = p + 4 * nkv;
    b->dq_acc = p + 5 * nkv;
    b->dq_t = b->dq_acc + nq;
    b->dk_t = b->dq_t + nq;
    b->dv_t = b->dk_t + nk;
    return TA_OK;
}

/* The backward's per-rank inputs: rows of Q, dO, O, LSE (global O and LSE). */
typedef struct bwd_in {
    const ta_tensor *dO, *Q, *O, *lse;
} bwd_in;

/* The backward's inputs and buffers. */
typedef struct bwd_state {
    const bwd_in *in;
    bwd_bufs *b;
} bwd_state;

/* One backward piece: dQ into dq_acc, dK/dV into g_part (the block's layout). */
static void backward_piece(cp_ctx *c, const cp_call *cl, const cp_piece *pc, float *kv,
                           int64_t nblk, void *arg)
{
    if (c->run_status) return;
    const bwd_in *in = ((bwd_state *)arg)->in;
    bwd_bufs *b = ((bwd_state *)arg)->b;
    const int64_t n = pc->b - pc->a, q0 = cl->q0 + pc->a, nk = pc->nkeys;
    double t = cp_now();
    ta_tensor kb = kv_k(c, kv, nblk), vb = kv_v(c, kv, nblk);
    ta_tensor k = cp_rows(&kb, pc->kb, nk), v = cp_rows(&vb, pc->kb, nk);
    ta_tensor q = cp_rows(in->Q, q0, n), dout = cp_rows(in->dO, q0, n);
    ta_tensor o = cp_rows(in->O, q0, n), l = cp_rows(in->lse, q0, n);
    ta_tensor dq = cp_view4(b->dq_t, c->B, c->H, n, c->D);
    ta_tensor dk = cp_view4(b->dk_t, c->B, c->Hkv, nk, c->D);
    ta_tensor dv = cp_view4(b->dv_t, c->B, c->Hkv, nk, c->Dv);
    ta_sdpa_opts opts = c->block_opts;
    opts.causal = pc->causal;
    opts.key_lengths = pc->key_lengths;
    ta_status st = ta_sdpa_backward_at(&dq, &dk, &dv, &dout, &q, &k, &v, &o, &l, &opts, pc->delta);
    cp_note_failure(c, st);
    if (!st) {
        const int64_t X = c->B * c->Hkv;
        cp_add_rows(b->dq_acc, b->dq_t, c->B * c->H, c->len[c->rank], q0, n, c->D);
        cp_add_rows(b->g_part, b->dk_t, X, nblk, pc->kb, nk, c->D);
        cp_add_rows(b->g_part + X * nblk * c->D, b->dv_t, X, nblk, pc->kb, nk, c->Dv);
    }
    c->stats.compute_s += cp_now() - t;
}

ta_status cp_ring_backward(cp_ctx *c, ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV,
                           const ta_tensor *dO, const ta_tensor *Q, const ta_tensor *K,
                           const ta_tensor *V, const ta_tensor *O, const ta_tensor *lse)
{
    const int P = c->P, r = c->rank, left = (r + P - 1) % P, right = (r + 1) % P;
    bwd_bufs b = {0};
    ta_status st = bwd_alloc(c, &b);
    if ((st = cp_agree_status(c, st))) return st;
    const bwd_in in = {.dO = dO, .Q = Q, .O = O, .lse = lse};
    bwd_state state = {.in = &in, .b = &b};
    double t0 = cp_now();
    cp_note_failure(c, pack_kv(c, b.kv[0], K, V));
    memset(b.dq_acc, 0, sizeof(float) * (size_t)(c->B * c->H * c->len[r] * c->D));
    c->stats.compute_s += cp_now() - t0;
    /* req: 0, 1 the K/V exchange; 2 the sum coming from the left; 3 the sum going right */
    MPI_Request req[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    for (int t = 0, cur = 0; t < P; t++, cur ^= 1) {
        const int src = (r - t + P) % P, next = (src - 1 + P) % P;
        const int64_t n = kv_count(c, c->len[src]);
        const bool more = t < P - 1;
        if (more && !exchange(c, req, b.kv[cur ^ 1], kv_count(c, c->len[next]), b.kv[cur], n,
                              TAG_KV))
            return mpi_failed();
        if (t > 0 && !cp_mpi_ok(c, MPI_Irecv(b.g_in, (int)n, MPI_FLOAT, left, TAG_GRAD, c->comm,
                                             &req[2]), "MPI_Irecv"))
            return mpi_failed();
        memset(b.g_part, 0, sizeof(float) * (size_t)n);
        if (!run_step(c, src, b.kv[cur], more, req, 4, backward_piece, &state) ||
            (t > 0 && !wait_all(c, &req[2], 1)))
            return mpi_failed();
        if (t > 0) cp_add_rows(b.g_part, b.g_in, 1, 1, 0, 1, n);
        if (P > 1) { /* the sum so far goes on to the right, one step behind its block */
            if (!wait_all(c, &req[3], 1)) return mpi_failed();
            float *sent = b.g_part;
            b.g_part = b.g_send;
            b.g_send = sent;
            double ts = cp_now();
            bool ok = cp_mpi_ok(c, MPI_Isend(sent, (int)n, MPI_FLOAT, right, TAG_GRAD, c->comm,
                                             &req[3]), "MPI_Isend");
            c->stats.bytes_sent += n * (int64_t)sizeof(float);
            c->stats.blocked_s += cp_now() - ts;
            if (!ok) return mpi_failed();
        }
        if (more && !wait_all(c, req, 2)) return mpi_failed();
    }
    /* after P steps the sum of this rank's own block arrives from the left */
    float *home = b.g_part; /* P == 1: the only step's sum */
    if (P > 1) {
        home = b.g_in;
        if (!cp_mpi_ok(c, MPI_Irecv(home, (int)kv_count(c, c->len[r]), MPI_FLOAT, left, TAG_GRAD,
                                    c->comm, &req[2]), "MPI_Irecv") ||
            !wait_all(c, &req[2], 2))
            return mpi_failed();
    }
    c->stats.steps = P;
    st = cp_agree_run(c);
    if (!st) {
        const int64_t Lr = c->len[r];
        ta_tensor dq = cp_view4(b.dq_acc, c->B, c->H, Lr, c->D);
        ta_tensor dk = kv_k(c, home, Lr), dv = kv_v(c, home, Lr);
        st = ta_tensor_copy(dQ, &dq);
        if (!st) st = ta_tensor_copy(dK, &dk);
        if (!st) st = ta_tensor_copy(dV, &dv);
    }
    return st;
}
