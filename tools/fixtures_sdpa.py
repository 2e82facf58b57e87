"""The "sdpa" fixture set: scaled dot-product attention references from PyTorch.

Registered in gen_fixtures.py (`/usr/bin/python3 tools/gen_fixtures.py sdpa` writes
tests/fixtures/sdpa.tafx); tests/test_sdpa_torch.c reads it.

Two kinds of case:
  seed*   the first seed document's `scaled_dot_product_attention` (verbatim, in
          tools/seed_code.py), run in float64 with the seed's causal mask
          (torch.triu(ones(L, L), diagonal=1).bool(), masked_fill -inf). The C test
          runs ta_sdpa both with opts.causal = top_left and with that mask tensor in
          TA_MASK_BLOCK mode.
  opt*    every ta_sdpa option computed with explicit torch math in float64 (torch 1.13
          has no F.scaled_dot_product_attention): repeat_interleave for grouped heads,
          einsum, scale, masked_fill for causal / key lengths / keep and block masks,
          + for additive masks, softmax, logsumexp, einsum.
PyTorch gives NaN for a query row with no key to attend; tensorattn's contract
(DESIGN.md) is output 0, weights 0, LSE -inf, so the references apply that rule to
such rows (meta empty_rows counts them). NaN inputs stay NaN, as in torch.

Records of a case: meta; q, k, v (f32, stored contiguous [B,H,L,D]); mask (u8 for
keep/block, f32 for additive; its own broadcast shape), key_lengths (i64 [B]) when
used; out (f64 [B,H,Lq,Dv]); lse (f64 [B,H,Lq]); weights (f64 [B,H,Lq,Lk]) only for
small cases (to keep the file small). Meta keys: shape (B,H,Hkv,Lq,Lk,D,Dv), scale
(0 = default 1/sqrt(D)), causal (none|top_left|bottom_right), mask_mode
(keep|block|additive, with a mask), layout (bhld, or blhd: the C test lays Q, K, V and
O out as [B, L, H, D] in memory and passes permuted views, as the second seed's layer
does), tags, seed, empty_rows.
"""

import math

import torch

from seed_code import scaled_dot_product_attention  # the first seed's function

WEIGHTS_MAX = 6000  # store weights only when B*H*Lq*Lk is at most this


def masked_scores(q, k, v, scale=0.0, causal="none", mask=None, mode="keep",
                  key_lengths=None):
    """Scaled, masked scores [B, H, Lq, Lk] of ta_sdpa's semantics from q, k, v already in
    the working dtype (autograd flows through them), and v with its heads repeated for
    the query heads of each group. Blocked keys are -inf; additive masks are added."""
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = H // Hkv
    k = k.repeat_interleave(g, dim=1)  # query head h reads kv head h // g
    v = v.repeat_interleave(g, dim=1)
    s = scale if scale != 0.0 else 1.0 / math.sqrt(D)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * s
    blocked = blocked_keys(B, H, Lq, Lk, causal, mask, mode, key_lengths)
    scores = scores.masked_fill(blocked, float("-inf"))
    if mask is not None and mode == "additive":
        scores = scores + mask.to(q.dtype)
    return scores, v


def blocked_keys(B, H, Lq, Lk, causal="none", mask=None, mode="keep", key_lengths=None):
    """[B, H, Lq, Lk] bool: the keys that the causal limit, the key lengths or a keep /
    block mask hide (an additive mask hides nothing here)."""
    blocked = torch.zeros(B, H, Lq, Lk, dtype=torch.bool)
    if causal == "top_left":
        blocked |= torch.triu(torch.ones(Lq, Lk), diagonal=1).bool()
    elif causal == "bottom_right":
        blocked |= torch.triu(torch.ones(Lq, Lk), diagonal=Lk - Lq + 1).bool()
    if key_lengths is not None:
        pad = torch.arange(Lk)[None, :] >= key_lengths[:, None]
        blocked |= pad[:, None, None, :]
    if mask is not None and mode == "keep":
        blocked |= (mask == 0).expand(B, H, Lq, Lk)
    elif mask is not None and mode == "block":
        blocked |= (mask != 0).expand(B, H, Lq, Lk)
    return blocked


def sdpa_math64(q, k, v, scale=0.0, causal="none", mask=None, mode="keep",
                key_lengths=None, dtype=torch.float64):
    """ta_sdpa's semantics in explicit torch math (float64 unless dtype says otherwise).
    Returns out, weights, lse, and the number of rows that attend to nothing."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scores, v = masked_scores(q, k, v, scale, causal, mask, mode, key_lengths)
    weights = torch.softmax(scores, dim=-1)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhij,bhjd->bhid", weights, v)
    empty = lse == float("-inf")  # no key: torch has NaN here, the contract says 0
    weights[empty] = 0.0
    out[empty] = 0.0
    return out, weights, lse, int(empty.sum())


# (name, B, H, Hkv, Lq, Lk, D, Dv, options)
# options: scale, causal, mask=(shape, mode), lengths=[...], nan=[(tensor, index)...],
#          layout="blhd", empty_mask_rows=True, tags=[...]
CASES = [
    # the seed's function, verbatim, with its causal mask
    ("seed", 2, 2, 2, 5, 5, 8, 8, dict(seed_fn=True, seed_mask=False, tags=["seed"])),
    ("seed", 2, 3, 3, 17, 17, 16, 16, dict(seed_fn=True, tags=["seed", "causal"])),
    ("seed", 1, 8, 8, 3, 3, 64, 64, dict(seed_fn=True, tags=["seed", "causal"])),
    ("seed", 1, 1, 1, 129, 129, 16, 16, dict(seed_fn=True, tags=["seed", "causal", "l129"])),
    # defaults, odd sizes
    ("opt", 1, 1, 1, 1, 1, 8, 8, dict(tags=["size1"])),
    ("opt", 2, 2, 2, 3, 3, 16, 16, dict(tags=["odd"])),
    ("opt", 1, 2, 2, 17, 17, 32, 32, dict(tags=["odd"])),
    ("opt", 1, 1, 1, 1, 257, 32, 32, dict(tags=["decode", "l257"])),
    ("opt", 1, 1, 1, 257, 3, 8, 8, dict(tags=["l257"])),
    ("opt", 1, 1, 1, 129, 129, 16, 16, dict(tags=["l129"])),
    # head dims 8..256
    *[("opt", 1, 1, 1, 3, 5, d, d, dict(tags=["head_dim"])) for d in
      (8, 16, 32, 40, 64, 80, 96, 128, 160, 256)],
    # scale override
    ("opt", 2, 2, 2, 5, 7, 16, 16, dict(scale=0.37, tags=["scale"])),
    ("opt", 1, 2, 2, 5, 7, 16, 16, dict(scale=-1.5, tags=["scale", "negative"])),
    # causal alignments, Lq < Lk and Lq > Lk
    ("opt", 2, 2, 2, 5, 9, 16, 16, dict(causal="top_left", tags=["causal"])),
    ("opt", 2, 2, 2, 9, 5, 16, 16, dict(causal="top_left", tags=["causal"])),
    ("opt", 2, 2, 2, 5, 9, 16, 16, dict(causal="bottom_right", tags=["causal"])),
    ("opt", 2, 2, 2, 9, 5, 16, 16, dict(causal="bottom_right", tags=["causal", "empty_rows"])),
    ("opt", 1, 2, 2, 1, 17, 32, 32, dict(causal="bottom_right", tags=["causal", "decode"])),
    ("opt", 1, 1, 1, 129, 129, 24, 24, dict(causal="top_left", tags=["causal", "l129"])),
    ("opt", 1, 1, 1, 3, 257, 32, 32, dict(causal="bottom_right", tags=["causal", "l257"])),
    # mask modes with broadcasting
    ("opt", 2, 3, 3, 5, 17, 8, 8, dict(mask=("LqLk", "keep"), tags=["mask"])),
    ("opt", 2, 3, 3, 5, 17, 8, 8, dict(mask=("B11Lk", "block"), tags=["mask", "padding"])),
    ("opt", 2, 3, 3, 5, 17, 8, 8, dict(mask=("1HLqLk", "additive"), tags=["mask"])),
    ("opt", 2, 3, 3, 5, 17, 8, 8, dict(mask=("BHLqLk", "keep"), tags=["mask"])),
    ("opt", 2, 3, 3, 5, 17, 8, 8, dict(mask=("Lk", "additive"), tags=["mask"])),
    ("opt", 2, 3, 3, 5, 17, 8, 8, dict(mask=("H1Lk", "block"), tags=["mask"])),
    ("opt", 2, 2, 2, 6, 6, 16, 16, dict(mask=("LqLk", "keep"), causal="top_left",
                                        empty_mask_rows=True, tags=["mask", "empty_rows"])),
    # key lengths, 0 and Lk included
    ("opt", 4, 2, 2, 6, 11, 16, 16, dict(lengths=[0, 3, 11, 1], tags=["key_lengths"])),
    ("opt", 4, 2, 2, 6, 11, 16, 16, dict(lengths=[11, 0, 5, 2], causal="bottom_right",
                                         tags=["key_lengths", "causal"])),
    # grouped-query attention
    ("opt", 2, 4, 2, 9, 13, 32, 32, dict(tags=["gqa"])),
    ("opt", 2, 4, 1, 9, 13, 32, 32, dict(causal="top_left", tags=["gqa", "mqa"])),
    ("opt", 1, 4, 2, 9, 13, 16, 16, dict(mask=("1HLqLk", "additive"), tags=["gqa", "mask"])),
    # Dv != D
    ("opt", 1, 2, 2, 7, 10, 32, 48, dict(tags=["dv"])),
    ("opt", 1, 2, 2, 7, 10, 8, 3, dict(causal="top_left", tags=["dv"])),
    # everything at once
    ("opt", 3, 2, 1, 17, 19, 24, 40, dict(scale=0.2, causal="bottom_right",
                                          mask=("B11Lk", "additive"), lengths=[19, 7, 0],
                                          tags=["combined"])),
    # NaN propagation: Q[0,0,1,2] and K[0,1,3,0] (a key rows i >= 3 attend)
    ("opt", 1, 2, 2, 5, 6, 8, 8, dict(causal="top_left", nan=[("q", (0, 0, 1, 2)),
                                                              ("k", (0, 1, 3, 0))],
                                      tags=["nan"])),
    # the second seed's layout: [B, L, H, D] in memory, head-split views
    ("opt", 2, 4, 4, 7, 9, 16, 16, dict(layout="blhd", causal="top_left",
                                        tags=["layout", "noncontiguous"])),
]


# ------------------------------------------- shared with fixtures_sdpa_grad.py


def draw_qkv(seed, B, H, Hkv, Lq, Lk, D, Dv):
    """Seeds torch with seed and draws float32 q, k, v (in that order)."""
    torch.manual_seed(seed)
    q = torch.randn(B, H, Lq, D, dtype=torch.float32)
    k = torch.randn(B, Hkv, Lk, D, dtype=torch.float32)
    v = torch.randn(B, Hkv, Lk, Dv, dtype=torch.float32)
    return q, k, v


def case_meta(opt, shape, seed):
    """A case's meta from its shape (B, H, Hkv, Lq, Lk, D, Dv) and options."""
    return {"shape": list(shape), "scale": opt.get("scale", 0.0),
            "causal": opt.get("causal", "none"), "layout": opt.get("layout", "bhld"),
            "tags": opt.get("tags", []), "seed": seed}


def case_mask(opt, meta, B, H, Lq, Lk):
    """The mask (drawn now, None without option mask) and key lengths (None without
    option lengths) of a case's options; sets meta["mask_mode"] when there is a mask.
    Mask shapes (broadcast to [B, H, Lq, Lk]): LqLk, B11Lk, 1HLqLk, BHLqLk, Lk, H1Lk;
    keep/block masks are bool, additive ones float32 with every 7th element -inf."""
    mask = lengths = None
    if "mask" in opt:
        kind, mode = opt["mask"]
        shape = {"LqLk": (Lq, Lk), "B11Lk": (B, 1, 1, Lk), "1HLqLk": (1, H, Lq, Lk),
                 "BHLqLk": (B, H, Lq, Lk), "Lk": (Lk,), "H1Lk": (H, 1, Lk)}[kind]
        if mode == "additive":
            mask = torch.randn(*shape, dtype=torch.float32)
            mask.view(-1)[3::7] = float("-inf")  # some keys blocked additively
        else:
            mask = torch.rand(*shape) < (0.7 if mode == "keep" else 0.3)  # bool
        if opt.get("empty_mask_rows"):
            mask[1, :] = False  # query row 1 keeps no key
            mask[4, :] = False
        meta["mask_mode"] = mode
    if "lengths" in opt:
        lengths = torch.tensor(opt["lengths"], dtype=torch.int64)
    return mask, lengths


def add_records(w, case, meta, records):
    """Writes a case: its meta, then each (name, tensor) of records in order, leaving
    out those whose tensor is None."""
    w.add_case(case, meta)
    for name, t in records:
        if t is not None:
            w.add(f"{case}/{name}", t)


# ------------------------------------------------------------------ the set


def gen_sdpa(w):
    """Writes every case of CASES into w (a gen_fixtures.TafxWriter)."""
    for idx, (kind, B, H, Hkv, Lq, Lk, D, Dv, opt) in enumerate(CASES):
        case = f"{kind}{idx:03d}"
        seed = 5000 + idx
        q, k, v = draw_qkv(seed, B, H, Hkv, Lq, Lk, D, Dv)
        for name, index in opt.get("nan", []):
            {"q": q, "k": k, "v": v}[name][index] = float("nan")
        meta = case_meta(opt, (B, H, Hkv, Lq, Lk, D, Dv), seed)
        mask = lengths = None
        if opt.get("seed_fn"):
            # The seed builds its causal mask for square scores; it is a block mask.
            if opt.get("seed_mask", True):
                mask = torch.triu(torch.ones(Lq, Lk), diagonal=1).bool()
                meta["causal"] = "top_left"
                meta["mask_mode"] = "block"
            out, weights = scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                        mask=mask)
            s = torch.einsum("bhid,bhjd->bhij", q.double(), k.double()) / (D ** 0.5)
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            # cross-check the explicit math against the seed
            o2, w2, l2, _ = sdpa_math64(q, k, v, causal=meta["causal"])
            assert torch.allclose(out, o2, atol=1e-12) and torch.allclose(weights, w2, atol=1e-12)
            empty = 0
        else:
            mask, lengths = case_mask(opt, meta, B, H, Lq, Lk)
            out, weights, lse, empty = sdpa_math64(
                q, k, v, scale=opt.get("scale", 0.0), causal=meta["causal"], mask=mask,
                mode=meta.get("mask_mode", "keep"), key_lengths=lengths)
            # torch's own float32 math must land within the tolerance the C test uses,
            # or the tolerance is not meaningful for this case
            o32, _, _, _ = sdpa_math64(q, k, v, scale=opt.get("scale", 0.0),
                                       causal=meta["causal"], mask=mask,
                                       mode=meta.get("mask_mode", "keep"), key_lengths=lengths,
                                       dtype=torch.float32)
            assert torch.equal(torch.isnan(o32), torch.isnan(out)), case
            err = (o32.double() - out).abs().nan_to_num(0.0).max().item() if out.numel() else 0.0
            assert err <= 1e-5, f"{case}: torch float32 misses 1e-5 ({err:.3g})"
        meta["empty_rows"] = empty
        add_records(w, case, meta, [
            ("q", q), ("k", k), ("v", v), ("mask", mask), ("key_lengths", lengths),
            ("out", out), ("lse", lse),
            ("weights", weights if B * H * Lq * Lk <= WEIGHTS_MAX else None)])
