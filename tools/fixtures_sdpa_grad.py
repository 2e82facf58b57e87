"""The "sdpa_grad" fixture set: gradients of scaled dot-product attention from PyTorch
autograd, for ta_sdpa_backward.

Registered in gen_fixtures.py (`/usr/bin/python3 tools/gen_fixtures.py sdpa_grad` writes
tests/fixtures/sdpa_grad.tafx); tests/test_sdpa_grad_torch.c and tests/test_cli_grad.c
read it.

Every case draws float32 q, k, v and dO, then runs ta_sdpa's semantics as explicit torch
math in float64 (repeat_interleave for grouped heads, einsum, scale, masked_fill for
causal / key lengths / keep and block masks, + for additive masks, softmax, einsum) and
lets autograd compute dq, dk, dv of sum(dO * out). PyTorch gives NaN for a query row with
no key to attend; tensorattn's contract is output 0, LSE -inf and no gradient from such a
row, so the math fills those rows' scores with 0 before the softmax and zeroes their
weights after it (no gradient flows through them). The same math in float32 must land
within half the C test's tolerance (1e-4), or the tolerance would not mean much.

Records of a case: meta; q, k, v, dout (f32, contiguous [B,H,L,D]); mask (u8 for
keep/block, f32 for additive; its own broadcast shape) and key_lengths (i64 [B]) when
used; out, lse, dq, dk, dv (f64). Meta keys: shape (B,H,Hkv,Lq,Lk,D,Dv), scale (0 = the
default 1/sqrt(D)), causal (none|top_left|bottom_right), mask_mode, layout (bhld, or
blhd: the C test passes [B, L, H, D] memory as permuted views), tags, seed, empty_rows.
"""

import torch

from fixtures_sdpa import add_records, case_mask, case_meta, draw_qkv, masked_scores

TOL = 1e-4


def sdpa_grad_math(q, k, v, dout, scale=0.0, causal="none", mask=None, mode="keep",
                   key_lengths=None, dtype=torch.float64):
    """Forward and autograd backward of ta_sdpa's semantics in `dtype`.
    Returns out, lse, dq, dk, dv and the number of rows that attend to nothing."""
    q = q.to(dtype).detach().requires_grad_(True)
    k = k.to(dtype).detach().requires_grad_(True)
    v = v.to(dtype).detach().requires_grad_(True)
    scores, vr = masked_scores(q, k, v, scale, causal, mask, mode, key_lengths)
    empty = (scores == float("-inf")).all(dim=-1, keepdim=True)  # [B, H, Lq, 1]
    safe = scores.masked_fill(empty, 0.0)
    weights = torch.softmax(safe, dim=-1).masked_fill(empty, 0.0)
    lse = torch.logsumexp(safe, dim=-1).masked_fill(empty[..., 0], float("-inf"))
    out = torch.einsum("bhij,bhjd->bhid", weights, vr)
    (out * dout.to(dtype)).sum().backward()
    return (out.detach(), lse.detach(), q.grad.detach(), k.grad.detach(), v.grad.detach(),
            int(empty.sum()))


# (B, H, Hkv, Lq, Lk, D, Dv, options); options: scale, causal, mask=(shape, mode),
# lengths=[...], layout="blhd", empty_mask_rows=True, tags=[...]
CASES = [
    (1, 1, 1, 1, 1, 8, 8, dict(tags=["size1"])),
    (2, 2, 2, 3, 3, 16, 16, dict(tags=["odd"])),
    (1, 2, 2, 17, 17, 16, 16, dict(tags=["odd"])),
    (1, 1, 1, 1, 129, 16, 16, dict(causal="bottom_right", tags=["decode", "l129"])),
    (1, 1, 1, 129, 3, 8, 8, dict(tags=["l129"])),
    (1, 1, 1, 129, 129, 8, 8, dict(causal="top_left", tags=["causal", "l129"])),
    *[(1, 1, 1, 3, 5, d, d, dict(tags=["head_dim"])) for d in (8, 16, 40, 64, 96, 128)],
    (2, 2, 2, 5, 7, 16, 16, dict(scale=0.37, tags=["scale"])),
    (1, 2, 2, 5, 7, 16, 16, dict(scale=-1.5, tags=["scale", "negative"])),
    (2, 2, 2, 5, 9, 16, 16, dict(causal="top_left", tags=["causal"])),
    (2, 2, 2, 9, 5, 16, 16, dict(causal="top_left", tags=["causal"])),
    (2, 2, 2, 5, 9, 16, 16, dict(causal="bottom_right", tags=["causal"])),
    (2, 2, 2, 9, 5, 16, 16, dict(causal="bottom_right", tags=["causal", "empty_rows"])),
    (2, 3, 3, 5, 17, 8, 8, dict(mask=("LqLk", "keep"), tags=["mask"])),
    (2, 3, 3, 5, 17, 8, 8, dict(mask=("B11Lk", "block"), tags=["mask", "padding"])),
    (2, 3, 3, 5, 17, 8, 8, dict(mask=("1HLqLk", "additive"), tags=["mask"])),
    (2, 3, 3, 5, 17, 8, 8, dict(mask=("BHLqLk", "keep"), tags=["mask"])),
    (2, 3, 3, 5, 17, 8, 8, dict(mask=("Lk", "additive"), tags=["mask"])),
    (2, 3, 3, 5, 17, 8, 8, dict(mask=("H1Lk", "block"), tags=["mask"])),
    (2, 2, 2, 6, 6, 16, 16, dict(mask=("LqLk", "keep"), causal="top_left",
                                 empty_mask_rows=True, tags=["mask", "empty_rows"])),
    (4, 2, 2, 6, 11, 16, 16, dict(lengths=[0, 3, 11, 1], tags=["key_lengths"])),
    (4, 2, 2, 6, 11, 16, 16, dict(lengths=[11, 0, 5, 2], causal="bottom_right",
                                  tags=["key_lengths", "causal"])),
    (2, 4, 2, 9, 13, 16, 16, dict(tags=["gqa"])),
    (2, 4, 1, 9, 13, 16, 16, dict(causal="top_left", tags=["gqa", "mqa"])),
    (1, 4, 2, 9, 13, 16, 16, dict(mask=("1HLqLk", "additive"), tags=["gqa", "mask"])),
    (1, 2, 2, 7, 10, 16, 40, dict(tags=["dv"])),
    (1, 2, 2, 7, 10, 8, 3, dict(causal="top_left", tags=["dv"])),
    (3, 2, 1, 17, 19, 16, 24, dict(scale=0.2, causal="bottom_right",
                                   mask=("B11Lk", "additive"), lengths=[19, 7, 0],
                                   tags=["combined"])),
    (2, 4, 4, 7, 9, 16, 16, dict(layout="blhd", causal="top_left",
                                 tags=["layout", "noncontiguous"])),
    (1, 1, 1, 70, 90, 32, 32, dict(causal="top_left", tags=["multi_tile"])),
]


def gen_sdpa_grad(w):
    """Writes every case of CASES into w (a gen_fixtures.TafxWriter)."""
    for idx, (B, H, Hkv, Lq, Lk, D, Dv, opt) in enumerate(CASES):
        case = f"grad{idx:03d}"
        seed = 7000 + idx
        q, k, v = draw_qkv(seed, B, H, Hkv, Lq, Lk, D, Dv)
        dout = torch.randn(B, H, Lq, Dv, dtype=torch.float32)
        meta = case_meta(opt, (B, H, Hkv, Lq, Lk, D, Dv), seed)
        mask, lengths = case_mask(opt, meta, B, H, Lq, Lk)
        args = dict(scale=opt.get("scale", 0.0), causal=meta["causal"], mask=mask,
                    mode=meta.get("mask_mode", "keep"), key_lengths=lengths)
        out, lse, dq, dk, dv, empty = sdpa_grad_math(q, k, v, dout, **args)
        got32 = sdpa_grad_math(q, k, v, dout, dtype=torch.float32, **args)
        for name, a, b in (("dq", dq, got32[2]), ("dk", dk, got32[3]), ("dv", dv, got32[4])):
            err = (a - b.double()).abs().max().item() if a.numel() else 0.0
            assert err <= TOL / 2, f"{case}: torch float32 {name} misses {TOL / 2} ({err:.3g})"
        meta["empty_rows"] = empty
        add_records(w, case, meta, [
            ("q", q), ("k", k), ("v", v), ("dout", dout), ("mask", mask),
            ("key_lengths", lengths), ("out", out), ("lse", lse), ("dq", dq), ("dk", dk),
            ("dv", dv)])
