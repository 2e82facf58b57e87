"""Parity with torch's own scaled_dot_product_attention (torch >= 2.0; skipped on Debian's
torch 1.13, which has none): the same calls, torch running in float64 on the float32 data,
outputs within 5e-5 and gradients (torch autograd) within 2e-4. Masks keep at least one key
per row (torch gives NaN for a row with none; tensorattn gives 0)."""

import pytest
import torch

import tensorattn as ta
from conftest import FWD_TOL, GRAD_TOL, max_err, randn

F = torch.nn.functional
pytestmark = pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"),
                                reason=f"torch {torch.__version__} has no F.scaled_dot_product_attention")
HAS_GQA = hasattr(F, "scaled_dot_product_attention") and \
    "enable_gqa" in str(getattr(F.scaled_dot_product_attention, "__doc__", ""))

def parity(q, k, v, **kw):
    """Forward and gradients of tensorattn's call against torch's in float64."""
    mine = [t.clone().requires_grad_(True) for t in (q, k, v)]
    theirs = [t.double().requires_grad_(True) for t in (q, k, v)]
    tkw = dict(kw)
    if isinstance(tkw.get("attn_mask"), torch.Tensor) and tkw["attn_mask"].is_floating_point():
        tkw["attn_mask"] = tkw["attn_mask"].double()
    out = ta.scaled_dot_product_attention(*mine, **kw)
    ref = F.scaled_dot_product_attention(*theirs, **tkw)
    assert max_err(out, ref) <= FWD_TOL
    w = randn(*out.shape, seed=99)
    (out * w).sum().backward()
    (ref * w.double()).sum().backward()
    for a, b in zip(mine, theirs):
        assert max_err(a.grad, b.grad) <= GRAD_TOL

def qkv(B=2, H=4, Hkv=None, L=9, S=13, D=16, Dv=8):
    Hkv = H if Hkv is None else Hkv
    return randn(B, H, L, D, seed=1), randn(B, Hkv, S, D, seed=2), randn(B, Hkv, S, Dv, seed=3)

@pytest.mark.parametrize("shape", [(9, 13), (2, 1, 9, 13), (2, 1, 1, 13), (2, 4, 9, 13),
                                   (1, 4, 9, 13)], ids=str)
@pytest.mark.parametrize("dtype", ["bool", "float"])
def test_masks(shape, dtype):
    if dtype == "bool":
        mask = randn(*shape, seed=5) > -0.5
        mask[..., 0] = True  # every row keeps a key
    else:
        mask = randn(*shape, seed=5)
    parity(*qkv(), attn_mask=mask)

@pytest.mark.parametrize("L,S", [(9, 13), (13, 9), (16, 16)])
def test_causal_and_scale(L, S):
    parity(*qkv(L=L, S=S), is_causal=True)
    parity(*qkv(L=L, S=S), scale=0.3)

@pytest.mark.skipif(not HAS_GQA, reason="torch < 2.5 has no enable_gqa")
def test_gqa():
    parity(*qkv(H=8, Hkv=2), enable_gqa=True, is_causal=True)

def test_views():
    x = randn(2, 9, 3, 4, 16, seed=7)
    parity(*(x[:, :, i].transpose(1, 2) for i in range(3)), is_causal=True)
