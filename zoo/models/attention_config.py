"""How a decoder-only config names its attention: :class:`AttentionConfig`, the part of
:class:`~zoo.models.transformer.TransformerConfig` that every LM family shares.

``attention`` is an attention spec of :mod:`zoo.attention.mechanisms`: a registered name, a
mapping ``{"name": ..., parameters}``, or a list of those, one per layer. The Sparse and Routing
families also build their attention from fields of their own (``pattern``, ``stride``,
``n_clusters``, ...), which is what their published configs hold. Those fields build the same
registered mechanisms (:meth:`AttentionConfig.own_attention`), and they apply while ``attention``
holds one of the family's own values (:attr:`AttentionConfig.own_attention_values`: ``"dense"``,
what every Sparse and Routing ``config.json`` saved, where it never meant dense attention; the
Image Transformer's ``"local_1d"`` and ``"local_2d"``). Any other spec names the attention itself:

- such a mechanism by its bare name in such a family is ``{"name": ...}`` (``{"name": "dense"}``),
  and is saved that way;
- the family's attention fields (:attr:`AttentionConfig.own_attention_fields`) must then keep
  their defaults: a spec beside a changed field is a :class:`~zoo.errors.ConfigError`, never a
  field silently ignored; :meth:`AttentionConfig.replace` resets them when ``attention`` alone is
  replaced, so ``create_model("sparse_transformer_small", attention="moba")`` works.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from zoo.attention.mechanisms import (
    AttentionSpec,
    attention_pattern,
    canonical_attention,
    parse_attention,
)
from zoo.errors import ConfigError

__all__ = ["OWN", "AttentionConfig"]

OWN = "dense"  # the saved ``attention`` of a family whose own fields build its attention


class AttentionConfig:
    """Mixin of the LM configs: validates ``attention`` and gives one
    :class:`~zoo.attention.mechanisms.AttentionSpec` per layer (:attr:`attention_specs`)."""

    attention: Any
    n_layers: int
    # families whose attention comes from their own fields (patterns, clusters) set this, and
    # override own_attention and own_attention_fields
    builds_own_attention: ClassVar[bool] = False
    # the fields that only shape the attention (they mean nothing once attention is named)
    own_attention_fields: ClassVar[tuple[str, ...]] = ()
    # the values of `attention` that mean "from the family's own fields"
    own_attention_values: ClassVar[tuple[str, ...]] = (OWN,)

    @property
    def names_attention(self) -> bool:
        """Whether ``attention`` names registered mechanisms (always, except in a family that
        builds its own attention while ``attention`` holds one of its own values)."""
        own = isinstance(self.attention, str) and self.attention in self.own_attention_values
        return not (self.builds_own_attention and own)

    def own_attention(self) -> tuple[AttentionSpec, ...]:
        """The mechanisms the family's own fields describe, one per layer (families that build
        their own attention override this)."""
        raise NotImplementedError(f"{type(self).__name__} names its attention in `attention`")

    @property
    def attention_specs(self) -> tuple[AttentionSpec, ...]:
        """One :class:`~zoo.attention.mechanisms.AttentionSpec` per layer, bottom first."""
        if not self.names_attention:
            return self.own_attention()
        return parse_attention(self.attention, self.n_layers)

    def named_structure(self) -> dict[str, Any]:
        """The registry's ``structure`` of a model whose ``attention`` names its mechanisms:
        ``pattern`` (each mechanism's pattern once, bottom first: ``local+moba``), ``mechanism``
        (the saved spec), ``context``, ``position``, and ``causal`` (false when a layer routes
        by top-w, which looks at the whole sequence)."""
        specs = parse_attention(self.attention, self.n_layers)
        causal = all(getattr(s.params, "causal", True) for s in specs)
        return {"pattern": attention_pattern(specs), "mechanism": self.attention,
                "context": getattr(self, "max_seq_len", None),
                "position": getattr(self, "position", None), "causal": causal}  # fmt: skip

    def pinned_attention(self) -> tuple[AttentionSpec, ...]:
        """The named attention with every parameter that derives from ``max_seq_len`` written
        out (a mechanism's ``at_context``), for the same weights at another context."""
        n = getattr(self, "max_seq_len", None)
        return tuple(
            AttentionSpec(s.name, s.params.at_context(n)) if hasattr(s.params, "at_context") else s
            for s in parse_attention(self.attention, self.n_layers)
        )

    def _field_defaults(self, names: tuple[str, ...]) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(self) if f.name in names}  # type: ignore[arg-type]

    def _check_attention(self) -> None:
        """Validate ``attention`` and store its saved form (:func:`canonical_attention`).

        Raises:
            ConfigError: an invalid spec, or a spec beside a changed attention field of the
                family's own.
        """
        if self.attention is None and self.builds_own_attention:
            object.__setattr__(self, "attention", self.own_attention_values[0])
        if not self.names_attention:
            self.own_attention()  # checks the fields' values
            return
        changed = sorted(
            name for name, default in self._field_defaults(self.own_attention_fields).items()
            if getattr(self, name) != default
        )  # fmt: skip
        if changed:
            raise ConfigError(
                f"attention={self.attention!r} names the attention, so {', '.join(changed)} "
                f"would have no effect: give those as the mechanism's parameters, or set "
                f"attention to {' or '.join(map(repr, self.own_attention_values))} to build it "
                f"from {type(self).__name__}'s own fields"
            )
        saved = canonical_attention(self.attention, self.n_layers)
        if self.builds_own_attention and saved in self.own_attention_values:
            saved = {"name": saved}  # the bare name would mean the family's own fields
        object.__setattr__(self, "attention", saved)

    def replace(self, **overrides: Any):
        """A copy with ``overrides`` applied; replacing ``attention`` by a spec resets the family's
        own attention fields that ``overrides`` leaves out to their defaults (a preset's pattern
        gives way to the named mechanism)."""
        value = overrides.get("attention")
        named = not (value is None or (isinstance(value, str) and value in self.own_attention_values))
        if self.builds_own_attention and named:
            defaults = self._field_defaults(self.own_attention_fields)
            overrides = {k: v for k, v in defaults.items() if k not in overrides} | overrides
        return super().replace(**overrides)  # type: ignore[misc]
