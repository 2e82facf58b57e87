"""The "sdpa_variants" fixture set: the attention variants of current models (sliding
window, logit softcapping, ALiBi, attention sinks), forward and gradients, from PyTorch.

Registered in gen_fixtures.py (`/usr/bin/python3 tools/gen_fixtures.py sdpa_variants`
writes tests/fixtures/sdpa_variants.tafx); tests/test_sdpa_variants_torch.c and
tests/test_cli_variants.c read it.

Torch 1.13 has none of these, so each case runs DESIGN.md's definitions ("Inference and
modern attention") literally in float64 torch math, and autograd gives the gradients of
sum(dO * out) with respect to q, k, v and the sinks:
    delta = 0 for causal top_left, else Lk - Lq;  rel = j - (i + delta)
    s = scale q.k;  s = c tanh(s / c) (softcap c > 0);  s -= a_h |rel| (ALiBi);
    s += m (additive mask);  s = -inf where blocked (causal rel > 0, window rel < -left or
    rel > right with -1 unbounded, keep/block mask, key length);
    LSE = log(sum_j exp(s_j) + exp(sigma_h)),  w = exp(s - LSE),  out = w v.
A row with every key blocked has O = 0 and LSE = sigma_h with sinks, -inf without (torch
would give NaN there; the math fills such rows so no NaN reaches autograd). The same math
in float32 must land within half the C tests' tolerances (5e-5 forward, 2e-4 gradients),
or those would not mean much.

Records of a case: meta; q, k, v, dout (f32, contiguous [B,H,L,D]); mask (u8 keep/block,
f32 additive; its own broadcast shape), key_lengths (i64 [B]), alibi (f32 [H] or [B,H]),
sinks (f32 [H]) when used; out, lse, dq, dk, dv (f64), dsinks (f64 [H], with sinks),
weights (f64, small cases). Meta keys: those of the sdpa sets (shape, scale, causal,
mask_mode, layout, tags, seed, empty_rows) and window (left,right) and softcap when set.
"""

import math

import torch

from fixtures_sdpa import add_records, blocked_keys, case_mask, case_meta, draw_qkv

TOL_FWD = 5e-5
TOL_GRAD = 2e-4
WEIGHTS_MAX = 6000


def variant_math(q, k, v, dout, sinks=None, alibi=None, scale=0.0, causal="none", mask=None,
                 mode="keep", key_lengths=None, window=None, softcap=0.0,
                 dtype=torch.float64):
    """The definitions in `dtype`. Returns out, lse, weights, dq, dk, dv, dsinks (None
    without sinks) and the number of rows with every key blocked."""
    q, k, v = (t.to(dtype).detach().requires_grad_(True) for t in (q, k, v))
    sig = sinks.to(dtype).detach().requires_grad_(True) if sinks is not None else None
    B, H, Lq, D = q.shape
    Lk, g = k.shape[2], H // k.shape[1]
    kr, vr = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("bhid,bhjd->bhij", q, kr) * (scale if scale != 0.0 else 1 / math.sqrt(D))
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    delta = 0 if causal == "top_left" else Lk - Lq
    rel = torch.arange(Lk)[None, :] - (torch.arange(Lq)[:, None] + delta)  # [Lq, Lk]
    if alibi is not None:
        a = alibi.to(dtype).reshape(-1 if alibi.dim() == 1 else B, H, 1, 1)
        s = s - a * rel.abs().to(dtype)
    if mask is not None and mode == "additive":
        s = s + mask.to(dtype)
    blocked = blocked_keys(B, H, Lq, Lk, causal, mask, mode, key_lengths)
    if window is not None:
        left, right = window
        blocked |= (rel < -left) if left >= 0 else torch.zeros_like(rel, dtype=torch.bool)
        blocked |= (rel > right) if right >= 0 else torch.zeros_like(rel, dtype=torch.bool)
    s = s.masked_fill(blocked, float("-inf"))
    empty = blocked.all(dim=-1, keepdim=True)  # [B, H, Lq, 1]
    if sig is not None:
        full = torch.cat([s, sig.view(1, H, 1, 1).expand(B, H, Lq, 1)], dim=-1)
        lse = torch.logsumexp(full, dim=-1, keepdim=True)
        w = torch.exp(s - lse)  # exp(-inf - sigma) = 0 on empty rows
    else:  # rows with every key blocked: weights 0, LSE -inf, no gradient
        safe = s.masked_fill(empty, 0.0)
        lse = torch.logsumexp(safe, dim=-1, keepdim=True)
        w = torch.exp(safe - lse).masked_fill(empty, 0.0)
        lse = lse.masked_fill(empty, float("-inf"))
    out = torch.einsum("bhij,bhjd->bhid", w, vr)
    (out * dout.to(dtype)).sum().backward()
    return (out.detach(), lse[..., 0].detach(), w.detach(), q.grad, k.grad, v.grad,
            sig.grad if sig is not None else None, int(empty.sum()))


def alibi_slopes(shape, H):
    """BLOOM's slopes 2^(-8 (h + 1) / H) for [H]; per batch and head, random ones in
    (0, 1] for [B, H]."""
    if len(shape) == 1:
        return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float32)
    return torch.rand(*shape, dtype=torch.float32) * 0.9 + 0.1


# (B, H, Hkv, Lq, Lk, D, Dv, options); options as the sdpa sets' (scale, causal, mask,
# lengths, layout, empty_mask_rows, tags) and window=(left, right), softcap=c,
# alibi="H"|"BH", sinks=True, sink_shift (added to the drawn sinks).
CASES = [
    # --- a window alone: both sides, one side, the diagonal only; Lq != Lk (delta)
    (1, 2, 2, 9, 9, 16, 16, dict(window=(3, 0), tags=["window"])),
    (2, 2, 2, 5, 11, 16, 16, dict(window=(2, 2), tags=["window", "delta"])),
    (2, 2, 2, 11, 5, 16, 16, dict(window=(2, 1), tags=["window", "delta"])),
    (1, 2, 2, 7, 7, 8, 8, dict(window=(0, 0), tags=["window", "diagonal"])),
    (2, 2, 2, 9, 5, 16, 16, dict(window=(4, -1), causal="top_left", tags=["window", "causal"])),
    (2, 2, 2, 5, 9, 16, 16, dict(window=(-1, 1), causal="bottom_right",
                                 tags=["window", "causal"])),
    (2, 2, 2, 6, 13, 16, 16, dict(window=(3, -1), causal="bottom_right",
                                  tags=["window", "causal"])),
    (1, 2, 2, 6, 6, 8, 8, dict(window=(-1, -1), tags=["window", "unbounded"])),
    # rows that the window blocks entirely (delta = -5: rows 0..3 see no key)
    (1, 2, 2, 9, 4, 8, 8, dict(window=(1, 1), tags=["window", "empty_rows"])),
    (1, 2, 2, 9, 4, 8, 8, dict(window=(1, 1), sinks=True, tags=["window", "sinks",
                                                                "empty_rows"])),
    # --- softcap alone and with causal, GQA
    (2, 2, 2, 5, 9, 16, 16, dict(softcap=0.7, tags=["softcap"])),
    (1, 2, 2, 7, 10, 24, 24, dict(softcap=2.0, scale=0.9, tags=["softcap", "scale"])),
    (1, 2, 2, 7, 10, 16, 16, dict(softcap=30.0, tags=["softcap", "gemma"])),
    (2, 4, 2, 9, 9, 8, 8, dict(softcap=1.5, causal="top_left", tags=["softcap", "causal",
                                                                        "gqa"])),
    # --- ALiBi per head and per batch and head, both alignments
    (2, 4, 4, 5, 9, 16, 16, dict(alibi="H", tags=["alibi", "delta"])),
    (2, 3, 3, 9, 5, 16, 16, dict(alibi="BH", causal="top_left", tags=["alibi", "causal"])),
    (2, 3, 3, 5, 9, 16, 16, dict(alibi="BH", causal="bottom_right", tags=["alibi", "causal"])),
    (1, 4, 2, 7, 7, 16, 16, dict(alibi="H", causal="top_left", tags=["alibi", "gqa"])),
    # --- sinks alone, with causal, key lengths (0 included) and empty mask rows
    (2, 2, 2, 5, 9, 16, 16, dict(sinks=True, tags=["sinks"])),
    (2, 4, 2, 9, 5, 16, 16, dict(sinks=True, causal="bottom_right",
                                 tags=["sinks", "causal", "gqa", "empty_rows"])),
    (4, 2, 2, 6, 11, 8, 8, dict(sinks=True, lengths=[0, 3, 11, 1],
                                  tags=["sinks", "key_lengths", "empty_rows"])),
    (2, 2, 2, 6, 6, 16, 16, dict(sinks=True, mask=("LqLk", "keep"), causal="top_left",
                                 empty_mask_rows=True, tags=["sinks", "mask", "empty_rows"])),
    (1, 2, 2, 5, 7, 16, 16, dict(sinks=True, sink_shift=4.0, tags=["sinks", "large"])),
    # --- combinations
    (2, 2, 2, 7, 12, 16, 16, dict(window=(3, 2), softcap=1.0, tags=["window", "softcap"])),
    (2, 4, 2, 8, 8, 16, 16, dict(window=(2, -1), causal="top_left", alibi="H", sinks=True,
                                 tags=["window", "alibi", "sinks", "causal", "gqa"])),
    (2, 2, 2, 6, 10, 16, 16, dict(softcap=0.8, alibi="BH", sinks=True,
                                  mask=("1HLqLk", "additive"),
                                  tags=["softcap", "alibi", "sinks", "mask"])),
    (3, 4, 2, 9, 13, 8, 12, dict(window=(4, 1), softcap=2.0, alibi="H", sinks=True,
                                  causal="bottom_right", mask=("B11Lk", "block"),
                                  lengths=[13, 6, 0], scale=0.3,
                                  tags=["combined", "causal", "gqa", "empty_rows"])),
    (3, 4, 2, 13, 9, 8, 12, dict(window=(3, 3), softcap=1.2, alibi="BH", sinks=True,
                                  causal="top_left", mask=("Lk", "additive"),
                                  lengths=[9, 2, 5], tags=["combined", "causal", "gqa"])),
    (2, 4, 4, 7, 9, 16, 16, dict(layout="blhd", window=(2, 2), softcap=1.0, alibi="H",
                                 sinks=True, causal="top_left",
                                 tags=["combined", "layout", "noncontiguous"])),
    # --- tiles and decode shapes for the fused path (phase 2)
    (1, 1, 1, 70, 90, 16, 16, dict(window=(16, 0), softcap=3.0, causal="top_left",
                                   tags=["multi_tile", "window", "softcap"])),
    (1, 2, 1, 1, 129, 16, 16, dict(window=(31, -1), alibi="H", sinks=True,
                                   causal="bottom_right",
                                   tags=["decode", "window", "alibi", "sinks", "l129"])),
]


def case_variants(opt, meta, B, H):
    """The case's slopes, sinks and variant options (drawn after the mask); sets meta."""
    slopes = sinks = None
    if "alibi" in opt:
        slopes = alibi_slopes((H,) if opt["alibi"] == "H" else (B, H), H)
    if opt.get("sinks"):
        sinks = torch.randn(H, dtype=torch.float32) + opt.get("sink_shift", 0.0)
    if "window" in opt:
        meta["window"] = list(opt["window"])
    if "softcap" in opt:
        meta["softcap"] = opt["softcap"]
    args = dict(sinks=sinks, alibi=slopes, scale=opt.get("scale", 0.0), causal=meta["causal"],
                window=opt.get("window"), softcap=opt.get("softcap", 0.0))
    return slopes, sinks, args


def gen_sdpa_variants(w):
    """Writes every case of CASES into w (a gen_fixtures.TafxWriter)."""
    for idx, (B, H, Hkv, Lq, Lk, D, Dv, opt) in enumerate(CASES):
        case = f"var{idx:03d}"
        seed = 9000 + idx
        q, k, v = draw_qkv(seed, B, H, Hkv, Lq, Lk, D, Dv)
        dout = torch.randn(B, H, Lq, Dv, dtype=torch.float32)
        meta = case_meta(opt, (B, H, Hkv, Lq, Lk, D, Dv), seed)
        mask, lengths = case_mask(opt, meta, B, H, Lq, Lk)
        slopes, sinks, args = case_variants(opt, meta, B, H)
        args.update(mask=mask, mode=meta.get("mask_mode", "keep"), key_lengths=lengths)
        out, lse, weights, dq, dk, dv, dsinks, empty = variant_math(q, k, v, dout, **args)
        got = variant_math(q, k, v, dout, dtype=torch.float32, **args)
        for name, a, b, tol in (("out", out, got[0], TOL_FWD), ("lse", lse, got[1], TOL_FWD),
                                ("dq", dq, got[3], TOL_GRAD), ("dk", dk, got[4], TOL_GRAD),
                                ("dv", dv, got[5], TOL_GRAD), ("dsinks", dsinks, got[6], TOL_GRAD)):
            if a is None or a.numel() == 0:
                continue
            fin = torch.isfinite(a)
            assert torch.equal(fin, torch.isfinite(b)), f"{case}: {name} infinities differ"
            assert torch.equal(a[~fin], b.double()[~fin]), f"{case}: {name} infinities differ"
            err = (a[fin] - b.double()[fin]).abs().max().item() if fin.any() else 0.0
            assert err <= tol / 2, f"{case}: torch float32 {name} misses {tol / 2} ({err:.3g})"
        meta["empty_rows"] = empty
        add_records(w, case, meta, [
            ("q", q), ("k", k), ("v", v), ("dout", dout), ("mask", mask),
            ("key_lengths", lengths), ("alibi", slopes), ("sinks", sinks), ("out", out),
            ("lse", lse), ("weights", weights if B * H * Lq * Lk <= WEIGHTS_MAX else None),
            ("dq", dq), ("dk", dk), ("dv", dv), ("dsinks", dsinks)])
