"""Bits per byte on the same bytes with more or less context (``zoo evaluate SOURCE --by-context``).

:func:`~zoo.evaluation.bits_by_position` shows how the loss falls with the position of a byte in
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

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import CheckpointError, ConfigError

__all__ = [
    "BY_CONTEXT_FILES",
    "ContextProfile",
    "bits_by_context",
    "context_table",
    "default_contexts",
    "gain_difference",
    "load_context_profile",
    "paired_difference",
    "read_profile",
    "save_context_profile",
]

BY_CONTEXT_FILES = ("by_context.md", "by_context.json", "by_context.png")


@dataclass(frozen=True)
class ContextProfile:
    """Bits per byte of the same target bytes at several context lengths.

    ``bits[i]`` is the bits per byte of all ``targets`` target bytes when the model is given
    windows of ``contexts[i]`` bytes (every byte predicted from ``min_context[i]`` to
    ``contexts[i]`` bytes). ``gain[i]`` is ``bits[i] - bits[-1]``: what the largest context saves
    over this one, in bits per byte, and ``gain_se[i]`` its standard error over the ``blocks``
    target blocks (the paired differences of each block's bits per byte; blocks of one book are
    not independent, so read it as a lower bound). ``block_bits[i][b]`` is block ``b``'s bits per
    byte at context ``i``, for paired comparisons between contexts or models
    (:func:`paired_difference`). Contexts past ``max_seq_len`` (the trained length) are
    extrapolation.
    """

    source: str
    dataset: str
    split: str
    max_seq_len: int
    contexts: tuple[int, ...]
    min_context: tuple[int, ...]
    bits: tuple[float, ...]
    gain: tuple[float, ...]
    gain_se: tuple[float, ...]
    target_len: int  # target bytes per block
    block_spacing: int  # one block at the end of every window of this many bytes
    blocks: int
    targets: int  # target bytes, the same at every context
    block_bits: tuple[tuple[float, ...], ...] = ()  # per context, each block's bits per byte

    def __post_init__(self) -> None:
        for name in ("contexts", "min_context", "bits", "gain", "gain_se"):  # from JSON: lists
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "block_bits", tuple(tuple(row) for row in self.block_bits))

    def extrapolated(self, i: int) -> bool:
        """Whether context ``i`` is longer than the model's trained windows."""
        return self.contexts[i] > self.max_seq_len

    def at(self, context: int) -> float:
        """Bits per byte at ``context``. Raises ConfigError if it was not measured."""
        if context not in self.contexts:
            raise ConfigError(
                f"context {context} was not measured; measured: {list(self.contexts)}"
            )
        return self.bits[self.contexts.index(context)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def command(self, source: str | None = None) -> str:
        """The ``zoo evaluate`` command that measures this profile again for ``source`` (default
        :attr:`source`): the same contexts, blocks and split, so the same bytes (``--blocks``,
        if it was given, is not recorded)."""
        args = [f"zoo evaluate {source or self.source} --by-context"]
        if self.contexts != default_contexts(self.max_seq_len):
            args.append(" ".join(str(c) for c in self.contexts))
        if self.split != "test":
            args.append(f"--split {self.split}")
        if self.target_len != 256:
            args.append(f"--target-len {self.target_len}")
        args.append(f"--block-spacing {self.block_spacing}")
        return " ".join(args)


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


def default_contexts(max_seq_len: int, smallest: int = 64) -> tuple[int, ...]:
    """Powers of two from ``smallest`` up to ``max_seq_len``, and ``max_seq_len`` itself."""
    out, c = [], smallest
    while c < max_seq_len:
        out.append(c)
        c *= 2
    return (*out, max_seq_len)


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
    """Bits per byte of ``source`` (see :func:`~zoo.evaluation.load_task`) on the same target
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
    import torch
    import torch.nn.functional as F
    from rich.progress import Progress

    from zoo.data import ByteTextDataModule
    from zoo.data.images import IMAGE_DATASETS
    from zoo.evaluation import _extended, load_task
    from zoo.tasks import CausalLM

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
        model = _extended(model, largest, str(source))
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
    nats = torch.zeros(len(contexts), len(ends), dtype=torch.float64)  # per context and block
    steps = sum(math.ceil(len(w) / max(1, tokens_per_batch // c)) for c, _, w in per_context)
    with torch.no_grad(), Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"bits by context ({len(ends)} blocks, {len(contexts)} contexts)",
                            total=steps)  # fmt: skip
        for i, (c, _, wins) in enumerate(per_context):
            per_batch = max(1, tokens_per_batch // c)
            for k in range(0, len(wins), per_batch):
                batch = wins[k : k + per_batch]
                chunks = [
                    torch.from_numpy(docs[d][e - c : e + 1].astype("int64")) for d, e, _, _ in batch
                ]
                xy = torch.stack(chunks).to(device)  # (B, c + 1)
                logits = model(xy[:, :-1])  # (B, c, V)
                nll = F.cross_entropy(logits.float().transpose(1, 2), xy[:, 1:], reduction="none")
                nll = nll.double().cpu()  # (B, c)
                for j, (_, _, scored, b) in enumerate(batch):
                    nats[i, b] += nll[j, c - scored :].sum()
                bar.advance(task)
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


def load_context_profile(path: str | os.PathLike) -> ContextProfile:
    """The profile :func:`save_context_profile` wrote to ``path`` (``by_context.json`` or its
    folder).

    Raises:
        CheckpointError: the file does not exist, or is not a profile (corrupt JSON, other fields).
    """
    return read_profile(path, ContextProfile, "by_context.json", "--by-context")


def read_profile(path: str | os.PathLike, cls: type, file_name: str, flag: str):
    """``cls(**json)`` from ``path`` (``file_name``, or the folder holding it): the loader of the
    profiles that ``zoo evaluate SOURCE FLAG`` saves.

    Raises:
        CheckpointError: the file does not exist, or is not such a profile.
    """
    path = Path(path)
    if path.is_dir():
        path = path / file_name
    try:
        return cls(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} does not exist: measure it first (zoo evaluate SOURCE {flag})."
        ) from None
    except (ValueError, TypeError) as e:  # not JSON, or not the profile's fields
        raise CheckpointError(
            f"{path} is not a {flag.removeprefix('--')} profile ({type(e).__name__}: {e}): "
            f"measure it again (zoo evaluate SOURCE {flag})."
        ) from None
