"""Which precision trains each family faster on this CPU: fp32 against bf16 autocast, side by side.

    python -m benchmarks.cpu_precision --out docs/bench/cpu_precision_amd_avx512bf16.md
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python -m benchmarks.cpu_precision \
        --out docs/bench/cpu_precision_amd_as_avx2.md     # this CPU limited to AVX2, as CI's rerun

(from the repository root; the benchmark is not part of the wheel)

A row is one family's recipe preset at a training batch of its recipe's kind (smaller than the
recipes' to keep the run short). A step is a forward pass, the cross-entropy, a backward pass and
an AdamW update, in fp32 (``32-true``) or under ``torch.autocast("cpu", torch.bfloat16)`` with fp32
weights (``bf16-mixed``). The two precisions take turns step by step in one process, so a slow
spell of a noisy machine falls on both; a row's time is its median step. The last column is what
``zoo fit`` reads from ``zoo.precision.BF16_FASTER_ON_CPU``: the families where bf16 is at least
1.2× faster on a CPU with native bf16 (the set there is filled from this table by hand). Timings
for a table, never asserted by a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# family -> (preset, batch, source length, target length or sequence length)
ROWS = {
    "transformer_lm": ("transformer_lm_small", 8, 0, 256),
    "sparse_transformer_lm": ("sparse_transformer_small", 1, 0, 2048),
    "routing_transformer_lm": ("routing_transformer_small", 1, 0, 2048),
    "image_transformer_lm": ("image_transformer_cifar10_1d", 1, 0, 3072),
    "transformer_seq2seq": ("transformer_small", 32, 24, 24),
    "lstm_seq2seq": ("lstm_attention_small", 32, 24, 24),
}


def _step_fn(preset: str, batch: int, src_len: int, length: int):
    import zoo

    torch.manual_seed(0)
    model = zoo.create_model(preset).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    V = model.config.vocab_size
    if src_len:
        src = torch.randint(4, V, (batch, src_len))
        tgt = torch.randint(4, V, (batch, length + 1))
        inputs, target = (src, tgt[:, :-1]), tgt[:, 1:]
    else:
        idx = torch.randint(0, V, (batch, length + 1))
        inputs, target = (idx[:, :-1],), idx[:, 1:]

    def step(bf16: bool) -> float:
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(*inputs).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("families", nargs="*", default=list(ROWS), help="default: all")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per precision")
    ap.add_argument("--out", type=Path, help="write the table here as markdown")
    ns = ap.parse_args()

    from benchmarks.harness import machine
    from zoo.precision import BF16_FASTER_ON_CPU, native_bf16_cpu

    isa = {
        k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ
    }
    lines = [
        f"# fp32 against bf16 autocast, one training step per family: {machine()}",
        "",
        "- command: python -m benchmarks.cpu_precision"
        + (f" (with {' '.join(f'{k}={v}' for k, v in isa.items())})" if isa else ""),
        f"- native bf16 (oneDNN, as zoo.precision.native_bf16_cpu reads it): {native_bf16_cpu()}",
        f"- ATen CPU capability: {torch.backends.cpu.get_cpu_capability()}",
        f"- median of {ns.steps} steps per precision, taking turns after one warm-up step each",
        "",
        "| family | preset | batch | fp32 ms/step | bf16 ms/step | fp32 ÷ bf16 | "
        "bf16 by default where native |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for family in ns.families:
        preset, batch, src_len, length = ROWS[family]
        step = _step_fn(preset, batch, src_len, length)
        step(False), step(True)  # warm-up
        times = {False: [], True: []}
        for _ in range(ns.steps):
            for bf16 in (False, True):
                times[bf16].append(step(bf16))
        fp32, bf16 = (statistics.median(times[k]) * 1e3 for k in (False, True))
        shape = f"{batch} × {src_len} → {length}" if src_len else f"{batch} × {length}"
        line = (f"| {family} | {preset} | {shape} | {fp32:,.0f} | {bf16:,.0f} | "
                f"{fp32 / bf16:.2f} | {'yes' if family in BF16_FASTER_ON_CPU else 'no'} |")  # fmt: skip
        lines.append(line)
        print(line, flush=True)
    if ns.out:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text("\n".join(lines) + "\n")
        print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
