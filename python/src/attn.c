/* attn.c -- the attention calls of the module: scaled_dot_product_attention (torch's
 * [..., H, L, D] layout), flash_attn_func ([B, L, H, D]) and flash_attn_varlen_func
 * ([T, H, D] with offsets), forward and backward, on ta_sdpa and ta_sdpa_backward.
 *
 * The caller's arrays are viewed, not copied, as the library's [B, H, L, D]: torch's
 * leading batch dims merged into one B when their strides allow (a copy only when they
 * do not), FlashAttention's [B, L, H, D] as a permuted view, packed varlen tensors as they
 * are. Outputs are new arrays of the query's kind in the caller's layout, handed to the
 * library as views of the same kind. The library runs with the GIL released. */
#include "attn.h"

#include "features.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const fn_names[3] = {"scaled_dot_product_attention", "flash_attn_func",
                                        "flash_attn_varlen_func"};
static const char *const arg_names[2][3] = {{"query", "key", "value"}, {"q", "k", "v"}};
static const float zero_f32 = 0.0f;

/* The data pointers of the last call's Q, K, V and mask as the library got them (tests
 * check that contiguous inputs are never copied). */
static _Thread_local uintptr_t last_inputs[4];

/* ---------------------------------------------------------------- views */

/* *t = x with the dims before its last `tail` merged into one (size 1 when there are
 * none; missing tail dims become size-1 dims). Returns 0, or -1 when the strides of the
 * merged dims do not allow one stride. */
static int merge_lead(ta_tensor *t, const ta_tensor *x, int tail)
{
    int nlead = x->ndim - tail;
    int64_t n = 1, s = 0, expect = 0;
    int have = 0;
    for (int d = 0; d < nlead; d++) n *= x->shape[d];
    for (int d = nlead - 1; d >= 0 && n > 0; d--) {
        if (x->shape[d] == 1) continue;
        if (have && x->stride[d] != expect) return -1;
        if (!have) s = x->stride[d];
        have = 1;
        expect = x->stride[d] * x->shape[d];
    }
    ta_tensor r;
    memset(&r, 0, sizeof r);
    r.data = x->data;
    r.dtype = x->dtype;
    r.ndim = tail + 1;
    r.shape[0] = n;
    r.stride[0] = have ? s : 0;
    for (int i = 0; i < tail; i++) {
        int d = x->ndim - tail + i;
        r.shape[1 + i] = d >= 0 ? x->shape[d] : 1;
        r.stride[1 + i] = d >= 0 ? x->stride[d] : 0;
    }
    *t = r;
    return 0;
}

/* The library's view of x in the call's layout: tail 3 for Q, K, V, O and their
 * gradients, 2 for the LSE. */
int ta_py_layout_view(ta_tensor *t, const ta_tensor *x, int layout, int tail)
{
    if (layout == TA_PY_LAYOUT_TORCH) return merge_lead(t, x, tail);
    *t = *x;
    if (layout == TA_PY_LAYOUT_FLASH && tail == 3) { /* [B, L, H, D] -> [B, H, L, D] */
        t->shape[1] = x->shape[2], t->shape[2] = x->shape[1];
        t->stride[1] = x->stride[2], t->stride[2] = x->stride[1];
    }
    return 0;
}

/* The view of an input; compacted (one copy) when torch-layout batch dims do not merge. */
static int input_view(ta_tensor *t, ta_py_array *x, int layout, int tail)
{
    ta_tensor v;
    ta_py_array_view(&v, x);
    if (!ta_py_layout_view(t, &v, layout, tail)) return 0;
    if (ta_py_array_compact(x, 0, 0)) return -1;
    ta_py_array_view(&v, x);
    return ta_py_layout_view(t, &v, layout, tail);
}

/* ------------------------------------------------------------- options */

void ta_py_attn_args_release(ta_py_attn_args *a)
{
    ta_py_array_release(&a->mask);
    ta_py_array_release(&a->alibi);
    free(a->cu_q32);
    free(a->cu_k32);
    memset(a, 0, sizeof *a);
}

/* An int argument; one beyond a C long saturates (LONG_MAX: an unbounded window side, no
 * max_seqlen limit; LONG_MIN: refused by the range checks as ValueError) rather than
 * raising OverflowError, which the contract's ValueError / TypeError do not cover. */
static int get_long(PyObject *o, long *v)
{
    int overflow = 0;
    *v = PyLong_AsLongAndOverflow(o, &overflow);
    if (overflow) *v = overflow > 0 ? LONG_MAX : LONG_MIN;
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

static int get_scale(ta_py_attn_args *a, PyObject *o)
{
    if (o == Py_None) return 0; /* 0: the library's 1/sqrt(D) */
    double s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred()) return -1;
    float f = (float)s;
    if (!isfinite(f)) {
        PyErr_Format(PyExc_ValueError, "scale must be finite in float32, got %R", o);
        return -1;
    }
    /* The library reads scale 0 as "the default": an explicit 0 (or a scale that rounds to
     * 0 in float32) runs with Q = 0 and scale 1 instead, which gives the same scores. */
    if (f == 0.0f) a->zero_scale = 1, f = 1.0f;
    a->opts.scale = f;
    return 0;
}

static int get_window(ta_py_attn_args *a, PyObject *left, PyObject *right)
{
    long wl, wr;
    if (get_long(left, &wl) || get_long(right, &wr)) return -1;
    if (wl < -1 || wr < -1) {
        PyErr_Format(PyExc_ValueError, "window_size must be (left, right) with each -1 "
                     "(unbounded) or >= 0, got (%ld, %ld)", wl, wr);
        return -1;
    }
    if (wl == -1 && wr == -1) return 0;
    if (!TA_PY_HAVE_WINDOW) {
        ta_py_not_implemented("window_size", "sliding-window attention (issue 12)");
        return -1;
    }
    a->opts.has_window = 1;
    a->opts.window_left = wl;
    a->opts.window_right = wr;
    return 0;
}

static int get_softcap(ta_py_attn_args *a, PyObject *o)
{
    double c = PyFloat_AsDouble(o);
    if (c == -1.0 && PyErr_Occurred()) return -1;
    if (!(c >= 0.0) || !isfinite((float)c)) {
        PyErr_Format(PyExc_ValueError, "softcap must be 0 (off) or positive and finite, got %R", o);
        return -1;
    }
    if (c == 0.0) return 0;
    if (!TA_PY_HAVE_SOFTCAP) {
        ta_py_not_implemented("softcap", "logit soft-capping (issue 12)");
        return -1;
    }
    a->opts.softcap = (float)c;
    return 0;
}

static int get_alibi(ta_py_attn_args *a, PyObject *o)
{
    if (o == Py_None) return 0;
    if (!TA_PY_HAVE_ALIBI) {
        ta_py_not_implemented("alibi_slopes", "ALiBi (issue 12)");
        return -1;
    }
    if (ta_py_array_get(&a->alibi, o, "alibi_slopes", 0)) return -1;
    if (a->alibi.elem != TA_PY_F32) {
        PyErr_Format(PyExc_TypeError, "alibi_slopes has dtype %s; expected float32",
                     ta_py_elem_name(a->alibi.elem));
        return -1;
    }
    ta_py_array_view(&a->A, &a->alibi);
    a->opts.alibi_slopes = &a->A;
    return 0;
}

/* cu_seqlens_q / cu_seqlens_k (int32 or int64, num_seqs + 1 values) and max_seqlen_q / k:
 * a sequence longer than its max_seqlen is refused (FlashAttention would size its grid by
 * it and give a wrong answer). */
static int get_varlen(ta_py_attn_args *a, PyObject *const *o)
{
    if (!TA_PY_HAVE_VARLEN) {
        ta_py_not_implemented("flash_attn_varlen_func",
                              "variable-length batches (opts.cu_seqlens_q/k, issue 11)");
        return -1;
    }
    static const char *const names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
    int32_t **cu[2] = {&a->cu_q32, &a->cu_k32};
    int64_t n[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        ta_py_array arr = {0};
        long max;
        int bad = ta_py_array_get(&arr, o[i], names[i], 0) ||
                  !(*cu[i] = ta_py_int32_copy(&arr, names[i], 1)) || get_long(o[2 + i], &max);
        n[i] = arr.ndim == 1 ? arr.shape[0] : 0;
        ta_py_array_release(&arr);
        if (bad) return -1;
        for (int64_t s = 0; s + 1 < n[i]; s++)
            if ((*cu[i])[s + 1] - (*cu[i])[s] > max) {
                PyErr_Format(PyExc_ValueError, "sequence %lld has %ld tokens (%s), more than "
                             "max_seqlen_%s = %ld", (long long)s,
                             (long)((*cu[i])[s + 1] - (*cu[i])[s]), names[i], i ? "k" : "q", max);
                return -1;
            }
    }
    if (n[0] != n[1] || n[0] < 1) {
        PyErr_Format(PyExc_ValueError, "cu_seqlens_q has %lld values and cu_seqlens_k %lld; "
                     "both must have num_seqs + 1 >= 1", (long long)n[0], (long long)n[1]);
        return -1;
    }
    a->opts.cu_seqlens_q = a->cu_q32;
    a->opts.cu_seqlens_k = a->cu_k32;
    a->opts.num_seqs = n[0] - 1;
    return 0;
}

/* The options block every attention call passes in the same order: mask, causal, scale,
 * enable_gqa, window_left, window_right, softcap, alibi_slopes, cu_seqlens_q,
 * cu_seqlens_k, max_seqlen_q, max_seqlen_k (the mask is read later, against Q's shape). */
int ta_py_attn_args_parse(ta_py_attn_args *a, long layout, PyObject *const *o)
{
    long causal;
    if (layout < 0 || layout > 2) {
        PyErr_Format(PyExc_ValueError, "unknown layout %ld", layout);
        return -1;
    }
    a->layout = (int)layout;
    if (get_long(o[1], &causal)) return -1;
    if (causal < 0 || causal > 2) {
        PyErr_Format(PyExc_ValueError, "causal must be 0, 1 or 2, got %ld", causal);
        return -1;
    }
    a->opts.causal = (ta_causal)causal;
    if ((a->gqa = PyObject_IsTrue(o[3])) < 0) return -1;
    if (get_scale(a, o[2]) || get_window(a, o[4], o[5]) || get_softcap(a, o[6]) ||
        get_alibi(a, o[7]))
        return -1;
    if (layout == TA_PY_LAYOUT_VARLEN && get_varlen(a, o + 8)) return -1;
    return 0;
}

/* ---------------------------------------------------------------- masks */

/* A torch attn_mask broadcast against [lead..., H, Lq, Lk] (q's rank r): bool (True = may
 * attend) becomes a float32 keep mask, float32 is additive. Dims of stride 0 become size
 * 1 (the library broadcasts them); the view is [Bm, Hm, Lqm, Lkm], each 1 or full. */
static int mask_view(ta_py_attn_args *a, PyObject *obj, const ta_py_array *q, int64_t Lk)
{
    ta_py_array *m = &a->mask;
    if (ta_py_array_get(m, obj, "attn_mask", TA_PY_MASK)) return -1;
    if (m->elem == TA_PY_BOOL) a->opts.mask_mode = TA_MASK_KEEP;
    else if (m->elem == TA_PY_F32 || (m->elem == q->elem && TA_PY_HAVE_HALF))
        a->opts.mask_mode = TA_MASK_ADDITIVE; /* float32, or the query's half type (as torch) */
    else {
        PyErr_Format(PyExc_TypeError, "attn_mask has dtype %s; expected bool (True = may "
                     "attend) or float32 (added to the scores)", ta_py_elem_name(m->elem));
        return -1;
    }
    const int r = q->ndim, off = r - m->ndim;
    if (off < 0) {
        PyErr_Format(PyExc_ValueError, "attn_mask has %d dims, more than the query's %d",
                     m->ndim, r);
        return -1;
    }
    int64_t shape[TA_MAX_DIMS], stride[TA_MAX_DIMS];
    int lead_used = 0;
    for (int d = r - 1; d >= 0; d--) {
        int64_t target = d == r - 1 ? Lk : q->shape[d];
        int64_t s = d >= off ? m->shape[d - off] : 1, st = d >= off ? m->stride[d - off] : 0;
        if (s != 1 && s != target) {
            PyErr_Format(PyExc_ValueError, "attn_mask's dim %d has size %lld, which does not "
                         "broadcast to %lld (the mask must broadcast to [..., H, Lq, Lk] of "
                         "the query and key)", d - off, (long long)s, (long long)target);
            return -1;
        }
        /* a broadcast dim (size 1, or stride 0) gets stride 0: it may be widened below */
        shape[d] = st == 0 || s == 1 ? 1 : s;
        stride[d] = st == 0 || s == 1 ? 0 : st;
        if (d < r - 3 && shape[d] != 1) lead_used = 1;
    }
    for (int d = 0; d < r; d++) { /* batch dims that vary: expand the others to merge them */
        m->shape[d] = lead_used && d < r - 3 && shape[d] == 1 ? q->shape[d] : shape[d];
        m->stride[d] = stride[d];
    }
    m->ndim = r;
    ta_tensor v;
    ta_py_array_view(&v, m);
    if (merge_lead(&a->M, &v, 3)) {
        if (ta_py_array_compact(m, m->elem == TA_PY_BOOL, 0)) return -1;
        ta_py_array_view(&v, m);
        merge_lead(&a->M, &v, 3);
    }
    if (m->elem == TA_PY_BOOL || m->elem == TA_PY_F16 || m->elem == TA_PY_BF16) {
        /* the library's masks are float32: bool as a keep mask of 0/1, half types widened;
         * broadcast dims kept */
        if (m->elem == TA_PY_BOOL ? ta_py_array_compact(m, 1, 1) : ta_py_array_widen(m))
            return -1;
        ta_py_array_view(&v, m);
        merge_lead(&a->M, &v, 3);
    }
    a->opts.mask = &a->M;
    return 0;
}

/* ------------------------------------------------------------- Q, K, V */

/* Reads q, k, v (x[0..2]) and checks what the library cannot see through the views: the
 * ranks of the layout, equal batch dims (torch layout), equal heads unless enable_gqa,
 * one dtype. */
static int get_qkv(ta_py_attn_args *a, ta_py_array *x, PyObject *const *obj, ta_tensor *views)
{
    const int layout = a->layout;
    const char *const *names = arg_names[layout != TA_PY_LAYOUT_TORCH];
    for (int i = 0; i < 3; i++)
        if (ta_py_array_get(&x[i], obj[i], names[i], 0) ||
            ta_py_check_float_input(&x[i], names[i]))
            return -1;
    const int r = x[0].ndim, want = layout == TA_PY_LAYOUT_FLASH ? 4 : 3;
    for (int i = 0; i < 3; i++) {
        if (layout != TA_PY_LAYOUT_TORCH ? x[i].ndim != want : x[i].ndim < 2) {
            PyErr_Format(PyExc_ValueError, "%s: %s must have %s%d dims %s, got %d",
                         fn_names[layout], names[i], layout ? "" : "at least ",
                         layout ? want : 2,
                         layout == TA_PY_LAYOUT_FLASH ? "[B, L, H, D]"
                         : layout ? "[T, H, D]" : "[..., L, D]", x[i].ndim);
            return -1;
        }
        if (x[i].elem != x[0].elem) {
            PyErr_Format(PyExc_TypeError, "%s: %s has dtype %s but %s has %s", fn_names[layout],
                         names[i], ta_py_elem_name(x[i].elem), names[0],
                         ta_py_elem_name(x[0].elem));
            return -1;
        }
    }
    if (layout == TA_PY_LAYOUT_TORCH) {
        for (int i = 1; i < 3; i++) {
            int same = x[i].ndim == r;
            for (int d = 0; same && d < r - 3; d++) same = x[i].shape[d] == x[0].shape[d];
            if (!same) {
                PyErr_Format(PyExc_ValueError, "%s: %s must have the query's rank (%d) and "
                             "batch dims (all but the last three)", fn_names[0], names[i], r);
                return -1;
            }
        }
        if (r >= 3 && !a->gqa && x[1].shape[r - 3] != x[0].shape[r - 3]) {
            PyErr_Format(PyExc_ValueError, "%s: key has %lld heads but query has %lld; pass "
                         "enable_gqa=True for grouped-query attention", fn_names[0],
                         (long long)x[1].shape[r - 3], (long long)x[0].shape[r - 3]);
            return -1;
        }
    }
    for (int i = 0; i < 3; i++)
        if (input_view(&views[i], &x[i], layout, 3)) return -1;
    return 0;
}

/* The zero Q of an explicit scale 0 (see get_scale): Q's shape, every stride 0. */
static void zero_view(ta_tensor *t)
{
    t->data = (void *)&zero_f32;
    t->dtype = TA_F32;
    for (int d = 0; d < t->ndim; d++) t->stride[d] = 0;
}

/* The output and LSE shapes of q (x[0]) and v (x[2]) in the call's layout. */
static int out_shape(int64_t *shape, const ta_py_array *x)
{
    const int r = x[0].ndim;
    memcpy(shape, x[0].shape, sizeof(int64_t) * (size_t)r);
    shape[r - 1] = x[2].shape[x[2].ndim - 1];
    return r;
}

static int lse_shape(int64_t *shape, const ta_py_array *q, int layout)
{
    if (layout == TA_PY_LAYOUT_TORCH) { /* [lead..., H, Lq] */
        memcpy(shape, q->shape, sizeof(int64_t) * (size_t)(q->ndim - 1));
        return q->ndim - 1;
    }
    if (layout == TA_PY_LAYOUT_FLASH) { /* [B, H, Lq] */
        shape[0] = q->shape[0], shape[1] = q->shape[2], shape[2] = q->shape[1];
        return 3;
    }
    shape[0] = q->shape[1], shape[1] = q->shape[0]; /* varlen: [H, Tq] */
    return 2;
}

/* A new output of q's kind and `elem`, and the library's view of it. */
static PyObject *new_output(ta_tensor *view, const ta_py_array *q, ta_py_elem elem, int ndim,
                            const int64_t *shape, int layout, int tail)
{
    ta_tensor t;
    PyObject *o = ta_py_new_output(q->kind, elem, ndim, shape, &t);
    if (o) ta_py_layout_view(view, &t, layout, tail); /* contiguous: always a view */
    return o;
}

static int run_status(ta_status st)
{
    if (st == TA_OK) return 0;
    ta_py_raise_status(st);
    return -1;
}

/* -------------------------------------------------------------- forward */

/* attention(layout, q, k, v, want_lse, <options block>) -> out or (out, lse), or
 * NotImplemented when torch must record a graph (an input requires grad while grad mode is
 * on): the caller then goes through the autograd Function, whose forward comes back here
 * with grad mode off. (One call instead of a separate test: a quarter microsecond.) */
PyObject *ta_py_attention(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5 + TA_PY_ATTN_OPTS) {
        PyErr_SetString(PyExc_TypeError, "attention() takes 17 arguments");
        return NULL;
    }
    PyObject *const grad_args[4] = {args[1], args[2], args[3], args[5]};
    int grad = ta_py_needs_grad(grad_args, 4);
    if (grad) {
        if (grad > 0) Py_RETURN_NOTIMPLEMENTED;
        return NULL;
    }
    ta_py_attn_args a = {0};
    ta_py_array x[3] = {{0}};
    ta_tensor in[3], O, L;
    PyObject *out = NULL, *lse = NULL, *result = NULL;
    long layout;
    int want_lse;
    if (get_long(args[0], &layout) || (want_lse = PyObject_IsTrue(args[4])) < 0 ||
        ta_py_attn_args_parse(&a, layout, args + 5) || get_qkv(&a, x, args + 1, in))
        goto done;
    if (args[5] != Py_None) {
        if (a.layout != TA_PY_LAYOUT_TORCH) {
            PyErr_SetString(PyExc_ValueError, "a mask is only taken in the torch layout");
            goto done;
        }
        if (mask_view(&a, args[5], &x[0], x[1].shape[x[1].ndim - 2])) goto done;
    }
    int64_t shape[TA_MAX_DIMS];
    int nd = out_shape(shape, x);
    if (!(out = new_output(&O, &x[0], x[0].elem, nd, shape, a.layout, 3))) goto done;
    if (want_lse) {
        nd = lse_shape(shape, &x[0], a.layout);
        if (!(lse = new_output(&L, &x[0], TA_PY_F32, nd, shape, a.layout, 2))) goto done;
        a.opts.lse = &L;
    }
    if (a.zero_scale) zero_view(&in[0]);
    last_inputs[0] = (uintptr_t)in[0].data, last_inputs[1] = (uintptr_t)in[1].data;
    last_inputs[2] = (uintptr_t)in[2].data;
    last_inputs[3] = a.opts.mask ? (uintptr_t)a.opts.mask->data : 0;
    ta_status st;
    Py_BEGIN_ALLOW_THREADS
    ta_py_enter_call();
    st = ta_sdpa(&O, &in[0], &in[1], &in[2], &a.opts);
    ta_py_leave_call();
    Py_END_ALLOW_THREADS
    if (run_status(st)) goto done;
    if (want_lse) result = PyTuple_Pack(2, out, lse);
    else result = (Py_INCREF(out), out);
done:
    Py_XDECREF(out);
    Py_XDECREF(lse);
    for (int i = 0; i < 3; i++) ta_py_array_release(&x[i]);
    ta_py_attn_args_release(&a);
    return result;
}

/* ------------------------------------------------------------- backward */

/* attention_backward(layout, dout, q, k, v, out, lse, <options block>) -> (dq, dk, dv):
 * the gradients, each of its input's kind, dtype and shape. */
PyObject *ta_py_attention_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7 + TA_PY_ATTN_OPTS) {
        PyErr_SetString(PyExc_TypeError, "attention_backward() takes 19 arguments");
        return NULL;
    }
    ta_py_attn_args a = {0};
    ta_py_array x[3] = {{0}}, dy = {0}, y = {0}, ly = {0};
    ta_tensor in[3], dO, O, L, grads[3];
    PyObject *g[3] = {NULL, NULL, NULL}, *result = NULL;
    long layout;
    if (get_long(args[0], &layout) || ta_py_attn_args_parse(&a, layout, args + 7) ||
        get_qkv(&a, x, args + 2, in))
        goto done;
    if (ta_py_array_get(&dy, args[1], "grad_out", 0) ||
        ta_py_check_float_input(&dy, "grad_out") || ta_py_array_get(&y, args[5], "out", 0) ||
        ta_py_check_float_input(&y, "out") || ta_py_array_get(&ly, args[6], "lse", 0))
        goto done;
    if (ly.elem != TA_PY_F32) {
        PyErr_Format(PyExc_TypeError, "lse has dtype %s; expected float32",
                     ta_py_elem_name(ly.elem));
        goto done;
    }
    if (input_view(&dO, &dy, a.layout, 3) || input_view(&O, &y, a.layout, 3) ||
        input_view(&L, &ly, a.layout, 2))
        goto done;
    if (args[7] != Py_None && mask_view(&a, args[7], &x[0], x[1].shape[x[1].ndim - 2]))
        goto done;
    for (int i = 0; i < 3; i++)
        if (!(g[i] = new_output(&grads[i], &x[0], x[i].elem, x[i].ndim, x[i].shape, a.layout, 3)))
            goto done;
    if (a.zero_scale) zero_view(&in[0]);
    ta_status st;
    Py_BEGIN_ALLOW_THREADS
    ta_py_enter_call();
    st = ta_sdpa_backward(&grads[0], &grads[1], &grads[2], &dO, &in[0], &in[1], &in[2], &O, &L,
                          &a.opts);
    /* scale 0: the scores do not depend on Q or K, so neither has a gradient. */
    if (st == TA_OK && a.zero_scale) st = ta_tensor_fill(&grads[0], 0.0f);
    if (st == TA_OK && a.zero_scale) st = ta_tensor_fill(&grads[1], 0.0f);
    ta_py_leave_call();
    Py_END_ALLOW_THREADS
    if (run_status(st)) goto done;
    result = PyTuple_Pack(3, g[0], g[1], g[2]);
done:
    for (int i = 0; i < 3; i++) {
        Py_XDECREF(g[i]);
        ta_py_array_release(&x[i]);
    }
    ta_py_array_release(&dy);
    ta_py_array_release(&y);
    ta_py_array_release(&ly);
    ta_py_attn_args_release(&a);
    return result;
}

PyObject *ta_py_last_inputs(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return Py_BuildValue("(KKKK)", (unsigned long long)last_inputs[0],
                         (unsigned long long)last_inputs[1], (unsigned long long)last_inputs[2],
                         (unsigned long long)last_inputs[3]);
}
