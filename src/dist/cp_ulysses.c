/* DeepSpeed-Ulysses (Jacobs et al., 2023): an all-to-all turns the ranks' sequence shards
 * [B, X, Lr, W] into head shards [B, X/P, L, W] (rank r: heads r*X/P .. (r+1)*X/P - 1, every
 * row), each rank runs ta_sdpa (or ta_sdpa_backward) on whole sequences of its heads, and
 * a second all-to-all turns the results back. With GQA, rank r's query heads use exactly
 * its key/value heads (H/P = (H/Hkv) * Hkv/P), so K and V move Hkv heads, not H. */
#include "dist/cp_internal.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* The all-to-all plan of one exchange: counts and displacements in floats. */
typedef struct a2a {
    int *scount, *sdispl, *rcount, *rdispl;
} a2a;

static ta_status a2a_alloc(a2a *a, int P)
{
    int *p = ta_alloc_zeroed(sizeof(int) * (size_t)P * 4);
    if (!p) return ta_set_error(TA_ENOMEM, "out of memory for %d ranks' counts", P);
    *a = (a2a){.scount = p, .sdispl = p + P, .rcount = p + 2 * P, .rdispl = p + 3 * P};
    return TA_OK;
}

/* Counts of rank r sending blocks of `mine` rows to every s and receiving len[s] rows from
 * each (to heads), or the reverse (to sequence); each row is B * Xs * W floats. */
static void a2a_plan(a2a *a, const cp_ctx *c, int64_t per_row, bool to_heads)
{
    int sd = 0, rd = 0;
    for (int s = 0; s < c->P; s++) {
        int64_t mine = c->len[c->rank], theirs = c->len[s];
        a->scount[s] = (int)(per_row * (to_heads ? mine : theirs));
        a->rcount[s] = (int)(per_row * (to_heads ? theirs : mine));
        a->sdispl[s] = sd;
        a->rdispl[s] = rd;
        sd += a->scount[s];
        rd += a->rcount[s];
    }
}

static bool alltoall(cp_ctx *c, const a2a *a, const float *sbuf, float *rbuf)
{
    double t = cp_now();
    int rc = MPI_Alltoallv(sbuf, a->scount, a->sdispl, MPI_FLOAT, rbuf, a->rcount, a->rdispl,
                           MPI_FLOAT, c->comm);
    c->stats.blocked_s += cp_now() - t;
    for (int s = 0; s < c->P; s++)
        if (s != c->rank) c->stats.bytes_sent += (int64_t)a->scount[s] * (int64_t)sizeof(float);
    c->stats.steps++;
    return cp_mpi_ok(c, rc, "MPI_Alltoallv");
}

/* heads h0 .. h0 + n - 1 (dim 1) of a 4-d tensor */
static ta_tensor heads(const ta_tensor *t, int64_t h0, int64_t n)
{
    ta_tensor v = {0};
    ta_tensor_slice(&v, t, 1, h0, h0 + n, 1);
    return v;
}

/* The LSE [B, H, L] as a [B, H, L, 1] view. */
static ta_tensor as4(const ta_tensor *t)
{
    ta_tensor v = *t;
    v.ndim = 4;
    v.shape[3] = 1;
    v.stride[3] = 1;
    v.owned = NULL;
    return v;
}

typedef struct uly_bufs {
    a2a a;
    float *sbuf, *rbuf; /* staging for one exchange */
} uly_bufs;

/* src [B, X, Lr, W] (this rank's rows; any strides and dtype) -> dst [B, X/P, L, W]
 * (contiguous float32: this rank's heads, every row). */
static bool to_heads(cp_ctx *c, uly_bufs *u, float *dst, const ta_tensor *src, int64_t X,
                     int64_t W)
{
    const int P = c->P;
    const int64_t Xs = X / P, Lr = c->len[c->rank];
    double t = cp_now();
    a2a_plan(&u->a, c, c->B * Xs * W, true);
    for (int s = 0; s < P && !c->run_status; s++) {
        ta_tensor from = heads(src, s * Xs, Xs);
        ta_tensor to = cp_view4(u->sbuf + u->a.sdispl[s], c->B, Xs, Lr, W);
        cp_note_failure(c, ta_tensor_copy(&to, &from));
    }
    c->stats.compute_s += cp_now() - t;
    if (!alltoall(c, &u->a, u->sbuf, u->rbuf)) return false;
    t = cp_now();
    ta_tensor all = cp_view4(dst, c->B, Xs, c->L, W);
    for (int s = 0; s < P && !c->run_status; s++) {
        ta_tensor from = cp_view4(u->rbuf + u->a.rdispl[s], c->B, Xs, c->len[s], W);
        ta_tensor to = cp_rows(&all, c->off[s], c->len[s]);
        cp_note_failure(c, ta_tensor_copy(&to, &from));
    }
    c->stats.compute_s += cp_now() - t;
    return true;
}

/* src [B, X/P, L, W] (this rank's heads) -> rbuf: from each rank s, its heads of this
 * rank's rows, [B, X/P, Lr, W] at s * B * X/P * Lr * W. */
static bool to_seq(cp_ctx *c, uly_bufs *u, float *rbuf, const float *src, int64_t X, int64_t W)
{
    const int64_t Xs = X / c->P;
    double t = cp_now();
    a2a_plan(&u->a, c, c->B * Xs * W, false);
    ta_tensor all = cp_view4((float *)src, c->B, Xs, c->L, W);
    for (int s = 0; s < c->P && !c->run_status; s++) {
        ta_tensor from = cp_rows(&all, c->off[s], c->len[s]);
        ta_tensor to = cp_view4(u->sbuf + u->a.sdispl[s], c->B, Xs, c->len[s], W);
        cp_note_failure(c, ta_tensor_copy(&to, &from));
    }
    c->stats.compute_s += cp_now() - t;
    return alltoall(c, &u->a, u->sbuf, rbuf);
}

/* The rows to_seq brought (rbuf) into dst [B, X, Lr, W], the caller's output. */
static ta_status unpack_seq(const cp_ctx *c, ta_tensor *dst, const float *rbuf, int64_t X,
                            int64_t W)
{
    const int64_t Xs = X / c->P, Lr = c->len[c->rank];
    ta_status st = TA_OK;
    for (int s = 0; s < c->P && !st; s++) {
        ta_tensor from = cp_view4((float *)rbuf + s * c->B * Xs * Lr * W, c->B, Xs, Lr, W);
        ta_tensor to = heads(dst, s * Xs, Xs);
        st = ta_tensor_copy(&to, &from);
    }
    return st;
}

/* One allocation: nbuf head-shard buffers of the given sizes, two staging buffers of
 * `stage` floats, and the count arrays. */
static ta_status uly_alloc(cp_ctx *c, uly_bufs *u, float **part, const int64_t *size, int nbuf,
                           int64_t stage)
{
    int64_t total = 2 * stage;
    for (int i = 0; i < nbuf; i++) total += size[i];
    float *p = NULL;
    ta_status st = a2a_alloc(&u->a, c->P);
    if (!st) st = cp_buffer(c, total, &p);
    if ((st = cp_agree_status(c, st))) {
        ta_free(u->a.scount);
        return st;
    }
    u->sbuf = p;
    u->rbuf = p + stage;
    p += 2 * stage;
    for (int i = 0; i < nbuf; i++) {
        part[i] = p;
        p += size[i];
    }
    return TA_OK;
}

static ta_status uly_done(uly_bufs *u, ta_status st)
{
    ta_free(u->a.scount);
    return st;
}

/* Staging for one exchange of a [B, X, ., W] tensor: the larger of its sequence shard and
 * head shard (with uneven shards, P * max_len rows may exceed L). */
static int64_t stage_size(const cp_ctx *c, int64_t X, int64_t W)
{
    int64_t rows = c->P * c->max_len > c->L ? c->P * c->max_len : c->L;
    return c->B * (X / c->P) * rows * W;
}
/* The options of this rank's call: its heads' ALiBi slopes (into slopes) and, forward,
 * its heads' sinks (into sinks; the backward's dsinks are summed by cp_sinks_grad). */
static ta_sdpa_opts head_opts(const cp_ctx *c, ta_tensor *slopes, ta_tensor *sinks)
{
    ta_sdpa_opts o = c->block_opts;
    const int64_t Hs = c->H / c->P, h0 = c->rank * Hs;
    if (o.alibi_slopes) {
        ta_tensor_slice(slopes, o.alibi_slopes, o.alibi_slopes->ndim - 1, h0, h0 + Hs, 1);
        o.alibi_slopes = slopes;
    }
    if (c->sinks && c->op == CP_FORWARD) {
        ta_tensor_slice(sinks, c->sinks, 0, h0, h0 + Hs, 1);
        o.sinks = sinks;
    }
    o.causal = c->causal ? TA_CAUSAL_TOP_LEFT : TA_CAUSAL_NONE;
    o.key_lengths = c->key_lengths; /* whole sequences: the global lengths */
    return o;
}

ta_status cp_ulysses_forward(cp_ctx *c, ta_tensor *O, ta_tensor *lse, const ta_tensor *Q,
                             const ta_tensor *K, const ta_tensor *V)
{
    const int64_t B = c->B, Hs = c->H / c->P, Ks = c->Hkv / c->P, L = c->L;
    const int64_t Lr = c->len[c->rank], Wmax = c->D > c->Dv ? c->D : c->Dv;
    const int64_t size[7] = {B * Hs * L * c->D,  B * Ks * L * c->D,    B * Ks * L * c->Dv,
                             B * Hs * L * c->Dv, B * Hs * L,           B * c->H * Lr * c->Dv,
                             B * c->H * Lr};
    float *p[7]; /* Qh, Kh, Vh, Oh, LSEh; O and LSE rows back home */
    uly_bufs u = {0};
    ta_status st = uly_alloc(c, &u, p, size, 7, stage_size(c, c->H, Wmax));
    if (st) return st;
    if (!to_heads(c, &u, p[0], Q, c->H, c->D) || !to_heads(c, &u, p[1], K, c->Hkv, c->D) ||
        !to_heads(c, &u, p[2], V, c->Hkv, c->Dv))
        return uly_done(&u, TA_EIO);
    double t = cp_now();
    if (!c->run_status) {
        ta_tensor q = cp_view4(p[0], B, Hs, L, c->D), k = cp_view4(p[1], B, Ks, L, c->D);
        ta_tensor v = cp_view4(p[2], B, Ks, L, c->Dv), o = cp_view4(p[3], B, Hs, L, c->Dv);
        ta_tensor l = {0};
        ta_tensor_from_buffer(&l, p[4], 3, (const int64_t[]){B, Hs, L}, NULL);
        ta_tensor slopes, sinks;
        ta_sdpa_opts opts = head_opts(c, &slopes, &sinks);
        opts.lse = &l;
        cp_note_failure(c, ta_sdpa(&o, &q, &k, &v, &opts));
    }
    c->stats.compute_s += cp_now() - t;
    if ((st = cp_agree_run(c))) return uly_done(&u, st);
    if (!to_seq(c, &u, p[5], p[3], c->H, c->Dv) || !to_seq(c, &u, p[6], p[4], c->H, 1))
        return uly_done(&u, TA_EIO);
    st = unpack_seq(c, O, p[5], c->H, c->Dv);
    if (!st && lse) {
        ta_tensor l4 = as4(lse);
        st = unpack_seq(c, &l4, p[6], c->H, 1);
    }
    return uly_done(&u, st);
}

ta_status cp_ulysses_backward(cp_ctx *c, ta_tensor *dQ, ta_tensor *dK, ta_tensor *dV,
                              const ta_tensor *dO, const ta_tensor *Q, const ta_tensor *K,
                              const ta_tensor *V, const ta_tensor *O, const ta_tensor *lse)
{
    const int64_t B = c->B, Hs = c->H / c->P, Ks = c->Hkv / c->P, L = c->L, D = c->D, Dv = c->Dv;
    const int64_t Lr = c->len[c->rank], Wmax = D > Dv ? D : Dv;
    /* Qh, Kh, Vh, Oh, dOh, LSEh, dQh, dKh, dVh; dQ, dK, dV rows back home */
    const int64_t size[12] = {B * Hs * L * D,  B * Ks * L * D,  B * Ks * L * Dv,
                              B * Hs * L * Dv, B * Hs * L * Dv, B * Hs * L,
                              B * Hs * L * D,  B * Ks * L * D,  B * Ks * L * Dv,
                              B * c->H * Lr * D, B * c->Hkv * Lr * D, B * c->Hkv * Lr * Dv};
    float *p[12];
    uly_bufs u = {0};
    ta_status st = uly_alloc(c, &u, p, size, 12, stage_size(c, c->H, Wmax));
    if (st) return st;
    ta_tensor l4 = as4(lse);
    if (!to_heads(c, &u, p[0], Q, c->H, D) || !to_heads(c, &u, p[1], K, c->Hkv, D) ||
        !to_heads(c, &u, p[2], V, c->Hkv, Dv) || !to_heads(c, &u, p[3], O, c->H, Dv) ||
        !to_heads(c, &u, p[4], dO, c->H, Dv) || !to_heads(c, &u, p[5], &l4, c->H, 1))
        return uly_done(&u, TA_EIO);
    double t = cp_now();
    if (!c->run_status) {
        ta_tensor q = cp_view4(p[0], B, Hs, L, D), k = cp_view4(p[1], B, Ks, L, D);
        ta_tensor v = cp_view4(p[2], B, Ks, L, Dv), o = cp_view4(p[3], B, Hs, L, Dv);
        ta_tensor dout = cp_view4(p[4], B, Hs, L, Dv), l = {0};
        ta_tensor_from_buffer(&l, p[5], 3, (const int64_t[]){B, Hs, L}, NULL);
        ta_tensor dq = cp_view4(p[6], B, Hs, L, D), dk = cp_view4(p[7], B, Ks, L, D);
        ta_tensor dv = cp_view4(p[8], B, Ks, L, Dv);
        ta_tensor slopes, sinks;
        ta_sdpa_opts opts = head_opts(c, &slopes, &sinks);
        cp_note_failure(c, ta_sdpa_backward(&dq, &dk, &dv, &dout, &q, &k, &v, &o, &l, &opts));
    }
    c->stats.compute_s += cp_now() - t;
    if ((st = cp_agree_run(c))) return uly_done(&u, st);
    if (!to_seq(c, &u, p[9], p[6], c->H, D) || !to_seq(c, &u, p[10], p[7], c->Hkv, D) ||
        !to_seq(c, &u, p[11], p[8], c->Hkv, Dv))
        return uly_done(&u, TA_EIO);
    st = unpack_seq(c, dQ, p[9], c->H, D);
    if (!st) st = unpack_seq(c, dK, p[10], c->Hkv, D);
    if (!st) st = unpack_seq(c, dV, p[11], c->Hkv, Dv);
    return uly_done(&u, st);
}
