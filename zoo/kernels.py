"""zoo.kernels: the kernel layer (block-sparse, block-selection and routing attention).

Each op has a spec and several implementations: ``op_ref``, the executable spec (dense fp64, for
tests and small inputs); ``op_torch``, the PyTorch implementation that runs anywhere; a Triton
kernel (``triton_block_sparse``, ``triton_routing``); and for the block-sparse op FlexAttention
(``flex``: the plan as a ``BlockMask``). Models call only the dispatching ops,
:func:`block_sparse_attention` and :func:`routing_attention`. Which backend runs is
:func:`backend`'s choice, set by the environment variable ``ZOO_ATTENTION_BACKEND``:

- ``auto`` (default): on a GPU, the backend :data:`FASTEST` records as measured fastest and
  verified correct for that GPU architecture and op; else the Triton kernels on GPUs whose
  architecture is in :data:`VERIFIED` (their native tests passed there) when Triton is installed
  (``pip install attention-zoo[triton]``); else the PyTorch path, with a one-time warning. CPU
  tensors take the PyTorch path;
- ``triton``: the Triton kernels on every GPU (opt in on an unverified one);
- ``flex``: FlexAttention for the block-sparse op on every device, the CPU included (there
  eagerly, without gradients: for checking, not speed); the engine then sends every pattern over
  a whole sequence to the block-sparse op. Routing has no ``BlockMask`` (its clusters change with
  every input) and runs the next verified backend;
- ``torch``: the PyTorch path (``op_torch``) everywhere.

A call a backend does not take (say a block size of 8 on CUDA, or gradients through Flex on a
CPU) runs the next verified backend, with a warning that names the reason. This package imports
on machines without Triton or a GPU: the Triton and Flex modules are imported on first use.

Modules: ``block_sparse`` / ``routing`` (spec, PyTorch implementation, the plan), ``block_select``
(attention to blocks chosen per query, MoBA's and NSA's: spec, a PyTorch path on any device and
one through PyTorch's fused CPU kernel; no GPU kernel yet), ``segment`` (the
fixed pattern, sliding windows and causal routing's sorted runs on a CPU), ``sdpa`` (short problems
in the CPU's fastest precision), ``flex`` (the FlexAttention backend), ``triton_flash`` (shared
tile steps), ``triton_block_sparse`` / ``triton_routing`` (kernels). The benchmarks live outside
the package, in the repository's ``benchmarks/``.

Where the modules live: the repository's top-level ``kernels/`` folder (a wheel installs it as
``zoo/kernels/``, pyproject.toml's package-dir). The folder has no ``__init__.py`` on purpose:
``import kernels`` from a clone's root, a notebook or pytest must find Hugging Face's ``kernels``
package (which transformers imports), not ours. This module is the package's ``__init__``: it
gives ``zoo.kernels`` the folder as its ``__path__`` (a module with one is a package, as the
import system's reference says), the installed folder first, else the checkout's.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

_HERE = Path(__file__).resolve().parent
__path__ = [  # the import system reads it: zoo.kernels.<module> resolves there
    str(folder)
    for folder in (_HERE / "kernels", _HERE.parent / "kernels")  # a wheel, then a checkout
    if (folder / "block_sparse.py").is_file()
][:1]

# the modules of the folder, once __path__ names it
from zoo.kernels.block_select import block_select_attention, block_select_attention_ref  # noqa: E402
from zoo.kernels.block_sparse import (  # noqa: E402
    BlockSparsePlan,
    MaskMod,
    block_sparse_attention_ref,
    block_sparse_attention_torch,
    expand_layout,
    masked_attention_ref,
    plan_for,
)
from zoo.kernels.routing import routing_attention_ref, routing_attention_torch  # noqa: E402
from zoo.kernels.sdpa import sdpa  # noqa: E402
from zoo.kernels.segment import run_window_attention, segment_attention  # noqa: E402

__all__ = [
    "FASTEST",
    "VERIFIED",
    "Measured",
    "BlockSparsePlan",
    "backend",
    "block_sparse_attention",
    "block_sparse_attention_ref",
    "block_sparse_attention_torch",
    "block_select_attention",
    "block_select_attention_ref",
    "choose",
    "expand_layout",
    "routing_attention",
    "masked_attention_ref",
    "requested",
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
    The backend is :func:`choose`'s for the op ``"block_sparse"`` (gradients needed) or
    ``"block_sparse_forward"``: the Triton kernel of :mod:`zoo.kernels.triton_block_sparse` takes
    blocks of 16 to 128, head dims of 16 to 128, and fp16/bf16/fp32; FlexAttention
    (:mod:`zoo.kernels.flex`) what :func:`zoo.kernels.flex.unsupported` allows.
    """
    plan = plan_for(q, k, v, layout, block_size, causal=causal, mask_mod=mask_mod)
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    name = choose("block_sparse" if grad else "block_sparse_forward", q)
    if name == "flex":
        from zoo.kernels import flex

        reason = flex.unsupported(q, k, v, plan)
        if reason is None:
            return flex.block_sparse_attention_flex(q, k, v, plan, scale)
        name = _after_flex(q)
        _fallback("block_sparse_attention", "FlexAttention", reason, name)
    if name == "triton":
        from zoo.kernels import triton_block_sparse as kernel

        reason = kernel.unsupported(q, v, plan.b)
        if reason is None:
            scale = q.shape[-1] ** -0.5 if scale is None else scale
            tables = plan.kernel_tables(q.shape[1])
            return kernel.block_sparse_attention_triton(q, k, v, tables, plan.b, scale)
        _fallback("block_sparse_attention", "the Triton kernel", reason, "torch")
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
    FlexAttention has no routing: under ``ZOO_ATTENTION_BACKEND=flex`` the next verified backend
    runs, with one warning.
    """
    name = choose("routing", q)
    if name == "flex":
        name = _after_flex(q)
        _fallback("routing_attention", "FlexAttention", _NO_FLEX_ROUTING, name)
    if name == "triton":
        from zoo.kernels import triton_flash, triton_routing

        reason = triton_flash.unsupported(q, v)
        if reason is None:
            return triton_routing.routing_attention_triton(
                q, k, v, q_idx, k_idx, causal=causal, scale=scale
            )
        _fallback("routing_attention", "the Triton kernel", reason, "torch")
    return routing_attention_torch(q, k, v, q_idx, k_idx, causal=causal, scale=scale)


BACKENDS = ("auto", "triton", "flex", "torch")
OPS = ("block_sparse", "block_sparse_forward", "routing")
_NO_FLEX_ROUTING = "content routing has no BlockMask: its clusters change with every input"
# GPU architectures (CUDA compute capability) on which the Triton kernels' native tests passed
VERIFIED: dict[tuple[int, int], str] = {
    (9, 0): "NVIDIA H100 80GB HBM3 (SXM5), 2026-11-24, torch 2.11.0+cu130, triton 3.6.0: "
    "137 passed",
}


@dataclass(frozen=True)
class Measured:
    """One entry of :data:`FASTEST`: the backend measured fastest for an op on a GPU architecture,
    whether its output was verified against the spec there, and the measurement (GPU, date,
    software, figures, section of experiments/kernels/log.md)."""

    backend: str
    verified: bool
    evidence: str


# (compute capability, op) -> the backend measured fastest there, from the GPU benchmark runs of
# experiments/kernels/log.md. `auto` takes an entry only when it is verified; `python -m
# benchmarks.backends` measures every backend on the current GPU and says whether this table still
# holds there.
FASTEST: dict[tuple[tuple[int, int], str], Measured] = {
    ((9, 0), "block_sparse"): Measured(
        "triton", True,
        "NVIDIA H200 SXM, 2026-11-26, torch 2.11.0+cu130, Triton 3.6.0: FlexAttention's backward "
        "at 64-blocks does not compile; at 128-blocks Flex took 0.67 / 1.65 ms (forward / "
        "backward) against Triton's 0.33 / 1.48 at n = 4,096, head dim 64, bf16 "
        '(experiments/kernels/log.md, "Third GPU run")',
    ),
    ((9, 0), "block_sparse_forward"): Measured(
        "flex", False,
        "NVIDIA H200 SXM, 2026-11-26, torch 2.11.0+cu130: Flex's forward 0.264 ms against Triton's "
        "0.322-0.331 at n = 4,096, head dim 64, bf16, 64-blocks; its output has not been checked "
        'against the spec on a GPU yet (experiments/kernels/log.md, "Third GPU run")',
    ),
    ((9, 0), "routing"): Measured(
        "triton", True,
        "NVIDIA H200 SXM, 2026-11-27, torch 2.11.0+cu130, Triton 3.6.0: forward+backward 1.5-1.9x "
        "faster than the PyTorch path at clusters of 128 to 512, n = 4,096 and 8,192 "
        '(experiments/kernels/log.md, "Fifth GPU run")',
    ),
}  # fmt: skip


def backend(capability: tuple[int, int] | None = None, op: str = "block_sparse") -> str:
    """``"triton"``, ``"flex"`` or ``"torch"``: the backend CUDA tensors of ``op`` (one of
    :data:`OPS`) take on a GPU of compute ``capability`` (``None``: the current device's), under
    ``ZOO_ATTENTION_BACKEND`` (see the module docstring).

    Raises:
        ValueError: ``ZOO_ATTENTION_BACKEND`` is not one of ``auto``, ``triton``, ``flex``,
            ``torch``.
    """
    choice = requested()
    if choice != "auto":
        return choice
    capability = tuple(_capability(None)) if capability is None else capability
    measured = FASTEST.get((capability, op))
    if measured is not None and measured.verified and _installed(measured.backend):
        return measured.backend
    if capability in VERIFIED:
        return "triton"
    _warn_unverified(capability)
    return "torch"


def choose(op: str, x: Tensor) -> str:
    """The backend that runs ``op`` on ``x``'s device: :func:`backend`'s on CUDA; on a CPU
    ``"flex"`` when ``ZOO_ATTENTION_BACKEND=flex``, else ``"torch"`` (a Triton launch on CPU
    tensors fails outside ``TRITON_INTERPRET=1``). ``auto`` quietly skips a backend that is not
    installed.

    Raises:
        ValueError: an unknown ``ZOO_ATTENTION_BACKEND``, or one that names a backend this
            machine lacks (Triton not installed, a torch without FlexAttention).
    """
    wanted = requested()
    if x.is_cuda:
        name = backend(tuple(_capability(x.device)), op)
    else:
        name = "flex" if wanted == "flex" else "torch"
    if name == "torch" or _installed(name):
        return name
    if wanted == name:
        raise ValueError(
            f"ZOO_ATTENTION_BACKEND={name} but {_MISSING[name]}; or unset the variable"
        )
    return "torch"  # auto on a verified GPU without the backend: quietly the PyTorch path


def use_triton(x: Tensor, op: str = "block_sparse") -> bool:
    """Whether ``op`` on ``x`` runs the Triton kernels (:func:`choose` says ``"triton"``)."""
    return choose(op, x) == "triton"


_MISSING = {
    "triton": "Triton is not installed: pip install 'attention-zoo[triton]'",
    "flex": "this torch has no FlexAttention (torch.nn.attention.flex_attention, torch >= 2.5)",
}


@functools.cache
def _warn_unverified(capability: tuple[int, int]) -> None:
    warnings.warn(
        f"the Triton attention kernels are not verified on GPUs of compute capability "
        f"{capability[0]}.{capability[1]} (verified: "
        f"{', '.join(f'{a}.{b}' for a, b in VERIFIED)}); running the PyTorch path. Set "
        "ZOO_ATTENTION_BACKEND=triton to use them anyway",
        stacklevel=4,
    )


def _installed(name: str) -> bool:
    if name == "triton":
        return importlib.util.find_spec("triton") is not None
    if name == "flex":
        return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None
    return True


def _after_flex(x: Tensor) -> str:
    """The next verified backend when Flex cannot run a call: Triton on a GPU in
    :data:`VERIFIED` with Triton installed, else the PyTorch path."""
    if x.is_cuda and tuple(_capability(x.device)) in VERIFIED and _installed("triton"):
        return "triton"
    return "torch"


def requested() -> str:
    """``ZOO_ATTENTION_BACKEND``, normalised (unset or empty: ``"auto"``). The attention engine
    reads it to send every pattern to the block-sparse op under ``"flex"``.

    Raises:
        ValueError: any other value than :data:`BACKENDS` (the message lists them).
    """
    choice = os.environ.get("ZOO_ATTENTION_BACKEND", "").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ValueError(
            f"ZOO_ATTENTION_BACKEND={choice!r} is not one of {', '.join(BACKENDS)}; unset it for "
            "the default (auto)"
        )
    return choice


def _capability(device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def _fallback(op: str, what: str, reason: str, instead: str) -> None:
    path = {"torch": "the PyTorch path", "triton": "the Triton kernel"}[instead]
    warnings.warn(
        f"{op}: {what} cannot run this call ({reason}); running {path} instead",
        stacklevel=3,
    )
