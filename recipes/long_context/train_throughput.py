"""Training throughput of a model preset: tokens per second of whole optimizer steps, per kernel path.

    python recipes/long_context/train_throughput.py sparse_transformer_strided_8k --batches 16x8192 64x2048
    python recipes/long_context/train_throughput.py routing_transformer_small_causal \\
        --config '{"max_seq_len": 8192, "d_model": 512, "n_layers": 8, "d_ff": 2048, "window": 256}'

Each step is a forward pass, the byte-level cross-entropy, a backward pass and a fused AdamW
update, on random bytes of ``(batch, length)``. On CUDA the model runs under bf16 autocast, on a
CPU in fp32. Two warm-up steps (Triton compiles then), then the mean of ``--steps`` timed steps.

Paths (``--paths``):

- ``kernels``: the ops as shipped (:mod:`zoo.kernels` dispatches CUDA tensors to the Triton
  kernels); on a CPU this is the reference, so it is measured only on CUDA;
- ``ref``: every op forced onto its PyTorch reference (``zoo.kernels.use_triton`` off).

It prints a table and, with ``--out``, writes it as markdown with the device and versions. These are
timings for a table, never asserted by a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def parse_batch(text: str) -> tuple[int, int]:
    """``"16x8192"`` -> ``(16, 8192)``."""
    try:
        batch, length = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not BATCHxLENGTH, e.g. 16x8192") from None
    return batch, length


def measure(preset: str, config: dict, path: str, batch: int, length: int, steps: int) -> dict:
    """One row: tokens/s, ms per step and peak memory of ``steps`` timed optimizer steps."""
    import zoo.kernels as kernels

    import zoo

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    use_triton = kernels.use_triton
    if path == "ref":
        kernels.use_triton = lambda x: False
    try:
        torch.manual_seed(0)
        model = zoo.create_model(preset, **config).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), 1e-3, fused=cuda)
        x = torch.randint(0, model.config.vocab_size, (batch, length), device=device)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        start = 0.0
        for i in range(2 + steps):
            if i == 2:
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
            with torch.autocast(device, torch.bfloat16, enabled=cuda):
                out = model(x)
                logits = getattr(out, "logits", out)
            loss = F.cross_entropy(logits.float().flatten(0, 1), x.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        step_s = (time.perf_counter() - start) / steps
        return {
            "preset": preset, "path": path, "batch": batch, "length": length,
            "parameters": sum(p.numel() for p in model.parameters()),
            "tokens_per_s": batch * length / step_s, "ms_per_step": 1e3 * step_s,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        }  # fmt: skip
    finally:
        kernels.use_triton = use_triton


def report(rows: list[dict], command: str) -> str:
    """The markdown table, headed by the device and versions of the kernel benchmark's header."""
    root = str(Path(__file__).resolve().parents[2])  # the clone: benchmarks/ is not installed
    if root not in sys.path:
        sys.path.append(root)
    from benchmarks.kernels import environment

    env = {**environment(), "command": command}
    lines = [f"# Training throughput: {env.pop('device')}", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()] + [""]
    lines += [
        "| preset | path | batch | parameters | tokens/s | ms/step | peak GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        peak = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "—"
        lines.append(
            f"| {r['preset']} | {r['path']} | {r['batch']} × {r['length']:,} | "
            f"{r['parameters'] / 1e6:.1f}M | {r['tokens_per_s']:,.0f} | {r['ms_per_step']:.0f} | "
            f"{peak} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("presets", nargs="+", help="model presets (zoo models)")
    p.add_argument("--config", type=json.loads, default={}, help="JSON overrides of each preset")
    p.add_argument("--batches", type=parse_batch, nargs="+", default=[(16, 8192)])
    p.add_argument("--paths", nargs="+", choices=["kernels", "ref"], default=["kernels", "ref"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", type=Path, help="write the table here as markdown")
    args = p.parse_args(argv)
    paths = [q for q in args.paths if q == "ref" or torch.cuda.is_available()]
    rows = [
        measure(preset, args.config, path, batch, length, args.steps)
        for preset in args.presets
        for path in paths
        for batch, length in args.batches
    ]
    command = "python recipes/long_context/train_throughput.py " + " ".join(argv or [])
    text = report(rows, command.strip())
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
