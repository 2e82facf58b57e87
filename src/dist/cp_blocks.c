/* The block pairs of a ring step, their pieces, and the exact merge of partial results.
 *
 * Causal attention over chunks of one sequence (top-left, Lq == Lk: query i sees keys
 * j <= i): a key chunk wholly before a query chunk is seen whole (no mask), the chunk
 * itself is the top-left causal square, and a key chunk after it is not seen at all. The
 * chunks of ta_cp_shard partition the sequence, so no other overlap occurs. */
#include "dist/cp_internal.h"

#include <math.h>
#include <string.h>

enum { SKIP, FULL, DIAG };

static int pair_kind(const cp_chunk *q, const cp_chunk *k, bool causal)
{
    if (q->len == 0 || k->len == 0) return SKIP;
    if (!causal) return FULL;
    if (k->start == q->start) return DIAG;
    return k->start + k->len <= q->start ? FULL : SKIP;
}

/* The rows from chunk lo to chunk hi (adjacent in a rank's tensors) as a start and count. */
static void span(const cp_chunk *c, int lo, int hi, int64_t *r0, int64_t *n)
{
    *r0 = c[lo].local;
    *n = c[hi].local + c[hi].len - c[lo].local;
}

/* The call of query chunks qlo .. qhi against block chunks klo .. khi. */
static cp_call call_of(const cp_chunk *me, int qlo, int qhi, const cp_chunk *blk, int klo,
                       int khi, bool diag)
{
    cp_call c = {.qg = me[qlo].start, .kg = blk[klo].start, .diag = diag};
    span(me, qlo, qhi, &c.q0, &c.nq);
    span(blk, klo, khi, &c.k0, &c.nk);
    return c;
}

int cp_plan_step(cp_call call[CP_MAX_CALLS], const cp_chunk *me, int nme, const cp_chunk *blk,
                 int nblk, bool causal, bool split)
{
    int kind[2][2], qlo = 2, qhi = -1, klo = 2, khi = -1, n = 0;
    for (int i = 0; i < nme; i++)
        for (int j = 0; j < nblk; j++) {
            kind[i][j] = pair_kind(&me[i], &blk[j], causal);
            if (kind[i][j] != FULL) continue;
            qlo = i < qlo ? i : qlo;
            qhi = i > qhi ? i : qhi;
            klo = j < klo ? j : klo;
            khi = j > khi ? j : khi;
        }
    /* the whole pairs: one call when they fill the rectangle they span (a rank's chunks
     * are adjacent in its tensors), else one call per query chunk */
    bool rect = qhi >= 0 && !split;
    for (int i = qlo; rect && i <= qhi; i++)
        for (int j = klo; j <= khi; j++) rect = rect && kind[i][j] == FULL;
    if (rect) call[n++] = call_of(me, qlo, qhi, blk, klo, khi, false);
    for (int i = 0; qhi >= 0 && !rect && i < nme; i++) {
        int lo = 2, hi = -1;
        for (int j = 0; j < nblk; j++)
            if (kind[i][j] == FULL) {
                if (split) call[n++] = call_of(me, i, i, blk, j, j, false);
                lo = j < lo ? j : lo;
                hi = j;
            }
        if (hi >= 0 && !split) call[n++] = call_of(me, i, i, blk, lo, hi, false);
    }
    for (int i = 0; i < nme; i++)
        for (int j = 0; j < nblk; j++)
            if (kind[i][j] == DIAG) call[n++] = call_of(me, i, i, blk, j, j, true);
    return n;
}

/* Pieces of at least 256 rows, at most 8 per call: enough MPI_Test calls for a transfer
 * to start and move on (on a network; shared memory without a single-copy mechanism
 * moves a fragment per call), few enough that each piece keeps the kernels busy. */
int cp_pieces(const cp_call *c, bool want_many)
{
    int64_t n = want_many ? c->nq / 256 : 1;
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* The window's cut of a piece (rel = j - (i + delta) within [-left, right]): first the
 * rows that see some key of the piece, then the keys those rows see. The rows i of a
 * piece see keys i + delta - left .. i + delta + right, a range moving with i, so both
 * cuts are contiguous. A diagonal piece keeps its rows (each sees its own key) and its
 * last key (no row sees past the diagonal), so its bottom-right alignment still holds:
 * nkeys - (b - a) = delta after the cut. */
static void window_cut(const cp_ctx *ctx, cp_piece *pc)
{
    const int64_t left = ctx->win_left, right = ctx->win_right;
    int64_t ra = 0, rb = pc->b - pc->a;
    if (right >= 0 && -pc->delta - right > ra) ra = -pc->delta - right;
    if (left >= 0 && pc->nkeys - pc->delta + left < rb) rb = pc->nkeys - pc->delta + left;
    if (ra >= rb) { /* no row sees a key of this block */
        pc->b = pc->a;
        pc->nkeys = 0;
        return;
    }
    pc->b = pc->a + rb;
    pc->a += ra;
    pc->delta += ra;
    int64_t lo = 0, hi = pc->nkeys;
    if (left >= 0 && pc->delta - left > lo) lo = pc->delta - left;
    const int64_t last_hi = pc->b - pc->a + pc->delta + right; /* of the last row */
    if (right >= 0 && last_hi < hi) hi = last_hi;
    pc->kb += lo;
    pc->nkeys = hi - lo;
    pc->delta -= lo;
}

cp_piece cp_piece_at(const cp_ctx *ctx, const cp_call *c, int p, int n)
{
    cp_piece pc;
    pc.a = c->nq * p / n;
    pc.b = c->nq * (p + 1) / n;
    /* a piece of the diagonal square: rows a .. b-1 see keys 0 .. b-1 up to the diagonal,
     * which is bottom-right alignment of a (b - a) x b block */
    pc.kb = c->k0;
    pc.nkeys = c->diag ? pc.b : c->nk;
    pc.delta = c->qg + pc.a - c->kg;
    pc.causal = c->diag ? TA_CAUSAL_BOTTOM_RIGHT : TA_CAUSAL_NONE;
    pc.key_lengths = NULL;
    if (ctx->win_left >= 0 || ctx->win_right >= 0) window_cut(ctx, &pc);
    return pc;
}

/* One row of the merge: (o, l) and (op, lp) are softmax-normalised outputs of disjoint key
 * sets with their log-sum-exps; the union's output weighs each by exp(l_part - l_union). */
static void merge_row(float *o, float *l, const float *op, float lp, int64_t Dv)
{
    const float l0 = *l;
    if (isnan(l0) || isnan(lp)) { /* NaN in a row stays visible, as in ta_sdpa */
        *l = NAN;
        for (int64_t d = 0; d < Dv; d++) o[d] = NAN;
        return;
    }
    if (lp == -INFINITY) return; /* the part saw no key: its output is 0 */
    if (l0 == -INFINITY) {
        memcpy(o, op, sizeof(float) * (size_t)Dv);
        *l = lp;
        return;
    }
    const double m = l0 > lp ? l0 : lp;
    const double w0 = exp((double)l0 - m), w1 = exp((double)lp - m), s = w0 + w1;
    const float a = (float)(w0 / s), b = (float)(w1 / s);
    for (int64_t d = 0; d < Dv; d++) o[d] = a * o[d] + b * op[d];
    *l = (float)(m + log(s));
}

void cp_merge(float *o_acc, float *lse_acc, const float *o_part, const float *lse_part,
              int64_t BH, int64_t Lr, int64_t q0, int64_t n, int64_t Dv)
{
    const int64_t rows = BH * n;
#pragma omp parallel for num_threads(ta_get_num_threads()) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t acc = (r / n) * Lr + q0 + r % n;
        merge_row(o_acc + acc * Dv, lse_acc + acc, o_part + r * Dv, lse_part[r], Dv);
    }
}

void cp_add_rows(float *acc, const float *part, int64_t X, int64_t Lacc, int64_t r0, int64_t n,
                 int64_t W)
{
    const int64_t rows = X * n;
#pragma omp parallel for num_threads(ta_get_num_threads()) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *a = acc + ((r / n) * Lacc + r0 + r % n) * W;
        const float *p = part + r * W;
        for (int64_t d = 0; d < W; d++) a[d] += p[d];
    }
}
