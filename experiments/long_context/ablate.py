"""Controlled runs for the long-context issue (17): one change at a time, or peers at equal bytes.

Two suites of ``zoo fit`` runs; every run of a suite trains on the same bytes (``steps x 8,192``
bytes, the same random windows for the same seed) and is scored on the same first 102,400 bytes of
the valid split:

- ``plateau``: the published Sparse recipe (``--recipe``) with ONE change per row (section 1 of
  experiments/long_context/log.md);
- ``equal_budget``: the small-scale analogue of the Sparse paper's Table 2 and the Routing paper's
  Table 1: dense at 256 and local, strided, fixed, random-, top-w- and causal-routing attention at
  4,096, every one with rotary positions (the plateau fix). ``--test`` adds the whole test split,
  scored once by position (``zoo evaluate RUN --split test --by-position``), whose overall mean is
  the test bits/byte, and whose buckets show whether the model uses bytes past position 256.

Runs go ``--jobs`` at a time, one thread each, so they share a 2-core machine; their tokens/s are
comparable within one table only (not with single-run throughput).

    python experiments/long_context/ablate.py --out docs/bench/long_context_ablation.md --jobs 2
    python experiments/long_context/ablate.py --suite equal_budget --steps 480 --test \\
        --only dense256 local strided fixed random topw causal local:1 random:1 causal:1
    python experiments/long_context/ablate.py --suite equal_budget --report   # the table of finished runs

``--only NAME:SEED`` runs NAME with another seed (default ``--seed``). Each run writes
``result.json`` beside its logs under ``--runs``; ``--report`` rebuilds the table from them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import yaml

RECIPE = "experiments/sparse_transformer/pg19mini_strided_long.yaml"
ROTARY = ["--model.init_args.model_config", json.dumps({"position": "rotary"})]
DENSE256 = [  # 256 x 32 windows = the same 8,192 bytes per step as 4,096 x 2
    "--model.init_args.model", "transformer_lm_small",
    "--data.init_args.batch_size", "32",
    "--data.init_args.eval_batch_size", "16",  # 25 batches x 16 x 256 = the same 102,400 bytes
]  # fmt: skip


WINDOWS_1024 = [  # 1,024 x 8 windows: the same 8,192 bytes per step; the model keeps context 4,096
    "--data.init_args.seq_len", "1024",
    "--data.init_args.batch_size", "8",
    "--data.init_args.eval_batch_size", "4",  # 25 batches x 4 x 1,024 = the same 102,400 bytes
]  # fmt: skip


# Roy et al. (TACL 2021) on PG-19: 2 routing heads, in the last 2 layers only (rotary positions here)
PG19_LAYOUT = {"position": "rotary", "n_local_heads": 6, "n_routing_layers": 2}


class Variant(NamedTuple):
    what: str
    extra: list[str]  # `zoo fit` arguments; "{half}" / "{three_quarters}": that share of the steps
    recipe: str | None = None  # None: --recipe


PLATEAU: dict[str, Variant] = {
    "baseline": Variant("published recipe: factorized learned positions, 4,096 x 2, lr 2e-3", []),
    "lr1e-3": Variant("peak lr 1e-3 instead of 2e-3", ["--model.init_args.lr", "1e-3"]),
    "warmup_len": Variant(
        "sequence-length warmup 256 -> 4,096 over the first half (same bytes per step)",
        ["--data.init_args.seq_len_warmup_steps", "{half}"],
    ),
    "rotary": Variant("rotary positions instead of factorized learned ones", ROTARY),
    "rotary+warmup_len": Variant(
        "rotary positions and sequence-length warmup",
        [*ROTARY, "--data.init_args.seq_len_warmup_steps", "{half}"],
    ),
    "dense256": Variant(
        "reference: dense transformer_lm_small at 256 x 32 (same bytes per step)", DENSE256
    ),
}

_RT = "experiments/routing_transformer/"
EQUAL_BUDGET: dict[str, Variant] = {
    "dense256": Variant(
        "transformer_lm_small: dense causal, context 256, 256 x 32 windows per step",
        [*ROTARY, *DENSE256],
        "recipes/transformer_lm/pg19mini.yaml",
    ),
    "local": Variant(
        "routing_transformer_small_local: all 8 heads local (window 128)", ROTARY,
        _RT + "pg19mini_local.yaml",
    ),
    "strided": Variant(
        "sparse_transformer_small_strided: strided, stride 64 (A1/A2 heads)", ROTARY,
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "fixed": Variant(
        "sparse_transformer_small: fixed, stride 128, c 32", ROTARY,
        "recipes/sparse_transformer/pg19mini.yaml",
    ),
    "random": Variant(
        "routing_transformer_small_random: 4 local + 4 heads routed at random (k 32)", ROTARY,
        _RT + "pg19mini_random.yaml",
    ),
    "topw": Variant(
        "routing_transformer_small: 4 local + 4 routing heads, top-w (Algorithm 1, k 32)", ROTARY,
        "recipes/routing_transformer/pg19mini.yaml",
    ),
    "causal": Variant(
        "routing_transformer_small_causal: 4 local + 4 routing heads, causal routing (k 32)",
        ROTARY, _RT + "pg19mini_causal.yaml",
    ),
    "local_256x32": Variant(
        "routing_transformer_small_local at context 256, 256 x 32 windows per step: the same "
        "model and bytes as local, only the window count differs",
        ["--model.init_args.model_config", json.dumps({"position": "rotary", "max_seq_len": 256}),
         "--data.init_args.batch_size", "32", "--data.init_args.eval_batch_size", "16"],
        _RT + "pg19mini_local.yaml",
    ),
    "local_staged": Variant(
        "the local-only model, 3/4 of the steps at 256 x 32 windows, then 4,096 x 2 "
        "(two-stage sequence-length warmup, same bytes per step)",
        [*ROTARY, "--data.init_args.seq_len_warmup_steps", "{three_quarters}",
         "--data.init_args.seq_len_warmup_doubling", "false"],
        _RT + "pg19mini_local.yaml",
    ),
    "causal_staged": Variant(
        "causal routing, 3/4 of the steps at 256 x 32 windows, then 4,096 x 2",
        [*ROTARY, "--data.init_args.seq_len_warmup_steps", "{three_quarters}",
         "--data.init_args.seq_len_warmup_doubling", "false"],
        _RT + "pg19mini_causal.yaml",
    ),
    "causal_1024x8": Variant(
        "causal routing trained on 1,024 x 8 windows per step (same bytes), run at 4,096",
        [*ROTARY, *WINDOWS_1024],
        _RT + "pg19mini_causal.yaml",
    ),
    "strided_1024x8": Variant(
        "strided, stride 64, trained on 1,024 x 8 windows per step (same bytes), run at 4,096",
        [*ROTARY, *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "strided128_1024x8": Variant(
        "strided, stride 128 (A1 heads: the last 128 bytes; A2 heads: every 128th), 1,024 x 8 "
        "windows per step, run at 4,096",
        ["--model.init_args.model_config", json.dumps({"position": "rotary", "stride": 128}),
         *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "strided32_1024x8": Variant(
        "strided, stride 32 (A1 heads: the last 32 bytes; A2 heads: every 32nd), 1,024 x 8 "
        "windows per step, run at 4,096",
        ["--model.init_args.model_config", json.dumps({"position": "rotary", "stride": 32}),
         *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "strided_interleaved_1024x8": Variant(
        "strided, stride 64, interleaved (Eq. 6: layers 0 and 2 attend A1, layers 1 and 3 A2, "
        "every head), 1,024 x 8 windows per step, run at 4,096",
        ["--model.init_args.model_config",
         json.dumps({"position": "rotary", "integration": "interleaved"}), *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "sparse_local_1024x8": Variant(
        "the Sparse Transformer with every head local (window 128, no columns), 1,024 x 8 "
        "windows per step, run at 4,096",
        ["--model.init_args.model_config",
         json.dumps({"position": "rotary", "pattern": "local", "window": 128}), *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "sparse_local_heads8_1024x8": Variant(
        "the Sparse Transformer with every head local, 8 heads of 32 (the routing family's) "
        "instead of 4 of 64, 1,024 x 8 windows per step, run at 4,096",
        ["--model.init_args.model_config",
         json.dumps({"position": "rotary", "pattern": "local", "window": 128, "n_heads": 8}),
         *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "sparse_local_gpt2init_1024x8": Variant(
        "the Sparse Transformer with every head local, initialised as the Transformer family "
        "(N(0, 0.02)) instead of the paper's N(0, 0.125/sqrt(fan_in)), 1,024 x 8 windows per "
        "step, run at 4,096",
        ["--model.init_args.model_config",
         json.dumps({"position": "rotary", "pattern": "local", "window": 128,
                     "init_scheme": "gpt2"}), *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "strided128_merged_1024x8": Variant(
        "strided, stride 128, merged (Eq. 7: every head attends A1 u A2), 1,024 x 8 windows "
        "per step, run at 4,096",
        ["--model.init_args.model_config",
         json.dumps({"position": "rotary", "stride": 128, "integration": "merged"}),
         *WINDOWS_1024],
        "experiments/sparse_transformer/pg19mini_strided.yaml",
    ),
    "causal_pg19_1024x8": Variant(
        "the Routing paper's PG-19 layout: 2 causal routing heads (6 local) in the top 2 layers "
        "only, layers 0-1 all local; 1,024 x 8 windows per step, run at 4,096",
        ["--model.init_args.model_config", json.dumps(PG19_LAYOUT), *WINDOWS_1024],
        _RT + "pg19mini_causal.yaml",
    ),
    "random_pg19_1024x8": Variant(
        "the same layout with the 2 heads routed at random (the paper's ablation)",
        ["--model.init_args.model_config", json.dumps(PG19_LAYOUT), *WINDOWS_1024],
        _RT + "pg19mini_random.yaml",
    ),
    "causal_pg19_scale1_1024x8": Variant(
        "causal_pg19_1024x8 with the routing heads' scores q.k instead of q.k / sqrt(d_head) "
        "(Algorithm 1 line 22 as written: A = Q'K'^T on LayerNorm'd vectors)",
        ["--model.init_args.model_config",
         json.dumps(PG19_LAYOUT | {"routing_score_scale": 1.0}), *WINDOWS_1024],
        _RT + "pg19mini_causal.yaml",
    ),
    "random_pg19_scale1_1024x8": Variant(
        "random_pg19_1024x8 with the same scores q.k",
        ["--model.init_args.model_config",
         json.dumps(PG19_LAYOUT | {"routing_score_scale": 1.0}), *WINDOWS_1024],
        _RT + "pg19mini_random.yaml",
    ),
    "local_1024x8": Variant(
        "the local-only model trained on 1,024 x 8 windows per step (same bytes), run at 4,096",
        [*ROTARY, *WINDOWS_1024],
        _RT + "pg19mini_local.yaml",
    ),
    "causal_w256": Variant(
        "causal routing with local window 256 instead of 128",
        ["--model.init_args.model_config", json.dumps({"position": "rotary", "window": 256})],
        _RT + "pg19mini_causal.yaml",
    ),
}  # fmt: skip
SUITES = {"plateau": PLATEAU, "equal_budget": EQUAL_BUDGET}


def run(job: tuple[str, int], args: argparse.Namespace) -> dict:
    """``zoo fit`` of one variant (and with ``--test`` the test split by position); its result."""
    name, seed = job
    variant = SUITES[args.suite][name]
    root = Path(args.runs) / (name if seed == args.seed else f"{name}_s{seed}")
    extra = [
        a.replace("{half}", str(args.steps // 2)).replace(
            "{three_quarters}", str(args.steps * 3 // 4)
        )
        for a in variant.extra
    ]
    root.mkdir(parents=True, exist_ok=True)
    recipe = root / "recipe.yaml"  # the recipe with every run path moved under root
    source = variant.recipe or args.recipe
    text = Path(source).read_text()
    old_root = yaml.safe_load(text)["trainer"]["default_root_dir"]
    recipe.write_text(text.replace(old_root, str(root)))
    zoo = str(Path(sys.executable).parent / "zoo")
    cmd = [
        zoo, "fit", "--config", str(recipe),
        "--seed_everything", str(seed),
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
    result = {
        "name": name, "seed": seed, "what": variant.what, "recipe": source, "extra": extra,
        "steps": args.steps, "train_bytes": args.steps * 8192,
        "val_bpb": val[-1], "train_bpb": train[-1] if train else None, "wall_s": round(wall, 1),
    }  # fmt: skip
    if args.test:
        out_dir = root / "by_position_test"
        cmd = [zoo, "evaluate", str(root), "--split", "test", "--by-position",
               "--bucket", "64", "--out-dir", str(out_dir)]  # fmt: skip
        if args.test_windows:
            cmd += ["--windows", str(args.test_windows)]
        with open(root.with_suffix(".eval.log"), "w") as log:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
        profile = json.loads((out_dir / "by_position.json").read_text())
        result["test_bpb"] = profile["bits_per_byte"]
        result["test_windows"] = profile["windows"]
        result["test_by_position"] = dict(
            zip(map(str, profile["edges"][:-1]), profile["bits"], strict=True)
        )
        result["test_first_256"], result["test_past_256"] = _split_at(profile, 256)
    (root / "result.json").write_text(json.dumps(result, indent=1))
    return result


def _split_at(profile: dict, position: int) -> tuple[float, float | None]:
    """Mean bits/byte of the bytes predicted before ``position`` and from it on (None: none)."""
    parts = [[0.0, 0], [0.0, 0]]
    for lo, bits, count in zip(
        profile["edges"][:-1], profile["bits"], profile["counts"], strict=True
    ):
        if count:
            part = parts[lo >= position]
            part[0] += bits * count
            part[1] += count
    return tuple(round(s / c, 4) if c else None for s, c in parts)  # type: ignore[return-value]


def table(results: list[dict], suite: str) -> str:
    """A markdown table, one row per run, then (when a variant ran with several seeds) its mean."""
    steps = sorted({r["steps"] for r in results})
    lines = [
        f"suite `{suite}`, {'/'.join(map(str, steps))} steps x 8,192 bytes; valid = the first "
        "102,400 bytes of the valid split; test = the whole test split (non-overlapping windows of "
        "each model's context), fp32; tokens/s = training bytes / wall time with the runs sharing "
        "the machine",
        "",
        "| run | seed | change | train bits/byte (last log) | valid bits/byte | test bits/byte "
        "| test, positions 0-255 | test, positions 256+ | wall s | tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    fmt = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    for r in results:
        lines.append(
            f"| {r['name']} | {r.get('seed', '')} | {r['what']} | {fmt(r['train_bpb'])} "
            f"| {r['val_bpb']:.3f} | {fmt(r.get('test_bpb'))} | {fmt(r.get('test_first_256'))} "
            f"| {fmt(r.get('test_past_256'))} | {r['wall_s']:.0f} "
            f"| {r.get('train_bytes', 0) / r['wall_s']:.0f} |"
        )
    by_name: dict[str, list[dict]] = {}
    for r in results:
        by_name.setdefault(r["name"], []).append(r)
    multi = {n: rs for n, rs in by_name.items() if len(rs) > 1}
    if multi:
        lines += ["", "| run | seeds | valid mean ± half-range | test mean ± half-range |",
                  "|---|---|---|---|"]  # fmt: skip
        for n, rs in multi.items():
            cells = []
            for key in ("val_bpb", "test_bpb"):
                vals = [r[key] for r in rs if r.get(key) is not None]
                cells.append(
                    f"{statistics.mean(vals):.3f} ± {(max(vals) - min(vals)) / 2:.3f}"
                    if vals
                    else "—"
                )
            lines.append(f"| {n} | {len(rs)} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def _job(spec: str, default_seed: int, variants: dict) -> tuple[str, int]:
    name, _, seed = spec.partition(":")
    if name not in variants:
        raise SystemExit(f"unknown run {name!r}: choose from {', '.join(variants)}")
    return name, int(seed) if seed else default_seed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suite", choices=list(SUITES), default="plateau")
    p.add_argument("--recipe", default=RECIPE, help="the plateau suite's recipe")
    p.add_argument("--only", nargs="+", default=None, help="NAME or NAME:SEED (default: all)")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--test", action="store_true", help="also score the test split by position")
    p.add_argument("--test-windows", type=int, default=None, help="only the first test windows")
    p.add_argument("--runs", default=None, help="default: runs/long_context_<suite>")
    p.add_argument("--report", action="store_true", help="only tabulate finished runs")
    p.add_argument("--out", default=None, help="append the table to this markdown file")
    args = p.parse_args()
    variants = SUITES[args.suite]
    args.runs = args.runs or f"runs/long_context_{args.suite}"
    if args.report:
        results = [json.loads(f.read_text()) for f in sorted(Path(args.runs).glob("*/result.json"))]
        order = list(variants)
        results.sort(key=lambda r: (order.index(r["name"]), r.get("seed", 0)))
    else:
        jobs = [_job(s, args.seed, variants) for s in (args.only or variants)]
        Path(args.runs).mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda j: run(j, args), jobs))
    text = table(results, args.suite)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n\n")


if __name__ == "__main__":
    main()
