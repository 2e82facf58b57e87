"""Bad input raises ValueError / TypeError with the library's message (or
NotImplementedError for what is not implemented) and never crashes the interpreter:
dtypes, ranks, shapes, devices, non-arrays, odd DLPack producers, options."""

import ctypes

import numpy as np
import pytest
import torch

import tensorattn as ta
from conftest import randn

sdpa = ta.scaled_dot_product_attention


def qkv(kind="torch"):
    t = (randn(2, 3, 5, 8, seed=1), randn(2, 3, 7, 8, seed=2), randn(2, 3, 7, 4, seed=3))
    return tuple(x.numpy() for x in t) if kind == "numpy" else t


def test_dtypes(kind):
    q, k, v = qkv(kind)
    conv = (lambda x, dt: x.astype(dt)) if kind == "numpy" else (lambda x, dt: x.to(dt))
    f64 = np.float64 if kind == "numpy" else torch.float64
    with pytest.raises(TypeError, match="float64.*convert"):
        sdpa(conv(q, f64), k, v)
    with pytest.raises(TypeError, match="value has dtype float64"):
        sdpa(q, k, conv(v, f64))
    for dt in ((np.int32, np.int64, np.bool_, np.uint8) if kind == "numpy"
               else (torch.int32, torch.int64, torch.bool, torch.uint8)):
        with pytest.raises(TypeError, match="dtype"):
            sdpa(q, conv(k, dt), v)
    with pytest.raises(TypeError, match="attn_mask has dtype"):
        sdpa(q, k, v, attn_mask=conv(q[..., :7], np.int64 if kind == "numpy" else torch.int64))
    with pytest.raises(TypeError, match="attn_mask has dtype float64"):
        sdpa(q, k, v, attn_mask=conv(randn(5, 7).numpy() if kind == "numpy" else randn(5, 7), f64))


def test_big_endian_numpy():
    q, k, v = qkv("numpy")
    with pytest.raises(TypeError, match="dtype"):
        sdpa(q.astype(">f4"), k, v)


def test_shapes(kind):
    q, k, v = qkv(kind)
    with pytest.raises(ValueError, match="head_dim"):  # the library's message
        sdpa(q[..., :4], k, v)
    with pytest.raises(ValueError, match="keys"):
        sdpa(q, k, v[:, :, :6])
    with pytest.raises(ValueError, match="at least 2 dims"):
        sdpa(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0])
    with pytest.raises(ValueError, match="rank"):
        sdpa(q, k[0], v)
    with pytest.raises(ValueError, match="batch"):
        sdpa(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="not a multiple"):
        sdpa(q, k[:, :2], v[:, :2], enable_gqa=True)
    with pytest.raises(ValueError, match="broadcast"):
        sdpa(q, k, v, attn_mask=np.ones((5, 6), bool) if kind == "numpy" else torch.ones(5, 6) > 0)
    with pytest.raises(ValueError, match="more than the query"):
        sdpa(q, k, v, attn_mask=np.zeros((1, 2, 3, 5, 7), np.float32) if kind == "numpy"
             else torch.zeros(1, 2, 3, 5, 7))
    with pytest.raises(ValueError, match="at most 8"):
        x = np.zeros((1,) * 9 + (2, 2), np.float32)
        sdpa(x, x, x)


def test_options():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="dropout"):
        sdpa(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="not both"):
        sdpa(q, k, v, attn_mask=torch.ones(5, 7) > 0, is_causal=True)
    for bad in (float("inf"), float("nan"), 1e40):
        with pytest.raises(ValueError, match="scale"):
            sdpa(q, k, v, scale=bad)
    with pytest.raises(TypeError):
        sdpa(q, k, v, scale="big")
    with pytest.raises(ValueError, match="window_size"):
        ta.flash_attn_func(q, k, v, window_size=3)
    with pytest.raises(ValueError, match="window_size"):
        ta.flash_attn_func(q, k, v, window_size=(-2, 0))
    with pytest.raises(ValueError, match="softcap"):
        ta.flash_attn_func(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError):
        ta.set_num_threads(0)


@pytest.mark.parametrize("bad", [None, [[1.0]], 3.0, "qkv", {"a": 1}, object(), b"abcd"],
                         ids=lambda b: type(b).__name__)
def test_not_arrays(bad):
    q, k, v = qkv()
    with pytest.raises(TypeError):
        sdpa(bad, k, v)
    with pytest.raises(TypeError):
        ta.flash_attn_func(q, bad, v)
    with pytest.raises(TypeError):
        ta.einsum("ij->ji", bad)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class FakeDLPack:
    """A DLPack producer over a NumPy array's memory, on any device type (2 = CUDA), with
    strides (or NULL strides when compact=True): other producers than torch and NumPy."""
    _new = ctypes.pythonapi.PyCapsule_New
    _new.restype, _new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                     ctypes.c_void_p]

    def __init__(self, array, device_type=1, compact=False, code=2, bits=32):
        self.array = array
        self.shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        self.strides = (ctypes.c_int64 * array.ndim)(*(s // array.itemsize for s in array.strides))
        self.managed = DLManagedTensor()
        t = self.managed.dl_tensor
        t.data, t.ndim = array.ctypes.data, array.ndim
        t.device = DLDevice(device_type, 0)
        t.dtype = DLDataType(code, bits, 1)
        t.shape = self.shape
        t.strides = None if compact else self.strides
        self.name = b"dltensor"

    def __dlpack__(self):
        return self._new(ctypes.addressof(self.managed), self.name, None)


def test_other_dlpack_producers():
    q, k, v = qkv("numpy")
    ref = sdpa(q, k, v)
    out = sdpa(FakeDLPack(q), FakeDLPack(k, compact=True), FakeDLPack(v[:, :, ::-1].copy()[:, :, ::-1]))
    assert isinstance(out, np.ndarray) and np.array_equal(out, ref)
    with pytest.raises(ValueError, match="CUDA"):
        sdpa(q, FakeDLPack(k, device_type=2), v)
    with pytest.raises(TypeError, match="dtype"):
        sdpa(q, FakeDLPack(k, code=5, bits=64), v)  # complex


def test_broken_dlpack_producers():
    class Raises:
        def __dlpack__(self):
            raise RuntimeError("no")

    class NotACapsule:
        def __dlpack__(self):
            return 42

    q, k, v = qkv()
    with pytest.raises(ValueError, match="DLPack: no"):
        sdpa(q, Raises(), v)
    with pytest.raises(TypeError, match="capsule"):
        sdpa(q, NotACapsule(), v)


def test_torch_devices():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="meta"):
        sdpa(q.to("meta"), k, v)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            sdpa(q.cuda(), k.cuda(), v.cuda())


def test_einsum_errors(kind):
    a = randn(3, 4).numpy() if kind == "numpy" else randn(3, 4)
    with pytest.raises(ValueError):
        ta.einsum("ij,jk->ik", a, a)  # 4 != 3
    with pytest.raises(ValueError):
        ta.einsum("i1->i", a)
    with pytest.raises(ValueError):
        ta.einsum("ij->iij", a)
    with pytest.raises(TypeError, match="float32"):
        ta.einsum("ij->ji", a.astype(np.float64) if kind == "numpy" else a.double())
    with pytest.raises(NotImplementedError, match="two operands"):
        ta.einsum("ij,jk,kl->il", a, a.T, a)
    with pytest.raises(TypeError):
        ta.einsum(3, a)
    # a NUL in the str ends the C string: "ij\x00,jk" ran as "ij" (a copy of a) and
    # "ij->ji\x00" as a transpose, where torch.einsum rejects both
    for spec in ("ij\x00,jk", "ij->ji\x00", "\x00"):
        with pytest.raises(ValueError, match="code 0"):
            ta.einsum(spec, a)


def test_internal_calls_check_their_arrays():
    """The backward's out and lse (normally the forward's own) are checked too; a mix of
    NumPy arrays and torch tensors that require grad is refused."""
    q, k, v = qkv()
    out, lse = ta._C.attention(0, q, k, v, True, None, 0, None, False, -1, -1, 0.0, None,
                               None, None, 0, 0)
    opts = (None, 0, None, False, -1, -1, 0.0, None, None, None, 0, 0)
    with pytest.raises(TypeError, match="lse has dtype"):
        ta._C.attention_backward(0, out, q, k, v, out, lse.to(torch.uint8), *opts)
    with pytest.raises(TypeError, match="out has dtype"):
        ta._C.attention_backward(0, out, q, k, v, out.bool(), lse, *opts)
    with pytest.raises(TypeError, match="torch tensors"):
        sdpa(q.requires_grad_(True), k.numpy(), v)
