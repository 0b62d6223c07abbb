"""Every picture the zoo draws, apart from the models, patterns and metrics it shows.

- :func:`draw_pattern`: a sparse attention pattern like Child et al. 2019's Figure 3;
- :func:`draw_patterns_on_image`: which pixels of an image one pixel attends to, per pattern;
- :func:`plot_position_profiles`: bits per byte by position in the window (``zoo evaluate
  --by-position``);
- :func:`plot_context_profiles`: bits per byte of the same bytes against context length (``zoo
  evaluate --by-context``);
- :func:`draw_attention_maps`: source x target attention maps, side by side (the lecture's slides
  draw them this way; ``zoo translate --attention-map``).

matplotlib (Agg backend) is imported only when a picture is drawn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from zoo.attention.patterns import AttentionPattern, get_pattern
from zoo.errors import ConfigError

if TYPE_CHECKING:
    from zoo.profiles import ContextProfile, CopyProbe, CopyProbes, PositionProfile

__all__ = [
    "AttentionMap",
    "plot_bench_card",
    "draw_attention_maps",
    "draw_pattern",
    "draw_patterns_on_image",
    "plot_context_profiles",
    "plot_copy_probe",
    "plot_position_profiles",
]


def _pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` to the PNG ``path`` (parents created), close it, return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


class AttentionMap(NamedTuple):
    """One panel: ``weights`` ``(T, S)`` (row ``t``: the attention while producing output token
    ``t``), the ``source`` tokens labelling the columns and the ``output`` tokens the rows."""

    title: str
    weights: Tensor
    source: Sequence[str]
    output: Sequence[str]


def draw_attention_maps(
    maps: Sequence[AttentionMap],
    path: str | os.PathLike,
    *,
    title: str | None = None,
    columns: int | None = None,
) -> Path:
    """Draw ``maps`` side by side into the PNG ``path``, ``columns`` panels per row (default: one
    row): darker = more attention, and exact zeros (what sparse mappings give) white, so the
    support is visible. Returns the path.

    Raises:
        ValueError: no maps, a map whose weights do not match its labels, or ``columns < 1``.
    """
    plt = _pyplot()

    if not maps:
        raise ValueError("draw_attention_maps needs at least one map")
    if columns is not None and columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    for m in maps:
        if tuple(m.weights.shape) != (len(m.output), len(m.source)):
            raise ValueError(
                f"{m.title}: weights of shape {tuple(m.weights.shape)} do not match "
                f"{len(m.output)} output and {len(m.source)} source tokens"
            )
    cols = min(columns or len(maps), len(maps))
    rows = -(-len(maps) // cols)
    width = cols * (0.32 * max(len(m.source) for m in maps) + 1.2)
    height = rows * (0.32 * max(len(m.output) for m in maps) + 1.8)
    fig, axes = plt.subplots(rows, cols, figsize=(max(width, 4), max(height, 3)), squeeze=False)
    for ax in axes.flat[len(maps) :]:
        ax.axis("off")
    for ax, m in zip(axes.flat, maps, strict=False):
        w = m.weights.detach().float().cpu().numpy()
        ax.imshow(w, cmap="Greys", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
        ax.set_xticks(range(len(m.source)), labels=list(m.source), rotation=90, fontsize=8)
        ax.set_yticks(range(len(m.output)), labels=list(m.output), fontsize=8)
        support = (w > 0).sum(1).mean()
        ax.set_title(f"{m.title}\n(mean support {support:.1f} of {w.shape[1]})", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def draw_pattern(
    name: str,
    path: str | Path,
    n: int = 64,
    block_size: int = 4,
    query: int | None = None,
    head: int = 0,
    **params: int | bool,
) -> Path:
    """Save a PNG of pattern ``name`` like the paper's Figure 3.

    Left: the ``(n, n)`` connectivity matrix (rows are queries), coloured by component (A1, A2,
    both) with the computed blocks of ``block_size`` shaded. Right: the positions that ``query``
    (default: the last) attends to, laid out in rows of width ``stride`` (``width`` for
    ``local_2d``, else ``sqrt(n)``).
    """
    plt = _pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    pattern = get_pattern(name, **params)
    n_heads = head + 1
    factorized = "component" not in params and name in ("strided", "fixed")
    parts = [get_pattern(name, **params, component=k) for k in (1, 2)] if factorized else [pattern]

    def take(p: AttentionPattern, x: Tensor) -> Tensor:
        return x[head] if p.per_head else x

    m1, *rest = (take(p, p.mask(n, n_heads)) for p in parts)
    m2 = rest[0] if rest else torch.zeros_like(m1)
    blocks = take(pattern, pattern.layout(n, block_size, n_heads))
    computed = blocks.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)[:n, :n]
    # 0 nothing, 1 computed block only, 2 A1, 3 A2, 4 both
    image = computed.long()
    image[m1] = 2
    image[m2] = 3
    image[m1 & m2] = 4
    cmap = ListedColormap(["white", "#e8e8f0", "#4c72b0", "#dd8452", "#55a868"])

    width = params.get("stride") or params.get("width") or int(math.isqrt(n))
    query = n - 1 if query is None else query
    rows = math.ceil(n / width)
    grid = torch.zeros(rows * width, dtype=torch.long)
    grid[:n] = image[query]
    grid[query] = 5
    grid_cmap = ListedColormap(["white", "#e8e8f0", "#4c72b0", "#dd8452", "#55a868", "black"])

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 4.4), gridspec_kw={"width_ratios": [1, 1]})
    ax0.imshow(image, cmap=cmap, vmin=0, vmax=4, interpolation="nearest")
    ax0.set_title(
        f"{pattern.name}\nconnectivity (rows: queries), blocks of {block_size}", fontsize=8
    )
    ax0.set_xlabel("key j")
    ax0.set_ylabel("query i")
    ax1.imshow(grid.view(rows, width), cmap=grid_cmap, vmin=0, vmax=5, interpolation="nearest")
    ax1.set_title(f"keys of query {query} (black), rows of width {width}", fontsize=8)
    ax1.set_xticks([])
    ax1.set_yticks([])
    handles = [
        Patch(color=col, label=lab)
        for col, lab in zip(
            cmap.colors[1:], ["computed block, masked", "A1", "A2", "A1 and A2"], strict=True
        )
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _save(fig, path)


def draw_patterns_on_image(
    patterns: dict[str, AttentionPattern],
    image: np.ndarray,
    query_pixel: tuple[int, int],
    path: str | Path,
) -> Path:
    """Save a PNG with one panel per pattern: which pixels of ``image`` one pixel attends to.

    ``image``: ``(H, W, C)`` uint8, read as the zoo's raster sequence (channels innermost). The
    query is the last channel of ``query_pixel`` (row, column); a pixel is shown in colour if the
    query attends to any of its channels, greyed out otherwise, and the query pixel is outlined.
    Returns the path written.
    """
    plt = _pyplot()

    H, W, C = image.shape
    n = H * W * C
    query = (query_pixel[0] * W + query_pixel[1]) * C + C - 1
    colour = image.astype(np.float32) / 255
    grey = 0.35 + 0.3 * colour.mean(-1, keepdims=True).repeat(C, -1)
    if C == 1:
        colour, grey = colour.repeat(3, -1), grey.repeat(3, -1)
    fig, axes = plt.subplots(1, len(patterns), figsize=(2.6 * len(patterns), 3.0), squeeze=False)
    for ax, (title, pattern) in zip(axes[0], patterns.items(), strict=True):
        keys = pattern.mask_mod(torch.zeros(()), torch.tensor(query), torch.arange(n))  # (n,) bool
        seen = keys.view(H, W, C).any(-1).numpy()[..., None]
        ax.imshow(np.where(seen, colour, grey * 0.6), interpolation="nearest")
        r, c = query_pixel
        ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="red", lw=1.5))
        ax.set_title(f"{title}\n{int(seen.sum())} of {H * W} pixels", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return _save(fig, path)


def plot_position_profiles(
    profiles: Sequence[tuple[str, PositionProfile]],
    path: str | os.PathLike,
    *,
    title: str | None = None,
) -> Path:
    """A PNG line plot of bits per byte against position in the window (bucket centres, log x
    axis), one line per ``(label, profile)``; positions past a profile's trained length are shaded
    as extrapolation, with a dashed line at that length. Returns the path written.

    Raises:
        ConfigError: no profiles.
    """
    plt = _pyplot()
    if not profiles:
        raise ConfigError("plot_position_profiles needs at least one (label, profile)")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    marked = set()
    for label, p in profiles:
        pts = [(x, b) for x, b in zip(p.centres, p.bits, strict=True) if b is not None]
        (line,) = ax.plot(*zip(*pts, strict=True), marker="o", markersize=3, label=label)
        if p.extrapolated and p.max_seq_len not in marked:
            marked.add(p.max_seq_len)
            ax.axvline(p.max_seq_len, color=line.get_color(), linestyle="--", linewidth=1)
            ax.axvspan(p.max_seq_len, p.context, color=line.get_color(), alpha=0.08)
            ax.text(
                p.max_seq_len, 0.98, f" trained length {p.max_seq_len:,}: extrapolation →",
                color=line.get_color(), transform=ax.get_xaxis_transform(), fontsize=7,
                va="top", ha="left",
            )  # fmt: skip
    if title is None:
        first = profiles[0][1]
        what = first.source if len(profiles) == 1 else f"{len(profiles)} models"
        title = f"bits per byte by position: {what} on {first.dataset} {first.split}"
    return _finish_bits_plot(
        fig, ax, path, title, "position of the predicted byte in the window (bucket centre)"
    )


def plot_context_profiles(
    profiles: Sequence[tuple[str, ContextProfile]],
    path: str | os.PathLike,
    *,
    title: str | None = None,
) -> Path:
    """A PNG of bits per byte on the same target bytes against the context length (log x axis),
    one line per ``(label, profile)``, with ± one standard error of each point's gain over the
    profile's largest context as error bars; contexts past a profile's trained length are drawn
    hollow (extrapolation). Returns the path written.

    Raises:
        ConfigError: no profiles.
    """
    plt = _pyplot()
    if not profiles:
        raise ConfigError("plot_context_profiles needs at least one (label, profile)")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, p in profiles:
        drawn = ax.errorbar(p.contexts, p.bits, yerr=p.gain_se, marker="o", markersize=4,
                            capsize=2, label=label)  # fmt: skip
        colour = drawn.lines[0].get_color()
        for i, c in enumerate(p.contexts):
            if p.extrapolated(i):
                ax.plot([c], [p.bits[i]], marker="o", markersize=7, markerfacecolor="white",
                        color=colour)  # fmt: skip
    if title is None:
        first = profiles[0][1]
        what = first.source if len(profiles) == 1 else f"{len(profiles)} models"
        title = f"{what} on {first.dataset} {first.split}: the same {first.targets:,} bytes at each context"
    return _finish_bits_plot(
        fig, ax, path, title, "context: bytes the model is given (window length)"
    )


def _finish_bits_plot(fig, ax, path: str | os.PathLike, title: str, xlabel: str) -> Path:
    """Bits per byte against a length on a log-2 x axis: labels, grid, legend (beside the axes
    when more than 4 curves leave it no free corner inside), saved to ``path``."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("bits per byte")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if len(ax.get_legend_handles_labels()[1]) > 4:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        fig.set_size_inches(fig.get_size_inches()[0] + 2.2, fig.get_size_inches()[1])
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_copy_probe(
    probe: CopyProbe | CopyProbes, path: str | os.PathLike, *, label: str | None = None
) -> Path:
    """A PNG of two panels against the distance (log-2 axis): the repeat's and the control's bits
    per byte, and the gain with its 95% interval; for several span kinds (a
    :class:`~zoo.profiles.CopyProbes`) a line per kind in each, one colour per kind. Returns the
    path written."""
    from matplotlib.ticker import FuncFormatter

    p = probe
    several = hasattr(p, "probes")
    fig, (bits, gain) = _pyplot().subplots(1, 2, figsize=(10, 4.2))
    for c, k in enumerate(p.probes if several else (p,)):
        bits.plot(
            k.distances,
            k.repeat,
            marker="o",
            color=f"C{c}",
            label=k.span_kind if several else "repeat: first copy d bytes back",
        )
        bits.plot(
            k.distances,
            [k.control] * len(k.distances),
            linestyle="--",
            color=f"C{c}",
            label="_nolegend_" if several else "control: no first copy",
        )
        low = [g - lo for g, lo in zip(k.gain, k.gain_low, strict=True)]
        high = [hi - g for g, hi in zip(k.gain, k.gain_high, strict=True)]
        gain.errorbar(
            k.distances,
            k.gain,
            yerr=[low, high],
            marker="o",
            capsize=3,
            color=f"C{c}",
            label=k.span_kind if several else "gain, 95% t-interval",
        )
    bits.set_ylabel(f"bits per byte on the span's last {p.span - p.cue} bytes")
    if several:
        bits.set_title("solid: repeat (first copy d bytes back); dashed: control", fontsize=8)
    gain.axhline(0.0, color="grey", linewidth=0.8)
    gain.set_ylabel("retrieval gain: control − repeat (bits/byte)")
    for ax in (bits, gain):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
        ax.set_xlabel("distance d between the copies (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8 if not several or len(p.probes) < 4 else 7)
    kinds = p.span_kinds if several else (() if p.span_kind == "letters" else (p.span_kind,))
    fig.suptitle(
        f"copy probe: {label or p.source} on {p.text}, {p.trials} windows of "
        f"{p.max_seq_len:,} bytes, span {p.span}, cue {p.cue}"
        + (f", span kind{'s' if several else ''} {', '.join(kinds)}" if kinds else ""),
        fontsize=9,
    )
    fig.tight_layout()
    return _save(fig, path)


def plot_bench_card(card: Any, path: str | os.PathLike, title: str) -> Path:
    """``bench.png``: time and (where measured) peak memory of a ``zoo bench`` card's forward pass
    (``card``: a :class:`zoo.bench.BenchCard`, which this module does not import: it sits above),
    generation and training step against the sequence length, log-log, under ``title``. Returns
    the path written."""
    from matplotlib.ticker import NullFormatter

    mib = 2**20

    n = [r.seq_len for r in card.rows]
    series = [  # (label, time in ms, peak bytes), one colour each in both panels
        ("forward", [r.forward_s * 1e3 for r in card.rows],
         [r.forward_peak_bytes for r in card.rows]),
        ("generation (ms per token)", [1e3 / r.generate_tokens_per_s for r in card.rows],
         [r.generate_peak_bytes for r in card.rows]),
        ("train step", [r.train_step_s * 1e3 for r in card.rows],
         [r.train_peak_bytes for r in card.rows]),
    ]  # fmt: skip
    has_memory = any(b for _, _, peaks in series for b in peaks)
    fig, axes = _pyplot().subplots(
        1, 2 if has_memory else 1, figsize=(10 if has_memory else 5.5, 4)
    )
    axes = list(axes) if has_memory else [axes]
    for i, (label, ms, peaks) in enumerate(series):
        axes[0].loglog(n, ms, marker="o", color=f"C{i}", label=label)
        pts = [(a, b / mib) for a, b in zip(n, peaks, strict=True) if b]
        if has_memory and pts:
            axes[1].loglog(*zip(*pts, strict=True), marker="o", color=f"C{i}", label=label)
    axes[0].set_ylabel("time (ms)")
    if has_memory:
        axes[1].set_ylabel("peak memory above the model (MiB)")
    for ax in axes:
        ax.set_xlabel("sequence length (tokens)")
        ax.xaxis.set_minor_formatter(NullFormatter())  # label the measured lengths only
        ax.set_xticks(n, [str(v) for v in n])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}, {card.precision}", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
