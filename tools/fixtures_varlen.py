"""The "varlen" fixture set: variable-length batches (FlashAttention's varlen) of scaled
dot-product attention, forward and gradients, for ta_sdpa / ta_sdpa_backward with
opts.cu_seqlens_q/k.

Registered in gen_fixtures.py (`/usr/bin/python3 tools/gen_fixtures.py varlen` writes
tests/fixtures/varlen.tafx); tests/test_sdpa_varlen.c and tests/test_cli_varlen.c read it.

Every case draws packed float32 q [Tq,H,D], k [Tk,Hkv,D], v [Tk,Hkv,Dv] and dO [Tq,H,Dv],
then applies the definition (DESIGN.md, "Variable-length batches") sequence by sequence
in float64 torch math: sequence b is q rows cu_q[b]..cu_q[b+1] against k, v rows
cu_k[b]..cu_k[b+1], each a dense problem of its own (B = 1, its own Lq_b and Lk_b: causal
top_left blocks j > i, bottom_right j > i + Lk_b - Lq_b), computed by the sdpa_grad set's
math (fixtures_sdpa_grad.sdpa_grad_math: autograd of sum(dO * out); a row with no key
gets out 0, LSE -inf and gives no gradient); the gradients land in the packed rows of
their sequence, so dk and dv of keys that no query sees are 0.

Records of a case: meta; q, k, v, dout (f32, packed); cu_seqlens_q, cu_seqlens_k (i32
[num_seqs + 1]); out (f64 [Tq,H,Dv]); lse (f64 [H,Tq]); dq, dk, dv (f64, packed). Meta
keys: shape (H,Hkv,D,Dv), lengths_q, lengths_k (per sequence), scale (0 = the default
1/sqrt(D)), causal (none|top_left|bottom_right), tags, seed, empty_rows (query rows
with no key).
"""

import torch

from fixtures_sdpa_grad import TOL, sdpa_grad_math

# (lengths_q, lengths_k, H, Hkv, D, Dv, options); options: scale, causal, tags
CASES = [
    ([5, 0, 17, 1, 33], [5, 0, 17, 1, 33], 2, 2, 8, 8, dict(tags=["ragged"])),
    ([5, 0, 17, 1, 33], [5, 0, 17, 1, 33], 2, 2, 8, 8,
     dict(causal="top_left", tags=["ragged", "causal"])),
    ([5, 0, 17, 1, 33], [7, 3, 17, 0, 40], 4, 2, 8, 4,
     dict(causal="bottom_right", tags=["ragged", "gqa", "dv", "lq_ne_lk", "empty"])),
    ([5, 0, 17, 1, 33], [7, 3, 17, 0, 40], 4, 2, 8, 4,
     dict(causal="top_left", tags=["ragged", "gqa", "dv", "lq_ne_lk", "empty"])),
    ([9, 4, 12, 6], [3, 4, 20, 1], 2, 1, 8, 8,
     dict(causal="bottom_right", tags=["lq_gt_lk", "empty_rows", "mqa"])),
    ([0, 3, 0, 4, 0, 9, 2, 0], [0, 0, 6, 2, 5, 9, 0, 3], 2, 2, 16, 16,
     dict(tags=["empty", "no_keys", "no_queries"])),
    ([0, 3, 0, 4, 0, 9, 2, 0], [0, 0, 6, 2, 5, 9, 0, 3], 4, 2, 16, 24,
     dict(causal="bottom_right", scale=0.3, tags=["empty", "no_keys", "no_queries", "scale"])),
    ([23], [31], 4, 1, 8, 24, dict(causal="top_left", scale=-0.7, tags=["one_seq", "mqa"])),
    ([70, 2, 129], [90, 5, 129], 1, 1, 8, 8,
     dict(causal="bottom_right", tags=["multi_tile", "decode"])),
    ([1, 1, 1], [40, 1, 65], 4, 2, 8, 8,
     dict(causal="bottom_right", tags=["decode", "gqa"])),
]


def offsets(lengths):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32)


def varlen_math(q, k, v, dout, cq, ck, scale=0.0, causal="none", dtype=torch.float64):
    """Forward and gradients of a packed batch, sequence by sequence, in dtype: each
    sequence [L, Hx, X] becomes a dense [1, Hx, L, X] problem for sdpa_grad_math.
    Returns out [Tq,H,Dv], lse [H,Tq], dq, dk, dv (packed) and the empty-row count."""
    (Tq, H, D), (Tk, Hkv, Dv) = q.shape, v.shape
    out, dq = torch.zeros(Tq, H, Dv, dtype=dtype), torch.zeros(Tq, H, D, dtype=dtype)
    dk, dv = torch.zeros(Tk, Hkv, D, dtype=dtype), torch.zeros(Tk, Hkv, Dv, dtype=dtype)
    lse = torch.full((H, Tq), float("-inf"), dtype=dtype)
    empty = 0
    for b in range(len(cq) - 1):
        qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        dense = [t[s].permute(1, 0, 2).unsqueeze(0)
                 for t, s in ((q, qs), (k, ks), (v, ks), (dout, qs))]
        o, l, gq, gk, gv, n = sdpa_grad_math(*dense, scale=scale, causal=causal, dtype=dtype)
        out[qs], lse[:, qs], dq[qs] = o[0].permute(1, 0, 2), l[0], gq[0].permute(1, 0, 2)
        dk[ks], dv[ks] = gk[0].permute(1, 0, 2), gv[0].permute(1, 0, 2)
        empty += n
    return out, lse, dq, dk, dv, empty


def gen_varlen(w):
    """Writes every case of CASES into w (a gen_fixtures.TafxWriter)."""
    for idx, (lq, lk, H, Hkv, D, Dv, opt) in enumerate(CASES):
        assert len(lq) == len(lk)
        case = f"varlen{idx:03d}"
        seed = 9000 + idx
        torch.manual_seed(seed)
        Tq, Tk = sum(lq), sum(lk)
        q = torch.randn(Tq, H, D, dtype=torch.float32)
        k = torch.randn(Tk, Hkv, D, dtype=torch.float32)
        v = torch.randn(Tk, Hkv, Dv, dtype=torch.float32)
        dout = torch.randn(Tq, H, Dv, dtype=torch.float32)
        cq, ck = offsets(lq), offsets(lk)
        args = dict(scale=opt.get("scale", 0.0), causal=opt.get("causal", "none"))
        out, lse, dq, dk, dv, empty = varlen_math(q, k, v, dout, cq, ck, **args)
        got32 = varlen_math(q, k, v, dout, cq, ck, dtype=torch.float32, **args)
        for name, a, b in (("dq", dq, got32[2]), ("dk", dk, got32[3]), ("dv", dv, got32[4])):
            err = (a - b.double()).abs().max().item() if a.numel() else 0.0
            assert err <= TOL / 2, f"{case}: torch float32 {name} misses {TOL / 2} ({err:.3g})"
        meta = {"shape": [H, Hkv, D, Dv], "lengths_q": lq, "lengths_k": lk,
                "scale": opt.get("scale", 0.0), "causal": args["causal"],
                "tags": opt.get("tags", []), "seed": seed, "empty_rows": empty}
        w.add_case(case, meta)
        for name, t in (("q", q), ("k", k), ("v", v), ("dout", dout), ("cu_seqlens_q", cq),
                        ("cu_seqlens_k", ck), ("out", out), ("lse", lse), ("dq", dq),
                        ("dk", dk), ("dv", dv)):
            w.add(f"{case}/{name}", t)
