"""Autograd: torch tensors that require grad go through tensorattn's
torch.autograd.Function (backward = ta_sdpa_backward from the saved O and LSE). Gradients
against torch's autograd of the float64 oracle on the same float32 data (2e-4), and
against the library's committed sdpa_grad fixtures."""

import numpy as np
import pytest
import torch

import tensorattn as ta
from conftest import FWD_TOL, GRAD_TOL, load_cases, max_err, randn, ref_attention


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def grads_of(fn, inputs, weight):
    """d(sum(fn(*inputs) * weight)) / d inputs (None where an input needs none)."""
    out = fn(*inputs)
    (out * weight).sum().backward()
    return out, [t.grad for t in inputs]


def compare(ours_fn, ref_fn, inputs, weight_shape=None, seed=5):
    """Forward and gradients of ours_fn against ref_fn (float64) on copies of inputs."""
    mine, theirs = leaves(*inputs), leaves(*inputs)
    out = ours_fn(*mine)
    w = randn(*(weight_shape or out.shape), seed=seed)
    (out * w).sum().backward()
    ref = ref_fn(*theirs)
    ref = ref[0] if isinstance(ref, tuple) else ref  # ref_attention's (out, lse)
    (ref * w.double()).sum().backward()
    assert out.grad_fn is not None
    assert max_err(out, ref) <= FWD_TOL
    for a, b in zip(mine, theirs):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert a.grad.dtype == torch.float32 and a.grad.shape == a.shape
            assert max_err(a.grad, b.grad) <= GRAD_TOL


def qkv(B=2, H=3, Hkv=None, L=6, S=9, D=16, Dv=8, seed=0):
    Hkv = H if Hkv is None else Hkv
    return (randn(B, H, L, D, seed=seed), randn(B, Hkv, S, D, seed=seed + 1),
            randn(B, Hkv, S, Dv, seed=seed + 2))


sdpa = ta.scaled_dot_product_attention


def test_default():
    compare(sdpa, ref_attention, qkv())


def test_causal_and_scale():
    compare(lambda q, k, v: sdpa(q, k, v, is_causal=True, scale=0.3),
            lambda q, k, v: ref_attention(q, k, v, causal="top_left", scale=0.3)[0], qkv())


@pytest.mark.parametrize("mask", [randn(6, 9, seed=3) > -0.2, randn(2, 1, 1, 9, seed=3) > 0,
                                  randn(1, 3, 6, 9, seed=3)], ids=["bool", "padding", "float"])
def test_masks(mask):
    """Bool masks with rows that keep nothing (they pass no gradient), float masks."""
    compare(lambda q, k, v: sdpa(q, k, v, attn_mask=mask),
            lambda q, k, v: ref_attention(q, k, v, mask=mask)[0], qkv())


@pytest.mark.parametrize("Hkv", [1, 2])
def test_gqa(Hkv):
    compare(lambda q, k, v: sdpa(q, k, v, enable_gqa=True, is_causal=True),
            lambda q, k, v: ref_attention(q, k, v, causal="top_left")[0], qkv(H=4, Hkv=Hkv))


def test_scale_zero():
    """scale=0: uniform weights; no gradient reaches q or k (it is zero, not missing)."""
    compare(lambda q, k, v: sdpa(q, k, v, scale=0.0),
            lambda q, k, v: ref_attention(q, k, v, scale=0.0)[0], qkv())


def test_views_and_ranks():
    """Transposed [B, L, H, D] views, rank 3 and rank 5 inputs."""
    def split(x):
        return x.view(2, 6, 3, 16).transpose(1, 2)
    base = [randn(2, 6, 48, seed=i) for i in range(3)]
    compare(lambda a, b, c: sdpa(split(a), split(b), split(c), is_causal=True),
            lambda a, b, c: ref_attention(split(a), split(b), split(c), causal="top_left")[0],
            base)
    compare(sdpa, ref_attention, [t[0] for t in qkv()])
    compare(sdpa, ref_attention, [t.reshape(2, 1, *t.shape[1:]) for t in qkv()])


def test_only_some_inputs_require_grad():
    q, k, v = qkv()
    q.requires_grad_(True)
    out = sdpa(q, k, v)
    out.sum().backward()
    ref_q = q.detach().clone().requires_grad_(True)
    ref_attention(ref_q, k, v)[0].sum().backward()
    assert k.grad is None and v.grad is None
    assert max_err(q.grad, ref_q.grad) <= GRAD_TOL


def test_expanded_grad_out():
    """out.sum() sends a stride-0 gradient into the backward."""
    q, k, v = leaves(*qkv())
    sdpa(q, k, v, is_causal=True).sum().backward()
    rq, rk, rv = leaves(*qkv())
    ref_attention(rq, rk, rv, causal="top_left")[0].sum().backward()
    for a, b in zip((q, k, v), (rq, rk, rv)):
        assert max_err(a.grad, b.grad) <= GRAD_TOL


@pytest.mark.parametrize("use_out", [False, True])
def test_flash_attn_func_out_and_lse(use_out):
    """Gradients flow through the output and the returned LSE."""
    def ours(q, k, v):
        out, lse = ta.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                      causal=True, return_lse=True)
        return torch.cat([out.transpose(1, 2).flatten(), lse.flatten()]) if use_out else lse

    def ref(q, k, v):
        out, lse = ref_attention(q, k, v, causal="bottom_right")
        lse = lse.masked_fill(torch.isinf(lse), 0.0)
        return torch.cat([out.flatten(), lse.flatten()]) if use_out else lse

    # Lq > Lk: the first rows see no key (LSE -inf, no gradient); GQA
    q, k, v = qkv(H=4, Hkv=2, L=9, S=6)
    mine, theirs = leaves(q, k, v), leaves(q, k, v)
    a, b = ours(*mine), ref(*theirs)
    w = randn(*a.shape, seed=8)
    (a.masked_fill(torch.isinf(a), 0.0) * w).sum().backward()
    (b * w.double()).sum().backward()
    for x, y in zip(mine, theirs):
        if y.grad is None:  # v when only the LSE is used
            assert x.grad is None or not x.grad.any()
        else:
            assert max_err(x.grad, y.grad) <= GRAD_TOL


def test_mask_requiring_grad_is_refused():
    q, k, v = leaves(*qkv())
    mask = randn(6, 9).requires_grad_(True)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        sdpa(q, k, v, attn_mask=mask)


def test_no_grad_mode_and_double_backward():
    q, k, v = leaves(*qkv())
    with torch.no_grad():
        assert sdpa(q, k, v).grad_fn is None
    out = sdpa(q, k, v)
    (g,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()  # once_differentiable: no second derivative


GRAD_CASES = load_cases("sdpa_grad")


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_library_grad_fixtures(case):
    """Every case of tests/fixtures/sdpa_grad.tafx that the Python API can state."""
    from test_sdpa import fixture_call
    c = GRAD_CASES[case]
    (q, k, v), kw = fixture_call(c)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    out = sdpa(q, k, v, **kw)
    out.backward(torch.from_numpy(c["dout"].copy()))
    for t, role in ((out, "out"), (q.grad, "dq"), (k.grad, "dk"), (v.grad, "dv")):
        assert np.abs(t.detach().numpy() - c[role]).max(initial=0.0) <= 1e-4, role
