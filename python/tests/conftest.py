"""Shared oracles and helpers of the Python package's tests.

The oracle of every attention test is ref_attention: the definition in torch float64 on
the float32 inputs (repeat_interleave for grouped heads, matmul, scale, masks, softmax),
with tensorattn's convention for a query row that may attend to no key (output 0, LSE
-inf, no gradient; torch's math gives NaN there). Tolerances are the issue's: 5e-5 on
outputs, 2e-4 on gradients (absolute, on N(0,1) data)."""

import math
import os
import sys

import numpy as np
import pytest
import torch

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools"))
from gen_fixtures import read_tafx  # noqa: E402  (the fixtures' own reader)

FWD_TOL = 5e-5
GRAD_TOL = 2e-4

torch.set_num_threads(1)  # the oracle's threads stay out of the library's way


def causal_blocked(L, S, align):
    """[L, S] bool, True where the causal alignment blocks key j for query i."""
    if align == "top_left":
        return torch.ones(L, S).triu(1).bool()
    return torch.ones(L, S).triu(S - L + 1).bool()  # bottom_right


def ref_attention(q, k, v, mask=None, causal=None, scale=None, softcap=0.0, window=None,
                  alibi=None):
    """out [..., H, L, Dv] and lse [..., H, L] in float64 from q [..., H, L, D],
    k [..., Hkv, S, D], v [..., Hkv, S, Dv] (torch tensors; autograd flows through q, k,
    v). mask: bool (True = may attend) or float (added); causal: None, "top_left",
    "bottom_right". softcap, window (left, right) and alibi slopes [H] follow
    FlashAttention's definitions (the library's variants)."""
    q, k, v = q.double(), k.double(), v.double()
    if q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(g, dim=-3)
        v = v.repeat_interleave(g, dim=-3)
    D = q.shape[-1]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D) if scale is None else scale)
    L, S = s.shape[-2], s.shape[-1]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    delta = 0 if causal == "top_left" else S - L
    rel = torch.arange(S)[None, :] - (torch.arange(L)[:, None] + delta)
    if alibi is not None:
        s = s - alibi.double()[..., None, None] * rel.abs()
    blocked = torch.zeros(L, S, dtype=torch.bool)
    if causal:
        blocked |= causal_blocked(L, S, causal)
    if window is not None:
        left, right = window
        if left >= 0:
            blocked |= rel < -left
        if right >= 0:
            blocked |= rel > right
    s = s.masked_fill(blocked, float("-inf"))
    if mask is not None:
        m = torch.as_tensor(mask)
        s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m.double()
    empty = (s == float("-inf")).all(dim=-1, keepdim=True)
    safe = s.masked_fill(empty, 0.0)
    p = torch.softmax(safe, dim=-1).masked_fill(empty, 0.0)
    lse = torch.logsumexp(safe, dim=-1).masked_fill(empty.squeeze(-1), float("-inf"))
    return p @ v, lse


def max_err(a, b):
    """max |a - b| over finite entries, both as float64 numpy; infinities must agree."""
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    a, b = a.astype(np.float64), b.astype(np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    inf = np.isinf(b)
    assert np.array_equal(np.isinf(a), inf) and np.array_equal(a[inf], b[inf])
    return float(np.abs(a[~inf] - b[~inf]).max()) if (~inf).any() else 0.0


def randn(*shape, seed=0):
    """float32 N(0, 1) as a torch tensor (numpy: .numpy())."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32)


@pytest.fixture(params=["numpy", "torch"])
def kind(request):
    """Runs a test with NumPy arrays and with torch tensors."""
    return request.param


def as_kind(t, kind):
    """A torch tensor as the given kind (numpy arrays share the memory)."""
    return t.numpy() if kind == "numpy" else t


def load_cases(name):
    """{case: {"meta": {key: text}, role: numpy array}} of tests/fixtures/<name>.tafx."""
    with open(os.path.join(REPO, "tests", "fixtures", name + ".tafx"), "rb") as f:
        records = read_tafx(f.read())
    cases = {}
    for rec_name, meta, arr in records:
        case, role = rec_name.split("/", 1)
        if case == "_set":
            continue
        entry = cases.setdefault(case, {})
        if role == "meta":
            entry["meta"] = dict(line.split("=", 1) for line in meta.splitlines() if line)
        else:
            entry[role] = arr
    return cases
