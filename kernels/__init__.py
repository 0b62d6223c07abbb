"""zoo.kernels: the kernel layer (block-sparse and routing attention).

Each op is an ``op_ref`` in pure PyTorch (the executable spec, runs anywhere) plus a Triton path for
CUDA tensors. Models call only the dispatching op (``block_sparse_attention``). This package imports
on machines without Triton or a GPU; Triton code is imported lazily.

Status: ``block_sparse_attention`` and ``routing_attention`` dispatch to their references on every
device; the Triton paths are the kernel issue's work and plug in here.
"""

from __future__ import annotations

from torch import Tensor
from zoo.kernels.block_sparse import (
    BlockSparsePlan,
    MaskMod,
    block_sparse_attention_ref,
    expand_layout,
)
from zoo.kernels.routing import routing_attention_ref
from zoo.kernels.sdpa import sdpa

__all__ = [
    "BlockSparsePlan",
    "block_sparse_attention",
    "block_sparse_attention_ref",
    "expand_layout",
    "routing_attention",
    "routing_attention_ref",
    "sdpa",
]


def block_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: Tensor | BlockSparsePlan,
    block_size: int | None = None,
    *,
    causal: bool = True,
    mask_mod: MaskMod | None = None,
    scale: float | None = None,
) -> Tensor:
    """Attention over the non-zero blocks of ``layout``; see :func:`block_sparse_attention_ref`.

    ``q, k, v``: ``(B, H, T, D)``; ``layout``: bool ``(nb, nb)`` or ``(H, nb, nb)``,
    ``nb = ceil(T / block_size)``, or a :class:`BlockSparsePlan`. Returns ``(B, H, T, D)``.
    """
    return block_sparse_attention_ref(
        q, k, v, layout, block_size, causal=causal, mask_mod=mask_mod, scale=scale
    )


def routing_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_idx: Tensor,
    k_idx: Tensor | None = None,
    *,
    causal: bool = True,
    scale: float | None = None,
) -> Tensor:
    """Attention within clusters of gathered tokens, outputs averaged back; see
    :func:`routing_attention_ref`.

    ``q, k, v``: ``(B, H, T, D)``; ``q_idx`` (and ``k_idx``, ``None`` = shared): ``(B, H, k, w)``
    sorted positions. Returns ``(B, H, T, D)``.
    """
    return routing_attention_ref(q, k, v, q_idx, k_idx, causal=causal, scale=scale)
