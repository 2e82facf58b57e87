"""Memory: float32 inputs reach the library in place (data pointers, views included), and
results are new memory that shares nothing with the inputs or with each other, owned by
the array returned (it outlives the inputs; freeing it frees the memory)."""

import gc
import resource

import numpy as np
import torch

import tensorattn as ta
from conftest import randn

sdpa = ta.scaled_dot_product_attention


def ptr(x):
    return x.__array_interface__["data"][0] if isinstance(x, np.ndarray) else x.data_ptr()


def test_inputs_are_not_copied(kind):
    q, k, v = (randn(2, 3, 5, 8, seed=i) for i in range(3))
    mask = randn(2, 1, 5, 5, seed=4)
    views = [q, k.transpose(2, 3).contiguous().transpose(2, 3), v[:, :, :, :]]
    x = randn(2, 5, 3, 3, 8, seed=5)  # packed [B, L, 3, H, D]
    packed = [x[:, :, i].transpose(1, 2) for i in range(3)]
    expanded = randn(1, 1, 5, 5, seed=6).expand(2, 3, 5, 5)  # stride-0 dims
    for args, m in ((views, mask), (packed, expanded)):
        if kind == "numpy":
            args = [t.numpy() for t in args]
            m = np.broadcast_to(m.numpy(), m.shape) if m is expanded else m.numpy()
        sdpa(*args, attn_mask=m)
        assert ta._C._last_inputs() == tuple(ptr(t) for t in (*args, m))


def test_flash_views_are_not_copied(kind):
    x = randn(2, 7, 3, 4, 16, seed=1)
    args = [x[:, :, i] for i in range(3)]
    if kind == "numpy":
        args = [t.numpy() for t in args]
    ta.flash_attn_func(*args, causal=True)
    assert ta._C._last_inputs()[:3] == tuple(ptr(t) for t in args)


def test_outputs_share_nothing(kind):
    q, k, v = (randn(2, 3, 5, 8, seed=i) for i in range(3))
    args = [t.numpy() for t in (q, k, v)] if kind == "numpy" else [q, k, v]
    out1, lse1 = ta.flash_attn_func(*args, return_lse=True)
    out2 = sdpa(*args)
    arrays = [np.asarray(a) for a in (*args, out1, lse1, out2)]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)
    before = [a.copy() for a in arrays[:3]]
    out2[...] = 7.0  # results are writable and alias no input
    for a, b in zip(arrays[:3], before):
        assert np.array_equal(a, b)
    if kind == "numpy":
        assert out2.flags.owndata and out2.flags.c_contiguous and out2.flags.writeable
    else:
        assert out2.is_contiguous() and out2.device.type == "cpu"


def test_results_outlive_inputs_and_are_freed(kind):
    q, k, v = (randn(1, 8, 256, 64, seed=i) for i in range(3))
    args = [t.numpy() for t in (q, k, v)] if kind == "numpy" else [q, k, v]
    out = sdpa(*args)
    expect = np.asarray(out).copy()
    del args, q, k, v
    gc.collect()
    assert np.array_equal(np.asarray(out), expect)
    # 40 results of 8 MiB each (cheap: one key), dropped as they come: if the memory did
    # not come back the process would grow by 320 MiB
    q, kv = randn(1, 8, 4096, 64, seed=9), randn(1, 8, 1, 64, seed=10)
    q, kv = (q.numpy(), kv.numpy()) if kind == "numpy" else (q, kv)
    for _ in range(3):
        sdpa(q, kv, kv)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(40):
        sdpa(q, kv, kv)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
    assert grown_mib < 100, grown_mib
