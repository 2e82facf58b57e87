#!/usr/bin/env python3
"""Times tensorattn's Python module against PyTorch's scaled_dot_product_attention on the
attention shapes of `tensorattn bench` (bench/cases.c, build_sdpa_cases) and prints the
ratios, with whatever torch is installed: torch.nn.functional.scaled_dot_product_attention
where it exists (torch >= 2.0), else the same math in torch ops (softmax(q k^T * scale +
mask) v, what torch 1.13 users write), labelled so.

    python3 python/bench.py [--quick] [--filter SUBSTRING] [--threads N]
    python3 python/bench.py --overhead   # a tiny call (B1 H1 L1 D64) against the C call
    python3 python/bench.py --gil        # two Python threads against one call

Every case runs torch CPU tensors (contiguous float32 N(0,1), the default scale) through
both, checks that the outputs agree (max |diff| <= 1e-4; a backward case its dQ too), then
times each: warm-up, then calls until >= 3 and >= 0.3 s (--quick: 2 calls); the table gives
the medians and torch / tensorattn (> 1: tensorattn is faster). Backward cases time
torch.autograd.grad of an untimed forward (retain_graph=True). A case whose torch call
would materialise more than 4 GiB of scores is timed for tensorattn alone. On a shared
machine, compare ratios from the same run."""

import argparse
import math
import os
import statistics
import sys
import threading
import time

import torch

# The installed package, not its sources beside this script (which lack the compiled module).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
import tensorattn as ta  # noqa: E402

SCORES_MAX = 4 << 30  # bytes of [B, H, Lq, Lk] float32 the torch side may materialise


def sdpa_cases(quick):
    """(name, B, H, Hkv, Lq, Lk, D, causal, kind): the shapes of build_sdpa_cases.
    causal: none, top_left, bottom_right, or mask (top-left as a bool mask tensor);
    kind: fwd, bwd, or ragged (key lengths [100 .. Lk] as a bool padding mask)."""
    L0 = 128 if quick else 512
    cases = [("sdpa_seed", 32, 8, 8, L0, L0, 64, "none", "fwd"),
             ("sdpa_seed_causal", 32, 8, 8, L0, L0, 64, "top_left", "fwd"),
             ("sdpa_seed_causal_mask", 32, 8, 8, L0, L0, 64, "mask", "fwd")]
    work = float(1 << 20) if quick else float(1 << 26)
    for D in (64, 128):
        L = 128
        while L <= (256 if quick else 8192):
            BH = int(work / (L * L))
            H = 8 if BH >= 8 else BH
            B = BH // H
            if not (not quick and D == 64 and L == 512):
                cases.append((f"sdpa_L{L}_D{D}", B, H, H, L, L, D, "none", "fwd"))
                if not quick and D == 64 and L in (128, 2048, 8192):
                    cases.append((f"sdpa_L{L}_D{D}_causal", B, H, H, L, L, D, "top_left", "fwd"))
            L *= 2
    n = 256 if quick else 1024
    cases.append(("sdpa_gqa", 1, 32, 8, n, n, 128, "none", "fwd"))
    Lk = 1024 if quick else 4096
    cases.append(("sdpa_decode", 1, 32, 32, 1, Lk, 128, "bottom_right", "fwd"))
    h = 8 if quick else 32
    cases.append(("sdpa_decode_ragged", 8, h, h, 1, Lk, 128, "bottom_right", "ragged"))
    if not quick:
        cases.append(("sdpa_L8192_H8_causal", 1, 8, 8, 8192, 8192, 64, "top_left", "fwd"))
        cases.append(("sdpa_long_causal", 1, 2, 2, 32768, 32768, 64, "top_left", "fwd"))
    cases.append(("sdpa_bwd_seed_causal", 32, 8, 8, L0, L0, 64, "top_left", "bwd"))
    if not quick:
        cases.append(("sdpa_bwd_L8192_causal", 1, 8, 8, 8192, 8192, 64, "top_left", "bwd"))
    return cases


def torch_sdpa():
    """(function, label) of the torch side."""
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if f is not None:
        def call(q, k, v, attn_mask=None, is_causal=False):
            if k.shape[1] != q.shape[1]:  # enable_gqa is torch >= 2.5
                try:
                    return f(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=True)
                except TypeError:
                    g = q.shape[1] // k.shape[1]
                    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
            return f(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        return call, f"torch {torch.__version__} F.scaled_dot_product_attention"

    def math_sdpa(q, k, v, attn_mask=None, is_causal=False):
        if k.shape[1] != q.shape[1]:
            g = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        if is_causal:
            attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v
    return math_sdpa, f"torch {torch.__version__} math (no F.scaled_dot_product_attention)"


def case_args(B, H, Hkv, Lq, Lk, D, causal, kind):
    g = torch.Generator().manual_seed(11)
    q = torch.randn(B, H, Lq, D, generator=g)
    k = torch.randn(B, Hkv, Lk, D, generator=g)
    v = torch.randn(B, Hkv, Lk, D, generator=g)
    kw = {}
    if causal == "top_left":
        kw["is_causal"] = True
    elif causal == "mask":
        kw["attn_mask"] = torch.ones(Lq, Lk, dtype=torch.bool).tril()
    elif causal == "bottom_right" and Lq > 1:
        kw["attn_mask"] = torch.ones(Lq, Lk, dtype=torch.bool).tril(Lk - Lq)
    if kind == "ragged":
        lens = torch.tensor([100 + (Lk - 100) * b // 7 for b in range(B)])
        kw["attn_mask"] = (torch.arange(Lk)[None, :] < lens[:, None])[:, None, None, :]
    return q, k, v, kw


def timed(fn, quick):
    fn()  # warm-up (scratch, threads)
    times = []
    start = time.perf_counter()
    while len(times) < (2 if quick else 3) or (not quick and time.perf_counter() - start < 0.3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_case(case, peer, quick):
    name, B, H, Hkv, Lq, Lk, D, causal, kind = case
    q, k, v, kw = case_args(B, H, Hkv, Lq, Lk, D, causal, kind)
    gqa = dict(enable_gqa=True) if Hkv != H else {}
    with_torch = B * H * Lq * Lk * 4 <= SCORES_MAX
    if kind == "bwd":
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
        dout = torch.randn(B, H, Lq, D, generator=torch.Generator().manual_seed(12))
        out_ta = ta.scaled_dot_product_attention(q, k, v, **kw, **gqa)
        ours = lambda: torch.autograd.grad(out_ta, (q, k, v), dout, retain_graph=True)
        if with_torch:
            out_t = peer(q, k, v, **kw)
            theirs = lambda: torch.autograd.grad(out_t, (q, k, v), dout, retain_graph=True)
    else:
        ours = lambda: ta.scaled_dot_product_attention(q, k, v, **kw, **gqa)
        if with_torch:
            theirs = lambda: peer(q, k, v, **kw)
    err = None
    if with_torch:
        a, b = ours(), theirs()
        a, b = (a[0], b[0]) if kind == "bwd" else (a, b)
        err = (a - b).abs().max().item() if a.numel() else 0.0
        if not err <= 1e-4:
            return name, None, None, err
    t_ours = timed(ours, quick)
    t_theirs = timed(theirs, quick) if with_torch else None
    return name, t_ours, t_theirs, err


def table(args):
    peer, label = torch_sdpa()
    threads = args.threads or ta.get_num_threads()  # the same for both
    ta.set_num_threads(threads)
    torch.set_num_threads(threads)
    print(f"tensorattn {ta.__version__} ({ta._C.isa}, {ta.get_num_threads()} threads) against "
          f"{label} ({torch.get_num_threads()} threads)")
    print(f"{'case':28s} {'tensorattn ms':>14s} {'torch ms':>10s} {'torch/ta':>9s} {'max diff':>9s}")
    for case in sdpa_cases(args.quick):
        if args.filter and args.filter not in case[0]:
            continue
        name, t_ours, t_theirs, err = run_case(case, peer, args.quick)
        if t_ours is None:
            print(f"{name:28s} results differ: max |diff| {err:.3g}")
            continue
        ratio = f"{t_theirs / t_ours:9.2f}" if t_theirs else f"{'-':>9s}"
        theirs = f"{t_theirs * 1e3:10.3f}" if t_theirs else f"{'(>4 GiB)':>10s}"
        diff = f"{err:9.1e}" if err is not None else f"{'-':>9s}"
        print(f"{name:28s} {t_ours * 1e3:14.3f} {theirs} {ratio} {diff}")
        sys.stdout.flush()


def best_per_call(fn, calls=2000, rounds=15):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def overhead(args):
    """The module's cost on a call that does almost nothing: B1 H1 L1 D64, against the
    same ta_sdpa call timed in C (tensorattn._C._time_c_sdpa), minimum over rounds."""
    import numpy as np
    for threads in ([args.threads] if args.threads else [1, ta.get_num_threads()]):
        ta.set_num_threads(threads)
        t = torch.randn(1, 1, 1, 64)
        a = t.numpy()
        f = ta.scaled_dot_product_attention
        c, n, tt = float("inf"), float("inf"), float("inf")
        for _ in range(5):  # interleaved, so that load on a shared machine hits all three
            c = min(c, min(ta._C._time_c_sdpa(1, 1, 1, 1, 64, 2000) for _ in range(3)))
            n = min(n, best_per_call(lambda: f(a, a, a), rounds=3))
            tt = min(tt, best_per_call(lambda: f(t, t, t), rounds=3))
        print(f"{threads} thread(s): C ta_sdpa {c * 1e6:.2f} us; NumPy call {n * 1e6:.2f} us "
              f"(+{(n - c) * 1e6:.2f}); torch call {tt * 1e6:.2f} us (+{(tt - c) * 1e6:.2f})")
    del np


def gil(args):
    """One long call, then the same call in two Python threads at once, the library on one
    thread each: about 1x with the GIL released, 2x with it held."""
    ta.set_num_threads(1)
    q = torch.randn(1, 8, 2048, 64)
    call = lambda: ta.scaled_dot_product_attention(q, q, q)
    call()
    one = min(timed(call, True) for _ in range(3))
    two, busy = float("inf"), 0.0
    for _ in range(3):
        threads = [threading.Thread(target=call) for _ in range(2)]
        t0, c0 = time.perf_counter(), time.process_time()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        if wall < two:
            two, busy = wall, (time.process_time() - c0) / wall
    # CPU time over wall time: above 1 only if both calls ran at once (with the GIL held
    # the second thread would sleep, not compute); robust to other load on the machine.
    print(f"one call {one * 1e3:.1f} ms; two calls in two threads {two * 1e3:.1f} ms "
          f"({two / one:.2f}x one call; process CPU time {busy:.2f}x the wall time)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the bench's --quick sizes, 2 calls")
    p.add_argument("--filter", help="only cases whose name contains this")
    p.add_argument("--threads", type=int, help="threads for tensorattn and torch")
    p.add_argument("--overhead", action="store_true", help="the per-call overhead")
    p.add_argument("--gil", action="store_true", help="two threads against one call")
    args = p.parse_args()
    if args.overhead:
        overhead(args)
    elif args.gil:
        gil(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
