"""``attention: local | strided | fixed``: the fixed sparse patterns of the catalogue
(:mod:`zoo.attention.patterns`) as registered mechanisms, computed by
:class:`~zoo.attention.SparseSelfAttention` without forming the ``T x T`` matrix.

- ``local``: a sliding window, ``A_i = {j : i - window < j <= i}`` (the Routing Transformer's
  local heads, Roy et al. 2020, §4; the Sparse Transformer's ``local`` baseline).
- ``local_1d`` and ``local_2d``: the Image Transformer's block-local patterns (Parmar et al.
  2018, §3.2, Figure 2): query blocks over the raster sequence, each attending to the earlier
  positions of its memory (``local_2d`` on a grid of ``width`` positions a row: an image's
  ``W C`` sub-pixels, the model's row by default).
- ``strided`` and ``fixed``: the Sparse Transformer's factorized patterns (Child et al. 2019,
  §4.3, Figure 3b and 3c) with the paper's three ways of integrating their two components (§5.1):
  ``merged`` (Eq. 7: every head over ``A1 ∪ A2``), ``interleaved`` (Eq. 6: layer ``r`` uses
  ``A^(r mod 2)``) and ``multihead`` (Eq. 8: half the heads on each, concatenated).

``block_size`` is the block edge of the block-sparse layouts: work, not semantics (every value
gives the same outputs). No dropout on the attention probabilities (the paper drops the residual
branches). The Sparse Transformer and Image Transformer families build these same mechanisms from
their own fields (``own_attention`` of their configs).
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

__all__ = [
    "FixedParams",
    "Local1DParams",
    "Local2DParams",
    "LocalParams",
    "StridedParams",
    "head_groups",
]

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
class Local1DParams(CheckedFields):
    """1-D local attention's knobs (Parmar et al. 2018, §3.2)."""

    query_block: int = 256  # l_q: positions per query block
    memory: int = 512  # l_m: positions before the block
    block_size: int = 32  # block edge of the block-sparse layout (work, not semantics)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("local_1d", block_size=self.block_size)
        self.pattern()  # checks the sizes

    def pattern(self) -> AttentionPattern:
        """The catalogue's :func:`~zoo.attention.patterns.local_1d` of these parameters."""
        return get_pattern("local_1d", query_block=self.query_block, memory=self.memory)

    def tiny(self) -> Local1DParams:
        """These parameters for the tests' tiny models: blocks of 8 with 8 before them."""
        return Local1DParams(query_block=8, memory=8, block_size=4)


@dataclass(frozen=True)
class Local2DParams(CheckedFields):
    """2-D local attention's knobs (Parmar et al. 2018, §3.2)."""

    query_height: int = 4  # query block rows
    query_width: int = 24  # query block columns (sub-pixels: 8 RGB pixels)
    memory_height: int = 4  # memory rows above the block
    memory_width: int = 24  # memory columns left and right of the block
    width: int | None = None  # positions per grid row; None: the model's image row (W C)
    block_size: int = 32  # block edge of the block-sparse layout (work, not semantics)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("local_2d", block_size=self.block_size, width=self.width)
        self.pattern(self.width or self.query_width)  # checks the sizes

    def pattern(self, width: int) -> AttentionPattern:
        """The catalogue's :func:`~zoo.attention.patterns.local_2d` on rows of ``width``."""
        return get_pattern(
            "local_2d", width=width, query_height=self.query_height,
            query_width=self.query_width, memory_height=self.memory_height,
            memory_width=self.memory_width,
        )  # fmt: skip

    def tiny(self) -> Local2DParams:
        """These parameters for the tests' tiny models: 2 x 6 blocks, 1 row and 3 columns of
        memory."""
        return replace(self, query_height=2, query_width=6, memory_height=1, memory_width=3,
                       block_size=4)  # fmt: skip


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


@register_attention("local_1d", Local1DParams)
def build_local_1d(config, layer: int, params: Local1DParams) -> nn.Module:
    return _module(config, [HeadGroup(config.n_heads, params.pattern())], params.block_size)


@register_attention("local_2d", Local2DParams)
def build_local_2d(config, layer: int, params: Local2DParams) -> nn.Module:
    width = params.width or getattr(config, "row_width", None)
    if width is None:
        raise ConfigError(
            "local_2d: give width (positions per grid row) in a model without an image shape"
        )
    return _module(config, [HeadGroup(config.n_heads, params.pattern(width))], params.block_size)


@register_attention("strided", StridedParams)
def build_strided(config, layer: int, params: StridedParams) -> nn.Module:
    return _module(config, head_groups("strided", params, config.n_heads, layer), params.block_size)


@register_attention("fixed", FixedParams)
def build_fixed(config, layer: int, params: FixedParams) -> nn.Module:
    return _module(config, head_groups("fixed", params, config.n_heads, layer), params.block_size)
