"""Benchmark: where NSA's training step goes, branch by branch, against dense causal attention.

    python -m benchmarks.nsa_branches                 # n = 4,096, writes docs/bench/nsa_branches_cpu.md
    python -m benchmarks.nsa_branches --n 1024 --out /tmp/bench

(from the repository root; the benchmark is not part of the wheel)

One process, fp32, batch 1, 8 heads of 32 and the NSA parameters of the
``transformer_lm_small_nsa`` preset (compressed blocks of 32 at stride 16, 6 selected blocks of
64, window 128, keys and values shared). Each part is timed forward and backward, the parts
interleaved round by round so that a noisy machine slows them alike; the table gives each
part's median and its ratio to dense causal attention through PyTorch's fused kernel (SDPA),
the core the dense module runs:

- ``dense``: ``scaled_dot_product_attention(q, k, v, is_causal=True)``;
- ``compressed``: NSA's two block compressors, the compressed branch and the block choice
  (:func:`~zoo.attention.mechanisms.nsa.compressed_attention` with the selection reducer);
- ``selected``: :func:`~zoo.kernels.block_select.block_select_attention` on the chosen blocks;
- ``window``: the sliding-window branch;
- ``dense module`` and ``nsa module``: the whole attention layers (projections, gates and output
  included), as ``python -m benchmarks.block_selection`` times them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import machine

D_MODEL, H = 256, 8
PARTS = ("dense", "compressed", "selected", "window", "dense module", "nsa module")


def parts(n: int) -> dict[str, Callable[[], None]]:
    """Each part's forward + backward at length ``n``, as a closure."""
    from zoo.kernels.block_select import block_select_attention

    import zoo
    from zoo.attention.mechanisms import nsa

    torch.manual_seed(0)
    layers = {
        name: zoo.create_model(
            "transformer_lm_tiny", d_model=D_MODEL, n_heads=H, max_seq_len=n, n_layers=1,
            attention=spec,
        ).blocks[0].attention
        for name, spec in (("dense", "dense"), ("nsa", _nsa_spec()))
    }  # fmt: skip
    layer = layers["nsa"]
    p = layer.params
    x = torch.randn(1, n, D_MODEL, requires_grad=True)
    q, k, v = (torch.randn(1, H, n, D_MODEL // H, requires_grad=True) for _ in range(3))

    def choose(probs: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return nsa._choose(nsa._importance(probs, n, p), pos, p)

    def compressed() -> torch.Tensor:
        kc, vc = layer.compress_k(k), layer.compress_v(v)
        out, blocks = nsa.compressed_attention(q, kc, vc, n, p, choose)
        out.sum().backward()
        return blocks

    blocks = compressed()
    return {
        "dense": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward(),
        "compressed": compressed,
        "selected": lambda: (
            block_select_attention(q, k, v, blocks, p.select_block).sum().backward()
        ),
        "window": lambda: nsa._window_attention(q, k, v, p.window).sum().backward(),
        "dense module": lambda: layers["dense"](x).sum().backward(),
        "nsa module": lambda: layer(x).sum().backward(),
    }


def _nsa_spec() -> dict:
    from zoo.models.registry import get_preset

    return get_preset("transformer_lm_small_nsa").config.attention


def measure(n: int, rounds: int = 7) -> dict[str, float]:
    """Median ms of each part over ``rounds`` interleaved rounds, after one warm-up round."""
    steps = parts(n)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds + 1):
        for name, step in steps.items():
            t = time.perf_counter()
            step()
            if r:  # round 0 warms up
                times[name].append(1e3 * (time.perf_counter() - t))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def report(ms: dict[str, float], n: int, rounds: int = 7) -> str:
    lines = [
        "# Where NSA's training step goes, CPU",
        "",
        f"`python -m benchmarks.nsa_branches --n {n}` on {machine()}; batch 1, {H} heads of "
        f"{D_MODEL // H}, fp32, the `transformer_lm_small_nsa` preset's NSA. Forward + backward, "
        f"median ms of {rounds} interleaved rounds.",
        "",
        "| part | ms | / dense SDPA |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {ms[name]:.0f} | {ms[name] / ms['dense']:.2f} |" for name in PARTS]
    branches = sum(ms[name] for name in ("compressed", "selected", "window"))
    lines += [
        "",
        f"The three branches: {branches:.0f} ms, {branches / ms['dense']:.2f} of dense SDPA; "
        f"the NSA module over the dense module: {ms['nsa module'] / ms['dense module']:.2f}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="sequence length")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    ns = parser.parse_args(argv)
    text = report(measure(ns.n, ns.rounds), ns.n, ns.rounds)
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "nsa_branches_cpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
