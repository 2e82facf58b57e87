/* Variable-length batches (FlashAttention's varlen) behind ta_sdpa, ta_sdpa_backward and
 * their workspace queries (tensorattn.h, "Variable-length batches"; sdpa.h).
 *
 * Packed Q [Tq, H, D], K [Tk, Hkv, D], V [Tk, Hkv, Dv] and offsets cu_seqlens_q/k:
 * sequence b is Q rows cu_q[b] .. cu_q[b+1] against K and V rows cu_k[b] .. cu_k[b+1].
 * A call runs as one dense problem per sequence on strided views of the packed tensors:
 * a packed [T, Hx, X] tensor is seen as [1, Hx, T, X] (strides 0, s1, s0, s2; LSE [H, T]
 * as [1, H, T]) and sequence b is rows cu[b] .. cu[b+1] of that token dim, so each
 * sequence is an ordinary ta_sdpa_problem (B = 1, its own Lq_b and Lk_b: its own causal
 * alignment) run by the implementation the call resolved. No padding is visited, and as
 * every sequence's run is deterministic, so is the call.
 *   1. Validate the offsets and the options that do not combine with them, the packed
 *      ranks and shapes (extents through the dense check on the views); then the whole
 *      (B = 1, Lq = Tq, Lk = Tk) through ta_sdpa_prepare(_backward), which checks the
 *      rest (options, overlaps).
 *   2. Scratch, one block before any output is written: a caller's workspace must hold
 *      what the workspace query says (fused: the whole's ta_sdpa_scratch_bound, from the
 *      shapes only, covering every sequence, and for several sequences what running
 *      them together takes; reference: the largest sequence's need); the
 *      library's block holds the largest sequence's need, or the together's.
 *   3. Run the sequences in that block: a fused forward of several sequences in one
 *      parallel region (ta_sdpa_forward_fused_seqs: each sequence's plan and work list,
 *      their chunks claimed from one counter; those whose plan cannot join, a key
 *      split or a mask table, alone after it), a fused backward likewise
 *      (ta_sdpa_backward_fused_seqs: the groups of the sequences claimed from one
 *      counter, those whose dQ buffer is too large alone after it); otherwise (the reference
 *      path, or tensors that need float32 stand-ins) in order, each one run of an
 *      implementation with its own OpenMP region, whose fixed cost dominates with many
 *      very short sequences.
 * Attention variants: each sequence has its own delta (its Lq_b, Lk_b); ALiBi slopes
 * [num_seqs, H] give sequence b its row b as [H]; the sinks' gradient sums over every
 * sequence, so the sequences run without dsinks and the whole (its O, dO and LSE are the
 * packed tensors) computes it once at the end, in a fixed order. */
#include "ops/sdpa.h"

#include "core/core.h"
#include "core/tensor_internal.h"

#include <stdio.h>

/* The tensors of a call, as [1, Hx, T, X] (LSE [1, H, T]) views; those before T_K have
 * the query rows (cu_seqlens_q), the others the keys (cu_seqlens_k). */
enum { T_Q, T_O, T_LSE, T_DO, T_DQ, T_K, T_V, T_DK, T_DV, T_COUNT };

typedef struct seq_views {
    ta_tensor t[T_COUNT];
} seq_views;

typedef struct seqs_call {
    const char *fn;
    bool backward;
    const int32_t *cq, *ck;
    int64_t n;          /* sequences */
    ta_sdpa_opts opts;  /* the caller's without the offsets: what each sequence runs with
                           (dsinks: the whole only) */
    const ta_tensor *alibi_bh; /* ALiBi slopes [num_seqs, H] (else NULL): a row each */
    bool has[T_COUNT];
    seq_views whole;
} seqs_call;

bool ta_sdpa_seqs_given(const ta_sdpa_opts *opts)
{
    return opts && (opts->cu_seqlens_q || opts->cu_seqlens_k || opts->num_seqs != 0);
}

size_t ta_sdpa_scratch_bound(const ta_sdpa_problem *p)
{
    /* a sequence's float32 stand-ins are no larger than the whole's, and are contiguous
     * as the whole's are (the fused bounds depend on the strides through packing) */
    ta_sdpa_staging s;
    ta_sdpa_stage_plan(&s, p);
    size_t stage = ta_sdpa_stage_bytes(&s);
    size_t impl = p->backward ? ta_sdpa_backward_fused_scratch_bound(&s.p)
                              : ta_sdpa_forward_fused_scratch_bound(&s.p);
    return ta_size_sum(stage, impl);
}

/* ------------------------------------------------------------ validation */

/* The offsets and the options they do not combine with. */
static ta_status check_opts(seqs_call *c, const char *fn, const ta_sdpa_opts *opts)
{
    if (!opts->cu_seqlens_q && !opts->cu_seqlens_k)
        return ta_error(TA_EINVAL, "%s: opts->num_seqs = %lld but opts->cu_seqlens_q and "
                        "opts->cu_seqlens_k are NULL", fn, (long long)opts->num_seqs);
    if (!opts->cu_seqlens_q || !opts->cu_seqlens_k)
        return ta_error(TA_EINVAL, "%s: opts->%s is NULL but opts->%s is set; a "
                        "variable-length batch needs both", fn,
                        opts->cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q",
                        opts->cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k");
    if (opts->num_seqs < 0)
        return ta_error(TA_EINVAL, "%s: opts->num_seqs = %lld must be >= 0", fn,
                        (long long)opts->num_seqs);
    const char *other = opts->mask ? "opts->mask" : opts->key_lengths ? "opts->key_lengths"
                        : opts->weights ? "opts->weights" : NULL;
    if (other)
        return ta_error(TA_EINVAL, "%s: %s does not combine with opts->cu_seqlens_q/k (the "
                        "offsets already say where each sequence ends)", fn, other);
    *c = (seqs_call){.fn = fn, .cq = opts->cu_seqlens_q, .ck = opts->cu_seqlens_k,
                     .n = opts->num_seqs, .opts = *opts};
    c->opts.cu_seqlens_q = c->opts.cu_seqlens_k = NULL;
    c->opts.num_seqs = 0;
    return TA_OK;
}

/* num_seqs + 1 offsets from 0, non-decreasing, the last = T. */
static ta_status check_offsets(const char *fn, const char *name, const int32_t *cu, int64_t n,
                               int64_t T, const char *rows)
{
    if (cu[0] != 0)
        return ta_error(TA_EINVAL, "%s: opts->%s[0] = %d; offsets start at 0", fn, name, cu[0]);
    for (int64_t b = 0; b < n; b++)
        if (cu[b + 1] < cu[b])
            return ta_error(TA_EINVAL, "%s: opts->%s[%lld] = %d is below opts->%s[%lld] = %d; "
                            "offsets must not decrease", fn, name, (long long)b + 1, cu[b + 1],
                            name, (long long)b, cu[b]);
    if (cu[n] != T)
        return ta_error(TA_EINVAL, "%s: opts->%s[%lld] = %d but %s; the last offset (num_seqs "
                        "= %lld) must be that count", fn, name, (long long)n, cu[n], rows,
                        (long long)n);
    return TA_OK;
}

static ta_status check_rank(const char *fn, const char *name, const ta_tensor *t, int ndim,
                            const char *dims)
{
    ta_status st = ta_tensor_check_storage(fn, name, t);
    if (st || t->ndim == ndim) return st;
    char s[TA_SHAPE_STR_MAX];
    return ta_error(TA_ESHAPE, "%s: %s must have %d dims %s with opts->cu_seqlens_q/k, got %d "
                    "(%s)", fn, name, ndim, dims, t->ndim,
                    ta_shape_str(s, sizeof s, t->ndim, t->shape));
}

/* A packed [T, Hx, X] tensor as [1, Hx, T, X], an LSE [H, T] as [1, H, T]: the token dim
 * becomes dim 2, where a sequence is a slice. */
static void set_view(seqs_call *c, int role, const ta_tensor *t)
{
    if (!t) return;
    ta_tensor v = *t;
    v.owned = NULL;
    v.ndim = t->ndim + 1;
    v.shape[0] = 1;
    v.stride[0] = 0;
    const int tok = t->ndim == 3 ? 0 : 1; /* the packed token dim */
    v.shape[1] = t->shape[1 - tok];
    v.stride[1] = t->stride[1 - tok];
    v.shape[2] = t->shape[tok];
    v.stride[2] = t->stride[tok];
    if (t->ndim == 3) {
        v.shape[3] = t->shape[2];
        v.stride[3] = t->stride[2];
    }
    c->whole.t[role] = v;
    c->has[role] = true;
}

/* Q, K, V packed: [Tq, H, D], [Tk, Hkv, D], [Tk, Hkv, Dv], and the extents they share
 * (the dense check on their views). */
static ta_status check_qkv(seqs_call *c, const ta_tensor *Q, const ta_tensor *K,
                           const ta_tensor *V)
{
    ta_status st = check_rank(c->fn, "Q", Q, 3, "[Tq, H, D]");
    if (!st) st = check_rank(c->fn, "K", K, 3, "[Tk, Hkv, D]");
    if (!st) st = check_rank(c->fn, "V", V, 3, "[Tk, Hkv, Dv]");
    if (st) return st;
    set_view(c, T_Q, Q);
    set_view(c, T_K, K);
    set_view(c, T_V, V);
    const ta_tensor *t = c->whole.t;
    return ta_sdpa_check_qkv(c->fn, &t[T_Q], &t[T_K], &t[T_V], TA_SDPA_CHECK_ALL);
}

/* Both offset arrays against Q's and K's rows. */
static ta_status check_both_offsets(const seqs_call *c, const ta_tensor *Q, const ta_tensor *K)
{
    char rows[96];
    snprintf(rows, sizeof rows, "Q has Tq = %lld rows", (long long)Q->shape[0]);
    ta_status st = check_offsets(c->fn, "cu_seqlens_q", c->cq, c->n, Q->shape[0], rows);
    if (st) return st;
    snprintf(rows, sizeof rows, "K has Tk = %lld rows", (long long)K->shape[0]);
    return check_offsets(c->fn, "cu_seqlens_k", c->ck, c->n, K->shape[0], rows);
}

/* Sequence b's views: rows cu[b] .. cu[b+1] of each tensor's token dim. */
static ta_status views_of(seq_views *v, const seqs_call *c, int64_t b)
{
    for (int r = 0; r < T_COUNT; r++) {
        if (!c->has[r]) continue;
        const int32_t *cu = r < T_K ? c->cq : c->ck;
        ta_status st = ta_tensor_slice(&v->t[r], &c->whole.t[r], 2, cu[b], cu[b + 1], 1);
        if (st) return st;
    }
    return TA_OK;
}

/* The ALiBi slopes [num_seqs, H] of a call: checked whole (shape, dtype, strides, data
 * and overlaps with the outputs, as the dense checks do [B, H]: each sequence's dense
 * check sees its own row only, which a stride can put anywhere) and kept aside, each
 * sequence getting its row. */
static ta_status alibi_rows(seqs_call *c)
{
    const ta_tensor *a = c->opts.alibi_slopes;
    if (!a || a->ndim != 2) return TA_OK; /* [H] (or wrong: the dense check says so) */
    const int64_t H = c->whole.t[T_Q].shape[1];
    if (a->shape[0] != c->n || a->shape[1] != H)
        return ta_error(TA_EINVAL, "%s: opts->alibi_slopes has shape [%lld, %lld]; expected "
                        "[H] = [%lld] or [num_seqs, H] = [%lld, %lld]", c->fn,
                        (long long)a->shape[0], (long long)a->shape[1], (long long)H,
                        (long long)c->n, (long long)H);
    if (a->dtype != TA_F32)
        return ta_error(TA_EINVAL, "%s: opts->alibi_slopes has dtype %d; it must be float32 "
                        "(TA_F32)", c->fn, (int)a->dtype);
    ta_status st = ta_tensor_check(c->fn, "opts->alibi_slopes", a);
    if (st) return st;
    {
        ta_tensor *outs[4];
        const char *names[4];
        int n = 0;
        static const int roles[] = {T_O, T_LSE, T_DQ, T_DK, T_DV};
        static const char *const role_names[] = {"O", "opts->lse", "dQ", "dK", "dV"};
        for (int i = 0; i < 5; i++) {
            const bool out = c->backward ? roles[i] >= T_DQ : roles[i] <= T_LSE;
            if (out && c->has[roles[i]]) {
                outs[n] = &c->whole.t[roles[i]];
                names[n++] = role_names[i];
            }
        }
        if (c->backward && c->opts.dsinks) {
            outs[n] = c->opts.dsinks;
            names[n++] = "opts->dsinks";
        }
        const char *in_name = "opts->alibi_slopes";
        st = ta_sdpa_check_overlaps(c->fn, n, outs, names, 1, &a, &in_name);
        if (st) return st;
    }
    c->alibi_bh = a;
    return TA_OK;
}

/* The dense problem of views v: sequence b, or the whole (b = -1). */
static ta_status prepare(ta_sdpa_problem *p, const seqs_call *c, seq_views *v, int64_t b)
{
    ta_tensor *t = v->t;
    ta_sdpa_opts o = c->opts;
    ta_tensor row;
    if (c->alibi_bh) { /* row b (the whole: row 0) as [H] */
        const ta_tensor *a = c->alibi_bh;
        row = (ta_tensor){.data = a->data, .dtype = a->dtype, .ndim = 1,
                          .shape = {a->shape[1]}, .stride = {a->stride[1]}};
        if (b > 0) row.data = (char *)a->data + b * a->stride[0] * (int64_t)ta_dtype_size(a->dtype);
        o.alibi_slopes = c->n > 0 ? &row : NULL;
    }
    if (b >= 0) o.dsinks = NULL; /* the whole sums it over every sequence (run) */
    if (!c->backward) {
        o.lse = c->has[T_LSE] ? &t[T_LSE] : NULL;
        return ta_sdpa_prepare(p, c->fn, &t[T_O], &t[T_Q], &t[T_K], &t[T_V], &o,
                               TA_SDPA_CHECK_ALL);
    }
    return ta_sdpa_prepare_backward(p, c->fn, &t[T_DQ], &t[T_DK], &t[T_DV], &t[T_DO], &t[T_Q],
                                    &t[T_K], &t[T_V], &t[T_O], &t[T_LSE], &o,
                                    TA_SDPA_CHECK_ALL);
}

/* ------------------------------------------------------------------ run */

/* The most scratch one sequence needs. */
static ta_status largest_need(size_t *need, const seqs_call *c)
{
    *need = 0;
    for (int64_t b = 0; b < c->n; b++) {
        seq_views v;
        ta_sdpa_problem p;
        ta_status st = views_of(&v, c, b);
        if (!st) st = prepare(&p, c, &v, b);
        if (st) return st;
        *need = TA_MAX(*need, ta_sdpa_scratch_bytes(&p));
    }
    return TA_OK;
}

/* Their scratch (at most): each sequence's views and problem, then the fused forward's,
 * where one sequence alone needs at most `alone`. */
static void together_layout(ta_arena *a, seq_views **v, ta_sdpa_problem **p, int64_t n)
{
    *v = TA_ARENA_TAKE(a, seq_views, n);
    *p = TA_ARENA_TAKE(a, ta_sdpa_problem, n);
}

static size_t together_bytes(const seqs_call *c, const ta_sdpa_problem *whole, size_t alone)
{
    ta_arena a = ta_arena_measure();
    seq_views *v;
    ta_sdpa_problem *p;
    together_layout(&a, &v, &p, c->n);
    return ta_size_sum(ta_arena_bytes(&a),
                       c->backward ? ta_sdpa_backward_fused_seqs_bound(whole, c->n, alone)
                                   : ta_sdpa_forward_fused_seqs_bound(whole, c->n, alone));
}

/* Every sequence of the call in the scratch block s: together, or one after another. */
static ta_status run_all(seqs_call *c, const ta_scratch *s, bool joint)
{
    ta_status st = TA_OK;
    ta_arena a = ta_arena_over(s->base, s->size);
    if (joint) {
        seq_views *v;
        ta_sdpa_problem *p;
        together_layout(&a, &v, &p, c->n);
        if (a.overflow) return ta_error(TA_EINTERNAL, "%s: scratch smaller than planned", c->fn);
        for (int64_t b = 0; !st && b < c->n; b++) {
            st = views_of(&v[b], c, b);
            if (!st) st = prepare(&p[b], c, &v[b], b);
        }
        if (st) return st;
        return c->backward ? ta_sdpa_backward_fused_seqs(p, c->n, &a)
                           : ta_sdpa_forward_fused_seqs(p, c->n, &a);
    }
    for (int64_t b = 0; !st && b < c->n; b++) {
        seq_views v;
        ta_sdpa_problem p;
        st = views_of(&v, c, b);
        if (!st) st = prepare(&p, c, &v, b);
        a = ta_arena_over(s->base, s->size);
        if (!st) st = ta_sdpa_run(&p, &a);
    }
    return st;
}

/* The scratch a caller's workspace must hold: on the fused path a bound from the shapes
 * alone, the whole's ta_sdpa_scratch_bound (and, for a forward of several sequences, what
 * running them together takes for that many), so that one workspace serves every batch
 * of these totals; on the reference path (the oracle, whose einsums' packing is no
 * monotonic function of the lengths) the largest sequence's need. bytes non-NULL: the
 * workspace query; else every sequence runs in one block. */
static ta_status run(size_t *bytes, seqs_call *c)
{
    ta_sdpa_problem whole;
    size_t need = 0;
    ta_status st = alibi_rows(c);
    if (!st) st = prepare(&whole, c, &c->whole, -1);
    if (st) return st;
    /* what the sequences read after the scratch is written: the offsets, every ALiBi
     * row (the whole's prepare saw row 0) */
    const ta_workspace *w = &c->opts.workspace;
    const size_t offs = (size_t)(c->n + 1) * sizeof(int32_t);
    if ((st = ta_workspace_check_bytes(c->fn, w, c->cq, offs, "opts->cu_seqlens_q")) ||
        (st = ta_workspace_check_bytes(c->fn, w, c->ck, offs, "opts->cu_seqlens_k")))
        return st;
    if (c->alibi_bh) {
        const char *name = "opts->alibi_slopes";
        if ((st = ta_workspace_check(c->fn, w, 1, &c->alibi_bh, &name))) return st;
    }
    /* together: the whole's bound for a sequence alone (no pass over the sequences to
     * size them, which with many tiny ones cost as much as their attention) */
    const bool joint = c->backward ? ta_sdpa_backward_fused_together(&whole, c->n)
                                   : ta_sdpa_forward_fused_together(&whole, c->n);
    if (!joint && (st = largest_need(&need, c))) return st;
    size_t bound = whole.path == TA_SDPA_FUSED ? ta_sdpa_scratch_bound(&whole) : need;
    if (need > bound)
        return ta_error(TA_EINTERNAL, "%s: a sequence needs %zu bytes of scratch, more than "
                        "the %zu planned for the batch", c->fn, need, bound);
    if (joint) need = bound = TA_MAX(bound, together_bytes(c, &whole, bound));
    if (bytes) {
        if (bound == SIZE_MAX)
            return ta_error(TA_ENOMEM, "%s: the scratch for these shapes does not fit in "
                            "memory", c->fn);
        *bytes = ta_workspace_bytes(bound);
        return TA_OK;
    }
    const ta_workspace *ws = &c->opts.workspace;
    ta_scratch s;
    if ((st = ta_scratch_acquire(&s, c->fn, ws, ws->data ? bound : need))) return st;
    st = run_all(c, &s, joint);
    ta_scratch_release(&s);
    if (!st && c->backward) ta_sdpa_sinks_grad(&whole); /* dsinks over every sequence */
    return st;
}

/* ------------------------------------------------------------- entries */

ta_status ta_sdpa_seqs_forward(size_t *bytes, const char *fn, ta_tensor *O, const ta_tensor *Q,
                               const ta_tensor *K, const ta_tensor *V, const ta_sdpa_opts *opts)
{
    seqs_call c;
    ta_status st = check_opts(&c, fn, opts);
    if (!st) st = check_qkv(&c, Q, K, V);
    if (st) return st;
    const int64_t Tq = Q->shape[0], H = Q->shape[1];
    const int64_t os[3] = {Tq, H, V->shape[2]}, ls[2] = {H, Tq};
    st = ta_tensor_check_shape(fn, "O", O, 3, os, "[Tq, H, Dv]", TA_CHECK_OUTPUT | TA_CHECK_STORAGE);
    if (!st && opts->lse)
        st = ta_tensor_check_shape(fn, "opts->lse", opts->lse, 2, ls, "[H, Tq]", TA_CHECK_OUTPUT);
    if (!st) st = check_both_offsets(&c, Q, K);
    if (st) return st;
    set_view(&c, T_O, O);
    set_view(&c, T_LSE, opts->lse);
    return run(bytes, &c);
}

ta_status ta_sdpa_seqs_backward(size_t *bytes, const char *fn, ta_tensor *dQ, ta_tensor *dK,
                                ta_tensor *dV, const ta_tensor *dO, const ta_tensor *Q,
                                const ta_tensor *K, const ta_tensor *V, const ta_tensor *O,
                                const ta_tensor *lse, const ta_sdpa_opts *opts)
{
    seqs_call c;
    ta_status st = check_opts(&c, fn, opts);
    if (!st) st = check_qkv(&c, Q, K, V);
    if (st) return st;
    c.backward = true;
    /* the gradients have their input's shape */
    const int64_t Tq = Q->shape[0], H = Q->shape[1];
    const int64_t os[3] = {Tq, H, V->shape[2]}, ls[2] = {H, Tq};
    st = ta_tensor_check_shape(fn, "dO", dO, 3, os, "[Tq, H, Dv]", 0 | TA_CHECK_STORAGE);
    if (!st) st = ta_tensor_check_shape(fn, "O", O, 3, os, "[Tq, H, Dv]", 0 | TA_CHECK_STORAGE);
    if (!st) st = ta_tensor_check_shape(fn, "lse", lse, 2, ls, "[H, Tq]", 0);
    if (!st) st = ta_tensor_check_shape(fn, "dQ", dQ, 3, Q->shape, "[Tq, H, D]", TA_CHECK_OUTPUT | TA_CHECK_STORAGE);
    if (!st) st = ta_tensor_check_shape(fn, "dK", dK, 3, K->shape, "[Tk, Hkv, D]", TA_CHECK_OUTPUT | TA_CHECK_STORAGE);
    if (!st) st = ta_tensor_check_shape(fn, "dV", dV, 3, V->shape, "[Tk, Hkv, Dv]", TA_CHECK_OUTPUT | TA_CHECK_STORAGE);
    if (!st) st = check_both_offsets(&c, Q, K);
    if (st) return st;
    const ta_tensor *in[] = {NULL, O, lse, dO, dQ, NULL, NULL, dK, dV};
    for (int r = 0; r < T_COUNT; r++) set_view(&c, r, in[r]);
    return run(bytes, &c);
}
