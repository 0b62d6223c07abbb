"""The masked attention path that every materialised-score route shares.

Fused routes (SDPA, columns, blocks, the kernels) never materialise the score matrix. When one must
be materialised, because a decode step gathers just the keys its pattern selects, because relative
positions (Shaw et al. 2018) enter the scores, or because the mapping is not softmax
(:mod:`zoo.attention.mappings`), it is computed here and nowhere else:

    s = (q k^T) * scale [+ q . a^K_{i-j}]        fp32, autocast off
    p = mapping(s masked to -inf where not allowed)   a row with no allowed key gives zeros
    y = p v [+ sum_j p_ij a^V_{i-j}]             fp32, returned in the dtype of v

Shape legend: ``...`` any batch dims (batch, heads, blocks), Lq queries, Lk keys, D head dim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from zoo.attention.mappings import MappingName, map_scores

if TYPE_CHECKING:
    from zoo.attention.local import RelativePositions

__all__ = ["masked_attention"]


def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor,
    *,
    scale: float | None = None,
    mapping: MappingName = "softmax",
    upper: Tensor | float | None = None,
    lam: float = 0.1,
    relative: RelativePositions | None = None,
    distance: Tensor | None = None,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attention with the score matrix materialised, under a boolean mask, in fp32.

    Args:
        q: ``(..., Lq, D)``; k, v: ``(..., Lk, D)`` (``v`` may have another last dim).
        allowed: bool, broadcastable to ``(..., Lq, Lk)``: which keys each query may attend to.
        scale: multiplies ``q k^T`` (default ``D ** -0.5``, Vaswani et al. 2017 §3.2.1).
        mapping: scores to probabilities (:func:`zoo.attention.mappings.map_scores`), with its
            ``upper`` (csoftmax / csparsemax) and ``lam`` (fusedmax).
        relative: Shaw et al. relative positions; then ``distance`` (int64 ``i - j``,
            broadcastable to ``(..., Lq, Lk)``, read only where allowed) selects their terms.
        return_weights: also return the probabilities ``(..., Lq, Lk)`` fp32.

    Returns:
        ``(..., Lq, Dv)`` in the dtype of ``v`` (and the weights). A query with no allowed key gets
        zeros, not NaN.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    with torch.autocast(q.device.type, enabled=False):
        qf = q.float()
        s = qf @ k.float().transpose(-1, -2)  # (..., Lq, Lk)
        if relative is not None:
            assert distance is not None, "relative positions need the distances"
            s, dist = relative.add_scores(qf, s, distance)
        s = (s * scale).masked_fill(~allowed, float("-inf"))
        if mapping == "softmax":
            p = torch.softmax(s, -1).nan_to_num(0.0)
        else:
            p = map_scores(s, mapping, upper=upper, lam=lam)
        out = p @ v.float()
        if relative is not None:
            out = out + relative.values_of(p, dist)
    out = out.to(v.dtype)
    return (out, p) if return_weights else out
