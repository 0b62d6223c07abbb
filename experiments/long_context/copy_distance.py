"""How far back a byte-level model would have to look to copy the next byte (log.md §5d,
beside this script).

A model-free measurement of the text, not of any model: for each byte of a split, the distance back
to the nearest earlier place in the same document where the same ``n`` bytes were followed by the
same byte. A byte with such a source at distance ``d`` could be predicted by copying, given ``n``
bytes of context to match and a window that reaches ``d`` bytes back. The share of bytes whose
nearest source lies between 257 and 4,096 bytes back is what a 4,096-byte window offers a copying
model beyond a 256-byte one; sources further back than 4,096 need a longer window. An upper bound on
copying's help, not an estimate of bits: a copy source is not always right, and a model may already
predict the byte from nearby text.

    ZOO_DATA_DIR=../shared/data python experiments/long_context/copy_distance.py --split test \\
        --n 8 16 32 --out docs/bench/copy_distance_pg19mini.md

Errors: a missing corpus is ``zoo.data.DataNotFoundError`` (one line naming where it looked).
"""

from __future__ import annotations

import argparse
import bisect
from collections.abc import Sequence
from pathlib import Path

EDGES = (256, 4096)  # the dense model's and the long models' contexts


def copy_distances(doc: bytes, n: int) -> list[int]:
    """Distance to the nearest copy source of every byte of ``doc`` (0: none).

    Entry ``i`` (``0 <= i < len(doc)``) is ``i - j`` for the largest ``j < i`` with
    ``doc[j - n : j + 1] == doc[i - n : i + 1]`` (``n`` bytes of context and the byte itself), 0 if
    there is no such ``j`` or ``i < n``. Linear time: one dict of ``n + 1``-grams.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1 (bytes of context to match), got {n}")
    last: dict[bytes, int] = {}
    out = [0] * len(doc)
    for i in range(n, len(doc)):
        gram = doc[i - n : i + 1]
        j = last.get(gram)
        if j is not None:
            out[i] = i - j
        last[gram] = i
    return out


def shares(docs: Sequence[bytes], n: int, edges: Sequence[int] = EDGES) -> dict[str, float]:
    """Share of all bytes of ``docs`` whose nearest copy source (:func:`copy_distances`) lies in
    each distance bucket: ``<= edges[0]``, ``(edges[0], edges[1]]``, ..., ``> edges[-1]``, and
    ``none``. The shares sum to 1."""
    labels = [f"<= {edges[0]:,}"]
    labels += [f"{a + 1:,}-{b:,}" for a, b in zip(edges, edges[1:], strict=False)]
    labels += [f"> {edges[-1]:,}", "none"]
    counts = [0] * len(labels)
    total = 0
    for doc in docs:
        for d in copy_distances(doc, n):
            total += 1
            counts[bisect.bisect_left(edges, d) if d else -1] += 1
    return {label: c / max(total, 1) for label, c in zip(labels, counts, strict=True)}


def main(argv: Sequence[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", default="pg19mini")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"))
    p.add_argument(
        "--n", type=int, nargs="+", default=[8, 16, 32], help="bytes of context to match"
    )
    p.add_argument("--data-dir", default=None, help="default: $ZOO_DATA_DIR, then the cache")
    p.add_argument("--out", default=None, help="also write the table here (markdown)")
    ns = p.parse_args(argv)

    from rich.console import Console
    from rich.progress import track

    from zoo.data.byte_corpora import load_byte_corpus

    docs = load_byte_corpus(ns.dataset, data_dir=ns.data_dir, splits=(ns.split,))[ns.split]
    rows = [(n, shares(docs, n)) for n in track(ns.n, description="matching", transient=True)]
    labels = list(rows[0][1])
    size = sum(len(d) for d in docs)
    lines = [
        f"# Nearest copy source of each byte: {ns.dataset} {ns.split} ({len(docs)} documents, "
        f"{size:,} bytes)",
        "",
        f"`python experiments/long_context/copy_distance.py --dataset {ns.dataset} --split {ns.split} "
        f"--n {' '.join(map(str, ns.n))}`. Share of bytes whose nearest earlier occurrence of the "
        "same n bytes followed by the same byte, in the same document, lies that many bytes back "
        "(none: no such occurrence). See the script's docstring.",
        "",
        "| n bytes matched | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 1) + "|",
    ]
    lines += [f"| {n} | " + " | ".join(f"{s[k]:.4f}" for k in labels) + " |" for n, s in rows]
    table = "\n".join(lines) + "\n"
    Console().print(table, markup=False, highlight=False)
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text(table)
    return table


if __name__ == "__main__":
    main()
