"""How evenly a trained Routing Transformer's tokens spread over its clusters, over many windows.

Every token goes to the centroid nearest its (layer-normalised) routing query, as causal routing
assigns it; occupancy is a cluster's share of the tokens times ``k`` (1 = balanced, the issue's goal
is >= 0.25). Training logs ``train/routing/occupancy_min`` for each batch: the smallest of all
routing heads' clusters in one batch, while the centroids move. This script freezes the model and
measures both that per-batch minimum and the occupancy pooled over all the batches, so a user can
tell a centroid that owns few tokens from one that owned few in one batch:

- per routing head: the smallest and largest pooled occupancy and the clusters no token chose;
- over batches of ``--batch-size`` random windows of ``--seq-len`` bytes (the training batch's
  shape by default): the median, 10th percentile and smallest per-batch minimum.

``--replay BELOW:SPLIT ...`` also replays training's centroid updates on the frozen model's routing
queries: for each revival rule (``revive_below``, ``revive_split`` of
:class:`zoo.attention.routing.SphericalKMeans`, e.g. ``0.25:farthest``), a copy of the model's
centroids takes one EMA update per batch, as in training, and the per-batch minimum occupancy is
logged before each revival, as ``train/routing/occupancy_min`` is. The network's weights do not move,
so this tests a rule in minutes, not what a whole training run does with it. With routing in more
than one layer, a second table gives each layer's own per-batch minimum. ``--bf16`` replays as
``bf16-mixed`` training calls the update: on bf16 queries, under autocast.

    python experiments/routing_transformer/cluster_balance.py --model routing_transformer_small_top2.pg19mini
    python experiments/routing_transformer/cluster_balance.py --model runs/.../checkpoints/last.ckpt \\
        --split valid --batches 64 --out docs/bench/cluster_balance/top2.md
    python experiments/routing_transformer/cluster_balance.py \\
        --model routing_transformer_small_top2.pg19mini \\
        --split train --batches 200 --replay 0:farthest 0.25:farthest 0.5:farthest 0.5:two_means

``--model``: a Lightning ``.ckpt``, or anything ``zoo.from_pretrained`` takes. Needs the data set's
split (ZOO_DATA_DIR or --data-dir). Source: Roy et al. 2020, §4.1 (online k-means routing).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from rich.console import Console
from rich.progress import track
from torch import nn

from zoo.attention import RoutingSelfAttention
from zoo.attention.kmeans import SphericalKMeans
from zoo.data.byte_corpora import load_byte_corpus
from zoo.data.windows import RandomWindows
from zoo.errors import ZooError


class Balance(NamedTuple):
    """Cluster occupancy of every routing head, measured on ``tokens`` tokens.

    ``pooled``: ``(heads, k)`` fp32 occupancy over all batches, heads in layer order (each layer's
    routing heads in turn), labelled by ``heads`` as ``(layer, head)``; ``batch_min``: the smallest
    occupancy of any head's cluster in each batch.
    """

    heads: list[tuple[int, int]]
    pooled: torch.Tensor
    batch_min: list[float]
    tokens: int


def routing_layers(model: nn.Module) -> list[tuple[int, RoutingSelfAttention]]:
    """``(layer index, module)`` of every attention layer with routing heads, in order.

    Raises:
        ZooError: the model has no routing heads (not a Routing Transformer, or local only).
    """
    layers = [m for m in model.modules() if isinstance(m, RoutingSelfAttention)]
    routed = [(i, m) for i, m in enumerate(layers) if m.kmeans is not None]
    if not routed:
        raise ZooError("the model has no routing heads: pass a Routing Transformer with routing")
    return routed


@torch.no_grad()
def routing_queries(model: nn.Module, batches, progress: bool = False):
    """For each batch of byte windows ``(B, T)`` int64, the layer-normalised routing queries of
    every routing head (what the centroids see), layers in order: ``(B, heads, T, D)`` fp32. The
    model runs frozen, in eval mode, and is left without hooks."""
    model.eval()
    layers = routing_layers(model)
    queries: dict[int, torch.Tensor] = {}

    def keep(index: int):
        def hook(module: RoutingSelfAttention, args, output) -> None:
            queries[index] = module.project(args[0])[3].float()  # (B, h, T, D)

        return hook

    handles = [m.register_forward_hook(keep(i)) for i, m in layers]
    try:
        for x in track(batches, description="routing", disable=not progress):
            model(x)
            yield torch.cat([queries[i] for i, _ in layers], 1)
    finally:
        for h in handles:
            h.remove()


def model_kmeans(model: nn.Module, **overrides) -> SphericalKMeans:
    """One :class:`SphericalKMeans` holding a copy of every routing layer's centroids, heads in
    layer order, with the first layer's EMA settings and ``overrides`` (e.g. ``revive_below``)."""
    layers = [m.kmeans for _, m in routing_layers(model)]
    centroids = torch.cat([km.centroids for km in layers])  # (heads, k, D)
    first = layers[0]
    # centroid_init "random": keep the copied centroids (a "kmeans" module would refit them)
    settings = dict(ema_decay=first.ema_decay, normalize_centroids=first.normalize_centroids,
                    centroid_init="random", revive_below=first.revive_below,
                    revive_split=first.revive_split) | overrides  # fmt: skip
    km = SphericalKMeans(*centroids.shape, **settings)
    km.centroids.copy_(centroids)
    return km


def occupancy(counts: torch.Tensor) -> torch.Tensor:
    """Each cluster's share of its head's tokens times ``k``: ``(heads, k)``."""
    return counts / counts.sum(-1, keepdim=True).clamp(min=1) * counts.shape[-1]


def measure(model: nn.Module, batches, progress: bool = False) -> Balance:
    """Occupancy of ``model``'s clusters (frozen, in eval mode) over ``batches`` of byte windows
    ``(B, T)`` int64.

    Raises:
        ZooError: no routing heads, or no batches.
    """
    km = model_kmeans(model)
    k = km.centroids.shape[1]
    total, batch_min, tokens = None, [], 0
    for q in routing_queries(model, batches, progress):
        counts = torch.nn.functional.one_hot(km.assign(q), k).sum((0, 2)).float()  # (heads, k)
        batch_min.append(occupancy(counts).min().item())
        total = counts if total is None else total + counts
        tokens += q.shape[0] * q.shape[2]
    if total is None:
        raise ZooError("no batches to measure: pass at least one")
    heads = [(i, h) for i, m in routing_layers(model) for h in range(m.n_routing)]
    return Balance(heads, occupancy(total), batch_min, tokens)


class Replay(NamedTuple):
    """One revival rule replayed: the per-batch minimum occupancy before each update's revival
    (as training logs it), how many centroids revival moved, and each head's own per-batch
    minimum, ``(batches, heads)`` fp32, heads labelled as :attr:`Balance.heads`."""

    rule: str
    batch_min: list[float]
    revived: int
    head_min: torch.Tensor


def parse_rule(rule: str) -> dict:
    """``"0.5:two_means"`` -> ``{"revive_below": 0.5, "revive_split": "two_means"}``.

    Raises:
        ZooError: not ``BELOW:SPLIT`` with BELOW in [0, 1) and SPLIT farthest or two_means.
    """
    below, _, split = rule.partition(":")
    try:
        below_f = float(below)
    except ValueError:
        below_f = -1.0
    if not 0 <= below_f < 1 or split not in ("farthest", "two_means"):
        raise ZooError(
            f"bad revival rule {rule!r}: write BELOW:SPLIT, BELOW in [0, 1) and SPLIT farthest "
            f"or two_means, e.g. 0.25:farthest"
        )
    return {"revive_below": below_f, "revive_split": split}


def replay(
    model: nn.Module, batches, rules: list[str], progress: bool = False, bf16: bool = False
) -> list[Replay]:
    """Training's centroid updates, one per batch, on ``model``'s frozen routing queries, once
    per revival rule (:func:`parse_rule`), all starting from the model's centroids.

    ``bf16``: as ``bf16-mixed`` training runs them: the queries rounded to bf16 (the projection's
    output dtype under autocast) and each update called under CPU bf16 autocast. The update
    computes in fp32 all the same since 6787c1c; before it, the revival's matrix products ran in
    bf16 (experiments/long_context/log.md §5p)."""
    kmeans = [model_kmeans(model, **parse_rule(rule)) for rule in rules]
    mins: list[list[torch.Tensor]] = [[] for _ in rules]
    for q in routing_queries(model, batches, progress):
        q = q.bfloat16() if bf16 else q
        for km, logged in zip(kmeans, mins, strict=True):
            with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
                km.update(q)
            logged.append(km.occupancy.min(-1).values.float())  # (heads,)
    return [
        Replay(rule, torch.stack(m).amin(-1).tolist(), km.revived, torch.stack(m))
        for rule, m, km in zip(rules, mins, kmeans, strict=True)
    ]


def replay_table(replays: list[Replay], skip: float = 0.25) -> str:
    """A markdown table of :func:`replay`'s results, leaving out the first ``skip`` of the
    batches (the rule's own warm-up)."""
    rows = [
        f"Centroid updates replayed on the frozen model's routing queries, after the first "
        f"{skip:.0%} of the batches: the smallest cluster of any head per batch",
        "",
        "| revive_below:revive_split | median | 10th percentile | share of batches < 0.25 "
        "| min | centroids revived |",
        "|---|---|---|---|---|---|",
    ]
    for r in replays:
        late = sorted(r.batch_min[int(skip * len(r.batch_min)) :])
        under = sum(m < 0.25 for m in late) / len(late)
        rows.append(
            f"| {r.rule} | {statistics.median(late):.3f} | {late[int(0.1 * (len(late) - 1))]:.3f} "
            f"| {under:.2f} | {late[0]:.3f} | {r.revived} |"
        )
    return "\n".join(rows) + "\n"


def replay_layer_table(
    replays: list[Replay], heads: list[tuple[int, int]], skip: float = 0.25
) -> str:
    """:func:`replay_table` for each routing layer alone: the smallest cluster of that layer's
    heads per batch, so a layer that no rule can balance does not hide the others."""
    rows = [
        f"The same replay, layer by layer, after the first {skip:.0%} of the batches: the smallest "
        f"cluster of the layer's heads per batch",
        "",
        "| revive_below:revive_split | layer | median | 10th percentile | share of batches < 0.25 "
        "| min |",
        "|---|---|---|---|---|---|",
    ]
    layers = sorted({layer for layer, _ in heads})
    for r in replays:
        late = r.head_min[int(skip * len(r.head_min)) :]  # (batches, heads)
        for layer in layers:
            cols = [i for i, (l_, _) in enumerate(heads) if l_ == layer]
            m = sorted(late[:, cols].amin(-1).tolist())
            under = sum(x < 0.25 for x in m) / len(m)
            rows.append(
                f"| {r.rule} | {layer} | {statistics.median(m):.3f} "
                f"| {m[int(0.1 * (len(m) - 1))]:.3f} | {under:.2f} | {m[0]:.3f} |"
            )
    return "\n".join(rows) + "\n"


def table(balance: Balance, label: str) -> str:
    """A markdown report of ``balance``: one row per head, then the per-batch minimum."""
    rows = [
        f"Cluster occupancy of {label} (1 = balanced share), {balance.tokens:,} tokens, "
        f"{len(balance.batch_min)} batches, model frozen",
        "",
        "| layer | head | pooled min | pooled max | clusters no token chose |",
        "|---|---|---|---|---|",
    ]
    for (layer, head), occ in zip(balance.heads, balance.pooled, strict=True):
        empty = int((occ == 0).sum())
        rows.append(f"| {layer} | {head} | {occ.min():.3f} | {occ.max():.2f} | {empty} |")
    mins = sorted(balance.batch_min)
    tenth = mins[int(0.1 * (len(mins) - 1))]
    rows += [
        "",
        f"All heads pooled: min {balance.pooled.min():.3f}. Per batch, the smallest cluster of any "
        f"head: median {statistics.median(mins):.3f}, 10th percentile {tenth:.3f}, "
        f"min {mins[0]:.3f}.",
    ]
    return "\n".join(rows) + "\n"


def windows(dataset: str, split: str, seq_len: int, batch_size: int, n: int, data_dir, seed: int):
    """``n`` batches of ``batch_size`` random windows of ``seq_len`` bytes of one split."""
    docs = load_byte_corpus(dataset, data_dir=data_dir, splits=(split,))[split]
    stream = np.frombuffer(b"".join(docs), dtype=np.uint8)
    data = RandomWindows(stream, seq_len, n * batch_size, seed=seed)
    for b in range(n):
        yield torch.stack([data[b * batch_size + i][0] for i in range(batch_size)])


def load(name: str) -> nn.Module:
    if name.endswith(".ckpt"):
        from zoo.tasks import CausalLM

        return CausalLM.load_from_checkpoint(name, map_location="cpu").model
    import zoo

    return zoo.from_pretrained(name)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a .ckpt, a save_pretrained folder or a name")
    p.add_argument("--dataset", default="pg19mini")
    p.add_argument("--split", default="valid", choices=("train", "valid", "test"))
    p.add_argument("--seq-len", type=int, default=1024, help="bytes per window (training's)")
    p.add_argument("--batch-size", type=int, default=8, help="windows per batch (training's)")
    p.add_argument("--batches", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="which random windows")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--replay", nargs="+", metavar="BELOW:SPLIT", default=None,
                   help="also replay training's centroid updates with these revival rules")  # fmt: skip
    p.add_argument("--bf16", action="store_true",
                   help="replay as bf16-mixed training: bf16 queries, updates under autocast")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    ns = p.parse_args(argv)
    if ns.bf16 and not ns.replay:
        raise SystemExit("error: --bf16 changes only the replay: add --replay BELOW:SPLIT ...")
    console = Console()
    try:
        for rule in ns.replay or []:
            parse_rule(rule)
        model = load(ns.model)
        batches = list(windows(ns.dataset, ns.split, ns.seq_len, ns.batch_size, ns.batches,
                               ns.data_dir, ns.seed))  # fmt: skip
        balance = measure(model, batches, progress=True)
        replays = (
            replay(model, batches, ns.replay, progress=True, bf16=ns.bf16) if ns.replay else None
        )
    except ZooError as e:
        raise SystemExit(f"error: {e}") from None
    label = f"{ns.model} on {ns.dataset} {ns.split} ({ns.batch_size} x {ns.seq_len} bytes a batch)"
    report = table(balance, label)
    if replays:
        report += "\n" + replay_table(replays)
        if len({layer for layer, _ in balance.heads}) > 1:
            report += "\n" + replay_layer_table(replays, balance.heads)
    print(report, end="")
    if ns.out is not None:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(report)
        console.print(f"[dim]wrote {ns.out}[/dim]")


if __name__ == "__main__":
    main()
