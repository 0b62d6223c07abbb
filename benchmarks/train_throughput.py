"""Training throughput of model presets: tokens per second of whole optimizer steps, side by side.

    python -m benchmarks.train_throughput                 # CPU: dense 256 against the 4,096 presets
    python -m benchmarks.train_throughput sparse_transformer_strided_8k:16x8192 --paths kernels torch
    python -m benchmarks.train_throughput --compare-with /tmp/old   # and the same rows on that code
    python -m benchmarks.train_throughput --together --rounds 3 --precision bf16   # on a noisy CPU
    python -m benchmarks.train_throughput --together --rounds 3 --text pg19mini \
        routing_transformer_small.pg19mini:2x4096 ...   # published models, on real text

(from the repository root; the benchmark is not part of the wheel)

A row is a model ``PRESET[:BATCHxLENGTH]`` (the shape defaults to ``--batches``), a precision, a
kernel path and the code it runs. Each step is a forward pass, the byte-level cross-entropy, a
backward pass and a fused AdamW update (as `zoo fit`) on random bytes, or with ``--text DATASET`` on
windows of real text. Two warm-up steps (Triton
compiles then), then ``--steps`` timed steps; a row's time is its median step. Each row trains in
a fresh process, or with ``--together`` all rows of a checkout share one process and take turns
step by step, so a slow spell of a noisy machine falls on every row alike (the better way to
compare presets on a shared CPU). With ``--rounds R`` the processes run R times, taking turns
(round 1 of every row, then round 2, ...); the table gives each row's median round and the spread
of its rounds (max ÷ min of tokens/s).

- ``--precision``: ``fp32``, or ``bf16`` (autocast, as Lightning's ``bf16-mixed``: weights and
  optimizer stay fp32). Default: both on a CPU, ``bf16`` on CUDA. ``zoo fit`` picks bf16-mixed on
  CPUs with native bf16 (AVX512-BF16 or AMX).
- ``--paths``: ``kernels`` (the ops as shipped) and ``torch`` (``ZOO_ATTENTION_BACKEND=torch``:
  every op on its PyTorch implementation). They differ only on CUDA, so a CPU runs ``kernels``.
- ``--compare-with DIR``: also run every row on the code of another checkout (its ``zoo`` and
  ``kernels``; e.g. ``git worktree add DIR REV`` and ``ln -s ../kernels DIR/zoo/kernels``),
  labelled by its git revision, interleaved with this checkout's rows.

The table's last column divides each row's tokens/s by the first preset's, at the same precision,
path and code: with the default presets, a value of 1 or more means the long-context model trains
as cheaply per token as the dense 256-context one. Timings for a table, never asserted by a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
# the same 8,192 tokens per step: the dense 256 baseline against the published 4,096 presets
DEFAULT_PRESETS = [
    "transformer_lm_small:32x256",
    "sparse_transformer_small_strided:2x4096",
    "routing_transformer_small:2x4096",
    "sparse_transformer_small:2x4096",
]


def parse_batch(text: str) -> tuple[int, int]:
    """``"16x8192"`` -> ``(16, 8192)``."""
    try:
        batch, length = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not BATCHxLENGTH, e.g. 16x8192") from None
    return batch, length


def parse_preset(text: str, default: tuple[int, int]) -> tuple[str, int, int]:
    """``"name:2x4096"`` -> ``("name", 2, 4096)``; ``"name"`` takes ``default``."""
    name, _, shape = text.partition(":")
    return (name, *(parse_batch(shape) if shape else default))


def _text_batches(dataset: str, batch: int, length: int):
    """Endless training batches ``(x, y)`` of ``batch`` windows of ``length`` bytes, drawn as
    ``zoo fit`` draws them: :class:`zoo.data.ByteTextDataModule`'s training loader (seed 0)."""
    from zoo.data import ByteTextDataModule

    dm = ByteTextDataModule(dataset=dataset, seq_len=length, batch_size=batch)
    dm.setup("fit")
    while True:
        yield from dm.train_dataloader()


def trainer(row: dict, device: str):
    """``row``'s model and a function that runs one training step: on random bytes (the same
    batch every step), or with ``row["text"]`` on a new batch of that data set's training windows
    each step, drawn as ``zoo fit`` draws them (seed 0, the same for every row), the next byte as
    the target.

    ``row["preset"]`` is a preset (a freshly initialised model, ``row["config"]`` applied) or a
    published checkpoint's name with a dot (its configuration and weights: a model already trained,
    whose routing clusters, say, are those training met)."""
    import zoo

    torch.manual_seed(0)
    if "." in row["preset"]:
        model = zoo.from_pretrained(row["preset"], dtype=torch.float32)
    else:
        model = zoo.create_model(row["preset"], **row["config"])
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), 1e-3, fused=True)  # as zoo fit
    if row.get("text"):
        batches = _text_batches(row["text"], row["batch"], row["length"])

        def batch() -> tuple[torch.Tensor, torch.Tensor]:
            x, y = next(batches)
            return x.to(device), y.to(device)
    else:
        shape = (row["batch"], row["length"])
        x = torch.randint(0, model.config.vocab_size, shape, device=device)

        def batch() -> tuple[torch.Tensor, torch.Tensor]:
            return x, x

    def step() -> None:
        x, y = batch()
        with torch.autocast(device, torch.bfloat16, enabled=row["precision"] == "bf16"):
            out = model(x).logits
            logits = getattr(out, "logits", out)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, step


def measure(rows: list[dict], steps: int) -> list[dict]:
    """Train every row's model in this process, the rows taking turns step by step: two warm-up
    steps each, then ``steps`` timed steps each; a row's time is its median step."""
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    models, steppers = zip(*(trainer(row, device) for row in rows), strict=True)
    times: list[list[float]] = [[] for _ in rows]
    peaks = [0.0 for _ in rows]
    backend = os.environ.get("ZOO_ATTENTION_BACKEND")
    try:
        for i in range(2 + steps):
            for j, row in enumerate(rows):
                # the ops read the variable at every call, so each row keeps its own path
                os.environ["ZOO_ATTENTION_BACKEND"] = "torch" if row["path"] == "torch" else "auto"
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                start = time.perf_counter()
                steppers[j]()
                if cuda:
                    torch.cuda.synchronize()
                    peaks[j] = max(peaks[j], torch.cuda.max_memory_allocated() / 2**30)
                if i >= 2:
                    times[j].append(time.perf_counter() - start)
    finally:
        if backend is None:
            os.environ.pop("ZOO_ATTENTION_BACKEND", None)
        else:
            os.environ["ZOO_ATTENTION_BACKEND"] = backend
    results = []
    for row, model, ts, peak in zip(rows, models, times, peaks, strict=True):
        step_s = statistics.median(ts)
        results.append({
            **row, "parameters": sum(p.numel() for p in model.parameters()),
            "tokens_per_s": row["batch"] * row["length"] / step_s, "ms_per_step": 1e3 * step_s,
            "peak_gib": peak if cuda else None,
        })  # fmt: skip
    return results


def run(rows: list[dict], steps: int, code: Path | None, timeout: float) -> list[dict]:
    """:func:`measure` in a fresh process, on ``code`` (a checkout) or this one."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(code) if code else None, str(REPO), os.environ.get("PYTHONPATH")])
    )
    # this file as a script: its measure() runs, on the `zoo` that PYTHONPATH finds first
    cmd = [sys.executable, str(Path(__file__).resolve()), "--rows", json.dumps(rows),
           "--steps", str(steps)]  # fmt: skip
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout * len(rows), check=True,
            env=env, cwd=code or REPO,
        )  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return [{**row, "error": f"over {timeout:.0f} s"} for row in rows]
    except subprocess.CalledProcessError as e:
        tail = (e.stderr or "").strip().splitlines()[-1:] or ["killed"]
        return [{**row, "error": tail[0][:100]} for row in rows]


def median_round(rounds: list[dict]) -> dict:
    """One row from its rounds: the round with the median tokens/s, plus ``spread`` (max ÷ min).

    A row with a failed round reports that round's error.
    """
    failed = [r for r in rounds if "error" in r]
    if failed:
        return failed[0]
    ordered = sorted(rounds, key=lambda r: r["tokens_per_s"])
    speeds = [r["tokens_per_s"] for r in ordered]
    return {**ordered[(len(ordered) - 1) // 2], "rounds": len(rounds),
            "spread": speeds[-1] / speeds[0]}  # fmt: skip


def revision(code: Path | None) -> str:
    """The git revision of a checkout (this one for ``None``), short, with ``+`` if modified; the
    folder's name when it is no checkout of its own (an unpacked copy, even one inside another
    checkout, whose revision git would report instead)."""
    where = (code or REPO).resolve()
    try:
        top = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        if Path(top).resolve() != where:
            return where.name
        rev = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return str(where)
    return rev + ("+" if dirty else "")


def report(rows: list[dict], command: str) -> str:
    """The markdown table, headed by the device and versions."""
    from benchmarks.attention_kernels import environment

    env = {**environment(), "command": command}
    lines = [f"# Training throughput: {env.pop('device')}", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()] + [""]
    lines += [
        "| preset | batch | precision | path | code | parameters | tokens/s | ms/step | peak GiB "
        "| spread | tokens/s ÷ first preset's |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    first = rows[0]["preset"] if rows else None
    base = {
        (r["precision"], r["path"], r["code"]): r["tokens_per_s"]
        for r in rows
        if r["preset"] == first and "tokens_per_s" in r
    }
    for r in rows:
        shape = f"{r['batch']} × {r['length']:,}"
        head = f"| {r['preset']} | {shape} | {r['precision']} | {r['path']} | {r['code']} |"
        if "error" in r:
            lines.append(f"{head} {r['error']} | | | | | |")
            continue
        peak = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "—"
        ref = base.get((r["precision"], r["path"], r["code"]))
        ratio = f"{r['tokens_per_s'] / ref:.2f}" if ref else ""
        spread = f"{r['spread']:.2f} ({r['rounds']})" if r.get("rounds", 1) > 1 else "—"
        lines.append(
            f"{head} {r['parameters'] / 1e6:.1f}M | {r['tokens_per_s']:,.0f} | "
            f"{r['ms_per_step']:.0f} | {peak} | {spread} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "presets", nargs="*", help=f"PRESET[:BxL] (default: {' '.join(DEFAULT_PRESETS)})"
    )
    p.add_argument("--config", type=json.loads, default={}, help="JSON overrides of each preset")
    p.add_argument("--batches", type=parse_batch, nargs="+", default=[(16, 8192)],
                   help="shapes for presets given without one")  # fmt: skip
    p.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=None)
    p.add_argument("--paths", nargs="+", choices=["kernels", "torch"], default=["kernels", "torch"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--text", metavar="DATASET",
                   help="train on windows of this byte-level data set (e.g. pg19mini, from "
                        "$ZOO_DATA_DIR), a new batch each step; default: random bytes")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="runs of every row, taking turns")
    p.add_argument("--together", action="store_true",
                   help="all rows of a checkout in one process, taking turns step by step")  # fmt: skip
    p.add_argument("--compare-with", type=Path, help="another checkout whose rows run beside")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per row")
    p.add_argument("--out", type=Path, help="write the table here as markdown")
    p.add_argument("--rows", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rows:
        print(json.dumps(measure(json.loads(args.rows), args.steps)))
        return []
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    cuda = torch.cuda.is_available()
    precisions = args.precision or (["bf16"] if cuda else ["fp32", "bf16"])
    paths = [q for q in args.paths if q == "kernels" or cuda]
    codes: list[Path | None] = [None] + ([args.compare_with.resolve()] if args.compare_with else [])
    labels = {code: revision(code) for code in codes}
    specs = [parse_preset(s, b) for s in args.presets or DEFAULT_PRESETS for b in args.batches]
    specs = list(dict.fromkeys(specs))  # a preset with its own shape is listed once
    jobs = [
        {
            "preset": name,
            "batch": b,
            "length": n,
            "precision": prec,
            "path": path,
            "config": args.config,
            "text": args.text,
            "code": labels[code],
            "_code": code,
        }  # fmt: skip
        for prec in precisions
        for path in paths
        for name, b, n in specs
        for code in codes
    ]
    from rich.progress import track

    # the processes: one per row, or (--together) one per checkout holding all its rows
    groups = [[i] for i in range(len(jobs))]
    if args.together:
        groups = [[i for i, job in enumerate(jobs) if job["_code"] == code] for code in codes]
    runs: list[list[dict]] = [[] for _ in jobs]
    turns = [group for _ in range(args.rounds) for group in groups]
    for group in track(turns, description="training steps"):
        rows = [{k: v for k, v in jobs[i].items() if k != "_code"} for i in group]
        results = run(rows, args.steps, jobs[group[0]]["_code"], args.timeout)
        for i, result in zip(group, results, strict=True):
            runs[i].append(result)
    rows = [median_round(r) for r in runs]
    command = "python -m benchmarks.train_throughput " + " ".join(argv or sys.argv[1:])
    text = report(rows, command.strip())
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return rows


if __name__ == "__main__":
    main()
