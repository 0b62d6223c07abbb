"""Compiled against eager cached decoding, side by side in one process, on this CPU.

    python -m benchmarks.compiled_decode                 # every LM family, batch 1 and 8
    python -m benchmarks.compiled_decode --presets transformer_lm_small --batches 1 --rounds 5

(from the repository root; the benchmark is not part of the wheel)

For each preset (newly initialised, fp32, eval mode; speed does not depend on the weights) and
batch size: a prompt of ``--prompt`` random bytes, then ``--new`` greedy tokens by
:func:`zoo.generate`, eager (``compile=False``) and compiled (``compile=True``,
:func:`zoo.decoding.compiled_step`). The first compiled call's time less an eager call's is the
compile time. Then ``--rounds`` rounds run each side once, the side going first alternating;
the table gives each side's median rate (new tokens x batch over the whole call, prompt
included: what a user waits for), their ratio, and whether the two sides' tokens are identical.
Where the backend fails to compile a step, ``zoo.generate`` warns and decodes eagerly: the table
says so.

The last column is the bound the weights set at batch 1: the preset's linear layers applied to
one row, one after another, as a decoding step must read them (fp32 weights streamed from the
caches or memory every token); its rate is tokens/s if nothing else took time. Timings for a
table, never asserted by a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

import zoo
from benchmarks.harness import machine

PRESETS = ("transformer_lm_small", "transformer_lm_small_rotary", "sparse_transformer_small",
           "routing_transformer_small", "image_transformer_cifar10_1d",
           "transformer_lm_small_moba", "transformer_lm_small_nsa")  # fmt: skip


def weight_bound(model: torch.nn.Module, repeats: int = 200) -> float:
    """Tokens/s of ``model``'s ``nn.Linear`` layers applied in turn to one row (the median of
    5 runs of ``repeats`` passes): a batch-1 step's weight reads and nothing else."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    rows = {m.in_features: torch.randn(1, m.in_features) for m in linears}

    def once() -> None:
        for m in linears:
            F.linear(rows[m.in_features], m.weight, m.bias)

    with torch.inference_mode():
        once()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(repeats):
                once()
            times.append((time.perf_counter() - t) / repeats)
    return 1 / statistics.median(times)


def measure(preset: str, batch: int, prompt_len: int, new: int, rounds: int) -> dict:
    """One preset and batch: both sides' rates, the compile time and whether tokens agree."""
    torch._dynamo.reset()  # as in a fresh process: one process's compiles of many models
    torch.manual_seed(0)  # would reach Dynamo's recompile limit (8) and run the rest eagerly
    model = zoo.create_model(preset).eval()
    prompt = torch.randint(0, 256, (batch, prompt_len))

    def call(compile: bool) -> tuple[float, torch.Tensor]:
        t = time.perf_counter()
        out = zoo.generate(model, prompt, new, temperature=0, compile=compile)
        return time.perf_counter() - t, out

    _, eager_out = call(False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled_first, compiled_out = call(True)
    failed = [str(w.message) for w in caught if "could not compile" in str(w.message)]
    times: dict[bool, list[float]] = {False: [], True: []}
    same = torch.equal(compiled_out, eager_out)
    for r in range(rounds):
        for side in (False, True) if r % 2 == 0 else (True, False):
            seconds, out = call(side)
            times[side].append(seconds)
            same = same and torch.equal(out, eager_out)
    rate = {s: batch * new / statistics.median(ts) for s, ts in times.items()}
    return {
        "preset": preset, "batch": batch, "prompt": prompt_len, "new": new,
        "eager_tokens_per_s": rate[False], "compiled_tokens_per_s": rate[True],
        "speedup": rate[True] / rate[False],
        "compile_s": compiled_first - statistics.median(times[True]),
        "same_tokens": same,
        "compile_failed": failed[0] if failed else None,
        "weight_bound_tokens_per_s": weight_bound(model) if batch == 1 else None,
    }  # fmt: skip


def report(rows: list[dict], command: str) -> str:
    lines = [
        "# Compiled against eager cached decoding, CPU",
        "",
        f"`{command}` on {machine()}, "
        f"{torch.backends.cpu.get_cpu_capability()}; fp32, greedy (`zoo.generate(..., "
        "temperature=0, compile=...)`). Rates: new tokens x batch per second over the whole "
        "call, prompt included (the median of the rounds, both sides in turn). Compile: the first "
        "compiled call's extra seconds. Weight bound: tokens/s of the preset's linear layers "
        "alone on one row, what fp32 weights allow at batch 1 on this machine.",
        "",
        "| preset | batch | eager tok/s | compiled tok/s | speed-up | compile (s) "
        "| same tokens | weight bound tok/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        bound, failed = r["weight_bound_tokens_per_s"], r.get("compile_failed")
        lines.append(
            f"| {r['preset']} | {r['batch']} | {r['eager_tokens_per_s']:,.0f} | "
            f"{r['compiled_tokens_per_s']:,.0f}{' (eager: did not compile)' if failed else ''} | "
            f"{r['speedup']:.2f}x | {r['compile_s']:.1f} | "
            f"{'yes' if r['same_tokens'] else '**no**'} | "
            f"{'' if bound is None else f'{bound:,.0f}'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    p.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    p.add_argument("--prompt", type=int, default=56, help="prompt tokens (default 56)")
    p.add_argument("--new", type=int, default=200, help="new tokens per call (default 200)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    ns = p.parse_args(argv)
    rows = []
    for preset in ns.presets:
        for batch in ns.batches:
            rows.append(measure(preset, batch, ns.prompt, ns.new, ns.rounds))
            print(json.dumps(rows[-1]), flush=True)
    command = "python -m benchmarks.compiled_decode " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    text = report(rows, command.strip())
    print(text)
    ns.out.mkdir(parents=True, exist_ok=True)
    stem = f"compiled_decode_cpu_{torch.backends.cpu.get_cpu_capability().lower()}"
    (ns.out / f"{stem}.md").write_text(text)
    (ns.out / f"{stem}.json").write_text(json.dumps({"machine": machine(), "rows": rows},
                                                    indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
