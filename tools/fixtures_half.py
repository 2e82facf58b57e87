"""The "half" fixture set: scaled dot-product attention with float16 and bfloat16 storage
(issue 11), forward and gradients, for ta_sdpa / ta_sdpa_backward with f16/bf16 tensors.

Registered in gen_fixtures.py (`/usr/bin/python3 tools/gen_fixtures.py half` writes
tests/fixtures/half.tafx); tests/test_sdpa_half.c reads it.

Every case draws float32 q, k, v and dO as the sdpa set does, then rounds each to its
storage dtype with torch (`.to(torch.float16)` / `.to(torch.bfloat16)`: round to
nearest, ties to even, as tensorattn rounds) and stores the ROUNDED values as float32
(exact). The references are float64 torch math (fixtures_sdpa_grad.sdpa_grad_math) of
the rounded inputs: tensorattn widens the stored values exactly and computes in float32,
so the only differences are float32 arithmetic and the rounding of its outputs to their
dtype (the test's tolerance: 2e-3 of the output's scale, DESIGN.md / issue 11).

Records of a case: meta; q, k, v, dout (f32 holding the rounded values); mask and
key_lengths (i64 [B]) when there are some; out, lse, dq, dk, dv (f64). Meta keys: shape
(B,H,Hkv,Lq,Lk,D,Dv), scale, causal, dtypes (four names: the storage of Q, K/V, O/dO and
the gradients), mask_mode, tags, seed.
"""

import torch

from fixtures_sdpa import case_mask, draw_qkv, add_records
from fixtures_sdpa_grad import sdpa_grad_math

DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

# (B, H, Hkv, Lq, Lk, D, Dv, dtypes (q, kv, o/dout, grads), options)
CASES = [
    (2, 2, 2, 17, 17, 16, 16, ("f16",) * 4, dict(tags=["f16"])),
    (2, 2, 2, 17, 17, 16, 16, ("bf16",) * 4, dict(tags=["bf16"])),
    (1, 1, 1, 97, 97, 32, 32, ("f16",) * 4, dict(causal="top_left", tags=["f16", "causal", "multi_tile"])),
    (1, 1, 1, 97, 97, 32, 32, ("bf16",) * 4, dict(causal="top_left", tags=["bf16", "causal", "multi_tile"])),
    (2, 4, 2, 9, 13, 16, 16, ("bf16",) * 4, dict(causal="bottom_right", tags=["bf16", "gqa"])),
    (1, 4, 1, 1, 1030, 8, 8, ("f32", "bf16", "f32", "f32"), dict(causal="bottom_right", tags=["bf16_kv", "decode", "split"])),
    (1, 8, 2, 1, 300, 8, 8, ("f32", "f16", "f32", "f32"), dict(causal="bottom_right", tags=["f16_kv", "decode"])),
    (2, 3, 3, 5, 17, 8, 8, ("f16", "f16", "f32", "bf16"), dict(mask=("B11Lk", "block"), tags=["mixed", "mask"])),
    (4, 2, 2, 6, 11, 16, 16, ("bf16", "f16", "bf16", "f16"), dict(lengths=[0, 3, 11, 1], tags=["mixed", "key_lengths"])),
    (1, 2, 2, 7, 10, 16, 40, ("f16",) * 4, dict(mask=("1HLqLk", "additive"), tags=["f16", "dv", "mask"])),
    # bfloat16 q and K with D a multiple of 32: the few-row tiles take the CPU's bfloat16 dot
    # product where it has one (attn_qk_rows_bf16dot): a GQA decode, three rows a head
    (1, 8, 2, 1, 130, 128, 128, ("bf16",) * 4, dict(causal="bottom_right", tags=["bf16", "decode", "gqa", "dot"])),
    (2, 4, 4, 3, 40, 64, 32, ("bf16", "bf16", "f32", "f32"), dict(causal="bottom_right", tags=["bf16", "dv", "few_rows", "dot"])),
]


def gen_half(w):
    for idx, (B, H, Hkv, Lq, Lk, D, Dv, dts, opt) in enumerate(CASES):
        case = f"half{idx:03d}"
        seed = 9500 + idx
        q, k, v = draw_qkv(seed, B, H, Hkv, Lq, Lk, D, Dv)
        dout = torch.randn(B, H, Lq, Dv, dtype=torch.float32)
        meta = {"shape": [B, H, Hkv, Lq, Lk, D, Dv], "scale": opt.get("scale", 0.0),
                "causal": opt.get("causal", "none"), "dtypes": list(dts),
                "tags": opt.get("tags", []), "seed": seed}
        mask, lengths = case_mask(opt, meta, B, H, Lq, Lk)
        # round to the storage dtypes (torch rounds to nearest, ties to even)
        q = q.to(DT[dts[0]]).float()
        k, v = k.to(DT[dts[1]]).float(), v.to(DT[dts[1]]).float()
        dout = dout.to(DT[dts[2]]).float()
        out, lse, dq, dk, dv, _ = sdpa_grad_math(
            q, k, v, dout, scale=meta["scale"], causal=meta["causal"], mask=mask,
            mode=meta.get("mask_mode", "keep"), key_lengths=lengths)
        add_records(w, case, meta, [("q", q), ("k", k), ("v", v), ("dout", dout),
                                    ("mask", mask), ("key_lengths", lengths), ("out", out), ("lse", lse), ("dq", dq),
                                    ("dk", dk), ("dv", dv)])
