"""Lightning checkpoints read as data: a task rebuilt from a ``.ckpt`` without running code the file
names.

A ``.ckpt`` written by ``zoo fit`` is a pickle of tensors and plain values, read here with
``torch.load(weights_only=True)``. Lightning's own ``load_from_checkpoint`` then rebuilds the task
through the saved hyper-parameters' ``_instantiator`` and ``_class_path`` (jsonargparse), which
instantiates any ``{class_path, init_args}`` a file plants in a field typed ``Any``. The zoo does not
go that way: :func:`load_checkpoint` accepts only the zoo's tasks by their exact class path, checks
every hyper-parameter against the task's signature as plain data (strings, numbers, booleans,
``None``, lists and string-keyed mappings, with no ``class_path``), and calls the task's constructor
itself. Each refusal is a one-line :class:`~zoo.errors.CheckpointError` naming the file and the key.

A fine-tune's ``init_from`` is where its architecture came from. A checkpoint written since the
architecture is recorded (``checkpoint["zoo_model"]``: ``model_type`` and the config) is rebuilt
from that record and fetches nothing. An older one may fetch only a published name, whose files the
registry pins by sha256; a path or Hub repo id that the file names itself is refused, with the
command that converts the checkpoint once its owner vouches for that source
(``zoo migrate CKPT``, :func:`migrate_checkpoint`).
"""

from __future__ import annotations

import inspect
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from lightning import LightningModule

from zoo.errors import CheckpointError, ZooError, ZooWarning

__all__ = [
    "MODEL_RECORD",
    "TASK_CLASS_PATHS",
    "CheckpointAsData",
    "PlainValue",
    "checked_hyperparameters",
    "load_checkpoint",
    "migrate_checkpoint",
    "model_record",
    "read_checkpoint",
    "rebuild_arguments",
    "saved_task",
]

# A hyper-parameter that holds free-form settings (``model_config``, ``sampling``): plain values
# only. Typed so and not ``Any``, jsonargparse keeps a ``{class_path, init_args}`` found there (in a
# recipe or a checkpoint) as data, which the config then refuses as an unknown key, instead of
# instantiating it.
PlainValue = str | int | float | bool | None | list | dict

MODEL_RECORD = "zoo_model"  # {"model_type": ..., "config": {...}} of the task's model

# the only classes a checkpoint may name (its hyper-parameters' ``_class_path``), by exact string
TASK_CLASS_PATHS = {
    f"zoo.tasks.{module}{name}": name
    for name, module in (("CausalLM", "causal_lm."), ("ImageLM", "image_lm."),
                         ("Translation", "translation."))
    for module in ("", module)
}  # fmt: skip

# keys Lightning's LightningCLI adds to the hyper-parameters; never followed here
_LIGHTNING_KEYS = ("_instantiator", "_class_path")


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The contents of a Lightning ``.ckpt``, read with ``torch.load(weights_only=True)`` (tensors
    and plain values only; no object of the file's choosing is built).

    Raises:
        CheckpointError: the file is missing, not a checkpoint, or holds anything but tensors and
            plain data (a pickled object: refused before anything runs).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist (or is not a file): pass a .ckpt of `zoo fit`.")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:  # weights_only refused an object of the file's choosing
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(
            f"{path} could not be read as data (torch.load weights_only=True: {why}); the zoo "
            "reads only tensors and plain values from a checkpoint, so nothing was loaded or run."
        ) from None
    except Exception as e:  # not a zip of torch.save: truncated, corrupt or another format
        raise CheckpointError(
            f"{path} could not be loaded: it is truncated, corrupt or not a checkpoint "
            f"({type(e).__name__}); nothing was loaded."
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is not a Lightning checkpoint (no state_dict): pass a .ckpt "
                              "written by `zoo fit`.")  # fmt: skip
    return ckpt


def saved_task(ckpt: dict[str, Any], path: str | os.PathLike = "the checkpoint") -> type | None:
    """The zoo task a checkpoint was saved from (its hyper-parameters' ``_class_path``), or ``None``
    if it names none.

    Raises:
        CheckpointError: it names a class other than the zoo's tasks (:data:`TASK_CLASS_PATHS`).
    """
    from zoo import tasks

    hp = ckpt.get("hyper_parameters") or {}
    class_path = hp.get("_class_path") if isinstance(hp, dict) else None
    if class_path is None:
        return None
    if not isinstance(class_path, str) or class_path not in TASK_CLASS_PATHS:
        raise CheckpointError(
            f"{path}: hyper_parameters._class_path is {class_path!r}, not one of the zoo's tasks "
            f"({', '.join(sorted(set(TASK_CLASS_PATHS.values())))}); nothing was imported or run."
        )
    return getattr(tasks, TASK_CLASS_PATHS[class_path])


def _plain(value: Any, key: str, path) -> None:
    """Raise unless ``value`` is plain data: no ``class_path`` mapping, no object."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _plain(v, f"{key}[{i}]", path)
        return
    if isinstance(value, dict):
        if "class_path" in value or "init_args" in value:
            raise CheckpointError(
                f"{path}: hyper_parameters.{key} holds a class_path "
                f"({str(value.get('class_path'))[:80]!r}); the zoo reads hyper-parameters as data "
                "and never instantiates a class a file names: nothing was run."
            )
        for k, v in value.items():
            if not isinstance(k, str):
                raise CheckpointError(f"{path}: hyper_parameters.{key} has a non-string key {k!r}.")
            _plain(v, f"{key}.{k}", path)
        return
    raise CheckpointError(
        f"{path}: hyper_parameters.{key} is a {type(value).__name__}, not plain data."
    )


def checked_hyperparameters(
    task_cls: type, hp: dict[str, Any] | None, path: str | os.PathLike = "the checkpoint"
) -> dict[str, Any]:
    """A checkpoint's hyper-parameters as keyword arguments of ``task_cls``: Lightning's own keys
    (``_instantiator``, ``_class_path``) dropped, every other key an argument of the task's
    constructor, every value plain data.

    Raises:
        CheckpointError: an unknown key, or a value that is not plain data (a ``class_path``
            mapping anywhere inside it), named with the file.
    """
    hp = dict(hp or {})
    for key in _LIGHTNING_KEYS:
        hp.pop(key, None)
    accepted = set(inspect.signature(task_cls.__init__).parameters) - {"self"}
    unknown = sorted(set(hp) - accepted)
    if unknown:
        raise CheckpointError(
            f"{path}: hyper_parameters has key(s) {unknown} that {task_cls.__name__} does not take "
            f"(it takes {sorted(accepted)}): the file was not written by this zoo's `zoo fit`."
        )
    for key, value in hp.items():
        _plain(value, key, path)
    return hp


def _published(source: str) -> bool:
    """Whether ``source`` is a published name of ``checkpoints.yaml`` (not a path or repo id)."""
    from zoo.files import explicit_path
    from zoo.hub import load_registry

    return explicit_path(source) is None and source in load_registry().entries


def _checked_record(record: Any, path) -> tuple[str, dict[str, Any]]:
    """``(a preset of the recorded class, the recorded config)``, validated without allocating."""
    from zoo.models.registry import get_model_class, get_preset, list_models

    try:
        model_type, values = record["model_type"], record["config"]
        _plain(values, f"{MODEL_RECORD}.config", path)
        cls = get_model_class(model_type)
        cls.config_class.from_dict(values)  # type: ignore[attr-defined]
    except CheckpointError:
        raise
    except ZooError as e:
        raise CheckpointError(f"{path}: {MODEL_RECORD} is not a valid model record ({e})") from None
    except (KeyError, TypeError) as e:
        raise CheckpointError(
            f"{path}: {MODEL_RECORD} is not a valid model record ({type(e).__name__}: {e})."
        ) from None
    preset = next(name for name in list_models() if get_preset(name).model_cls is cls)
    return preset, dict(values)


def rebuild_arguments(
    task_cls: type,
    hp: dict[str, Any],
    ckpt: dict[str, Any],
    path: str | os.PathLike = "the checkpoint",
    trust_init_from: bool = False,
) -> dict[str, Any]:
    """Keyword arguments that rebuild the task of checked hyper-parameters ``hp`` without
    following a source the file names: ``hp`` itself, unless it has an ``init_from``. Then the
    recorded architecture (:data:`MODEL_RECORD`) replaces it; without a record, a published
    name is kept (its files are pinned by the registry; one warning says so).

    Raises:
        CheckpointError: an invalid record, or an ``init_from`` that is not a published name
            (a path or Hub repo id, or the file itself) without ``trust_init_from``.
    """
    init_from = hp.get("init_from")
    if init_from is None:
        return hp
    if MODEL_RECORD in ckpt:  # the architecture is recorded: nothing to fetch
        preset, config = _checked_record(ckpt[MODEL_RECORD], path)
        return {**hp, "init_from": None, "model": preset, "model_config": config}
    if not isinstance(init_from, str):
        raise CheckpointError(f"{path}: hyper_parameters.init_from must be a string, got "
                              f"{type(init_from).__name__}.")  # fmt: skip
    if _published(init_from):
        warnings.warn(
            f"{path} was fine-tuned from the published {init_from}: its architecture comes from "
            "that checkpoint's registered, sha256-verified files",
            ZooWarning,
            stacklevel=3,
        )
        return hp
    if trust_init_from:
        from zoo.pretrained import find_checkpoint

        try:
            same = find_checkpoint(init_from)
        except ZooError:
            same = None
        if same is not None and Path(same).resolve() == Path(path).resolve():
            raise CheckpointError(f"{path}: hyper_parameters.init_from names the checkpoint itself.")
        return hp
    raise CheckpointError(
        f"{path}: hyper_parameters.init_from names {init_from!r}, a path or Hub repo id chosen by "
        "the file itself, and the zoo follows only published names (zoo list) from a checkpoint; "
        f"if you trust it and that source, convert it once: zoo migrate {path}"
    )


def load_checkpoint(
    path: str | os.PathLike,
    task_cls: type | None = None,
    map_location: str | torch.device | None = "cpu",
    strict: bool = True,
    *,
    trust_init_from: bool = False,
    overrides: dict[str, Any] | None = None,
) -> LightningModule:
    """The zoo task saved in a Lightning ``.ckpt``, rebuilt from its hyper-parameters as data.

    Args:
        path: a ``.ckpt`` written by ``zoo fit`` (or :func:`migrate_checkpoint`).
        task_cls: the task expected (default: the one the file names, else ``CausalLM``).
        map_location: the device of the returned task.
        strict: ``load_state_dict``'s: every weight must match the rebuilt task.
        trust_init_from: follow an ``init_from`` path or repo id the file names (its owner vouches
            for it; :func:`migrate_checkpoint` uses this once).
        overrides: hyper-parameters the caller sets instead of the file's (code, not data).

    Returns:
        The task, with the checkpoint's weights, in train mode (as Lightning returns it); eager
        even where it was trained with ``compile`` (``overrides={"compile": True}`` compiles).

    Raises:
        CheckpointError: the file is unreadable as data, names a class that is not a zoo task, a
            task other than ``task_cls``, a hyper-parameter the task does not take or one that is
            not plain data, an ``init_from`` that is not a published name (without
            ``trust_init_from``), or weights that do not fit the rebuilt task.
    """
    task = _rebuild(read_checkpoint(path), path, task_cls, strict, trust_init_from, overrides)
    return task.to(map_location) if map_location is not None else task


def _rebuild(ckpt, path, task_cls, strict, trust_init_from, overrides) -> LightningModule:
    """:func:`load_checkpoint` of a checkpoint already read (:func:`read_checkpoint`)."""
    from zoo.tasks.causal_lm import CausalLM

    saved = saved_task(ckpt, path)
    if task_cls is not None and saved is not None and not issubclass(saved, task_cls):
        use = ("measure it on a parallel corpus (--dataset multi30k)" if saved.__name__ ==
               "Translation" else "use it for what it was trained for")  # fmt: skip
        raise CheckpointError(
            f"{path} is a checkpoint of {saved.__name__}, not {task_cls.__name__}: {use}."
        )
    task_cls = saved or task_cls or CausalLM
    hp = checked_hyperparameters(task_cls, ckpt.get("hyper_parameters"), path)
    if hp.get("compile"):  # how it was trained, not how it runs here: a file starts no compiler
        hp["compile"] = False
    hp.update(overrides or {})
    try:
        task = task_cls(**rebuild_arguments(task_cls, hp, ckpt, path, trust_init_from))
        task.hparams.update(hp)  # as saved: the lineage (init_from) too
    except CheckpointError:
        raise
    except (ZooError, TypeError, ValueError, KeyError, AttributeError) as e:
        raise CheckpointError(
            f"{path}: its hyper-parameters do not build a {task_cls.__name__} ({e})"
        ) from None
    task.on_load_checkpoint(ckpt)
    try:
        task.load_state_dict(ckpt["state_dict"], strict=strict)
    except (RuntimeError, KeyError, TypeError) as e:
        first = str(e).strip().splitlines()
        raise CheckpointError(
            f"{path}: its weights do not fit the {task_cls.__name__} its hyper-parameters describe "
            f"({first[-1].strip() if first else type(e).__name__})"
        ) from None
    return task


def migrate_checkpoint(path: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Record the architecture of a checkpoint written before it was recorded, following its own
    ``init_from`` once (its owner vouches for that source), so that it loads afterwards without
    fetching anything. Writes ``out`` (default: ``path`` itself, replaced atomically).

    Raises:
        CheckpointError: as :func:`load_checkpoint`.
    """
    from zoo.files import atomic_path

    path = Path(path)
    ckpt = dict(read_checkpoint(path))  # read once: rebuilt from, then written with the record
    task = _rebuild(ckpt, path, None, True, True, None)
    ckpt[MODEL_RECORD] = model_record(task.model)
    out = Path(out) if out is not None else path
    with atomic_path(out) as tmp:
        torch.save(ckpt, tmp)
    return out


def model_record(model: torch.nn.Module) -> dict[str, Any]:
    """:data:`MODEL_RECORD` of ``model``: its ``model_type`` and config as plain data."""
    return {"model_type": type(model).model_type, "config": model.config.to_dict()}


class CheckpointAsData:
    """Mixin of the zoo's tasks: Lightning's ``load_from_checkpoint`` goes through
    :func:`load_checkpoint`, so no ``_instantiator`` or ``class_path`` of the file is followed."""

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path, map_location=None, hparams_file=None, strict=None, **kwargs
    ):
        """The task saved in a ``.ckpt``, rebuilt from its hyper-parameters as data;
        ``kwargs`` override saved hyper-parameters.

        Raises:
            CheckpointError: see :func:`load_checkpoint`.
            ConfigError: ``hparams_file`` was given (hyper-parameters come from the checkpoint).
        """
        from zoo.errors import ConfigError

        if hparams_file is not None:
            raise ConfigError("load_from_checkpoint: hparams_file is not supported; pass the "
                              "hyper-parameters to change as keyword arguments")  # fmt: skip
        strict = True if strict is None else strict
        return load_checkpoint(checkpoint_path, cls, map_location, strict, overrides=kwargs)
