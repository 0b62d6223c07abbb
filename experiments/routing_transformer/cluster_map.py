"""Colour a passage of a real book by the k-means cluster each byte is routed to.

A trained Routing Transformer reads one validation window of pg19mini (``--offset`` into the first
validation book, ``max_seq_len`` bytes). For every routing head of every routing layer, each token
goes to the centroid nearest its (layer-normalised) routing query: the cluster causal routing uses;
top-w routing instead gives each centroid its ``ceil(T / k)`` best-scoring tokens.

Top panel: ``--chars`` characters of the window from ``--start``, wrapped at ``--width`` columns,
each on a background coloured by its cluster in one head (``--layer``, ``--head``); spaces are
coloured cells, a newline is drawn as ``↵`` and starts a new line, bytes outside printable ASCII as
``·``. Colours go by cluster size on the whole window (the largest cluster gets the first colour),
so the passage and the bars below share them. Bottom panel: that head's cluster occupancy (share of
the window's tokens x k; 1 = balanced) sorted descending, with lines at 1 and 0.25.

Also prints a table, written next to the PNG as markdown (same stem, ``.md``): occupancy min / max
and empty clusters (nobody's nearest centroid) of every routing head on the window, under causal
routing the share of each head's attention on keys outside the local window beside the share
uniform attention over the same cluster members would give (below it, the head prefers nearer
members), and the head's uniformity (``exp(entropy) / members``: 1 = it averages its members;
:func:`zoo.attention.routing.causal_routing_stats`), and for the chosen head the most frequent
characters of its largest clusters.

    python experiments/routing_transformer/cluster_map.py \\
        --model runs/routing_transformer/pg19mini_long/checkpoints/last.ckpt --out /tmp/cluster_map.png
    python experiments/routing_transformer/cluster_map.py --model routing_transformer_small.pg19mini

``--model``: a Lightning ``.ckpt``, or anything ``zoo.from_pretrained`` takes (a ``save_pretrained``
folder or a published name). Needs the pg19mini validation books (ZOO_DATA_DIR or --data-dir).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from torch import nn

import zoo
from zoo.attention import RoutingSelfAttention
from zoo.attention.routing import causal_routing_stats
from zoo.data import ByteTextDataModule
from zoo.tasks import CausalLM

GLYPHS = {ord(" "): "␣", ord("\n"): "↵", ord("\t"): "⇥"}  # in the tables; the picture leaves
# spaces blank


def load(name: str) -> tuple[nn.Module, str]:
    """The model in eval mode, and a label for it (with the training step of a checkpoint)."""
    if name.endswith(".ckpt"):
        model = CausalLM.load_from_checkpoint(name, map_location="cpu").model
        step = torch.load(name, map_location="cpu", weights_only=True, mmap=True).get(
            "global_step"
        )
        return model.eval(), f"{name} (step {step})"
    return zoo.from_pretrained(name).eval(), name


def glyph(byte: int) -> str:
    """How a byte is shown in the tables: ␣ ↵ ⇥ for whitespace, ``\\xNN`` outside ASCII."""
    if byte in GLYPHS:
        return GLYPHS[byte]
    return chr(byte) if 32 < byte < 127 else f"\\x{byte:02x}"


def percent(share: float) -> str:
    return f"{share:.0%}" if share >= 0.005 else "<1%"


def palette(k: int) -> list[tuple[float, float, float]]:
    """``k`` qualitative colours, the most distinct first: tab20's dark then light halves, then
    tab20b and tab20c one shade at a time (60 colours; beyond that they repeat)."""
    import matplotlib

    def shades(name: str, step: int) -> list:
        colors = matplotlib.colormaps[name].colors
        return [colors[i] for i in sorted(range(len(colors)), key=lambda i: (i % step, i))]

    colors = shades("tab20", 2) + shades("tab20b", 4) + shades("tab20c", 4)
    return [tuple(colors[i % len(colors)][:3]) for i in range(k)]


def wrap(text: bytes, width: int) -> list[list[int]]:
    """Indices into ``text`` per drawn line: a newline ends its line (and is drawn); a line
    longer than ``width`` breaks after its last space (in the second half), else at ``width``."""
    lines, line = [], []
    for i, byte in enumerate(text):
        line.append(i)
        if byte == ord("\n"):
            lines.append(line)
            line = []
        elif len(line) == width:
            spaces = [j for j, p in enumerate(line) if text[p] == ord(" ") and j >= width // 2]
            cut = spaces[-1] + 1 if spaces else width
            lines.append(line[:cut])
            line = line[cut:]
    return lines + [line] if line else lines


def draw(window, clusters, occupancy, ns, title: str) -> None:
    """The passage coloured by ``clusters`` ``(T,)`` and the bars of ``occupancy`` ``(k,)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(occupancy)
    order = np.argsort(-occupancy, kind="stable")  # clusters, largest first
    rank = np.empty(k, dtype=int)
    rank[order] = np.arange(k)
    colors = palette(k)
    text = bytes(window[ns.start : ns.start + ns.chars])
    lines = wrap(text, ns.width)

    rows = len(lines)
    fig, (ax, bars) = plt.subplots(
        2, 1, figsize=(0.155 * ns.width + 0.6, 0.3 * rows + 3.6),
        gridspec_kw={"height_ratios": [0.3 * rows + 0.5, 2.3]},
    )  # fmt: skip
    img = np.ones((rows, ns.width, 3))
    for r, line in enumerate(lines):
        for c, i in enumerate(line):
            rgb = colors[rank[clusters[ns.start + i]]]
            img[r, c] = rgb
            byte = text[i]
            char = "↵" if byte == ord("\n") else chr(byte) if 32 < byte < 127 else "·"
            if byte != ord(" "):
                dark = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 0.5
                ax.text(c, r, char, ha="center", va="center", family="monospace", fontsize=10,
                        color="white" if dark else "black")  # fmt: skip
    ax.imshow(img, aspect="auto", interpolation="nearest")
    ax.set_axis_off()
    end = ns.start + len(text)
    ax.set_title(
        f"bytes {ns.start}-{end} of the window, coloured by cluster (colours by cluster size, "
        "as in the bars below)",
        fontsize=9,
    )

    x = np.arange(k)
    bars.bar(x, occupancy[order], color=[colors[r] for r in range(k)], edgecolor="0.3", lw=0.4)
    bars.axhline(1.0, color="black", lw=0.8, ls="--", label="1 = balanced")
    bars.axhline(0.25, color="tab:red", lw=0.8, ls=":", label="0.25")
    bars.set_xticks(x, [str(c) for c in order], fontsize=7)
    bars.set_xlim(-0.6, k - 0.4)
    bars.set_xlabel("cluster (sorted by occupancy)")
    bars.set_ylabel("occupancy (share x k)")
    bars.legend(fontsize=8, loc="upper right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(ns.out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a .ckpt, save_pretrained folder or name")
    parser.add_argument("--data-dir", help="folder with pg19mini (default: ZOO_DATA_DIR)")
    parser.add_argument("--offset", type=int, default=100_000, help="window start in the book")
    parser.add_argument("--layer", type=int, help="layer drawn (default: the top routing layer)")
    parser.add_argument("--head", type=int, default=0, help="routing head within the layer")
    parser.add_argument("--start", type=int, default=2000, help="passage start in the window")
    parser.add_argument("--chars", type=int, default=600, help="passage length (bytes)")
    parser.add_argument("--width", type=int, default=80, help="columns of the drawn passage")
    parser.add_argument("--out", type=Path, default=Path("docs/img/routing_cluster_map.png"))
    ns = parser.parse_args()

    model, label = load(ns.model)
    T = model.config.max_seq_len
    data = ByteTextDataModule(dataset="pg19mini", data_dir=ns.data_dir, seq_len=T)
    data.setup("validate")
    book = data.splits["valid"][0]
    offset = min(ns.offset, len(book) - T)
    window = book[offset : offset + T]
    if not 0 <= ns.start < T:
        raise SystemExit(f"--start must be in [0, {T})")

    routing = {
        i: b.attention
        for i, b in enumerate(model.blocks)
        if isinstance(getattr(b, "attention", None), RoutingSelfAttention)
        and b.attention.kmeans is not None
    }
    if not routing:
        raise SystemExit(f"{ns.model} has no routing heads")
    layer = max(routing) if ns.layer is None else ns.layer % len(model.blocks)
    if layer not in routing:
        raise SystemExit(f"layer {ns.layer} has no routing heads; routing layers: {list(routing)}")
    if not 0 <= ns.head < routing[layer].n_routing:
        raise SystemExit(f"--head must be in [0, {routing[layer].n_routing})")

    inputs = {}
    handles = [
        attn.register_forward_pre_hook(lambda m, args, i=i: inputs.__setitem__(i, args[0]))
        for i, attn in routing.items()
    ]
    with torch.no_grad():
        model(torch.from_numpy(window.astype(np.int64))[None])
        queries = {i: attn.project(inputs[i])[3] for i, attn in routing.items()}  # (1, h, T, D)
        assigned = {i: attn.kmeans.assign(queries[i]) for i, attn in routing.items()}  # (1, h, T)
        stats = {  # causal routing: each head's attention, and uniform attention (equal scores)
            i: [
                causal_routing_stats(x, assigned[i], attn.window, attn.causal_window)
                for x in (attn.scaled(queries[i], queries[i])[0], torch.zeros_like(queries[i]))
            ]
            for i, attn in routing.items()
            if attn.routing == "causal"
        }
    clusters = {i: a[0].numpy() for i, a in assigned.items()}  # (routing heads, T)
    for handle in handles:
        handle.remove()

    k = routing[layer].kmeans.centroids.shape[1]
    occupancy = {  # (routing heads, k): share of the window's tokens x k
        i: np.stack([np.bincount(c, minlength=k) for c in cl]) / T * k for i, cl in clusters.items()
    }

    heads = [["layer", "routing head", "occupancy min", "occupancy max", "empty clusters"]]
    heads[0] += [
        "attention past the local window", "the same, uniform over the members", "uniformity",
    ]  # fmt: skip
    for i, occ in occupancy.items():
        for h, o in enumerate(occ):
            if i in stats:
                model_stats, uniform = stats[i]
                shares = [f"{model_stats['far_share'][h]:.1%}", f"{uniform['far_share'][h]:.1%}"]
                shares.append(f"{model_stats['uniformity'][h]:.2f}")
            else:
                shares = ["— (not causal routing)"] * 3
            heads.append(
                [str(i), str(h), f"{o.min():.2f}", f"{o.max():.2f}", str((o == 0).sum()), *shares]
            )
    occ = occupancy[layer][ns.head]
    cl = clusters[layer][ns.head]
    top = [["cluster", "occupancy", "share of the window", "most frequent characters"]]
    for c in np.argsort(-occ, kind="stable")[:5]:
        members = Counter(window[cl == c].tolist())
        n = sum(members.values())
        chars = ", ".join(f"{glyph(b)} {percent(m / n)}" for b, m in members.most_common(5))
        top.append([str(c), f"{occ[c]:.2f}", f"{n / T:.1%}", chars])

    name = f"layer {layer}, routing head {ns.head}"
    summary = f"occupancy min {occ.min():.2f}, max {occ.max():.2f}, {(occ == 0).sum()} of {k} empty"
    draw(
        window, cl, occ, ns,
        f"{label}\n{name}, k = {k}; on the {T}-byte window (book offset {offset}): {summary}",
    )  # fmt: skip

    console = Console()
    captions = [
        f"every routing head on the {T}-byte window ({label})",
        f"the largest clusters of {name} (␣ space, ↵ newline)",
    ]
    md = [f"# Routing clusters of `{label}` on pg19mini (validation book 0, offset {offset})", ""]
    for caption, rows in zip(captions, (heads, top), strict=True):
        table = Table(*rows[0], title=caption)
        for row in rows[1:]:
            table.add_row(*map(escape, row))
        console.print(table)
        md += [f"{caption[0].upper()}{caption[1:]}:", "", "| " + " | ".join(rows[0]) + " |"]
        md += ["|" + "---|" * len(rows[0])]
        md += ["| " + " | ".join(r.replace("|", "\\|") for r in row) + " |" for row in rows[1:]]
        md += [""]
    ns.out.with_suffix(".md").write_text("\n".join(md))
    console.print(f"wrote {ns.out} and {ns.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
