"""Block-sparse attention, pure-PyTorch reference: computes only the blocks a layout turns on.

``block_sparse_attention_ref(q, k, v, layout, block_size)`` equals dense attention masked by the
layout expanded to elements (``layout[i // b, j // b]``), intersected with ``j <= i`` when ``causal``
and with an optional element predicate ``mask_mod(head, q_idx, kv_idx)`` evaluated inside the
computed blocks (so a pattern from :mod:`zoo.attention.patterns` is reproduced exactly, not up to
block granularity). A query with no allowed key gets a zero output and zero gradients.

How (the design the Triton kernel of ``zoo.kernels`` follows, Child et al. 2019 §5.5 and
FlashAttention's recomputation): the layout becomes, per row of query blocks, the list of its key
blocks. Query blocks are processed a chunk at a time: gather the chunk's key/value blocks, compute
the scores of those blocks only, softmax in fp32, and keep just the output and the row
log-sum-exp. The backward pass recomputes the chunk's probabilities from the log-sum-exp and
scatter-adds the key/value gradients. Both passes run with autocast switched off: under
``torch.autocast`` the matmuls would otherwise drop to bf16 in the forward pass only (autocast is
not active when backward runs), and gradients recomputed in fp32 against a log-sum-exp from bf16
scores are wrong by up to the bf16 rounding of the logits. Peak memory is O(n * d) plus one chunk
(never ``n x n``); time is proportional to the number of computed blocks.

Shape legend: B batch, H heads, T positions, D head dim, b block_size, nb blocks per sequence,
R query blocks in a chunk, K key blocks per query block.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["BlockSparsePlan", "block_sparse_attention_ref", "expand_layout"]

MaskMod = Callable[[Tensor, Tensor, Tensor], Tensor]
_CHUNK_SCORES = 1 << 22  # score elements per chunk (16 MiB of fp32)


def expand_layout(layout: Tensor, block_size: int, n: int) -> Tensor:
    """Block layout ``(..., nb, nb)`` -> element mask ``(..., n, n)`` (each block repeated)."""
    out = layout.repeat_interleave(block_size, -2).repeat_interleave(block_size, -1)
    return out[..., :n, :n]


def block_sparse_attention_ref(
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
    """Attention over the blocks of ``layout`` only.

    Args:
        q, k, v: ``(B, H, T, D)``, fp32, bf16 or fp16 (scores and softmax are computed in fp32;
            fp64 stays fp64).
        layout: bool ``(nb, nb)`` shared by all heads or ``(H, nb, nb)`` per head,
            ``nb = ceil(T / block_size)``; or a :class:`BlockSparsePlan` built once for it (then
            ``block_size``, ``causal`` and ``mask_mod`` come from the plan).
        block_size: block edge ``b``; ``T`` need not be a multiple (padding is internal).
        causal: also require ``j <= i`` (diagonal blocks are masked inside).
        mask_mod: optional predicate ``(head, q_idx, kv_idx) -> bool`` on broadcastable int64
            tensors, applied inside computed blocks.
        scale: score scale, default ``1 / sqrt(D)``.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``q``.

    Raises:
        ValueError: mismatched shapes, or a layout of the wrong size or dtype.
    """
    B, H, T, D = q.shape
    if k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k, v must share (B, H, T): got {q.shape}, {k.shape}, {v.shape}")
    if isinstance(layout, BlockSparsePlan):
        plan = layout
        if plan.seq_len != T:
            raise ValueError(f"plan was built for {plan.seq_len} positions, q has {T}")
    else:
        if block_size is None:
            raise ValueError("block_size is required with a layout tensor")
        plan = BlockSparsePlan(layout, block_size, T, causal=causal, mask_mod=mask_mod)
    if plan.n_layout_heads not in (1, H):
        raise ValueError(f"per-head layout has {plan.n_layout_heads} heads, q has {H}")
    scale = D**-0.5 if scale is None else scale
    return _BlockSparseAttention.apply(q, k, v, plan.to(q.device), scale)


class BlockSparsePlan:
    """A layout prepared for :func:`block_sparse_attention_ref`: per row of query blocks, the list
    of its key blocks, and (built on first use, then kept) the element mask of each chunk.

    Build it once per layout and sequence length and pass it instead of the layout tensor to skip
    that preparation on every call (models do). Memory: ``O(T * nnz-per-row)`` bools.

    Raises:
        ValueError: a layout that is not bool ``(nb, nb)`` / ``(H, nb, nb)`` for ``seq_len``.
    """

    def __init__(
        self,
        layout: Tensor,
        block_size: int,
        seq_len: int,
        *,
        causal: bool = True,
        mask_mod: MaskMod | None = None,
    ) -> None:
        nb = math.ceil(seq_len / block_size)
        if (
            layout.dtype != torch.bool
            or layout.dim() not in (2, 3)
            or layout.shape[-2:] != (nb, nb)
        ):
            raise ValueError(
                f"layout must be a bool ({nb}, {nb}) or (H, {nb}, {nb}) tensor for "
                f"T={seq_len} and block_size={block_size}; got {tuple(layout.shape)} {layout.dtype}"
            )
        lay = layout if layout.dim() == 3 else layout[None]  # (Hl, nb, nb)
        self.layout = layout
        self.b, self.seq_len, self.nb = block_size, seq_len, nb
        self.causal, self.mask_mod = causal, mask_mod
        self.n_layout_heads = lay.shape[0]
        self.nnz = lay.sum(-1)  # (Hl, nb) key blocks per query block
        # on-blocks first, in column order (stable sort of the off flags)
        order = torch.sort((~lay).to(torch.uint8), dim=-1, stable=True).indices
        self.cols = order[..., : max(1, int(self.nnz.max()))]  # (Hl, nb, K)
        self._masks: dict[int, list[Tensor]] = {}  # n_heads -> element mask of each chunk

    def to(self, device: torch.device) -> BlockSparsePlan:
        if self.cols.device != device:
            self.nnz, self.cols = self.nnz.to(device), self.cols.to(device)
            self._masks.clear()
        return self

    def chunks(self, n_heads: int) -> list[tuple[int, int, Tensor, Tensor]]:
        """``(r0, r1, cols (Hl, R, K), allowed (1 or H, R, b, K b))`` per chunk of query blocks."""
        b, K = self.b, self.cols.shape[-1]
        rows = max(1, _CHUNK_SCORES // (n_heads * b * b * K))
        out = []
        for i, r0 in enumerate(range(0, self.nb, rows)):
            r1 = min(self.nb, r0 + rows)
            Kc = max(1, int(self.nnz[:, r0:r1].max()))
            cols = self.cols[:, r0:r1, :Kc]
            masks = self._masks.setdefault(n_heads, [])
            if len(masks) <= i:
                masks.append(self._allowed(r0, r1, cols, n_heads))
            out.append((r0, r1, cols, masks[i]))
        return out

    def _allowed(self, r0: int, r1: int, cols: Tensor, H: int) -> Tensor:
        b, dev = self.b, cols.device
        K = cols.shape[-1]
        offs = torch.arange(b, device=dev)
        qpos = (torch.arange(r0, r1, device=dev)[:, None] * b + offs)[None, :, :, None, None]
        kpos = (cols[..., None] * b + offs)[:, :, None]  # (Hl, R, 1, K, b)
        valid = torch.arange(K, device=dev) < self.nnz[:, r0:r1, None]  # (Hl, R, K)
        m = valid[:, :, None, :, None] & (kpos < self.seq_len)
        if self.causal:
            m = m & (kpos <= qpos)
        if self.mask_mod is not None:
            heads = torch.arange(H, device=dev).view(H, 1, 1, 1, 1)
            m = m & self.mask_mod(heads, qpos, kpos)
        m = torch.broadcast_to(m, (m.shape[0], r1 - r0, b, K, b))
        return m.reshape(m.shape[0], r1 - r0, b, K * b)

    def gather(self, blocks: Tensor, cols: Tensor) -> Tensor:
        """``(B, H, nb, b, D)`` -> the chunk's key blocks ``(B, H, R, K * b, D)``."""
        B, H, _, b, D = blocks.shape
        if self.n_layout_heads > 1:
            heads = torch.arange(H, device=cols.device)[:, None, None]
            g = blocks[:, heads, cols]  # (B, H, R, K, b, D)
        else:
            g = blocks[:, :, cols[0]]
        return g.reshape(B, H, cols.shape[1], -1, D)

    def scatter_add(self, into: Tensor, grads: Tensor, cols: Tensor) -> None:
        """Add chunk gradients ``(B, H, R, K * b, D)`` into ``into`` ``(B, H, nb, b, D)``."""
        B, H, nb, b, D = into.shape
        R, K = cols.shape[1], cols.shape[2]
        heads = torch.arange(H, device=cols.device)[:, None, None]
        flat = (heads * nb + cols).expand(H, R, K).reshape(-1)  # (H R K,)
        into.view(B, H * nb, b, D).index_add_(1, flat, grads.reshape(B, H * R * K, b, D))


def _pad_blocks(x: Tensor, nb: int, b: int) -> Tensor:
    """``(B, H, T, D)`` -> ``(B, H, nb, b, D)`` in fp32 (fp64 stays fp64), zero-padded at the end."""
    B, H, T, D = x.shape
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return F.pad(x, (0, 0, 0, nb * b - T)).reshape(B, H, nb, b, D)


def _probs(s: Tensor, allowed: Tensor, lse: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Masked softmax of scores ``s`` ``(B, H, R, b, Kb)``; returns probs and row log-sum-exp."""
    s = s.masked_fill(~allowed, float("-inf"))
    if lse is None:
        lse = torch.logsumexp(s, -1)  # (B, H, R, b); -inf for a row with no key
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return torch.exp(s - safe[..., None]), lse


class _BlockSparseAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, q: Tensor, k: Tensor, v: Tensor, plan: BlockSparsePlan, scale: float
    ) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            return _BlockSparseAttention._forward(ctx, q, k, v, plan, scale)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        with torch.autocast(grad_out.device.type, enabled=False):
            return _BlockSparseAttention._backward(ctx, grad_out)

    @staticmethod
    def _forward(ctx, q: Tensor, k: Tensor, v: Tensor, plan: BlockSparsePlan, scale: float):
        B, H, T, D = q.shape
        nb, b = plan.nb, plan.b
        qb, kb, vb = (_pad_blocks(x, nb, b) for x in (q, k, v))  # (B, H, nb, b, D)
        out = vb.new_zeros(vb.shape)
        lse = torch.full((B, H, nb, b), float("-inf"), device=q.device, dtype=out.dtype)
        for r0, r1, cols, allowed in plan.chunks(H):
            keys, values = plan.gather(kb, cols), plan.gather(vb, cols)  # (B, H, R, Kb, D)
            s = qb[:, :, r0:r1] @ keys.transpose(-1, -2) * scale  # (B, H, R, b, Kb)
            p, lse[:, :, r0:r1] = _probs(s, allowed)
            out[:, :, r0:r1] = p @ values
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan, ctx.scale = plan, scale
        return out.view(B, H, nb * b, -1)[:, :, :T].to(q.dtype)

    @staticmethod
    def _backward(ctx, grad_out: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        plan, scale = ctx.plan, ctx.scale
        B, H, T, D = q.shape
        nb, b = plan.nb, plan.b
        qb, kb, vb = (_pad_blocks(x, nb, b) for x in (q, k, v))
        do = _pad_blocks(grad_out, nb, b)
        delta = (do * out).sum(-1)  # (B, H, nb, b): rowsum(dO * O)
        dq, dk, dv = (qb.new_zeros(x.shape) for x in (qb, kb, vb))
        for r0, r1, cols, allowed in plan.chunks(H):
            keys, values = plan.gather(kb, cols), plan.gather(vb, cols)
            q_c, do_c = qb[:, :, r0:r1], do[:, :, r0:r1]  # (B, H, R, b, D)
            s = q_c @ keys.transpose(-1, -2) * scale
            p, _ = _probs(s, allowed, lse[:, :, r0:r1])
            dp = do_c @ values.transpose(-1, -2)  # (B, H, R, b, Kb)
            ds = p * (dp - delta[:, :, r0:r1, :, None]) * scale
            dq[:, :, r0:r1] = ds @ keys
            plan.scatter_add(dk, ds.transpose(-1, -2) @ q_c, cols)
            plan.scatter_add(dv, p.transpose(-1, -2) @ do_c, cols)

        def unpad(g: Tensor, like: Tensor) -> Tensor:
            return g.view(B, H, nb * b, -1)[:, :, :T].to(like.dtype)

        return unpad(dq, q), unpad(dk, k), unpad(dv, v), None, None
