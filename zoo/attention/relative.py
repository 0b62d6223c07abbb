"""Shaw et al. (2018) relative positions for local and routing attention.

(Local attention itself is a route of the engine: :func:`zoo.attention.functional.local_attention`.)

:class:`RelativePositions` adds Shaw et al. (2018) relative position representations: learned
vectors ``a^K_{i-j}`` and ``a^V_{i-j}`` (distances clipped to ``max_distance``, causal so
``i - j >= 0``) shared by the heads of a layer, entering the scores as ``q_i . a^K_{i-j}`` and the
outputs as ``sum_j p_ij a^V_{i-j}`` (their eqs. 3-4).

Shape legend: ... batch dims, Lq queries, Lk keys, D head dim, R distances.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["RelativePositions"]


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

        ``q`` ``(..., Lq, D)`` and ``scores`` ``(..., Lq, Lk)`` of one dtype (fp32 or fp64),
        ``distance`` int64 broadcastable to it. Returns the sum (broadcast to the joint shape)
        and the clipped distances, which :meth:`values_of` takes.
        """
        dist = distance.clamp(0, self.max_distance)
        rel = q @ self.keys.weight.to(q.dtype).T  # (..., Lq, R): q_i . a^K_r for every distance r
        shape = torch.broadcast_shapes(scores.shape, dist.shape)
        rel = rel.expand(*shape[:-1], rel.shape[-1]).gather(-1, dist.expand(shape))
        return scores.expand(shape) + rel, dist.expand(shape)

    def values_of(self, p: Tensor, dist: Tensor) -> Tensor:
        """``sum_j p_ij a^V_{i-j}`` (Shaw eq. 3's second term) for probabilities ``p``
        ``(..., Lq, Lk)`` (fp32 or fp64) and the clipped distances from :meth:`add_scores`."""
        aV = self.values.weight.to(p.dtype)
        mass = p.new_zeros(*p.shape[:-1], aV.shape[0]).scatter_add(-1, dist, p)
        return mass @ aV
