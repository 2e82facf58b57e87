"""Fixture set "layers": the seed's SelfAttention (tools/seed_code.py) and
torch.nn.MultiheadAttention.

Registered in gen_fixtures.py; writes tests/fixtures/layers.tafx, read by
tests/test_attention_torch.c. Each case "<name>" has records:
  meta     kind=seed|torch, embed, heads, and the options the C call needs:
           mask_mode=keep|block|additive (when a mask record exists),
           kpm_mode=block|additive (when a key_padding_mask record exists),
           causal=1 (torch cases: the mask PyTorch got is triu(ones, 1), the C call
           passes opts.causal instead), weights=none|avg|heads
  queries, keys, values   f32 [N, L, E] (the same values for self attention; meta
           self=1 says so, and the C test then passes one tensor three times)
  mask     the seed's mask (u8, nonzero = keep, any broadcastable shape) or torch's
           attn_mask (u8 bool, True = blocked, or f32 additive; [Lq, Lk] or
           [N*H, Lq, Lk])
  key_padding_mask        u8 bool (True = padding) or f32 additive, [N, Lk]
  p.<state_dict name>     f32 parameters ("p.fc_out.weight", "p.in_proj_weight", ...)
  out      f32: the module's float32 output
  out64    f64: the same module and inputs in float64 (the reference the C test uses
           for its tolerance; out is checked too)
  weights, weights64      torch cases with need_weights: f32/f64 attention weights,
           [N, Lq, Lk] averaged or [N, H, Lq, Lk]

Seeds: case i runs under torch.manual_seed(2000 + i), so appending a case never
changes the earlier ones. No case has a query row with every key blocked in the
torch layout (PyTorch gives NaN there; tensorattn gives zeros, tested in C).
"""

import torch
import torch.nn as nn

from seed_code import SelfAttention  # the second seed's class, verbatim


# ------------------------------------------------------------------ cases
# (name, kind, E, H, N, Lq, Lk, options)
#   self=True: queries = keys = values (Lq == Lk)
#   seed mask: "tril" ([Lq, Lk] lower-triangular keep) or "pad" ([N, 1, 1, Lk] keep,
#     lengths in pad=[...], 0 = every key masked: uniform rows)
#   torch: mask="bool2d" | "bool3d" | "float2d", kpm="bool" | "float", causal=True,
#     weights="avg" | "heads"
LAYER_CASES = [
    ("seed_example", "seed", 8, 2, 1, 4, 4, dict(self=True, rand=True)),
    ("seed_example_tril", "seed", 8, 2, 1, 4, 4, dict(self=True, rand=True, mask="tril")),
    ("seed_large_self", "seed", 64, 8, 2, 17, 17, dict(self=True)),
    ("seed_large_cross", "seed", 64, 8, 2, 7, 13, dict()),
    ("seed_large_tril", "seed", 64, 8, 1, 17, 17, dict(self=True, mask="tril")),
    ("seed_padding_fully_masked", "seed", 64, 8, 3, 5, 9, dict(mask="pad", pad=[6, 9, 0])),
    ("torch_small_self", "torch", 8, 2, 1, 4, 4, dict(self=True, weights="avg")),
    ("torch_self", "torch", 64, 8, 2, 9, 9, dict(self=True, weights="avg")),
    ("torch_cross_heads", "torch", 64, 8, 2, 7, 11, dict(weights="heads")),
    ("torch_bool2d", "torch", 32, 4, 2, 7, 11, dict(mask="bool2d", weights="avg")),
    ("torch_bool3d", "torch", 32, 4, 2, 7, 11, dict(mask="bool3d", weights="heads")),
    ("torch_float2d", "torch", 32, 4, 2, 7, 11, dict(mask="float2d", weights="avg")),
    ("torch_kpm_bool", "torch", 32, 4, 3, 7, 11, dict(kpm="bool", weights="heads")),
    ("torch_kpm_float", "torch", 32, 4, 2, 7, 11, dict(kpm="float", weights="avg")),
    ("torch_kpm_and_bool2d", "torch", 32, 4, 2, 9, 9,
     dict(self=True, mask="bool2d", kpm="bool", weights="avg")),
    ("torch_causal", "torch", 64, 8, 2, 13, 13, dict(self=True, causal=True, weights="heads")),
    ("torch_causal_kpm", "torch", 32, 4, 2, 13, 13,
     dict(self=True, causal=True, kpm="bool", weights="none")),
]


# ------------------------------------------ shared with fixtures_layers_grad.py


def layer_inputs(opt, N, Lq, Lk, E, gen=torch.randn):
    """queries, keys, values [N, L, E] drawn with gen: one tensor three times when
    opt["self"] (Lq == Lk), else three."""
    if opt.get("self"):
        x = gen(N, Lq, E)
        return x, x, x
    return gen(N, Lq, E), gen(N, Lk, E), gen(N, Lk, E)


def keep_lengths(lengths, Lk):
    """A float keep mask [N, Lk]: key j of batch n is kept when j < lengths[n]."""
    return (torch.arange(Lk)[None, :] < torch.tensor(lengths)[:, None]).float()


def torch_mha(E, H):
    """nn.MultiheadAttention(E, H, batch_first=True) with its biases (0 by default) drawn
    from U(-0.5, 0.5), so that they are tested, in train mode (dropout is 0; train mode
    keeps PyTorch off its fused fast path)."""
    m = nn.MultiheadAttention(E, H, batch_first=True)
    with torch.no_grad():
        m.in_proj_bias.uniform_(-0.5, 0.5)
        m.out_proj.bias.uniform_(-0.5, 0.5)
    return m.train()


def float64_copy(m, make):
    """make() (a new module of m's kind) in float64, holding m's parameters."""
    m64 = make().double()
    m64.load_state_dict({kk: vv.double() for kk, vv in m.state_dict().items()})
    return m64


def add_layer_records(w, name, meta, q, k, v, m, mask=None, kpm=None):
    """Writes a layer case's meta, inputs, mask and key padding mask (None: left out) and
    the parameters of module m."""
    w.add_case(name, meta)
    w.add(f"{name}/queries", q)
    w.add(f"{name}/keys", k)
    w.add(f"{name}/values", v)
    if mask is not None:
        w.add(f"{name}/mask", mask)
    if kpm is not None:
        w.add(f"{name}/key_padding_mask", kpm)
    for pname, p in m.state_dict().items():
        w.add(f"{name}/p.{pname}", p)


# ------------------------------------------------------------------ the set


def _no_empty_rows(blocked):
    """Unblocks key 0 of any row blocked everywhere (PyTorch would give NaN)."""
    full = blocked.all(dim=-1)
    blocked[..., 0] = blocked[..., 0] & ~full
    return blocked


def _seed_case(w, name, E, H, N, Lq, Lk, opt):
    gen = torch.rand if opt.get("rand") else torch.randn  # the seed's example uses rand
    m = SelfAttention(E, H)
    q, k, v = layer_inputs(opt, N, Lq, Lk, E, gen)
    mask = None
    meta = {"kind": "seed", "embed": E, "heads": H, "self": int(bool(opt.get("self"))),
            "weights": "none"}
    if opt.get("mask") == "tril":
        mask = torch.tril(torch.ones(Lq, Lk))
    elif opt.get("mask") == "pad":
        mask = keep_lengths(opt["pad"], Lk).reshape(N, 1, 1, Lk)
    if mask is not None:
        meta["mask_mode"] = "keep"
    with torch.no_grad():
        out = m(v, k, q, mask)  # the seed's forward takes (values, keys, queries, mask)
        m64 = float64_copy(m, lambda: SelfAttention(E, H))
        out64 = m64(v.double(), k.double(), q.double(), None if mask is None else mask.double())
    add_layer_records(w, name, meta, q, k, v, m,
                      mask=None if mask is None else (mask != 0).to(torch.uint8))
    w.add(f"{name}/out", out)
    w.add(f"{name}/out64", out64)


def _torch_case(w, name, E, H, N, Lq, Lk, opt):
    m = torch_mha(E, H)
    q, k, v = layer_inputs(opt, N, Lq, Lk, E)
    meta = {"kind": "torch", "embed": E, "heads": H, "self": int(bool(opt.get("self"))),
            "weights": opt.get("weights", "none")}
    attn_mask = kpm = None
    kind = opt.get("mask")
    # the key padding first: the attn mask then avoids rows blocked everywhere
    kpm_blocked = torch.zeros(N, Lk, dtype=torch.bool)
    if opt.get("kpm") == "bool":
        lens = torch.randint(Lk // 2, Lk + 1, (N,))
        kpm_blocked = torch.arange(Lk)[None, :] >= lens[:, None]
        kpm_blocked[0, 1] = True  # not only a suffix: the general path
        kpm = kpm_blocked
        meta["kpm_mode"] = "block"
    elif opt.get("kpm") == "float":
        kpm = torch.rand(N, Lk) * 4 - 3
        meta["kpm_mode"] = "additive"
    if kind in ("bool2d", "bool3d"):
        shape = (Lq, Lk) if kind == "bool2d" else (N * H, Lq, Lk)
        blocked = torch.rand(*shape) < 0.3
        if opt.get("causal"):
            blocked |= torch.ones(Lq, Lk, dtype=torch.bool).triu(1)
        full = blocked if kind == "bool3d" else blocked.unsqueeze(0)
        kb = kpm_blocked.repeat_interleave(H, dim=0)[:, None, :] if kind == "bool3d" \
            else kpm_blocked[:, None, :]
        empty = (full | kb).all(dim=-1)  # rows with nothing to attend to
        if kind == "bool2d":
            empty = empty.any(dim=0)
        blocked[..., 0] &= ~empty
        attn_mask = blocked
        meta["mask_mode"] = "block"
    elif kind == "float2d":
        attn_mask = torch.randn(Lq, Lk) * 2
        attn_mask[1, 3] = float("-inf")
        meta["mask_mode"] = "additive"
    if opt.get("causal"):
        meta["causal"] = 1
        if attn_mask is None:
            attn_mask = torch.ones(Lq, Lk, dtype=torch.bool).triu(1)
    need = meta["weights"] != "none"
    avg = meta["weights"] == "avg"
    with torch.no_grad():
        out, wts = m(q, k, v, key_padding_mask=kpm, need_weights=need, attn_mask=attn_mask,
                     average_attn_weights=avg)
        m64 = float64_copy(m, lambda: nn.MultiheadAttention(E, H, batch_first=True))
        m64.train()
        dbl = lambda t: None if t is None else (t if t.dtype == torch.bool else t.double())
        out64, wts64 = m64(q.double(), k.double(), v.double(), key_padding_mask=dbl(kpm),
                           need_weights=need, attn_mask=dbl(attn_mask), average_attn_weights=avg)
    assert not torch.isnan(out).any(), name
    # a mask that is only the causal limit is not written: C passes opts.causal
    add_layer_records(w, name, meta, q, k, v, m, kpm=kpm,
                      mask=None if opt.get("causal") and kind is None else attn_mask)
    w.add(f"{name}/out", out)
    w.add(f"{name}/out64", out64)
    if need:
        w.add(f"{name}/weights", wts)
        w.add(f"{name}/weights64", wts64)


def gen_layers(w):
    """The 'layers' set (see the module docstring)."""
    for idx, (name, kind, E, H, N, Lq, Lk, opt) in enumerate(LAYER_CASES):
        torch.manual_seed(2000 + idx)
        if kind == "seed":
            _seed_case(w, name, E, H, N, Lq, Lk, opt)
        else:
            _torch_case(w, name, E, H, N, Lq, Lk, opt)
