"""Registered attention mechanisms: what a model's ``attention`` config field names.

A mechanism is a name, a frozen dataclass of its own parameters (validated on construction, one
default per knob), and a builder ``(config, layer, params) -> module``; the module is called as
``attention(x, cache) -> (B, T, C)``, like :class:`~zoo.attention.CausalSelfAttention`. Each lives
in its own file of this package, which registers it:

    @dataclass(frozen=True)
    class MoBAParams(CheckedFields):
        block_size: int = 128
        top_k: int = 3

    @register_attention("moba", MoBAParams)
    def build_moba(config, layer, params): ...

Every module here is imported when a model first parses its attention (:func:`load_mechanisms`),
so adding a mechanism is adding one file; nothing else lists them.

**The attention spec.** A config's ``attention`` is one of

- a name, ``"moba"``: that mechanism, with its default parameters, in every layer;
- a mapping, ``{"name": "moba", "block_size": 64, "top_k": 4}``: the name and parameters that
  differ from the defaults (unknown keys and wrong types are a :class:`ConfigError`);
- a list of names and mappings, one per layer (bottom first), e.g. MoBA below and full attention
  in the last layer.

:func:`parse_attention` turns any of these into one :class:`AttentionSpec` per layer, and
:func:`canonical_attention` into the form a saved ``config.json`` holds (every parameter written
out, so a default that changes later never changes a published model). This layer imports nothing
above :mod:`zoo.attention` (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from zoo.config import CheckedFields, suggest
from zoo.errors import ConfigError

__all__ = [
    "AttentionBuilder",
    "AttentionSpec",
    "NoParams",
    "attention_names",
    "attention_pattern",
    "build_attention",
    "canonical_attention",
    "parse_attention",
    "register_attention",
    "tiny_attention",
]


@dataclass(frozen=True)
class NoParams(CheckedFields):
    """The parameters of a mechanism that has none (``dense``, ``sparsemax``)."""


@dataclass(frozen=True)
class AttentionSpec:
    """One layer's attention: a registered mechanism ``name`` and its ``params`` (an instance
    of the dataclass the mechanism registered)."""

    name: str
    params: Any

    def to_json(self) -> str | dict[str, Any]:
        """The saved form: the bare name when the mechanism has no parameters, else a mapping
        of the name and every parameter."""
        values = dataclasses.asdict(self.params)
        return {"name": self.name, **values} if values else self.name


AttentionBuilder = Callable[[Any, int, Any], nn.Module]  # (config, layer, params) -> module


@dataclass(frozen=True)
class _Mechanism:
    builder: AttentionBuilder
    params: type
    pattern: str


_MECHANISMS: dict[str, _Mechanism] = {}
_loaded = False


def register_attention(
    name: str, params: type = NoParams, *, pattern: str | None = None
) -> Callable[[AttentionBuilder], AttentionBuilder]:
    """Decorator: register ``builder(config, layer, params)`` under ``name`` (exact, unique),
    with ``params`` the frozen :class:`~zoo.config.CheckedFields` dataclass of its parameters
    (every field with a default). ``pattern``: which keys a query may see, as the registry's
    ``structure`` names it (default ``name``; a probability mapping over dense attention, such
    as ``sparsemax``, says ``"dense"``)."""

    def add(builder: AttentionBuilder) -> AttentionBuilder:
        old = _MECHANISMS.get(name)
        if old is not None and old.builder is not builder:
            raise ValueError(f"attention mechanism {name!r} is already registered")
        _MECHANISMS[name] = _Mechanism(builder, params, pattern or name)
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


def attention_pattern(specs: tuple[AttentionSpec, ...]) -> str:
    """The registry's ``structure`` pattern of a model whose layers attend by ``specs``: each
    mechanism's pattern once, bottom layer first, joined by ``+`` (``"local+moba"``)."""
    return "+".join(dict.fromkeys(_mechanism(s.name).pattern for s in specs))


def _mechanism(name: Any) -> _Mechanism:
    load_mechanisms()
    if not isinstance(name, str) or name not in _MECHANISMS:
        raise ConfigError(
            f"unknown attention {name!r}.{suggest(str(name), _MECHANISMS)} "
            f"Registered: {', '.join(sorted(_MECHANISMS))}."
        )
    return _MECHANISMS[name]


def _spec(value: Any) -> AttentionSpec:
    if isinstance(value, AttentionSpec):
        return value
    if isinstance(value, str):
        return AttentionSpec(value, _mechanism(value).params())
    if not isinstance(value, dict) or "name" not in value:
        raise ConfigError(
            f"attention={value!r}: give a mechanism name, a mapping with 'name' and its "
            "parameters, or a list of those, one per layer"
        )
    params = {k: v for k, v in value.items() if k != "name"}
    mechanism = _mechanism(value["name"])
    try:
        mechanism.params.check_keys(params)
    except ConfigError as err:
        raise ConfigError(f"attention {value['name']!r}: {err}") from None
    return AttentionSpec(value["name"], mechanism.params(**params))


def parse_attention(value: Any, n_layers: int) -> tuple[AttentionSpec, ...]:
    """One :class:`AttentionSpec` per layer from a config's ``attention`` (a name, a mapping or
    a list of ``n_layers`` of them; see the module docstring).

    Raises:
        ConfigError: an unknown name or parameter, a parameter of the wrong type or range, or a
            list whose length is not ``n_layers``.
    """
    if isinstance(value, list | tuple):
        if len(value) != n_layers:
            raise ConfigError(
                f"attention lists {len(value)} layers but the model has n_layers={n_layers}: "
                "give one entry per layer, or a single name for all of them"
            )
        return tuple(_spec(v) for v in value)
    return (_spec(value),) * n_layers


def canonical_attention(value: Any, n_layers: int) -> str | dict[str, Any] | tuple[Any, ...]:
    """The saved form of a config's ``attention``: one entry when every layer is the same, else
    a tuple of ``n_layers`` entries (:meth:`AttentionSpec.to_json` each)."""
    specs = parse_attention(value, n_layers)
    if all(s == specs[0] for s in specs):
        return specs[0].to_json()
    return tuple(s.to_json() for s in specs)


def build_attention(spec: AttentionSpec | str, config: Any, layer: int) -> nn.Module:
    """The attention module of ``spec`` (an :class:`AttentionSpec`, or a mechanism name with
    its default parameters) for block ``layer`` of a model with ``config``.

    Raises:
        ConfigError: the name is not registered (the message suggests close names).
    """
    spec = _spec(spec)
    return _mechanism(spec.name).builder(config, layer, spec.params)


def tiny_attention(value: Any, n_layers: int) -> str | dict[str, Any] | tuple[Any, ...]:
    """A config's ``attention`` for the tests' tiny models of ``n_layers`` layers: each spec's
    parameters through their ``tiny()`` (block sizes and windows a few positions long, so a
    sequence of tens of positions still selects, compresses and slides), where the parameters
    have one; a per-layer list keeps its first ``n_layers - 1`` entries and its last."""
    specs = parse_attention(value, len(value) if isinstance(value, list | tuple) else n_layers)
    specs = (*specs[: n_layers - 1], specs[-1]) if len(specs) > n_layers else specs[:n_layers]
    tiny = tuple(
        AttentionSpec(s.name, s.params.tiny()) if hasattr(s.params, "tiny") else s for s in specs
    )
    return canonical_attention(tiny, n_layers)
