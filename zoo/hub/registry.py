"""``checkpoints.yaml``: the registry of published checkpoints, the single source of truth.

Each entry names one trained checkpoint, timm-style ``<model>.<dataset>`` (the model is a preset of
:mod:`zoo.registry`, the tag the data it was trained on), and records everything needed to fetch,
verify and trust it: the model config, the Hub repo id and pinned revision, every published file
with its sha256 and size, the measured metrics (with dataset, split and how much of it), the recipe
that trained it and the training facts. ``zoo list``, :func:`zoo.list_pretrained`,
:func:`zoo.from_pretrained`, ``zoo pull`` and the README's checkpoint table all read it.

The file is validated against :data:`SCHEMA` (JSON Schema, with ``jsonschema``) when loaded; a bad
entry raises :class:`~zoo.errors.RegistryError` naming the entry, the key and what is wrong.
``ZOO_CHECKPOINTS`` points the zoo at another registry file (tests, forks); the shipped copies of an
entry's files live beside the file, in ``checkpoints/<name>/``.
"""

from __future__ import annotations

import fnmatch
import importlib.resources
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from zoo.config import suggest
from zoo.errors import RegistryError, UnknownModelError

__all__ = [
    "SCHEMA",
    "CheckpointEntry",
    "Metric",
    "Registry",
    "list_pretrained",
    "load_registry",
]

REGISTRY_FILE = "checkpoints.yaml"

_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_METRIC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "value", "dataset", "split", "windows", "targets", "precision"],
    "properties": {
        "name": {"enum": ["bits_per_byte"]},
        "value": {"type": "number"},
        "dataset": {"type": "string"},
        "split": {"enum": ["train", "valid", "test"]},
        "windows": {"type": ["integer", "null"], "minimum": 1},  # null: the whole split
        "context": {"type": "integer", "minimum": 1},
        "targets": {"type": "integer", "minimum": 1},  # bytes scored
        "precision": {"type": "string"},
        "hardware": {"type": "string"},
        "date": {"type": "string"},
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "checkpoints"],
    "properties": {
        "version": {"const": 1},
        "checkpoints": {
            "type": "object",
            "propertyNames": {"pattern": r"^[a-z0-9_]+\.[a-z0-9_]+$"},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "model",
                    "model_type",
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
                            "repo_id": {"type": "string", "pattern": r"^[\w.-]+/[\w.-]+$"},
                            # a commit sha once pushed; null until then (shipped copy only)
                            "revision": {"type": ["string", "null"], "pattern": "^[0-9a-f]{40}$"},
                        },
                    },
                    "files": {
                        "type": "object",
                        "required": ["config.json", "model.safetensors"],
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
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Metric:
    """One measured metric of a checkpoint (``value`` in bits per byte for ``bits_per_byte``).

    ``windows`` is ``None`` for the whole split, else the number of evaluation windows (of
    ``context`` bytes, in the split's order) measured; ``targets`` the bytes scored.
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

    @property
    def label(self) -> str:
        part = "all" if self.windows is None else f"first {self.windows} windows"
        return f"{self.dataset} {self.split} ({part}, {self.targets:,} bytes)"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None or k == "windows"}


@dataclass(frozen=True)
class CheckpointEntry:
    """One published checkpoint of ``checkpoints.yaml`` (see the module docstring)."""

    name: str
    model: str
    model_type: str
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

    @property
    def headline(self) -> Metric:
        """The metric shown in tables: the whole test split if measured, else the first one."""
        whole = [m for m in self.metrics if m.windows is None and m.split == "test"]
        return (whole or list(self.metrics))[0]

    @classmethod
    def from_dict(cls, name: str, d: dict[str, Any]) -> CheckpointEntry:
        return cls(
            name=name,
            model=d["model"],
            model_type=d["model_type"],
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
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_type": self.model_type,
            "parameters": self.parameters,
            "dataset": self.dataset,
            "description": self.description,
            "recipe": self.recipe,
            "hub": {"repo_id": self.repo_id, "revision": self.revision},
            "files": self.files,
            "metrics": [m.to_dict() for m in self.metrics],
            "training": self.training,
            "config": self.config,
        }


HEADER = """\
# The registry of published checkpoints: the single source of truth for `zoo list`,
# zoo.from_pretrained(name), `zoo pull` and the README's checkpoint table (`zoo list --write-readme`).
# Entries are written by `zoo export --register` and pinned by `zoo push --update-registry`
# (docs/checkpoints.md). hub.revision is null until the files are pushed to the Hub; until then the
# copy under checkpoints/<name>/ is the only source, verified against the sha256 below.
"""


@dataclass
class Registry:
    """The parsed registry file; ``root / "checkpoints" / name`` holds each entry's shipped copy."""

    path: Path
    entries: dict[str, CheckpointEntry]

    @property
    def shipped_dir(self) -> Path:
        return self.path.parent / "checkpoints"

    def get(self, name: str) -> CheckpointEntry:
        """The entry called ``name``; a bare model name works when one checkpoint has that model.

        Raises:
            UnknownModelError: no such checkpoint; the message suggests close names.
        """
        if name in self.entries:
            return self.entries[name]
        by_model = [e for e in self.entries.values() if e.model == name]
        if len(by_model) == 1:
            return by_model[0]
        if by_model:
            names = ", ".join(sorted(e.name for e in by_model))
            raise UnknownModelError(f"{name!r} has several checkpoints; pick one of {names}.")
        raise UnknownModelError(
            f"no published checkpoint called {name!r}.{suggest(name, set(self.entries))} "
            f"`zoo list` shows the {len(self.entries)} published checkpoints of {self.path}; "
            "from_pretrained also takes a Hub repo id ('namespace/name') or a local directory."
        )

    def by_repo_id(self, repo_id: str) -> CheckpointEntry | None:
        return next((e for e in self.entries.values() if e.repo_id == repo_id), None)

    def with_entry(self, entry: CheckpointEntry) -> Registry:
        entries = dict(self.entries)
        entries[entry.name] = entry
        return Registry(self.path, dict(sorted(entries.items())))

    def save(self) -> None:
        data = {
            "version": 1,
            "checkpoints": {name: e.to_dict() for name, e in self.entries.items()},
        }
        validate(data, self.path)
        text = HEADER + yaml.safe_dump(data, sort_keys=False, width=100)
        tmp = self.path.with_suffix(".yaml.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)


def registry_path() -> Path:
    """``$ZOO_CHECKPOINTS`` if set, else the package's ``checkpoints.yaml``.

    In a clone ``zoo/checkpoints.yaml`` links to the top-level file (resolved, so the shipped copies
    in ``checkpoints/`` beside it are found); an installed wheel holds a copy and no shipped
    weights, so those come from the Hub.
    """
    if os.environ.get("ZOO_CHECKPOINTS"):
        return Path(os.environ["ZOO_CHECKPOINTS"])
    return Path(str(importlib.resources.files("zoo").joinpath(REGISTRY_FILE))).resolve()


def validate(data: Any, path: Path) -> None:
    """Check ``data`` against :data:`SCHEMA`; raise :class:`RegistryError` naming the bad key."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:5]:
            where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
            lines.append(f"  {where}: {e.message}")
        raise RegistryError(
            f"{path} fails schema validation ({len(errors)} problem(s)):\n" + "\n".join(lines)
        )


def load_registry(path: str | os.PathLike | None = None) -> Registry:
    """Read and validate the registry (default: :func:`registry_path`).

    Raises:
        RegistryError: the file is missing, is not YAML, or an entry fails the schema.
    """
    path = Path(path) if path is not None else registry_path()
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise RegistryError(
            f"{path} does not exist. The registry ships inside the zoo package "
            "(zoo/checkpoints.yaml); reinstall attention-zoo, or set ZOO_CHECKPOINTS to use "
            "another file."
        ) from None
    except yaml.YAMLError as e:
        raise RegistryError(f"{path} is not valid YAML: {e}") from None
    validate(data, path)
    entries = {n: CheckpointEntry.from_dict(n, d) for n, d in data["checkpoints"].items()}
    return Registry(path, entries)


def list_pretrained(pattern: str | None = None) -> list[CheckpointEntry]:
    """The published checkpoints (``zoo list`` in scripts), optionally filtered by a glob.

    Each :class:`CheckpointEntry` has the model, size, data, metrics, Hub repo and revision;
    :func:`zoo.hub.weights_source` says where its weights would come from on this machine.
    """
    entries = load_registry().entries.values()
    return [e for e in entries if pattern is None or fnmatch.fnmatchcase(e.name, pattern)]
