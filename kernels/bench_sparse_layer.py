"""Benchmark: one attention layer, forward + backward, dense vs sparse, on this machine's CPU.

    python -m zoo.kernels.bench_sparse_layer            # n = 1k ... 16k, writes docs/bench/
    python -m zoo.kernels.bench_sparse_layer --sizes 1024 2048 --out /tmp/bench

Methods (q, k, v of shape (1, H, n, 64), fp32, H = 2; the gradient of a fixed random projection of
the output is propagated back to q, k, v):

- ``sdpa_causal``: dense causal ``scaled_dot_product_attention`` (PyTorch's fused CPU kernel);
- ``dense_masked``: dense attention under the fixed pattern's ``(n, n)`` element mask, as the
  oracle computes it (scores, mask, softmax, all ``n x n``);
- ``ours_fixed``: ``zoo.kernels.block_sparse_attention`` (the reference path) on the fixed pattern,
  stride ``l = 2^ceil(log2(n)/2 + 1)`` (about ``2 sqrt(n)``), ``c = 32``, blocks of 32, merged heads
  with distinct summaries;
- ``ours_strided``: the Sparse Transformer's strided layer (one head on ``A1`` through the block
  op, one on ``A2`` through the transposed-sequence route), ``l = 2^ceil(log2(n)/2)``.

Each (method, n) runs in a fresh subprocess: time is the median of 3 forward+backward passes after
a warm-up; peak memory is the growth of the process's peak resident set over the inputs
(``ru_maxrss``). A table (markdown) and a log-log plot are written to ``--out``; the growth exponent
is the least-squares slope of log(time) against log(n).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

METHODS = ("sdpa_causal", "dense_masked", "ours_fixed", "ours_strided")
H, D = 2, 64


def fixed_pattern(n: int):
    from zoo.attention.patterns import fixed

    l = 2 ** math.ceil(math.log2(n) / 2 + 1)
    return fixed(l, 32, distinct_summaries=True), l


def run_one(method: str, n: int) -> dict:
    """Measure one (method, n) in this process."""
    from zoo.kernels import BlockSparsePlan, block_sparse_attention

    from zoo.attention.patterns import strided
    from zoo.attention.sparse import column_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, H, n, D, requires_grad=True) for _ in range(3))
    proj = torch.randn(1, H, n, D)
    extra = {}
    if method == "sdpa_causal":

        def attend():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    elif method == "dense_masked":
        pattern, l = fixed_pattern(n)
        mask = pattern.mask(n, H)  # (H, n, n)
        extra = {"stride": l}

        def attend():
            s = (q @ k.transpose(-1, -2)) * D**-0.5
            return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v

    elif method == "ours_fixed":
        pattern, l = fixed_pattern(n)
        layout = pattern.layout(n, 32, H)
        plan = BlockSparsePlan(layout, 32, n, mask_mod=pattern.mask_mod)
        extra = {"stride": l, "blocks": f"{layout.float().mean().item():.3f}"}

        def attend():
            return block_sparse_attention(q, k, v, plan)

    else:  # ours_strided: head 0 on A1 (blocks), head 1 on A2 (columns)
        l = 2 ** math.ceil(math.log2(n) / 2)
        a1 = strided(l, component=1)
        plan = BlockSparsePlan(a1.layout(n, 32), 32, n, mask_mod=a1.mask_mod)
        extra = {"stride": l}

        def attend():
            y1 = block_sparse_attention(q[:, :1], k[:, :1], v[:, :1], plan)
            y2 = column_attention(q[:, 1:], k[:, 1:], v[:, 1:], l)
            return torch.cat([y1, y2], 1)

    def step() -> float:
        t = time.perf_counter()
        (attend() * proj).sum().backward()
        for x in (q, k, v):
            x.grad = None
        return time.perf_counter() - t

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    step()  # warm-up (and the memory peak)
    times = sorted(step() for _ in range(3))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    return {"method": method, "n": n, "ms": 1e3 * times[1], "peak_mib": peak / 1024, **extra}


def measure(method: str, n: int, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "zoo.kernels.bench_sparse_layer", "--one", method, str(n)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"method": method, "n": n, "error": f"over {timeout:.0f} s"}
    except subprocess.CalledProcessError as e:
        tail = (e.stderr or "").strip().splitlines()[-1:] or ["killed"]
        return {"method": method, "n": n, "error": tail[0][:80]}


def growth(rows: list[dict], method: str) -> float | None:
    pts = [
        (math.log(r["n"]), math.log(r["ms"])) for r in rows if r["method"] == method and "ms" in r
    ]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def report(rows: list[dict], out: Path) -> str:
    sizes = sorted({r["n"] for r in rows})
    cell = {(r["method"], r["n"]): r for r in rows}
    lines = [
        "# One attention layer, forward + backward, CPU",
        "",
        f"`python -m zoo.kernels.bench_sparse_layer` on {platform.processor() or platform.machine()}"
        f" ({torch.get_num_threads()} threads), torch {torch.__version__}; batch 1, {H} heads,"
        f" head dim {D}, fp32. Time: median of 3 (ms). Memory: peak RSS growth (MiB).",
        "",
        "| method | " + " | ".join(f"n={n}" for n in sizes) + " | time ~ n^k |",
        "|---|" + "---|" * (len(sizes) + 1),
    ]
    for metric, unit in (("ms", "ms"), ("peak_mib", "MiB")):
        for m in METHODS:
            vals = []
            for n in sizes:
                r = cell.get((m, n), {})
                vals.append(f"{r[metric]:,.0f}" if metric in r else r.get("error", "-"))
            k = growth(rows, m) if metric == "ms" else None
            tail = f"{k:.2f}" if k is not None else ""
            lines.append(f"| {m} ({unit}) | " + " | ".join(vals) + f" | {tail} |")
    strides = {n: cell.get(("ours_fixed", n), {}).get("stride") for n in sizes}
    lines += [
        "",
        "Fixed-pattern strides: " + ", ".join(f"n={n}: l={s}" for n, s in strides.items()),
    ]
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sparse_layer_cpu.md").write_text(text)
    (out / "sparse_layer_cpu.json").write_text(json.dumps(rows, indent=1))
    plot(rows, out / "sparse_layer_cpu.png")
    return text


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label in (
        (axes[0], "ms", "fwd+bwd time (ms)"),
        (axes[1], "peak_mib", "peak MiB"),
    ):
        for m in METHODS:
            pts = [(r["n"], r[metric]) for r in rows if r["method"] == m and metric in r]
            if pts:
                ax.loglog(*zip(*pts, strict=True), marker="o", label=m)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement")
    parser.add_argument("--one", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.one:
        print(json.dumps(run_one(ns.one[0], int(ns.one[1]))))
        return
    from rich.progress import track

    jobs = [(m, n) for n in ns.sizes for m in ns.methods]
    rows = [measure(m, n, ns.timeout) for m, n in track(jobs, description="measuring")]
    print(report(rows, ns.out))


if __name__ == "__main__":
    main()
