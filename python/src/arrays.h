/* arrays.h -- arrays in and out of the module: NumPy arrays through the buffer protocol,
 * torch tensors (and other producers) through __dlpack__, results of the caller's kind.
 *
 * An input is read in place: a ta_py_array describes the caller's memory as element
 * strides and is turned into a ta_tensor view (no copy) of it. The few cases that need
 * a copy say so: a bool mask becomes a float32 keep mask, integer offsets become int32,
 * and memory that is not aligned to its element (a NumPy view with odd byte strides) is
 * compacted. Outputs are new, C-contiguous arrays of the caller's kind: numpy.empty for
 * NumPy callers, a DLPack capsule over memory the module allocates, handed to
 * torch.from_dlpack, for torch callers (zero copy either way). */
#ifndef TA_PY_ARRAYS_H
#define TA_PY_ARRAYS_H

#include <Python.h>

#include <stdint.h>

#include "tensorattn.h"

/* The element types the module tells apart. */
typedef enum ta_py_elem {
    TA_PY_OTHER = 0,
    TA_PY_F32,
    TA_PY_F16,
    TA_PY_BF16,
    TA_PY_F64,
    TA_PY_BOOL,
    TA_PY_U8,
    TA_PY_I32,
    TA_PY_I64
} ta_py_elem;

/* The caller's kind of array, which is also the kind of the results. */
typedef enum ta_py_kind {
    TA_PY_NUMPY = 0, /* the buffer protocol, or a DLPack producer that is not torch */
    TA_PY_TORCH = 1
} ta_py_kind;

/* A caller's array, borrowed for the length of one call. */
typedef struct ta_py_array {
    PyObject *obj;        /* NULL: the argument was None (when allowed) */
    ta_py_kind kind;
    ta_py_elem elem;
    int ndim;
    int64_t shape[TA_MAX_DIMS];
    int64_t stride[TA_MAX_DIMS]; /* in elements */
    char *data;           /* element [0, ..., 0] */
    Py_buffer buf;        /* valid when has_buf */
    int has_buf;
    PyObject *capsule;    /* the __dlpack__ capsule, kept until release */
    PyObject *proxy;      /* the torch tensor exported for obj (resolve_neg(), bool as uint8) */
    void *copy;           /* memory this struct owns (a converted or compacted copy) */
} ta_py_array;

/* Flags of ta_py_array_get. */
enum {
    TA_PY_WRITABLE = 1, /* the call writes into the array (a KV cache) */
    TA_PY_OPTIONAL = 2, /* None is accepted (a->obj stays NULL) */
    TA_PY_MASK = 4      /* a mask: torch bool tensors are read (as uint8 memory) */
};

/* Fills *a from obj (any rank up to TA_MAX_DIMS); name is the argument's name for
 * messages. Returns 0, or -1 with a Python exception set (TypeError: not an array, an
 * element type this module cannot read; ValueError: a device other than the CPU, a
 * read-only array that must be written). *a must be zeroed before the first call;
 * release it with ta_py_array_release whatever the result. */
int ta_py_array_get(ta_py_array *a, PyObject *obj, const char *name, int flags);
void ta_py_array_release(ta_py_array *a);

/* The ta_tensor view of a (no copy) with the given dtype; a->elem must be one of the
 * float types. */
void ta_py_array_view(ta_tensor *t, const ta_py_array *a);

/* Checks that a holds one of the attention inputs' dtypes (float32; float16 and bfloat16
 * once the library has them): TypeError for float64 and non-float types,
 * NotImplementedError for half precision until then. Returns 0 or -1 (exception set). */
int ta_py_check_float_input(const ta_py_array *a, const char *name);

/* Makes a's memory a new C-contiguous copy (with keep_broadcast, a dim of stride 0 keeps
 * stride 0: one copy of its values), converting bool / uint8 to float32 0/1 when
 * bool_to_f32 is set (a keep mask), else keeping the element type. Returns 0 or -1
 * (MemoryError). */
int ta_py_array_compact(ta_py_array *a, int bool_to_f32, int keep_broadcast);

/* Makes a float16/bfloat16 array a compact float32 copy (broadcast dims kept), converted
 * by the library (ta_convert; TA_PY_HAVE_HALF). Returns 0 or -1 (exception set). */
int ta_py_array_widen(ta_py_array *a);

/* A C-order int32 copy (malloc'ed; free() it) of an integer array (int32 or int64) of
 * rank ndim, each value checked to fit int32. NULL with an exception set on failure. */
int32_t *ta_py_int32_copy(const ta_py_array *a, const char *name, int ndim);

/* A new C-contiguous output of the given kind, element type (a float type) and shape;
 * *t becomes a view of it (with the matching ta_dtype). Returns a new reference or NULL
 * with an exception set. */
PyObject *ta_py_new_output(ta_py_kind kind, ta_py_elem elem, int ndim, const int64_t *shape,
                           ta_tensor *t);

/* Element type -> library dtype ((ta_dtype)-1, which the library refuses, for a type that
 * is not a float) and names. */
ta_dtype ta_py_elem_dtype(ta_py_elem e);
const char *ta_py_elem_name(ta_py_elem e);

/* Raises the exception of a failed library call: ValueError (TA_EINVAL, TA_ESHAPE),
 * TypeError (TA_EUNSUPPORTED), MemoryError (TA_ENOMEM), RuntimeError (others), with
 * ta_last_error()'s message. Returns NULL. */
PyObject *ta_py_raise_status(ta_status st);

/* NotImplementedError for a feature the library does not have yet. Returns NULL. */
PyObject *ta_py_not_implemented(const char *what, const char *feature);

/* Whether any of objs[0..n-1] is a torch tensor that requires grad while torch records
 * gradients (None and NumPy arrays never are): 1, 0, or -1 with an exception set. */
int ta_py_needs_grad(PyObject *const *objs, Py_ssize_t n);

/* Module-wide state (module.c). */
int ta_py_torch_is_tensor_type(PyTypeObject *type);
PyObject *ta_py_torch_attr(const char *name); /* borrowed: torch.<name>, cached */
PyObject *ta_py_numpy_empty(void);            /* borrowed: numpy.empty, cached */
PyObject *ta_py_numpy_dtype(const char *name); /* borrowed: numpy.dtype(name), cached */
PyObject *ta_py_torch_from_dlpack(void);       /* borrowed: torch's capsule importer */

/* Library calls with the GIL released run between ta_py_enter_call and ta_py_leave_call:
 * a read lock that set_num_threads takes for writing (the library's thread count must not
 * change under a running call). */
void ta_py_enter_call(void);
void ta_py_leave_call(void);

#endif /* TA_PY_ARRAYS_H */
