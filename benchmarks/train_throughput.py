"""Training throughput of model presets: tokens per second of whole optimizer steps, side by side.

    python -m benchmarks.train_throughput                 # CPU: dense 256 against the 4,096 presets
    python -m benchmarks.train_throughput sparse_transformer_strided_8k:16x8192 --paths kernels torch
    python -m benchmarks.train_throughput --compare-with /tmp/old   # and the same rows on that code

(from the repository root; the benchmark is not part of the wheel)

A row is a model ``PRESET[:BATCHxLENGTH]`` (the shape defaults to ``--batches``), a precision, a
kernel path and the code it runs. Each step is a forward pass, the byte-level cross-entropy, a
backward pass and an AdamW update (fused on CUDA) on random bytes. Two warm-up steps (Triton
compiles then), then the mean of ``--steps`` timed steps, each row in a fresh process.

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


def measure(row: dict, steps: int) -> dict:
    """Train ``row``'s model for ``steps`` timed steps in this process; its tokens/s and more."""
    import zoo

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(0)
    model = zoo.create_model(row["preset"], **row["config"]).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), 1e-3, fused=cuda)
    x = torch.randint(0, model.config.vocab_size, (row["batch"], row["length"]), device=device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = 0.0
    for i in range(2 + steps):
        if i == 2:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast(device, torch.bfloat16, enabled=row["precision"] == "bf16"):
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
        **row, "parameters": sum(p.numel() for p in model.parameters()),
        "tokens_per_s": row["batch"] * row["length"] / step_s, "ms_per_step": 1e3 * step_s,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
    }  # fmt: skip


def run(row: dict, steps: int, code: Path | None, timeout: float) -> dict:
    """:func:`measure` in a fresh process, on ``code`` (a checkout) or this one."""
    env = dict(os.environ, ZOO_ATTENTION_BACKEND="torch" if row["path"] == "torch" else "auto")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(code) if code else None, str(REPO), os.environ.get("PYTHONPATH")])
    )
    cmd = [sys.executable, "-m", "benchmarks.train_throughput", "--one", json.dumps(row),
           "--steps", str(steps)]  # fmt: skip
    try:
        # cwd: `python -m` puts it first on sys.path, so `zoo` comes from that checkout
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=True, env=env,
            cwd=code or REPO,
        )  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {**row, "error": f"over {timeout:.0f} s"}
    except subprocess.CalledProcessError as e:
        tail = (e.stderr or "").strip().splitlines()[-1:] or ["killed"]
        return {**row, "error": tail[0][:100]}


def revision(code: Path | None) -> str:
    """The git revision of a checkout (this one for ``None``), short, with ``+`` if modified."""
    where = code or REPO
    try:
        rev = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return str(where)
    return rev + ("+" if dirty else "")


def report(rows: list[dict], command: str) -> str:
    """The markdown table, headed by the device and versions."""
    from benchmarks.kernels import environment

    env = {**environment(), "command": command}
    lines = [f"# Training throughput: {env.pop('device')}", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()] + [""]
    lines += [
        "| preset | batch | precision | path | code | parameters | tokens/s | ms/step | peak GiB "
        "| tokens/s ÷ first preset's |",
        "|---|---|---|---|---|---|---|---|---|---|",
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
            lines.append(f"{head} {r['error']} | | | | |")
            continue
        peak = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "—"
        ref = base.get((r["precision"], r["path"], r["code"]))
        ratio = f"{r['tokens_per_s'] / ref:.2f}" if ref else ""
        lines.append(
            f"{head} {r['parameters'] / 1e6:.1f}M | {r['tokens_per_s']:,.0f} | "
            f"{r['ms_per_step']:.0f} | {peak} | {ratio} |"
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
    p.add_argument("--compare-with", type=Path, help="another checkout whose rows run beside")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per row")
    p.add_argument("--out", type=Path, help="write the table here as markdown")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(json.loads(args.one), args.steps)))
        return []
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
            "code": labels[code],
            "_code": code,
        }  # fmt: skip
        for prec in precisions
        for path in paths
        for name, b, n in specs
        for code in codes
    ]
    from rich.progress import track

    rows = []
    for job in track(jobs, description="training steps"):
        code = job.pop("_code")
        rows.append(run(job, args.steps, code, args.timeout))
    command = "python -m benchmarks.train_throughput " + " ".join(argv or sys.argv[1:])
    text = report(rows, command.strip())
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return rows


if __name__ == "__main__":
    main()
