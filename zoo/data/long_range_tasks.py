"""Long-range tasks at byte level: retrieval at a controlled distance (the examples; the
LightningDataModule and the accuracy by distance are in :mod:`zoo.data.long_range`).

Every task writes ``n_pairs`` items twice in a sequence of ``seq_len`` bytes: a first occurrence at
byte ``p`` and a second at ``p + d``. The second occurrence starts with a part that names the item
(the key, or the cue), and the bytes after it can only be predicted by retrieving the first
occurrence ``d`` bytes back. ``d`` is the distance between the starts of the two occurrences (the
copy probe's convention, :mod:`zoo.probes`).

- ``task="mqar"``: multi-query associative recall (Arora et al. 2023, "Zoology", §3). The
  definition there: a sequence holds key-value pairs, keys and values drawn from disjoint
  vocabularies, followed by several queries, each a key of one of the pairs; at every query the
  model must output the value paired with that key. Several queries per sequence ("multi-query")
  make the task dense enough to train on, unlike single-query associative recall. Here a key is
  ``key_len`` uppercase letters (distinct within a sequence), a value ``value_len`` digits, the
  filler lowercase letters (``alphabet="letters"``) or any other byte (``"bytes"``), so no byte of
  one can be taken for the other. Scored: the ``value_len`` value bytes after each query.
  Deviation: Zoology puts all pairs first and draws the query positions from a power law; here
  pairs and queries are interleaved in filler so that each query's distance is drawn on its own
  (below), and a key's first occurrence is always its pair.
- ``task="copy"``: copy at distance, the task behind induction heads (Olsson et al. 2022, "In-context
  Learning and Induction Heads") and the copy probe: a span of ``span`` random bytes of the filler's
  own alphabet written at ``p`` and again at ``p + d``. Scored: the second copy's bytes after its
  first ``cue`` (the cue locates the first copy; the filler alone cannot).
- ``task="pg19_repeats"``: language modelling with retrieval opportunities. Training windows of
  pg19mini's training books (read by :func:`zoo.data.byte_corpora.load_byte_corpus`, as
  :class:`~zoo.data.ByteTextDataModule` reads them); with probability ``rate`` a window gets
  ``n_pairs`` planted repeats, each a span of ``span`` random letters (the copy probe's kind) or
  bytes written twice. Every target is scored, as in plain language modelling. Validation and test
  are pg19mini's own (every byte of the split once, :class:`~zoo.data.windows.EvalWindows`), so
  ``val/bpb`` and ``test/bpb`` compare with every pg19mini recipe; retrieval is measured apart,
  by :func:`~zoo.data.long_range.task_accuracy_by_distance` on ``n_eval`` windows of the split
  with planted repeats.
- ``task="pg19_copies"``: a copying curriculum, language modelling on windows of pg19mini's
  training books in which, with probability ``rate``, ``n_pairs`` segments recur later in the
  window the way names and phrases recur in books: each copy is ``L`` bytes long, ``L`` drawn
  log-uniformly over ``[min_span, max_span]`` (8-256 by default), and written again ``d`` bytes
  after its first occurrence, ``d`` drawn as below from ``[max(min_distance, L), max_distance]``
  (default: from ``L``, the copies touching, to the farthest that fits). Most copies are the
  window's own text: the ``L`` bytes at ``p`` overwrite those at ``p + d``. A share
  ``random_share`` (0.25) are random spans of one of ``random_kinds`` (uniform per copy; default
  ``letters`` and ``printable``, the kinds of :mod:`zoo.data.span_kinds`) written at both places.
  Why: a curriculum that plants one format teaches that format (a model trained on
  ``pg19_repeats``' random letters copies random letters far better than natural text repeated
  as far back: docs/block_selection.md); copying text, of varied lengths, at varied distances,
  is what a reader of books meets. Held out for the probe:
  its ``uppercase``, ``digits`` and ``bytes`` kinds are not among the default ``random_kinds``,
  and its ``text`` spans come from held-out text (pg19mini test, another book), never from these
  training books. Every target is scored; validation and test are pg19mini's own, as for
  ``pg19_repeats``, and :func:`~zoo.data.long_range.task_accuracy_by_distance` scores each copy's
  ``min_span - c`` bytes after its first ``c = min(cue, min_span // 2)`` (the same count for
  every length).

Distances are drawn per item, log-uniformly over the integers in ``[min_distance, max_distance]``
(``P(d) ∝ log(1 + 1/d)``: about as many items in each power-of-two bucket), and each item's first
occurrence uniformly among the places where both occurrences land on free bytes; a distance with
no free place left is drawn again (so the distribution is the log-uniform one conditioned on
fitting; a check at construction guarantees that ``min_distance`` always fits). With
``distance_multiple`` = ``m`` > 1 only the multiples of ``m`` are drawn, by the same law over
``d / m``: for a pattern that reaches far back only at multiples of a stride, such as the Sparse
Transformer's strided attention (Child et al. 2019, §4.2), which copies only at multiples of its
stride (docs/results/retrieval.md).

Batches are ``(x, y)``, int64 ``(batch_size, seq_len)``, ``y`` = ``x`` shifted by one with ``-100``
(:data:`IGNORE_INDEX`, which :class:`zoo.tasks.CausalLM` ignores) on the targets not scored, so
``train/bpb`` and ``val/bpb`` are bits per scored byte. Training examples are new at every step,
example ``i`` drawn from ``(seed, i)``; the validation and test sets are ``n_eval`` fixed examples
that depend on the task's settings but not on ``seed``, so runs of different seeds are measured on
the same examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from zoo.config import require_positive
from zoo.data.span_kinds import SPAN_KINDS
from zoo.data.windows import IGNORE_INDEX
from zoo.errors import ConfigError

__all__ = [
    "LONG_RANGE_TASKS",
    "LongRangeTask",
    "TaskExample",
    "TaskExamples",
    "place",
]

LONG_RANGE_TASKS = ("mqar", "copy", "pg19_repeats", "pg19_copies")
KEYS = np.arange(ord("A"), ord("Z") + 1, dtype=np.uint8)  # mqar keys
VALUES = np.arange(ord("0"), ord("9") + 1, dtype=np.uint8)  # mqar values
LETTERS = np.arange(ord("a"), ord("z") + 1, dtype=np.uint8)
BYTES = np.arange(256, dtype=np.uint8)
# pg19_copies: the random spans' alphabets, the copy probe's span kinds but text
RANDOM_KINDS = {
    name: np.arange(kind.low, kind.high + 1, dtype=np.uint8)
    for name, kind in SPAN_KINDS.items()
    if kind.low is not None
}
MAX_KEY_LEN = 8  # 26**8 keys: drawn without replacement as one int64
# the evaluation sets draw from (stream, i), the training examples from (0, seed, i)
SPLIT_STREAM = {"valid": 1, "test": 2}


@dataclass(frozen=True)
class TaskExample:
    """One sequence of a task: ``x``, ``y`` int64 ``(seq_len,)`` (``y`` = ``x`` shifted by one,
    ``-100`` where not scored), ``first`` and ``second`` int64 ``(n,)`` where each item's two
    occurrences start in ``x``, and ``scored`` int64 ``(n, m)``: the indices of ``y`` that hold
    each item's ``m`` bytes after its key or cue (what :func:`task_accuracy_by_distance` checks).
    ``length`` int64 ``(n,)``: each item's bytes per occurrence; ``kind``: pg19_copies: what each
    copy is (``text``, or a kind of :data:`RANDOM_KINDS`), ``()`` for the other tasks."""

    x: Tensor
    y: Tensor
    first: np.ndarray
    second: np.ndarray
    scored: np.ndarray
    length: np.ndarray | None = None
    kind: tuple[str, ...] = ()

    @property
    def distance(self) -> np.ndarray:  # (n,) bytes
        return self.second - self.first


@dataclass(frozen=True)
class LongRangeTask:
    """The settings of a task (module docstring; the arguments of
    :class:`~zoo.data.long_range.LongRangeTaskDataModule`); ``seq_len=None`` until the model's
    context is known."""

    task: str = "mqar"
    seq_len: int | None = None
    n_pairs: int = 4  # items per sequence (pairs, spans, planted repeats)
    key_len: int = 2  # mqar: uppercase letters per key
    value_len: int = 2  # mqar: digits per value
    span: int = 32  # copy, pg19_repeats: bytes per span
    cue: int = 8  # copy, pg19_repeats: bytes of the second copy not scored
    min_distance: int | None = None  # None: the item's width (the occurrences touch)
    max_distance: int | None = None  # None: seq_len - width (the farthest that fits)
    alphabet: str = "letters"  # filler and spans: lowercase letters, or bytes
    rate: float = 0.5  # pg19_repeats: probability that a training window gets repeats
    distance_multiple: int = 1  # distances are drawn among the multiples of this
    min_span: int = 8  # pg19_copies: the shortest copy (bytes)
    max_span: int = 256  # pg19_copies: the longest copy
    random_share: float = 0.25  # pg19_copies: the share of copies that are random spans
    random_kinds: tuple[str, ...] = ("letters", "printable")  # pg19_copies: their kinds

    def __post_init__(self) -> None:  # from YAML: a list
        object.__setattr__(self, "random_kinds", tuple(self.random_kinds))

    @property
    def width(self) -> int:
        """Bytes per occurrence of an item (pg19_copies: of its longest)."""
        if self.task == "pg19_copies":
            return self.max_span
        return self.key_len + self.value_len if self.task == "mqar" else self.span

    @property
    def cue_width(self) -> int:
        """Bytes at the start of a second occurrence that are not scored (key or cue)."""
        if self.task == "pg19_copies":
            return min(self.cue, self.min_span // 2)
        return self.key_len if self.task == "mqar" else self.cue

    @property
    def distances(self) -> tuple[int, int]:
        """``(min_distance, max_distance)`` with the defaults filled in (needs ``seq_len``)."""
        lo = self.width if self.min_distance is None else self.min_distance
        hi = self.seq_len - self.width if self.max_distance is None else self.max_distance
        return lo, hi

    @property
    def drawn_distances(self) -> tuple[int, int]:
        """The shortest and longest distance drawn: :attr:`distances` rounded inwards to
        multiples of ``distance_multiple``."""
        m = self.distance_multiple
        lo, hi = _multiples_within(*self.distances, m)
        return lo * m, hi * m

    @property
    def chance(self) -> float:
        """The byte accuracy of a uniform guess over the scored bytes' alphabet."""
        if self.task == "mqar":
            return 1 / len(VALUES)
        if self.task == "pg19_copies":  # mostly text: no alphabet, a guess over every byte
            return 1 / len(BYTES)
        return 1 / len(LETTERS if self.alphabet == "letters" else BYTES)

    def filler(self) -> np.ndarray:
        """The bytes the filler is drawn from (uniformly)."""
        if self.alphabet == "letters":
            return LETTERS
        if self.task == "mqar":  # any byte that is neither a key's nor a value's
            return np.setdiff1d(BYTES, np.concatenate([KEYS, VALUES]))
        return BYTES

    def check(self) -> LongRangeTask:
        """``self``, or a one-line :class:`ConfigError` naming the setting that cannot work; the
        checks that need ``seq_len`` wait for it."""
        name = f"LongRangeTaskDataModule(task={self.task!r})"
        if self.task not in LONG_RANGE_TASKS:
            raise ConfigError(f"unknown task {self.task!r}; the tasks are {list(LONG_RANGE_TASKS)}")
        if self.alphabet not in ("letters", "bytes"):
            raise ConfigError(
                f"{name}: alphabet must be 'letters' or 'bytes', got {self.alphabet!r}"
            )
        require_positive(
            name,
            seq_len=self.seq_len,
            n_pairs=self.n_pairs,
            key_len=self.key_len,
            value_len=self.value_len,
            span=self.span,
            cue=self.cue,
            min_distance=self.min_distance,
            max_distance=self.max_distance,
            distance_multiple=self.distance_multiple,
            min_span=self.min_span,
            max_span=self.max_span,
        )
        if self.task == "mqar" and self.key_len > MAX_KEY_LEN:
            raise ConfigError(f"{name}: key_len must be at most {MAX_KEY_LEN}, got {self.key_len}")
        if self.task == "mqar" and self.n_pairs > len(KEYS) ** self.key_len:
            raise ConfigError(
                f"{name}: n_pairs={self.n_pairs} distinct keys of {self.key_len} "
                f"letters do not exist (at most {26**self.key_len})"
            )
        if self.task in ("copy", "pg19_repeats") and self.cue >= self.span:
            raise ConfigError(
                f"{name}: cue={self.cue} leaves nothing of span={self.span} to score;"
                " the cue must be shorter than the span"
            )
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigError(f"{name}: rate must be in [0, 1], got {self.rate}")
        if self.task == "pg19_copies":
            self._check_copies(name)
        return self if self.seq_len is None else self._check_fit(name)

    def _check_copies(self, name: str) -> None:
        """pg19_copies' own settings (not those that need ``seq_len``)."""
        if self.max_span < self.min_span:
            raise ConfigError(f"{name}: max_span={self.max_span} is below min_span={self.min_span}")
        if not 0.0 <= self.random_share <= 1.0:
            raise ConfigError(f"{name}: random_share must be in [0, 1], got {self.random_share}")
        unknown = [k for k in self.random_kinds if k not in RANDOM_KINDS]
        if unknown or (self.random_share > 0 and not self.random_kinds):
            raise ConfigError(
                f"{name}: random_kinds must be some of {', '.join(RANDOM_KINDS)}"
                + (f", not {unknown[0]!r}" if unknown else " (none given, random_share > 0)")
            )

    def _check_fit(self, name: str) -> LongRangeTask:
        """The checks that need ``seq_len``: the items fit at their distances."""
        T, w, n = self.seq_len, self.width, self.n_pairs
        lo, hi = self.distances
        copies = self.task == "pg19_copies"
        if copies:  # the longest copy's shortest distance: copies never overlap their repeat
            lo = max(lo, w)
        elif lo < w:
            raise ConfigError(
                f"{name}: min_distance={lo} is shorter than an item ({w} bytes): the "
                f"two occurrences would overlap; give at least {w}"
            )
        if hi + w > T:
            raise ConfigError(
                f"{name}: max_distance={hi} + the item's {w} bytes is past "
                f"seq_len={T}; give max_distance <= {T - w}"
            )
        if hi < lo and copies:
            within = f"before max_distance={hi}" if self.max_distance else f"in seq_len={T}"
            raise ConfigError(
                f"{name}: a copy of max_span={w} bytes repeated at least {lo} bytes later does "
                f"not fit {within}; lower max_span (at most {T // 2} for seq_len={T}) or raise "
                "seq_len"
            )
        if hi < lo:
            raise ConfigError(f"{name}: max_distance={hi} is below min_distance={lo}")
        m = self.distance_multiple
        first, top = _multiples_within(lo, hi, m)
        if top < first:
            raise ConfigError(
                f"{name}: no multiple of distance_multiple={m} lies in [{lo}, "
                f"{hi}]; widen the distances or lower distance_multiple"
            )
        need = first * m + w + 4 * (n - 1) * (2 * w - 1)  # the worst case of placing n - 1 first
        if T < need and not copies:  # pg19_copies leaves out a copy that no longer fits
            raise ConfigError(
                f"{name}: n_pairs={n} items of {w} bytes at min_distance={first * m} do not "
                f"surely fit in seq_len={T} (that needs {need}); lower n_pairs or "
                "raise seq_len"
            )
        return self

    def example(
        self, rng: np.random.Generator, text: np.ndarray | None = None, rate: float = 1.0
    ) -> TaskExample:
        """A sequence drawn from ``rng``: for ``pg19_repeats`` and ``pg19_copies`` a window of
        ``text`` (uint8), with repeats or copies planted at probability ``rate``."""
        if self.task == "pg19_copies":
            return self._copies(rng, text, rate)
        T, w, n = self.seq_len, self.width, self.n_pairs
        if self.task == "pg19_repeats":
            start = rng.integers(0, len(text) - T)
            chunk = text[start : start + T + 1].copy()  # (T + 1,)
            n = n if rng.random() < rate else 0
        else:
            chunk = rng.choice(self.filler(), T + 1)  # (T + 1,)
        first, second = place(rng, T, n, w, *self.distances, multiple=self.distance_multiple)
        if self.task == "mqar":
            ids = rng.choice(len(KEYS) ** self.key_len, n, replace=False)  # distinct keys
            digits = ids[:, None] // len(KEYS) ** np.arange(self.key_len)[::-1] % len(KEYS)
            values = rng.choice(VALUES, (n, self.value_len))
            items = np.concatenate([KEYS[digits], values], axis=1)  # (n, w)
        else:
            items = rng.choice(LETTERS if self.alphabet == "letters" else BYTES, (n, w))
        offsets = np.arange(w)
        chunk[first[:, None] + offsets] = items
        chunk[second[:, None] + offsets] = items
        # y[t] = chunk[t + 1]: the byte at second + c is the target at second + c - 1
        scored = second[:, None] + np.arange(self.cue_width, w) - 1  # (n, m)
        chunk = torch.from_numpy(chunk.astype(np.int64))
        x, y = chunk[:-1], chunk[1:].clone()
        if self.task != "pg19_repeats":  # only the retrieved bytes are scored
            keep = torch.zeros(T, dtype=torch.bool)
            keep[torch.from_numpy(scored.ravel())] = True
            y[~keep] = IGNORE_INDEX
        return TaskExample(x, y, first, second, scored, np.full(n, w, dtype=np.int64))

    def _copies(self, rng: np.random.Generator, text: np.ndarray, rate: float) -> TaskExample:
        """A ``pg19_copies`` sequence (module docstring): a window of ``text`` in which, at
        probability ``rate``, ``n_pairs`` segments recur later, the longest placed first; a copy
        with no free place left is left out."""
        T = self.seq_len
        start = rng.integers(0, len(text) - T)
        chunk = text[start : start + T + 1].copy()  # (T + 1,)
        n = self.n_pairs if rng.random() < rate else 0
        lengths = sorted((_log_uniform(rng, self.min_span, self.max_span) for _ in range(n)),
                         reverse=True)  # fmt: skip
        busy = np.zeros(T, dtype=bool)
        placed: list[tuple[int, int, int, str]] = []  # (first, second, length, kind)
        for w in lengths:
            lo = max(w, self.min_distance or w)
            hi = self.max_distance or T - w
            where = _place_one(rng, busy, w, lo, hi, self.distance_multiple)
            if where is None:
                continue
            p, q = where
            kind = "text"
            if rng.random() < self.random_share:
                kind = self.random_kinds[int(rng.integers(len(self.random_kinds)))]
                chunk[p : p + w] = rng.choice(RANDOM_KINDS[kind], w)
            chunk[q : q + w] = chunk[p : p + w]
            placed.append((p, q, w, kind))
        first, second, length = (np.array([c[i] for c in placed], dtype=np.int64) for i in range(3))
        # the same count of bytes for every copy: its min_span - cue bytes after its cue
        scored = second[:, None] + np.arange(self.cue_width, self.min_span) - 1  # (n, m)
        chunk = torch.from_numpy(chunk.astype(np.int64))
        return TaskExample(chunk[:-1], chunk[1:].clone(), first, second, scored, length,
                           tuple(item[3] for item in placed))  # fmt: skip


def place(
    rng: np.random.Generator,
    seq_len: int,
    n: int,
    width: int,
    lo: int,
    hi: int,
    multiple: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Starts ``(first, second)``, int64 ``(n,)``, of ``n`` items of ``width`` bytes written twice
    in ``[0, seq_len)`` without overlap, ``second - first`` a multiple of ``multiple`` in
    ``[lo, hi]``, drawn as the module docstring says. Needs
    ``seq_len >= lo' + width + 4 (n - 1)(2 width - 1)``, ``lo'`` the first multiple from ``lo``
    (:meth:`LongRangeTask.check`): each placed item blocks at most ``4 (2 width - 1)`` starts."""
    busy = np.zeros(seq_len, dtype=bool)
    first, second = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for j in range(n):
        first[j], second[j] = _place_one(rng, busy, width, lo, hi, multiple)
    return first, second


def _place_one(
    rng: np.random.Generator, busy: np.ndarray, width: int, lo: int, hi: int, multiple: int
) -> tuple[int, int] | None:
    """Starts ``(first, second)`` of one item of ``width`` bytes written twice on free bytes of
    ``busy`` (which it marks), drawn as :func:`place` says; ``None`` if no distance in
    ``[lo, hi]`` leaves a free place (``busy`` unchanged)."""
    lo, hi = _multiples_within(lo, hi, multiple)  # in units of multiple
    if hi < lo or len(busy) < width:
        return None
    taken = np.concatenate([[0], np.cumsum(busy)])
    free = taken[width:] == taken[:-width]  # (seq_len - width + 1,) [p, p + width) is free
    ok = _both_free(free, multiple * _log_uniform(rng, lo, hi))
    for _ in range(8):  # usually a free place exists: the drawn distance stands
        if ok[1].any():
            break
        ok = _both_free(free, multiple * _log_uniform(rng, lo, hi))
    else:  # crowded: draw among the distances that have a free place (the same law)
        lags = _pairs_per_lag(free)[multiple * lo : multiple * hi + 1 : multiple]
        fits = np.flatnonzero(lags > 0.5) + lo
        if not len(fits):
            return None
        weights = np.log1p(1 / fits)
        ok = _both_free(free, multiple * int(rng.choice(fits, p=weights / weights.sum())))
    d, starts = ok[0], np.flatnonzero(ok[1])
    p = int(rng.choice(starts))
    busy[p : p + width] = busy[p + d : p + d + width] = True
    return p, p + d


def _multiples_within(lo: int, hi: int, multiple: int) -> tuple[int, int]:
    """``(a, b)``: ``a * multiple`` and ``b * multiple`` are the first and last multiples of
    ``multiple`` in ``[lo, hi]`` (``b < a`` when there is none)."""
    return -(-lo // multiple), hi // multiple


def _log_uniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer in ``[lo, hi]`` with ``P(d) ∝ log(1 + 1/d)``: floor of a log-uniform real."""
    return min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))


def _both_free(free: np.ndarray, d: int) -> tuple[int, np.ndarray]:
    """``(d, ok)``: ``ok[p]`` when both ``[p, p + w)`` and ``[p + d, p + d + w)`` are free."""
    return d, free[: len(free) - d] & free[d:]


def _pairs_per_lag(free: np.ndarray) -> np.ndarray:
    """``c[d]`` = the number of ``p`` with ``free[p]`` and ``free[p + d]`` (an autocorrelation,
    by FFT)."""
    size = 2 * len(free)
    f = np.fft.rfft(free.astype(np.float64), size)
    return np.fft.irfft(f * np.conj(f), size)[: len(free)]


class TaskExamples(Dataset):
    """Examples ``i = 0 .. n - 1`` of a task, example ``i`` drawn from ``entropy + (i,)`` alone;
    items are ``(x, y)`` and :meth:`example` gives the whole :class:`TaskExample`. Any index is
    valid (the training sampler goes past ``n`` in later epochs)."""

    def __init__(
        self,
        spec: LongRangeTask,
        entropy: tuple[int, ...],
        n: int,
        text: np.ndarray | None = None,
        rate: float = 1.0,
    ) -> None:
        self.spec, self.entropy, self.n, self.text, self.rate = spec, entropy, n, text, rate

    def __len__(self) -> int:
        return self.n

    def example(self, i: int) -> TaskExample:
        rng = np.random.default_rng([*self.entropy, i])
        return self.spec.example(rng, self.text, self.rate)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        e = self.example(i)
        return e.x, e.y
