"""Benchmark: causal routing's attention on a CPU, the sorted-run route against the masked sliding
window it replaced, inside one training step of the published causal-routing model on real text.

    ZOO_DATA_DIR=... python -m benchmarks.causal_routing            # writes docs/bench/
    python -m benchmarks.causal_routing --shapes 2x256 --reps 1 --out /tmp/bench

(from the repository root; the benchmark is not part of the wheel)

The model is ``routing_transformer_small.pg19mini`` (causal routing, 4 local + 4 routing heads,
``causal_window`` 128, centroids trained on pg19mini), in eval mode (no dropout, no centroid
updates, gradients on), so both routes see the same clusters: the ones real text falls into. One
step is forward, cross-entropy and backward on the first windows of pg19mini valid, under bf16
autocast (what ``zoo fit`` runs on CPUs with AVX512-BF16) or fp32. The two routes alternate step
by step in one process, so load on the machine hits both alike; the table gives each route's
median.

- ``masked window``: :func:`zoo.attention.functional.local_attention` with segment ids, blocks of
  ``causal_window`` queries against ``2 causal_window`` keys under a per-(batch, head) mask;
- ``sorted runs``: :func:`zoo.kernels.run_window_attention`, each cluster padded to its own blocks.

The loss of the two routes is compared too: they compute the same function.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import machine
from zoo.attention import functional
from zoo.data.byte_corpora import load_byte_corpus
from zoo.errors import DataNotFoundError, SequenceTooLongError
from zoo.pretrained import from_pretrained

CHECKPOINT = "routing_transformer_small.pg19mini"


@contextlib.contextmanager
def masked_window():
    """Route sorted segment ids through the masked sliding window, as before the run op."""
    real = functional._sorted
    functional._sorted = lambda segments: False
    try:
        yield
    finally:
        functional._sorted = real


def windows(batch: int, length: int, data_dir: str | None) -> torch.Tensor:
    """The first ``batch`` windows of ``length + 1`` bytes of pg19mini valid, ``(batch, L + 1)``."""
    text = b"".join(load_byte_corpus("pg19mini", data_dir=data_dir, splits=("valid",))["valid"])
    need = batch * (length + 1)
    return torch.frombuffer(bytearray(text[:need]), dtype=torch.uint8).long().view(batch, -1)


def step(model, idx: torch.Tensor, precision: str) -> float:
    """One forward + loss + backward; the loss in nats."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        logits = model(idx[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), idx[:, 1:].flatten())
    loss.backward()
    return float(loss.detach())


def measure(shape: tuple[int, int], precision: str, reps: int, data_dir: str | None) -> dict:
    """Median ms per step of each route (alternating), and both routes' losses."""
    model = from_pretrained(CHECKPOINT)  # eval mode: the centroids stay as trained
    idx = windows(*shape, data_dir)
    times, losses = {"masked window": [], "sorted runs": []}, {}
    for rep in range(reps + 1):  # the first round warms up
        for name in times:
            with masked_window() if name == "masked window" else contextlib.nullcontext():
                t = time.perf_counter()
                losses[name] = step(model, idx, precision)
                if rep:
                    times[name].append((time.perf_counter() - t) * 1e3)
    row = {"shape": shape, "precision": precision}
    row |= {name: statistics.median(ms) for name, ms in times.items()}
    row["loss difference"] = abs(losses["masked window"] - losses["sorted runs"])
    return row


def report(rows: list[dict], out: Path | None) -> str:
    lines = [
        f"# Causal routing's attention on a CPU: {CHECKPOINT}, one training step",
        "",
        f"`python -m benchmarks.causal_routing`, {machine()}, {time.strftime('%Y-%m-%d')}; "
        "median ms of the timed steps, the two routes alternating in one process.",
        "",
        "| batch | precision | masked window, ms/step | sorted runs, ms/step | speed-up | "
        "tokens/s, sorted runs | loss difference (nats) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        (B, L), old, new = r["shape"], r["masked window"], r["sorted runs"]
        lines.append(
            f"| {B} × {L:,} | {r['precision']} | {old:,.0f} | {new:,.0f} | {old / new:.2f}× | "
            f"{B * L / new * 1e3:,.0f} | {r['loss difference']:.1e} |"
        )
    text = "\n".join(lines) + "\n"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "causal_routing_cpu.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["8x1024", "2x4096"], help="BxL windows")
    ap.add_argument("--precision", nargs="+", choices=["bf16", "fp32"], default=["bf16", "fp32"])
    ap.add_argument("--reps", type=int, default=7, help="timed steps per route")
    ap.add_argument("--data-dir", default=None, help="default: $ZOO_DATA_DIR")
    ap.add_argument("--out", type=Path, default=Path("docs/bench"))
    ns = ap.parse_args(argv)
    rows = []
    for shape in ns.shapes:
        B, L = (int(x) for x in shape.lower().split("x"))
        for precision in ns.precision:
            try:
                rows.append(measure((B, L), precision, ns.reps, ns.data_dir))
            except (SequenceTooLongError, DataNotFoundError) as e:
                ap.error(str(e))
    print(report(rows, ns.out))


if __name__ == "__main__":
    main()
