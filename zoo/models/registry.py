"""The model registry: exact preset names mapped to a model class and its config.

Each family registers itself when its file is imported (``zoo/models/<family>.py``), timm-style:

    @register_model
    class TransformerLM(...): ...
    register_preset("transformer_lm_small", TransformerLM, TransformerConfig(...), "...")

``create_model(name, **overrides)`` builds one; ``list_models()`` lists them. Model classes are
also registered by their ``model_type`` so that ``from_pretrained`` can rebuild any saved model.
Importing this module imports its package, :mod:`zoo.models`, first, and that imports every family:
the registry is full before any of its functions can be called, without importing upward.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from zoo.config import ModelConfig, check_memory, suggest
from zoo.errors import UnknownModelError

__all__ = [
    "Preset",
    "create_model",
    "get_model_class",
    "get_preset",
    "list_models",
    "register_model",
    "register_preset",
]

_MODEL_CLASSES: dict[str, type[nn.Module]] = {}
_PRESETS: dict[str, Preset] = {}


@dataclass(frozen=True)
class Preset:
    """A named model configuration."""

    name: str
    model_cls: type[nn.Module]
    config: ModelConfig
    description: str = ""

    @property
    def family(self) -> str:
        return self.model_cls.model_type  # type: ignore[attr-defined]


def register_model(cls: type[nn.Module]) -> type[nn.Module]:
    """Class decorator: register a model class under its ``model_type`` attribute."""
    model_type = cls.model_type  # type: ignore[attr-defined]
    if model_type in _MODEL_CLASSES and _MODEL_CLASSES[model_type] is not cls:
        raise ValueError(f"model_type {model_type!r} is already registered")
    _MODEL_CLASSES[model_type] = cls
    return cls


def register_preset(
    name: str, model_cls: type[nn.Module], config: ModelConfig, description: str = ""
) -> Preset:
    """Register ``name`` as ``model_cls(config)``; names are unique and matched exactly."""
    if name in _PRESETS:
        raise ValueError(f"preset {name!r} is already registered")
    preset = Preset(name, model_cls, config, description)
    _PRESETS[name] = preset
    return preset


def get_preset(name: str) -> Preset:
    """The preset registered as exactly ``name``.

    Raises:
        UnknownModelError: no such preset; the message suggests close names.
    """
    try:
        return _PRESETS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}.{suggest(name, _PRESETS)} "
            f"See zoo.list_models() for the {len(_PRESETS)} registered models."
        ) from None


def get_model_class(model_type: str) -> type[nn.Module]:
    """The model class registered under ``model_type`` (as written in ``config.json``)."""
    try:
        return _MODEL_CLASSES[model_type]
    except KeyError:
        raise UnknownModelError(
            f"unknown model_type {model_type!r}.{suggest(model_type, _MODEL_CLASSES)} "
            f"Known types: {', '.join(sorted(_MODEL_CLASSES))}."
        ) from None


def create_model(name: str, **overrides: Any) -> nn.Module:
    """Build the preset ``name`` with config fields replaced by ``overrides``.

    Example: ``create_model("transformer_lm_small", max_seq_len=512, dropout=0.0)``.

    The config is checked against the memory of the device the model is built on (the default
    device) before anything is allocated (:func:`zoo.config.check_memory`).

    Raises:
        UnknownModelError: ``name`` is not registered.
        ConfigError: an override key is not a field of the preset's config, a value is invalid
            (``n_layers=1e6``: not an integer), or the model would not fit in memory (the message
            gives the estimate in GiB and the memory available).
    """
    preset = get_preset(name)
    config = preset.config.replace(**overrides)
    device = torch.get_default_device()
    check_memory(config, f"create_model({name!r})", str(device))
    return preset.model_cls(config)


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted names of registered presets, optionally filtered by a glob ``pattern``."""
    names = sorted(_PRESETS)
    if pattern is not None:
        names = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    return names
