"""FlexAttention (``torch.nn.attention.flex_attention``) as a backend of the block-sparse op.

A :class:`~zoo.kernels.block_sparse.BlockSparsePlan` becomes a FlexAttention ``BlockMask`` with the
plan's own block size: the plan's listed blocks, split into *full* blocks (every element allowed,
so Flex skips the mask) and *partial* ones (the causal diagonal, the ragged end, the pattern's
``mask_mod``), exactly as :class:`~zoo.kernels.block_sparse.KernelTables` classifies them for the
Triton kernel. Inside a partial block Flex evaluates the element predicate
``kv_idx <= q_idx`` (when causal) ``& mask_mod(head, q_idx, kv_idx)``, so the result is the spec's
(:func:`~zoo.kernels.block_sparse.block_sparse_attention_ref`), not a block approximation of it.

Where it runs:

- **CUDA**: ``flex_attention`` under ``torch.compile`` (compiled once per process), with tiles as
  large as the mask's blocks;
- **CPU**: ``flex_attention`` eagerly. That path materialises the ``T x T`` scores (``O(T^2)``
  memory) and FlexAttention has no backward pass on a CPU, so it is for checking a pattern against
  the spec, not for speed; the dispatching op falls back when gradients are needed.

:func:`unsupported` names what this backend does not take; :func:`zoo.kernels.block_sparse_attention`
then runs the next verified backend with one warning. Shape legend: B batch, H heads, T positions,
D head dim, b block size, nb blocks per sequence.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
import weakref

import torch
from torch import Tensor
from zoo.kernels.block_sparse import BlockSparsePlan

__all__ = ["available", "block_mask_for", "block_sparse_attention_flex", "unsupported"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_masks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # plan -> {(H, device): BlockMask}


def available() -> bool:
    """Whether this torch has FlexAttention (``torch.nn.attention.flex_attention``, torch >= 2.5)."""
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def unsupported(q: Tensor, k: Tensor, v: Tensor, plan: BlockSparsePlan) -> str | None:
    """Why this backend cannot run the call, in a few words; ``None`` if it can.

    ``q, k, v``: ``(B, H, T, D)``. Refused: a dtype other than fp16/bf16/fp32, a ``v`` head dim
    different from ``q``'s, gradients on a CPU (FlexAttention has no CPU backward pass), and on
    CUDA a block size that is not a multiple of 16 from 16 to 128 (Flex's tiles are the blocks).
    """
    if q.dtype not in _DTYPES:
        return f"dtype {q.dtype} (FlexAttention takes fp16, bf16 and fp32)"
    if v.shape[-1] != q.shape[-1]:
        return f"v head dim {v.shape[-1]} differs from q's {q.shape[-1]}"
    if not q.is_cuda and torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        return "gradients are needed, and FlexAttention has no backward pass on a CPU"
    if q.is_cuda and (plan.b % 16 or not 16 <= plan.b <= 128):
        return f"block size {plan.b} (Flex's GPU tiles take multiples of 16 from 16 to 128)"
    return None


def block_sparse_attention_flex(
    q: Tensor, k: Tensor, v: Tensor, plan: BlockSparsePlan, scale: float | None = None
) -> Tensor:
    """Block-sparse attention by FlexAttention over ``plan``'s ``BlockMask``.

    Args:
        q, k, v: ``(B, H, T, D)``, fp16/bf16/fp32, on the plan's device.
        plan: the layout, causal flag and ``mask_mod`` (:func:`zoo.kernels.block_sparse.plan_for`).
        scale: score scale, default ``D ** -0.5``.

    Returns:
        ``(B, H, T, D)`` in ``q``'s dtype; a query with no allowed key gets a zero output.

    Raises:
        ValueError: an input :func:`unsupported` refuses (the dispatching op checks first).
    """
    reason = unsupported(q, k, v, plan)
    if reason is not None:
        raise ValueError(f"FlexAttention cannot run this call: {reason}")
    mask = block_mask_for(plan, q.shape[1], q.device)
    if q.is_cuda:
        b = plan.b
        tiles = {"BLOCK_M": b, "BLOCK_N": b, "BLOCK_M1": max(16, b // 2), "BLOCK_N1": b,
                 "BLOCK_M2": b, "BLOCK_N2": max(16, b // 2)}  # fmt: skip
        return _compiled()(q, k, v, block_mask=mask, scale=scale, kernel_options=tiles)
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():  # "called without torch.compile": expected on a CPU
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=mask, scale=scale)


def block_mask_for(plan: BlockSparsePlan, n_heads: int, device: torch.device):
    """``plan`` as a FlexAttention ``BlockMask`` for ``n_heads`` heads (built once per plan,
    head count and device, then kept while the plan lives).

    The mask's head dim is 1 when neither the layout nor the mask depends on the head, else
    ``n_heads``; its batch dim is 1 (broadcast).
    """
    cache = _masks.setdefault(plan, {})
    key = (n_heads, str(device))
    if key not in cache:
        cache[key] = _build(plan, n_heads, device)
    return cache[key]


def _build(plan: BlockSparsePlan, n_heads: int, device: torch.device):
    from torch.nn.attention.flex_attention import BlockMask

    tables = plan.to(torch.device(device)).kernel_tables(n_heads)
    nb, Hl, Ht = plan.nb, tables.n_layout_heads, tables.n_mask_heads
    rows = torch.repeat_interleave(
        torch.arange(Hl * nb, device=tables.row_ptr.device), tables.row_ptr.diff().long()
    )  # (E,) flat (layout head, query block) of each listed block
    Hx = max(Hl, Ht)
    full = torch.zeros(Hx, nb, nb, dtype=torch.bool, device=rows.device)
    partial = torch.zeros_like(full)
    cols = tables.row_cols.long()
    for h in range(Hx):
        mine = rows // nb == h % Hl
        is_full = tables.row_tile[h % Ht, mine] == -1
        r, c = rows[mine] % nb, cols[mine]
        full[h, r[is_full], c[is_full]] = True
        partial[h, r[~is_full], c[~is_full]] = True
    causal, mask_mod, T = plan.causal, plan.mask_mod, plan.seq_len

    def element_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        allowed = kv_idx < T
        if causal:
            allowed = allowed & (kv_idx <= q_idx)
        if mask_mod is not None:
            allowed = allowed & mask_mod(h, q_idx, kv_idx)
        return allowed

    return BlockMask.from_kv_blocks(
        *_lists(partial), *_lists(full), BLOCK_SIZE=plan.b, mask_mod=element_mask,
        seq_lengths=(T, T),
    )  # fmt: skip


def _lists(on: Tensor) -> tuple[Tensor, Tensor]:
    """Bool ``(Hx, nb, nb)`` -> Flex's ``(num_blocks (1, Hx, nb), indices (1, Hx, nb, nb))``, int32,
    each row's on-blocks first in column order."""
    order = torch.sort((~on).to(torch.uint8), dim=-1, stable=True).indices
    return on.sum(-1, dtype=torch.int32)[None], order.to(torch.int32)[None].contiguous()


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)
