"""Bits per byte on the same bytes with more or less context (``zoo evaluate SOURCE --by-context``).

:func:`~zoo.by_position.bits_by_position` shows how the loss falls with the position of a byte in
its window, but each bucket holds other bytes of text: the curve mixes what the model gains from
context with how hard the bytes of that bucket happen to be (about ±0.02 bits on pg19mini's test
books), which is the size of the effects it is asked to show past a few hundred bytes. This
measurement removes that: it scores one fixed set of target bytes again and again, each time
giving the model a window of ``c`` bytes, for every ``c`` in ``contexts`` (the prefix-length
analysis of Sun et al. 2021, "Do Long-Range Language Models Actually Use Long-Range Context?",
on bytes). Any difference between two contexts is then the model's use of the extra bytes, and
its standard error is that of a paired difference.

The targets are blocks of ``target_len`` bytes, one at the end of every non-overlapping window of
``block_spacing`` bytes of every document of the split (default ``max(contexts)``, or more if the
blocks are long), so the largest context costs what one pass over the split does; models of
different contexts measured with the same ``block_spacing`` are scored on the same bytes. A block
is scored at context ``c`` by sliding windows of ``c`` bytes that end inside it, one every
``stride = min(target_len, c // 2)`` bytes, each scoring its last ``stride`` targets: every target
byte is predicted from between ``c - stride + 1`` and ``c`` bytes of its document
(:attr:`ContextProfile.min_context`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from zoo.errors import ConfigError
from zoo.profiles import (
    BY_CONTEXT_FILES,
    ContextProfile,
    default_contexts,
)

__all__ = [
    "bits_by_context",
    "context_table",
    "gain_difference",
    "paired_difference",
    "save_context_profile",
]


def paired_difference(
    a: ContextProfile, context_a: int, b: ContextProfile, context_b: int
) -> tuple[float, float]:
    """``a`` at ``context_a`` minus ``b`` at ``context_b``, in bits per byte, on the blocks both
    scored, and its standard error over the blocks (paired differences): two contexts of one
    model, or two models measured with the same ``block_spacing`` and ``target_len``.

    Raises:
        ConfigError: a context was not measured, a profile has no per-block bits, or the two were
            not measured on the same bytes (data set, split, block spacing, target length, blocks).
    """
    _check_same_bytes(a, b)
    return _mean_and_se(_block_bits(a, context_a) - _block_bits(b, context_b))


def gain_difference(
    a: ContextProfile, b: ContextProfile, short: int, long: int
) -> tuple[float, float]:
    """How much more ``a`` gains than ``b`` from the bytes between ``short`` and ``long``: the
    mean over the blocks of ``(a[short] - a[long]) - (b[short] - b[long])``, in bits per byte, and
    its standard error (paired over blocks, so the difficulty of each block and each model's level
    cancel). Positive: ``a`` uses that stretch of context more.

    Raises:
        ConfigError: as :func:`paired_difference`.
    """
    _check_same_bytes(a, b)
    gain_a = _block_bits(a, short) - _block_bits(a, long)
    return _mean_and_se(gain_a - (_block_bits(b, short) - _block_bits(b, long)))


def _check_same_bytes(a: ContextProfile, b: ContextProfile) -> None:
    same = ("dataset", "split", "block_spacing", "target_len", "blocks")
    if any(getattr(a, f) != getattr(b, f) for f in same):
        raise ConfigError(
            "the two profiles were scored on different bytes: "
            + ", ".join(
                f"{f} {getattr(a, f)} vs {getattr(b, f)}"
                for f in same
                if getattr(a, f) != getattr(b, f)
            )  # fmt: skip
            + "; measure them with the same --block-spacing and --target-len"
        )


def _block_bits(p: ContextProfile, context: int):
    """Each block's bits per byte at ``context``, ``(blocks,)`` float64 (ConfigError if absent)."""
    import torch

    p.at(context)  # raises if not measured
    if not p.block_bits:
        raise ConfigError(f"{p.source}'s profile has no per-block bits: measure it again")
    return torch.tensor(p.block_bits[p.contexts.index(context)], dtype=torch.float64)


def _mean_and_se(diff) -> tuple[float, float]:
    """Mean of paired per-block differences ``(blocks,)`` and its standard error (NaN for one)."""
    se = float(diff.std() / math.sqrt(len(diff))) if len(diff) > 1 else math.nan
    return float(diff.mean()), se


def _windows(docs, contexts, target_len, spacing, blocks):
    """Per context, the windows ``(doc, end, scored, block)``: ``x = doc[end - c : end]``, its last
    ``scored`` targets (``doc[end - scored + 1 .. end]``) counted for ``block``."""
    ends = [(d, e) for d, doc in enumerate(docs) for e in range(spacing, len(doc), spacing)]
    ends = ends[:blocks] if blocks is not None else ends
    per_context = []
    for c in contexts:
        stride = min(target_len, c // 2)
        wins = []
        for b, (d, e) in enumerate(ends):
            lo = e - target_len  # the block's targets are doc[lo + 1 .. e]
            end = lo
            while end < e:
                nxt = min(end + stride, e)
                wins.append((d, nxt, nxt - end, b))
                end = nxt
        per_context.append((c, stride, wins))
    return ends, per_context


def bits_by_context(
    source,
    *,
    contexts: tuple[int, ...] | list[int] | None = None,
    dataset: str = "pg19mini",
    split: str = "test",
    target_len: int = 256,
    block_spacing: int | None = None,
    blocks: int | None = None,
    tokens_per_batch: int = 16_384,
    data_dir: str | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> ContextProfile:
    """Bits per byte of ``source`` (see :func:`~zoo.loading.load_task`) on the same target
    bytes of ``split`` of ``dataset``, given windows of each of ``contexts`` bytes.

    The model runs in fp32, in eval mode; NLL (nats) is summed per block in float64.

    Args:
        contexts: window lengths in bytes, each ``>= 2`` (default :func:`default_contexts` of the
            model's ``max_seq_len``: 64, 128, ... up to it). Past ``max_seq_len`` only for models
            whose positions extend (rotary, sinusoidal, none): extrapolation.
        target_len: target bytes per block.
        block_spacing: one target block at the end of every window of this many bytes (default
            and minimum: how far back a block's windows reach, ``max(contexts)`` when
            ``target_len <= max(contexts) / 2``). Give models of different contexts the same
            value to score them on the same bytes.
        blocks: only the first ``blocks`` target blocks (default: all of the split's).
        tokens_per_batch: window bytes per forward pass (windows of one context are batched).
        device: where the model runs.
        progress: show a progress bar over the batches.

    Returns:
        A :class:`ContextProfile`.

    Raises:
        ConfigError: an unknown split, an image data set, a context below 2, ``target_len``
            below 1, ``block_spacing`` below its minimum, a context past ``max_seq_len`` for a
            model whose positions end there, or a split with no document longer than
            ``block_spacing``;
            CheckpointError / HubError: the model cannot be loaded; DataNotFoundError: the data
            set is not found.
    """
    from zoo.data import ByteTextDataModule
    from zoo.loading import extended, load_task
    from zoo.tasks import CausalLM

    contexts = _checked_contexts(dataset, split, contexts, blocks, target_len)
    model = load_task(source, CausalLM).model
    trained = model.config.max_seq_len
    contexts = contexts or default_contexts(trained)
    largest = contexts[-1]
    # a block's first window at context c starts `c + target_len - stride` bytes before its end
    reach = max(c + target_len - min(target_len, c // 2) for c in contexts)
    spacing = block_spacing or reach
    if spacing < reach:
        raise ConfigError(
            f"block_spacing={spacing} is too short: the windows of a block reach {reach:,} bytes "
            f"back (contexts up to {largest:,}, target_len {target_len}); give at least that"
        )
    if largest > trained:
        model = extended(model, largest, str(source))
    model = model.float().to(device).eval()
    datamodule = ByteTextDataModule(dataset=dataset, data_dir=data_dir, seq_len=spacing)
    datamodule.setup("test" if split == "test" else "validate")
    docs = datamodule.splits[split]
    ends, per_context = _windows(docs, contexts, target_len, spacing, blocks)
    if not ends:
        raise ConfigError(
            f"no document of {dataset} {split} is longer than {spacing:,} bytes: use smaller "
            "contexts or block_spacing"
        )
    description = f"bits by context ({len(ends)} blocks, {len(contexts)} contexts)"
    nats = _nats_per_block(model, docs, per_context, len(ends), tokens_per_batch, device,
                           description, progress)  # fmt: skip
    per_block = nats / target_len / math.log(2)  # (contexts, blocks) bits/byte
    gains = [_mean_and_se(row - per_block[-1]) for row in per_block]
    return ContextProfile(
        source=str(source),
        dataset=dataset,
        split=split,
        max_seq_len=trained,
        contexts=contexts,
        min_context=tuple(c - stride + 1 for c, stride, _ in per_context),
        bits=tuple(round(float(v), 5) for v in per_block.mean(1)),
        gain=tuple(round(g, 5) for g, _ in gains),
        gain_se=tuple(round(se, 5) for _, se in gains),
        target_len=target_len,
        block_spacing=spacing,
        blocks=len(ends),
        targets=len(ends) * target_len,
        block_bits=tuple(tuple(round(float(v), 5) for v in row) for row in per_block),
    )


def _checked_contexts(dataset, split, contexts, blocks, target_len) -> tuple[int, ...] | None:
    """:func:`bits_by_context`'s ConfigErrors that need no model; the contexts sorted, once each."""
    from zoo.data.images import IMAGE_DATASETS

    if split not in ("valid", "test"):
        raise ConfigError(f"split must be 'valid' or 'test', not {split!r}")
    if dataset in IMAGE_DATASETS:
        raise ConfigError(
            f"bits by context measures byte-level text models; {dataset} is an image data set"
        )
    if contexts is not None:
        contexts = tuple(sorted(set(int(c) for c in contexts)))
        if not contexts or contexts[0] < 2:
            raise ConfigError(f"contexts must be 2 bytes or more, got {list(contexts)}")
    if blocks is not None and blocks < 1:
        raise ConfigError(f"blocks must be positive, got {blocks}")
    if target_len < 1:
        raise ConfigError(f"target_len must be positive, got {target_len}")
    return contexts


def _nats_per_block(model, docs, per_context, n_blocks: int, tokens_per_batch: int, device,
                    description: str, progress: bool):  # fmt: skip
    """NLL in nats of each block's target bytes at each context, ``(contexts, blocks)`` float64:
    the windows of :func:`_windows`, batched ``tokens_per_batch // c`` at context ``c``."""
    import torch
    import torch.nn.functional as F
    from rich.progress import Progress

    nats = torch.zeros(len(per_context), n_blocks, dtype=torch.float64)
    steps = sum(math.ceil(len(w) / max(1, tokens_per_batch // c)) for c, _, w in per_context)
    with torch.no_grad(), Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(description, total=steps)
        for i, (c, _, wins) in enumerate(per_context):
            per_batch = max(1, tokens_per_batch // c)
            for k in range(0, len(wins), per_batch):
                batch = wins[k : k + per_batch]
                chunks = [
                    torch.from_numpy(docs[d][e - c : e + 1].astype("int64")) for d, e, _, _ in batch
                ]
                xy = torch.stack(chunks).to(device)  # (B, c + 1)
                logits = model(xy[:, :-1]).logits  # (B, c, V)
                nll = F.cross_entropy(logits.float().transpose(1, 2), xy[:, 1:], reduction="none")
                nll = nll.double().cpu()  # (B, c)
                for j, (_, _, scored, b) in enumerate(batch):
                    nats[i, b] += nll[j, c - scored :].sum()
                bar.advance(task)
    return nats


def _describe(p: ContextProfile) -> str:
    text = (
        f"Bits per byte on the same {p.targets:,} bytes of {p.dataset} {p.split} ({p.blocks:,} "
        f"blocks of {p.target_len} bytes, one at the end of every {p.block_spacing:,}-byte window), "
        f"scored by `{p.source}` with windows of each context length. At context c every byte "
        'is predicted from at least "fewest bytes" and at most c bytes of its book. "Gain" '
        f"is what the largest context ({p.contexts[-1]:,}) saves over this one, ± its standard "
        "error over the blocks (paired differences)."
    )
    if any(p.extrapolated(i) for i in range(len(p.contexts))):
        text += (
            f" The model was trained on windows of {p.max_seq_len:,} bytes: longer contexts are "
            "extrapolation."
        )
    return text


def context_table(profile: ContextProfile) -> str:
    """``profile`` as markdown: what was measured, then one row per context."""
    p = profile
    lines = [
        _describe(p),
        "",
        "| context | fewest bytes | bits/byte | gain ± s.e. |",
        "|---|---|---|---|",
    ]
    for i, c in enumerate(p.contexts):
        mark = " (extrapolated)" if p.extrapolated(i) else ""
        gain = "–" if i == len(p.contexts) - 1 else f"{p.gain[i]:+.4f} ± {p.gain_se[i]:.4f}"
        lines.append(f"| {c:,}{mark} | {p.min_context[i]:,} | {p.bits[i]:.4f} | {gain} |")
    return "\n".join(lines) + "\n"


def _to_json(profile: ContextProfile) -> str:
    """The profile as indented JSON, each context's per-block bits on one line."""
    d = profile.to_dict()
    rows = d.pop("block_bits")
    head = json.dumps(d, indent=2, ensure_ascii=False)[: -len("\n}")]
    body = ",\n".join("    " + json.dumps(list(r)) for r in rows)
    return head + ',\n  "block_bits": [' + (f"\n{body}\n  " if rows else "") + "]\n}\n"


def save_context_profile(
    profile: ContextProfile, out_dir: str | os.PathLike, *, label: str | None = None
) -> list[Path]:
    """Write ``by_context.md`` (:func:`context_table`), ``by_context.json`` and ``by_context.png``
    (:func:`~zoo.drawing.plot_context_profiles`) into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, js, png = (out / f for f in BY_CONTEXT_FILES)
    md.write_text(context_table(profile))
    js.write_text(_to_json(profile))
    from zoo.drawing import plot_context_profiles

    plot_context_profiles([(label or profile.source, profile)], png)
    return [md, js, png]
