"""The classes a recipe or a ``zoo fit | validate | test | predict`` command line may name.

A recipe is a file users run, like a script (docs/security.md). Still, jsonargparse imports the
module of every ``class_path`` it parses and calls what it finds, so before anything is parsed,
:func:`check_class_paths` reads the recipes and the command line as data and accepts a class only
from the zoo, Lightning (callbacks, loggers, strategies, ...) and ``torch.optim`` (optimizers and
schedulers), and only a class of the kinds a run is made of (:func:`allowed_kinds`). Other modules need
``--allow_class_path PREFIX`` on the command line. Free-form settings (``model_config``,
``sampling``) are plain data: a ``class_path`` there is refused whatever it names.
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import yaml

from zoo.errors import ConfigError

__all__ = ["ALLOWED_MODULES", "allowed_kinds", "check_class_paths", "split_allowances"]

# module prefixes whose classes a recipe may name without --allow_class_path
ALLOWED_MODULES = ("zoo.", "lightning.pytorch.", "lightning.fabric.", "torch.optim.")

# keys whose value names a class (jsonargparse takes a dotted string there as a class_path)
CLASS_KEYS = {"model", "data", "callbacks", "logger", "optimizer", "lr_scheduler", "strategy",
              "plugins", "profiler", "accelerator"}  # fmt: skip

# settings that are plain data: no class_path inside them, whatever it names
PLAIN_KEYS = {"model_config", "sampling"}

FLAG = "--allow_class_path"


def allowed_kinds() -> tuple[type, ...]:
    """The kinds of class a run is made of: tasks, data modules, callbacks, loggers, optimizers,
    schedulers, and the Trainer's strategies, plugins, profilers and accelerators."""
    import torch
    from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
    from lightning.pytorch import Callback, LightningDataModule, LightningModule
    from lightning.pytorch.accelerators import Accelerator
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.plugins import Precision
    from lightning.pytorch.profilers import Profiler
    from lightning.pytorch.strategies import Strategy

    return (LightningModule, LightningDataModule, Callback, Logger, torch.optim.Optimizer,
            torch.optim.lr_scheduler.LRScheduler, Strategy, Precision, Profiler, Accelerator,
            ClusterEnvironment, CheckpointIO)  # fmt: skip


def split_allowances(args: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """``args`` without ``--allow_class_path PREFIX`` (repeatable), and those prefixes."""
    rest, allowed, i = [], [], 0
    while i < len(args):
        if args[i] == FLAG and i + 1 < len(args):
            allowed.append(args[i + 1])
            i += 2
            continue
        if args[i].startswith(FLAG + "="):
            allowed.append(args[i].split("=", 1)[1])
        else:
            rest.append(args[i])
        i += 1
    return rest, tuple(allowed)


def _check(class_path: Any, where: str, allowed: tuple[str, ...]) -> None:
    """Refuse ``class_path`` unless it names a class of :func:`allowed_kinds` in an allowed module;
    nothing of another module is imported."""
    if not isinstance(class_path, str):
        raise ConfigError(f"{where}: class_path must be a string, got {class_path!r}")
    if "." not in class_path:  # a bare name: jsonargparse looks among the imported subclasses
        return
    if not class_path.startswith(ALLOWED_MODULES + allowed):
        raise ConfigError(
            f"{where}: class_path {class_path!r} is not a class of the zoo, Lightning or "
            f"torch.optim; nothing was imported. If you wrote it and trust it, pass "
            f"{FLAG} {class_path.rsplit('.', 1)[0]}"
        )
    if class_path.startswith(allowed):
        return
    module, _, name = class_path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return  # jsonargparse says what is missing, with suggestions
    if not (inspect.isclass(found) and issubclass(found, allowed_kinds())):
        raise ConfigError(
            f"{where}: class_path {class_path!r} is not a task, data module, callback, logger, "
            "optimizer, scheduler or Trainer plugin; nothing was called."
        )


def _walk(value: Any, where: str, allowed: tuple[str, ...], plain: bool = False) -> None:
    """Check every class a parsed recipe (or a value of the command line) names."""
    if isinstance(value, dict):
        if "class_path" in value:
            if plain:
                raise ConfigError(
                    f"{where}: a class_path ({str(value['class_path'])[:80]!r}) where plain "
                    "settings are expected; nothing was imported."
                )
            _check(value["class_path"], where, allowed)
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            if isinstance(item, str) and key in CLASS_KEYS and not plain:
                _check_named(item, inner, allowed)
            _walk(item, inner, allowed, plain or key in PLAIN_KEYS)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str) and where.rsplit(".", 1)[-1] in CLASS_KEYS and not plain:
                _check_named(item, f"{where}[{i}]", allowed)
            _walk(item, f"{where}[{i}]", allowed, plain)


def _check_named(value: str, where: str, allowed: tuple[str, ...]) -> None:
    """A class key's string: a nested config file (checked in turn), or a class path."""
    if value.endswith((".yaml", ".yml", ".json")) and Path(value).is_file():
        _walk(_load(value, where), where, allowed)
    elif "." in value and " " not in value and "/" not in value:
        _check(value, where, allowed)


def _load(text_or_path: str, where: str) -> Any:
    """A config given as a file or inline (YAML or JSON), as data."""
    try:
        path = Path(text_or_path)
        text = path.read_text() if path.is_file() else text_or_path
        return yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None  # the parser reports it


def check_class_paths(args: list[str], allowed: tuple[str, ...] = ()) -> None:
    """Check every class that ``zoo fit | validate | test | predict ARGS`` would import: those
    of each ``--config`` (file or inline), of every flag's value and of ``--model.help NAME``
    (and the other class keys' ``.help``), before jsonargparse parses them.

    Raises:
        ConfigError: a ``class_path`` (or a dotted class name under a class key) outside the
            allowed modules, one that is not a kind of :func:`allowed_kinds`, or any ``class_path`` in a
            plain setting (``model_config``, ``sampling``); one line, naming the key.
    """
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        if "=" in arg:
            flag, value = arg.split("=", 1)
        elif i + 1 < len(args):
            flag, value = arg, args[i + 1]
        else:
            continue
        key = flag.lstrip("-").removesuffix("+")
        if key in ("config", "c"):
            _walk(_load(value, key), "", allowed)
            continue
        last = key.rsplit(".", 1)[-1]
        plain = any(part in PLAIN_KEYS for part in key.split("."))
        owner = key.split(".")[-2] if "." in key else ""  # --model.help: model
        if last == "help" and owner in CLASS_KEYS:
            if not value.startswith("-"):  # --model.help NAME imports NAME's module to show it
                _check_named(value, f"--{key}", allowed)
        elif last == "class_path":
            if plain:
                raise ConfigError(f"--{key}: a class_path where plain settings are expected; "
                                  "nothing was imported.")  # fmt: skip
            _check(value, f"--{key}", allowed)
        elif value.lstrip().startswith(("{", "[")):
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = _load(value, key)
            if last in CLASS_KEYS and isinstance(parsed, list):
                _walk({last: parsed}, key.rsplit(".", 1)[0] if "." in key else "", allowed, plain)
            else:
                _walk(parsed, f"--{key}", allowed, plain)
        elif last in CLASS_KEYS and not plain:
            _check_named(value, f"--{key}", allowed)
