"""Equal-budget runs on multi-query associative recall: which attention retrieves from how far back
(issue 53, item 3; experiments/long_context/log.md §9).

Every run is ``zoo fit`` on a base config beside this file (``--base``: ``mqar_1024.yaml``, or
``copy_1024.yaml`` for the copy task): the same model size (2 layers,
d = 128, 4 heads, d_ff = 512, context 1,024, rotary positions), the same training examples (the
same seed: steps x 8 sequences of 1,024 bytes), the same 256 test sequences; only the attention
differs (``RUNS``), and a row whose attention brings parameters of its own (NSA's compressors)
takes them back in ``d_ff``, so that every row is within 5 % of the others.
After each run the best checkpoint (lowest ``val/bpb``) is scored by
:func:`zoo.data.task_accuracy_by_distance` on the test set. Each run writes ``result.json`` in its
folder under ``--runs``; ``--report`` rebuilds the table (markdown, JSON, PNG under ``--out``) from
the finished runs.

    python experiments/long_range/equal_budget.py                      # every run, seed 0
    python experiments/long_range/equal_budget.py --only routing_causal local_128 --seed 1
    python experiments/long_range/equal_budget.py --report

Runs go one after another with every core (tokens/s are those of one run on the machine; a run
that shared the machine says so in its ``note``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
BASE = HERE / "mqar_1024.yaml"
SIZE = {
    "d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 512, "max_seq_len": 1024,
    "position": "rotary",  # learned positions did not leave chance in 950 steps (log.md §9)
}  # fmt: skip
# name: (preset, overrides, what the attention can reach)
RUNS = {
    "dense_1024": (
        "routing_transformer_small_dense", {"n_local_heads": 4, "window": 1024},
        "dense causal attention over the whole 1,024 bytes: the upper bound",
    ),
    "routing_causal": (
        "routing_transformer_small_causal", {"n_local_heads": 2},
        "2 local heads (window 128) + 2 causal content-routing heads (k = 32) per layer",
    ),
    # shifted keys (log.md §11e): a routing head's key at s is its query at s - 1
    "routing_causal_shift": (
        "routing_transformer_small_causal", {"n_local_heads": 2, "shift_keys": True},
        "routing_causal with shifted keys (key at s = query at s - 1)",
    ),
    "routing_causal_shift_top1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "shift_keys": True, "n_routing_layers": 1},
        "routing_causal_shift with routing heads in layer 1 only (layer 0: 4 local heads)",
    ),
    "local_128": (
        "routing_transformer_small_local", {"n_local_heads": 4},
        "4 local heads (sliding window 128) per layer: reach 128 per layer",
    ),
    "strided": (
        "sparse_transformer_small_strided", {},
        "Sparse Transformer strided pattern, stride 64 (A1 the last 64, A2 every 64th)",
    ),
    "dense_256": (
        "routing_transformer_small_local", {"n_local_heads": 4, "window": 256},
        "dense causal attention cut to the last 256 positions (sliding window): the short control",
    ),
    "routing_random": (
        "routing_transformer_small_random", {"n_local_heads": 2},
        "2 local heads (window 128) + 2 heads routed to random clusters: the paper's ablation",
    ),
    "routing_topw": (
        "routing_transformer_small", {"n_local_heads": 2},
        "2 local heads (window 128) + 2 top-w content-routing heads (reads ahead: not causal)",
    ),
    # block selection (issue 79): MoBA's own block and its best earlier block, 256 keys a query;
    # NSA's window of 128, compressed tokens of 8 at stride 4, and 3 blocks of 64 (the first, the
    # own and one chosen). NSA's compressors add 41K parameters, which d_ff 432 takes back
    "moba_128": (
        "transformer_lm_small_moba", {"attention": {"name": "moba", "block_size": 128, "top_k": 2}},
        "MoBA, blocks of 128, top-2 (the own block and the best earlier one by mean key)",
    ),
    "nsa_128": (
        "transformer_lm_small_nsa",
        {"attention": {"name": "nsa", "compress_block": 8, "compress_stride": 4,
                       "select_block": 64, "n_selected": 3, "n_initial": 1, "n_local": 1,
                       "window": 128, "shared_kv": True}, "d_ff": 432},
        "NSA: window 128, compressed 8/4, 3 selected blocks of 64 (first, own, one chosen)",
    ),
    "fixed": (
        "sparse_transformer_small", {},
        "Sparse Transformer fixed pattern, stride 128, c = 32, merged heads",
    ),
}  # fmt: skip
# the copy task at 256 bytes (copy_256.yaml): local windows of 32, below every distance (96-160)
RUNS_256 = {
    "dense_256": (
        "routing_transformer_small_dense", {"n_local_heads": 4, "window": 256},
        "dense causal attention over the whole 256 bytes: the upper bound",
    ),
    "local_32": (
        "routing_transformer_small_local", {"n_local_heads": 4, "window": 32},
        "4 local heads (sliding window 32) per layer: nothing of the first copy in one hop",
    ),
    "routing_causal_32": (
        "routing_transformer_small_causal", {"n_local_heads": 2, "window": 32},
        "2 local heads (window 32) + 2 causal content-routing heads (k = 32) per layer",
    ),
    "routing_random_32": (
        "routing_transformer_small_random", {"n_local_heads": 2, "window": 32},
        "2 local heads (window 32) + 2 heads routed to random clusters (k = 32)",
    ),
    # does content routing find the first copy when a query shares its cluster with more keys?
    "routing_causal_32_k8": (
        "routing_transformer_small_causal", {"n_local_heads": 2, "window": 32, "n_clusters": 8},
        "as routing_causal_32 with k = 8 clusters (about 32 members each, all attended)",
    ),
    "routing_causal_32_k4": (
        "routing_transformer_small_causal", {"n_local_heads": 2, "window": 32, "n_clusters": 4},
        "as routing_causal_32 with k = 4 clusters (about 64 members each, all attended)",
    ),
    # k = 1 and a window over the whole sequence: the routing heads become dense causal attention
    # with their own parametrisation (shared, LayerNorm'd queries and keys, no positions)
    "routing_causal_32_k1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "n_clusters": 1, "causal_window": 256},
        "as routing_causal_32 with one cluster attended whole: dense content-only heads",
    ),
    "routing_causal_32_k1_scale1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "n_clusters": 1, "causal_window": 256,
         "routing_score_scale": 1.0},
        "as routing_causal_32_k1 with scores q·k unscaled (Algorithm 1 line 22; range [-D, D])",
    ),
    # routing heads that attend with their raw projections (no LayerNorm on q = k)
    "routing_causal_32_k1_raw": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "n_clusters": 1, "causal_window": 256,
         "routing_layer_norm": False},
        "as routing_causal_32_k1 without the LayerNorm on the routing heads' queries = keys",
    ),
    "routing_causal_32_raw": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "routing_layer_norm": False},
        "as routing_causal_32 (k = 32) without the LayerNorm on the routing heads' queries = keys",
    ),
    # top-w routing with k = 1 selects every token (w = T), so nothing leaks: dense content-only
    # heads again, now with keys projected apart from the queries or not
    "routing_topw_32_k1": (
        "routing_transformer_small", {"n_local_heads": 2, "window": 32, "n_clusters": 1},
        "top-w routing with one cluster of every token: dense content-only heads, shared q = k",
    ),
    "routing_topw_32_k1_qk": (
        "routing_transformer_small",
        {"n_local_heads": 2, "window": 32, "n_clusters": 1, "shared_qk": False},
        "as routing_topw_32_k1 with keys projected apart from the queries",
    ),
    # top-w routing (the published models' mode); keys apart from queries only works there
    "routing_topw_32": (
        "routing_transformer_small", {"n_local_heads": 2, "window": 32},
        "2 local heads (window 32) + 2 top-w routing heads (k = 32, shared queries and keys)",
    ),
    "routing_topw_32_qk": (
        "routing_transformer_small", {"n_local_heads": 2, "window": 32, "shared_qk": False},
        "as routing_topw_32 with keys projected apart from the queries",
    ),
    # shifted keys (shift_keys): a routing head's key at s is its query at s - 1, so a query
    # and the key it should copy from are alike, and shared clusters hold them together
    "routing_causal_32_shift": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "shift_keys": True},
        "as routing_causal_32 (k = 32) with shifted keys: key at s = query at s - 1",
    ),
    "routing_causal_32_shift_scale1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "shift_keys": True, "routing_score_scale": 1.0},
        "as routing_causal_32_shift with scores q·k unscaled (Algorithm 1 line 22)",
    ),
    "routing_causal_32_shift_cw32": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "shift_keys": True, "causal_window": 32},
        "as routing_causal_32_shift with the last 32 cluster members attended (not 256 / k = 8)",
    ),
    "routing_causal_32_shift_cw32_scale1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "shift_keys": True, "causal_window": 32,
         "routing_score_scale": 1.0},
        "as routing_causal_32_shift_cw32 with scores q·k unscaled (top2 v3's stage 3 setting)",
    ),
    # layer 0 all local: the routing heads (layer 1 only) match queries that carry the bytes
    # before them, where layer 0's routing heads match a byte alone (log.md §11e)
    "routing_causal_32_shift_cw32_top1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "shift_keys": True, "causal_window": 32,
         "n_routing_layers": 1},
        "as routing_causal_32_shift_cw32 with routing heads in layer 1 only (layer 0: 4 local)",
    ),
    "routing_causal_32_shift_cw32_scale1_top1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "shift_keys": True, "causal_window": 32,
         "routing_score_scale": 1.0, "n_routing_layers": 1},
        "as routing_causal_32_shift_cw32_scale1 with routing heads in layer 1 only",
    ),
    "routing_causal_32_k8_shift_top1": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "n_clusters": 8, "shift_keys": True,
         "n_routing_layers": 1},
        "as routing_causal_32_k8_shift with routing heads in layer 1 only (layer 0: 4 local)",
    ),
    "routing_causal_32_k8_shift": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "n_clusters": 8, "shift_keys": True},
        "as routing_causal_32_shift with k = 8 clusters (the last 256 / 8 = 32 members attended)",
    ),
    # the Sparse Transformer's patterns with stride 32: one step reaches the last 32 positions
    # (A1) or every 32nd (A2), so content copy only at d = 0 or 1 (mod 32) (log.md §12a)
    "moba_32": (
        "transformer_lm_small_moba", {"attention": {"name": "moba", "block_size": 32, "top_k": 2}},
        "MoBA, blocks of 32, top-2 (the own block and the best earlier one by mean key)",
    ),
    "nsa_32": (
        "transformer_lm_small_nsa",
        {"attention": {"name": "nsa", "compress_block": 8, "compress_stride": 4,
                       "select_block": 32, "n_selected": 2, "n_initial": 0, "n_local": 1,
                       "window": 32, "shared_kv": True}, "d_ff": 432},
        "NSA: window 32, compressed 8/4, 2 selected blocks of 32 (own, one chosen)",
    ),
    "strided_32": (
        "sparse_transformer_small_strided", {"stride": 32},
        "Sparse Transformer strided pattern, stride 32 (A1 the last 32, A2 every 32nd)",
    ),
    "fixed_32": (
        "sparse_transformer_small", {"stride": 32, "c": 8},
        "Sparse Transformer fixed pattern, stride 32, c = 8, merged heads",
    ),
    "routing_causal_32_k1_shift": (
        "routing_transformer_small_causal",
        {"n_local_heads": 2, "window": 32, "n_clusters": 1, "causal_window": 256,
         "shift_keys": True},
        "as routing_causal_32_k1 (dense content-only heads) with shifted keys",
    ),
}  # fmt: skip
# base config -> its runs (default: RUNS)
TABLES = {"copy_256.yaml": RUNS_256, "copy_256_lattice32.yaml": RUNS_256}


def runs_of(base: Path) -> dict:
    """The runs of a base config: :data:`TABLES`'s entry for its file name, else :data:`RUNS`."""
    return TABLES.get(Path(base).name, RUNS)


def size_of(base: Path) -> dict:
    """:data:`SIZE` at the base config's sequence length."""
    seq_len = yaml.safe_load(Path(base).read_text())["data"]["init_args"]["seq_len"]
    return {**SIZE, "max_seq_len": seq_len}


TASKS = {  # the base config's task, in the report's words
    "mqar": ("the value after each query", "from its pair", "test queries"),
    "copy": ("the copied bytes after each cue", "between the copies", "test spans"),
}


def _train(name: str, seed: int, steps: int, runs: Path, note: str, base: Path = BASE) -> dict:
    table, size = runs_of(base), size_of(base)
    preset, overrides, reach = table[name]
    folder = runs / f"{name}_s{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(base.read_text())
    config["seed_everything"] = seed
    config["trainer"]["max_steps"] = steps
    config["trainer"]["val_check_interval"] = min(steps, config["trainer"]["val_check_interval"])
    config["trainer"]["default_root_dir"] = str(folder)
    config["trainer"]["logger"] = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(folder), "name": "logs"},
    }
    config["trainer"]["callbacks"] = [
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(folder / "checkpoints"), "filename": "best",
                          "monitor": "val/bpb", "mode": "min", "save_last": True,
                          "enable_version_counter": False},
        }
    ]  # fmt: skip
    config["model"]["init_args"]["model"] = preset
    config["model"]["init_args"]["model_config"] = {**size, **overrides}
    config["data"]["init_args"]["seed"] = seed
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    start = time.perf_counter()
    with open(folder / "fit.log", "w") as log:
        rc = subprocess.run(
            [str(Path(sys.executable).with_name("zoo")), "fit", "--config", str(folder / "config.yaml")],
            stdout=log, stderr=subprocess.STDOUT, check=False,
        ).returncode  # fmt: skip
    wall = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"{name} (seed {seed}): zoo fit exited {rc}; see {folder / 'fit.log'}")
    return _score(name, seed, steps, folder, wall, reach, note, preset, {**size, **overrides})


def _score(name, seed, steps, folder, wall, reach, note, preset, model_config) -> dict:
    import torch

    from zoo.data import LongRangeTaskDataModule, task_accuracy_by_distance
    from zoo.tasks import CausalLM

    ckpt = folder / "checkpoints" / "best.ckpt"
    task = CausalLM.load_from_checkpoint(ckpt, map_location="cpu")
    data = LongRangeTaskDataModule.load_from_checkpoint(ckpt)
    acc = task_accuracy_by_distance(task.model, data, "test")
    best = torch.load(ckpt, map_location="cpu", weights_only=True)
    callback = next(v for k, v in best["callbacks"].items() if "ModelCheckpoint" in k)
    tokens = steps * data.batch_size * acc.seq_len
    result = {
        "task": {
            k: data.hparams[k]
            for k in (
                "task",
                "seq_len",
                "n_pairs",
                "key_len",
                "value_len",
                "span",
                "cue",
                "min_distance",
                "distance_multiple",
            )
        },
        "name": name,
        "seed": seed,
        "reach": reach,
        "preset": preset,
        "model_config": model_config,
        "parameters": sum(p.numel() for p in task.model.parameters()),
        "steps": steps,
        "tokens": tokens,
        "wall_s": round(wall, 1),
        "tokens_per_s": round(tokens / wall, 1),
        "best_val_bpb": round(float(callback["best_model_score"]), 4),
        "best_step": best["global_step"],
        "causal": acc.causal,
        "chance": acc.chance,
        "lower": list(acc.lower),
        "items": list(acc.items),
        "byte_accuracy": [round(a, 4) for a in acc.byte_accuracy],
        "item_accuracy": [round(a, 4) for a in acc.item_accuracy],
        "hardware": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "note": note,
    }
    (folder / "result.json").write_text(json.dumps(result, indent=1))
    print(acc.table(), flush=True)
    return result


def report(runs: Path, out: Path) -> None:
    """The table of the finished runs (``result.json`` under ``runs``): ``equal_budget.md``,
    ``.json`` and ``.png`` (byte accuracy by distance, one line per run) in ``out``."""
    results = [json.loads(p.read_text()) for p in sorted(runs.glob("*/result.json"))]
    if not results:
        raise SystemExit(f"no finished runs under {runs}: run this script without --report first")
    order = [*RUNS, *(n for table in TABLES.values() for n in table)]
    results.sort(key=lambda r: (order.index(r["name"]), r["seed"]))
    lower = results[0]["lower"]
    head = " | ".join(f"{lo:,}–{2 * lo - 1:,}" for lo in lower)
    task = results[0].get("task", {"task": "mqar", "seq_len": 1024, "key_len": 1, "value_len": 1})
    what, where, items = TASKS[task["task"]]
    per_step = results[0]["steps"] * task["seq_len"]
    batch = results[0].get("tokens", 8 * per_step) // per_step
    setting = (f"MQAR, {task['seq_len']:,} bytes, keys of {task['key_len']} letter(s) with values "
               f"of {task['value_len']} digit(s)" if task["task"] == "mqar" else
               f"copy, {task['seq_len']:,} bytes, {task['n_pairs']} span(s) of {task['span']} "
               f"random bytes, cue {task['cue']}")  # fmt: skip
    if task.get("distance_multiple", 1) > 1:
        setting += f", distances at multiples of {task['distance_multiple']} only"
    lines = [
        f"Byte accuracy of {what}, by distance {where} (bytes); chance "
        f"{results[0]['chance']:.3f}. {setting}; "
        f"{results[0]['steps']:,} steps x {batch} sequences for every run; the same "
        f"{sum(results[0]['items']):,} {items}.",
        "",
        f"| run | seed | {head} | val bits | tokens/s | wall |",
        "|---|---|" + "---|" * len(lower) + "---|---|---|",
    ]
    for r in results:
        accs = " | ".join(f"{a:.3f}" for a in r["byte_accuracy"])
        mark = "" if r["causal"] else " †"
        lines.append(
            f"| {r['name']}{mark} | {r['seed']} | {accs} | {r['best_val_bpb']:.3f} | "
            f"{r['tokens_per_s']:,.0f} | {r['wall_s'] / 60:.1f} min |"
        )
    if not all(r["causal"] for r in results):
        lines += ["", "† not strictly causal (top-w routing reads the whole sequence to form its "
                  "clusters): its accuracy is not a measurement of retrieval."]  # fmt: skip
    lines += ["", "Runs:", ""] + [f"- `{r['name']}`: {r['reach']}" for r in results
                                 if r["seed"] == results[0]["seed"]]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "equal_budget.md").write_text("\n".join(lines) + "\n")
    (out / "equal_budget.json").write_text(json.dumps(results, indent=1))
    name = "MQAR" if task["task"] == "mqar" else "Copy"
    _plot(results, out / "equal_budget.png", f"{name} at {task['seq_len']:,} bytes, equal budget")
    print("\n".join(lines))


def _plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        style = "-" if r["causal"] else ":"
        ax.plot(r["lower"], r["byte_accuracy"], style, marker="o",
                label=f"{r['name']} (seed {r['seed']})")  # fmt: skip
    ax.axhline(results[0]["chance"], color="grey", lw=0.8, ls="--", label="chance")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("distance between the two occurrences (bytes, bucket start)")
    ax.set_ylabel("byte accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", help="these runs of the base's table (default: all)")
    parser.add_argument("--base", type=Path, default=BASE, help="the base config (the task)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--runs", type=Path, default=Path("runs/equal_budget"))
    parser.add_argument("--out", type=Path, default=Path("docs/bench/long_range_tasks"))
    parser.add_argument("--note", default="", help="recorded with each run (e.g. 'shared CPU')")
    parser.add_argument("--report", action="store_true", help="only rebuild the table")
    ns = parser.parse_args()
    # SIGTERM as an exception, so that subprocess.run stops the running `zoo fit` with this script
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    table = runs_of(ns.base)
    unknown = sorted(set(ns.only or ()) - set(table))
    if unknown:
        parser.error(f"--only {unknown}: {ns.base.name}'s runs are {list(table)}")
    if not ns.report:
        for name in ns.only or table:
            print(f"== {name} (seed {ns.seed})", flush=True)
            _train(name, ns.seed, ns.steps, ns.runs, ns.note, ns.base)
    report(ns.runs, ns.out)


if __name__ == "__main__":
    main()
