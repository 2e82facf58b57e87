"""Fixture set "layers_grad": PyTorch autograd gradients of the attention layers, and
optimiser trajectories.

Registered in gen_fixtures.py; writes tests/fixtures/layers_grad.tafx, read by
tests/test_attention_torch.c (kind=seed|torch) and tests/test_optim.c (kind=optim).

Layer cases "<name>" (the parameters and inputs are float32 values; every gradient is
computed by float64 autograd on those values, so the C float32 backward is compared with
the exact answer):
  meta     kind=seed|torch, embed, heads, self=0|1, and for the C call:
           mask_mode=keep|block|additive, kpm_mode=keep|block|additive, causal=1
           (torch: the mask torch got is triu(ones, 1); C passes opts.causal)
  queries, keys, values   f32 [N, L, E] (self=1: the same values; the C test passes one
           tensor three times and one gradient buffer three times)
  mask, key_padding_mask  as in the "layers" set (seed: u8 keep; torch: u8 bool True =
           blocked, or f32 additive); the seed's key padding is given to PyTorch folded
           into its mask (mask * keep[n, None, None, :]), to C as key_padding_mask
  p.<state_dict name>     f32 parameters
  dout     f32 [N, Lq, E]: the upstream gradient (out.backward(dout))
  g.<state_dict name>     f64 parameter gradients
  d_queries, d_keys, d_values   f64 input gradients (self=1: d_queries only, the total)
Optimiser cases "optim_<name>" (kind=optim): optimizer=adamw|sgd and its hyperparameters
  in the meta; p0 f32 [3, 5]; grads f32 [T, 3, 5] (p.grad at step t); params f32 [T, 3,
  5] (the parameter after step t), from torch.optim in float32.

Seeds: case i runs under torch.manual_seed(3000 + i).
"""

import torch
import torch.nn as nn

from fixtures_layers import (add_layer_records, float64_copy, keep_lengths, layer_inputs,
                             torch_mha)
from seed_code import SelfAttention  # the second seed's class, verbatim

# (name, kind, E, H, N, Lq, Lk, options)
#   self=True: one input tensor (Lq == Lk)
#   seed: mask="tril" ([Lq, Lk] keep), "pad" (key padding keep [N, Lk] with lengths pad,
#     0 = every key masked: uniform rows), "tril_uniform" (tril with its first row masked)
#   torch: mask="bool2d" | "float2d", kpm="bool", causal=True
GRAD_CASES = [
    ("seed_self", "seed", 16, 4, 2, 5, 5, dict(self=True)),
    ("seed_cross", "seed", 16, 4, 2, 4, 6, dict()),
    ("seed_self_tril", "seed", 16, 2, 2, 6, 6, dict(self=True, mask="tril")),
    ("seed_tril_uniform_row", "seed", 8, 2, 2, 5, 5, dict(mask="tril_uniform")),
    ("seed_padding_fully_masked", "seed", 16, 4, 3, 4, 6, dict(mask="pad", pad=[3, 6, 0])),
    ("torch_self", "torch", 16, 4, 2, 5, 5, dict(self=True)),
    ("torch_cross", "torch", 16, 4, 2, 4, 6, dict()),
    ("torch_bool2d_kpm", "torch", 16, 2, 2, 5, 7, dict(mask="bool2d", kpm="bool")),
    ("torch_float2d", "torch", 16, 4, 2, 5, 6, dict(mask="float2d")),
    ("torch_causal", "torch", 16, 4, 2, 6, 6, dict(self=True, causal=True)),
]

OPTIM_CASES = [
    ("optim_adamw", "adamw", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2)),
    ("optim_adamw_wd", "adamw", dict(lr=5e-2, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1)),
    ("optim_sgd_nesterov", "sgd", dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.01,
                                       nesterov=1)),
    ("optim_sgd_momentum", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.0,
                                       nesterov=0)),
]


def _record_grads(w, name, m64, q, k, v, self_attn, dout, pnames, call):
    """Runs call(module, q, k, v) in float64 with autograd and records the gradients."""
    if self_attn:
        x = q.double().requires_grad_(True)
        qd = kd = vd = x
    else:
        qd, kd, vd = (t.double().requires_grad_(True) for t in (q, k, v))
    out = call(m64, qd, kd, vd)
    out.backward(dout.double())
    params = dict(m64.named_parameters())
    for pname in pnames:
        w.add(f"{name}/g.{pname}", params[pname].grad)
    w.add(f"{name}/d_queries", qd.grad)
    if not self_attn:
        w.add(f"{name}/d_keys", kd.grad)
        w.add(f"{name}/d_values", vd.grad)


def _seed_case(w, name, E, H, N, Lq, Lk, opt):
    m = SelfAttention(E, H)
    q, k, v = layer_inputs(opt, N, Lq, Lk, E)
    meta = {"kind": "seed", "embed": E, "heads": H, "self": int(bool(opt.get("self")))}
    mask = kpm = None
    if opt.get("mask") in ("tril", "tril_uniform"):
        mask = torch.tril(torch.ones(Lq, Lk))
        if opt["mask"] == "tril_uniform":
            mask[0, :] = 0  # the seed's -1e20 makes this row uniform
        meta["mask_mode"] = "keep"
    elif opt.get("mask") == "pad":
        kpm = keep_lengths(opt["pad"], Lk)
        meta["kpm_mode"] = "keep"
    torch_mask = mask if kpm is None else kpm.reshape(N, 1, 1, Lk)
    dout = torch.randn(N, Lq, E)
    u8 = lambda t: None if t is None else (t != 0).to(torch.uint8)
    add_layer_records(w, name, meta, q, k, v, m, mask=u8(mask), kpm=u8(kpm))
    w.add(f"{name}/dout", dout)
    m64 = float64_copy(m, lambda: SelfAttention(E, H))
    tm = None if torch_mask is None else torch_mask.double()
    _record_grads(w, name, m64, q, k, v, opt.get("self"), dout, list(m.state_dict()),
                  lambda mod, qd, kd, vd: mod(vd, kd, qd, tm))  # the seed takes (v, k, q, mask)


def _torch_case(w, name, E, H, N, Lq, Lk, opt):
    m = torch_mha(E, H)
    q, k, v = layer_inputs(opt, N, Lq, Lk, E)
    meta = {"kind": "torch", "embed": E, "heads": H, "self": int(bool(opt.get("self")))}
    attn_mask = kpm = None
    if opt.get("kpm") == "bool":
        kpm = torch.zeros(N, Lk, dtype=torch.bool)
        kpm[0, 1] = True
        kpm[1, Lk - 2:] = True
        meta["kpm_mode"] = "block"
    if opt.get("mask") == "bool2d":
        blocked = torch.rand(Lq, Lk) < 0.3
        blocked[:, 0] = False  # no row blocked everywhere (PyTorch gives NaN there)
        attn_mask = blocked
        meta["mask_mode"] = "block"
    elif opt.get("mask") == "float2d":
        attn_mask = torch.randn(Lq, Lk)
        attn_mask[1, 2] = float("-inf")
        meta["mask_mode"] = "additive"
    if opt.get("causal"):
        meta["causal"] = 1
        attn_mask = torch.ones(Lq, Lk, dtype=torch.bool).triu(1)
    dout = torch.randn(N, Lq, E)
    add_layer_records(w, name, meta, q, k, v, m, kpm=kpm,
                      mask=None if opt.get("causal") else attn_mask)
    w.add(f"{name}/dout", dout)
    m64 = float64_copy(m, lambda: nn.MultiheadAttention(E, H, batch_first=True))
    m64.train()
    am = attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.double()

    def call(mod, qd, kd, vd):
        out, _ = mod(qd, kd, vd, key_padding_mask=kpm, need_weights=False, attn_mask=am)
        assert not torch.isnan(out).any(), name
        return out

    _record_grads(w, name, m64, q, k, v, opt.get("self"), dout, list(m.state_dict()), call)


def _optim_case(w, name, kind, hp, steps=8):
    p = torch.randn(3, 5)
    meta = {"kind": "optim", "optimizer": kind}
    meta.update({k: repr(float(v)) if k != "nesterov" else int(v) for k, v in hp.items()})
    param = nn.Parameter(p.clone())
    if kind == "adamw":
        o = torch.optim.AdamW([param], lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                              eps=hp["eps"], weight_decay=hp["weight_decay"])
    else:
        o = torch.optim.SGD([param], lr=hp["lr"], momentum=hp["momentum"],
                            dampening=hp["dampening"], weight_decay=hp["weight_decay"],
                            nesterov=bool(hp["nesterov"]))
    grads, params = [], []
    for t in range(steps):
        g = torch.randn(3, 5) * (1.0 + t)
        param.grad = g.clone()
        o.step()
        grads.append(g)
        params.append(param.detach().clone())
    w.add_case(name, meta)
    w.add(f"{name}/p0", p)
    w.add(f"{name}/grads", torch.stack(grads))
    w.add(f"{name}/params", torch.stack(params))


def gen_layers_grad(w):
    """The 'layers_grad' set (see the module docstring)."""
    idx = 0
    for name, kind, E, H, N, Lq, Lk, opt in GRAD_CASES:
        torch.manual_seed(3000 + idx)
        idx += 1
        if kind == "seed":
            _seed_case(w, name, E, H, N, Lq, Lk, opt)
        else:
            _torch_case(w, name, E, H, N, Lq, Lk, opt)
    for name, kind, hp in OPTIM_CASES:
        torch.manual_seed(3000 + idx)
        idx += 1
        _optim_case(w, name, kind, hp)
