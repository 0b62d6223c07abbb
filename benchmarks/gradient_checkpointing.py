"""Gradient checkpointing's memory saving and time cost: one training step of each family with and
without ``model.gradient_checkpointing_enable()``.

    python -m benchmarks.gradient_checkpointing          # every default row, the table to docs/bench
    python -m benchmarks.gradient_checkpointing transformer_lm_small:4x256 --steps 5

(from the repository root; the benchmark is not part of the wheel)

A row is ``PRESET:BATCHxLENGTH`` (language models) or ``PRESET:BATCHxSOURCExTARGET``
(encoder-decoders), trained on random tokens: a forward pass, the cross-entropy, a backward pass
(no optimizer: its state is the same with or without checkpointing, 2 x the parameters for AdamW).
Each side of a row measures in a fresh process:

- ``kept for backward``: the bytes of the distinct tensors autograd holds for the backward pass at
  the end of the forward pass, parameters left out (counted with
  ``torch.autograd.graph.saved_tensors_hooks``): the activations checkpointing drops. Deterministic.
- ``peak tensors``: the most memory the step's tensors held at once (parameters and gradients
  included), from ``torch.profiler``'s memory timeline (``profile_memory=True``): the allocator's
  view, without the process's own overhead.
- ``peak RSS growth``: how far the process's resident set rose above its size before the step, at
  its peak (Linux's ``VmHWM``, reset through ``/proc/self/clear_refs``), after a warm-up step of 16
  tokens that loads what the first step loads lazily: what the machine sees, the allocator's own
  overhead included.

Time: one more process per row alternates the two sides step by step (a noisy CPU slows both
alike) and gives each side's median of ``--steps`` steps after a warm-up step each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import machine, measure

__all__ = ["DEFAULT_ROWS", "build", "kept_bytes", "main", "peak_tensor_bytes", "report", "run_one"]

DEFAULT_ROWS = [
    "transformer_lm_small:4x256",
    "sparse_transformer_small:2x2048",
    "routing_transformer_small:2x2048",
    "image_transformer_cifar10_1d:2x3072",
    "transformer_small:32x30x30",
    "lstm_attention_small:32x30x30",
]
MIB = 2**20
STEPS_VARIABLE = "ZOO_BENCH_STEPS"  # --steps, for the processes the harness starts


def build(row: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The preset of ``row`` (seeded, training mode) and its random batch."""
    import zoo

    name, shape = row.split(":")
    dims = [int(d) for d in shape.split("x")]
    torch.manual_seed(0)
    model = zoo.create_model(name).train()
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    if getattr(model, "is_encoder_decoder", False):
        B, S, T = dims
        return model, (torch.randint(1, V, (B, S), generator=g),
                       torch.randint(1, V, (B, T), generator=g))  # fmt: skip
    B, T = dims
    return model, (torch.randint(0, V, (B, T), generator=g),)


def step(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Forward, loss, backward; returns the loss (gradients left for the caller to drop)."""
    out = model(*batch)
    logits = out.logits if hasattr(out, "logits") else out
    target = torch.roll(batch[-1], -1, 1)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())
    loss.backward()
    return loss.detach()


def kept_bytes(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> int:
    """Bytes of the distinct non-parameter storages autograd saves for backward in one step."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:  # held until backward, so never reused meanwhile
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*batch)
    del out
    return sum(kept.values())


def peak_tensor_bytes(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> int:
    """The largest total of CPU tensor bytes alive at once during one step, from the profiler's
    memory timeline."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:  # fmt: skip
        step(model, batch)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "timeline.json")
        with warnings.catch_warnings():  # deprecated for the CUDA memory snapshot: no CPU one
            warnings.simplefilter("ignore", FutureWarning)
            prof.export_memory_timeline(path, device="cpu")
        _, sizes = json.loads(Path(path).read_text())
    return max(sum(s) for s in sizes)  # bytes by category, at each time step


def _status_kib(field: str) -> int:
    """A field of ``/proc/self/status`` in KiB (``VmRSS``, ``VmHWM``)."""
    text = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith(field)))


def rss_growth(fn) -> float:
    """Bytes by which the resident set's peak rose above its size before ``fn()``: Linux's peak
    (``VmHWM``) reset first (``/proc/self/clear_refs``); elsewhere the growth of ``ru_maxrss``,
    the peak over the process's whole life."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        before = _status_kib("VmRSS")
        fn()
        return 1024 * (_status_kib("VmHWM") - before)
    except OSError:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        fn()
        return 1024 * (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)


def run_one(row: str, side: int, steps: int = 5) -> dict:
    """``side`` 0: without checkpointing, 1: with it (memory, in this fresh process); 2: both,
    alternating step by step (time)."""
    model, batch = build(row)
    result = {"row": row, "side": side, "parameters": model.num_parameters()}
    if side == 2:
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(steps + 1):
            for on in (False, True):
                if on:
                    model.gradient_checkpointing_enable()
                else:
                    model.gradient_checkpointing_disable()
                start = time.perf_counter()
                step(model, batch)
                if i:  # the first step of each side warms up
                    times[on].append(time.perf_counter() - start)
                model.zero_grad(set_to_none=True)
        return result | {f"ms_{int(on)}": 1e3 * statistics.median(t) for on, t in times.items()}
    if side:
        model.gradient_checkpointing_enable()
    step(model, tuple(x[:1, :16] for x in batch))  # lazy initialisation, at a negligible size
    model.zero_grad(set_to_none=True)
    result["rss_mib"] = rss_growth(lambda: step(model, batch)) / MIB
    model.zero_grad(set_to_none=True)
    result["peak_mib"] = peak_tensor_bytes(model, batch) / MIB
    model.zero_grad(set_to_none=True)
    result["kept_mib"] = kept_bytes(model, batch) / MIB
    return result


def report(rows: list[str], results: list[dict], command: str) -> str:
    """The markdown table: per row, each measure without -> with checkpointing."""
    got = {(r["row"], r["side"]): r for r in results}
    lines = [
        f"# Gradient checkpointing: {machine()}", "",
        f"- command: `{command}`",
        f"- python {sys.version.split()[0]}; one training step (forward, cross-entropy, backward; "
        "no optimizer) on random tokens, fp32; each side in a fresh process",
        "- kept for backward: bytes of the distinct tensors autograd saves for backward, "
        "parameters left out (`torch.autograd.graph.saved_tensors_hooks`; deterministic)",
        "- peak tensors: the most CPU tensor memory alive at once in the step, parameters and "
        "gradients included (`torch.profiler` memory timeline)",
        "- peak RSS growth: the process's peak resident set above its size before the step "
        "(`VmHWM` after `/proc/self/clear_refs`)",
        "- ms/step: median of the steps, the two sides alternating in one process",
        "",
        "| row | parameters | kept for backward MiB (off → on) | peak tensors MiB (off → on) "
        "| peak RSS growth MiB (off → on) | ms/step (off → on) |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip

    def pair(key: str, off: dict, on: dict) -> str:
        if key not in off or key not in on:
            return off.get("error") or on.get("error") or "-"
        ratio = f" ({on[key] / off[key]:.2f}×)" if off[key] else ""
        return f"{off[key]:,.1f} → {on[key]:,.1f}{ratio}"

    for row in rows:
        off, on, t = (got.get((row, s), {}) for s in (0, 1, 2))
        params = off.get("parameters") or on.get("parameters")
        lines.append(
            f"| {row} | {params / 1e6:.1f}M | " if params else f"| {row} | - | "
        )  # fmt: skip
        lines[-1] += " | ".join([
            pair("kept_mib", off, on), pair("peak_mib", off, on), pair("rss_mib", off, on),
            pair("ms", {"ms": t["ms_0"]} if "ms_0" in t else t,
                 {"ms": t["ms_1"]} if "ms_1" in t else t),
        ]) + " |"  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rows", nargs="*", default=DEFAULT_ROWS)
    steps = int(os.environ.get(STEPS_VARIABLE, 5))
    p.add_argument("--steps", type=int, default=steps, help="timed steps per side")
    p.add_argument("--out", type=Path, default=Path("docs/bench/gradient_checkpointing.md"))
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    p.add_argument("--one", nargs=2, metavar=("ROW", "SIDE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.steps)))
        return
    results = []
    env = {STEPS_VARIABLE: str(args.steps)}
    for row in args.rows:
        for side in (0, 1, 2):
            r = measure("benchmarks.gradient_checkpointing", row, side, args.timeout, env)
            results.append(r | {"row": row, "side": side})
            print(json.dumps(results[-1]), file=sys.stderr)
    command = "python -m benchmarks.gradient_checkpointing " + " ".join(argv or sys.argv[1:])
    text = report(args.rows, results, command.strip())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
