"""Registered attention mechanisms: what a Transformer LM's ``attention`` config field names.

A mechanism is a builder ``(config, layer) -> module``; the module is called as
``attention(x, cache) -> (B, T, C)``, like :class:`~zoo.attention.CausalSelfAttention`. Each lives
in its own file of this package, which registers it:

    @register_attention("sparsemax")
    def build_sparsemax(config, layer): ...

Every module here is imported when a model first builds its attention (:func:`load_mechanisms`), so
adding a mechanism is adding one file; ``create_model(preset, attention=NAME)`` uses it, and a
preset that names it is registered beside its model family (:mod:`zoo.models.transformer`). This
layer imports nothing above :mod:`zoo.attention` (docs/architecture.md).

The Sparse, Routing and Image Transformers build their attention from their own fields (patterns,
clusters, image blocks) and take only ``attention="dense"``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from torch import nn

from zoo.config import suggest
from zoo.errors import ConfigError

__all__ = ["AttentionBuilder", "attention_names", "build_attention", "register_attention"]

AttentionBuilder = Callable[[Any, int], nn.Module]  # (config, layer index) -> attention module
_MECHANISMS: dict[str, AttentionBuilder] = {}
_loaded = False


def register_attention(name: str) -> Callable[[AttentionBuilder], AttentionBuilder]:
    """Decorator: register ``builder(config, layer)`` under ``name`` (exact, unique)."""

    def add(builder: AttentionBuilder) -> AttentionBuilder:
        if name in _MECHANISMS and _MECHANISMS[name] is not builder:
            raise ValueError(f"attention mechanism {name!r} is already registered")
        _MECHANISMS[name] = builder
        return builder

    return add


def load_mechanisms() -> None:
    """Import every module of this package once (each registers its mechanisms)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def attention_names() -> list[str]:
    """The registered mechanisms, sorted."""
    load_mechanisms()
    return sorted(_MECHANISMS)


def build_attention(name: str, config: Any, layer: int) -> nn.Module:
    """The attention module of mechanism ``name`` for block ``layer`` of a model with ``config``.

    Raises:
        ConfigError: ``name`` is not registered (the message suggests close names).
    """
    load_mechanisms()
    if name not in _MECHANISMS:
        raise ConfigError(
            f"unknown attention {name!r}.{suggest(name, _MECHANISMS)} "
            f"Registered: {', '.join(sorted(_MECHANISMS))}."
        )
    return _MECHANISMS[name](config, layer)
