#!/usr/bin/python3
"""Plots a `tensorattn bench --json` report: attention GFLOP/s against L.

  /usr/bin/python3 tools/plot_bench.py report.json [-o report.png] [--torch torch.jsonl]

Left panel: GFLOP/s (useful FLOPs: 4*B*H*D per unmasked query-key pair) of the sdpa
sweep cases (the L sweep at constant B*H*L^2 and the seed example) against L, one line
per path (fused, reference) and head dim D; causal cases dashed; the FMA peak measured
in the same run as a horizontal line. Right panel: the fused path's speed-up over the
reference path on the same shape. Cases that did not run (skipped, failed)
are left out and listed under the plot. --torch adds the seed's PyTorch code as
measured by `bench/peers/torch_seed.py --json` (its JSON lines).

Needs matplotlib: Debian's python3-matplotlib (apt-get install python3-matplotlib), for
/usr/bin/python3; only this tool does.
"""
import argparse
import json
import re
import sys
import textwrap

SWEEP = re.compile(r"^sdpa_(L\d+_D\d+(_causal)?|seed(_causal)?)_(fused|reference)$")


def load(path):
    with open(path) as f:
        return json.load(f)


def sweep_cases(report):
    """The sdpa cases of the L sweep (and the seed), keyed by (path, D, causal)."""
    series, missing = {}, []
    for c in report.get("cases", []):
        if c.get("kind") != "sdpa" or not SWEEP.match(c["name"]):
            continue
        if c.get("status") != "ok" or c.get("gflops") is None:
            missing.append((c.get("status"), c["name"].removeprefix("sdpa_")))
            continue
        key = (c["path"], c["D"], c["causal"] != "none")
        series.setdefault(key, []).append(c)
    for key, cs in series.items():
        # The seed is the sweep's point at its L only when no sweep case has that L
        # (--quick: the seed has more work than the sweep, so it stays out).
        sweep_l = {c["Lq"] for c in cs if not c["name"].startswith("sdpa_seed")}
        cs[:] = sorted((c for c in cs
                        if not (c["name"].startswith("sdpa_seed") and c["Lq"] in sweep_l)),
                       key=lambda c: c["Lq"])
    return series, missing


def label(path, D, causal):
    return f"{path} D={D}" + (" causal" if causal else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="the JSON written by tensorattn bench --json")
    ap.add_argument("-o", "--output", help="the PNG to write (default: report name .png)")
    ap.add_argument("--torch", help="JSON lines from bench/peers/torch_seed.py --json")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench.py: error: matplotlib is missing "
              "(Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 1
    report = load(a.report)
    out = a.output or re.sub(r"\.json$", "", a.report) + ".png"
    series, missing = sweep_cases(report)
    m = report.get("machine", {})
    peak = m.get("fma_peak_gflops")

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    colors = {("fused", 64): "tab:blue", ("fused", 128): "tab:green",
              ("reference", 64): "tab:red", ("reference", 128): "tab:orange"}
    lengths = set()
    for (path, D, causal), cs in sorted(series.items()):
        xs = [c["Lq"] for c in cs]
        lengths.update(xs)
        ax.plot(xs, [c["gflops"] for c in cs], marker="o" if path == "fused" else "s",
                linestyle="--" if causal else "-", color=colors.get((path, D), "tab:gray"),
                label=label(path, D, causal))
    if a.torch:
        rows = [json.loads(line) for line in open(a.torch) if line.strip()]
        for causal in (False, True):
            rs = sorted((r for r in rows if (r["causal"] != "none") == causal
                         and r["Lq"] == r["Lk"]), key=lambda r: (r["D"], r["Lq"]))
            for D in sorted({r["D"] for r in rs}):
                pts = [r for r in rs if r["D"] == D]
                lengths.update(r["Lq"] for r in pts)
                ax.plot([r["Lq"] for r in pts], [r["gflops"] for r in pts], marker="^",
                        linestyle="--" if causal else ":", color="tab:purple",
                        label=f"torch seed D={D}" + (" causal" if causal else ""))
    if peak:
        ax.axhline(peak, color="black", linewidth=1)
        ax.annotate(f"FMA peak {peak:.0f} GFLOP/s ({m.get('isa')}, {m.get('threads')} threads)",
                    (0.01, peak), xycoords=("axes fraction", "data"), va="bottom", fontsize=8)
    ax.set_xscale("log", base=2)
    if lengths:
        ax.set_xticks(sorted(lengths))
        ax.set_xticklabels([str(x) for x in sorted(lengths)])
    # The peak sets the scale; a point above it (a noisy peak measurement) stays visible.
    top = max([peak or 1.0] + [y for line in ax.get_lines() for y in line.get_ydata()])
    ax.set_ylim(bottom=0, top=top * 1.1)
    ax.set_xlabel("sequence length L (B*H*L^2 constant)")
    ax.set_ylabel("GFLOP/s (useful: 4*B*H*D per unmasked pair)")
    ax.set_title("scaled dot-product attention, float32")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")

    any_speedup = False
    for (path, D, causal), cs in sorted(series.items()):
        pts = [c for c in cs if path == "fused" and c.get("speedup_vs_reference") is not None]
        if pts:
            any_speedup = True
            ax2.plot([c["Lq"] for c in pts], [c["speedup_vs_reference"] for c in pts],
                     marker="o", linestyle="--" if causal else "-",
                     color=colors.get((path, D), "tab:gray"), label=f"D={D}" + (" causal" if causal else ""))
    ax2.set_xscale("log", base=2)
    if lengths and any_speedup:
        ax2.set_xticks(sorted(lengths))
        ax2.set_xticklabels([str(x) for x in sorted(lengths)])
    ax2.axhline(1.0, color="black", linewidth=1)
    ax2.set_xlabel("sequence length L")
    ax2.set_ylabel("fused speed-up over reference")
    ax2.set_title("fused / reference, same shape and inputs")
    ax2.grid(True, which="both", alpha=0.3)
    if any_speedup:
        ax2.legend(fontsize=8)
    else:
        ax2.set_xticks([])
        ax2.text(0.5, 0.5, "no case ran on both paths", ha="center", va="center",
                 transform=ax2.transAxes)

    note = (f"tensorattn {report.get('tensorattn')}, {report.get('created')}"
            f"{' (quick)' if report.get('quick') else ''}; peak spread "
            f"{100 * (m.get('peak_spread') or 0):.0f}%")
    if missing:
        by_status = {}
        for status, name in missing:
            by_status.setdefault(status, []).append(name)
        text = "; ".join(f"{status} ({len(names)}): " + ", ".join(names)
                         for status, names in sorted(by_status.items()))
        lines = textwrap.wrap("not plotted: " + text, 200)
        note += "\n" + "\n".join(lines[:3]) + (" ..." if len(lines) > 3 else "")
    fig.text(0.01, 0.01, note, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
