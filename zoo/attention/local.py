"""Local (sliding-window) attention and Shaw et al. relative positions.

``local_attention`` is causal attention in which position ``i`` sees the ``window`` positions
``i - window < j <= i`` (the local heads of the Routing Transformer, Roy et al. 2020 §4; the Image
Transformer's 1-D local attention). It runs blockwise in ``O(T * window)``: the sequence is cut into
blocks of ``window`` positions and each block attends to itself and the block before it, a
``(window, 2 window)`` problem per block handed to ``scaled_dot_product_attention``.

An optional ``segments`` id per position restricts attention further to positions of the same
segment; the Routing Transformer's causal routing mode uses it on a sequence sorted by cluster.

:class:`RelativePositions` adds Shaw et al. (2018) relative position representations: learned
vectors ``a^K_{i-j}`` and ``a^V_{i-j}`` (distances clipped to ``max_distance``, causal so
``i - j >= 0``) shared by the heads of a layer, entering the scores as ``q_i . a^K_{i-j}`` and the
outputs as ``sum_j p_ij a^V_{i-j}`` (their eqs. 3-4).

Shape legend: B batch, H heads, T positions, D head dim, W window, nb blocks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.kernels import sdpa

__all__ = ["RelativePositions", "local_attention"]


class RelativePositions(nn.Module):
    """Shaw et al. 2018 relative position representations for causal attention.

    Args:
        max_distance: distances ``i - j`` beyond this share the last vector (Shaw's clipping ``k``).
        d_head: head dim ``D``.
    """

    def __init__(self, max_distance: int, d_head: int) -> None:
        super().__init__()
        if max_distance < 1:
            raise ValueError(f"max_distance must be >= 1, got {max_distance}")
        self.max_distance = max_distance
        self.keys = nn.Embedding(max_distance + 1, d_head)  # a^K
        self.values = nn.Embedding(max_distance + 1, d_head)  # a^V

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}"

    def add_scores(self, q: Tensor, scores: Tensor, distance: Tensor) -> tuple[Tensor, Tensor]:
        """``scores + q_i . a^K_{i-j}`` (Shaw eq. 4's numerator term), with the clipped distances.

        ``q`` ``(..., Lq, D)`` fp32, ``scores`` ``(..., Lq, Lk)`` fp32 and ``distance`` int64
        broadcastable to it. Returns the sum (broadcast to the joint shape) and the clipped
        distances, which :meth:`values_of` takes.
        """
        dist = distance.clamp(0, self.max_distance)
        rel = q @ self.keys.weight.float().T  # (..., Lq, R): q_i . a^K_r for every distance r
        shape = torch.broadcast_shapes(scores.shape, dist.shape)
        rel = rel.expand(*shape[:-1], rel.shape[-1]).gather(-1, dist.expand(shape))
        return scores.expand(shape) + rel, dist.expand(shape)

    def values_of(self, p: Tensor, dist: Tensor) -> Tensor:
        """``sum_j p_ij a^V_{i-j}`` (Shaw eq. 3's second term) for probabilities ``p``
        ``(..., Lq, Lk)`` fp32 and the clipped distances from :meth:`add_scores`."""
        aV = self.values.weight.float()
        mass = p.new_zeros(*p.shape[:-1], aV.shape[0]).scatter_add(-1, dist, p)
        return mass @ aV

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, distance: Tensor) -> Tensor:
        """Masked softmax attention with relative terms, in fp32
        (:func:`zoo.attention.functional.masked_attention`).

        ``q``: ``(..., Lq, D)``; ``k, v``: ``(..., Lk, D)``; ``allowed`` bool and ``distance``
        int64 (``i - j``, only read where allowed), both broadcastable to ``(..., Lq, Lk)``.
        A row with no allowed key gives zeros. Returns ``(..., Lq, D)`` in the dtype of ``v``.
        """
        from zoo.attention.functional import masked_attention

        return masked_attention(q, k, v, allowed, relative=self, distance=distance)


def local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    *,
    segments: Tensor | None = None,
    positions: Tensor | None = None,
    relative: RelativePositions | None = None,
) -> Tensor:
    """Causal attention of each position to the previous ``window`` positions (itself included).

    Args:
        q, k, v: ``(B, H, T, D)``.
        window: ``W``; position ``i`` attends to ``j`` with ``i - W < j <= i``.
        segments: optional ``(B, H, T)`` ids; then also ``segments[j] == segments[i]``.
        positions: optional ``(B, H, T)`` positions used for relative distances (default
            ``0..T-1``; a sequence sorted by cluster passes its tokens' original positions).
        relative: Shaw relative positions; ``None`` runs fused SDPA.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``. Time and memory ``O(T * W)``. On a CPU the
        blocks run in fp32 even under autocast (faster there: :mod:`zoo.kernels.sdpa`).
    """
    B, H, T, D = q.shape
    if window >= T and segments is None and relative is None:  # the window covers everything
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # as dense attention
    W = min(window, T)
    nb = math.ceil(T / W)
    pad = nb * W - T

    def key_blocks(x: Tensor, fill: int = 0) -> Tensor:
        """``(B, H, T, ...)`` -> per block the block before and itself ``(B, H, nb, 2W, ...)``."""
        tail = x.shape[3:]
        x = x.reshape(B, H, T, -1)
        x = F.pad(x, (0, 0, W, pad), value=fill).view(B, H, nb + 1, W, -1)  # a block in front
        x = torch.cat([x[:, :, :-1], x[:, :, 1:]], 3)  # (B, H, nb, 2W, ...): cheap backward
        return x.reshape(B, H, nb, 2 * W, *tail)

    qb = F.pad(q, (0, 0, 0, pad)).view(B, H, nb, W, D)
    kb, vb = key_blocks(k), key_blocks(v)
    qpos = torch.arange(nb * W, device=q.device).view(nb, W, 1)
    kpos = (torch.arange(nb, device=q.device) * W - W).view(nb, 1, 1) + torch.arange(
        2 * W, device=q.device
    )
    allowed = (qpos - kpos >= 0) & (qpos - kpos < window) & (kpos >= 0)  # (nb, W, 2W)
    if segments is not None:
        sq = F.pad(segments, (0, pad), value=-1).view(B, H, nb, W, 1)
        sk = key_blocks(segments, fill=-2).view(B, H, nb, 1, 2 * W)
        allowed = allowed & (sq == sk)  # (B, H, nb, W, 2W)
    if relative is not None:
        if positions is None:
            distance = qpos - kpos  # (nb, W, 2W)
        else:
            pq = F.pad(positions, (0, pad)).view(B, H, nb, W, 1)
            pk = key_blocks(positions).view(B, H, nb, 1, 2 * W)
            distance = pq - pk
        y = relative.attend(qb, kb, vb, allowed, distance)
    else:  # blocks as SDPA's heads, so one (nb, W, 2W) mask serves every (batch, head)
        y = sdpa(
            qb.reshape(-1, nb, W, D),
            kb.reshape(-1, nb, 2 * W, D),
            vb.reshape(-1, nb, 2 * W, vb.shape[-1]),
            attn_mask=allowed.reshape(-1, nb, W, 2 * W),
        )
    return y.reshape(B, H, nb * W, -1)[:, :, :T]
