"""Pictures of attention: source x target attention maps (the lecture's slides draw them this way).

Drawing lives here, apart from the models and the attention code; matplotlib is imported only when
a picture is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from torch import Tensor

__all__ = ["AttentionMap", "draw_attention_maps"]


class AttentionMap(NamedTuple):
    """One panel: ``weights`` ``(T, S)`` (row ``t``: the attention while producing output token
    ``t``), the ``source`` tokens labelling the columns and the ``output`` tokens the rows."""

    title: str
    weights: Tensor
    source: Sequence[str]
    output: Sequence[str]


def draw_attention_maps(
    maps: Sequence[AttentionMap], path: str | os.PathLike, *, title: str | None = None
) -> Path:
    """Draw ``maps`` side by side into the PNG ``path``: darker = more attention, and exact zeros
    (what sparse mappings give) white, so the support is visible. Returns the path.

    Raises:
        ValueError: no maps, or a map whose weights do not match its labels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not maps:
        raise ValueError("draw_attention_maps needs at least one map")
    for m in maps:
        if tuple(m.weights.shape) != (len(m.output), len(m.source)):
            raise ValueError(
                f"{m.title}: weights of shape {tuple(m.weights.shape)} do not match "
                f"{len(m.output)} output and {len(m.source)} source tokens"
            )
    width = sum(0.32 * len(m.source) + 1.2 for m in maps)
    height = 0.32 * max(len(m.output) for m in maps) + 1.8
    fig, axes = plt.subplots(1, len(maps), figsize=(max(width, 4), max(height, 3)), squeeze=False)
    for ax, m in zip(axes[0], maps, strict=True):
        w = m.weights.detach().float().cpu().numpy()
        ax.imshow(w, cmap="Greys", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
        ax.set_xticks(range(len(m.source)), labels=list(m.source), rotation=90, fontsize=8)
        ax.set_yticks(range(len(m.output)), labels=list(m.output), fontsize=8)
        support = (w > 0).sum(1).mean()
        ax.set_title(f"{m.title}\n(mean support {support:.1f} of {w.shape[1]})", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
