"""Where a causal-routing model's shifted-key heads look when they should copy (issue 53,
experiments/long_context/log.md §11b, §11e). For every query ``t`` that should copy from ``t - d``: whether
the source key ``t - d`` is in the query's cluster, whether it is among the ``causal_window``
members the query attends to (its cluster window), and the attention weight on it (content
scores as the layer computes them).

Two settings:

- the copy probe on text (default): a planted span at ``q = n - m`` and again at ``q - d`` in 4
  pg19mini test windows; ``CKPT D``;
- ``--task``: the test examples of the long-range task the checkpoint was trained on (the copy
  task of ``experiments/long_range/copy_256.yaml``), every scored byte, with the byte accuracy
  split, layer by layer, by whether a head has the source in its window and a rival beside it
  (an attended earlier copy of the query's byte followed by another byte).

    python experiments/long_range/attention_on_source.py RUN/checkpoints/best.ckpt 1024
    python experiments/long_range/attention_on_source.py RUN/checkpoints/best.ckpt --task
"""

import argparse
from collections import defaultdict

import numpy as np
import torch

from zoo.data.byte_corpora import load_byte_corpus
from zoo.tasks import CausalLM


def source_rows(model, x, pairs, rows) -> torch.Tensor:
    """Append, per ``(layer, head)`` of each routing layer, ``(same cluster, in window, weight on
    source, members attended, rival)`` for every ``(b, t, u)`` in ``pairs`` (query ``t`` of
    sequence ``b``, source key ``u``) to ``rows``; a rival is an attended member other than ``u``
    whose byte is the query's and whose next byte is not ``t``'s next (none when ``t`` is last).
    Returns the model's ``(B, T, 256)`` logits."""
    inputs = {}
    hooks = [
        b.attention.register_forward_pre_hook(lambda _, a, i=i, s=inputs: s.__setitem__(i, a[0]))
        for i, b in enumerate(model.blocks)
        if getattr(b.attention, "kmeans", None) is not None
    ]
    with torch.no_grad():
        logits = model(x).logits
        for h in hooks:
            h.remove()
        T = x.shape[1]
        before = torch.arange(T)
        for i, h_in in inputs.items():
            attn = model.blocks[i].attention
            q, _ = attn.scaled(*attn.project(h_in)[3:5])  # (B, h, T, D)
            clusters = attn.kmeans.assign(q)  # (B, h, T)
            for head in range(q.shape[1]):
                for b, t, u in pairs:
                    qh, ch = q[b, head], clusters[b, head]
                    members = ((ch == ch[t]) & (before < t)).nonzero()[:, 0][-attn.causal_window :]
                    w = torch.softmax((qh[members] @ qh[t]) * qh.shape[-1] ** -0.5, 0)
                    hit = members == u
                    rivals = members[~hit]  # same byte as the query, another byte after it
                    rival = t + 1 < T and bool(
                        ((x[b, rivals] == x[b, t]) & (x[b, rivals + 1] != x[b, t + 1])).any()
                    )
                    row = (bool(ch[u] == ch[t]), bool(hit.any()), float(w[hit].sum()), len(members),
                           rival)  # fmt: skip
                    rows[(i, head)].append(row)
    return logits


def report(rows) -> None:
    for (layer, head), r in sorted(rows.items()):
        a = np.array(r, dtype=float)  # (n, 5)
        print(f"layer {layer} head {head}: source in cluster {a[:, 0].mean():.3f}, in cluster "
              f"window {a[:, 1].mean():.3f}, weight on source {a[:, 2].mean():.3f}, "
              f"members {a[:, 3].mean():.0f}")  # fmt: skip


def probe(ckpt: str, d: int, trials: int = 4, m: int = 32, cue: int = 8) -> None:
    model = CausalLM.load_from_checkpoint(ckpt, map_location="cpu").model.eval()
    n = model.config.max_seq_len
    text = np.frombuffer(b"".join(load_byte_corpus("pg19mini", splits=("test",))["test"]), np.uint8)
    rng = np.random.default_rng(0)
    rows = defaultdict(list)
    for _ in range(trials):
        start = rng.integers(0, len(text) - n)
        x = torch.tensor(text[start : start + n].astype(np.int64))[None]
        span = torch.tensor(rng.integers(97, 123, m))
        q0 = n - m
        x[0, q0:], x[0, q0 - d : q0 - d + m] = span, span
        source_rows(model, x, [(0, t, t - d) for t in range(q0 + cue, n - 1)], rows)
    report(rows)


def task(ckpt: str, n_examples: int = 64) -> None:
    from zoo.data import LongRangeTaskDataModule

    model = CausalLM.load_from_checkpoint(ckpt, map_location="cpu").model.float().eval()
    data = LongRangeTaskDataModule.load_from_checkpoint(ckpt)
    data.resolve(model)
    examples = data.examples("test")
    rows, right = defaultdict(list), []
    for i in range(min(n_examples, len(examples))):
        e = examples.example(i)
        pairs = [
            (0, int(t), int(t) - int(dist))
            for idx, dist in zip(e.scored, e.distance, strict=True)
            for t in idx
        ]
        logits = source_rows(model, e.x[None], pairs, rows)
        pred = logits[0].argmax(-1)
        right += [bool(pred[t] == e.y[t]) for _, t, _ in pairs]
    report(rows)
    right = np.array(right)
    print(f"{len(right)} scored bytes, accuracy {right.mean():.3f}")
    for layer in sorted({la for la, _ in rows}):
        r = np.array([v for (la, _), v in sorted(rows.items()) if la == layer])  # (heads, n, 5)
        covered, rival = r[:, :, 1].astype(bool).any(0), r[:, :, 4].astype(bool).any(0)
        for name, mask in [
            ("source in no head's window", ~covered),
            ("source in a head's window, no rival beside it", covered & ~rival),
            ("source in a head's window, a rival beside it", covered & rival),
        ]:
            acc = f"{right[mask].mean():.3f}" if mask.any() else "-"
            print(f"layer {layer}, {name}: {mask.mean():.3f} of the bytes, accuracy {acc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ckpt")
    parser.add_argument("distance", nargs="?", type=int, help="the probe's d (text mode)")
    parser.add_argument("--task", action="store_true", help="the checkpoint's task examples")
    parser.add_argument("--examples", type=int, default=64, help="task examples (--task)")
    ns = parser.parse_args()
    if ns.task:
        task(ns.ckpt, ns.examples)
    elif ns.distance is None:
        parser.error("give the probe distance D, or --task")
    else:
        probe(ns.ckpt, ns.distance)


if __name__ == "__main__":
    main()
