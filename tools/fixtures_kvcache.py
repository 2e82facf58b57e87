"""The "kvcache" fixture set: attention against a KV cache (FlashAttention's
flash_attn_with_kvcache, DESIGN.md "KV cache") computed by PyTorch in float64.

Registered in gen_fixtures.py (`/usr/bin/python3 tools/gen_fixtures.py kvcache` writes
tests/fixtures/kvcache.tafx); tests/test_kvcache_torch.c and tests/test_cli_kvcache.c
read it.

The definition, step by step, in plain torch:
  1. append: k_new[b, t] and v_new[b, t] are written into sequence b's cache at position
     p = cache_seqlens[b] + t; a contiguous cache [B, Lmax, Hkv, D] holds it at [b, p], a
     paged one [num_blocks, block_size, Hkv, D] at [block_table[b, p // block_size],
     p % block_size];
  2. sequence b's keys are its cache's first Lk_b = cache_seqlens[b] + Lnew positions,
     gathered into [1, Hkv, Lk_b, D]; q[b] [Lq, H, D] attends to them with
     fixtures_sdpa.sdpa_math64 (grouped heads, scale, causal aligned to Lk_b: bottom_right
     is query i sees keys j <= i + Lk_b - Lq), float64, O = 0 and LSE = -inf for a row
     with no key.
Cache rows that hold no key (past a sequence's keys, blocks no sequence uses) are NaN,
and block-table entries past the blocks a sequence uses are -1: neither may be read.

Records of a case: meta; q [B,Lq,H,D], k_cache, v_cache (f32, the cache before the
call), k_new, v_new [B,Lnew,Hkv,D|Dv] (f32, absent without new keys), cache_seqlens
(i32 [B]), block_table (i32 [B,max_blocks], paged only); out (f64 [B,Lq,H,Dv]), lse
(f64 [B,H,Lq]), k_cache_out, v_cache_out (f32: the caches after the append, exact).
Meta keys: shape (B,H,Hkv,Lq,D,Dv,Lnew), cache (contiguous|paged), scale (0: default),
causal (none|top_left|bottom_right), tags, seed, empty_rows.
"""

import torch

from fixtures_sdpa import add_records, sdpa_math64

# (B, H, Hkv, Lq, D, Dv, Lnew, seqlens, cache, options)
# cache: ("contiguous", Lmax) or ("paged", block_size, max_blocks, num_blocks)
# options: causal (default bottom_right), scale, tags
CASES = [
    # decode against a contiguous cache: an empty sequence, one filled to capacity
    (3, 4, 2, 1, 16, 16, 1, [0, 7, 19], ("contiguous", 20), dict(tags=["decode", "full"])),
    # no new keys: one empty sequence (its row attends to nothing), one full cache
    (3, 2, 2, 1, 8, 8, 0, [0, 9, 4], ("contiguous", 9),
     dict(causal="none", tags=["decode", "no_new", "empty", "full"])),
    # chunked prefill, multi-query, Dv != D, the second sequence filled to capacity
    (2, 4, 1, 5, 16, 24, 5, [0, 18], ("contiguous", 23), dict(tags=["prefill", "mqa", "dv", "full"])),
    # Lq > Lk_b for the second sequence: rows before its first key attend to nothing
    (2, 2, 2, 3, 8, 8, 2, [4, 0], ("contiguous", 7), dict(tags=["prefill", "empty_rows"])),
    # paged decode: blocks of 4, out of order; the last sequence fills its table
    (3, 4, 2, 1, 16, 16, 1, [0, 10, 19], ("paged", 4, 5, 12), dict(tags=["decode", "paged", "full"])),
    # paged, no new keys, blocks of 16, GQA, Dv < D, a scale, an empty sequence
    (2, 8, 2, 1, 32, 16, 0, [33, 0], ("paged", 16, 3, 7),
     dict(causal="none", scale=0.3, tags=["decode", "paged", "no_new", "gqa", "dv", "empty"])),
    # paged chunked prefill across block boundaries
    (2, 2, 2, 6, 8, 8, 6, [3, 10], ("paged", 8, 3, 8), dict(tags=["prefill", "paged"])),
    # top-left causal (query i sees keys j <= i) on a paged cache
    (2, 4, 2, 4, 8, 8, 4, [5, 0], ("paged", 4, 4, 9),
     dict(causal="top_left", tags=["prefill", "paged", "top_left"])),
    # blocks of one key
    (2, 4, 2, 2, 8, 8, 2, [4, 1], ("paged", 1, 7, 14), dict(tags=["prefill", "paged", "block1"])),
    # a full cache without new keys, not causal and causal
    (2, 2, 1, 3, 8, 8, 0, [6, 6], ("contiguous", 6), dict(causal="none", tags=["no_new", "full"])),
    (2, 2, 1, 3, 8, 8, 0, [6, 2], ("contiguous", 6), dict(tags=["no_new", "full", "empty_rows"])),
    # long caches: decode splits the keys into chunks merged by LSE
    (1, 2, 1, 1, 4, 4, 1, [1029], ("contiguous", 1030), dict(tags=["decode", "split", "full"])),
    (2, 2, 1, 1, 4, 4, 1, [1100, 300], ("paged", 16, 70, 100),
     dict(tags=["decode", "split", "paged"])),
]


def block_tables(gen, B, max_blocks, num_blocks, used):
    """A table [B, max_blocks] giving sequence b its used[b] blocks, drawn without
    repetition from a random permutation of the blocks; the other entries are -1."""
    perm = torch.randperm(num_blocks, generator=gen)
    assert sum(used) <= num_blocks
    table = torch.full((B, max_blocks), -1, dtype=torch.int32)
    n = 0
    for b in range(B):
        table[b, :used[b]] = perm[n:n + used[b]].to(torch.int32)
        n += used[b]
    return table


def position(cache, table, b, p):
    """The cache index of position p of sequence b ([b, p] or [block, row])."""
    if cache[0] == "contiguous":
        return b, p
    bs = cache[1]
    return int(table[b, p // bs]), p % bs


def kvcache_ref(q, kc, vc, knew, vnew, seqlens, table, cache, causal, scale):
    """The definition: the updated caches, then O [B,Lq,H,Dv] and LSE [B,H,Lq] in float64
    (dtype for the torch float32 cross-check), and the count of rows with no key."""
    kc, vc = kc.clone(), vc.clone()
    B, Lq = q.shape[0], q.shape[1]
    Lnew = knew.shape[1] if knew is not None else 0
    for b in range(B):
        for t in range(Lnew):
            i = position(cache, table, b, seqlens[b] + t)
            kc[i] = knew[b, t]
            vc[i] = vnew[b, t]
    outs, lses, empty = {}, {}, 0
    for dtype in (torch.float64, torch.float32):
        o_all, l_all = [], []
        for b in range(B):
            idx = [position(cache, table, b, p) for p in range(seqlens[b] + Lnew)]
            kb = torch.stack([kc[i] for i in idx]) if idx else kc[0, :0]
            vb = torch.stack([vc[i] for i in idx]) if idx else vc[0, :0]
            # [Lk_b, Hkv, X] -> [1, Hkv, Lk_b, X]; q[b] [Lq, H, D] -> [1, H, Lq, D]
            o, _, lse, e = sdpa_math64(q[b].transpose(0, 1)[None], kb.transpose(0, 1)[None],
                                       vb.transpose(0, 1)[None], scale=scale, causal=causal,
                                       dtype=dtype)
            o_all.append(o[0].transpose(0, 1))  # [Lq, H, Dv]
            l_all.append(lse[0])
            if dtype == torch.float64:
                empty += e
        outs[dtype] = torch.stack(o_all) if B else q.new_zeros(0)
        lses[dtype] = torch.stack(l_all)
    err = (outs[torch.float32].double() - outs[torch.float64]).abs().max().item()
    assert err <= 1e-5, f"torch float32 misses 1e-5 ({err:.3g})"
    return kc, vc, outs[torch.float64], lses[torch.float64], empty


def gen_kvcache(w):
    """Writes every case of CASES into w (a gen_fixtures.TafxWriter)."""
    for idx, (B, H, Hkv, Lq, D, Dv, Lnew, seqlens, cache, opt) in enumerate(CASES):
        case = f"kv{idx:03d}"
        seed = 7000 + idx
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        causal = opt.get("causal", "bottom_right")
        scale = opt.get("scale", 0.0)
        q = torch.randn(B, Lq, H, D, dtype=torch.float32)
        knew = torch.randn(B, Lnew, Hkv, D, dtype=torch.float32) if Lnew else None
        vnew = torch.randn(B, Lnew, Hkv, Dv, dtype=torch.float32) if Lnew else None
        table = None
        if cache[0] == "contiguous":
            lead = (B, cache[1])
        else:
            bs, max_blocks, num_blocks = cache[1:]
            used = [(n + Lnew + bs - 1) // bs for n in seqlens]
            table = block_tables(gen, B, max_blocks, num_blocks, used)
            lead = (num_blocks, bs)
        # rows that hold no key are NaN: the library must never read them
        kc = torch.full((*lead, Hkv, D), float("nan"), dtype=torch.float32)
        vc = torch.full((*lead, Hkv, Dv), float("nan"), dtype=torch.float32)
        for b in range(B):
            for p in range(seqlens[b]):
                i = position(cache, table, b, p)
                kc[i] = torch.randn(Hkv, D)
                vc[i] = torch.randn(Hkv, Dv)
        kc2, vc2, out, lse, empty = kvcache_ref(q, kc, vc, knew, vnew, seqlens, table, cache,
                                                causal, scale)
        meta = {"shape": [B, H, Hkv, Lq, D, Dv, Lnew], "cache": cache[0], "scale": scale,
                "causal": causal, "tags": opt.get("tags", []), "seed": seed,
                "empty_rows": empty}
        add_records(w, case, meta, [
            ("q", q), ("k_cache", kc), ("v_cache", vc), ("k_new", knew), ("v_new", vnew),
            ("cache_seqlens", torch.tensor(seqlens, dtype=torch.int32)),
            ("block_table", table), ("out", out), ("lse", lse),
            ("k_cache_out", kc2), ("v_cache_out", vc2)])
