"""``attention: local | strided | fixed``: the fixed sparse patterns of the catalogue
(:mod:`zoo.attention.patterns`) as registered mechanisms, computed by
:class:`~zoo.attention.SparseSelfAttention` without forming the ``T x T`` matrix.

- ``local``: a sliding window, ``A_i = {j : i - window < j <= i}`` (the Routing Transformer's
  local heads, Roy et al. 2020, §4; the Sparse Transformer's ``local`` baseline).
- ``strided`` and ``fixed``: the Sparse Transformer's factorized patterns (Child et al. 2019,
  §4.3, Figure 3b and 3c) with the paper's three ways of integrating their two components (§5.1):
  ``merged`` (Eq. 7: every head over ``A1 ∪ A2``), ``interleaved`` (Eq. 6: layer ``r`` uses
  ``A^(r mod 2)``) and ``multihead`` (Eq. 8: half the heads on each, concatenated).

``block_size`` is the block edge of the block-sparse layouts: work, not semantics (every value
gives the same outputs). No dropout on the attention probabilities (the paper drops the residual
branches). The Sparse Transformer family builds these same mechanisms from its own fields
(:meth:`zoo.models.sparse_transformer.SparseTransformerConfig.own_attention`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from torch import nn

from zoo.attention.mechanisms import register_attention
from zoo.attention.patterns import AttentionPattern, get_pattern
from zoo.attention.sparse import HeadGroup, SparseSelfAttention
from zoo.config import CheckedFields, require_positive
from zoo.errors import ConfigError

__all__ = ["FixedParams", "LocalParams", "StridedParams", "head_groups"]

Integration = Literal["merged", "interleaved", "multihead"]


@dataclass(frozen=True)
class LocalParams(CheckedFields):
    """The sliding window's knobs."""

    window: int = 128  # positions attended, the query's own included
    block_size: int = 32  # block edge of the block-sparse layout (work, not semantics)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("local", window=self.window, block_size=self.block_size)

    def tiny(self) -> LocalParams:
        """These parameters for the tests' tiny models: a window of 6, blocks of 4."""
        return LocalParams(window=6, block_size=4)


@dataclass(frozen=True)
class StridedParams(CheckedFields):
    """The strided pattern's knobs (Child et al. 2019, §4.3 and §5.1)."""

    stride: int = 128  # l, near sqrt(context)
    integration: Integration = "merged"  # §5.1: Eq. 7 merged, Eq. 6 interleaved, Eq. 8 multihead
    block_size: int = 32  # block edge of the block-sparse layouts (work, not semantics)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("strided", stride=self.stride, block_size=self.block_size)

    def tiny(self) -> StridedParams:
        """These parameters for the tests' tiny models: a stride of 8, blocks of 4."""
        return replace(self, stride=8, block_size=4)


@dataclass(frozen=True)
class FixedParams(StridedParams):
    """The fixed pattern's knobs (Child et al. 2019, §4.3 and §5.1)."""

    c: int = 32  # summary cells at the end of every block of l
    distinct_summaries: bool = True  # head m takes its own sub-block of c (the paper's choice)

    def __post_init__(self) -> None:
        super().__post_init__()
        get_pattern("fixed", stride=self.stride, c=self.c,
                    distinct_summaries=self.distinct_summaries)  # fmt: skip

    def tiny(self) -> FixedParams:
        """These parameters for the tests' tiny models: a stride of 8, 2 summary cells."""
        return replace(self, stride=8, c=2, block_size=4)


def head_groups(
    name: str, params: StridedParams | FixedParams, n_heads: int, layer: int
) -> list[HeadGroup]:
    """The head groups of layer ``layer`` for the factorized pattern ``name`` (``strided`` or
    ``fixed``) under ``params.integration`` (§5.1).

    Raises:
        ConfigError: ``multihead`` with fewer than 2 heads.
    """
    kw: dict = {"stride": params.stride}
    if isinstance(params, FixedParams):
        kw |= {"c": params.c, "distinct_summaries": params.distinct_summaries}
    if params.integration == "merged":  # Eq. 7: every head over A1 u A2
        return [HeadGroup(n_heads, get_pattern(name, **kw))]
    a1, a2 = (get_pattern(name, **kw, component=i) for i in (1, 2))
    if params.integration == "interleaved":  # Eq. 6: layer r uses A^(r mod 2)
        return [HeadGroup(n_heads, a1 if layer % 2 == 0 else a2)]
    if n_heads < 2:
        raise ConfigError("integration='multihead' splits heads between A1 and A2: n_heads >= 2")
    return [HeadGroup(n_heads // 2, a1), HeadGroup(n_heads - n_heads // 2, a2)]  # Eq. 8


def _module(config, groups: list[HeadGroup], block_size: int) -> nn.Module:
    c = config
    return SparseSelfAttention(
        c.d_model, groups, block_size, bias=c.bias, rotary=c.position == "rotary"
    )


@register_attention("local", LocalParams)
def build_local(config, layer: int, params: LocalParams) -> nn.Module:
    pattern: AttentionPattern = get_pattern("local", window=params.window)
    return _module(config, [HeadGroup(config.n_heads, pattern)], params.block_size)


@register_attention("strided", StridedParams)
def build_strided(config, layer: int, params: StridedParams) -> nn.Module:
    return _module(config, head_groups("strided", params, config.n_heads, layer), params.block_size)


@register_attention("fixed", FixedParams)
def build_fixed(config, layer: int, params: FixedParams) -> nn.Module:
    return _module(config, head_groups("fixed", params, config.n_heads, layer), params.block_size)
