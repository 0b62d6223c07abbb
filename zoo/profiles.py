"""The measured profiles of a model, as data: bits per byte by position in the window
(:class:`PositionProfile`, ``zoo evaluate --by-position``), by context length
(:class:`ContextProfile`, ``--by-context``) and the copy probe's retrieval by distance
(:class:`CopyProbe`, ``--probe copy``; :class:`CopyProbes` for several span kinds side by
side), and their readers. Below the code that measures them
(:mod:`zoo.evaluation`, :mod:`zoo.by_context`, :mod:`zoo.probes`) and the code that draws them
(:mod:`zoo.drawing`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import CheckpointError, ConfigError

__all__ = [
    "BY_CONTEXT_FILES",
    "BY_POSITION_FILES",
    "COPY_PROBE_FILES",
    "ContextProfile",
    "CopyProbe",
    "CopyProbes",
    "PositionProfile",
    "default_contexts",
    "default_distances",
    "load_copy_probe",
    "load_context_profile",
    "load_position_profile",
    "read_profile",
]

BY_POSITION_FILES = ("by_position.md", "by_position.json", "by_position.png")


BY_CONTEXT_FILES = ("by_context.md", "by_context.json", "by_context.png")


@dataclass(frozen=True)
class PositionProfile:
    """Bits per byte by position of the predicted byte in its evaluation window.

    Bucket ``i`` holds the positions ``edges[i] <= t < edges[i + 1]``; ``bits[i]`` is its bits per
    byte (``None`` if no byte was scored there) over ``counts[i]`` scored bytes. Positions
    ``t >= max_seq_len`` (the trained length) are extrapolation; ``extrapolated`` says whether the
    profile has any (``context > max_seq_len``).
    """

    source: str
    dataset: str
    split: str
    max_seq_len: int  # the length the model was trained on
    context: int  # the evaluation window
    extrapolated: bool
    edges: tuple[int, ...]
    bits: tuple[float | None, ...]
    counts: tuple[int, ...]
    bits_per_byte: float  # over every scored byte
    targets: int  # bytes scored
    windows: int  # windows measured
    stride: int | None = None  # sliding windows: one every `stride` bytes (None: non-overlapping)

    def __post_init__(self) -> None:
        for name in ("edges", "bits", "counts"):  # from JSON: lists
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def bucket_extrapolated(self, i: int) -> bool:
        """Whether bucket ``i`` holds positions past the trained length."""
        return self.edges[i + 1] > self.max_seq_len

    @property
    def centres(self) -> tuple[float, ...]:
        """The middle of each bucket (``(lo + hi) / 2``, positive: fit for a log axis)."""
        return tuple((lo + hi) / 2 for lo, hi in zip(self.edges[:-1], self.edges[1:], strict=True))

    def rows(self) -> list[tuple[str, int, float | None, bool]]:
        """``(positions, bytes scored, bits/byte, extrapolated)`` per bucket, for tables."""
        return [
            (f"{lo}–{hi - 1}", n, b, self.bucket_extrapolated(i))
            for i, (lo, hi, n, b) in enumerate(
                zip(self.edges[:-1], self.edges[1:], self.counts, self.bits, strict=True)
            )
        ]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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


def default_contexts(max_seq_len: int, smallest: int = 64) -> tuple[int, ...]:
    """Powers of two from ``smallest`` up to ``max_seq_len``, and ``max_seq_len`` itself."""
    out, c = [], smallest
    while c < max_seq_len:
        out.append(c)
        c *= 2
    return (*out, max_seq_len)


def load_position_profile(path: str | os.PathLike) -> PositionProfile:
    """The profile :func:`save_position_profile` wrote to ``path`` (``by_position.json``, or the
    folder holding it).

    Raises:
        CheckpointError: the file does not exist, or is not a profile (corrupt JSON, other fields).
    """
    return read_profile(path, PositionProfile, "by_position.json", "--by-position")


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


# --- the copy probe (zoo.probes measures it) ---
COPY_PROBE_FILES = ("copy_probe.md", "copy_probe.json", "copy_probe.png")
# the probe's settings when not given (CopyProbe.command leaves them out)
DEFAULTS = {"split": "test", "span": 32, "cue": 8, "trials": 32, "seed": 0, "span_kind": "letters"}


@dataclass(frozen=True)
class CopyProbe:
    """The copy probe's result (module docstring): bits per byte on the scored bytes of the span
    (its last ``span - cue``), per distance.

    ``repeat[i]`` is the mean over the trials at ``distances[i]``, ``control`` the mean without the
    first copy (the same at every distance), ``gain[i] = control - repeat[i]`` and
    ``[gain_low[i], gain_high[i]]`` its 95% Student-t interval over the trials' paired gains, all
    in bits per byte. ``trial_control[t]`` and ``trial_repeat[i][t]`` are trial ``t``'s values,
    for paired comparisons; ``windows[t]`` is where its window starts: ``(document, byte)`` of the
    split's documents (document 0 for a text file). ``span_kind`` is what the span is made of
    (:data:`zoo.data.span_kinds.SPAN_KINDS`; files written before it existed are ``letters``).
    """

    source: str
    dataset: str | None  # None: a text file
    split: str | None
    text_file: str | None
    max_seq_len: int  # n: the window, the model's context
    span: int  # m: bytes of the span_kind
    cue: int  # k: bytes of the second copy not scored
    trials: int
    seed: int
    distances: tuple[int, ...]
    repeat: tuple[float, ...]
    control: float
    gain: tuple[float, ...]
    gain_low: tuple[float, ...]
    gain_high: tuple[float, ...]
    span_kind: str = "letters"  # letters, uppercase, digits, printable, bytes or text
    windows: tuple[tuple[int, int], ...] = ()
    trial_control: tuple[float, ...] = ()
    trial_repeat: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:  # from JSON: lists
        for name in ("distances", "repeat", "gain", "gain_low", "gain_high", "trial_control"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("windows", "trial_repeat"):
            object.__setattr__(self, name, tuple(tuple(r) for r in getattr(self, name)))

    @property
    def text(self) -> str:
        """Where the windows come from: ``pg19mini test`` or the file."""
        return f"{self.dataset} {self.split}" if self.text_file is None else self.text_file

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """JSON, one line per field (per distance for ``trial_repeat``)."""
        d = self.to_dict()
        repeat = d.pop("trial_repeat")
        lines = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in d.items()]
        body = ",\n".join("    " + json.dumps(list(r)) for r in repeat)
        lines.append('  "trial_repeat": [' + (f"\n{body}\n  " if body else "") + "]")
        return "{\n" + ",\n".join(lines) + "\n}\n"

    @classmethod
    def from_json(cls, text: str) -> CopyProbe:
        """The probe :meth:`to_json` wrote. Raises ValueError / TypeError if it is not one."""
        return cls(**json.loads(text))

    def renamed(self, source: str) -> CopyProbe:
        """The same probe, calling the model ``source``."""
        return dataclasses.replace(self, source=source)

    def command(self, source: str | None = None) -> str:
        """The ``zoo evaluate`` command that measures this probe again for ``source`` (default
        :attr:`source`): the same windows, spans and distances."""
        args = [f"zoo evaluate {source or self.source} --probe copy"]
        if self.text_file is not None:
            args.append(f"--text-file {self.text_file}")
        elif self.split != DEFAULTS["split"]:
            args.append(f"--split {self.split}")
        for key in ("span", "cue", "trials", "seed"):
            if getattr(self, key) != DEFAULTS[key]:
                args.append(f"--{key} {getattr(self, key)}")
        if self.distances != default_distances(self.max_seq_len, self.span):
            args.append("--distances " + " ".join(str(d) for d in self.distances))
        if self.span_kind != DEFAULTS["span_kind"]:
            args.append(f"--span-kind {self.span_kind}")
        return " ".join(args)


# what every kind of a CopyProbes shares (the kinds differ only in their spans and bits)
SHARED = ("source", "dataset", "split", "text_file", "max_seq_len", "span", "cue", "trials",
          "seed", "distances", "windows")  # fmt: skip


@dataclass(frozen=True)
class CopyProbes:
    """The copy probe on several span kinds, side by side (``--span-kind A B ...``): one
    :class:`CopyProbe` per kind, ``probes``, in the order measured, all on the same windows with
    the same settings (the attributes in :data:`SHARED` read as theirs), so the kinds' gains are
    paired trial by trial. ``probe["text"]`` is one kind's.

    Its JSON holds the shared ``source`` and ``span_kinds``, then ``kinds``: each kind's
    :class:`CopyProbe` as its own JSON object.

    Raises:
        ValueError: no probe, a kind twice, or probes that differ in a shared setting.
    """

    probes: tuple[CopyProbe, ...]

    def __post_init__(self) -> None:  # from JSON: dicts
        probes = tuple(p if isinstance(p, CopyProbe) else CopyProbe(**p) for p in self.probes)
        object.__setattr__(self, "probes", probes)
        kinds = [p.span_kind for p in probes]
        if not probes or len(set(kinds)) < len(kinds):
            raise ValueError(f"CopyProbes needs distinct span kinds, got {kinds}")
        for key in SHARED:
            if len({repr(getattr(p, key)) for p in probes}) > 1:
                raise ValueError(f"the kinds of a CopyProbes differ in {key}")

    def __getattr__(self, name: str):
        if name in SHARED:
            return getattr(self.probes[0], name)
        raise AttributeError(f"CopyProbes has no attribute {name!r}")

    def __getitem__(self, kind: str) -> CopyProbe:
        for p in self.probes:
            if p.span_kind == kind:
                return p
        raise KeyError(f"no span kind {kind!r} in this probe (it has {list(self.span_kinds)})")

    @property
    def span_kinds(self) -> tuple[str, ...]:
        return tuple(p.span_kind for p in self.probes)

    @property
    def text(self) -> str:
        return self.probes[0].text

    def renamed(self, source: str) -> CopyProbes:
        """The same probes, calling the model ``source``."""
        return CopyProbes(tuple(p.renamed(source) for p in self.probes))

    def to_json(self) -> str:
        """``source``, ``span_kinds`` and ``kinds`` (each kind's :meth:`CopyProbe.to_json`)."""
        kinds = ",\n".join(
            f"    {json.dumps(p.span_kind)}: " + p.to_json().strip().replace("\n", "\n    ")
            for p in self.probes
        )
        return (f'{{\n  "source": {json.dumps(self.source, ensure_ascii=False)},\n'
                f'  "span_kinds": {json.dumps(list(self.span_kinds))},\n'
                f'  "kinds": {{\n{kinds}\n  }}\n}}\n')  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> CopyProbes:
        """The probes :meth:`to_json` wrote. Raises ValueError / TypeError if they are not."""
        return cls(tuple(json.loads(text)["kinds"].values()))

    def command(self, source: str | None = None) -> str:
        """The ``zoo evaluate`` command that measures these kinds again for ``source``."""
        one = dataclasses.replace(self.probes[0], span_kind=DEFAULTS["span_kind"])
        return one.command(source) + " --span-kind " + " ".join(self.span_kinds)


def default_distances(n: int, span: int, smallest: int = 16) -> tuple[int, ...]:
    """Powers of two ``d`` from ``smallest`` with ``span <= d <= n - span``: every distance at
    which two copies of the span fit in a window of ``n`` bytes without overlapping."""
    out, d = [], smallest
    while d <= n - span:
        if d >= span:
            out.append(d)
        d *= 2
    return tuple(out)


def load_copy_probe(path: str | os.PathLike) -> CopyProbe | CopyProbes:
    """The probe :func:`save_copy_probe` wrote to ``path`` (``copy_probe.json`` or its folder):
    a :class:`CopyProbe` (one span kind; every file written before there were kinds), or a
    :class:`CopyProbes` (several, side by side).

    Raises:
        CheckpointError: the file does not exist, or is not a copy probe.
    """
    path = Path(path)
    if path.is_dir():
        path = path / COPY_PROBE_FILES[1]
    try:
        text = path.read_text()
        data = json.loads(text)
        return (CopyProbes if isinstance(data, dict) and "kinds" in data else CopyProbe).from_json(
            text
        )
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} does not exist: measure it first (zoo evaluate SOURCE --probe copy)."
        ) from None
    except (ValueError, TypeError) as e:
        raise CheckpointError(
            f"{path} is not a copy probe ({type(e).__name__}: {e}): measure it again "
            "(zoo evaluate SOURCE --probe copy)."
        ) from None
