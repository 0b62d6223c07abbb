"""zoo.kernels: the kernel layer (block-sparse and routing attention).

Each op has an ``op_ref`` in pure PyTorch (the executable spec, which runs anywhere) and a Triton
kernel (``triton_block_sparse``, ``triton_routing``). Models call only the dispatching ops,
:func:`block_sparse_attention` and :func:`routing_attention`. These run the Triton kernel when
the tensors are on CUDA and Triton is installed (``pip install attention-zoo[triton]``), and the
reference otherwise. A CUDA input the kernel does not take (say a block size of 8) falls back to
the reference with a warning. This package imports on machines without Triton or a GPU, because
the Triton modules are imported only on the first CUDA call.

Modules: ``block_sparse`` / ``routing`` (references and the plan), ``triton_flash`` (shared tile
steps), ``triton_block_sparse`` / ``triton_routing`` (kernels), ``bench`` (the kernel benchmark).
"""

from __future__ import annotations

import importlib.util
import warnings

from torch import Tensor
from zoo.kernels.block_sparse import (
    BlockSparsePlan,
    MaskMod,
    block_sparse_attention_ref,
    expand_layout,
    plan_for,
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
    """Attention over the non-zero blocks of ``layout``; see :func:`block_sparse_attention_ref`
    for the arguments and errors.

    ``q, k, v``: ``(B, H, T, D)``; ``layout``: bool ``(nb, nb)`` or ``(H, nb, nb)``,
    ``nb = ceil(T / block_size)``, or a :class:`BlockSparsePlan`. Returns ``(B, H, T, D)``.
    On CUDA with Triton the kernel of :mod:`zoo.kernels.triton_block_sparse` runs, taking
    blocks of 16 to 128, head dims of 16 to 128, and fp16/bf16/fp32.
    """
    plan = plan_for(q, k, v, layout, block_size, causal=causal, mask_mod=mask_mod)
    if use_triton(q):
        from zoo.kernels import triton_block_sparse as kernel

        reason = kernel.unsupported(q, v, plan.b)
        if reason is None:
            scale = q.shape[-1] ** -0.5 if scale is None else scale
            tables = plan.kernel_tables(q.shape[1])
            return kernel.block_sparse_attention_triton(q, k, v, tables, plan.b, scale)
        _fallback("block_sparse_attention", reason)
    return block_sparse_attention_ref(q, k, v, plan, scale=scale)


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
    sorted positions. Returns ``(B, H, T, D)``. On CUDA with Triton the kernel of
    :mod:`zoo.kernels.triton_routing` runs (head dims of 16 to 128, fp16/bf16/fp32).
    """
    if use_triton(q):
        from zoo.kernels import triton_flash, triton_routing

        reason = triton_flash.unsupported(q, v)
        if reason is None:
            return triton_routing.routing_attention_triton(
                q, k, v, q_idx, k_idx, causal=causal, scale=scale
            )
        _fallback("routing_attention", reason)
    return routing_attention_ref(q, k, v, q_idx, k_idx, causal=causal, scale=scale)


def use_triton(x: Tensor) -> bool:
    """Whether the ops send ``x`` to Triton: it is on CUDA and Triton is installed. CPU tensors
    never go there, since outside ``TRITON_INTERPRET=1`` a launch on them fails."""
    return x.is_cuda and importlib.util.find_spec("triton") is not None


def _fallback(op: str, reason: str) -> None:
    warnings.warn(
        f"{op}: the Triton kernel cannot run this call ({reason}); running the PyTorch "
        "reference instead",
        stacklevel=3,
    )
