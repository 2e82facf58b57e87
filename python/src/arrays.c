/* arrays.c -- reading the caller's arrays (buffer protocol, __dlpack__) and making
 * results of the caller's kind. See arrays.h. */
#include "arrays.h"

#include "dlpack.h"
#include "features.h"

#include <stdlib.h>
#include <string.h>

static size_t elem_size(ta_py_elem e)
{
    switch (e) {
    case TA_PY_F32: case TA_PY_I32: return 4;
    case TA_PY_F16: case TA_PY_BF16: return 2;
    case TA_PY_F64: case TA_PY_I64: return 8;
    case TA_PY_BOOL: case TA_PY_U8: return 1;
    default: return 0;
    }
}

const char *ta_py_elem_name(ta_py_elem e)
{
    static const char *const names[] = {"an unsupported type", "float32", "float16",
                                        "bfloat16", "float64", "bool", "uint8", "int32",
                                        "int64"};
    return (unsigned)e < sizeof names / sizeof names[0] ? names[e] : names[0];
}

ta_dtype ta_py_elem_dtype(ta_py_elem e)
{
    /* Not a float type: a dtype the library refuses, never memory read as the wrong type. */
    return e == TA_PY_F32 ? TA_F32 : e == TA_PY_F16 ? TA_F16 : e == TA_PY_BF16 ? TA_BF16
         : e == TA_PY_F64 ? TA_F64 : (ta_dtype)-1;
}

/* ------------------------------------------------------------------ errors */

PyObject *ta_py_raise_status(ta_status st)
{
    PyObject *type = st == TA_EINVAL || st == TA_ESHAPE ? PyExc_ValueError
                     : st == TA_EUNSUPPORTED          ? PyExc_TypeError
                     : st == TA_ENOMEM                ? PyExc_MemoryError
                                                      : PyExc_RuntimeError;
    const char *msg = ta_last_error();
    PyErr_Format(type, "%s", msg && *msg ? msg : ta_status_name(st));
    return NULL;
}

PyObject *ta_py_not_implemented(const char *what, const char *feature)
{
    PyErr_Format(PyExc_NotImplementedError,
                 "%s needs %s, which this build of the tensorattn library does not have yet",
                 what, feature);
    return NULL;
}

/* ---------------------------------------------------------- element types */

/* A PEP 3118 format string of one native or little-endian element. */
static ta_py_elem elem_of_format(const char *f, Py_ssize_t itemsize)
{
    if (!f) return itemsize == 1 ? TA_PY_U8 : TA_PY_OTHER; /* "B" is implied */
    if (*f == '@' || *f == '=' || *f == '<') f++;
    else if ((*f == '>' || *f == '!') && itemsize > 1) return TA_PY_OTHER; /* big-endian */
    if (!f[0] || f[1]) return TA_PY_OTHER;
    switch (*f) {
    case 'f': return itemsize == 4 ? TA_PY_F32 : TA_PY_OTHER;
    case 'e': return itemsize == 2 ? TA_PY_F16 : TA_PY_OTHER;
    case 'd': return itemsize == 8 ? TA_PY_F64 : TA_PY_OTHER;
    case '?': return itemsize == 1 ? TA_PY_BOOL : TA_PY_OTHER;
    case 'B': return itemsize == 1 ? TA_PY_U8 : TA_PY_OTHER;
    case 'i': case 'l': case 'q': case 'n':
        return itemsize == 4 ? TA_PY_I32 : itemsize == 8 ? TA_PY_I64 : TA_PY_OTHER;
    default: return TA_PY_OTHER;
    }
}

static ta_py_elem elem_of_dlpack(DLDataType t)
{
    if (t.lanes != 1) return TA_PY_OTHER;
    switch (t.code) {
    case kDLFloat: return t.bits == 32 ? TA_PY_F32 : t.bits == 16 ? TA_PY_F16
                        : t.bits == 64 ? TA_PY_F64 : TA_PY_OTHER;
    case kDLBfloat: return t.bits == 16 ? TA_PY_BF16 : TA_PY_OTHER;
    case kDLBool: return t.bits == 8 ? TA_PY_BOOL : TA_PY_OTHER;
    case kDLUInt: return t.bits == 8 ? TA_PY_U8 : TA_PY_OTHER;
    case kDLInt: return t.bits == 32 ? TA_PY_I32 : t.bits == 64 ? TA_PY_I64 : TA_PY_OTHER;
    default: return TA_PY_OTHER;
    }
}

/* ---------------------------------------------------------------- copies */

/* Copies a's elements (at byte strides bstride from a->data, itemsize bytes each) into a
 * new C-contiguous buffer, except that with keep_broadcast a dim of stride 0 stays of
 * stride 0 (one copy of its values). With to_f32, bool/uint8 elements become float32 0/1. */
static int compact_from_bytes(ta_py_array *a, const int64_t *bstride, size_t itemsize,
                              int to_f32, int keep_broadcast)
{
    size_t out_size = to_f32 ? sizeof(float) : itemsize, count = 1;
    int64_t dst_stride[TA_MAX_DIMS], extent[TA_MAX_DIMS];
    for (int d = a->ndim - 1; d >= 0; d--) {
        int broadcast = keep_broadcast && bstride[d] == 0;
        extent[d] = broadcast ? 1 : a->shape[d];
        dst_stride[d] = broadcast ? 0 : (int64_t)count;
        count *= (size_t)extent[d];
    }
    char *dst = malloc((count ? count : 1) * out_size);
    if (!dst) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t idx[TA_MAX_DIMS] = {0};
    for (size_t n = 0; n < count; n++) {
        const char *src = a->data;
        int64_t off = 0;
        for (int d = 0; d < a->ndim; d++) {
            src += idx[d] * bstride[d];
            off += idx[d] * dst_stride[d];
        }
        if (to_f32) ((float *)dst)[off] = *(const unsigned char *)src ? 1.0f : 0.0f;
        else memcpy(dst + (size_t)off * itemsize, src, itemsize);
        for (int d = a->ndim - 1; d >= 0; d--) { /* odometer */
            if (++idx[d] < extent[d]) break;
            idx[d] = 0;
        }
    }
    free(a->copy);
    a->copy = dst;
    a->data = dst;
    for (int d = 0; d < a->ndim; d++) a->stride[d] = dst_stride[d];
    if (to_f32) a->elem = TA_PY_F32;
    return 0;
}

int ta_py_array_compact(ta_py_array *a, int bool_to_f32, int keep_broadcast)
{
    size_t size = elem_size(a->elem);
    int64_t bstride[TA_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++)
        bstride[d] = a->shape[d] == 1 ? 0 : a->stride[d] * (int64_t)size;
    return compact_from_bytes(a, bstride, size, bool_to_f32, keep_broadcast);
}

int ta_py_array_widen(ta_py_array *a)
{
#if TA_PY_HAVE_HALF
    if (ta_py_array_compact(a, 0, 1)) return -1;
    size_t n = 1;
    for (int d = 0; d < a->ndim; d++)
        if (a->stride[d] != 0) n *= (size_t)a->shape[d];
    float *dst = malloc((n ? n : 1) * sizeof *dst);
    if (!dst) {
        PyErr_NoMemory();
        return -1;
    }
    ta_status st = ta_convert(dst, TA_F32, a->data, ta_py_elem_dtype(a->elem), n);
    if (st) {
        free(dst);
        ta_py_raise_status(st);
        return -1;
    }
    free(a->copy); /* element strides stay: the layout is the same, the elements wider */
    a->copy = a->data = (char *)dst;
    a->elem = TA_PY_F32;
    return 0;
#else
    (void)a;
    ta_py_not_implemented("a float16/bfloat16 mask", "float16/bfloat16 support (issue 11)");
    return -1;
#endif
}

/* Byte strides -> element strides; memory not aligned to its element is compacted,
 * unless the call writes into it (writable: name's writes would go to the copy and be
 * lost), which is a ValueError. */
static int set_strides(ta_py_array *a, const int64_t *bstride, int elements, int writable,
                       const char *name)
{
    size_t size = elem_size(a->elem);
    int aligned = size == 0 || (uintptr_t)a->data % size == 0;
    for (int d = 0; d < a->ndim; d++) {
        int64_t s = elements ? bstride[d] * (int64_t)size : bstride[d];
        if (size && s % (int64_t)size != 0) aligned = 0;
    }
    if (!aligned && writable) {
        PyErr_Format(PyExc_ValueError, "%s is not aligned to its %zu-byte elements, and the "
                     "call writes into it in place: pass an aligned array", name, size);
        return -1;
    }
    if (!aligned) {
        int64_t bytes[TA_MAX_DIMS];
        for (int d = 0; d < a->ndim; d++) bytes[d] = elements ? bstride[d] * (int64_t)size : bstride[d];
        return compact_from_bytes(a, bytes, size, 0, 0);
    }
    for (int d = 0; d < a->ndim; d++)
        a->stride[d] = elements || !size ? bstride[d] : bstride[d] / (int64_t)size;
    return 0;
}

static int check_rank(int ndim, const char *name)
{
    if (ndim < 0 || ndim > TA_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s has %d dims; tensorattn takes at most %d", name,
                     ndim, TA_MAX_DIMS);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- inputs */

static int from_buffer(ta_py_array *a, PyObject *obj, const char *name, int flags)
{
    int req = PyBUF_STRIDES | PyBUF_FORMAT | ((flags & TA_PY_WRITABLE) ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &a->buf, req) < 0) {
        if (flags & TA_PY_WRITABLE) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be writable (the call writes into it), "
                         "and a read-only buffer was passed", name);
        }
        return -1;
    }
    a->has_buf = 1;
    a->kind = TA_PY_NUMPY;
    a->elem = elem_of_format(a->buf.format, a->buf.itemsize);
    a->data = a->buf.buf;
    if (check_rank(a->buf.ndim, name)) return -1;
    a->ndim = a->buf.ndim;
    int64_t bstride[TA_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        a->shape[d] = a->buf.shape[d];
        bstride[d] = a->buf.strides[d];
    }
    return set_strides(a, bstride, 0, flags & TA_PY_WRITABLE, name);
}

/* The capsule of a torch tensor, from torch.to_dlpack: torch's own exporter, without the
 * Python-level checks of Tensor.__dlpack__ (which refuses tensors that require grad; the
 * library only reads them). Exported is obj.resolve_neg() (itself unless obj is a view
 * with the negative bit, such as x.conj().imag, whose memory holds minus its values: a
 * DLPack consumer would read them unnegated) and, for a mask, a bool tensor viewed as
 * uint8 (torch 1.13 cannot export bool). */
static PyObject *torch_capsule(ta_py_array *a, PyObject *obj, int flags, int *is_bool)
{
    static PyObject *resolve_neg, *view;
    if (!resolve_neg && !(resolve_neg = PyUnicode_InternFromString("resolve_neg"))) return NULL;
    if (!(a->proxy = PyObject_CallMethodObjArgs(obj, resolve_neg, NULL))) return NULL;
    if (flags & TA_PY_MASK) {
        PyObject *dtype = PyObject_GetAttrString(a->proxy, "dtype");
        PyObject *tbool = ta_py_torch_attr("bool"), *u8 = ta_py_torch_attr("uint8");
        *is_bool = dtype && tbool && dtype == tbool;
        Py_XDECREF(dtype);
        if (!dtype || !tbool || !u8) return NULL;
        if (*is_bool) {
            if (!view && !(view = PyUnicode_InternFromString("view"))) return NULL;
            PyObject *v = PyObject_CallMethodObjArgs(a->proxy, view, u8, NULL);
            if (!v) return NULL;
            Py_DECREF(a->proxy);
            a->proxy = v;
        }
    }
    PyObject *to_dlpack = ta_py_torch_attr("to_dlpack");
    return to_dlpack ? PyObject_CallFunctionObjArgs(to_dlpack, a->proxy, NULL) : NULL;
}

/* The exception of a failed export, naming the argument: TypeError for a torch tensor of
 * a dtype DLPack lacks (bool in torch 1.13), else ValueError (a meta or sparse tensor, a
 * producer that refused). */
static void export_error(const ta_py_array *a, PyObject *obj, const char *name)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *dtype = a->kind == TA_PY_TORCH ? PyObject_GetAttrString(obj, "dtype") : NULL;
    PyObject *tbool = dtype ? ta_py_torch_attr("bool") : NULL;
    if (dtype && dtype == tbool)
        PyErr_Format(PyExc_TypeError, "%s has dtype bool; expected float32", name);
    else
        PyErr_Format(PyExc_ValueError, "%s cannot be read through DLPack: %S", name,
                     value ? value : Py_None);
    Py_XDECREF(dtype);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static const char *device_name(int type)
{
    switch (type) {
    case kDLCUDA: case kDLCUDAManaged: return "CUDA";
    case kDLROCM: return "ROCm";
    case kDLMetal: return "Metal";
    case kDLOneAPI: return "oneAPI";
    case kDLVulkan: return "Vulkan";
    default: return "non-CPU";
    }
}

static int from_dlpack(ta_py_array *a, PyObject *obj, const char *name, int flags)
{
    int is_bool = 0;
    a->kind = ta_py_torch_is_tensor_type(Py_TYPE(obj)) ? TA_PY_TORCH : TA_PY_NUMPY;
    if (a->kind == TA_PY_TORCH) {
        a->capsule = torch_capsule(a, obj, flags, &is_bool);
    } else {
        PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
        if (!meth) {
            PyErr_Clear();
            PyObject *tname = PyType_GetName(Py_TYPE(obj));
            if (tname)
                PyErr_Format(PyExc_TypeError, "%s must be a NumPy array or a torch CPU tensor "
                             "(an object with the buffer protocol or __dlpack__), not %U", name,
                             tname);
            Py_XDECREF(tname);
            return -1;
        }
        a->capsule = PyObject_CallNoArgs(meth);
        Py_DECREF(meth);
    }
    if (!a->capsule) {
        export_error(a, obj, name);
        return -1;
    }
    DLManagedTensor *m = PyCapsule_IsValid(a->capsule, "dltensor")
                             ? PyCapsule_GetPointer(a->capsule, "dltensor")
                             : NULL;
    if (!m) {
        PyErr_Format(PyExc_TypeError, "%s.__dlpack__() did not return a \"dltensor\" capsule",
                     name);
        return -1;
    }
    const DLTensor *t = &m->dl_tensor;
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) {
        PyErr_Format(PyExc_ValueError, "%s is on a %s device (DLPack device type %d); "
                     "tensorattn computes on the CPU: pass a CPU tensor (.cpu())", name,
                     device_name(t->device.device_type), (int)t->device.device_type);
        return -1;
    }
    if (check_rank(t->ndim, name)) return -1;
    a->elem = is_bool ? TA_PY_BOOL : elem_of_dlpack(t->dtype);
    a->ndim = t->ndim;
    a->data = (char *)t->data + t->byte_offset;
    int64_t estride[TA_MAX_DIMS], next = 1;
    for (int d = a->ndim - 1; d >= 0; d--) {
        a->shape[d] = t->shape[d];
        estride[d] = t->strides ? t->strides[d] : next;
        next *= t->shape[d];
    }
    /* DLPack 0.8 has no read-only flag: torch tensors are writable */
    return set_strides(a, estride, 1, flags & TA_PY_WRITABLE, name);
}

int ta_py_array_get(ta_py_array *a, PyObject *obj, const char *name, int flags)
{
    if (obj == Py_None) {
        if (flags & TA_PY_OPTIONAL) return 0;
        PyErr_Format(PyExc_TypeError, "%s must be an array, not None", name);
        return -1;
    }
    a->obj = obj;
    return PyObject_CheckBuffer(obj) ? from_buffer(a, obj, name, flags)
                                     : from_dlpack(a, obj, name, flags);
}

void ta_py_array_release(ta_py_array *a)
{
    if (a->has_buf) PyBuffer_Release(&a->buf);
    Py_XDECREF(a->capsule);
    Py_XDECREF(a->proxy);
    free(a->copy);
    memset(a, 0, sizeof *a);
}

void ta_py_array_view(ta_tensor *t, const ta_py_array *a)
{
    memset(t, 0, sizeof *t);
    t->data = a->data;
    t->dtype = ta_py_elem_dtype(a->elem);
    t->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) {
        t->shape[d] = a->shape[d];
        t->stride[d] = a->stride[d];
    }
}

int ta_py_check_float_input(const ta_py_array *a, const char *name)
{
    switch (a->elem) {
    case TA_PY_F32: return 0;
    case TA_PY_F16: case TA_PY_BF16:
        if (TA_PY_HAVE_HALF) return 0;
        PyErr_Format(PyExc_NotImplementedError,
                     "%s has dtype %s: half-precision inputs need the library's float16/"
                     "bfloat16 support (issue 11), which this build of tensorattn does not "
                     "have yet; convert to float32", name, ta_py_elem_name(a->elem));
        return -1;
    case TA_PY_F64:
        PyErr_Format(PyExc_TypeError, "%s has dtype float64; tensorattn computes in float32: "
                     "convert it first (tensor.float() or array.astype(numpy.float32))", name);
        return -1;
    default:
        PyErr_Format(PyExc_TypeError, "%s has dtype %s; expected float32%s", name,
                     ta_py_elem_name(a->elem), TA_PY_HAVE_HALF ? ", float16 or bfloat16" : "");
        return -1;
    }
}

int32_t *ta_py_int32_copy(const ta_py_array *a, const char *name, int ndim)
{
    if (a->elem != TA_PY_I32 && a->elem != TA_PY_I64) {
        PyErr_Format(PyExc_TypeError, "%s has dtype %s; expected int32 or int64", name,
                     ta_py_elem_name(a->elem));
        return NULL;
    }
    if (a->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must have %d dim%s, got %d", name, ndim,
                     ndim == 1 ? "" : "s", a->ndim);
        return NULL;
    }
    size_t count = 1, size = elem_size(a->elem);
    for (int d = 0; d < ndim; d++) count *= (size_t)a->shape[d];
    int32_t *out = malloc((count ? count : 1) * sizeof *out);
    if (!out) return (int32_t *)PyErr_NoMemory();
    int64_t idx[TA_MAX_DIMS] = {0};
    for (size_t n = 0; n < count; n++) {
        const char *p = a->data;
        for (int d = 0; d < ndim; d++) p += idx[d] * a->stride[d] * (int64_t)size;
        int64_t v = a->elem == TA_PY_I32 ? *(const int32_t *)p : *(const int64_t *)p;
        if (v < INT32_MIN || v > INT32_MAX) {
            free(out);
            PyErr_Format(PyExc_ValueError, "%s holds %lld, which does not fit int32", name,
                         (long long)v);
            return NULL;
        }
        out[n] = (int32_t)v;
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < a->shape[d]) break;
            idx[d] = 0;
        }
    }
    return out;
}

/* --------------------------------------------------------------- outputs */

static void managed_free(DLManagedTensor *self) { free(self); }

static void capsule_destructor(PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, "dltensor")) return; /* consumed: the tensor owns it */
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

static PyObject *new_torch_output(ta_py_elem elem, int ndim, const int64_t *shape, void **data)
{
    size_t size = elem_size(elem), count = 1;
    for (int d = 0; d < ndim; d++) count *= (size_t)shape[d];
    size_t head = (sizeof(DLManagedTensor) + 2 * (size_t)ndim * sizeof(int64_t) + 63) / 64 * 64;
    size_t bytes = (count * size + 63) / 64 * 64;
    if (count && count > (SIZE_MAX - head) / size / 2) return PyErr_NoMemory();
    DLManagedTensor *m = aligned_alloc(64, head + (bytes ? bytes : 64));
    if (!m) return PyErr_NoMemory();
    int64_t *shp = (int64_t *)(m + 1), *str = shp + ndim, next = 1;
    for (int d = ndim - 1; d >= 0; d--) { /* empty dims count as 1: no stride 0 */
        shp[d] = shape[d];
        str[d] = next;
        next *= shape[d] > 1 ? shape[d] : 1;
    }
    *data = (char *)m + head;
    m->dl_tensor = (DLTensor){
        .data = *data, .device = {kDLCPU, 0}, .ndim = ndim,
        .dtype = {elem == TA_PY_BF16 ? kDLBfloat : kDLFloat, (uint8_t)(8 * size), 1},
        .shape = shp, .strides = str, .byte_offset = 0};
    m->manager_ctx = NULL;
    m->deleter = managed_free;
    PyObject *capsule = PyCapsule_New(m, "dltensor", capsule_destructor);
    if (!capsule) {
        free(m);
        return NULL;
    }
    PyObject *from_dlpack = ta_py_torch_from_dlpack();
    PyObject *out = from_dlpack ? PyObject_CallFunctionObjArgs(from_dlpack, capsule, NULL) : NULL;
    Py_DECREF(capsule); /* unconsumed on failure: its destructor frees m */
    return out;
}

static PyObject *new_numpy_output(ta_py_elem elem, int ndim, const int64_t *shape, void **data)
{
    PyObject *empty = ta_py_numpy_empty();
    if (!empty) return NULL;
    PyObject *dims = PyTuple_New(ndim);
    if (!dims) return NULL;
    for (int d = 0; d < ndim; d++) {
        PyObject *v = PyLong_FromLongLong(shape[d]);
        if (!v) {
            Py_DECREF(dims);
            return NULL;
        }
        PyTuple_SetItem(dims, d, v);
    }
    PyObject *dtype = ta_py_numpy_dtype(ta_py_elem_name(elem));
    PyObject *out = dtype ? PyObject_CallFunctionObjArgs(empty, dims, dtype, NULL) : NULL;
    Py_DECREF(dims);
    if (!out) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(out, &b, PyBUF_CONTIG) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    *data = b.buf; /* the array keeps its memory while we hold it */
    PyBuffer_Release(&b);
    return out;
}

PyObject *ta_py_new_output(ta_py_kind kind, ta_py_elem elem, int ndim, const int64_t *shape,
                           ta_tensor *t)
{
    void *data = NULL;
    if (elem == TA_PY_BF16 && kind == TA_PY_NUMPY) {
        PyErr_SetString(PyExc_TypeError, "NumPy has no bfloat16: pass torch tensors for "
                        "bfloat16");
        return NULL;
    }
    PyObject *out = kind == TA_PY_TORCH ? new_torch_output(elem, ndim, shape, &data)
                                        : new_numpy_output(elem, ndim, shape, &data);
    if (!out) return NULL;
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = ta_py_elem_dtype(elem);
    t->ndim = ndim;
    int64_t next = 1;
    for (int d = ndim - 1; d >= 0; d--) { /* as new_torch_output's */
        t->shape[d] = shape[d];
        t->stride[d] = next;
        next *= shape[d] > 1 ? shape[d] : 1;
    }
    return out;
}
