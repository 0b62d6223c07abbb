"""Block-sparse attention in PyTorch: the executable spec and the implementation that runs off CUDA.

- :func:`block_sparse_attention_ref`, the spec: dense fp64 attention under the layout's element
  mask (:func:`masked_attention_ref`), ``O(T^2)`` memory, for tests and small inputs;
- :func:`block_sparse_attention_torch`, the PyTorch implementation: computes only the blocks the
  layout turns on. The dispatching op runs it on CPUs and wherever the Triton kernel does not.

``block_sparse_attention_torch(q, k, v, layout, block_size)`` equals dense attention masked by the
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
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "BlockSparsePlan",
    "KernelTables",
    "block_sparse_attention_ref",
    "block_sparse_attention_torch",
    "expand_layout",
    "masked_attention_ref",
    "plan_for",
]

MaskMod = Callable[[Tensor, Tensor, Tensor], Tensor]
_CHUNK_SCORES = 1 << 22  # score elements per chunk (16 MiB of fp32)


def expand_layout(layout: Tensor, block_size: int, n: int) -> Tensor:
    """Block layout ``(..., nb, nb)`` -> element mask ``(..., n, n)`` (each block repeated)."""
    out = layout.repeat_interleave(block_size, -2).repeat_interleave(block_size, -1)
    return out[..., :n, :n]


def masked_attention_ref(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None = None):
    """The oracle: ``softmax(q k^T * scale, -inf where not mask) v``, computed and returned in fp64.

    ``q, k``: ``(..., Lq, D)`` / ``(..., Lk, D)``; ``v``: ``(..., Lk, Dv)``; ``mask``: bool,
    broadcastable to ``(..., Lq, Lk)``. A query with no allowed key gets zeros. Materialises every
    score: tests and small inputs only.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    return p @ v.double()


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
    """The executable spec of :func:`block_sparse_attention_torch` and the Triton kernel: dense
    attention under the element mask ``layout[i // b, j // b]`` (and ``j <= i`` when ``causal``,
    and ``mask_mod``), in fp64 (:func:`masked_attention_ref`). Same arguments and errors as
    :func:`block_sparse_attention_torch`; returns ``(B, H, T, D)`` float64."""
    plan = plan_for(q, k, v, layout, block_size, causal=causal, mask_mod=mask_mod)
    B, H, T, D = q.shape
    dev = q.device
    lay = plan.layout.to(dev)
    mask = expand_layout(lay if lay.dim() == 3 else lay[None], plan.b, T)  # (Hl, T, T)
    pos = torch.arange(T, device=dev)
    if plan.causal:
        mask = mask & (pos[None, :] <= pos[:, None])
    if plan.mask_mod is not None:
        heads = torch.arange(H, device=dev).view(H, 1, 1)
        mask = mask & plan.mask_mod(heads, pos.view(1, T, 1), pos.view(1, 1, T))
    return masked_attention_ref(q, k, v, mask, scale)


def block_sparse_attention_torch(
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
        q: ``(B, H, T, D)``, fp32, bf16 or fp16 (scores and softmax are computed in fp32; fp64
            stays fp64).
        k: ``(B, H, T, D)``, the dtype of ``q``.
        v: ``(B, H, T, D)``, the dtype of ``q``.
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
    plan = plan_for(q, k, v, layout, block_size, causal=causal, mask_mod=mask_mod)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return _BlockSparseAttention.apply(q, k, v, plan, scale)


def plan_for(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: Tensor | BlockSparsePlan,
    block_size: int | None,
    *,
    causal: bool,
    mask_mod: MaskMod | None,
) -> BlockSparsePlan:
    """The checked :class:`BlockSparsePlan` for these inputs, on ``q``'s device (the argument
    rules of :func:`block_sparse_attention_torch`; raises its ``ValueError``)."""
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
    return plan.to(q.device)


class BlockSparsePlan:
    """A layout prepared for :func:`block_sparse_attention_torch`: per row of query blocks, the list
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
        self._tables: dict[int, KernelTables] = {}  # n_heads -> the Triton kernel's tables

    def to(self, device: torch.device) -> BlockSparsePlan:
        if self.cols.device != device:
            self.nnz, self.cols = self.nnz.to(device), self.cols.to(device)
            self._masks.clear()
            self._tables.clear()
        return self

    def kernel_tables(self, n_heads: int) -> KernelTables:
        """The layout as the Triton kernel reads it, for ``n_heads`` heads (built once)."""
        if n_heads not in self._tables:
            self._tables[n_heads] = KernelTables.build(self, n_heads)
        return self._tables[n_heads]

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


@dataclass
class KernelTables:
    """A :class:`BlockSparsePlan` as the Triton kernel reads it.

    The computed blocks are listed twice, as compressed sparse rows and compressed sparse columns
    over the flattened ``(layout head, block row)`` index. The forward and dq kernels walk a
    query block's key blocks; the dk/dv kernel walks a key block's query blocks. Each listed
    block has a tile id per mask head: ``-1`` is a full block, and ``t >= 0`` names an element
    mask ``tiles[t]``, which holds the causal diagonal, the ragged end and ``mask_mod``. Equal
    tiles are stored once, so a periodic pattern needs only a few. Blocks whose mask allows
    nothing are dropped.

    Attributes:
        row_ptr, col_ptr: int32 ``(Hl * nb + 1,)`` offsets into the lists.
        row_cols, col_rows: int32 ``(E,)`` key blocks by row, and query blocks by column.
        row_tile, col_tile: int32 ``(Ht, E)`` tile id per mask head and listed block.
        tiles: int8 ``(n_tiles, b, b)`` element masks, 1 = allowed. ``n_tiles >= 1``; the
            tile is a dummy when no block is partial.
        n_layout_heads, n_mask_heads: ``Hl`` and ``Ht``. Head ``h`` reads layout head
            ``h % Hl`` and mask head ``h % Ht``. ``Ht`` is ``n_heads`` only when a
            ``mask_mod`` is given with a shared layout.
        n_blocks: computed blocks, summed over layout heads (the benchmark's FLOP count).
    """

    row_ptr: Tensor
    row_cols: Tensor
    row_tile: Tensor
    col_ptr: Tensor
    col_rows: Tensor
    col_tile: Tensor
    tiles: Tensor
    n_layout_heads: int
    n_mask_heads: int

    @property
    def n_blocks(self) -> int:
        return self.row_cols.numel()

    @staticmethod
    def build(plan: BlockSparsePlan, n_heads: int) -> KernelTables:
        lay = plan.layout if plan.layout.dim() == 3 else plan.layout[None]
        lay = lay.to(plan.cols.device)
        Hl, nb, b = lay.shape[0], plan.nb, plan.b
        Ht = n_heads if plan.mask_mod is not None and Hl == 1 else 1
        listed = lay.nonzero(as_tuple=True)  # (head, row, col), row-major order
        kept, tile_ids, unique_tiles = [], [], []
        offs = torch.arange(b, device=lay.device)
        step = max(1, _CHUNK_SCORES // (Ht * b * b))
        for e0 in range(0, listed[0].numel(), step):
            h, r, c = (x[e0 : e0 + step] for x in listed)
            qpos = (r[:, None] * b + offs)[:, :, None]  # (E, b, 1)
            kpos = (c[:, None] * b + offs)[:, None, :]  # (E, 1, b)
            m = (kpos < plan.seq_len) & (qpos >= 0)
            if plan.causal:
                m = m & (kpos <= qpos)
            if plan.mask_mod is not None:
                # per mask head, or per listed block: the layout head it belongs to
                heads = torch.arange(Ht, device=lay.device).view(-1, 1, 1, 1)
                heads = heads if Ht > 1 else h.view(1, -1, 1, 1)
                m = m & plan.mask_mod(heads, qpos[None], kpos[None])
            m = torch.broadcast_to(m, (Ht, *m.shape[-3:])).flatten(2)  # (Ht, E, b b)
            keep = m.any(-1).any(0)  # the block allows something for some head
            kept.append(torch.stack([h, r, c])[:, keep])
            m = m[:, keep]
            full = m.all(-1)
            ids = torch.full(full.shape, -1, dtype=torch.int64, device=lay.device)
            if (~full).any():
                found, inverse = torch.unique(m[~full].to(torch.uint8), dim=0, return_inverse=True)
                ids[~full] = inverse + sum(len(t) for t in unique_tiles)
                unique_tiles.append(found)
            tile_ids.append(ids)
        head, row, col = torch.cat(kept, 1) if kept else lay.new_zeros(3, 0, dtype=torch.int64)
        ids = torch.cat(tile_ids, 1) if tile_ids else lay.new_zeros(Ht, 0, dtype=torch.int64)
        tiles = torch.ones(1, b * b, dtype=torch.uint8, device=lay.device)
        if unique_tiles:  # the same tile may have been found in several chunks
            tiles, inverse = torch.unique(torch.cat(unique_tiles), dim=0, return_inverse=True)
            ids = torch.where(ids >= 0, inverse[ids.clamp(min=0)], ids)

        def compressed(major: Tensor, minor: Tensor):
            key = (head * nb + major) * nb + minor
            order = torch.argsort(key)
            counts = torch.bincount(head * nb + major, minlength=Hl * nb)
            ptr = F.pad(counts.cumsum(0), (1, 0))
            return ptr.int(), minor[order].int(), ids[:, order].int().contiguous()

        row_ptr, row_cols, row_tile = compressed(row, col)
        col_ptr, col_rows, col_tile = compressed(col, row)
        return KernelTables(
            row_ptr, row_cols, row_tile, col_ptr, col_rows, col_tile,
            tiles.view(-1, b, b).to(torch.int8).contiguous(), Hl, Ht,
        )  # fmt: skip


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
