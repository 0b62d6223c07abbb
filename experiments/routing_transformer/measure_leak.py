"""Measure how much a trained Routing Transformer's past predictions depend on future tokens.

Top-w routing (Algorithm 1) selects each cluster's members over the whole sequence, so changing
token t can change which earlier tokens share a cluster, and with it the predictions at positions
before t. This script changes one token at a time in real validation windows and reports the
movement (zoo.models.routing_transformer.future_dependence), for the checkpoint as trained and for
the same weights with causal routing (which must give zeros).

    python experiments/routing_transformer/measure_leak.py \\
        --ckpt runs/routing_transformer/pg19mini/checkpoints/last.ckpt --windows 8

Needs the pg19mini validation books (ZOO_DATA_DIR or --data-dir). Writes docs/bench/routing_leak.md.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.progress import track

from zoo.data import ByteTextDataModule
from zoo.models.routing_transformer import future_dependence
from zoo.tasks import CausalLM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", type=Path, required=True, help="a Lightning checkpoint")
    parser.add_argument("--data-dir", help="folder with pg19mini (default: ZOO_DATA_DIR)")
    parser.add_argument("--windows", type=int, default=8, help="windows for the token changes")
    parser.add_argument("--bpb-windows", type=int, default=100, help="windows for bits/byte")
    parser.add_argument("--out", type=Path, default=Path("docs/bench/routing_leak.md"))
    ns = parser.parse_args()

    task = CausalLM.load_from_checkpoint(ns.ckpt, map_location="cpu")
    T = task.model.config.max_seq_len
    data = ByteTextDataModule("pg19mini", data_dir=ns.data_dir, seq_len=T, eval_batch_size=1)
    data.setup("validate")
    batches = []
    for batch in data.val_dataloader():
        batches.append(batch)
        if len(batches) == max(ns.windows, ns.bpb_windows):
            break
    idx = torch.cat([x for x, _ in batches if x.shape[1] == T][: ns.windows])  # (windows, T)
    changes = [T // 8, T // 2, T - 1]

    lines = [
        "# Future dependence of a top-w Routing Transformer (pg19mini validation)",
        "",
        f"`python experiments/routing_transformer/measure_leak.py --ckpt {ns.ckpt} --windows "
        f"{len(idx)}`: {len(idx)} validation windows of {T} bytes; token t is replaced by "
        "the next byte value and the model re-run. Max: over windows, positions < t and the "
        "vocabulary (nats). Moved: share of positions < t whose log-probabilities changed "
        "(> 1e-5). NLL change: mean absolute change of the loss at positions < t - 1 (bits).",
        "",
        "| routing at evaluation | t | max log-prob change (nats) | moved positions | NLL change (bits) |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    bpb = {}
    for routing in ("topw", "causal"):
        for m in task.model.modules():
            if hasattr(m, "routing") and hasattr(m, "kmeans"):
                m.routing = routing
        task.model.eval()
        for r in future_dependence(task.model, idx, changes):
            lines.append(
                f"| {routing} | {r['t']} | {r['max_logprob_change']:.4f} | "
                f"{r['moved_positions']:.1%} | {r['nll_change_bits']:.5f} |"
            )
        nll, count = 0.0, 0
        with torch.no_grad():
            for x, y in track(batches[: ns.bpb_windows], description=f"bits/byte, {routing}"):
                logits = task.model(x).float()
                nll += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
                count += y.numel()
        bpb[routing] = nll / count / math.log(2)
    lines += [
        "",
        f"The same weights on the first {min(ns.bpb_windows, len(batches))} validation windows "
        f"({count:,} bytes), fp32: bits/byte {bpb['topw']:.4f} with top-w routing, "
        f"{bpb['causal']:.4f} with causal routing.",
    ]
    text = "\n".join(lines) + "\n"
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
