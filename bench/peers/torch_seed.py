#!/usr/bin/python3
"""The seed's PyTorch attention, timed on the shapes of `tensorattn bench`.

The peer of the bench's sdpa cases: the seed's scaled_dot_product_attention, verbatim
(tools/seed_code.py, shared with the fixture generator: einsum, scale, masked_fill_,
softmax, einsum; it returns the weights too, as the seed does), run on the same shapes
with torch.set_num_threads(N). Each case: one cold call (the first in this process for
that shape), warm-up, then the median of the timed runs. GFLOP/s counts only the
useful work, as the bench does: 4*B*H*D per unmasked (query, key) pair.

Run it with Debian's python3-torch (1.13):

  /usr/bin/python3 bench/peers/torch_seed.py                    # as installed
  GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \\
      /usr/bin/python3 bench/peers/torch_seed.py                # its best configuration

The second keeps glibc from returning the seed's big [B, H, L, L] temporaries to the
kernel after each call, so later calls reuse touched memory instead of faulting in
fresh pages (bench/README.md, "Peers").

Output: a table on stdout, or with --json one JSON object per line (name, shape
fields, causal, threads, median_s, min_s, cold_s, runs, gflops, pairs, flops). The
names are the bench's case names without the _reference / _fused suffix, so the
two reports join on them.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

# The seed's function is in tools/seed_code.py (from this file: ../../tools), the module
# the fixture generator uses too, so the bench times the code the fixtures check.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from seed_code import scaled_dot_product_attention  # noqa: E402  (the first seed's function)


def seed_cases():
    """(name, B, H, L, D, causal): the seed example, without and with its mask."""
    return [("sdpa_seed", 32, 8, 512, 64, False), ("sdpa_seed_causal", 32, 8, 512, 64, True)]


def sweep_cases(lengths, dims):
    """The bench's L sweep at constant B*H*L^2 = 2^26 (H = 8 while B*H allows)."""
    out = []
    for D in dims:
        for L in lengths:
            if D == 64 and L == 512:
                continue  # the seed case
            bh = (1 << 26) // (L * L)
            H = min(8, bh)
            out.append((f"sdpa_L{L}_D{D}", bh // H, H, L, D, False))
    return out


def pairs(L, causal):
    """Unmasked (query, key) pairs of one (batch, head)."""
    return L * (L + 1) // 2 if causal else L * L


def time_case(name, B, H, L, D, causal, runs, warmup):
    gen = torch.Generator().manual_seed(0)
    Q = torch.randn(B, H, L, D, generator=gen)
    K = torch.randn(B, H, L, D, generator=gen)
    V = torch.randn(B, H, L, D, generator=gen)
    # The seed's causal mask: True above the diagonal = blocked.
    mask = torch.triu(torch.ones(L, L), diagonal=1).bool() if causal else None

    def call():
        t0 = time.perf_counter()
        out, weights = scaled_dot_product_attention(Q, K, V, mask=mask)
        dt = time.perf_counter() - t0
        del out, weights  # freed before the next call, as in a loop over batches
        return dt

    with torch.no_grad():
        cold = call()
        for _ in range(warmup):
            call()
        times = [call() for _ in range(runs)]
    median = statistics.median(times)
    p = B * H * pairs(L, causal)
    flops = 4.0 * p * D
    return {
        "name": name, "B": B, "H": H, "Hkv": H, "Lq": L, "Lk": L, "D": D,
        "causal": "top_left" if causal else "none", "pairs": p, "flops": flops,
        "threads": torch.get_num_threads(), "runs": runs, "median_s": median,
        "min_s": min(times), "cold_s": cold, "gflops": flops / median * 1e-9,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per case (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up runs after the cold call")
    ap.add_argument("--sweep", action="store_true",
                    help="also the L sweep at constant B*H*L^2 = 2^26 (D = 64 and 128)")
    ap.add_argument("--lengths", default="128,256,512,1024,2048,4096,8192",
                    help="the sweep's L values (comma-separated)")
    ap.add_argument("--dims", default="64,128", help="the sweep's D values")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME,B,H,L,D,CAUSAL",
                    help="time this shape instead of the defaults (CAUSAL: none or top_left; "
                         "repeatable; `tensorattn bench --peers` passes its seed shapes)")
    ap.add_argument("--filter", default="", help="only the cases whose name contains this")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    a = ap.parse_args()
    if a.threads < 1 or a.runs < 1 or a.warmup < 0:
        ap.error("--threads and --runs must be >= 1, --warmup >= 0")
    torch.set_num_threads(a.threads)
    cases = [] if a.shape else seed_cases()
    for spec in a.shape:
        parts = spec.split(",")
        if len(parts) != 6 or parts[5] not in ("none", "top_left"):
            ap.error(f"--shape {spec!r}: expected NAME,B,H,L,D,none|top_left")
        try:
            B, H, L, D = (int(x) for x in parts[1:5])
        except ValueError:
            ap.error(f"--shape {spec!r}: B, H, L, D must be integers")
        cases.append((parts[0], B, H, L, D, parts[5] == "top_left"))
    if a.sweep:
        cases += sweep_cases([int(x) for x in a.lengths.split(",")],
                             [int(x) for x in a.dims.split(",")])
    cases = [c for c in cases if a.filter in c[0]]
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if not a.json:
        print(f"torch {torch.__version__}, {a.threads} thread(s), "
              f"GLIBC_TUNABLES={tunables or '(unset)'}")
        print(f"{'case':<20} {'shape':<26} {'runs':>4} {'median ms':>10} {'min ms':>10} "
              f"{'cold ms':>10} {'GFLOP/s':>8}")
    for name, B, H, L, D, causal in cases:
        r = time_case(name, B, H, L, D, causal, a.runs, a.warmup)
        r["torch"] = torch.__version__
        r["glibc_tunables"] = tunables
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            shape = f"B{B} H{H} L{L} D{D}" + (" top_left" if causal else "")
            print(f"{name:<20} {shape:<26} {r['runs']:>4} {r['median_s'] * 1e3:>10.3f} "
                  f"{r['min_s'] * 1e3:>10.3f} {r['cold_s'] * 1e3:>10.3f} {r['gflops']:>8.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
