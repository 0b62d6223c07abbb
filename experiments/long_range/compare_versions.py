"""Two versions of a published LM side by side: bits per byte by context (``zoo evaluate
--by-context``), the copy probe (``--probe copy``) and the training curve of the newer one.

    python experiments/long_range/compare_versions.py OLD_DIR NEW_DIR METRICS_CSV OUT_PNG

OLD_DIR and NEW_DIR hold ``by_context.json`` and ``copy_probe.json`` (a checkpoint folder, or
the ``--out-dir`` folders copied together); METRICS_CSV is the newer run's CSVLogger file.
experiments/long_context/log.md §13 uses it for routing_transformer_small_top2.pg19mini v3 against v4.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(old: str, new: str, metrics_csv: str, out: str) -> None:
    runs = {label: Path(folder) for label, folder in (("older", old), ("newer", new))}
    fig, (ax_ctx, ax_copy, ax_train) = plt.subplots(1, 3, figsize=(15, 4.2))
    for label, folder in runs.items():
        ctx = json.loads((folder / "by_context.json").read_text())
        ax_ctx.plot(ctx["contexts"], ctx["bits"], marker="o", label=f"{label}: {folder.name}")
        probe = json.loads((folder / "copy_probe.json").read_text())
        ax_copy.errorbar(
            probe["distances"], probe["gain"], marker="o", capsize=3, label=f"{label}: {folder.name}",
            yerr=[[g - lo for g, lo in zip(probe["gain"], probe["gain_low"], strict=True)],
                  [hi - g for g, hi in zip(probe["gain"], probe["gain_high"], strict=True)]],
        )  # fmt: skip
    ax_ctx.set(xscale="log", xlabel="context (bytes)", ylabel="bits/byte, same test bytes",
               title="bits per byte by context")  # fmt: skip
    ax_copy.set(xscale="log", xlabel="distance d (bytes)", ylabel="control − repeat (bits/byte)",
                title="copy probe: retrieval gain (95% interval)")  # fmt: skip
    train, val = [], []
    with open(metrics_csv) as f:
        for row in csv.DictReader(f):
            if row.get("train/bpb"):
                train.append((int(row["step"]), float(row["train/bpb"])))
            if row.get("val/bpb"):
                val.append((int(row["step"]), float(row["val/bpb"])))
    if train:
        ax_train.plot(*zip(*train, strict=True), lw=0.6, alpha=0.6, label="train (logged batches)")
    if val:
        ax_train.plot(*zip(*val, strict=True), marker="o", label="validation")
    ax_train.set(xlabel="optimizer step of the newer run", ylabel="bits/byte", title="training")
    for ax in (ax_ctx, ax_copy, ax_train):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__.split("\n\n")[1].strip())
    main(*sys.argv[1:])
