/* module.c -- tensorattn._C: the extension module (CPython limited API 3.11, no NumPy C
 * API). The public functions, their signatures and docstrings are Python
 * (python/tensorattn/__init__.py); this module holds the calls into the library:
 *   attention, attention_backward, attention_kvcache   attn.c, kvcache.c
 *   einsum, set_num_threads, get_num_threads           here
 *   grad_needed                                        here: the autograd test
 *                                                      (attention() makes it itself)
 * and module-wide state: cached numpy.empty and torch attributes, and the lock that keeps
 * set_num_threads away from running calls. */
#include "arrays.h"
#include "attn.h"
#include "features.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ state */

/* Calls run (GIL released) under the read side; set_num_threads takes the write side, so
 * that the thread count never changes between a call's workspace sizing and its run. */
static pthread_rwlock_t calls_lock = PTHREAD_RWLOCK_INITIALIZER;

void ta_py_enter_call(void) { pthread_rwlock_rdlock(&calls_lock); }
void ta_py_leave_call(void) { pthread_rwlock_unlock(&calls_lock); }

static PyObject *torch_module, *torch_tensor_type, *numpy_empty;
static struct {
    const char *name;
    PyObject *value;
} torch_attrs[8];

PyObject *ta_py_torch_attr(const char *name)
{
    int i = 0;
    for (; i < 8 && torch_attrs[i].name; i++)
        if (!strcmp(torch_attrs[i].name, name)) return torch_attrs[i].value;
    if (i == 8) {
        PyErr_SetString(PyExc_SystemError, "tensorattn: more torch attributes than cached");
        return NULL;
    }
    if (!torch_module && !(torch_module = PyImport_ImportModule("torch"))) return NULL;
    PyObject *v = PyObject_GetAttrString(torch_module, name);
    if (v) torch_attrs[i].name = name, torch_attrs[i].value = v; /* kept for good */
    return v; /* borrowed: the cache holds it */
}

int ta_py_torch_is_tensor_type(PyTypeObject *type)
{
    if (!torch_tensor_type) {
        PyObject *name = PyUnicode_FromString("torch");
        PyObject *mod = name ? PyImport_GetModule(name) : NULL; /* only if torch is loaded */
        Py_XDECREF(name);
        if (!mod) {
            PyErr_Clear();
            return 0;
        }
        torch_tensor_type = PyObject_GetAttrString(mod, "Tensor");
        Py_DECREF(mod);
        if (!torch_tensor_type) {
            PyErr_Clear();
            return 0;
        }
    }
    return PyType_IsSubtype(type, (PyTypeObject *)torch_tensor_type);
}

/* torch._C._from_dlpack (what torch.from_dlpack calls for a capsule, without its Python
 * wrapper: a microsecond less per result), or torch.from_dlpack where it is missing. */
PyObject *ta_py_torch_from_dlpack(void)
{
    static PyObject *f;
    if (f) return f;
    PyObject *c = ta_py_torch_attr("_C");
    if (!c) return NULL;
    if (!(f = PyObject_GetAttrString(c, "_from_dlpack"))) {
        PyErr_Clear();
        f = ta_py_torch_attr("from_dlpack");
        Py_XINCREF(f);
    }
    return f;
}

PyObject *ta_py_numpy_dtype(const char *name)
{
    static struct {
        const char *name;
        PyObject *dtype;
    } cache[4];
    int i = 0;
    for (; i < 4 && cache[i].name; i++)
        if (!strcmp(cache[i].name, name)) return cache[i].dtype;
    PyObject *np = i < 4 ? PyImport_ImportModule("numpy") : NULL;
    PyObject *dtype = np ? PyObject_CallMethod(np, "dtype", "s", name) : NULL;
    Py_XDECREF(np);
    if (dtype) cache[i].name = name, cache[i].dtype = dtype;
    else if (i == 4) PyErr_SetString(PyExc_SystemError, "tensorattn: dtype cache full");
    return dtype;
}

PyObject *ta_py_numpy_empty(void)
{
    if (!numpy_empty) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (!np) return NULL;
        numpy_empty = PyObject_GetAttrString(np, "empty");
        Py_DECREF(np);
    }
    return numpy_empty;
}

/* ------------------------------------------------------------ autograd */

int ta_py_needs_grad(PyObject *const *objs, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = objs[i];
        if (o == Py_None || PyObject_CheckBuffer(o) || !ta_py_torch_is_tensor_type(Py_TYPE(o)))
            continue;
        static PyObject *name;
        if (!name && !(name = PyUnicode_InternFromString("requires_grad"))) return -1;
        PyObject *rg = PyObject_GetAttr(o, name);
        if (!rg) return -1;
        int yes = PyObject_IsTrue(rg);
        Py_DECREF(rg);
        if (yes < 0) return -1;
        if (!yes) continue;
        PyObject *enabled = ta_py_torch_attr("is_grad_enabled");
        PyObject *r = enabled ? PyObject_CallNoArgs(enabled) : NULL;
        int on = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        return on;
    }
    return 0;
}

/* grad_needed(*arrays): whether torch must record a graph for them. */
static PyObject *grad_needed(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    int r = ta_py_needs_grad(args, nargs);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* ------------------------------------------------------------ einsum */

/* einsum(spec, a[, b]) -> the result, of a's kind */
static PyObject *einsum(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "einsum(spec, a[, b])");
        return NULL;
    }
    Py_ssize_t len = 0;
    const char *spec = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8AndSize(args[0], &len) : NULL;
    if (!spec) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "einsum: spec must be a str");
        return NULL;
    }
    /* the library reads a C string: a NUL would end the spec early and run what precedes it */
    if ((Py_ssize_t)strlen(spec) != len) {
        PyErr_Format(PyExc_ValueError, "einsum: spec has an invalid character (code 0) at "
                     "position %zd; indices must be letters a-z or A-Z", (Py_ssize_t)strlen(spec));
        return NULL;
    }
    static const char *const names[2] = {"einsum operand 0", "einsum operand 1"};
    ta_py_array x[2] = {{0}};
    ta_tensor in[2], out_view;
    PyObject *out = NULL;
    int n = (int)nargs - 1;
    for (int i = 0; i < n; i++) {
        if (ta_py_array_get(&x[i], args[1 + i], names[i], 0)) goto fail;
        if (x[i].elem != TA_PY_F32) {
            PyErr_Format(PyExc_TypeError, "%s has dtype %s; einsum takes float32%s", names[i],
                         ta_py_elem_name(x[i].elem),
                         x[i].elem == TA_PY_F64 ? ": convert it first" : "");
            goto fail;
        }
        ta_py_array_view(&in[i], &x[i]);
    }
    int ndim;
    int64_t shape[TA_MAX_DIMS];
    ta_status st = ta_einsum_shape(&ndim, shape, spec, &in[0], n == 2 ? &in[1] : NULL);
    if (st) {
        ta_py_raise_status(st);
        goto fail;
    }
    if (!(out = ta_py_new_output(x[0].kind, TA_PY_F32, ndim, shape, &out_view))) goto fail;
    Py_BEGIN_ALLOW_THREADS
    ta_py_enter_call();
    st = n == 2 ? ta_einsum(&out_view, spec, &in[0], &in[1]) : ta_einsum1(&out_view, spec, &in[0]);
    ta_py_leave_call();
    Py_END_ALLOW_THREADS
    if (st) {
        ta_py_raise_status(st);
        Py_CLEAR(out);
    }
fail:
    for (int i = 0; i < 2; i++) ta_py_array_release(&x[i]);
    return out;
}

/* ------------------------------------------------------------ threads */

static PyObject *set_num_threads(PyObject *self, PyObject *arg)
{
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 1 || n > 1 << 20) {
        PyErr_Format(PyExc_ValueError, "set_num_threads: n must be >= 1, got %ld", n);
        return NULL;
    }
    ta_status st;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&calls_lock);
    st = ta_set_num_threads((int)n);
    pthread_rwlock_unlock(&calls_lock);
    Py_END_ALLOW_THREADS
    if (st) return ta_py_raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *get_num_threads(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyLong_FromLong(ta_get_num_threads());
}

/* ------------------------------------------------------------ timing */

/* _time_c_sdpa(B, H, L, S, D, calls) -> seconds per ta_sdpa call timed in C (the Python
 * module's overhead is measured against it): contiguous float32 N(0,1) inputs, default
 * options, the calls back to back with the GIL released. */
static PyObject *time_c_sdpa(PyObject *self, PyObject *args)
{
    (void)self;
    long long B, H, L, S, D, calls;
    if (!PyArg_ParseTuple(args, "LLLLLL", &B, &H, &L, &S, &D, &calls)) return NULL;
    const int64_t qs[4] = {B, H, L, D}, ks[4] = {B, H, S, D};
    ta_tensor t[4] = {{0}};
    ta_status st = ta_tensor_empty(&t[0], 4, qs);
    if (!st) st = ta_tensor_empty(&t[1], 4, ks);
    if (!st) st = ta_tensor_empty(&t[2], 4, ks);
    if (!st) st = ta_tensor_empty(&t[3], 4, qs);
    for (int i = 0; i < 3 && !st; i++) st = ta_randn(&t[i], (uint64_t)i + 1);
    double seconds = 0.0;
    Py_BEGIN_ALLOW_THREADS
    ta_py_enter_call();
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long long i = 0; i < calls && !st; i++) st = ta_sdpa(&t[3], &t[0], &t[1], &t[2], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    seconds = ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec)) /
              (double)(calls > 0 ? calls : 1);
    ta_py_leave_call();
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 4; i++) ta_tensor_free(&t[i]);
    if (st) return ta_py_raise_status(st);
    return PyFloat_FromDouble(seconds);
}

/* ------------------------------------------------------------ module */

#define FASTCALL(f) ((PyCFunction)(void (*)(void))(f)), METH_FASTCALL

static PyMethodDef methods[] = {
    {"attention", FASTCALL(ta_py_attention),
     "attention(layout, q, k, v, want_lse, mask, causal, scale, gqa, window_left, "
     "window_right, softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, "
     "max_seqlen_k) -> out or (out, lse): the forward of every layout (internal)"},
    {"attention_backward", FASTCALL(ta_py_attention_backward),
     "attention_backward(layout, grad_out, q, k, v, out, lse, <options as attention>) -> "
     "(dq, dk, dv) (internal)"},
    {"attention_kvcache", FASTCALL(ta_py_attention_kvcache),
     "attention_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, want_lse, "
     "<options as attention>) -> out or (out, lse) (internal)"},
    {"einsum", FASTCALL(einsum), "einsum(spec, a[, b]) -> result (internal)"},
    {"grad_needed", FASTCALL(grad_needed),
     "grad_needed(*arrays) -> whether torch must record a graph for them (internal)"},
    {"set_num_threads", set_num_threads, METH_O, "set_num_threads(n): see tensorattn"},
    {"get_num_threads", get_num_threads, METH_NOARGS, "get_num_threads(): see tensorattn"},
    {"_last_inputs", ta_py_last_inputs, METH_NOARGS,
     "_last_inputs() -> the data pointers of Q, K, V and the mask as the library got them "
     "in this thread's last attention call (tests)"},
    {"_time_c_sdpa", time_c_sdpa, METH_VARARGS,
     "_time_c_sdpa(B, H, L, S, D, calls) -> seconds per ta_sdpa call timed in C"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_C",
    "tensorattn's extension module: the library's calls (use the functions of the "
    "tensorattn package).",
    -1, methods, NULL, NULL, NULL, NULL};

static int add_features(PyObject *m)
{
    PyObject *f = Py_BuildValue(
        "{s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "float16", TA_PY_HAVE_HALF ? Py_True : Py_False,
        "bfloat16", TA_PY_HAVE_HALF ? Py_True : Py_False, "varlen",
        TA_PY_HAVE_VARLEN ? Py_True : Py_False, "kvcache", TA_PY_HAVE_KVCACHE ? Py_True : Py_False,
        "window", TA_PY_HAVE_WINDOW ? Py_True : Py_False, "softcap",
        TA_PY_HAVE_SOFTCAP ? Py_True : Py_False, "alibi", TA_PY_HAVE_ALIBI ? Py_True : Py_False);
    return f ? PyModule_AddObject(m, "features", f) : -1;
}

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (add_features(m) || PyModule_AddStringConstant(m, "library_version", ta_version()) ||
        PyModule_AddStringConstant(m, "isa", ta_isa_name(ta_active_isa()))) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
