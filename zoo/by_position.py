"""Bits per byte by the position of the predicted byte in its evaluation window
(``zoo evaluate SOURCE --by-position``): how the loss falls as a byte gets more context, on the
model's own windows. :mod:`zoo.by_context` removes the bucket-to-bucket difference in the bytes
themselves; this is the quick look. The profile's data type is :class:`zoo.profiles.PositionProfile`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from zoo.data.windows import EvalWindows
from zoo.errors import ConfigError
from zoo.evaluation import require_bytes, require_positive_slice
from zoo.loading import extended, load_task
from zoo.profiles import BY_POSITION_FILES, PositionProfile

__all__ = ["bits_by_position", "position_table", "save_position_profile"]


# --- bits per byte by position in the window (zoo evaluate --by-position) -------------------------
def bits_by_position(
    source,
    *,
    dataset: str = "pg19mini",
    split: str = "test",
    context: int | None = None,
    bucket: int = 64,
    windows: int | None = None,
    first_bytes: int | None = None,
    batch_size: int | None = None,
    data_dir: str | None = None,
    device: str = "cpu",
    progress: bool = True,
    stride: int | None = None,
) -> PositionProfile:
    """Bits per byte of ``source`` (see :func:`load_task`) on ``split`` of ``dataset``, by the
    position of the predicted byte in its window.

    The windows are :func:`evaluate`'s (non-overlapping, per document, the last one of each
    document shorter), of ``context`` bytes; every scored byte counts at its position, so the
    buckets past the length of a short last window have fewer bytes. The model runs in fp32, in
    eval mode; the NLL is summed per position in float64 and summed again per bucket.

    Args:
        context: the window (default: the model's ``max_seq_len``). Larger windows need positions
            that extend (rotary, sinusoidal, none): the model is rebuilt with
            ``max_seq_len=context`` and the same weights (a routing model keeps its routing
            window); the positions past the trained length are marked as extrapolation.
        bucket: positions per bucket: ``[0, bucket), [bucket, 2 bucket), ...`` up to ``context``.
        windows, first_bytes: only the first windows of the split, as in :func:`evaluate`
            (``first_bytes``: the windows that cover that many bytes: ``ceil(first_bytes /
            context)``, or with ``stride`` ``1 + ceil((first_bytes - context) / stride)``).
        batch_size: windows per batch (default: 16, or 1 for contexts of 2048 bytes and more).
        device: where the model runs.
        progress: show a progress bar over the batches.
        stride: sliding windows (:class:`~zoo.data.windows.EvalWindows`): a window every ``stride``
            bytes scoring only its last ``stride`` bytes (all of a document's first window), so
            every byte past a document's first ``context`` is predicted from at least
            ``context - stride`` bytes: the overall ``bits_per_byte`` of a model at its best
            context, comparable across models of different contexts. ``None``: non-overlapping.

    Raises:
        ConfigError: an unknown split, a non-positive ``context``, ``bucket``, ``windows`` or
            ``first_bytes``, ``bucket > context``, a ``stride`` outside ``[1, context]``, or
            ``context > max_seq_len`` for a model whose positions end there (learned,
            factorized); CheckpointError / HubError: the model cannot be loaded;
            DataNotFoundError: the data set is not found, or its split has no byte to score.
    """
    from torch.utils.data import DataLoader, Subset

    from zoo.data import ByteTextDataModule
    from zoo.tasks import CausalLM

    _check_arguments(dataset, split, context, bucket, windows, first_bytes)
    model = load_task(source, CausalLM).model
    trained = model.config.max_seq_len
    context = context or trained
    if bucket > context:
        raise ConfigError(f"bucket={bucket} is larger than the context, {context} bytes")
    if stride is not None and not 1 <= stride <= context:
        raise ConfigError(f"stride must be in [1, context={context}], got {stride}")
    if context > trained:
        model = extended(model, context, str(source))
    model = model.float().to(device).eval()
    if first_bytes is not None:  # the windows covering the first bytes (of the first book)
        windows = math.ceil(first_bytes / context)
        if stride is not None:  # the first window scores `context` bytes, each later one `stride`
            windows = 1 + math.ceil(max(first_bytes - context, 0) / stride)
    datamodule = ByteTextDataModule(dataset=dataset, data_dir=data_dir, seq_len=context)
    datamodule.setup("test" if split == "test" else "validate")
    require_bytes(datamodule, dataset, split, data_dir)
    ds = EvalWindows(datamodule.splits[split], context, stride)
    n = len(ds) if windows is None else min(windows, len(ds))
    bs = batch_size or (1 if context >= 2048 else 16)
    loader = DataLoader(Subset(ds, range(n)), batch_size=bs, shuffle=False)
    description = f"bits by position ({n} windows of {context} bytes)"
    sums, counts = _nll_by_position(model, loader, context, device, description, progress)
    total = int(counts.sum())
    if total == 0:
        raise ConfigError(f"no bytes were scored ({n} windows of {split} of {dataset})")
    edges = (*range(0, context, bucket), context)
    bucket_sums = [float(sums[lo:hi].sum()) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    bucket_counts = [int(counts[lo:hi].sum()) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return PositionProfile(
        source=str(source),
        dataset=dataset,
        split=split,
        max_seq_len=trained,
        context=context,
        extrapolated=context > trained,
        edges=edges,
        bits=tuple(
            round(s / c / math.log(2), 5) if c else None
            for s, c in zip(bucket_sums, bucket_counts, strict=True)
        ),
        counts=tuple(bucket_counts),
        bits_per_byte=round(float(sums.sum()) / total / math.log(2), 5),
        targets=total,
        windows=n,
        stride=stride,
    )


def _check_arguments(dataset, split, context, bucket, windows, first_bytes) -> None:
    """:func:`bits_by_position`'s ConfigErrors that need no model."""
    from zoo.data.images import IMAGE_DATASETS

    if split not in ("valid", "test"):
        raise ConfigError(f"split must be 'valid' or 'test', not {split!r}")
    if dataset in IMAGE_DATASETS:
        raise ConfigError(
            f"bits by position measures byte-level text models; {dataset} is an image data set "
            f"(measure it with zoo evaluate SOURCE --dataset {dataset})"
        )
    if windows is not None and first_bytes is not None:
        raise ConfigError("give windows or first_bytes, not both")
    require_positive_slice(windows, first_bytes)
    if context is not None and context <= 0:
        raise ConfigError(f"context must be positive, got {context}")
    if bucket <= 0:
        raise ConfigError(f"bucket must be positive, got {bucket}")
    if context is not None and bucket > context:
        raise ConfigError(f"bucket={bucket} is larger than the context, {context} bytes")


def _nll_by_position(model, loader, context: int, device, description: str, progress: bool):
    """The NLL in nats summed over ``loader``'s windows at each position ``(context,)`` float64,
    and the scored targets there ``(context,)`` int64 (targets ``-100`` are not scored)."""
    import torch
    import torch.nn.functional as F
    from rich.progress import track

    sums = torch.zeros(context, dtype=torch.float64)
    counts = torch.zeros(context, dtype=torch.int64)
    with torch.no_grad():
        for x, y in track(loader, description=description, disable=not progress):
            x, y = x.to(device), y.to(device)
            logits = model(x).logits  # (B, T, V)
            nll = F.cross_entropy(
                logits.float().flatten(0, 1), y.flatten(), reduction="none", ignore_index=-100
            ).view_as(y)  # nats; 0 at ignored targets
            sums += nll.double().sum(0).cpu()
            counts += (y != -100).sum(0).cpu()
    return sums, counts


def _describe(profile: PositionProfile) -> str:
    p = profile
    text = (
        f"Bits per byte by position in the window: `{p.source}` on {p.dataset} {p.split}, "
        f"{p.windows:,} windows of {p.context:,} bytes ({p.targets:,} bytes scored), "
        f"{p.bits_per_byte:.4f} bits/byte overall. The byte at position t is predicted from the "
        "t + 1 bytes before it in its window."
    )
    if p.stride is not None:
        text += (
            f" Sliding windows: one every {p.stride:,} bytes, each scoring its last {p.stride:,}"
            f" bytes (a document's first window all of its bytes), so every byte past a"
            f" document's first {p.context:,} has at least {p.context - p.stride:,} bytes before it."
        )
    if p.extrapolated:
        text += (
            f" The model was trained on windows of {p.max_seq_len:,} bytes: positions "
            f"{p.max_seq_len:,} and beyond are extrapolation."
        )
    return text


def position_table(profile: PositionProfile) -> str:
    """``profile`` as markdown: a sentence saying what was measured, then a table of the buckets
    (rows past the trained length marked "(extrapolated)")."""
    lines = [
        _describe(profile),
        "",
        "| positions | bytes scored | bits/byte |",
        "|---|---|---|",
    ]
    for positions, n, bits, extrapolated in profile.rows():
        mark = " (extrapolated)" if extrapolated else ""
        value = "–" if bits is None else f"{bits:.4f}"
        lines.append(f"| {positions}{mark} | {n:,} | {value} |")
    return "\n".join(lines) + "\n"


def save_position_profile(
    profile: PositionProfile, out_dir: str | os.PathLike, *, label: str | None = None
) -> list[Path]:
    """Write ``by_position.md`` (:func:`position_table`), ``by_position.json`` (the profile) and
    ``by_position.png`` (:func:`plot_position_profiles`) into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, js, png = (out / f for f in BY_POSITION_FILES)
    md.write_text(position_table(profile))
    js.write_text(json.dumps(profile.to_dict(), indent=2, ensure_ascii=False) + "\n")
    from zoo.drawing import plot_position_profiles

    plot_position_profiles([(label or profile.source, profile)], png)
    return [md, js, png]
