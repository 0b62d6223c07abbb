"""``checkpoints.yaml``: the registry of published checkpoints, the single source of truth.

Each entry names one trained checkpoint, timm-style ``<model>.<dataset>`` (the model is a preset of
:mod:`zoo.models.registry`, the tag the data it was trained on), and records everything needed to fetch,
verify and trust it: the model config, the Hub repo id and pinned revision, every published file
with its sha256 and size, the measured metrics (with dataset, split and how much of it), the recipe
that trained it and the training facts. ``zoo list``, :func:`zoo.list_pretrained`,
:func:`zoo.from_pretrained`, ``zoo pull`` and the README's checkpoint table all read it.

The file is validated against :data:`zoo.hub.schema.SCHEMA` (JSON Schema, with ``jsonschema``)
when loaded; a bad entry raises :class:`~zoo.errors.RegistryError` naming the entry, the key and
what is wrong. ``ZOO_CHECKPOINTS`` points the zoo at another registry file (tests, forks); the
shipped copies of an entry's files live beside the file, in ``checkpoints/<name>/``.

An entry may be ``retired`` (:class:`~zoo.hub.schema.Retirement`: a one-line reason, the published
checkpoint to use instead, the date): it stays loadable, with a
:class:`~zoo.errors.RetiredCheckpointWarning`, and ``zoo list`` hides it unless asked (``--all``).
Deleting the field reinstates it.
"""

from __future__ import annotations

import datetime
import fnmatch
import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from zoo.config import suggest
from zoo.errors import ConfigError, RegistryError, UnknownModelError
from zoo.hub.schema import SCHEMA, CheckpointEntry

__all__ = [
    "Registry",
    "context_filter",
    "list_pretrained",
    "load_registry",
]

REGISTRY_FILE = "checkpoints.yaml"

HEADER = """\
# The registry of published checkpoints: the single source of truth for `zoo list`,
# zoo.from_pretrained(name), `zoo pull` and the README's checkpoint table (`zoo list --write-readme`).
# Entries are written by `zoo export --register` and pinned by `zoo push --update-registry`
# (docs/publishing.md). hub.revision is null until the files are pushed to the Hub; until then the
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
        _check_retirements(self.entries, self.path)
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
    """Check ``data`` against :data:`SCHEMA`.

    Raises:
        RegistryError: naming the bad key, one line per problem after the file's; a name that
            could reach outside its folder (an entry's name, a file name, a repo id: ``../``, an
            absolute path) is reported alone, in one line.
    """
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    for e in errors:
        unsafe = _unsafe_name(e, path)
        if unsafe is not None:
            raise RegistryError(unsafe)
    if errors:
        lines = []
        for e in errors[:5]:
            where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
            lines.append(f"  {where}: {e.message}")
        raise RegistryError(
            f"{path} fails schema validation ({len(errors)} problem(s)):\n" + "\n".join(lines)
        )


_NAME_RULES = {  # the schema's key of a name that locates files -> its rule, for _unsafe_name
    "checkpoints": (
        "is not a published name: '<model>.<dataset>', lowercase letters, digits and '_' (it "
        "is the entry's folder under checkpoints/)"
    ),
    "files": (
        "is not a plain file name of the checkpoint's folder: letters, digits, '_', '.' and "
        "'-', no '/', '\\' or '..', not an absolute path, not starting with '.'"
    ),
    "repo_id": (
        "is not a Hub repo id: 'namespace/name', letters, digits, '-', '_' and '.', neither "
        "part starting or ending with '-' or '.', no '--' or '..'"
    ),
}


def _unsafe_name(error: jsonschema.ValidationError, path: Path) -> str | None:
    """The one-line message of a schema error on a name that locates files (see
    :data:`_NAME_RULES`), else ``None``."""
    if error.validator != "pattern":
        return None
    *_, parent, key, _pattern = ("", "", *error.schema_path)
    rule = _NAME_RULES.get(parent if key == "propertyNames" else key)  # names, or a value's key
    if rule is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path)
    return (
        f"{path}: {where} names {error.instance!r}, which {rule}; correct the entry (`zoo "
        "export --register` writes it)."
    )


def _check_retirements(entries: dict[str, CheckpointEntry], path: Path) -> None:
    """What the schema cannot check: each retirement's date is a real date and its
    ``use_instead`` names an entry of the same registry that is not retired itself.

    Raises:
        RegistryError: naming the entry's key and what is wrong.
    """
    problems = []
    for name, e in entries.items():
        if e.retired is None:
            continue
        where = f"checkpoints.{name}.retired"
        try:
            datetime.date.fromisoformat(e.retired.date)
        except ValueError:
            problems.append(f"{where}.date: {e.retired.date!r} is not a date (YYYY-MM-DD)")
        other = entries.get(e.retired.use_instead)
        if other is None:
            problems.append(
                f"{where}.use_instead: {e.retired.use_instead!r} is not in this registry."
                + suggest(e.retired.use_instead, set(entries))
            )
        elif other.retired is not None:
            problems.append(
                f"{where}.use_instead: {other.name} is retired itself (use_instead: "
                f"{other.retired.use_instead}); name an active checkpoint"
            )
    if problems:
        raise RegistryError(
            f"{path} fails validation ({len(problems)} problem(s)):\n"
            + "\n".join(f"  {p}" for p in problems)
        )


def load_registry(path: str | os.PathLike | None = None) -> Registry:
    """Read and validate the registry (default: :func:`registry_path`).

    Raises:
        RegistryError: the file is missing, is not YAML, or an entry fails the schema.
    """
    path = Path(path) if path is not None else registry_path()
    try:
        # libyaml's loader when PyYAML was built with it (the same data, faster), else Python's
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
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
    _check_retirements(entries, path)
    return Registry(path, entries)


def list_pretrained(
    pattern: str | None = None,
    *,
    task: str | None = None,
    attention: str | None = None,
    causal: bool | None = None,
    context: str | int | None = None,
    include_retired: bool = False,
) -> list[CheckpointEntry]:
    """The published checkpoints (``zoo list`` in scripts), filtered.

    Args:
        pattern: a glob over names (``"routing*"``).
        task: ``causal_lm``, ``image_lm`` or ``translation``.
        attention: the structure's pattern (``dense``, ``fixed``, ``strided``, ``local``,
            ``routing``, ``local_1d``, ``local_2d``, ``encoder-decoder``).
        causal: True keeps checkpoints whose evaluation is strictly causal, False those that
            look ahead (top-w routing).
        context: the model's context in positions: a number, or a comparison such as
            ``">=4096"`` (operators ``>=``, ``<=``, ``>``, ``<``, ``==``).
        include_retired: also the retired checkpoints (``zoo list --all``), which still load,
            with a warning naming the checkpoint to use instead; their ``retired`` says why.

    Each :class:`CheckpointEntry` has the model, size, data, metrics, structure, Hub repo and
    revision; :func:`zoo.hub.weights_source` says where its weights would come from here.

    Raises:
        ConfigError: ``context`` is not a number or a comparison with one.
    """
    keep = context_filter(context)
    return [
        e
        for e in load_registry().entries.values()
        if (pattern is None or fnmatch.fnmatchcase(e.name, pattern))
        and (task is None or e.task == task)
        and (attention is None or e.structure.get("pattern") == attention)
        and (causal is None or e.structure.get("causal") == causal)
        and keep(e.structure.get("context"))
        and (include_retired or e.retired is None)
    ]


def context_filter(spec: str | int | None):
    """A predicate on a context length from ``">=4096"``, ``"<512"``, ``"4096"`` or ``None``.

    Raises:
        ConfigError: ``spec`` is not a number or a comparison with one.
    """
    import operator
    import re

    if spec is None:
        return lambda n: True
    ops = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
           "==": operator.eq, "": operator.eq}  # fmt: skip
    match = re.fullmatch(r"\s*(>=|<=|>|<|==|)\s*(\d[\d_,]*)\s*", str(spec))
    if match is None:
        raise ConfigError(
            f"context filter {spec!r} is not a length or a comparison: write e.g. '>=4096', "
            "'<1024' or '4096'"
        )
    op, bound = ops[match[1]], int(match[2].replace(",", "").replace("_", ""))
    return lambda n: n is not None and op(n, bound)
