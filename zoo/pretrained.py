"""Saving and loading models as ``config.json`` + ``model.safetensors`` (never pickles).

``config.json`` holds ``{"model_type": ..., "config": {...}, "zoo_version": ...}``; ``model_type``
selects the registered class, ``config`` its dataclass fields. A model that carries a subword
tokenizer (``model.tokenizer``, a ``tokenizers.Tokenizer``: the translation models) also gets
``tokenizer.json``, which ``from_pretrained`` attaches again, so the folder is all one needs.
Weights are written with ``safetensors.torch.save_model``, which stores tied weights once.
Loading checks every tensor name and shape against the model the config describes, so a corrupt
file or a config that does not match its weights gives a :class:`~zoo.errors.CheckpointError`
saying which, never a stack trace from deep in torch. Writes go to a temporary file renamed into
place, so an interrupted save never leaves a half-written checkpoint under the final name.

Integrity: ``save_pretrained`` also writes ``manifest.json``, the sha256 of every other file it
wrote. Loading a folder checks it (a mismatch is a :class:`~zoo.errors.ChecksumError` naming the file
and both hashes, and nothing is loaded); a folder without one loads with an
:class:`UnverifiedWeightsWarning`. Published checkpoints are checked against ``checkpoints.yaml``
instead. A bare name always means a published checkpoint or a Hub repo id, never a same-named folder
in the working directory (see :func:`explicit_path`).

The weights are what the config says: ``model.safetensors``' metadata records the config they were
saved with (:data:`~zoo.models.base.CONFIG_METADATA_KEY`), and a ``config.json`` that differs is a
:class:`~zoo.errors.CheckpointError` naming the keys, unless the caller overrides them explicitly
(then one :class:`ConfigOverrideWarning`). A folder saved before the metadata existed loads with one
:class:`UncheckedConfigWarning`; a published checkpoint needs none (``checkpoints.yaml`` binds its
``config.json`` and weights by sha256). Weights that are not floating point where the model's are,
or that hold NaN or infinity, are refused; a config too large for the machine's memory is refused
before anything is allocated (:func:`zoo.config.check_memory`).

Weights load in the dtype they were saved in unless ``dtype`` says otherwise, on one device
(``device``, or transformers' ``device_map``): :mod:`zoo.placement` checks both before anything is
read.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from zoo.config import ModelConfig, check_memory, suggest
from zoo.errors import CheckpointError, ConfigError, UnknownModelError, ZooError, ZooWarning
from zoo.files import (
    CONFIG_NAME,
    MANIFEST_NAME,
    TOKENIZER_NAME,
    WEIGHTS_NAME,
    UnverifiedWeightsWarning,
    explicit_path,
    verify_manifest,
)
from zoo.models.base import (
    CONFIG_METADATA_KEY,
    load_weights,
    read_weights_header,
    recorded_config,
)
from zoo.models.registry import create_model as build_preset
from zoo.models.registry import get_model_class, get_preset
from zoo.placement import LOAD_DTYPES, checked_device_and_dtype, device_problem, saved_dtype

__all__ = [
    "LOAD_DTYPES",
    "ConfigOverrideWarning",
    "UncheckedConfigWarning",
    "checked_device_and_dtype",
    "create_model",
    "device_problem",
    "find_checkpoint",
    "from_pretrained",
    "load_tokenizer",
    "load_weights",
]


class UncheckedConfigWarning(UnverifiedWeightsWarning, ZooWarning):
    """A folder's ``model.safetensors`` records no config (saved before the zoo recorded it), so
    its ``config.json`` cannot be checked against the weights; re-saving it records one."""


class ConfigOverrideWarning(ZooWarning):
    """``from_pretrained`` was given config values that differ from the config the weights were
    saved with: the model may not compute what it was trained to."""


def find_checkpoint(source: str | os.PathLike) -> Path | None:
    """The Lightning checkpoint a run or ``.ckpt`` path names, or ``None`` for other sources.

    A run directory (``runs/<family>/<dataset>``) gives ``checkpoints/best.ckpt`` (else ``last.ckpt``).
    Only explicit paths count (:func:`zoo.files.explicit_path`): a bare name is a published
    checkpoint even if a same-named folder is here.
    """
    path = explicit_path(source)
    if path is None:
        return None
    if path.is_file() and path.suffix == ".ckpt":
        return path
    for name in ("best.ckpt", "last.ckpt"):
        if (path / "checkpoints" / name).is_file():
            return path / "checkpoints" / name
    if path.suffix == ".ckpt":
        raise CheckpointError(f"{path} does not exist.")
    return None


def _read_config(path: Path) -> tuple[type[nn.Module], ModelConfig]:
    try:
        meta = json.loads(path.read_text())
        model_type, values = meta["model_type"], meta["config"]
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} is missing: a saved model directory holds {CONFIG_NAME} and "
            f"{WEIGHTS_NAME} (written by model.save_pretrained)."
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(
            f"{path} is not a valid zoo config ({type(e).__name__}: {e}); "
            "it needs 'model_type' and 'config' keys."
        ) from None
    try:
        cls = get_model_class(model_type)
        config = cls.config_class.from_dict(values)  # type: ignore[attr-defined]
    except (UnknownModelError, ConfigError, TypeError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    return cls, config


def _differences(config: ModelConfig, recorded: ModelConfig) -> dict[str, tuple[Any, Any]]:
    """``{key: (value, recorded value)}`` for every field where the two configs differ."""
    now, then = config.to_dict(), recorded.to_dict()
    return {key: (now[key], then[key]) for key in now if now[key] != then[key]}


def _with_overrides(
    config: ModelConfig, overrides: dict[str, Any], config_path: Path
) -> ModelConfig:
    """``config`` with the caller's ``overrides`` of :func:`from_pretrained`.

    Raises:
        ConfigError: a key that is neither a field of the config nor an option of
            :func:`from_pretrained` (close names suggested), or an invalid value.
    """
    fields = config.field_names()
    unknown = sorted(k for k in overrides if k not in fields)
    if unknown:
        options = list(from_pretrained.__kwdefaults__ or {})
        hints = "".join(suggest(k, [*fields, *options]) for k in unknown)
        raise ConfigError(
            f"from_pretrained: unknown argument(s) {', '.join(unknown)}: neither an option of "
            f"from_pretrained nor a field of {type(config).__name__} ({config_path}).{hints}"
        )
    try:
        return config.replace(**overrides)
    except ConfigError as e:
        raise ConfigError(f"from_pretrained: {e}") from None


def _registered(directory: Path) -> bool:
    """Whether a folder's verified manifest gives its config and weights the sha256 that
    ``checkpoints.yaml`` registers for a published checkpoint (its shipped copy, loaded by path):
    the registry binds the two files, so there is nothing more to check."""
    from zoo.hub import load_registry

    recorded = json.loads((directory / MANIFEST_NAME).read_text()).get("sha256", {})
    mine = (recorded.get(CONFIG_NAME), recorded.get(WEIGHTS_NAME))
    try:
        entries = load_registry().entries.values()
    except ZooError:  # no readable registry: nothing binds the files
        return False
    return any(
        mine == tuple((e.files.get(f) or {}).get("sha256") for f in (CONFIG_NAME, WEIGHTS_NAME))
        for e in entries
    )


def _warn_if_unchecked(directory: Path, *, unverified: bool, unchecked: bool) -> None:
    """At most one warning for a folder :func:`from_pretrained` cannot check: no manifest
    (``unverified``), weights that record no config (``unchecked``), or both."""
    weights = directory / WEIGHTS_NAME
    if unverified and unchecked:
        message, category = (
            f"{directory} has no {MANIFEST_NAME} and its {WEIGHTS_NAME} records no config: its "
            f"files are unverified and its {CONFIG_NAME} cannot be checked against the weights "
            "(a folder saved by an older zoo, or not by save_pretrained). Re-save it with "
            "model.save_pretrained to record both.",
            UncheckedConfigWarning,
        )
    elif unverified:
        message, category = (
            f"{directory} has no {MANIFEST_NAME}: its files are unverified (a folder saved "
            "before manifests existed, or not by save_pretrained). Re-save it with "
            "model.save_pretrained to record their sha256.",
            UnverifiedWeightsWarning,
        )
    elif unchecked:
        message, category = (
            f"{weights} records no config (saved by an older zoo, or not by save_pretrained): "
            f"its {CONFIG_NAME} cannot be checked against the weights. Re-save it with "
            "model.save_pretrained to record the config.",
            UncheckedConfigWarning,
        )
    else:
        return
    warnings.warn(message, category, stacklevel=3)  # at from_pretrained's caller


def _config_to_build(
    saved: ModelConfig,
    recorded: ModelConfig | None,
    overrides: dict[str, Any],
    config_path: Path,
) -> ModelConfig:
    """``config.json``'s config (``saved``) with the caller's ``overrides``, checked against the
    config the weights were saved with (``recorded``; ``None``: nothing to check against) and
    against the machine's memory; one :class:`ConfigOverrideWarning` for overrides that differ.

    Raises:
        CheckpointError: ``config.json`` differs from ``recorded`` in keys not overridden.
        ConfigError: an unknown or invalid override; a config too large for the memory.
    """
    config = _with_overrides(saved, overrides, config_path)
    differences = {} if recorded is None else _differences(config, recorded)
    edited = {k: v for k, v in differences.items() if k not in overrides}
    if edited:
        found = ", ".join(f"{k} {now!r} (saved {then!r})" for k, (now, then) in edited.items())
        call = ", ".join(f"{k}={now!r}" for k, (now, _) in edited.items())
        raise CheckpointError(
            f"{config_path} disagrees with the config {WEIGHTS_NAME} was saved with: {found}; "
            f"restore {CONFIG_NAME}, or pass these keys explicitly to "
            f"from_pretrained(..., {call}) to override them."
        )
    owner = str(config_path) + (f" with {overrides}" if overrides else "")
    check_memory(config, owner, "cpu")  # before the model is allocated
    if differences:
        found = ", ".join(f"{k}={now!r} (saved {then!r})" for k, (now, then) in differences.items())
        warnings.warn(
            f"from_pretrained: {found} override the config {config_path.parent / WEIGHTS_NAME} "
            "was saved with; the model may not compute what it was trained to.",
            ConfigOverrideWarning,
            stacklevel=3,  # at from_pretrained's caller
        )
    return config


def load_tokenizer(path: str | os.PathLike, vocab_size: int | None = None) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json``, checked against the model's vocabulary.

    Raises:
        CheckpointError: the file is not a tokenizer, or its vocabulary is not ``vocab_size``.
    """
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises plain Exception for unparsable JSON
        raise CheckpointError(
            f"{path} is not a readable tokenizer ({type(e).__name__}: {e}); it is truncated or "
            "corrupt: download it again or re-save the model."
        ) from None
    if vocab_size is not None and tokenizer.get_vocab_size() != vocab_size:
        raise CheckpointError(
            f"{path} has {tokenizer.get_vocab_size()} tokens but the model's vocab_size is "
            f"{vocab_size}: the tokenizer and weights come from different models."
        )
    return tokenizer


def from_pretrained(
    name_or_path: str | os.PathLike,
    *,
    revision: str | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    cache_dir: str | os.PathLike | None = None,
    force_download: bool = False,
    local_files_only: bool = False,
    token: str | bool | None = None,
    device_map: str | int | torch.device | dict[str, Any] | None = None,
    torch_dtype: torch.dtype | str | None = None,
    **overrides: Any,
) -> nn.Module:
    """Load a pretrained model, in eval mode.

    Args:
        name_or_path: a published checkpoint (``"transformer_lm_small.pg19mini"``, see ``zoo list``;
            a bare model name works when it has one checkpoint), a Hub repo id (``"ns/name"``,
            optionally ``"ns/name@revision"``), or a local directory written by ``save_pretrained``,
            named explicitly (a ``Path``, ``./name``, an absolute path: see :func:`explicit_path`;
            a bare name never loads a same-named folder).
        revision: a Hub branch, tag or commit for a repo id. A published name loads only the
            revision ``checkpoints.yaml`` pins; its repo id with another revision loads that
            revision unverified (it must exist on the Hub).
        device: where to put the model (default: CPU); one this machine has.
        dtype: the dtype of the floating-point weights and buffers. ``None`` or ``"auto"``
            (default): as saved, the dtype most of the file's floating-point values have, read
            from its safetensors header (a folder saved in bf16 loads in bf16; published
            checkpoints are fp32). Else one of :data:`LOAD_DTYPES`, as a ``torch.dtype`` or its
            name (``"bfloat16"``, ``"torch.bfloat16"``, ``"bf16"``, ``"float16"``/``"fp16"``,
            ``"float32"``/``"fp32"``, ``"float64"``): the weights load exactly as saved, then
            are cast.
        cache_dir: the Hugging Face cache to use (default: ``HF_HOME``'s).
        force_download: download again even if the files are cached or shipped.
        local_files_only: never try the Hub: the shipped copy or the Hugging Face cache only
            (``huggingface_hub``'s name; ``HF_HUB_OFFLINE=1`` does the same for every call).
        token: a Hugging Face token for a private repo (default: the saved login, ``HF_TOKEN``).
        device_map: transformers' name for ``device``, for one device: ``"cpu"``, ``"cuda"``,
            ``"cuda:0"``, a ``torch.device``, an ``int`` (that GPU), ``{"": device}`` (or a map
            that names one device throughout), or ``"auto"``: the first GPU (else ``mps``, else
            the CPU). A zoo model loads whole on one device.
        torch_dtype: transformers' older name for ``dtype`` (no warning); giving both, with
            different values, is an error.
        **overrides: config fields to replace (``dropout=0.0``), as ``create_model`` takes them.
            One that differs from the config the weights were saved with loads with one
            :class:`ConfigOverrideWarning` naming both values.

    A retired published checkpoint loads as before, with one
    :class:`~zoo.errors.RetiredCheckpointWarning` naming the checkpoint to use instead.

    Published checkpoints are verified file by file against the sha256 in ``checkpoints.yaml``, and
    other folders against their ``manifest.json`` (a folder without one loads with an
    :class:`UnverifiedWeightsWarning`) and their ``config.json`` against the config recorded in
    the weights' metadata (a folder saved before it was recorded loads with one
    :class:`UncheckedConfigWarning`, which is an :class:`UnverifiedWeightsWarning`);
    the copy shipped in the repository (``checkpoints/<name>/``) is used when it matches, the Hub
    (through the Hugging Face cache, respecting ``HF_HUB_OFFLINE``) otherwise (:mod:`zoo.hub`).
    A folder with ``tokenizer.json`` gives a model whose ``tokenizer`` attribute holds it. The model
    is built on the CPU with real tensors even inside ``with torch.device("meta")`` (then moved to
    ``device``).

    Raises:
        ConfigError: a device this machine lacks, a ``device_map`` over several devices (or
            offloading to ``"disk"``), an unknown dtype name or a dtype that is not
            floating-point, ``dtype`` and ``torch_dtype`` (or ``device`` and ``device_map``)
            that differ (checked before loading: :func:`checked_device_and_dtype`); weights saved
            in a dtype zoo models do not compute in (fp8) without ``dtype``; ``force_download`` with
            ``local_files_only``; an override that is not a config field or not a valid value; a
            config (with its overrides) too large for this machine's memory, before anything is
            allocated (:func:`zoo.config.check_memory`: the estimate in GiB and what is free).
        UnknownModelError: not a directory, a published name or a repo id (close names suggested).
        ChecksumError: a file differs from its registered (or manifest) sha256; nothing is loaded.
        HubError: the Hub refused or is unreachable and nothing usable is cached.
        CheckpointError: missing files, a corrupt weights or tokenizer file, or weights (or a
            tokenizer) that do not match the config; a ``config.json`` that differs from the
            config the weights were saved with in keys not overridden (each key named, with both
            values); weights that are not floating point where the model's are, or hold NaN or
            infinity (the tensor named).
    """
    device, dtype = checked_device_and_dtype(
        device, dtype, device_map=device_map, torch_dtype=torch_dtype
    )
    if force_download and local_files_only:
        raise ConfigError(
            "from_pretrained: force_download=True downloads again and local_files_only=True "
            "never downloads; pass one of them."
        )
    local = explicit_path(name_or_path)
    if local is not None:
        if not local.is_dir():
            raise CheckpointError(
                f"{str(name_or_path)!r} is not a directory. from_pretrained takes a directory "
                f"written by model.save_pretrained (holding {CONFIG_NAME} and {WEIGHTS_NAME}), a "
                "published checkpoint name (`zoo list`) or a Hub repo id."
            )
        directory, entry = local, None
    else:
        from zoo.hub.download import resolve, warn_if_retired

        directory, entry = resolve(
            name_or_path, revision, cache_dir=cache_dir, force_download=force_download,
            local_files_only=local_files_only, token=token,
        )  # fmt: skip
        warn_if_retired(entry, stacklevel=2)  # at from_pretrained's caller
    unverified = entry is None and not verify_manifest(directory)  # published: checkpoints.yaml
    config_path, weights = directory / CONFIG_NAME, directory / WEIGHTS_NAME
    try:  # the header alone: the tensors are read once, by load_weights
        tensors, metadata = read_weights_header(weights) if config_path.is_file() else ({}, None)
    except CheckpointError:
        tensors, metadata = {}, None  # load_weights says what is wrong, after the warning
    # a published checkpoint's config.json is bound to its weights by checkpoints.yaml
    unchecked = entry is None and metadata is not None and CONFIG_METADATA_KEY not in metadata
    unchecked = unchecked and (unverified or not _registered(directory))  # a shipped copy: bound
    if config_path.is_file():
        _warn_if_unchecked(directory, unverified=unverified, unchecked=unchecked)
    cls, saved = _read_config(config_path)
    recorded = recorded_config(metadata or {}, cls, config_path, weights)
    if recorded is None and entry is not None:
        recorded = saved  # bound to the weights by the registry's sha256
    config = _config_to_build(saved, recorded, overrides, config_path)
    as_saved = saved_dtype(tensors, dtype, weights)
    with torch.device("cpu"):  # real tensors even inside `with torch.device("meta")`
        model = cls(config)
    # built and loaded in fp32 (saved values upcast exactly), then cast: buffers the model
    # computes itself (position tables) stay exact in fp32 however the weights were saved
    load_weights(model, weights)
    model.published_name = entry.name if entry is not None else None  # for its registered decoding
    if (directory / TOKENIZER_NAME).is_file():
        model.tokenizer = load_tokenizer(directory / TOKENIZER_NAME, config.vocab_size)
    target = dtype if dtype is not None else as_saved
    if device is not None or target not in (None, torch.float32):
        model.to(device=device, dtype=target)
    return model.eval()


_PLACEMENT = ("device", "device_map", "dtype", "torch_dtype")  # from_pretrained's, not config's


def create_model(name: str, *, pretrained: bool = False, **overrides: Any) -> nn.Module:
    """The preset ``name``, newly initialised with config fields replaced by ``overrides``
    (:func:`zoo.models.create_model`), or with ``pretrained=True`` (timm's habit) the published
    weights of its checkpoint: the ``checkpoints.yaml`` entry of that preset that is not retired,
    loaded and verified by :func:`from_pretrained`, which also takes ``dtype`` (default: as saved),
    ``device``, ``device_map`` and ``torch_dtype`` from it. Either way the model is in training
    mode, as a new ``nn.Module`` is.

    Raises:
        UnknownModelError: ``name`` is not a preset, or (``pretrained``) no current checkpoint has
            that preset (the message names the presets that have one).
        ConfigError: ``overrides`` with ``pretrained=True`` (the weights fix the config), several
            current checkpoints of the preset (pass one of them to :func:`from_pretrained`), or
            an override :func:`zoo.models.create_model` refuses.
    """
    if not pretrained:
        return build_preset(name, **overrides)
    get_preset(name)  # an unknown preset: UnknownModelError with close names
    placement = {k: overrides.pop(k) for k in _PLACEMENT if k in overrides}
    if overrides:
        raise ConfigError(
            f"create_model({name!r}, pretrained=True) takes no config overrides "
            f"({', '.join(sorted(overrides))}): the published weights fix the config. Drop "
            "pretrained=True to build a new model, or fine-tune with `zoo fit --model.init_from`."
        )
    from zoo.hub import load_registry

    current = [e for e in load_registry().entries.values() if e.retired is None]
    mine = sorted(e.name for e in current if e.model == name)
    if not mine:
        have = ", ".join(sorted({e.model for e in current}))
        raise UnknownModelError(
            f"the preset {name!r} has no published checkpoint, so pretrained=True has no weights "
            f"to load. Presets with one: {have}."
        )
    if len(mine) > 1:
        raise ConfigError(
            f"the preset {name!r} has {len(mine)} published checkpoints ({', '.join(mine)}): "
            "load the one you mean with zoo.from_pretrained(NAME)."
        )
    return from_pretrained(mine[0], **placement).train()
