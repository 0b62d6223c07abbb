"""Controlled short runs for the long-context training plateau (issue 17): one change at a time.

Every run trains the same model on the same bytes (same seed, same windows: ``steps x batch x
context``) and is scored on the same first validation windows. Runs go ``--jobs`` at a time, one
thread each, so they can share a 2-core machine; their tokens/s are then not comparable with
single-run throughput (use the wall times only to compare runs of one table).

    python recipes/long_context/ablate.py --out docs/bench/long_context_ablation.md --jobs 2
    python recipes/long_context/ablate.py --only baseline rotary --steps 100   # a subset, shorter

Each row is ``zoo fit`` of ``--recipe`` with the row's overrides; logs stay under ``--runs``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

RECIPE = "recipes/sparse_transformer/pg19mini_strided_long.yaml"

# name -> (what changes, extra `zoo fit` arguments); "baseline" is the recipe as published.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "baseline": ("published recipe: factorized learned positions, 4,096 x 2, lr 2e-3", []),
    "lr1e-3": ("peak lr 1e-3 instead of 2e-3", ["--model.init_args.lr", "1e-3"]),
    "warmup_len": (
        "sequence-length warmup 256 -> 4,096 over the first half (same bytes per step)",
        ["--data.init_args.seq_len_warmup_steps", "{half}"],
    ),
    "rotary": (
        "rotary positions instead of factorized learned ones",
        ["--model.init_args.model_config", json.dumps({"position": "rotary"})],
    ),
    "rotary+warmup_len": (
        "rotary positions and sequence-length warmup",
        [
            "--model.init_args.model_config",
            json.dumps({"position": "rotary"}),
            "--data.init_args.seq_len_warmup_steps",
            "{half}",
        ],
    ),
    "dense256": (
        "reference: dense transformer_lm_small at 256 x 32 (same bytes per step)",
        [
            "--model.init_args.model",
            "transformer_lm_small",
            "--data.init_args.batch_size",
            "32",
            "--data.init_args.eval_batch_size",  # 25 batches x 16 x 256 = the same 102,400 bytes
            "16",
        ],
    ),
}


def run(name: str, args: argparse.Namespace) -> dict:
    """``zoo fit`` of one variant; returns its final validation bits/byte and wall time."""
    what, extra = VARIANTS[name]
    root = Path(args.runs) / name
    extra = [a.replace("{half}", str(args.steps // 2)) for a in extra]
    root.mkdir(parents=True, exist_ok=True)
    recipe = root / "recipe.yaml"  # the recipe with every run path moved under root
    text = Path(args.recipe).read_text()
    old_root = yaml.safe_load(text)["trainer"]["default_root_dir"]
    recipe.write_text(text.replace(old_root, str(root)))
    cmd = [
        str(Path(sys.executable).parent / "zoo"), "fit", "--config", str(recipe),
        "--seed_everything", str(args.seed),
        "--trainer.max_steps", str(args.steps),
        "--trainer.val_check_interval", str(args.steps),
        "--trainer.limit_val_batches", "25",
        "--trainer.enable_progress_bar", "false",
        *extra,
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    start = time.perf_counter()
    with open(root.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    wall = time.perf_counter() - start
    rows = list(csv.DictReader(open(sorted(root.glob("logs/version_*/metrics.csv"))[-1])))
    val = [float(r["val/bpb"]) for r in rows if r.get("val/bpb")]
    train = [float(r["train/bpb"]) for r in rows if r.get("train/bpb")]
    return {"name": name, "what": what, "val_bpb": val[-1], "train_bpb": train[-1], "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--recipe", default=RECIPE)
    p.add_argument("--only", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--runs", default="runs/long_context_ablation")
    p.add_argument("--out", default=None, help="append the table to this markdown file")
    args = p.parse_args()
    Path(args.runs).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda n: run(n, args), args.only))
    lines = [
        f"`{args.recipe}`, {args.steps} steps, seed {args.seed}; validation = the first 102,400 "
        "bytes of the valid split",
        "",
        "| run | change | train bits/byte (last log) | valid bits/byte | wall s |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['what']} | {r['train_bpb']:.3f} | {r['val_bpb']:.3f} "
            f"| {r['wall_s']:.0f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write(table + "\n\n")


if __name__ == "__main__":
    main()
