"""Routing attention in PyTorch: attention inside clusters of gathered tokens. The executable spec
(:func:`routing_attention_ref`, one cluster at a time in fp64) and the implementation that runs off
CUDA (:func:`routing_attention_torch`).

The clustered half of the Routing Transformer (Roy et al. 2020, Algorithm 1, lines 19-27): every
``(batch, head, cluster)`` holds ``w`` token indices sorted by position; the cluster's queries attend
to its keys, masked by the tokens' ORIGINAL positions when causal (``q_idx[a] >= k_idx[b]``), and
the outputs are scattered back to the query positions. A token routed to several clusters receives
the mean of its outputs, one routed to none receives zeros.

How the clusters are chosen (top-``w`` per centroid, random, ...) is the caller's business
(:mod:`zoo.attention.routing`); this op is the part the Triton kernel replaces. With shared
query/key indices, sorted, the causal mask on original positions is the lower triangle of each
cluster, so :func:`routing_attention_torch` hands the ``(B * H * k)`` little causal problems to
``scaled_dot_product_attention`` (fused, never materialises more than one cluster's scores; fp32
on a CPU, see :mod:`zoo.kernels.sdpa`).

Shape legend: B batch, H heads, T positions, D head dim, k clusters, w tokens per cluster.
"""

from __future__ import annotations

import torch
from torch import Tensor
from zoo.kernels.sdpa import sdpa
from zoo.kernels.softmax import masked_softmax

__all__ = [
    "flat_positions",
    "gather_clusters",
    "routing_attention_ref",
    "routing_attention_torch",
    "scatter_mean",
    "scatter_sum",
]


def gather_clusters(x: Tensor, idx: Tensor) -> Tensor:
    """``x`` ``(B, H, T, D)`` at ``idx`` ``(B, H, k, w)`` -> ``(B, H, k, w, D)`` (differentiable)."""
    B, H, k, w = idx.shape
    D = x.shape[-1]
    flat = idx.reshape(B, H, k * w, 1).expand(B, H, k * w, D)
    return x.gather(2, flat).view(B, H, k, w, D)


def scatter_sum(y: Tensor, idx: Tensor, T: int) -> Tensor:
    """Cluster rows ``y`` ``(B, H, k, w, D)`` summed into ``(B, H, T, D)`` at ``idx``: zero where
    a position appears in no cluster (differentiable in ``y``)."""
    B, H, k, w, D = y.shape
    flat = flat_positions(idx, T)
    return y.new_zeros(B * H * T, D).index_add(0, flat, y.reshape(-1, D)).view(B, H, T, D)


def scatter_mean(y: Tensor, idx: Tensor, T: int) -> Tensor:
    """Cluster outputs ``y`` ``(B, H, k, w, D)`` back to ``(B, H, T, D)`` at ``idx``: the mean over
    the clusters a position appears in, zero where it appears in none (differentiable in ``y``)."""
    B, H = y.shape[:2]
    counts = torch.bincount(flat_positions(idx, T), minlength=B * H * T).clamp_(min=1)
    return scatter_sum(y, idx, T) / counts.view(B, H, T, 1).to(y.dtype)


def flat_positions(idx: Tensor, T: int) -> Tensor:
    """Cluster members ``idx`` ``(B, H, k, w)`` int64 (positions in ``[0, T)``) as rows of the
    flattened ``(B H T)`` positions: ``(B H k w,)`` int64, in cluster-slot order. The index that
    :func:`scatter_sum` adds at, and that the Triton path sorts into its scatter plan."""
    B, H = idx.shape[:2]
    return (idx + torch.arange(B * H, device=idx.device).view(B, H, 1, 1) * T).reshape(-1)


def routing_attention_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_idx: Tensor,
    k_idx: Tensor | None = None,
    *,
    causal: bool = True,
    scale: float | None = None,
) -> Tensor:
    """The executable spec of :func:`routing_attention_torch` and the Triton kernel, one cluster
    at a time in fp64: the cluster's queries attend to its keys (masked by original positions
    when ``causal``), and each position gets the mean over the clusters it is a query of (zeros
    for none). Same arguments as :func:`routing_attention_torch`; returns ``(B, H, T, Dv)``
    float64. Python loops: tests and small inputs only."""
    B, H, T, D = q.shape
    k_idx = q_idx if k_idx is None else k_idx
    scale = D**-0.5 if scale is None else scale
    out = torch.zeros(B, H, T, v.shape[-1], dtype=torch.float64, device=q.device)
    count = torch.zeros(B, H, T, 1, dtype=torch.float64, device=q.device)
    for b in range(B):
        for h in range(H):
            for c in range(q_idx.shape[2]):
                qi, ki = q_idx[b, h, c], k_idx[b, h, c]
                s = (q[b, h, qi].double() @ k[b, h, ki].double().T) * scale
                if causal:
                    s = s.masked_fill(qi[:, None] < ki[None, :], float("-inf"))
                out[b, h, qi] += torch.softmax(s, -1).nan_to_num(0.0) @ v[b, h, ki].double()
                count[b, h, qi] += 1
    return out / count.clamp(min=1)


def routing_attention_torch(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_idx: Tensor,
    k_idx: Tensor | None = None,
    *,
    causal: bool = True,
    scale: float | None = None,
) -> Tensor:
    """Attention within clusters: queries at ``q_idx`` attend to keys/values at ``k_idx``.

    Args:
        q: ``(B, H, T, D)`` queries.
        k: ``(B, H, T, D)`` keys.
        v: ``(B, H, T, D)`` values.
        q_idx: ``(B, H, k, w)`` int64 positions in ``[0, T)``, sorted ascending along ``w``, no
            repeats within a cluster.
        k_idx: the keys' positions, same shape and rules; ``None`` shares ``q_idx`` (the causal
            Routing Transformer shares queries and keys, Algorithm 1 line 5).
        causal: mask by original positions, ``q_idx[a] >= k_idx[b]``. A query whose cluster holds
            no key at or before it gets a zero output from that cluster.
        scale: score scale, default ``1 / sqrt(D)``.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``: per position, the mean of its outputs over the
        clusters whose ``q_idx`` contains it; zeros where none does.

    Raises:
        ValueError: mismatched shapes.
    """
    if k.shape[:3] != q.shape[:3] or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k, v must share (B, H, T): got {q.shape}, {k.shape}, {v.shape}")
    if q_idx.dim() != 4 or q_idx.shape[:2] != q.shape[:2]:
        raise ValueError(f"q_idx must be (B, H, k, w) with (B, H) = {tuple(q.shape[:2])}")
    if k_idx is not None and k_idx.shape != q_idx.shape:
        raise ValueError(f"k_idx {tuple(k_idx.shape)} must match q_idx {tuple(q_idx.shape)}")
    B, H, T, D = q.shape
    _, _, n_clusters, w = q_idx.shape
    shared = k_idx is None
    k_idx = q_idx if k_idx is None else k_idx
    qc = gather_clusters(q, q_idx).view(B, H * n_clusters, w, D)
    # keys that are the queries (shared q/k, same indices): one gather, one scatter in backward
    kc = qc if shared and k is q else gather_clusters(k, k_idx).view(B, H * n_clusters, w, D)
    vc = gather_clusters(v, k_idx).view(B, H * n_clusters, w, -1)
    if shared or not causal:  # sorted shared indices: position order = index order
        y = sdpa(qc, kc, vc, is_causal=causal, scale=scale)
    else:  # a query may precede all its cluster's keys: explicit softmax with empty rows -> 0
        allowed = q_idx[..., :, None] >= k_idx[..., None, :]  # (B, H, k, w, w)
        allowed = allowed.view(B, H * n_clusters, w, w)
        with torch.autocast(q.device.type, enabled=False):
            s = (qc.float() @ kc.float().transpose(-1, -2)) * (D**-0.5 if scale is None else scale)
            y = (masked_softmax(s, allowed) @ vc.float()).to(vc.dtype)
    return scatter_mean(y.view(B, H, n_clusters, w, -1), q_idx, T)
