"""Benchmark: one attention layer of each block-selection mechanism against dense causal attention,
forward + backward, on this machine's CPU.

    python -m benchmarks.block_selection             # n = 1k ... 8k, writes docs/bench/
    python -m benchmarks.block_selection --sizes 1024 4096 --out /tmp/bench

(from the repository root; the benchmark is not part of the wheel)

Each method is a whole attention module (projections included) of the zoo's 4,096-context size,
d_model 256, 8 heads of 32, batch 1, fp32, built from its registered mechanism with the
parameters of its preset (:data:`PRESETS`, zoo/models/long_context.py):

- ``dense``: causal softmax attention (PyTorch's fused CPU kernel);
- ``moba``: ``transformer_lm_small_moba``'s MoBA, blocks of 128, top-4 (own block included): at
  most 512 keys per query;
- ``nsa``: ``transformer_lm_small_nsa``'s NSA, compressed blocks of 32 at stride 16, 6 selected
  blocks of 64 (1 initial, 2 local), window 128, keys and values shared by the branches.

``keys`` is the mean share of the causal keys a query attends to (compressed tokens counted as
keys for NSA). Each (method, n) runs in a fresh subprocess: the median of 7 forward+backward
passes after a warm-up; peak memory is the growth of the process's peak resident set.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from benchmarks import harness
from benchmarks.harness import machine, time_and_peak, write_report

METHODS = ("dense", "moba", "nsa")
D_MODEL, H = 256, 8
PRESETS = {"dense": None, "moba": "transformer_lm_small_moba", "nsa": "transformer_lm_small_nsa"}


def spec(method: str):
    """The attention spec of ``method``: that of its preset (so the two cannot drift apart)."""
    from zoo.models.registry import get_preset

    return "dense" if PRESETS[method] is None else get_preset(PRESETS[method]).config.attention


def key_share(method: str, n: int) -> float:
    """The mean share of the causal keys a query attends to, ``sum_t keys(t) / sum_t (t + 1)``."""
    t = torch.arange(n, dtype=torch.float64)
    if method == "dense":
        keys = t + 1
    elif method == "moba":
        b, k = spec("moba")["block_size"], spec("moba")["top_k"]
        keys = t % b + 1 + torch.clamp(t // b, max=k - 1) * b
    else:
        p = spec("nsa")
        l, d, ls, w = (
            p[x] for x in ("compress_block", "compress_stride", "select_block", "window")
        )
        compressed = torch.clamp((t - l) // d + 1, min=0)
        selected = torch.minimum(t + 1, torch.tensor(float(p["n_selected"] * ls)))
        window = torch.clamp(t + 1, max=w)
        keys = torch.minimum(compressed + selected + window, t + 1 + compressed)
    return float(keys.sum() / (t + 1).sum())


def run_one(method: str, n: int) -> dict:
    """Measure one (method, n) in this process."""
    import zoo

    torch.manual_seed(0)
    model = zoo.create_model(
        "transformer_lm_tiny", d_model=D_MODEL, n_heads=H, max_seq_len=n, n_layers=1,
        attention=spec(method),
    )  # fmt: skip
    layer = model.blocks[0].attention
    x = torch.randn(1, n, D_MODEL, requires_grad=True)
    proj = torch.randn(1, n, D_MODEL)

    def step() -> float:
        t = time.perf_counter()
        (layer(x) * proj).sum().backward()
        x.grad = None
        layer.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    ms, peak = time_and_peak(step, repeats=7)  # a noisy machine: the median of 7
    return {"method": method, "n": n, "ms": ms, "peak_mib": peak,
            "keys": round(key_share(method, n), 3)}  # fmt: skip


def report(rows: list[dict], out: Path) -> str:
    header = [
        "# Block-selection attention layers, forward + backward, CPU",
        "",
        f"`python -m benchmarks.block_selection` on {machine()}; one attention module, batch 1,"
        f" d_model {D_MODEL}, {H} heads of {D_MODEL // H}, fp32. Time: median of 7 (ms)."
        " Memory: peak RSS growth (MiB).",
    ]
    metrics = [("ms", "ms", "fwd+bwd time (ms)"), ("peak_mib", "MiB", "peak MiB")]
    text = write_report(rows, METHODS, metrics, header, out, "block_selection_cpu")
    dense = {r["n"]: r["ms"] for r in rows if r["method"] == "dense" and "ms" in r}
    lines = [
        "",
        "| method | n | keys attended (share of causal) | time / dense |",
        "|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["method"], r["n"])):
        if r["method"] != "dense" and "ms" in r and r["n"] in dense:
            lines.append(
                f"| {r['method']} | {r['n']:,} | {r['keys']:.3f} | {r['ms'] / dense[r['n']]:.2f} |"
            )
    text += "\n".join(lines) + "\n"
    (out / "block_selection_cpu.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, METHODS)
    parser.set_defaults(sizes=[1024, 2048, 4096, 8192])
    ns = parser.parse_args(argv)
    if ns.one:
        print(json.dumps(run_one(ns.one[0], int(ns.one[1]))))
        return
    rows = harness.measure_all("benchmarks.block_selection", ns)
    print(report(rows, ns.out))


if __name__ == "__main__":
    main()
