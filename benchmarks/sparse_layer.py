"""Benchmark: one attention layer, forward + backward, dense vs sparse, on this machine's CPU.

    python -m benchmarks.sparse_layer            # n = 1k ... 16k, writes docs/bench/
    python -m benchmarks.sparse_layer --sizes 1024 2048 --out /tmp/bench

(from the repository root; the benchmark is not part of the wheel)

Methods (q, k, v of shape (1, H, n, 64), fp32, H = 2; the gradient of a fixed random projection of
the output is propagated back to q, k, v):

- ``sdpa_causal``: dense causal ``scaled_dot_product_attention`` (PyTorch's fused CPU kernel);
- ``dense_masked``: dense attention under the fixed pattern's ``(n, n)`` element mask, as the
  oracle computes it (scores, mask, softmax, all ``n x n``);
- ``ours_fixed``: the attention engine (``zoo.attention.functional.attend``) on the fixed pattern,
  stride ``l = 2^ceil(log2(n)/2 + 1)`` (about ``2 sqrt(n)``), ``c = 32``, merged heads with
  distinct summaries: on a CPU, the segment route (``zoo.kernels.segment_attention``);
- ``blocks_fixed``: the same pattern through the generic block-sparse PyTorch path
  (``zoo.kernels.block_sparse_attention_torch``, blocks of 32), the route before 2026-11-24;
- ``ours_strided``: the Sparse Transformer's strided layer through the engine, one head on ``A1``
  (the local route on a CPU) and one on ``A2`` (the transposed-sequence route),
  ``l = 2^ceil(log2(n)/2)``.

Efficiency (the kernel-layer issue's measure) is ``ours_fixed``'s speed-up over ``sdpa_causal``
divided by the ratio of score entries, ``(n^2 / 2) / entries of the fixed pattern``: 1 means as
fast per computed entry as PyTorch's fused dense kernel.

Each (method, n) runs in a fresh subprocess: time is the median of 3 forward+backward passes after
a warm-up; peak memory is the growth of the process's peak resident set over the inputs
(``ru_maxrss``). A table (markdown) and a log-log plot are written to ``--out``; the growth exponent
is the least-squares slope of log(time) against log(n).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks import harness
from benchmarks.harness import machine, measure, time_and_peak, write_report

METHODS = ("sdpa_causal", "dense_masked", "ours_fixed", "blocks_fixed", "ours_strided")
H, D = 2, 64


def fixed_pattern(n: int):
    from zoo.attention.patterns import fixed

    l = 2 ** math.ceil(math.log2(n) / 2 + 1)
    return fixed(l, 32, distinct_summaries=True), l


def fixed_entries(n: int) -> int:
    """Score entries the fixed pattern allows over ``H`` heads, counted a block of rows at a time."""
    pattern, _ = fixed_pattern(n)
    heads = torch.arange(H).view(H, 1, 1)
    keys = torch.arange(n).view(1, 1, n)
    return sum(
        int(pattern.mask_mod(heads, torch.arange(r, min(n, r + 512)).view(1, -1, 1), keys).sum())
        for r in range(0, n, 512)
    )


def run_one(method: str, n: int) -> dict:
    """Measure one (method, n) in this process."""
    from zoo.kernels import BlockSparsePlan, block_sparse_attention_torch

    from zoo.attention.functional import attend as engine
    from zoo.attention.patterns import strided

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
        extra = {"stride": l}

        def attend():
            return engine(q, k, v, pattern)

    elif method == "blocks_fixed":
        pattern, l = fixed_pattern(n)
        layout = pattern.layout(n, 32, H)
        plan = BlockSparsePlan(layout, 32, n, mask_mod=pattern.mask_mod)
        extra = {"stride": l, "blocks": f"{layout.float().mean().item():.3f}"}

        def attend():
            return block_sparse_attention_torch(q, k, v, plan)

    else:  # ours_strided: head 0 on A1, head 1 on A2, through the engine
        l = 2 ** math.ceil(math.log2(n) / 2)
        a1, a2 = strided(l, component=1), strided(l, component=2)
        extra = {"stride": l}

        def attend():
            y1 = engine(q[:, :1], k[:, :1], v[:, :1], a1)
            y2 = engine(q[:, 1:], k[:, 1:], v[:, 1:], a2)
            return torch.cat([y1, y2], 1)

    def step() -> float:
        t = time.perf_counter()
        (attend() * proj).sum().backward()
        for x in (q, k, v):
            x.grad = None
        return time.perf_counter() - t

    ms, peak = time_and_peak(step)
    return {"method": method, "n": n, "ms": ms, "peak_mib": peak, **extra}


def report(rows: list[dict], out: Path) -> str:
    header = [
        "# One attention layer, forward + backward, CPU",
        "",
        f"`python -m benchmarks.sparse_layer` on {machine()}; batch 1, {H} heads,"
        f" head dim {D}, fp32. Time: median of 3 (ms). Memory: peak RSS growth (MiB).",
    ]
    metrics = [("ms", "ms", "fwd+bwd time (ms)"), ("peak_mib", "MiB", "peak MiB")]
    text = write_report(rows, METHODS, metrics, header, out, "sparse_layer_cpu")
    strides = {r["n"]: r.get("stride") for r in rows if r["method"] == "ours_fixed"}
    note = "Fixed-pattern strides: " + ", ".join(
        f"n={n}: l={s}" for n, s in sorted(strides.items())
    )
    text += "\n" + note + "\n" + efficiency(rows)
    (out / "sparse_layer_cpu.md").write_text(text)
    return text


def efficiency(rows: list[dict]) -> str:
    """The fixed pattern against dense causal SDPA, per n: entry ratio, speed-up, efficiency."""
    sdpa = {r["n"]: r["ms"] for r in rows if r["method"] == "sdpa_causal" and "ms" in r}
    ours = [r for r in rows if r["method"] == "ours_fixed" and "ms" in r and r["n"] in sdpa]
    if not ours:
        return ""
    lines = [
        "",
        "| n | entries (fixed) | entry ratio vs causal | speed-up over sdpa_causal | efficiency |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(ours, key=lambda r: r["n"]):
        n = r["n"]
        entries = r.get("entries") or fixed_entries(n)  # counted here, not in the timed process
        ratio = H * n * (n + 1) / 2 / entries
        speedup = sdpa[n] / r["ms"]
        lines.append(
            f"| {n:,} | {entries:,} | {ratio:.2f} | {speedup:.2f} | {speedup / ratio:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, METHODS)
    ns = parser.parse_args(argv)
    if ns.one:
        print(json.dumps(run_one(ns.one[0], int(ns.one[1]))))
        return
    from rich.progress import track

    jobs = [(m, n) for n in ns.sizes for m in ns.methods]
    rows = [
        measure("benchmarks.sparse_layer", m, n, ns.timeout)
        for m, n in track(jobs, description="measuring")
    ]
    print(report(rows, ns.out))


if __name__ == "__main__":
    main()
