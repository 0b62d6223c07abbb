"""zoo.kernels: the kernel layer (block-sparse and routing attention).

Each op has three implementations: ``op_ref``, the executable spec (dense fp64, for tests and
small inputs); ``op_torch``, the PyTorch implementation that runs anywhere; and a Triton kernel
(``triton_block_sparse``, ``triton_routing``). Models call only the dispatching ops,
:func:`block_sparse_attention` and :func:`routing_attention`. Which path CUDA tensors take is
:func:`backend`'s choice, set by the environment variable ``ZOO_ATTENTION_BACKEND``:

- ``auto`` (default): the Triton kernels on GPUs whose architecture is in :data:`VERIFIED` (their
  native tests passed there, docs/kernels.md "GPU verification") and Triton is installed
  (``pip install attention-zoo[triton]``); the PyTorch path, with a one-time warning, on any
  other GPU;
- ``triton``: the Triton kernels on every GPU (opt in on an unverified one);
- ``torch``: the PyTorch path (``op_torch``) everywhere.

CPU tensors always take the PyTorch path. A CUDA input the kernel does not take (say a block size
of 8) falls back to the PyTorch path with a warning. This package imports on machines without Triton
or a GPU, because the Triton modules are imported only on the first CUDA call.

Modules: ``block_sparse`` / ``routing`` (spec, PyTorch implementation, the plan), ``segment`` (the
fixed pattern, sliding windows and causal routing's sorted runs on a CPU), ``sdpa`` (short problems
in the CPU's fastest precision), ``triton_flash`` (shared tile steps), ``triton_block_sparse`` /
``triton_routing`` (kernels). The benchmarks live outside the package, in the repository's
``benchmarks/``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings

from torch import Tensor
from zoo.kernels.block_sparse import (
    BlockSparsePlan,
    MaskMod,
    block_sparse_attention_ref,
    block_sparse_attention_torch,
    expand_layout,
    masked_attention_ref,
    plan_for,
)
from zoo.kernels.routing import routing_attention_ref, routing_attention_torch
from zoo.kernels.sdpa import sdpa
from zoo.kernels.segment import run_window_attention, segment_attention

__all__ = [
    "VERIFIED",
    "BlockSparsePlan",
    "backend",
    "block_sparse_attention",
    "block_sparse_attention_ref",
    "block_sparse_attention_torch",
    "expand_layout",
    "routing_attention",
    "masked_attention_ref",
    "routing_attention_ref",
    "routing_attention_torch",
    "run_window_attention",
    "sdpa",
    "segment_attention",
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
    """Attention over the non-zero blocks of ``layout``; see :func:`block_sparse_attention_torch`
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
    return block_sparse_attention_torch(q, k, v, plan, scale=scale)


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
    :func:`routing_attention_torch`.

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
    return routing_attention_torch(q, k, v, q_idx, k_idx, causal=causal, scale=scale)


BACKENDS = ("auto", "triton", "torch")
# GPU architectures (CUDA compute capability) on which the Triton kernels' native tests passed
VERIFIED: dict[tuple[int, int], str] = {
    (9, 0): "NVIDIA H100 80GB HBM3 (SXM5), 2026-11-24, torch 2.11.0+cu130, triton 3.6.0: "
    "137 passed",
}


def backend(capability: tuple[int, int] | None = None) -> str:
    """``"triton"`` or ``"torch"``: the path CUDA tensors take on a GPU of compute ``capability``
    (``None``: the current device's), under ``ZOO_ATTENTION_BACKEND`` (see the module docstring).

    Raises:
        ValueError: ``ZOO_ATTENTION_BACKEND`` is not one of ``auto``, ``triton``, ``torch``.
    """
    choice = _requested()
    if choice != "auto":
        return choice
    capability = tuple(_capability(None)) if capability is None else capability
    if capability in VERIFIED:
        return "triton"
    _warn_unverified(capability)
    return "torch"


@functools.cache
def _warn_unverified(capability: tuple[int, int]) -> None:
    warnings.warn(
        f"the Triton attention kernels are not verified on GPUs of compute capability "
        f"{capability[0]}.{capability[1]} (verified: "
        f"{', '.join(f'{a}.{b}' for a, b in VERIFIED)}); running the PyTorch path. Set "
        "ZOO_ATTENTION_BACKEND=triton to use them anyway",
        stacklevel=4,
    )


def use_triton(x: Tensor) -> bool:
    """Whether the ops send ``x`` to Triton: it is on CUDA, Triton is installed and
    :func:`backend` says ``"triton"``. CPU tensors never go there, since outside
    ``TRITON_INTERPRET=1`` a launch on them fails."""
    if not x.is_cuda or backend(tuple(_capability(x.device))) != "triton":
        return False
    if importlib.util.find_spec("triton") is not None:
        return True
    if _requested() == "triton":
        raise ValueError(
            "ZOO_ATTENTION_BACKEND=triton but Triton is not installed: "
            "pip install 'attention-zoo[triton]', or unset the variable"
        )
    return False  # auto on a verified GPU without Triton: quietly the PyTorch path


def _requested() -> str:
    """``ZOO_ATTENTION_BACKEND``, normalised (unset or empty: ``"auto"``); raises ``ValueError``
    for any other value than :data:`BACKENDS`."""
    choice = os.environ.get("ZOO_ATTENTION_BACKEND", "").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ValueError(
            f"ZOO_ATTENTION_BACKEND={choice!r} is not one of {', '.join(BACKENDS)}; unset it for "
            "the default (auto)"
        )
    return choice


def _capability(device) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(device)


def _fallback(op: str, reason: str) -> None:
    warnings.warn(
        f"{op}: the Triton kernel cannot run this call ({reason}); running the PyTorch "
        "path instead",
        stacklevel=3,
    )
