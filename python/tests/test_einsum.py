"""einsum against the library's committed torch.einsum fixtures (float64 references,
the rigorous per-element bound of tests/fixtures/README.md) and numpy.einsum in float64,
with NumPy arrays, torch tensors and strided views."""

import numpy as np
import pytest
import torch

import tensorattn as ta
from conftest import load_cases, randn

CASES = load_cases("einsum")


@pytest.mark.parametrize("case", sorted(CASES))
def test_library_fixtures(case, kind):
    c = CASES[case]
    ops = [c[r] if kind == "numpy" else torch.from_numpy(c[r].copy())
           for r in ("a", "b") if r in c]
    spec = c["meta"]["spec"]
    if c["meta"]["expect"] == "error":
        with pytest.raises(ValueError):
            ta.einsum(spec, *ops)
        return
    out = ta.einsum(spec, *ops)
    assert isinstance(out, np.ndarray if kind == "numpy" else torch.Tensor)
    out = np.asarray(out, dtype=np.float64)
    terms = int(c["meta"]["terms"])
    bound = 1e-5 + 2 * terms * 2.0 ** -24 * c["absout"]
    assert out.shape == c["out"].shape
    assert (np.abs(out - c["out"]) <= bound).all()


def test_views_and_operand_list(kind):
    q, k = randn(2, 3, 5, 8, seed=1), randn(2, 5, 3, 8, seed=2).transpose(1, 2)
    a, b = (q.numpy(), k.numpy()) if kind == "numpy" else (q, k)
    ref = np.einsum("bhid,bhjd->bhij", q.double().numpy(), k.double().numpy())
    for out in (ta.einsum("bhid,bhjd->bhij", a, b), ta.einsum("bhid,bhjd->bhij", [a, b])):
        assert np.abs(np.asarray(out) - ref).max() < 1e-5
    total = ta.einsum("ij->", a[0, 0])  # a 0-d result
    assert tuple(total.shape) == () and abs(float(total) - q[0, 0].double().sum().item()) < 1e-5


def test_no_autograd():
    a = randn(3, 4).requires_grad_(True)
    with pytest.raises(NotImplementedError, match="autograd"):
        ta.einsum("ij->ji", a)
    with torch.no_grad():
        assert torch.equal(ta.einsum("ij->ji", a), a.detach().t())
