"""The base class of model configs: frozen dataclasses with strict, exact keys.

Every model family declares ``@dataclass(frozen=True) class XConfig(ModelConfig)``. Unknown keys are
an error (with the closest valid names suggested), so a typo in a recipe never silently trains the
default model.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from typing import Any, ClassVar, Literal, Self

from zoo.errors import ConfigError

__all__ = [
    "CheckedFields",
    "ModelConfig",
    "available_memory",
    "check_memory",
    "require_positive",
    "suggest",
]


def suggest(name: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest of ``choices``, or ``""`` if none is close."""
    close = difflib.get_close_matches(name, sorted(choices), n=3, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"


def require_positive(owner: str, minimum: int = 1, **values: Any) -> None:
    """Raise :class:`ConfigError` unless each of ``values`` (``None`` skipped) is an integer
    ``>= minimum``: ``owner`` names whose argument it is in the message."""
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ConfigError(f"{owner}: {key} must be {what}, got {value!r}")


def _checked(name: str, hint: Any, value: Any) -> Any:
    """``value`` checked against the type ``hint`` of field ``name``: ints, floats, bools, strings,
    literals, optionals, unions and tuples (a list, as JSON gives it, becomes a tuple; an int for a
    float becomes a float). Other hints are not checked.

    Raises:
        ConfigError: ``value`` is not of that type (``n_layers=4.0``, ``n_layers='4'``).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{name}={value!r} is not one of {args}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return value
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _checked(name, arg, value)
            except ConfigError:
                continue
        raise ConfigError(f"{name}={value!r} must be {_describe(hint)}")
    if hint in (int, float, bool, str):
        ok = isinstance(value, hint) and not (hint is not bool and isinstance(value, bool))
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not ok:
            raise ConfigError(f"{name}={value!r} must be {_describe(hint)}")
        return value
    if origin is tuple and isinstance(value, list | tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_checked(name, args[0], v) for v in value)
        if args and len(args) != len(value):
            return tuple(value)  # the length: the family's own check says what it must be
        return tuple(_checked(name, a, v) for a, v in zip(args, value, strict=True))
    if origin is tuple:
        raise ConfigError(f"{name}={value!r} must be {_describe(hint)}")
    return value


def _describe(hint: Any) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if hint in names:
        return names[hint]
    return "of type " + str(hint).replace("typing.", "").replace("NoneType", "None")


@dataclasses.dataclass(frozen=True)
class CheckedFields:
    """Base of frozen dataclasses whose field values are checked against their type hints on
    construction (:func:`_checked`: a wrong type or a value outside a ``Literal`` is a
    :class:`ConfigError`) and whose keys are exact (:meth:`from_dict`). Model configs and the
    parameters of attention mechanisms (:mod:`zoo.attention.mechanisms`) both build on it."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            checked = _checked(f.name, hints[f.name], value)
            if checked is not value:  # an int for a float, a JSON list for a tuple
                object.__setattr__(self, f.name, checked)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def check_keys(cls, keys: Any) -> None:
        """Raise :class:`ConfigError` if any of ``keys`` is not a field of this class."""
        valid = cls.field_names()
        unknown = [k for k in keys if k not in valid]
        if unknown:
            hints = "".join(suggest(k, valid) for k in unknown)
            raise ConfigError(
                f"unknown {cls.__name__} key(s) {unknown}.{hints} Valid keys: {', '.join(valid)}."
            )


@dataclasses.dataclass(frozen=True)
class ModelConfig(CheckedFields):
    """Base of every model config. Subclasses add typed fields with commented defaults.

    ``Literal[...]`` fields are checked on construction (:class:`ConfigError` names the choices).
    A family whose default changes lists the old value in ``saved_defaults``: a saved config
    (``config.json``) that lacks the key was built with it, and :meth:`from_dict` restores it.
    ``training_only`` names fields that a recipe fine-tuning a checkpoint (``init_from``) may
    leave at the preset's default: the checkpoint keeps its own. ``retired_keys`` are keys that
    older saved configs hold but that are no longer fields: :meth:`from_dict` checks their type,
    drops them and keeps their values in ``retired`` (for the model to read; never saved again).
    """

    # key -> the value a config saved without that key was built with
    saved_defaults: ClassVar[dict[str, Any]] = {}
    # fields that steer only training's non-gradient updates (e.g. routing centroids), never the
    # weights or the function: fine-tuning a checkpoint keeps its own values unless overridden
    training_only: ClassVar[tuple[str, ...]] = ()
    # key -> the type of its value, for keys older configs hold that are no longer fields
    retired_keys: ClassVar[dict[str, Any]] = {}
    # the values of retired keys this config was loaded with (from_dict); empty for a new one
    retired: ClassVar[dict[str, Any]] = {}

    def structure(self) -> dict[str, Any]:
        """The attention structure as plain data (the registry's and model cards' ``structure``):
        ``pattern``, its parameters, ``context`` (positions), ``position`` and ``causal`` (True
        when no prediction depends on a later position, so the likelihood is strict). Families
        override it; the base says only what every config knows."""
        return {"pattern": "unknown", "context": getattr(self, "max_seq_len", None)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Self:
        """Build a config from a saved dict (e.g. ``config.json``); unknown keys are an error, and
        a key it lacks takes its ``saved_defaults`` value, else the field's default. A
        ``retired_keys`` key is checked and moved to ``retired``."""
        retired = {k: _checked(k, t, values[k]) for k, t in cls.retired_keys.items() if k in values}
        values = {k: v for k, v in values.items() if k not in retired}
        cls.check_keys(values)
        config = cls(**(cls.saved_defaults | values))
        if retired:
            object.__setattr__(config, "retired", retired)  # not a field: compared or saved never
        return config

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **overrides: Any) -> Self:
        """A copy with ``overrides`` applied (and this config's ``retired`` values); unknown
        keys are an error."""
        self.check_keys(overrides)
        config = dataclasses.replace(self, **overrides)
        if self.retired:
            object.__setattr__(config, "retired", self.retired)
        return config

    def memory_estimate(self) -> tuple[int, int]:
        """``(parameters, activation_bytes)`` of a model of this config, from the config alone
        (nothing is allocated): the embedding and each layer's attention and feed-forward matrices
        (``vocab_size * d_model + layers * (4 * d_model**2 + 2 * d_model * d_ff)``, with layers the
        ``n_layers`` or encoder and decoder layers), and the fp32 activations of one
        ``max_seq_len`` window at batch 1 in inference (the logits and one layer's residual and
        feed-forward widths). Biases, norms, positions and untied heads are left out: for every
        registered preset it is within 1% above, or below, the true count, so a config it refuses
        cannot fit. A family whose sizes are not in the shared vocabulary overrides it."""
        d = getattr(self, "d_model", 0)
        width = getattr(self, "d_embedding", d)  # the LSTM's embeddings are their own width
        layers = sum(getattr(self, k, 0) for k in ("n_layers", "n_encoder_layers",
                                                   "n_decoder_layers"))  # fmt: skip
        d_ff, vocab = getattr(self, "d_ff", 0), getattr(self, "vocab_size", 0)
        parameters = vocab * width + layers * (4 * d * d + 2 * d * d_ff)
        activations = 4 * getattr(self, "max_seq_len", 0) * (vocab + 4 * d + d_ff)
        return parameters, activations


def available_memory(device: str = "cpu") -> int | None:
    """Bytes a new model may take on ``device``: for the CPU, ``MemAvailable`` of
    ``/proc/meminfo`` (Linux), else the free physical pages (``os.sysconf``); for CUDA, the free
    memory of the device. ``None`` when unknown (``meta`` allocates nothing)."""
    kind = str(device).split(":")[0]
    if kind == "cuda":
        import torch  # only here: this module imports nothing heavy

        try:
            return torch.cuda.mem_get_info(torch.device(device))[0]
        except (RuntimeError, AssertionError):  # no CUDA in this build: the constructor says so
            return None
    if kind != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_memory(config: ModelConfig, owner: str, device: str = "cpu") -> None:
    """Refuse ``config`` before a model of it is allocated on ``device`` if its
    :meth:`~ModelConfig.memory_estimate` (parameters in fp32, plus activations) exceeds
    :func:`available_memory` (``n_layers: 1000000``, ``d_model: 1000000``); ``owner`` (the file
    or call the config comes from) starts the message.

    Raises:
        ConfigError: one line with the estimate in GiB, the memory available and the size fields.
    """
    parameters, activations = config.memory_estimate()
    needed = 4 * parameters + activations
    free = available_memory(device)
    if free is None or needed <= free:
        return
    sizes = ", ".join(
        f"{k} {getattr(config, k)}"
        for k in ("n_layers", "n_encoder_layers", "n_decoder_layers", "d_model", "d_embedding",
                  "d_hidden", "d_ff", "vocab_size", "max_seq_len")
        if k in config.field_names()
    )  # fmt: skip
    gib = 2**30
    raise ConfigError(
        f"{owner}: a model of this config needs about {needed / gib:,.1f} GiB "
        f"({parameters:.3g} parameters in fp32, {activations / gib:,.1f} GiB of activations for "
        f"one {getattr(config, 'max_seq_len', '?')}-position window) but {device} has "
        f"{free / gib:,.1f} GiB available ({sizes}); reduce these sizes"
    )
