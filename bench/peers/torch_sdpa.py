#!/usr/bin/env python3
"""PyTorch 2.x's scaled_dot_product_attention (its CPU flash kernel), timed on the
shapes of `tensorattn bench`.

The peer of the bench's attention cases that users already have: one call of
torch.nn.functional.scaled_dot_product_attention per case, float32 (or the case's
qkv_dtype: bfloat16 or float16 Q, K, V and O, checked at HALF_TOLERANCE), Q [B, H, Lq, D],
K and V [B, Hkv, Lk, D], all contiguous, N(0,1) inputs, the default scale 1/sqrt(D).
Only the CPU flash kernel may run: every call is made inside
sdpa_kernel(SDPBackend.FLASH_ATTENTION) (torch.backends.cuda.sdp_kernel on a torch
without torch.nn.attention: it governs the CPU choice too), so a fallback to another
kernel raises, and one extra call after the timing, watched by a TorchDispatchMode, must
run aten::_scaled_dot_product_flash_attention_for_cpu (its _backward for a backward
case) or the case fails.

How each bench option is said to torch:
  causal top_left        is_causal=True (torch's causal mask is top-left aligned)
  causal bottom_right    nothing when every row sees every key (decoding, Lq = 1),
                         is_causal=True when Lq = Lk, else a bool attn_mask [Lq, Lk]
  key_lengths [B]        a bool attn_mask [B, 1, 1, Lk] (with causal: [B, 1, Lq, Lk])
  mask "triu"            the seed's triu(ones(Lq, Lk), 1) as a bool attn_mask [Lq, Lk]
  mask "none" or absent  no mask tensor
                         (True = keep: its complement), as a tensor, not is_causal
  Hkv < H (GQA)          enable_gqa=True (torch >= 2.5), else K and V
                         repeat_interleave'd inside the timed call
  kind sdpa_backward     torch.autograd.grad of an untimed forward call with dO,
                         retain_graph=True: dQ, dK, dV from the saved O and LSE, as
                         ta_sdpa_backward does
A shape field this script does not know, or a kind other than sdpa and
sdpa_backward, makes that case "skipped" with the reason rather than timing
something else.

Timing follows the bench (bench/README.md, Method 5): one cold call, checked (24
sampled query rows against float64 from the definition; a backward case also its dQ
rows), warm-up (2 calls), then timed calls until there are >= 5 and >= 0.5 s; a
cold call of >= 0.25 s gives 1 warm-up and 3 timed calls, >= 1 s none and 2;
--quick: 1 warm-up, 2 timed calls. GFLOP/s counts only the useful work as the bench
does: 4*D per unmasked (query, key) pair, 2.5x that for a backward.

Cases: --cases JSON (a list of objects with the bench's shape fields, what
`tensorattn bench --peers --torch-python PY` passes; its report's peers.torch.command
is the exact command line), --shape NAME,B,H,Hkv,Lq,Lk,D,CAUSAL[,backward], or by
default the seed's three (sdpa_seed, sdpa_seed_causal, sdpa_bwd_seed_causal).

Output: a table; --jsonl one JSON object per case on stdout (the bench reads these);
--json FILE a report in the bench's JSON schema (version 2). The case objects use the
bench's field names (name, kind, path "torch_flash", the shape fields, threads, flops,
status, median_s, min_s, cold_s, runs, gflops, max_abs_err, tolerance) plus torch,
torch_call and glibc_tunables; names are the bench's shape names (its case names
without _reference / _fused), so the reports join on them. A case that fails is a row
with status "error" or "check_failed" and the reason in "error"; the exit status is 0
unless the script could not run at all: 2 on a bad command line, 3 when this python
has no torch >= 2.1 (one line on stderr says so).

Run it with a PyTorch 2.x in a venv (bench/README.md, "Peers"), in its best setting:

  GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \\
      /tmp/torch2venv/bin/python bench/peers/torch_sdpa.py --threads 2
"""
import argparse
import json
import math
import os
import random
import re
import statistics
import sys
import time

MIN_TORCH = (2, 1)
EXIT_NO_TORCH = 3
TOLERANCE = 1e-4  # the bench's, on max |out - float64|
# for bfloat16 / float16 inputs torch rounds P to the input type inside its kernel and O
# to it at the end (2^-9 / 2^-12 of |O| ~ 3 alone): its error is checked at this bound
HALF_TOLERANCE = {"bf16": 3e-2, "f16": 4e-3}
MAX_RUNS = 10000  # the bench's cap on timed runs of tiny cases
SHAPE_FIELDS = {"name", "kind", "B", "H", "Hkv", "Lq", "Lk", "D", "causal", "pairs",
                "key_lengths", "mask", "qkv_dtype"}
FLASH_OP = "_scaled_dot_product_flash_attention"  # the _for_cpu kernel since torch 2.2


def version_tuple(text):
    """'2.15.0+cpu' -> (2, 15); '1.13.0a0' -> (1, 13)."""
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def import_torch():
    """torch, or exit 3 with one line saying why this python cannot be the peer."""
    try:
        import torch
    except ImportError as e:
        print(f"torch_sdpa.py: {sys.executable} has no torch ({e}); the peer needs "
              f"torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}", file=sys.stderr)
        sys.exit(EXIT_NO_TORCH)
    if version_tuple(torch.__version__) < MIN_TORCH:
        print(f"torch_sdpa.py: {sys.executable} has torch {torch.__version__}; the CPU flash "
              f"kernel needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}", file=sys.stderr)
        sys.exit(EXIT_NO_TORCH)
    return torch


def flash_only(torch):
    """A context in which scaled_dot_product_attention may use the flash kernel only."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:  # an older torch 2.x
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                              enable_mem_efficient=False)


def ops_run(torch, fn):
    """The names of the ATen operators fn ran, seen by a dispatch mode (torch.profiler
    would do too, but its kineto side writes to stderr, where the bench looks for the
    reason of a failure)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(str(func))
            return func(*args, **(kwargs or {}))

    with Record():
        fn()
    return Record.names


def visible(causal, i, Lq, Lk):
    """The keys query row i may see: a prefix [0, n) of the Lk keys (bench_sdpa_visible)."""
    n = i + 1 if causal == "top_left" else i + Lk - Lq + 1 if causal == "bottom_right" else Lk
    return max(0, min(Lk, n))


class Case:
    """One bench case's shape, checked: kind, B, H, Hkv, Lq, Lk, D, causal, key lengths,
    mask. Raises ValueError with the reason when this script cannot time it faithfully."""

    def __init__(self, obj):
        unknown = sorted(set(obj) - SHAPE_FIELDS)
        if unknown:
            raise ValueError(f"the torch peer does not know the shape field(s) {unknown}")
        self.name, self.kind = obj["name"], obj.get("kind", "sdpa")
        if self.kind not in ("sdpa", "sdpa_backward"):
            raise ValueError(f"the torch peer does not time kind {self.kind!r}")
        self.B, self.H, self.Lq, self.Lk, self.D = (int(obj[k]) for k in "B H Lq Lk D".split())
        self.Hkv = int(obj.get("Hkv", self.H))
        self.causal = obj.get("causal", "none")
        if self.causal not in ("none", "top_left", "bottom_right"):
            raise ValueError(f"unknown causal alignment {self.causal!r}")
        if min(self.B, self.H, self.Hkv, self.Lq, self.Lk, self.D) < 1 or self.H % self.Hkv:
            raise ValueError("B, H, Hkv, Lq, Lk, D must be >= 1 and Hkv divide H")
        self.key_lengths = obj.get("key_lengths")
        if self.key_lengths is not None:
            self.key_lengths = [int(n) for n in self.key_lengths]
            if len(self.key_lengths) != self.B or not all(0 <= n <= self.Lk for n in self.key_lengths):
                raise ValueError("key_lengths must be B values in [0, Lk]")
        self.mask = obj.get("mask")
        if self.mask == "none":  # the bench's rows say "none" for no mask tensor
            self.mask = None
        if self.mask not in (None, "triu"):
            raise ValueError(f"unknown mask {self.mask!r} (known: \"none\", \"triu\")")
        self.dtype = obj.get("qkv_dtype", "f32")
        if self.dtype not in ("f32", "bf16", "f16"):
            raise ValueError(f"unknown qkv_dtype {self.dtype!r} (known: f32, bf16, f16)")
        self.pairs = obj.get("pairs")
        if self.pairs is None:
            self.pairs = self.H * sum(self.keys_seen(b, i) for b in range(self.B)
                                      for i in range(self.Lq))
        work = 4.0 * self.pairs * self.D
        self.flops = 2.5 * work if self.kind == "sdpa_backward" else work

    def keys_seen(self, b, i):
        """Keys row i of batch b sees (all the options are prefixes of the keys)."""
        n = visible(self.causal, i, self.Lq, self.Lk)
        if self.mask == "triu":
            n = min(n, i + 1)
        if self.key_lengths is not None:
            n = min(n, self.key_lengths[b])
        return n

    def shape_fields(self):
        o = {"B": self.B, "H": self.H, "Hkv": self.Hkv, "Lq": self.Lq, "Lk": self.Lk,
             "D": self.D, "causal": self.causal, "pairs": self.pairs}
        if self.key_lengths is not None:
            o["key_lengths"] = self.key_lengths
        if self.mask is not None:
            o["mask"] = self.mask
        if self.dtype != "f32":
            o["qkv_dtype"] = self.dtype
        return o


def torch_arguments(torch, c):
    """(kwargs for scaled_dot_product_attention, what they say in words)."""
    per_row = [visible(c.causal, i, c.Lq, c.Lk) for i in range(c.Lq)]
    sees_all = all(n == c.Lk for n in per_row)  # the causal alignment blocks nothing
    if c.mask is None and c.key_lengths is None:
        if sees_all:
            return {}, "no mask"
        if c.causal == "top_left" or c.Lq == c.Lk:  # torch's is_causal is top-left aligned
            return {"is_causal": True}, "is_causal=True"
    j = torch.arange(c.Lk)
    keep = None
    if not sees_all or c.mask is not None:
        keep = j[None, :] < torch.tensor(per_row)[:, None]  # [Lq, Lk]
        if c.mask == "triu":  # the seed's blocked triu(ones, 1): keep its complement
            keep &= ~torch.triu(torch.ones(c.Lq, c.Lk, dtype=torch.bool), diagonal=1)
    if c.key_lengths is not None:
        by_length = j[None, None, None, :] < torch.tensor(c.key_lengths)[:, None, None, None]
        keep = by_length if keep is None else by_length & keep[None, None]
    return {"attn_mask": keep.contiguous()}, f"bool attn_mask {list(keep.shape)}"


def sampled_rows(c):
    """(b, h, i): the first and last rows, 14 random ones and 8 consecutive ones."""
    total = c.B * c.H * c.Lq
    rng = random.Random(12345)
    picks = [0, total - 1] + [rng.randrange(total) for _ in range(14)]
    start = rng.randrange(max(1, total - 8))
    picks += [r for r in range(start, start + 8) if r < total]
    return [(r // (c.H * c.Lq), r // c.Lq % c.H, r % c.Lq) for r in picks]


def check(torch, c, q, k, v, out, dO=None, dQ=None):
    """Largest |torch - float64| over the sampled rows of out (and of dQ: dQ_i = scale *
    sum_j P_ij (dO_i . V_j - dO_i . O_i) K_j)."""
    worst, scale = 0.0, 1.0 / math.sqrt(c.D)
    for b, h, i in sampled_rows(c):
        kvh = h // (c.H // c.Hkv)
        n = c.keys_seen(b, i)
        K, V = k[b, kvh, :n].double(), v[b, kvh, :n].double()
        if n == 0:
            o = torch.zeros(c.D, dtype=torch.float64)
            p = torch.zeros(0, dtype=torch.float64)
        else:
            p = torch.softmax(K @ q[b, h, i].double() * scale, dim=0)
            o = p @ V
        worst = max(worst, (out[b, h, i].double() - o).abs().max().item())
        if dQ is not None:
            g = dO[b, h, i].double()
            ds = p * (V @ g - g @ o)
            worst = max(worst, (dQ[b, h, i].double() - scale * (ds @ K)).abs().max().item())
    return worst


def run_policy(cold, quick):
    """(warm-up calls, least timed calls, least seconds): the bench's rule."""
    if quick:
        return 1, 2, 0.0
    if cold >= 1.0:
        return 0, 2, 0.0
    if cold >= 0.25:
        return 1, 3, 0.0
    return 2, 5, 0.5


def time_case(torch, c, quick):
    """The case's row (the bench's case fields); raises on a library error."""
    import torch.nn.functional as F
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(c.B, c.H, c.Lq, c.D, generator=gen)
    k = torch.randn(c.B, c.Hkv, c.Lk, c.D, generator=gen)
    v = torch.randn(c.B, c.Hkv, c.Lk, c.D, generator=gen)
    if c.dtype != "f32":  # the inputs rounded; the check reads the rounded values
        dt = torch.bfloat16 if c.dtype == "bf16" else torch.float16
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    tolerance = HALF_TOLERANCE.get(c.dtype, TOLERANCE)
    kwargs, words = torch_arguments(torch, c)
    group = c.H // c.Hkv
    if group > 1 and version_tuple(torch.__version__) >= (2, 5):
        kwargs["enable_gqa"] = True
        words += ", enable_gqa=True"
    elif group > 1:
        words += ", K and V repeat_interleave'd in the call"

    def sdpa(Q, K, V):
        if group > 1 and "enable_gqa" not in kwargs:
            K, V = K.repeat_interleave(group, dim=1), V.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(Q, K, V, **kwargs)

    backward = c.kind == "sdpa_backward"
    row = {"name": c.name, "kind": c.kind, "path": "torch_flash", **c.shape_fields(),
           "threads": torch.get_num_threads(), "flops": c.flops, "status": "ok",
           "torch": torch.__version__, "torch_call": words,
           "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}
    with flash_only(torch):
        if backward:
            for t in (q, k, v):
                t.requires_grad_(True)
            out = sdpa(q, k, v)  # the forward: saves O and the LSE, not timed
            dO = torch.randn(c.B, c.H, c.Lq, c.D, generator=gen).to(q.dtype)

            def call():
                return torch.autograd.grad(out, (q, k, v), dO, retain_graph=True)
        else:
            dO = None

            def call():
                with torch.no_grad():
                    return sdpa(q, k, v)

        def timed():
            t0 = time.perf_counter()
            result = call()
            dt = time.perf_counter() - t0
            del result  # freed before the next call
            return dt

        t0 = time.perf_counter()
        first = call()
        cold = time.perf_counter() - t0
        with torch.no_grad():
            err = (check(torch, c, q, k, v, out.detach(), dO, first[0]) if backward
                   else check(torch, c, q, k, v, first))
        del first
        row.update(cold_s=cold, max_abs_err=err, tolerance=tolerance)
        if not err <= tolerance:
            row.update(status="check_failed",
                       error=f"result check failed: max_abs_err {err:.3g} > {tolerance}")
            return row
        warmup, min_runs, min_seconds = run_policy(cold, quick)
        for _ in range(warmup):
            timed()
        times, start = [], time.perf_counter()
        while len(times) < MAX_RUNS and (len(times) < min_runs or
                                         time.perf_counter() - start < min_seconds):
            times.append(timed())
        ops = ops_run(torch, call)
    if not any(FLASH_OP in name and ("backward" in name) == backward for name in ops):
        row.update(status="error", error=f"the CPU flash kernel did not run (no {FLASH_OP}"
                                         f"{'*backward' if backward else ''} among the "
                                         f"operators of a watched call)")
        return row
    median = statistics.median(times)
    row.update(median_s=median, min_s=min(times), runs=len(times),
               gflops=c.flops / median * 1e-9)
    return row


def failed_row(obj, status, why):
    return {"name": obj["name"], "kind": obj.get("kind", "sdpa"), "path": "torch_flash",
            "status": status, "error": why}


def seed_cases(quick):
    L = 128 if quick else 512
    base = {"B": 32, "H": 8, "Hkv": 8, "Lq": L, "Lk": L, "D": 64}
    return [{"name": "sdpa_seed", **base, "causal": "none"},
            {"name": "sdpa_seed_causal", **base, "causal": "top_left"},
            {"name": "sdpa_bwd_seed_causal", "kind": "sdpa_backward", **base,
             "causal": "top_left"}]


def parse_shape(ap, spec):
    parts = spec.split(",")
    if len(parts) not in (8, 9) or (len(parts) == 9 and parts[8] != "backward"):
        ap.error(f"--shape {spec!r}: expected NAME,B,H,Hkv,Lq,Lk,D,CAUSAL[,backward]")
    try:
        B, H, Hkv, Lq, Lk, D = (int(x) for x in parts[1:7])
    except ValueError:
        ap.error(f"--shape {spec!r}: B, H, Hkv, Lq, Lk, D must be integers")
    return {"name": parts[0], "kind": "sdpa_backward" if len(parts) == 9 else "sdpa",
            "B": B, "H": H, "Hkv": Hkv, "Lq": Lq, "Lk": Lk, "D": D, "causal": parts[7]}


def print_row(r):
    if r["status"] != "ok":
        print(f"{r['name']:<28} {r['status']}: {r.get('error', '')}", flush=True)
        return
    shape = f"B{r['B']} H{r['H']}" + (f"/{r['Hkv']}" if r["Hkv"] != r["H"] else "")
    shape += f" Lq{r['Lq']} Lk{r['Lk']} D{r['D']} {r['causal']}"
    print(f"{r['name']:<28} {shape:<36} {r['runs']:>4} {r['median_s'] * 1e3:>10.3f} "
          f"{r['min_s'] * 1e3:>10.3f} {r['cold_s'] * 1e3:>10.3f} {r['gflops']:>8.1f}  "
          f"{r['torch_call']}", flush=True)


def write_report(path, rows, torch, threads, quick):
    """The bench's JSON schema (version 2): the peer's rows as its cases."""
    report = {"version": 2, "tensorattn": None, "torch": torch.__version__,
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": quick,
              "machine": {"threads": threads}, "cases": rows}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--quick", action="store_true", help="1 warm-up and 2 timed calls, as the "
                    "bench's --quick (and the seed's shapes at L = 128 by default)")
    ap.add_argument("--cases", metavar="JSON", help="a JSON list of cases with the bench's "
                    "shape fields (what tensorattn bench passes)")
    ap.add_argument("--shape", action="append", default=[],
                    metavar="NAME,B,H,Hkv,Lq,Lk,D,CAUSAL[,backward]",
                    help="time this shape (CAUSAL: none, top_left or bottom_right; repeatable)")
    ap.add_argument("--filter", default="", help="only the cases whose name contains this")
    ap.add_argument("--jsonl", action="store_true", help="one JSON object per case on stdout")
    ap.add_argument("--json", metavar="FILE", help="also write a report in the bench's schema")
    a = ap.parse_args()
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    cases = []
    if a.cases:
        try:
            cases = json.loads(a.cases)
        except ValueError as e:
            ap.error(f"--cases: not JSON: {e}")
        if not isinstance(cases, list) or not all(
                isinstance(o, dict) and isinstance(o.get("name"), str) for o in cases):
            ap.error("--cases: expected a list of objects with a name")
    cases += [parse_shape(ap, s) for s in a.shape]
    if not a.cases and not a.shape:
        cases = seed_cases(a.quick)
    cases = [o for o in cases if a.filter in o["name"]]

    torch = import_torch()
    torch.set_num_threads(a.threads)
    if not a.jsonl:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
              f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES') or '(unset)'}")
        print(f"{'case':<28} {'shape':<36} {'runs':>4} {'median ms':>10} {'min ms':>10} "
              f"{'cold ms':>10} {'GFLOP/s':>8}  torch call")
    rows = []
    for obj in cases:
        try:
            c = Case(obj)
        except (KeyError, TypeError, ValueError) as e:
            row = failed_row(obj, "skipped", str(e) or repr(e))
        else:
            try:
                row = time_case(torch, c, a.quick)
            except (RuntimeError, MemoryError) as e:  # a fallback refused, out of memory
                row = failed_row(obj, "error", f"{type(e).__name__}: {e}".splitlines()[0])
        rows.append(row)
        if a.jsonl:
            print(json.dumps(row), flush=True)
        else:
            print_row(row)
    if a.json:
        write_report(a.json, rows, torch, a.threads, a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
