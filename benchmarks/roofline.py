"""The roofline of this machine and how close the zoo's models run to it, in one run.

    python -m benchmarks.roofline                      # fp32; bf16 too where the CPU has it natively
    python -m benchmarks.roofline --dtypes float32 bfloat16 --out docs/bench

(from the repository root; the benchmark is not part of the wheel)

1. **The peak**: ``torch.mm`` GFLOP/s of every shape of :data:`zoo.roofline.PEAK_SHAPES` for each
   dtype, on this machine's threads, measured before each round of the cases (below); each
   shape's median over the rounds, and the best shape's is the peak.
2. **The models**: the executed FLOP/s of the cases of :data:`CASES` (training steps with AdamW,
   evaluation forwards, greedy cached decoding at batch 1), FLOPs counted by
   :mod:`zoo.roofline` on one run, over the median of ``--steps`` timed runs after two untimed
   ones, and that rate as a share of the peak of the dtype the case computes in. Newly
   initialised presets on random tokens; all cases in one process, taking turns step by step
   (``--rounds``), so a slow spell of a noisy machine falls on every case alike.

3. **Where a step's time goes** (``--profile``): each case's ops profiled over ``--steps`` runs
   (``torch.profiler``, self CPU time), summed by kind (:func:`kind_of`): matrix products,
   attention kernels, the loss, the optimizer, and element-wise work and norms (the rest).
   The tokens are in memory: there is no data loading to time.
4. **Compiled** (``--compile``): every fp32 case again through ``torch.compile`` (``nn.Module.compile``
   for training and evaluation, ``zoo.generate(compile=True)`` for decoding), timed in the same
   turns, with its eager twin's FLOPs (the same arithmetic); its first run's extra seconds are
   the compile time.

bf16 cases run only where oneDNN computes bf16 natively (AVX512-BF16 or AMX), or with
``--dtypes bfloat16`` named: elsewhere a bf16 training step takes minutes. Writes
``roofline_cpu_<ISA>.md`` and ``.json`` under ``--out`` (the ISA as PyTorch reports it: ``AVX2``,
``AVX512``, ...). Timings for a table, never asserted by a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import zoo
from benchmarks.harness import machine
from zoo.errors import compile_failure
from zoo.precision import native_bf16_cpu
from zoo.roofline import PEAK_SHAPES, count_flops, matmul_rates

# name: (preset, what, batch, length, dtype): what is "train", "eval" or "decode"
CASES: dict[str, tuple[str, str, int, int, str]] = {
    "transformer_lm_small train fp32": ("transformer_lm_small", "train", 4, 256, "float32"),
    "transformer_lm_small train bf16": ("transformer_lm_small", "train", 4, 256, "bfloat16"),
    "transformer_lm_small eval fp32": ("transformer_lm_small", "eval", 4, 256, "float32"),
    "transformer_lm_small decode fp32": ("transformer_lm_small", "decode", 1, 256, "float32"),
    "routing_transformer_small train fp32": (
        "routing_transformer_small", "train", 2, 2048, "float32",
    ),
    "sparse_transformer_small train fp32": (
        "sparse_transformer_small", "train", 2, 2048, "float32",
    ),
    "image_transformer_cifar10_1d train fp32": (
        "image_transformer_cifar10_1d", "train", 2, 3072, "float32",
    ),
    "image_transformer_cifar10_1d eval fp32": (
        "image_transformer_cifar10_1d", "eval", 2, 3072, "float32",
    ),
    # translation (teacher forcing): source and target both batch x length, 4,096 target
    # tokens as the Multi30k recipes' max_tokens
    "transformer_small train fp32": ("transformer_small", "train", 128, 32, "float32"),
    "lstm_attention_small train fp32": ("lstm_attention_small", "train", 128, 32, "float32"),
}  # fmt: skip
DECODE_PROMPT = 16  # greedy decoding: this many prompt tokens, then length - prompt new ones


COMPILED = " compiled"  # a case's name with this suffix: the same case through torch.compile


def case_of(name: str) -> tuple[tuple[str, str, int, int, str], bool]:
    """The :data:`CASES` entry of ``name`` and whether it runs compiled (``name`` ends with
    :data:`COMPILED`)."""
    compiled = name.endswith(COMPILED)
    return CASES[name.removesuffix(COMPILED)], compiled


def _case(
    preset: str, what: str, batch: int, n: int, dtype: str, compiled: bool = False
) -> tuple[Callable, int]:
    """``(run, tokens)``: one timed unit of the case (returns its own seconds), the tokens it
    processes. ``compiled``: the model through ``nn.Module.compile`` (training, evaluation) or
    ``zoo.generate(compile=True)`` (decoding)."""
    torch.manual_seed(0)
    model = zoo.create_model(preset, max_seq_len=max(n, 16))
    if compiled and what != "decode":
        model.compile()
    vocab = model.config.vocab_size
    x = torch.randint(4, vocab, (batch, n))  # no special ids (translation: 0-3)
    inputs = (x, x) if getattr(model, "is_encoder_decoder", False) else (x,)  # source, target
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    if what == "train":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)  # as zoo fit

        def step() -> None:
            with autocast:
                logits = model(*inputs).logits
            loss = F.cross_entropy(logits.flatten(0, 1).float(), x.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step, batch * n
    model.eval()
    if what == "eval":

        def forward() -> None:
            with torch.no_grad(), autocast:
                model(*inputs)

        return forward, batch * n
    prompt = x[:, :DECODE_PROMPT]

    def decode() -> None:
        with autocast:
            zoo.generate(model, prompt, n - DECODE_PROMPT, temperature=0, compile=compiled)

    return decode, batch * (n - DECODE_PROMPT)


def _decode_flops(preset: str, batch: int, n: int) -> int:
    """The FLOPs of the decoding steps alone: the whole generation less the prompt's forward."""
    run, _ = _case(preset, "decode", batch, n, "float32")
    model = zoo.create_model(preset, max_seq_len=max(n, 16)).eval()
    x = torch.zeros(batch, DECODE_PROMPT, dtype=torch.long)
    with torch.no_grad():
        prompt = count_flops(lambda: model(x))
    return count_flops(run) - prompt


def measure_cases(
    names: list[str], steps: int, rounds: int, dtypes: list[str]
) -> tuple[list[dict], dict[str, dict]]:
    """Every case's FLOPs, median seconds and tokens/s, timed in turns (module docstring), and
    the ``torch.mm`` rates of every dtype and shape, measured before each round: each shape's
    median over the rounds, so that the peak, like the cases, is not one lucky spell."""
    units, rows, failed = {}, {}, {}
    measured: dict[str, list[dict]] = {d: [] for d in dtypes}
    for name in names:
        (preset, what, batch, n, dtype), compiled = case_of(name)
        run, tokens = _case(preset, what, batch, n, dtype, compiled)
        if what == "decode":
            flops = _decode_flops(preset, batch, n)
        else:  # a compiled case executes the eager case's arithmetic; count it there
            flops = count_flops(_case(preset, what, batch, n, dtype)[0])
        t0 = time.perf_counter()
        try:
            run()  # warm-up (and the compile)
        except Exception as e:
            if compile_failure(e) is None:
                raise
            failed[name] = compile_failure(e)
            continue
        first = time.perf_counter() - t0
        run()
        units[name] = run
        rows[name] = dict(case=name, preset=preset, what=what, batch=batch, length=n,
                          dtype=dtype, tokens=tokens, flops=flops, times=[],
                          first_seconds=first if compiled else None)  # fmt: skip
    for _ in range(rounds):
        for d in dtypes:
            measured[d].append(matmul_rates(getattr(torch, d), shapes=PEAK_SHAPES))
        for _ in range(steps):
            for name, run in units.items():
                t0 = time.perf_counter()
                run()
                rows[name]["times"].append(time.perf_counter() - t0)
    for r in rows.values():
        r["seconds"] = statistics.median(r["times"])
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
        r["gflops"] = r["flops"] / r["seconds"] / 1e9
        first = r.pop("first_seconds")
        r["compile_s"] = None if first is None else first - r["seconds"]
    peaks = {
        d: {shape: statistics.median(m[shape] for m in ms if shape in m) for shape in ms[0]}
        for d, ms in measured.items()
    }
    failures = [dict(case=name, batch=CASES[name.removesuffix(COMPILED)][2],
                     length=CASES[name.removesuffix(COMPILED)][3], compile_failed=cause)
                for name, cause in failed.items()]  # fmt: skip
    return list(rows.values()) + failures, peaks


KINDS = ("matrix products", "attention", "loss", "optimizer", "element-wise and norms")
# oneDNN's LSTM layer (nn.LSTM on a CPU) is its gate products, the gates' element-wise work inside
_MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::dot",
           "aten::mv", "aten::addmv", "aten::_int_mm", "aten::mkldnn_rnn_layer",
           "aten::mkldnn_rnn_layer_backward")  # fmt: skip
_LOSS = ("cross_entropy", "log_softmax", "nll_loss", "_softmax_backward", "logsumexp")


def kind_of(op: str) -> str:
    """The kind of a profiled aten op (one of :data:`KINDS`)."""
    if op in _MATMUL:
        return KINDS[0]
    if "scaled_dot_product" in op or "attention" in op:
        return KINDS[1]
    if any(name in op for name in _LOSS):
        return KINDS[2]
    if op.startswith(("aten::_foreach", "aten::_fused_adam")) or "Optimizer" in op:
        return KINDS[3]
    return KINDS[4]


def profile_shares(name: str, steps: int) -> dict[str, float]:
    """The share of each kind of op in the self CPU time of ``steps`` runs of case ``name``."""
    from torch.profiler import ProfilerActivity, profile

    (preset, what, batch, n, dtype), _ = case_of(name)
    run, _ = _case(preset, what, batch, n, dtype)
    run(), run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            run()
    total = dict.fromkeys(KINDS, 0.0)
    for event in prof.key_averages():
        if event.key.startswith("aten::") or event.key.startswith("Optimizer"):
            total[kind_of(event.key)] += event.self_cpu_time_total
    whole = sum(total.values()) or 1.0
    return {k: v / whole for k, v in total.items()}


def report(peaks: dict[str, dict], cases: list[dict], command: str,
           shares: dict[str, dict[str, float]] | None = None) -> str:  # fmt: skip
    """The Markdown page: the machine, the peak table, the cases' table."""
    isa = torch.backends.cpu.get_cpu_capability()
    shapes = sorted(
        {s for rates in peaks.values() for s in rates}, key=lambda s: s[0] * s[1] * s[2]
    )
    lines = [
        f"# Roofline: {machine()}, {isa}",
        "",
        f"`{command}`; native bf16 (AVX512-BF16 or AMX): {'yes' if native_bf16_cpu() else 'no'}.",
        "",
        "## The peak: torch.mm, GFLOP/s (best of 5 after one warm-up; the median of the "
        "rounds, measured before each)",
        "",
        "| m x k x n | " + " | ".join(peaks) + " |",
        "|---|" + "---:|" * len(peaks),
    ]
    for s in shapes:
        cells = [f"{peaks[d][s]:,.1f}" if s in peaks[d] else "-" for d in peaks]
        lines.append(f"| {s[0]} x {s[1]} x {s[2]} | " + " | ".join(cells) + " |")
    best = {d: max(rates.values()) for d, rates in peaks.items()}
    lines.append("| **peak** | " + " | ".join(f"**{best[d]:,.1f}**" for d in peaks) + " |")
    lines += [
        "",
        "## The models: executed FLOP/s against the peak of their dtype",
        "",
        "FLOPs counted by zoo.roofline (matrix products and attention) on one run; median time of "
        "the timed runs, all cases taking turns. Decoding: greedy, cached, batch 1, the prompt's "
        f"{DECODE_PROMPT} tokens excluded from its FLOPs (its time includes them).",
        "",
        "| case | batch x length | tokens/s | GFLOP/s | share of its dtype's peak "
        "| share of the float32 peak | compile (s) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]

    def share(rate: float, dtype: str) -> str:
        return f"{100 * rate / best[dtype]:.0f} %" if dtype in best else "-"

    for r in cases:
        if r.get("compile_failed"):
            lines.append(f"| {r['case']} | {r['batch']} x {r['length']:,} | - | - | - | - | "
                         f"did not compile ({r['compile_failed']}) |")  # fmt: skip
            continue
        lines.append(
            f"| {r['case']} | {r['batch']} x {r['length']:,} | {r['tokens_per_s']:,.0f} | "
            f"{r['gflops']:,.1f} | {share(r['gflops'], r['dtype'])} | "
            f"{share(r['gflops'], 'float32')} | "
            f"{'-' if r.get('compile_s') is None else format(r['compile_s'], '.1f')} |"
        )
    if shares:
        lines += [
            "",
            "## Where a step's time goes",
            "",
            "Self CPU time of the profiled ops (torch.profiler), by kind; the tokens are in memory.",
            "",
            "| case | " + " | ".join(KINDS) + " |",
            "|---|" + "---:|" * len(KINDS),
        ]
        for name, share in shares.items():
            cells = " | ".join(f"{100 * share[k]:.0f} %" for k in KINDS)
            lines.append(f"| {name} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"),
                   help="default: float32, and bfloat16 where the CPU has it natively")  # fmt: skip
    p.add_argument("--cases", nargs="+", choices=list(CASES), help="default: those of the dtypes")
    p.add_argument("--steps", type=int, default=5, help="timed runs per case and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="also where each case's time goes")
    p.add_argument("--compile", action="store_true", help="also each fp32 case compiled "
                   "(torch.compile), timed in the same turns")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    ns = p.parse_args(argv)
    dtypes = ns.dtypes or ["float32", *(["bfloat16"] if native_bf16_cpu() else [])]
    names = ns.cases or [n for n, c in CASES.items() if c[4] in dtypes]
    if ns.compile:
        names += [n + COMPILED for n in names if CASES[n][4] == "float32"]
    cases, peaks = measure_cases(names, ns.steps, ns.rounds, dtypes)
    command = "python -m benchmarks.roofline " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    shares = {name: profile_shares(name, ns.steps) for name in names
              if not name.endswith(COMPILED)} if ns.profile else None  # fmt: skip
    text = report(peaks, cases, command.strip(), shares)
    print(text)
    ns.out.mkdir(parents=True, exist_ok=True)
    stem = f"roofline_cpu_{torch.backends.cpu.get_cpu_capability().lower()}"
    (ns.out / f"{stem}.md").write_text(text)
    saved = {
        d: {f"{s[0]}x{s[1]}x{s[2]}": r for s, r in rates.items()} for d, rates in peaks.items()
    }
    (ns.out / f"{stem}.json").write_text(json.dumps(
        {"machine": machine(), "peaks": saved,
         "cases": [{k: v for k, v in r.items() if k != "times"} for r in cases],
         "shares": shares}, indent=1,
    ) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
