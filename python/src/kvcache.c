/* kvcache.c -- flash_attn_with_kvcache on ta_sdpa_kvcache: q [B, Lq, H, D] against a
 * contiguous cache k_cache/v_cache [B, Lmax, Hkv, D] or a paged one [num_blocks,
 * block_size, Hkv, D] with block_table [B, max_blocks], new keys k/v [B, Lnew, Hkv, D]
 * written into the cache in place first. Built and compiled now; the library call itself
 * waits for TA_PY_HAVE_KVCACHE (features.h). */
#include "attn.h"

#include "features.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_arrays {
    ta_py_array q, kc, vc, kn, vn, seq, table;
    int32_t *seqlens, *block_table;
} kv_arrays;

static void kv_release(kv_arrays *k)
{
    ta_py_array *all[7] = {&k->q, &k->kc, &k->vc, &k->kn, &k->vn, &k->seq, &k->table};
    for (int i = 0; i < 7; i++) ta_py_array_release(all[i]);
    free(k->seqlens);
    free(k->block_table);
}

static int need_rank(const ta_py_array *x, const char *name, const char *dims)
{
    if (x->ndim == 4) return 0;
    PyErr_Format(PyExc_ValueError, "flash_attn_with_kvcache: %s must have 4 dims %s, got %d",
                 name, dims, x->ndim);
    return -1;
}

/* cache_seqlens: None (every cache full, capacity keys), an int (the same for every
 * sequence) or an int32/int64 array [B]. */
static int get_seqlens(kv_arrays *k, PyObject *o, int64_t B, int64_t capacity)
{
    if (!(k->seqlens = malloc((size_t)(B > 0 ? B : 1) * sizeof(int32_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    if (o == Py_None || PyLong_Check(o)) {
        int overflow = 0;
        long v = o == Py_None ? (long)capacity : PyLong_AsLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (overflow || v < INT32_MIN || v > INT32_MAX) {
            if (overflow) PyErr_Format(PyExc_ValueError, "cache_seqlens = %R does not fit int32", o);
            else PyErr_Format(PyExc_ValueError, "cache_seqlens = %ld does not fit int32", v);
            return -1;
        }
        for (int64_t b = 0; b < B; b++) k->seqlens[b] = (int32_t)v;
        return 0;
    }
    free(k->seqlens);
    k->seqlens = NULL; /* kv_release frees it again if the array below is refused */
    if (ta_py_array_get(&k->seq, o, "cache_seqlens", 0) ||
        !(k->seqlens = ta_py_int32_copy(&k->seq, "cache_seqlens", 1)))
        return -1;
    if (k->seq.shape[0] != B) {
        PyErr_Format(PyExc_ValueError, "cache_seqlens has %lld values but q has batch %lld",
                     (long long)k->seq.shape[0], (long long)B);
        return -1;
    }
    return 0;
}

/* attention_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, want_lse,
 *                   <options block>) -> out or (out, lse) */
PyObject *ta_py_attention_kvcache(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 8 + TA_PY_ATTN_OPTS) {
        PyErr_SetString(PyExc_TypeError, "attention_kvcache() takes 20 arguments");
        return NULL;
    }
    if (!TA_PY_HAVE_KVCACHE)
        return ta_py_not_implemented("flash_attn_with_kvcache",
                                     "the KV cache (ta_sdpa_kvcache, issue 11)");
    ta_py_attn_args a = {0};
    kv_arrays k = {0};
    ta_tensor Q, Kc, Vc, O, L, Kn = {0}, Vn = {0};
    PyObject *out = NULL, *lse = NULL, *result = NULL;
    int want_lse = PyObject_IsTrue(args[7]);
    /* the caches are written only by an append (k and v given): without one they may be
     * read-only, as FlashAttention takes them */
    const int cache_flags = args[3] != Py_None || args[4] != Py_None ? TA_PY_WRITABLE : 0;
    if (want_lse < 0 || ta_py_attn_args_parse(&a, TA_PY_LAYOUT_FLASH, args + 8)) goto done;
    if (ta_py_array_get(&k.q, args[0], "q", 0) || ta_py_check_float_input(&k.q, "q") ||
        need_rank(&k.q, "q", "[B, Lq, H, D]") ||
        ta_py_array_get(&k.kc, args[1], "k_cache", cache_flags) ||
        ta_py_check_float_input(&k.kc, "k_cache") ||
        need_rank(&k.kc, "k_cache", "[B, Lmax, Hkv, D] or [num_blocks, block_size, Hkv, D]") ||
        ta_py_array_get(&k.vc, args[2], "v_cache", cache_flags) ||
        ta_py_check_float_input(&k.vc, "v_cache") ||
        need_rank(&k.vc, "v_cache", "[B, Lmax, Hkv, Dv] or [num_blocks, block_size, Hkv, Dv]") ||
        ta_py_array_get(&k.kn, args[3], "k", TA_PY_OPTIONAL) ||
        ta_py_array_get(&k.vn, args[4], "v", TA_PY_OPTIONAL) ||
        ta_py_array_get(&k.table, args[6], "block_table", TA_PY_OPTIONAL))
        goto done;
    if (!k.kn.obj != !k.vn.obj) {
        PyErr_SetString(PyExc_ValueError, "flash_attn_with_kvcache: pass both k and v, or "
                        "neither");
        goto done;
    }
    if (k.kn.obj && (ta_py_check_float_input(&k.kn, "k") || ta_py_check_float_input(&k.vn, "v") ||
                     need_rank(&k.kn, "k", "[B, Lnew, Hkv, D]") ||
                     need_rank(&k.vn, "v", "[B, Lnew, Hkv, Dv]")))
        goto done;
    if (k.kn.obj && args[5] == Py_None) {
        PyErr_SetString(PyExc_ValueError, "flash_attn_with_kvcache: cache_seqlens=None means "
                        "every cache is full, which leaves no room for new k and v");
        goto done;
    }
    int64_t max_blocks = 0, capacity = k.kc.shape[1];
    if (k.table.obj) {
        if (!(k.block_table = ta_py_int32_copy(&k.table, "block_table", 2))) goto done;
        if (k.table.shape[0] != k.q.shape[0]) { /* the library reads B rows of it */
            PyErr_Format(PyExc_ValueError, "block_table has %lld rows but q has batch %lld",
                         (long long)k.table.shape[0], (long long)k.q.shape[0]);
            goto done;
        }
        max_blocks = k.table.shape[1];
        capacity = max_blocks * k.kc.shape[1];
    }
    if (get_seqlens(&k, args[5], k.q.shape[0], capacity)) goto done;

    ta_py_array_view(&Q, &k.q);
    ta_py_array_view(&Kc, &k.kc);
    ta_py_array_view(&Vc, &k.vc);
    if (k.kn.obj) ta_py_array_view(&Kn, &k.kn), ta_py_array_view(&Vn, &k.vn);
    const int64_t oshape[4] = {k.q.shape[0], k.q.shape[1], k.q.shape[2], k.vc.shape[3]};
    const int64_t lshape[3] = {k.q.shape[0], k.q.shape[2], k.q.shape[1]};
    if (!(out = ta_py_new_output(k.q.kind, k.q.elem, 4, oshape, &O))) goto done;
    if (want_lse) {
        if (!(lse = ta_py_new_output(k.q.kind, TA_PY_F32, 3, lshape, &L))) goto done;
        a.opts.lse = &L;
    }
    if (a.zero_scale) { /* scale 0: Q = 0 with scale 1, as in attn.c */
        static const float zero = 0.0f;
        Q.data = (void *)&zero, Q.dtype = TA_F32;
        for (int d = 0; d < 4; d++) Q.stride[d] = 0;
    }
    ta_kv_cache cache = {&Kc, &Vc, k.seqlens, k.block_table, max_blocks};
    ta_status st = TA_EUNSUPPORTED;
    Py_BEGIN_ALLOW_THREADS
    ta_py_enter_call();
#if TA_PY_HAVE_KVCACHE
    st = ta_sdpa_kvcache(&O, &Q, &cache, k.kn.obj ? &Kn : NULL, k.vn.obj ? &Vn : NULL, &a.opts);
#else
    (void)cache, (void)Kn, (void)Vn;
#endif
    ta_py_leave_call();
    Py_END_ALLOW_THREADS
    if (st != TA_OK) {
        ta_py_raise_status(st);
        goto done;
    }
    if (want_lse) result = PyTuple_Pack(2, out, lse);
    else result = (Py_INCREF(out), out);
done:
    Py_XDECREF(out);
    Py_XDECREF(lse);
    kv_release(&k);
    ta_py_attn_args_release(&a);
    return result;
}
