"""Copying at a fixed offset against copying by content (experiments/long_context/log.md §9b).

The copy task of :mod:`zoo.data.long_range_tasks` (a span of random bytes written twice, scored on
the second copy after its cue) trained with a plain fp32 loop (AdamW, no Lightning, no autocast) on
the same 2-layer model as the equal-budget runs. Two settings are trained, and they differ only in
how far apart the copies are:

- ``fixed``: always ``d`` bytes. One attention head that looks ``d - 1`` positions back solves it:
  a positional rule.
- ``varying``: log-uniform in ``[lo, hi]``. Only content can find the first copy. A head must match
  the current byte against the byte *before* each earlier position: an induction head (Olsson et
  al. 2022), which needs a second head to bring that byte forward first.

Printed and written (``induction.md``/``.json``/``.png`` under ``--out``): bits per scored byte,
averaged over each block of 50 steps. Chance is 8 bits (uniform bytes).

    python experiments/long_range/induction.py                 # ~6 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import zoo
from zoo.data import LongRangeTaskDataModule
from zoo.lineage import device_name

SIZE = {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 512, "position": "rotary",
        "dropout": 0.0}  # fmt: skip  # the equal-budget runs' model (equal_budget.py)
BLOCK = 50  # steps per printed point


def train(name: str, lo: int, hi: int, steps: int, *, seq_len: int, preset: str, seed: int,
          lr: float, batch_size: int, span: int = 32, cue: int = 4) -> dict:  # fmt: skip
    """Train ``preset`` on the copy task with distances in ``[lo, hi]``; bits per block of steps."""
    torch.manual_seed(seed)
    model = zoo.create_model(preset, **SIZE, max_seq_len=seq_len)
    data = LongRangeTaskDataModule(task="copy", seq_len=seq_len, n_pairs=1, span=span, cue=cue,
                                   min_distance=lo, max_distance=hi, alphabet="bytes",
                                   batch_size=batch_size, seed=seed)  # fmt: skip
    data.setup("fit")
    batches = iter(data.train_dataloader())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    bits, block, start = [], [], time.perf_counter()
    for step in range(steps):
        x, y = next(batches)
        logits = model(x).logits  # (B, T, 256)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        block.append(loss.item() / math.log(2))
        if len(block) == BLOCK or step == steps - 1:
            bits.append(round(sum(block) / len(block), 3))
            print(f"{name} step {step + 1}: {bits[-1]:.3f} bits per scored byte", flush=True)
            block = []
    return {"name": name, "distances": [lo, hi], "steps": steps, "bits": bits,
            "wall_s": round(time.perf_counter() - start, 1)}  # fmt: skip


def report(runs: list[dict], out: Path, settings: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"Copy task, {settings['seq_len']} random bytes, one span of {settings['span']} (cue "
        f"{settings['cue']}, {settings['span'] - settings['cue']} bytes scored), "
        f"batch {settings['batch_size']}, {settings['preset']} at 2 layers, d = 128, rotary, "
        f"AdamW lr {settings['lr']}, fp32, seed {settings['seed']}; bits per scored byte, mean "
        f"of each {BLOCK} steps (chance 8.00). {settings['hardware']}.",
        "",
        "| run | distance | steps | first 50 | last 50 | best block | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lo, hi = r["distances"]
        span = f"{lo}" if lo == hi else f"{lo}–{hi} (log-uniform)"
        first, last, best = r["bits"][0], r["bits"][-1], min(r["bits"])
        lines.append(f"| {r['name']} | {span} | {r['steps']:,} | {first:.3f} | {last:.3f} | "
                     f"{best:.3f} | {r['wall_s'] / 60:.1f} min |")  # fmt: skip
    (out / "induction.md").write_text("\n".join(lines) + "\n")
    (out / "induction.json").write_text(json.dumps({"settings": settings, "runs": runs}, indent=1))
    _plot(runs, out / "induction.png")
    print("\n".join(lines))


def _plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        lo, hi = r["distances"]
        steps = [min((i + 1) * BLOCK, r["steps"]) for i in range(len(r["bits"]))]
        ax.plot(steps, r["bits"], marker=".", label=f"{r['name']} (d = {lo}–{hi})")
    ax.axhline(8.0, color="grey", lw=0.8, ls="--", label="chance")
    ax.set_xlabel("training step")
    ax.set_ylabel("bits per scored byte")
    ax.set_ylim(0, 8.5)
    ax.set_title("Copying at a fixed offset is learned; copying by content is not")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixed", type=int, default=64, help="the fixed run's distance")
    parser.add_argument("--varying", type=int, nargs=2, default=[32, 224], metavar=("LO", "HI"))
    parser.add_argument("--steps-fixed", type=int, default=400)
    parser.add_argument("--steps-varying", type=int, default=2500)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--span", type=int, default=32, help="bytes per span")
    parser.add_argument("--cue", type=int, default=4, help="bytes of the second copy not scored")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--preset", default="transformer_lm_small_rotary")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("experiments/bench/induction"))
    ns = parser.parse_args()
    settings = {"seq_len": ns.seq_len, "span": ns.span, "cue": ns.cue,
                "batch_size": ns.batch_size, "lr": ns.lr,
                "preset": ns.preset, "seed": ns.seed,
                "hardware": device_name("cpu")}  # fmt: skip
    common = {
        k: settings[k] for k in ("seq_len", "span", "cue", "preset", "seed", "lr", "batch_size")
    }
    runs = [
        train("fixed", ns.fixed, ns.fixed, ns.steps_fixed, **common),
        train("varying", *ns.varying, ns.steps_varying, **common),
    ]
    report(runs, ns.out, settings)


if __name__ == "__main__":
    main()
