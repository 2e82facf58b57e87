/* attn.h -- the attention calls of the module (attn.c, kvcache.c) and what they share. */
#ifndef TA_PY_ATTN_H
#define TA_PY_ATTN_H

#include "arrays.h"

/* The caller's memory layout of Q, K, V and O. */
enum {
    TA_PY_LAYOUT_TORCH = 0,  /* [..., H, L, D]: scaled_dot_product_attention */
    TA_PY_LAYOUT_FLASH = 1,  /* [B, L, H, D]: flash_attn_func */
    TA_PY_LAYOUT_VARLEN = 2  /* [T, H, D] with cu_seqlens: flash_attn_varlen_func */
};

/* The options block's length (see ta_py_attn_args_parse). */
#define TA_PY_ATTN_OPTS 12

/* The options of one attention call, read from Python, and what they own. */
typedef struct ta_py_attn_args {
    int layout;
    int gqa;
    int zero_scale;           /* an explicit scale of 0: run with Q = 0 and scale 1 */
    ta_sdpa_opts opts;
    ta_py_array mask, alibi;
    ta_tensor M, A;           /* the library's views of the mask and the slopes */
    int32_t *cu_q32, *cu_k32; /* varlen offsets as int32 */
} ta_py_attn_args;

/* Reads the options block o[0 .. TA_PY_ATTN_OPTS-1]: mask (read later), causal (0 none,
 * 1 top-left, 2 bottom-right), scale (None or a float), enable_gqa, window_left,
 * window_right, softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
 * max_seqlen_k. A feature this build lacks raises NotImplementedError here, before any
 * array is read. Returns 0 or -1 (exception set); release *a either way. */
int ta_py_attn_args_parse(ta_py_attn_args *a, long layout, PyObject *const *o);
void ta_py_attn_args_release(ta_py_attn_args *a);

/* The library's view of x in the given layout (tail 3: Q, K, V, O; 2: the LSE). Returns
 * -1 when torch-layout batch dims do not merge into one. */
int ta_py_layout_view(ta_tensor *t, const ta_tensor *x, int layout, int tail);

/* The module's functions (METH_FASTCALL). */
PyObject *ta_py_attention(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *ta_py_attention_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *ta_py_attention_kvcache(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *ta_py_last_inputs(PyObject *self, PyObject *unused);

#endif /* TA_PY_ATTN_H */
