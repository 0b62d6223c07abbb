"""What an entry of ``checkpoints.yaml`` holds: the JSON Schema (:data:`SCHEMA`) that
:func:`zoo.hub.registry.load_registry` validates the file against, and the typed, frozen view of an
entry (:class:`CheckpointEntry`, its :class:`Metric` list and :class:`Retirement`).

:data:`METRICS` names every metric a checkpoint may register (unit, what is scored, how a smaller
measurement is described); :data:`TASKS` gives each task's headline metric.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.files import contained_path

__all__ = [
    "CAVEATS",
    "FILE_PATTERN",
    "METRICS",
    "NAME_PATTERN",
    "REPO_ID_PATTERN",
    "SCHEMA",
    "TASKS",
    "CheckpointEntry",
    "Metric",
    "MetricKind",
    "Retirement",
]

_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

# The names the registry gives, each kept inside its folder: an entry's name is its folder under
# checkpoints/, a file is a plain name in that folder, and the repo id is the Hub's (also the
# cache's models--NS--NAME folder). No '/', '\\' or '..' can reach past them.
NAME_PATTERN = r"^[a-z0-9_]+\.[a-z0-9_]+$"
"""A published name, ``<model>.<dataset>``: lowercase letters, digits and ``_`` on each side."""
FILE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
"""A published file: a plain name of its checkpoint's folder (no ``/``, not starting with ``.``)."""
_REPO_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID_PATTERN = rf"^(?!.*(?:--|\.\.)){_REPO_PART}/{_REPO_PART}$"
"""A Hub repo id as the registry records it, ``namespace/name``: letters, digits, ``-``, ``_``
and ``.``, neither part starting or ending with ``-`` or ``.``, no ``--`` or ``..`` (the Hub's
own rule, :func:`zoo.hub.upload.checked_repo_id`)."""


@dataclass(frozen=True)
class MetricKind:
    """What a metric's numbers mean: its unit, what ``targets`` and ``windows`` count, and its
    direction (the registry schema, model cards and ``zoo evaluate --registered`` read it)."""

    unit: str  # as printed after a value: "bits/byte"
    targets: str  # what ``Metric.targets`` counts: "bytes"
    windows: str  # what ``Metric.windows`` counts: "windows" (of the context), "images", ...
    lower_is_better: bool
    digits: int = 4  # decimals printed
    tolerance: float = 0.002  # default |registered - measured| allowed by --registered
    slice: str = "first {n:,} {windows}"  # what a slice of n units is
    title: str = ""  # what tables call the metric, when its unit alone does not say it

    @property
    def heading(self) -> str:
        """The metric in a table's first column: ``"bits/byte"``, ``"copy gain (bits/byte)"``."""
        return self.title or self.unit

    def measured_on(self, n: int | None) -> str:
        """``"all images"``, ``"first 16 windows"``: the whole split (``n`` None) or a slice."""
        return f"all {self.windows}" if n is None else self.slice.format(n=n, windows=self.windows)


METRICS: dict[str, MetricKind] = {
    "bits_per_byte": MetricKind("bits/byte", "bytes", "windows", lower_is_better=True),
    "bits_per_dim": MetricKind(
        "bits/dim",
        "sub-pixels",
        "images",
        lower_is_better=True,
        slice="{n:,} images (the seed-0 sample, ImageDataModule limit_eval)",
    ),  # fmt: skip
    "perplexity": MetricKind(
        "perplexity", "tokens", "windows", lower_is_better=True, digits=2, tolerance=0.05
    ),  # fmt: skip
    "bleu": MetricKind(
        "BLEU", "sentences", "sentences", lower_is_better=False, digits=2, tolerance=0.05
    ),  # fmt: skip
    "copy_gain": MetricKind(
        "bits/byte",
        "bytes",
        "trials",
        lower_is_better=False,
        slice="{n:,} {windows}",
        title="copy gain (bits/byte)",
    ),  # fmt: skip
}
"""The metrics a checkpoint can register. ``bleu`` also records sacrebleu's ``signature`` and the
``decoding`` settings (beam size, length penalty alpha, checkpoint averaging). ``copy_gain`` is
the copy probe's retrieval gain at one distance (:mod:`zoo.probes`, docs/results/retrieval.md):
control minus repeat in bits per byte on the span's bytes after the cue, higher is better;
``windows`` counts its trials, ``targets`` the bytes scored (trials x (span - cue)), and ``probe``
records ``distance``, ``span``, ``cue`` and ``seed``."""

_METRIC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "value", "dataset", "split", "windows", "targets", "precision"],
    "properties": {
        "name": {"enum": sorted(METRICS)},
        "value": {"type": "number"},
        "dataset": {"type": "string"},
        "split": {"type": "string", "pattern": r"^[a-z0-9_]+$"},  # train, valid, test, test2016
        "windows": {"type": ["integer", "null"], "minimum": 1},  # null: the whole split
        "context": {"type": "integer", "minimum": 1},
        "targets": {"type": "integer", "minimum": 1},  # the units scored (METRICS[name].targets)
        "precision": {"type": "string"},
        "hardware": {"type": "string"},
        "date": {"type": "string"},
        "signature": {"type": "string"},  # bleu: sacrebleu's signature
        "decoding": {"type": "object"},  # bleu: beam, alpha, averaged checkpoints
        "probe": {  # copy_gain: the copy probe's settings (zoo.probes)
            "type": "object",
            "additionalProperties": False,
            "required": ["distance", "span", "cue", "seed"],
            "properties": {
                k: {"type": "integer", "minimum": 0 if k in ("cue", "seed") else 1}
                for k in ("distance", "span", "cue", "seed")
            },
        },
    },
    "allOf": [
        {
            "if": {"properties": {"name": {"const": "bleu"}}},
            "then": {"required": ["signature", "decoding"]},
        },
        {
            "if": {"properties": {"name": {"const": "copy_gain"}}},
            "then": {"required": ["probe"], "properties": {"windows": {"type": "integer"}}},
            "else": {"not": {"required": ["probe"]}},
        },
    ],
}
_STRUCTURE = {  # the attention structure: the config's structure() and the trained context
    "type": "object",
    "required": ["pattern", "context", "causal", "trained_context"],
    "properties": {
        "pattern": {"type": "string"},
        "context": {"type": "integer", "minimum": 1},
        "trained_context": {"type": "integer", "minimum": 1},
        "causal": {"type": "boolean"},
    },
}

_RETIRED = {  # a checkpoint kept loadable but no longer recommended (Retirement)
    "type": "object",
    "additionalProperties": False,
    "required": ["reason", "use_instead", "date"],
    "properties": {
        "reason": {"type": "string", "pattern": r"^[^\n]+$"},  # one line, shown in the warning
        "use_instead": {"type": "string", "pattern": r"^[a-z0-9_]+\.[a-z0-9_]+$"},  # a name here
        "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},  # ISO, quoted in YAML
    },
}

TASKS: dict[str, str] = {  # task -> its headline metric
    "causal_lm": "bits_per_byte",  # zoo.tasks.CausalLM on a byte-level text data set
    "image_lm": "bits_per_dim",  # zoo.tasks.ImageLM on an image data set
    "translation": "bleu",  # zoo.tasks.Translation on a parallel corpus
}
"""The tasks a checkpoint can be published for, each with the metric its tables show."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "checkpoints"],
    "properties": {
        "version": {"const": 1},
        "checkpoints": {
            "type": "object",
            "propertyNames": {"pattern": NAME_PATTERN},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "model",
                    "model_type",
                    "task",
                    "structure",
                    "parameters",
                    "dataset",
                    "description",
                    "recipe",
                    "config",
                    "hub",
                    "files",
                    "metrics",
                    "training",
                ],  # fmt: skip
                "properties": {
                    "model": {"type": "string"},
                    "model_type": {"type": "string"},
                    "task": {"enum": sorted(TASKS)},
                    "parameters": {"type": "integer", "minimum": 1},
                    "dataset": {"type": "string"},
                    "description": {"type": "string"},
                    "recipe": {"type": "string"},
                    "config": {"type": "object"},
                    "hub": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["repo_id", "revision"],
                        "properties": {
                            "repo_id": {"type": "string", "pattern": REPO_ID_PATTERN},
                            # a commit sha once pushed; null until then (shipped copy only)
                            "revision": {"type": ["string", "null"], "pattern": "^[0-9a-f]{40}$"},
                        },
                    },
                    "files": {
                        "type": "object",
                        "required": ["config.json", "model.safetensors"],
                        "propertyNames": {"pattern": FILE_PATTERN},
                        "additionalProperties": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["sha256", "size"],
                            "properties": {
                                "sha256": _SHA256,
                                "size": {"type": "integer", "minimum": 0},
                            },
                        },
                    },
                    "metrics": {"type": "array", "minItems": 1, "items": _METRIC},
                    "training": {"type": "object"},
                    "structure": _STRUCTURE,
                    "retired": _RETIRED,
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Metric:
    """One measured metric of a checkpoint: ``value`` in the unit of ``METRICS[name]``.

    ``windows`` is ``None`` for the whole split, else how many evaluation units were measured, in
    the split's order (a slice: windows of ``context`` tokens, images, or sentences); ``targets``
    counts what was scored (bytes, sub-pixels, sentences). BLEU adds sacrebleu's ``signature`` and
    the ``decoding`` settings; ``copy_gain`` the copy probe's settings ``probe`` (:data:`METRICS`).
    """

    name: str
    value: float
    dataset: str
    split: str
    windows: int | None
    targets: int
    precision: str
    context: int | None = None
    hardware: str | None = None
    date: str | None = None
    signature: str | None = None
    decoding: dict[str, Any] | None = None
    probe: dict[str, int] | None = None

    @property
    def kind(self) -> MetricKind:
        return METRICS[self.name]

    @property
    def whole(self) -> bool:
        """Measured on the whole split (else a slice, which never stands for the split's score)."""
        return self.windows is None

    @property
    def measured_on(self) -> str:
        """``"all images"``, ``"first 16 windows"``, or a copy gain's ``"32 trials of the copy
        probe at d = 1,024, span 32, cue 8, seed 0"``."""
        text = self.kind.measured_on(self.windows)
        if self.probe:
            p = self.probe
            text += (
                f" of the copy probe at d = {p['distance']:,}, span {p['span']}, cue {p['cue']}, "
                f"seed {p['seed']}"
            )
        return text

    @property
    def label(self) -> str:
        """``"cifar10 test (all images, 30,720,000 sub-pixels)"``."""
        return f"{self.dataset} {self.split} ({self.measured_on}, {self.targets:,} {self.kind.targets})"

    def format(self, value: float | None = None) -> str:
        """``value`` (default this metric's) with the metric's decimals: ``"1.8030"``."""
        return f"{self.value if value is None else value:.{self.kind.digits}f}"

    @property
    def decoding_text(self) -> str:
        """A BLEU's decoding settings (``search beam, beam_size 4, alpha 2.0, ...``), else ``–``."""
        return ", ".join(f"{k} {v}" for k, v in self.decoding.items()) if self.decoding else "–"

    @property
    def search_text(self) -> str:
        """A BLEU's search in brief (``beam 4, alpha 1.0`` or ``greedy``), else ``""``."""
        d = self.decoding or {}
        if d.get("search") == "beam":
            return f"beam {d.get('beam_size')}, alpha {d.get('alpha')}"
        return "greedy" if d.get("search") == "greedy" else ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None or k == "windows"}


@dataclass(frozen=True)
class Retirement:
    """Why a published checkpoint is retired, and what to use instead.

    A retired checkpoint keeps its files and sha256: :func:`zoo.from_pretrained` and ``zoo pull``
    still load it, with a :class:`~zoo.errors.RetiredCheckpointWarning` (:attr:`message`), and
    ``zoo list`` shows it only with ``--all``. ``use_instead`` is an active checkpoint of the
    same registry (checked on load).
    """

    reason: str  # one line: "loses to X on pg19mini test (1.803 against 1.790 bits/byte)"
    use_instead: str  # a registered name that is not retired itself
    date: str  # ISO date of the retirement, "2026-11-28"

    def message(self, name: str) -> str:
        """The warning's text: ``"NAME is retired (reason); use OTHER"``."""
        return f"{name} is retired ({self.reason}); use {self.use_instead}"

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "use_instead": self.use_instead, "date": self.date}


@dataclass(frozen=True)
class CheckpointEntry:
    """One published checkpoint of ``checkpoints.yaml`` (see the module docstring)."""

    name: str
    model: str
    model_type: str
    task: str
    parameters: int
    dataset: str
    description: str
    recipe: str
    config: dict[str, Any]
    repo_id: str
    revision: str | None
    files: dict[str, dict[str, Any]]
    metrics: tuple[Metric, ...]
    training: dict[str, Any] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)
    """The attention structure (``config.structure()`` of the model's family, checked against
    ``config`` by the tests) plus ``trained_context``, the longest training window: ``pattern``
    and its parameters, ``context``, ``position``, and ``causal`` (False when evaluation looks
    ahead, as top-w routing does)."""
    retired: Retirement | None = None  # None: active

    @property
    def headline(self) -> Metric:
        """The metric shown in tables: the task's metric on the whole test split if measured,
        else the task's first metric, else the first one."""
        own = [m for m in self.metrics if m.name == TASKS[self.task]] or list(self.metrics)
        whole = [m for m in own if m.whole and m.split.startswith("test")]
        return (whole or own)[0]

    def whole_split(self, split: str) -> Metric | None:
        """The task's metric measured on the whole ``split``, if registered."""
        return next(
            (
                m
                for m in self.metrics
                if m.name == TASKS[self.task] and m.whole and m.split == split
            ),
            None,
        )

    def file_in(self, directory: str | os.PathLike, name: str) -> Path:
        """``directory / name`` for a file this entry registers (its shipped copy, a download),
        once the name is known to stay inside ``directory`` (:func:`~zoo.files.contained_path`).

        Raises:
            UnsafePathError: the name leads outside, or the file there is a link out of
                ``directory`` or not a regular file; nothing was opened.
        """
        return contained_path(
            directory, name, what=f"checkpoints.yaml, checkpoints.{self.name}.files",
            fix=f"a checkpoint's files are plain files of its folder: restore {directory}, or "
            "correct the entry",
        )  # fmt: skip

    @classmethod
    def from_dict(cls, name: str, d: dict[str, Any]) -> CheckpointEntry:
        return cls(
            name=name,
            model=d["model"],
            model_type=d["model_type"],
            task=d["task"],
            parameters=d["parameters"],
            dataset=d["dataset"],
            description=d["description"],
            recipe=d["recipe"],
            config=dict(d["config"]),
            repo_id=d["hub"]["repo_id"],
            revision=d["hub"]["revision"],
            files={k: dict(v) for k, v in d["files"].items()},
            metrics=tuple(Metric(**m) for m in d["metrics"]),
            training=dict(d["training"]),
            structure=dict(d["structure"]),
            retired=Retirement(**d["retired"]) if d.get("retired") else None,
        )

    def to_dict(self) -> dict[str, Any]:
        retired = {"retired": self.retired.to_dict()} if self.retired is not None else {}
        return {
            "model": self.model,
            "model_type": self.model_type,
            "task": self.task,
            "parameters": self.parameters,
            "dataset": self.dataset,
            "description": self.description,
            **retired,  # beside the description: what a reader of the entry sees first
            "recipe": self.recipe,
            "hub": {"repo_id": self.repo_id, "revision": self.revision},
            "files": self.files,
            "metrics": [m.to_dict() for m in self.metrics],
            "training": self.training,
            "structure": self.structure,
            "config": self.config,
        }

# said beside every figure measured on these data sets (model cards, zoo list)
CAVEATS = {
    "cifar10": "JPEG copy (quality ≈75) of CIFAR-10: its pixels differ slightly from the lossless "
    "release, so these bits/dim are not exactly comparable with published figures",
}
