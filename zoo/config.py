"""The base class of model configs: frozen dataclasses with strict, exact keys.

Every model family declares ``@dataclass(frozen=True) class XConfig(ModelConfig)``. Unknown keys are
an error (with the closest valid names suggested), so a typo in a recipe never silently trains the
default model.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Literal, Self

from zoo.errors import ConfigError

__all__ = ["ModelConfig", "suggest"]


def suggest(name: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest of ``choices``, or ``""`` if none is close."""
    close = difflib.get_close_matches(name, sorted(choices), n=3, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Base of every model config. Subclasses add typed fields with commented defaults.

    ``Literal[...]`` fields are checked on construction (:class:`ConfigError` names the choices).
    """

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            hint, value = hints[f.name], getattr(self, f.name)
            if typing.get_origin(hint) is Literal and value not in typing.get_args(hint):
                raise ConfigError(f"{f.name}={value!r} is not one of {typing.get_args(hint)}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def check_keys(cls, keys: Any) -> None:
        """Raise :class:`ConfigError` if any of ``keys`` is not a field of this config."""
        valid = cls.field_names()
        unknown = [k for k in keys if k not in valid]
        if unknown:
            hints = "".join(suggest(k, valid) for k in unknown)
            raise ConfigError(
                f"unknown {cls.__name__} key(s) {unknown}.{hints} Valid keys: {', '.join(valid)}."
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Self:
        """Build a config from a plain dict (e.g. ``config.json``); unknown keys are an error."""
        cls.check_keys(values)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **overrides: Any) -> Self:
        """A copy with ``overrides`` applied; unknown keys are an error."""
        self.check_keys(overrides)
        return dataclasses.replace(self, **overrides)
