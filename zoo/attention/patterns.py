"""The catalogue of attention patterns: named factories, each an element mask and a block layout.

A pattern is a ``mask_mod(head, q_idx, kv_idx) -> bool`` predicate on broadcastable index tensors
(FlexAttention's convention, with the batch index dropped): query ``i`` may attend to key ``j`` of
head ``h`` iff ``mask_mod(h, i, j)``. Every pattern here is causal (``j <= i``). From the predicate
come the two forms the zoo uses:

- :meth:`AttentionPattern.mask` -- the boolean ``(n, n)`` element mask, the executable spec;
- :meth:`AttentionPattern.layout` -- the ``(ceil(n/block_size),)*2`` block layout: block ``(I, J)`` is
  on iff any element of it is. Kernels compute only those blocks and apply the predicate inside them,
  so a model's attention equals the element mask exactly.

Factories (Child et al. 2019, "Generating Long Sequences with Sparse Transformers", §4.3, with ``l``
the stride, ``c`` the summary width; Parmar et al. 2018, "Image Transformer", §3.2 for ``local_1d``
and ``local_2d``):

==========  ===================================================================================
causal      ``j <= i`` (dense autoregressive attention)
local       ``i - window < j <= i`` (sliding window of ``window`` positions, itself included;
            ``exclude_self``: ``i - window <= j < i``)
local_1d    the Image Transformer's 1-D local attention: query blocks of ``query_block``
            positions, each attending to itself and the ``memory`` positions before it
local_2d    its 2-D local attention on a grid ``width`` positions wide: rectangular query blocks
            attending to a memory that extends them upwards and to both sides
strided     A1 ``max(0, i-l) <= j <= i`` (the previous ``l`` and itself); A2 ``(i-j) mod l == 0``
fixed       A1 ``floor(j/l) == floor(i/l)`` (own block); A2 ``j mod l in {l-c, ..., l-1}``
            (the last ``c`` cells of every block); with ``distinct_summaries`` head ``m`` uses the
            sub-block ``l-c(s+1) .. l-cs-1``, ``s = m mod (l/c)`` (the paper's preferred variant)
==========  ===================================================================================

``strided`` and ``fixed`` are factorized: ``component=1`` or ``2`` gives ``A1`` or ``A2`` alone, the
default ``None`` their union (the paper's *merged head*). :func:`get_pattern` looks factories up by
name. Pictures of them (the paper's Figure 3; the pixels one pixel of an image attends to) are
drawn by :mod:`zoo.drawing`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from zoo.config import suggest
from zoo.errors import ConfigError

__all__ = [
    "PATTERNS",
    "AttentionPattern",
    "causal",
    "fixed",
    "get_pattern",
    "local",
    "local_1d",
    "local_2d",
    "strided",
]

MaskMod = Callable[[Tensor, Tensor, Tensor], Tensor]  # (head, q_idx, kv_idx) -> bool


@dataclass(frozen=True)
class AttentionPattern:
    """A named causal attention pattern: a pure description, with no execution hints (how a pattern
    is computed is :func:`zoo.attention.functional.attend`'s choice).

    Attributes:
        name: e.g. ``"fixed(stride=128, c=32).A2"``.
        mask_mod: ``(head, q_idx, kv_idx) -> bool`` on broadcastable int64 tensors.
        per_head: whether ``mask_mod`` depends on the head (then masks and layouts get a head dim).
        kind: the catalogue factory that made it (``"strided"``, ``"local_1d"``, ...;
            ``"union"`` for ``a | b``, ``"custom"`` otherwise).
        params: that factory's arguments, as ``(name, value)`` pairs (``component`` included for
            the factorized patterns: 1, 2 or None for their union).
    """

    name: str
    mask_mod: MaskMod = field(repr=False, compare=False)
    per_head: bool = False
    kind: str = "custom"
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str, default: Any = None) -> Any:
        """The factory argument ``key`` (``default`` when it has none)."""
        return dict(self.params).get(key, default)

    def __or__(self, other: AttentionPattern) -> AttentionPattern:
        """The union: one head attending to the keys of both (the paper's merged head, Eq. 7)."""
        a, b = self.mask_mod, other.mask_mod
        return AttentionPattern(
            f"{self.name} | {other.name}",
            lambda h, q, k: a(h, q, k) | b(h, q, k),
            self.per_head or other.per_head,
            kind="union",
        )

    def _heads(self, n_heads: int | None) -> Tensor:
        if self.per_head and n_heads is None:
            raise ValueError(f"pattern {self.name} differs per head: pass n_heads")
        return torch.arange(n_heads if self.per_head else 1)[:, None, None]  # (H, 1, 1)

    def mask(self, n: int, n_heads: int | None = None) -> Tensor:
        """The element mask: ``(n, n)`` bool, or ``(n_heads, n, n)`` if ``per_head``."""
        h = self._heads(n_heads)
        m = self.mask_mod(h, torch.arange(n)[:, None], torch.arange(n)[None, :])
        m = torch.broadcast_to(m, (h.shape[0], n, n))
        return m.clone() if self.per_head else m[0].clone()

    def layout(self, n: int, block_size: int, n_heads: int | None = None) -> Tensor:
        """The block layout: ``(nb, nb)`` bool (``(n_heads, nb, nb)`` if ``per_head``), ``nb =
        ceil(n / block_size)``; block ``(I, J)`` is on iff any of its ``(i, j)`` elements is.

        Rows of blocks are evaluated a few at a time, so the ``n x n`` mask is never held at once.
        """
        b = block_size
        nb = math.ceil(n / b)
        h = self._heads(n_heads)
        kv = torch.arange(nb * b)
        kv_real = kv < n
        out = torch.zeros(h.shape[0], nb, nb, dtype=torch.bool)
        rows = max(1, (1 << 22) // (b * b * nb * h.shape[0]))  # block rows per step
        for r0 in range(0, nb, rows):
            r1 = min(nb, r0 + rows)
            q = torch.arange(r0 * b, r1 * b)
            m = self.mask_mod(h, q[:, None], kv[None, :])  # (H, (r1-r0) b, nb b)
            m = m & (q < n)[:, None] & kv_real[None, :]
            out[:, r0:r1] = m.view(h.shape[0], r1 - r0, b, nb, b).any(4).any(2)
        return out if self.per_head else out[0]


# --- the catalogue ------------------------------------------------------------------------------


def causal() -> AttentionPattern:
    """Dense autoregressive attention, ``A_i = {j : j <= i}``."""
    return AttentionPattern("causal", lambda h, q, k: k <= q, kind="causal")


def local(window: int, *, exclude_self: bool = False) -> AttentionPattern:
    """Sliding window: ``A_i = {j : i - window < j <= i}`` (``window`` positions, itself included).

    ``exclude_self``: the ``window`` positions strictly before, ``A_i = {j : i - window <= j < i}``
    (empty for ``i = 0``: that query gets zeros); causal routing with shifted keys uses it
    (:class:`~zoo.attention.routing.RoutingSpec`'s ``shift_keys``).
    """
    _positive(window=window)
    if exclude_self:
        return AttentionPattern(
            f"local(window={window}, exclude_self=True)",
            lambda h, q, k: (k < q) & (q - k <= window),
            kind="local",
            params=(("window", window), ("exclude_self", True)),
        )
    return AttentionPattern(
        f"local(window={window})",
        lambda h, q, k: (k <= q) & (q - k < window),
        kind="local",
        params=(("window", window),),
    )


def strided(stride: int, component: int | None = None) -> AttentionPattern:
    """The strided pattern (Child et al. 2019, §4.3, Figure 3b).

    ``A1_i = {j : max(0, i - l) <= j <= i}``, ``A2_i = {j <= i : (i - j) mod l == 0}``;
    ``component`` 1 or 2 selects one, ``None`` the union.
    """
    _positive(stride=stride)
    l = stride
    kw = dict(kind="strided", params=(("stride", l),))
    a1 = AttentionPattern(f"strided(stride={l}).A1", lambda h, q, k: (k <= q) & (q - k <= l), **kw)
    a2 = AttentionPattern(
        f"strided(stride={l}).A2", lambda h, q, k: (k <= q) & ((q - k) % l == 0), **kw
    )
    return _component(a1, a2, component)


def fixed(
    stride: int, c: int, component: int | None = None, distinct_summaries: bool = False
) -> AttentionPattern:
    """The fixed pattern (Child et al. 2019, §4.3, Figure 3c).

    ``A1_i = {j <= i : floor(j/l) == floor(i/l)}``, ``A2_i = {j <= i : j mod l in {l-c, ..., l-1}}``.
    With ``distinct_summaries`` head ``m`` takes its ``c`` summary cells from sub-block
    ``s = m mod (l/c)`` counted from the end of each block (head 0: the last ``c``, as without it).

    Raises:
        ConfigError: ``c`` is not in ``1..stride``, or does not divide it with distinct summaries.
    """
    _positive(stride=stride, c=c)
    l = stride
    if c > l or (distinct_summaries and l % c):
        raise ConfigError(
            f"fixed pattern needs 1 <= c <= stride (and c dividing stride for distinct "
            f"summaries); got stride={l}, c={c}"
        )
    tag = f"fixed(stride={l}, c={c}{', distinct' if distinct_summaries else ''})"
    kw = dict(
        kind="fixed", params=(("stride", l), ("c", c), ("distinct_summaries", distinct_summaries))
    )
    a1 = AttentionPattern(f"{tag}.A1", lambda h, q, k: (k <= q) & (k // l == q // l), **kw)

    def summaries(h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        start = l - c * (1 + (h % (l // c) if distinct_summaries else 0))  # (H, 1, 1) or int
        r = k % l
        return (k <= q) & (r >= start) & (r < start + c)

    a2 = AttentionPattern(f"{tag}.A2", summaries, per_head=distinct_summaries, **kw)
    return _component(a1, a2, component)


def local_1d(query_block: int, memory: int) -> AttentionPattern:
    """The Image Transformer's 1-D local attention (Parmar et al. 2018, §3.2, Figure 2 left).

    The sequence (an image in raster order) is cut into query blocks of ``l_q = query_block``
    positions; a query attends to the earlier positions of its own block and to the ``l_m =
    memory`` positions before the block: ``A_i = {j <= i : floor(i/l_q) l_q - l_m <= j}``.
    """
    _positive(query_block=query_block)
    if memory < 0:
        raise ConfigError(f"memory must be >= 0, got {memory}")
    lq, lm = query_block, memory
    return AttentionPattern(
        f"local_1d(query_block={lq}, memory={lm})",
        lambda h, q, k: (k <= q) & (k >= (q // lq) * lq - lm),
        kind="local_1d",
        params=(("query_block", lq), ("memory", lm)),
    )


def local_2d(
    width: int, query_height: int, query_width: int, memory_height: int, memory_width: int
) -> AttentionPattern:
    """The Image Transformer's 2-D local attention (Parmar et al. 2018, §3.2, Figure 2 right).

    Positions form a grid ``width`` wide (row ``i // width``, column ``i % width``; for an RGB
    image in this zoo's order, ``width = 3 W`` sub-pixels). The grid is tiled by query blocks of
    ``query_height x query_width``; a query attends to the earlier positions of the block's memory:
    the block extended by ``memory_height`` rows above and ``memory_width`` columns left and right.
    Earlier means raster order (``j <= i``): the sequence stays in the raster order the zoo's image
    models generate in, so the parts of the memory to the right of the query in its own rows are
    future and masked (the paper instead generates block by block).
    """
    _positive(width=width, query_height=query_height, query_width=query_width)
    if memory_height < 0 or memory_width < 0:
        raise ConfigError("memory_height and memory_width must be >= 0")
    hq, wq, hm, wm = query_height, query_width, memory_height, memory_width

    def mask_mod(h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        top = (q // width) // hq * hq - hm  # first memory row
        left = (q % width) // wq * wq - wm  # first memory column
        row, col = k // width, k % width
        return (k <= q) & (row >= top) & (col >= left) & (col < left + wq + 2 * wm)

    return AttentionPattern(
        f"local_2d(width={width}, query={hq}x{wq}, memory={hm} up, {wm} left/right)",
        mask_mod,
        kind="local_2d",
        params=(
            ("width", width),
            ("query_height", hq),
            ("query_width", wq),
            ("memory_height", hm),
            ("memory_width", wm),
        ),
    )


PATTERNS: dict[str, Callable[..., AttentionPattern]] = {
    "causal": causal,
    "local": local,
    "local_1d": local_1d,
    "local_2d": local_2d,
    "strided": strided,
    "fixed": fixed,
}


def get_pattern(name: str, **params: int | bool | None) -> AttentionPattern:
    """Build the catalogue pattern ``name`` (``causal``, ``local``, ``local_1d``, ``local_2d``,
    ``strided``, ``fixed``).

    Raises:
        ConfigError: unknown name, or parameters the factory does not take.
    """
    if name not in PATTERNS:
        raise ConfigError(
            f"unknown attention pattern {name!r}.{suggest(name, PATTERNS)} "
            f"Known: {', '.join(PATTERNS)}."
        )
    try:
        return PATTERNS[name](**params)
    except TypeError as exc:
        raise ConfigError(f"pattern {name!r}: {exc}") from None


def _positive(**values: int) -> None:
    for key, value in values.items():
        if value <= 0:
            raise ConfigError(f"{key} must be positive, got {value}")


def _component(
    a1: AttentionPattern, a2: AttentionPattern, component: int | None
) -> AttentionPattern:
    if component not in (1, 2, None):
        raise ConfigError(f"component must be 1, 2 or None (their union), got {component}")
    if component is None:
        pattern = AttentionPattern(a1.name.removesuffix(".A1"), (a1 | a2).mask_mod, a2.per_head)
    else:
        pattern = a1 if component == 1 else a2
    return replace(pattern, kind=a1.kind, params=(*a1.params, ("component", component)))
