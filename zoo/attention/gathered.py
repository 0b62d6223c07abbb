"""The engine's ``gathered`` route: block-local patterns (``local_1d``, ``local_2d``; Parmar et al.
2018, "Image Transformer", §3.2) as query blocks that each gather their own memory and attend to it
densely. :func:`zoo.attention.functional.attend` plans and calls it.

Shape legend: B batch, H heads, T positions, D head dim, nb query blocks, Lq / Lk queries / keys
per block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.patterns import AttentionPattern
from zoo.kernels import sdpa

__all__ = ["GatheredPlan", "gathered_attention", "query_blocks"]


def query_blocks(pattern: AttentionPattern, n: int) -> tuple[Tensor, Tensor]:
    """The query blocks of a block-local pattern (``local_1d``, ``local_2d``) over ``n``
    positions: ``(q_index, k_index)``, int64 ``(nb, Lq)`` and ``(nb, Lk)`` with ``-1`` as
    padding. The blocks partition ``0..n-1`` and each block's keys include every key its queries
    may attend to (Parmar et al. 2018, §3.2: query blocks and their memory).

    Raises:
        ValueError: ``pattern`` is not block-local.
    """
    p = dict(pattern.params)
    if pattern.kind == "local_1d":
        lq, lm = p["query_block"], p["memory"]
        starts = torch.arange(0, n, lq)[:, None]  # (nb, 1)
        q_index = starts + torch.arange(lq)  # the block
        k_index = starts - lm + torch.arange(lm + lq)  # the memory, then the block
        return _valid(q_index, n), _valid(k_index, n)
    if pattern.kind != "local_2d":
        raise ValueError(f"{pattern.name} is not block-local (local_1d or local_2d)")
    width, hq, wq = p["width"], p["query_height"], p["query_width"]
    hm, wm = p["memory_height"], p["memory_width"]
    n_rows = math.ceil(n / width)
    top = torch.arange(0, n_rows, hq).repeat_interleave(math.ceil(width / wq))  # (nb,)
    left = torch.arange(0, width, wq).repeat(math.ceil(n_rows / hq))

    def rectangles(r0: Tensor, c0: Tensor, h: int, w: int) -> Tensor:
        rows = r0[:, None, None] + torch.arange(h)[:, None]  # (nb, h, 1)
        cols = c0[:, None, None] + torch.arange(w)  # (nb, 1, w)
        index = rows * width + cols
        inside = (rows >= 0) & (cols >= 0) & (cols < width)
        return torch.where(inside, index, -1).flatten(1)  # raster order within the block

    q_index = rectangles(top, left, hq, wq)
    k_index = rectangles(top - hm, left - wm, hm + hq, wq + 2 * wm)
    return _valid(q_index, n), _valid(k_index, n)


def _valid(index: Tensor, n: int) -> Tensor:
    """``index`` with positions outside ``0..n-1`` replaced by ``-1``."""
    return torch.where((index >= 0) & (index < n), index, -1)


@dataclass(frozen=True)
class GatheredPlan:
    """What :func:`gathered_attention` needs for a block-local pattern at one length, built once.

    ``q_index`` ``(nb, Lq)`` and ``k_index`` ``(nb, Lk)``: positions of each query block and of its
    memory (``T`` marks padding: a zero row appended there); ``allowed`` ``(nb, Lq, Lk)`` bool: the
    pattern inside each block; ``slot`` ``(T,)``: where each position's output lands in the
    flattened blocks.
    """

    q_index: Tensor
    k_index: Tensor
    allowed: Tensor
    slot: Tensor

    @classmethod
    def build(cls, pattern: AttentionPattern, T: int, device: torch.device) -> GatheredPlan:
        """Raises ``ValueError`` if ``pattern`` is not block-local."""
        q_index, k_index = query_blocks(pattern, T)  # -1 = padding
        allowed = pattern.mask_mod(0, q_index[:, :, None], k_index[:, None, :])
        allowed &= (q_index >= 0)[:, :, None] & (k_index >= 0)[:, None, :]
        allowed[:, :, 0] |= ~allowed.any(-1)  # padding queries: any key, output dropped
        real = q_index.flatten() >= 0
        slot = torch.empty(T, dtype=torch.long)
        slot[q_index.flatten()[real]] = torch.arange(q_index.numel())[real]
        q_index, k_index = q_index.where(q_index >= 0, T), k_index.where(k_index >= 0, T)
        return cls(*(x.to(device) for x in (q_index, k_index, allowed, slot)))


def gathered_attention(q: Tensor, k: Tensor, v: Tensor, plan: GatheredPlan) -> Tensor:
    """Exact attention under a block-local pattern (``local_1d``, ``local_2d``), per query block.

    ``(B, H, T, D) -> (B, H, T, D)``. Each query block gathers its own keys (the Image Transformer's
    memory, Parmar et al. 2018 §3.2) and runs as one dense masked problem; the blocks are SDPA's
    heads, so one ``(nb, Lq, Lk)`` mask serves every batch row and head. Work ``O(T Lk)``.
    """
    B, H, T, D = q.shape

    def gather(x: Tensor, index: Tensor) -> Tensor:  # (B H, nb, L, D); index T = the zero row
        return F.pad(x, (0, 0, 0, 1))[:, :, index].flatten(0, 1)

    y = sdpa(
        gather(q, plan.q_index),
        gather(k, plan.k_index),
        gather(v, plan.k_index),
        attn_mask=plan.allowed[None],  # 4-D: a 3-D mask sends CPU SDPA to its unfused math path
    )  # (B H, nb, Lq, D)
    return y.view(B, H, -1, y.shape[-1])[:, :, plan.slot]
