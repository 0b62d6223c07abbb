"""Rotary positions, forward + backward of one layer's queries and keys: the zoo's autograd function
(:class:`zoo.attention.RotaryEmbedding`) against the same turn written as composed tensor ops
(``x * cos + cat(-x2, x1) * sin``, the zoo's implementation before 2026-11-26), side by side in one
process, taking turns.

    python -m benchmarks.rotary                     # 32 x 256, 8 heads of 32 (the dense rotary model)
    python -m benchmarks.rotary --shape 2 4096 8 32 # the routing top2 model's local heads

Queries and keys are ``(B, H, T, D)`` views of a fused ``(B, T, 3, H, D)`` projection, as in the
models. Each row is the median of ``--repeats`` steps after 3 warm-up steps, in ms. Writes
``rotary_cpu.md`` (or ``rotary_gpu.md``) to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from zoo.attention.rotary import RotaryEmbedding
from zoo.lineage import device_name


def composed(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The turn as composed ops, autograd through each (``cos``, ``sin`` ``(T, D)``)."""
    half = x.shape[-1] // 2
    return (x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin).to(x.dtype)


def measure(shape: tuple[int, int, int, int], dtype: torch.dtype, repeats: int) -> dict:
    """Median ms of fwd+bwd of queries and keys, for both implementations, alternating."""
    B, T, H, D = shape
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rope = RotaryEmbedding(D).to(device)
    fused = torch.randn(B, T, 3, H, D, dtype=dtype, device=device)
    q, k = (fused[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(2))
    grad = torch.randn(B, H, T, D, dtype=dtype, device=device)
    cos, sin = rope.angles(0, T, device)

    def ours():
        torch.autograd.backward(list(rope.rotate(q, k)), [grad, grad])

    def theirs():
        torch.autograd.backward([composed(q, cos, sin), composed(k, cos, sin)], [grad, grad])

    times: dict[str, list[float]] = {"autograd function": [], "composed ops": []}
    steps = {"autograd function": ours, "composed ops": theirs}
    for _ in range(3):
        ours(), theirs()
    for _ in range(repeats):
        for name, step in steps.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(1e3 * (time.perf_counter() - t0))
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--shape", type=int, nargs=4, default=[32, 256, 8, 32], metavar=("B", "T", "H", "D")
    )
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    B, T, H, D = args.shape
    lines = [
        f"# Rotary positions, fwd+bwd of q and k: {device_name(device)}",
        "",
        f"- command: python -m benchmarks.rotary {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        f"- torch: {torch.__version__}",
        f"- shape: batch {B}, {T} positions, {H} heads of {D}",
        "",
        "| dtype | autograd function, ms | composed ops, ms | speed-up |",
        "|---|---|---|---|",
    ]
    for dtype in (torch.bfloat16, torch.float32):
        r = measure((B, T, H, D), dtype, args.repeats)
        ours, theirs = r["autograd function"], r["composed ops"]
        lines.append(
            f"| {str(dtype).split('.')[1]} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"rotary_{'gpu' if device == 'cuda' else 'cpu'}.md"
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
