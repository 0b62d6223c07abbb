"""Accuracy of a task model by exact distance, grouped by the distance's residue modulo a stride
(issue 53; experiments/long_context/log.md §12a).

experiments/long_context/log.md §12 argues that a strided pattern of stride ``l`` (Child et al. 2019, §4.2)
can copy by content from ``d`` bytes back only when ``d - 1 <= l`` or ``d`` is 0 or 1 modulo
``l``. This script measures it on a task run's test examples (``n_eval`` raised by
``--n-eval`` so that each distance has items; the first examples are the run's own test set):

    python experiments/long_range/accuracy_by_residue.py runs/copy_256_3k_sparse/strided_32_s0 --stride 32
    python experiments/long_range/accuracy_by_residue.py runs/copy_256_lattice32/strided_32_s0 \
        --stride 32 --distance-multiple 1     # trained at multiples of 32, tested at every distance

It prints byte accuracy per exact distance and for two groups: ``d`` = 0 or 1 (mod ``l``), the
distances the pattern reaches in one step from the position it predicts from, and every other
distance; with ``--out`` it writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def by_residue(run: Path, stride: int, n_eval: int, distance_multiple: int | None = None) -> dict:
    """``{"distance": [...], "items": [...], "byte_accuracy": [...], "on"/"off": {...}}`` for the
    best checkpoint of ``run`` (a run folder or a ``.ckpt``), on its task with ``n_eval`` test
    examples and, unless ``None``, distances drawn at multiples of ``distance_multiple`` (1: every
    distance, for a run trained on multiples only)."""
    from zoo.data import LongRangeTaskDataModule, task_hits
    from zoo.tasks import CausalLM

    ckpt = run if run.suffix == ".ckpt" else run / "checkpoints" / "best.ckpt"
    if not ckpt.is_file():
        raise SystemExit(f"{ckpt} not found: give a finished run folder or a .ckpt")
    model = CausalLM.load_from_checkpoint(ckpt, map_location="cpu").model
    override = {} if distance_multiple is None else {"distance_multiple": distance_multiple}
    data = LongRangeTaskDataModule.load_from_checkpoint(ckpt, n_eval=n_eval, **override)
    distance, right, total = task_hits(model, data, "test", batch_size=32)
    lags = np.unique(distance)
    result = {
        "checkpoint": str(ckpt),
        "stride": stride,
        "chance": data.spec.chance,
        "distance": lags.tolist(),
        "items": [int((distance == d).sum()) for d in lags],
        "byte_accuracy": [round(float(right[distance == d].sum() / total[distance == d].sum()), 4)
                          for d in lags],
    }  # fmt: skip
    on = np.isin(distance % stride, (0, 1))
    for name, rows in (("on", on), ("off", ~on)):
        result[name] = {
            "items": int(rows.sum()),
            "byte_accuracy": round(float(right[rows].sum() / max(total[rows].sum(), 1)), 4),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a task run folder (its best.ckpt) or a .ckpt")
    parser.add_argument("--stride", type=int, required=True, help="the residues' modulus")
    parser.add_argument("--n-eval", type=int, default=2048, help="test examples (default 2,048)")
    parser.add_argument("--distance-multiple", type=int,
                        help="test at these multiples (1: every distance; default: the run's)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    ns = parser.parse_args()
    r = by_residue(ns.run, ns.stride, ns.n_eval, ns.distance_multiple)
    print(f"{r['checkpoint']}: byte accuracy by distance (chance {r['chance']:.4f})\n")
    print(f"| distance | d mod {ns.stride} | items | byte accuracy |\n|---|---|---|---|")
    for d, n, a in zip(r["distance"], r["items"], r["byte_accuracy"], strict=True):
        print(f"| {d} | {d % ns.stride} | {n} | {a:.4f} |")
    print(f"\nd = 0 or 1 (mod {ns.stride}): {r['on']['byte_accuracy']:.4f} over {r['on']['items']} "
          f"items; other distances: {r['off']['byte_accuracy']:.4f} over {r['off']['items']}")  # fmt: skip
    if ns.out:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
