"""flash_attn_func's forward: FlashAttention's [B, L, H, D] layout, bottom-right causal
alignment, MQA/GQA, softmax_scale and the returned LSE, against the float64 oracle."""

import numpy as np
import pytest
import torch

import tensorattn as ta
from conftest import FWD_TOL, as_kind, max_err, randn, ref_attention


def blhd(B, Lq, Lk, H, Hkv, D, Dv, seed=0):
    """q, k, v in FlashAttention's layout, and their [B, H, L, D] views for the oracle."""
    q, k, v = (randn(B, Lq, H, D, seed=seed), randn(B, Lk, Hkv, D, seed=seed + 1),
               randn(B, Lk, Hkv, Dv, seed=seed + 2))
    return (q, k, v), tuple(t.transpose(1, 2) for t in (q, k, v))


@pytest.mark.parametrize("Lq,Lk", [(5, 9), (9, 5), (1, 33), (16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_oracle(kind, Lq, Lk, causal):
    (q, k, v), ref_in = blhd(2, Lq, Lk, 4, 2, 16, 8)
    out, lse = ta.flash_attn_func(*(as_kind(t, kind) for t in (q, k, v)), causal=causal,
                                  return_lse=True)
    ref, ref_lse = ref_attention(*ref_in, causal="bottom_right" if causal else None)
    assert isinstance(out, np.ndarray if kind == "numpy" else torch.Tensor)
    assert tuple(out.shape) == (2, Lq, 4, 8) and tuple(lse.shape) == (2, 4, Lq)
    assert str(lse.dtype).endswith("float32")
    assert max_err(out, ref.transpose(1, 2)) <= FWD_TOL
    assert max_err(lse, ref_lse) <= FWD_TOL  # -inf rows (causal, Lq > Lk) must match


def test_softmax_scale_and_mqa(kind):
    (q, k, v), ref_in = blhd(1, 7, 11, 6, 1, 32, 32)
    out = ta.flash_attn_func(*(as_kind(t, kind) for t in (q, k, v)), softmax_scale=0.25)
    assert max_err(out, ref_attention(*ref_in, scale=0.25)[0].transpose(1, 2)) <= FWD_TOL


def test_packed_qkv_views(kind):
    """q, k, v sliced out of one [B, L, 3, H, D] projection: strided, read in place."""
    qkv = randn(2, 10, 3, 4, 16, seed=4)
    q, k, v = (qkv[:, :, i] for i in range(3))
    out = ta.flash_attn_func(*(as_kind(t, kind) for t in (q, k, v)), causal=True)
    ref = ref_attention(*(t.transpose(1, 2) for t in (q, k, v)), causal="bottom_right")[0]
    assert max_err(out, ref.transpose(1, 2)) <= FWD_TOL


def test_keyword_extras():
    (q, k, v), ref_in = blhd(1, 4, 4, 2, 2, 8, 8)
    out = ta.flash_attn_func(q, k, v, deterministic=True, dropout_p=0.0)
    assert max_err(out, ref_attention(*ref_in)[0].transpose(1, 2)) <= FWD_TOL
    with pytest.raises(ValueError, match="dropout"):
        ta.flash_attn_func(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="4 dims"):
        ta.flash_attn_func(q[0], k[0], v[0])
