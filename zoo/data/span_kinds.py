"""The copy probe's windows and spans (:mod:`zoo.probes` measures with them): the text the
windows come from, the windows, and the spans of each kind (``span_kind``, ``--span-kind``).

A model trained to copy one planted format may copy only that format (docs/block_selection.md).
The kinds ask what a model copies:

- ``letters``: uniform over ``a``-``z`` (log2 26 = 4.70 bits per byte for a model that knows the
  alphabet but does not copy). The default, drawn as the probe always drew it: from the
  windows' generator, right after the windows, so registered ``copy_gain`` metrics re-measure
  bit for bit;
- ``uppercase``: ``A``-``Z`` (4.70 bits); ``digits``: ``0``-``9`` (3.32 bits); ``printable``:
  printable ASCII, 0x20-0x7e (95 values, 6.57 bits); ``bytes``: any byte value 1-255 (7.99 bits);
- ``text``: natural text from elsewhere: ``span`` bytes of ANOTHER document of the split (a
  start drawn uniformly over every start in the other documents), or, with one document (a text
  file), of a part of it at least one window (``n`` bytes) away from the window where the
  document has room, else just outside it; moved forward to the next word start (within 64
  bytes, when there is one). No chance level: the control is the model's own bits on the text,
  and a perfect copier saves all of it.

Every kind but ``letters`` draws from its own generator, ``numpy.random.default_rng([seed,
code])``, after the windows are drawn, so a kind's spans depend on the seed, the windows (the
context and the text), the span length and the kind alone: measuring other kinds with it changes
nothing. The windows are the same for every kind, so the kinds' gains pair trial by trial.

The copying curriculum (``task="pg19_copies"``, :mod:`zoo.data.long_range_tasks`) draws its
random spans from these alphabets, by default ``letters`` and ``printable`` alone, and copies
only its training books' text, so that the probe's other kinds and its held-out text measure
copying the curriculum did not plant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import ConfigError

__all__ = [
    "SPAN_KINDS",
    "SpanKind",
    "documents",
    "draw_spans",
    "draw_windows",
    "span_kinds",
    "text_span_starts",
]

WHITESPACE = b" \t\n\r\f\v"
WORD_REACH = 64  # bytes a text span's start may move forward to reach a word start


@dataclass(frozen=True)
class SpanKind:
    """A span kind: what its spans are (for tables), its byte values ``[low, high]`` (``None``
    for text) and the code that seeds its generator (``None``: the windows' generator)."""

    phrase: str
    low: int | None
    high: int | None
    code: int | None

    @property
    def chance(self) -> float | None:
        """Bits per byte of a uniform guess over the alphabet (``None`` for text)."""
        return None if self.low is None else math.log2(self.high - self.low + 1)


SPAN_KINDS: dict[str, SpanKind] = {
    "letters": SpanKind("random lowercase letters", ord("a"), ord("z"), None),
    "uppercase": SpanKind("random uppercase letters", ord("A"), ord("Z"), 1),
    "digits": SpanKind("random digits", ord("0"), ord("9"), 2),
    "printable": SpanKind("random printable ASCII characters (0x20–0x7e)", 0x20, 0x7E, 3),
    "bytes": SpanKind("random bytes (values 1–255)", 1, 255, 4),
    "text": SpanKind(
        "natural text from elsewhere in the text (another document, or a far part of the one)",
        None,
        None,
        5,
    ),  # fmt: skip
}


def span_kinds(kind) -> tuple[str, ...]:
    """``kind`` (a name, or several) as a tuple of distinct known kinds, in the order given.

    Raises:
        ConfigError: an unknown kind, or none.
    """
    kinds = tuple(dict.fromkeys((kind,) if isinstance(kind, str) else tuple(kind)))
    if not kinds:
        raise ConfigError(f"span_kind: give at least one of {', '.join(SPAN_KINDS)}")
    for k in kinds:
        if k not in SPAN_KINDS:
            raise ConfigError(f"unknown span kind {k!r}: the kinds are {', '.join(SPAN_KINDS)}")
    return kinds


def documents(n, dataset, split, text_file, data_dir) -> list[bytes]:
    """The documents the windows come from: ``text_file``'s bytes, or ``split`` of ``dataset``."""
    if text_file is not None:
        path = Path(text_file)
        if not path.is_file():
            raise ConfigError(f"text file {text_file} does not exist")
        data = path.read_bytes()
        if len(data) < n:
            raise ConfigError(
                f"text file {text_file} holds {len(data):,} bytes, fewer than one window of the "
                f"model's context ({n:,} bytes)"
            )
        return [data]
    from zoo.data.byte_corpora import load_byte_corpus
    from zoo.data.images import IMAGE_DATASETS
    from zoo.data.translation import EVAL_SPLITS

    if split not in ("valid", "test"):
        raise ConfigError(f"split must be 'valid' or 'test', not {split!r}")
    if dataset in IMAGE_DATASETS or dataset in EVAL_SPLITS:
        raise ConfigError(
            f"the copy probe plants spans in text; {dataset} is not a byte-level text data set "
            "(give --text-file)"
        )
    docs = load_byte_corpus(dataset, data_dir=data_dir, splits=(split,))[split]
    if not any(len(d) >= n for d in docs):
        raise ConfigError(f"no document of {dataset} {split} holds a window of {n:,} bytes")
    return docs


def draw_windows(docs, n: int, trials: int, seed: int):
    """``trials`` windows ``(trials, n)`` int64, uniform over every window of ``n`` bytes inside
    one document, their ``(document, start)``, and the generator they were drawn from (the
    ``letters`` spans come next from it)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    starts = np.array([max(len(d) - n + 1, 0) for d in docs])  # windows per document
    picks = rng.integers(0, starts.sum(), trials)
    doc = np.searchsorted(np.cumsum(starts), picks, side="right")
    begin = picks - np.concatenate([[0], np.cumsum(starts)])[doc]
    where = [(int(d), int(b)) for d, b in zip(doc, begin, strict=True)]
    windows = torch.tensor(np.stack([np.frombuffer(docs[d], np.uint8, n, b) for d, b in where]))
    return windows.long(), tuple(where), rng


def draw_spans(kind: str, rng, docs, where, n: int, span: int, seed: int):
    """The spans ``(trials, span)`` int64 of ``kind`` for the windows ``where`` (module
    docstring); ``rng``: the windows' generator, which only ``letters`` draws from."""
    import numpy as np
    import torch

    k = SPAN_KINDS[kind]
    if k.code is not None:
        rng = np.random.default_rng([seed, k.code])
    if k.low is not None:
        return torch.from_numpy(rng.integers(k.low, k.high + 1, (len(where), span))).long()
    rows = [np.frombuffer(docs[d], np.uint8, span, s)
            for d, s in text_span_starts(docs, where, n, span, rng)]  # fmt: skip
    return torch.from_numpy(np.stack(rows).astype(np.int64))


def text_span_starts(docs, where, n: int, span: int, rng) -> list[tuple[int, int]]:
    """``(document, start)`` of each trial's ``text`` span, drawn from ``rng`` (module docstring):
    in another document than its window's, else outside its window.

    Raises:
        ConfigError: a window leaves no room for a span outside it in a one-document text.
    """
    import numpy as np

    out = []
    for doc, begin in where:
        places = _text_places([len(d) for d in docs], doc, begin, n, span)
        sizes = np.array([hi - lo + 1 for _, lo, hi in places])
        ends = np.cumsum(sizes)
        pick = int(rng.integers(0, ends[-1]))
        i = int(np.searchsorted(ends, pick, side="right"))
        d, lo, hi = places[i]
        out.append((d, _word_start(docs[d], lo + pick - int(ends[i] - sizes[i]), hi)))
    return out


def _text_places(lengths, doc: int, begin: int, n: int, span: int):
    """``[(document, lo, hi)]``: the starts ``lo..hi`` a text span may take for the window at
    ``begin`` of document ``doc``: every start of the other documents that hold a span, or, with
    none, the starts of ``doc`` at least ``n`` bytes (else 0) outside the window."""
    others = [(d, 0, size - span) for d, size in enumerate(lengths) if d != doc and size >= span]
    if others:
        return others
    size = lengths[doc]
    for gap in (n, 0):
        places = [(doc, 0, begin - span - gap)] if begin - span - gap >= 0 else []
        if begin + n + gap <= size - span:
            places.append((doc, begin + n + gap, size - span))
        if places:
            return places
    raise ConfigError(
        f"the text holds {size:,} bytes: a text span of {span} bytes from outside a window of "
        f"{n:,} needs at least n + 2 span - 1 = {n + 2 * span - 1:,} bytes, or another document"
    )


def _word_start(doc: bytes, start: int, last: int) -> int:
    """The first word start (a non-space byte after a space, or byte 0) at ``start`` or at most
    :data:`WORD_REACH` bytes later and at most ``last``; ``start`` if there is none."""
    for i in range(start, min(start + WORD_REACH, last) + 1):
        if (i == 0 or doc[i - 1] in WHITESPACE) and doc[i] not in WHITESPACE:
            return i
    return start
