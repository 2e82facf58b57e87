"""scaled_dot_product_attention's forward against the float64 oracle (conftest.py) and the
library's committed PyTorch fixtures: NumPy and torch inputs, every mask form torch
takes, GQA, scales, ranks, strided views, empty sizes."""

import numpy as np
import pytest
import torch

import tensorattn as ta
from conftest import FWD_TOL, as_kind, causal_blocked, load_cases, max_err, randn, ref_attention

B, H, L, S, D, DV = 2, 3, 5, 7, 8, 4


def qkv(B=B, H=H, Hkv=None, L=L, S=S, D=D, Dv=DV, seed=0):
    Hkv = H if Hkv is None else Hkv
    return (randn(B, H, L, D, seed=seed), randn(B, Hkv, S, D, seed=seed + 1),
            randn(B, Hkv, S, Dv, seed=seed + 2))


def check(out, ref, kind, shape):
    assert isinstance(out, np.ndarray if kind == "numpy" else torch.Tensor)
    assert tuple(out.shape) == tuple(shape)
    assert str(out.dtype).endswith("float32")
    assert max_err(out, ref) <= FWD_TOL


def test_default_options(kind):
    q, k, v = qkv()
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)))
    check(out, ref_attention(q, k, v)[0], kind, (B, H, L, DV))


@pytest.mark.parametrize("L,S", [(5, 7), (7, 5), (1, 257), (129, 129)])
def test_is_causal_is_top_left(kind, L, S):
    q, k, v = qkv(L=L, S=S)
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)),
                                          is_causal=True)
    check(out, ref_attention(q, k, v, causal="top_left")[0], kind, (B, H, L, DV))


MASK_SHAPES = [(L, S), (B, 1, L, S), (B, 1, 1, S), (B, H, L, S), (1, H, L, S), (S,),
               (H, 1, S), (1, 1, L, 1)]


@pytest.mark.parametrize("shape", MASK_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["bool", "float"])
def test_mask_forms(kind, shape, dtype):
    q, k, v = qkv()
    if dtype == "bool":
        mask = randn(*shape, seed=7) > -0.3  # True = may attend; some rows keep nothing
    else:
        mask = randn(*shape, seed=7)
        mask.view(-1)[2::5] = float("-inf")
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)),
                                          attn_mask=as_kind(mask, kind))
    check(out, ref_attention(q, k, v, mask=mask)[0], kind, (B, H, L, DV))


def test_fully_masked_rows_give_zero(kind):
    q, k, v = qkv()
    mask = torch.ones(L, S, dtype=torch.bool)
    mask[2] = False
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)),
                                          attn_mask=as_kind(mask, kind))
    assert not np.asarray(out)[:, :, 2].any()
    check(out, ref_attention(q, k, v, mask=mask)[0], kind, (B, H, L, DV))


def test_broadcast_views_of_masks(kind):
    """Masks expanded with stride 0 (torch.expand, numpy.broadcast_to) are read in place."""
    q, k, v = qkv()
    for base in (randn(1, 1, L, S, seed=3), randn(B, 1, 1, S, seed=4) > 0):
        mask = base.expand(B, H, L, S)
        m = np.broadcast_to(base.numpy(), (B, H, L, S)) if kind == "numpy" else mask
        out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)),
                                              attn_mask=m)
        check(out, ref_attention(q, k, v, mask=mask)[0], kind, (B, H, L, DV))


@pytest.mark.parametrize("Hkv", [1, 2])
def test_gqa(kind, Hkv):
    q, k, v = qkv(H=4, Hkv=Hkv)
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)),
                                          enable_gqa=True, is_causal=True)
    check(out, ref_attention(q, k, v, causal="top_left")[0], kind, (B, 4, L, DV))
    with pytest.raises(ValueError, match="enable_gqa"):
        ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)))


@pytest.mark.parametrize("scale", [0.37, -1.5, 0.0, 1e-50, 3.0])
def test_scale(kind, scale):
    q, k, v = qkv()
    mask = randn(L, S, seed=5)
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)),
                                          attn_mask=as_kind(mask, kind), scale=scale)
    check(out, ref_attention(q, k, v, mask=mask, scale=scale)[0], kind, (B, H, L, DV))


@pytest.mark.parametrize("lead", [(), (3,), (2, 3), (2, 1, 3)], ids=str)
def test_batch_ranks(kind, lead):
    """[L, D], [H, L, D] and several batch dims; a mask broadcast over some of them."""
    shape = lead + (L, D)
    q, k, v = randn(*shape, seed=1), randn(*lead, S, D, seed=2), randn(*lead, S, DV, seed=3)
    mask = randn(*(lead[:1] + (1,) * max(len(lead) - 1, 0)), L, S, seed=4) > -0.5
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)),
                                          attn_mask=as_kind(mask, kind))
    check(out, ref_attention(q, k, v, mask=mask)[0], kind, lead + (L, DV))


def test_batch_dims_that_do_not_merge(kind):
    """Leading dims whose strides are not one stride apart: copied, still right."""
    base = randn(4, 2, 3, L, D, seed=1)
    q = base.permute(1, 0, 2, 3, 4)  # [2, 4, 3, L, D]: batch dims swapped
    k = randn(4, 2, 3, S, D, seed=2).permute(1, 0, 2, 3, 4)
    v = randn(2, 4, 3, S, DV, seed=3)
    mask = randn(4, 2, 1, L, S, seed=4).permute(1, 0, 2, 3, 4) > 0
    args = [as_kind(t, kind) for t in (q, k, v)]
    out = ta.scaled_dot_product_attention(*args, attn_mask=as_kind(mask, kind))
    check(out, ref_attention(q, k, v, mask=mask)[0], kind, (2, 4, 3, L, DV))


def test_strided_views(kind):
    """The views real models pass: [B, L, H, D] memory transposed to [B, H, L, D], a
    packed qkv projection split, every other column, reversed sequences."""
    x = randn(B, L, 3, H, D, seed=9)  # one projection holding q, k, v
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)), is_causal=True)
    check(out, ref_attention(q, k, v, causal="top_left")[0], kind, (B, H, L, D))
    wide = randn(B, H, S, 2 * D, seed=10)
    q2, k2, v2 = randn(B, H, L, 2 * D, seed=11)[..., ::2], wide[..., ::2], wide[..., 1::2]
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q2, k2, v2)))
    check(out, ref_attention(q2, k2, v2)[0], kind, (B, H, L, D))
    if kind == "numpy":  # negative strides (torch has none)
        qn, kn, vn = (t.numpy()[:, :, ::-1] for t in qkv())
        out = ta.scaled_dot_product_attention(qn, kn, vn)
        ref = ref_attention(*(torch.from_numpy(t.copy()) for t in (qn, kn, vn)))[0]
        check(out, ref, kind, (B, H, L, DV))


@pytest.mark.parametrize("dims", [dict(B=0), dict(L=0), dict(S=0), dict(H=0, Hkv=0)], ids=str)
def test_empty_sizes(kind, dims):
    q, k, v = qkv(**dims)
    out = ta.scaled_dot_product_attention(*(as_kind(t, kind) for t in (q, k, v)))
    check(out, ref_attention(q, k, v)[0], kind, (q.shape[0], q.shape[1], q.shape[2], DV))


def test_read_only_numpy_inputs():
    q, k, v = (t.numpy().copy() for t in qkv())
    for t in (q, k, v):
        t.flags.writeable = False
    out = ta.scaled_dot_product_attention(q, k, v)
    ref = ref_attention(*(torch.from_numpy(t.copy()) for t in (q, k, v)))[0]
    check(out, ref, "numpy", (B, H, L, DV))


def fixture_call(c):
    """A sdpa.tafx case as a scaled_dot_product_attention call: the causal alignment, key
    lengths and keep/block masks folded into one bool mask (or is_causal when top-left
    causal is all there is); additive masks with -inf where the rest blocks."""
    m = c["meta"]
    Bc, Hc, Hkv, Lq, Lk, Dc, Dv = map(int, m["shape"].split(","))
    q, k, v = (torch.from_numpy(c[r].copy()) for r in "qkv")
    scale = float(m.get("scale", "0")) or None
    causal, mode = m.get("causal", "none"), m.get("mask_mode")
    if m.get("layout") == "blhd":  # [B, L, H, D] memory, head-split views
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    blocked = torch.zeros(Bc, 1, Lq, Lk, dtype=torch.bool)
    if "key_lengths" in c:
        lens = torch.from_numpy(c["key_lengths"].copy())
        blocked |= (torch.arange(Lk)[None, :] >= lens[:, None])[:, None, None, :]
    if causal != "none" and (causal != "top_left" or mode or "key_lengths" in c):
        blocked |= causal_blocked(Lq, Lk, causal)
    mask = None
    if mode == "additive":
        mask = torch.from_numpy(c["mask"].copy()).masked_fill(blocked, float("-inf"))
    elif mode:
        raw = torch.from_numpy(c["mask"].copy()) != 0
        mask = ~((~raw if mode == "keep" else raw) | blocked)
    elif blocked.any():
        mask = ~blocked
    is_causal = causal == "top_left" and mask is None
    return (q, k, v), dict(attn_mask=mask, is_causal=is_causal, scale=scale,
                           enable_gqa=Hkv != Hc)


SDPA_CASES = load_cases("sdpa")


@pytest.mark.parametrize("case", sorted(SDPA_CASES))
def test_library_fixtures(case):
    """Every case of tests/fixtures/sdpa.tafx (torch float64 references), through the
    Python API with torch tensors; NaN cases must keep NaN where torch has it."""
    c = SDPA_CASES[case]
    (q, k, v), kw = fixture_call(c)
    out = ta.scaled_dot_product_attention(q, k, v, **kw)
    ref = c["out"]
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(out.numpy()), nan)
    assert np.abs(out.numpy()[~nan] - ref[~nan]).max(initial=0.0) <= 1e-5


def test_masks_broadcast_over_several_batch_dims(kind):
    """A mask that varies in one batch dim and broadcasts over another (size 1, contiguous,
    so a nonzero stride): the same as the mask broadcast out (a wrong answer, or a read
    past the mask, until session 33)."""
    q, k, v = (randn(2, 2, 3, 5, 8, seed=1), randn(2, 2, 3, 7, 8, seed=2),
               randn(2, 2, 3, 7, 6, seed=3))
    for shape in [(2, 1, 1, 5, 7), (1, 2, 3, 1, 7), (2, 1, 3, 5, 7)]:
        mask = torch.rand(shape, generator=torch.Generator().manual_seed(4)) > 0.3
        full = mask.expand(2, 2, 3, 5, 7).contiguous()
        args = [as_kind(t, kind) for t in (q, k, v)]
        out = ta.scaled_dot_product_attention(*args, attn_mask=as_kind(mask, kind))
        ref = ref_attention(q, k, v, mask=full)[0]
        assert max_err(out, ref) <= FWD_TOL, shape


def test_unaligned_numpy_memory():
    """float32 elements at odd addresses or byte strides (a field of a packed record, a
    buffer at offset 1): copied to aligned memory first, still the right answer."""
    q, k, v = (t.numpy() for t in qkv())
    rec = np.zeros(q.size, dtype=[("pad", "u1"), ("x", "<f4")])  # 5-byte records
    rec["x"] = q.ravel()
    qf = rec["x"].reshape(q.shape)
    raw = bytearray(k.nbytes + 1)
    kf = np.frombuffer(raw, dtype=np.float32, offset=1, count=k.size).reshape(k.shape)
    kf[...] = k
    assert qf.strides[-1] == 5 and kf.ctypes.data % 4 == 1
    out = ta.scaled_dot_product_attention(qf, kf, v)
    check(out, ref_attention(*map(torch.from_numpy, (q, k, v)))[0], "numpy", (B, H, L, DV))
