"""Block-sparse attention in Triton: FlashAttention-2 over the listed blocks of a layout only.

There are three kernels, launched one program per (block, batch x head):

- forward: a query block walks its key blocks (the CSR of :class:`KernelTables`) with the
  online softmax, then stores the output and the base-2 row log-sum-exp;
- dq: the same walk, recomputing the probabilities from the log-sum-exp;
- dk/dv: a key block walks the query blocks that read it (the CSC), so no two programs write
  the same rows and the backward pass needs no atomics (it is deterministic).

A block's element mask (the causal diagonal, the ragged end, a pattern's ``mask_mod``) comes
from its tile id: ``-1`` means full, which loads no mask. In the backward kernels a full block
that does not reach past the sequence's end is not masked at all, as FlashAttention-2 skips
the mask off the diagonal; the forward kernel masks every block, which measured faster on an
H100 (experiments/kernels/log.md, "Fourth GPU run"). Tiles are ``b x b`` with
``b`` = the layout's block size, so one layout block is one tile. Sources: Child et al. 2019
§5.5 (block-sparse kernels), Dao 2023 (FlashAttention-2's loop order and backward).

Import this module only where Triton is present. Callers use
:func:`zoo.kernels.block_sparse_attention`, which dispatches here for CUDA tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from zoo.kernels.block_sparse import KernelTables
from zoo.kernels.triton_flash import (
    LOG2E,
    dkdv_step,
    dq_step,
    launch_options,
    precision,
    scores,
    softmax_finish,
    softmax_step,
)

from zoo.kernels import triton_flash as flash

__all__ = ["block_sparse_attention_triton", "unsupported"]

BLOCK_SIZES = (16, 32, 64, 128)


def unsupported(q: Tensor, v: Tensor, block_size: int) -> str | None:
    """Why the kernel cannot take these inputs, or ``None`` when it can. It takes blocks of 16
    to 128 (powers of two), head dims of 16 to 128 with ``v``'s equal to ``q``'s, and
    fp16/bf16/fp32."""
    if block_size not in BLOCK_SIZES:
        return f"block_size {block_size} is not one of {BLOCK_SIZES}"
    return flash.unsupported(q, v)


@triton.jit
def _load_rows(base, rows, T, D: tl.constexpr):
    """The ``(len(rows), D)`` tile of rows ``rows`` of a ``(T, D)`` matrix; rows >= T read 0."""
    d = tl.arange(0, D)
    return tl.load(base + rows[:, None] * D + d[None, :], mask=(rows < T)[:, None], other=0.0)


@triton.jit
def _allowed(tiles, tile, offs_m, offs_n, T, BLOCK: tl.constexpr, TRANSPOSED: tl.constexpr):
    """The ``(BLOCK, BLOCK)`` mask of one listed block: keys inside the sequence, and the
    block's tile when ``tile >= 0``. Rows are queries, or keys when ``TRANSPOSED``."""
    r = tl.arange(0, BLOCK)
    if TRANSPOSED:  # element (key n, query m) is tile[m, n]
        inside = (offs_n < T)[:, None] & (offs_m >= 0)[None, :]
        where = r[None, :] * BLOCK + r[:, None]
    else:
        inside = (offs_m >= 0)[:, None] & (offs_n < T)[None, :]
        where = r[:, None] * BLOCK + r[None, :]
    # a full block (tile -1) loads nothing; the mask is spelled (where * 0 + tile) >= 0 because the
    # interpreter rejects a tensor mask combined with a scalar one
    tile_mask = tl.load(
        tiles + tl.maximum(tile, 0) * BLOCK * BLOCK + where, mask=(where * 0 + tile) >= 0, other=1
    )
    return inside & (tile_mask != 0)


@triton.jit
def _forward(
    Q, K, V, O, LSE, row_ptr, row_cols, row_tile, tiles,
    H, T, nb, n_listed, Hl, Ht, qk_scale,
    BLOCK: tl.constexpr, D: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    qb, bh = tl.program_id(0), tl.program_id(1)
    h = bh % H
    base = bh.to(tl.int64) * T * D
    offs_m = qb * BLOCK + tl.arange(0, BLOCK)
    q = _load_rows(Q + base, offs_m, T, D)
    m_i = tl.full((BLOCK,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK,), tl.float32)
    acc = tl.zeros((BLOCK, D), tl.float32)
    row = (h % Hl) * nb + qb
    for j in range(tl.load(row_ptr + row), tl.load(row_ptr + row + 1)):
        kb = tl.load(row_cols + j)
        offs_n = kb * BLOCK + tl.arange(0, BLOCK)
        tile = tl.load(row_tile + (h % Ht) * n_listed + j)
        k = _load_rows(K + base, offs_n, T, D)
        v = _load_rows(V + base, offs_n, T, D)
        s = scores(q, k, qk_scale, PRECISION)
        # every block is masked here: skipping the mask on full ones was slower
        # (experiments/kernels/log.md)
        s = tl.where(_allowed(tiles, tile, offs_m, offs_n, T, BLOCK, False), s, float("-inf"))
        m_i, l_i, acc = softmax_step(s, m_i, l_i, acc, v, PRECISION)
    out, lse = softmax_finish(m_i, l_i, acc)
    inside = offs_m < T
    d = tl.arange(0, D)
    tl.store(O + base + offs_m[:, None] * D + d[None, :], out.to(O.dtype.element_ty),
             mask=inside[:, None])  # fmt: skip
    tl.store(LSE + bh.to(tl.int64) * T + offs_m, lse, mask=inside)


@triton.jit
def _backward_dq(
    Q, K, V, DO, LSE, DELTA, DQ, row_ptr, row_cols, row_tile, tiles,
    H, T, nb, n_listed, Hl, Ht, qk_scale, scale,
    BLOCK: tl.constexpr, D: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    qb, bh = tl.program_id(0), tl.program_id(1)
    h = bh % H
    base = bh.to(tl.int64) * T * D
    offs_m = qb * BLOCK + tl.arange(0, BLOCK)
    inside = offs_m < T
    q = _load_rows(Q + base, offs_m, T, D)
    do = _load_rows(DO + base, offs_m, T, D)
    lse = tl.load(LSE + bh.to(tl.int64) * T + offs_m, mask=inside, other=float("inf"))
    delta = tl.load(DELTA + bh.to(tl.int64) * T + offs_m, mask=inside, other=0.0)
    dq = tl.zeros((BLOCK, D), tl.float32)
    row = (h % Hl) * nb + qb
    for j in range(tl.load(row_ptr + row), tl.load(row_ptr + row + 1)):
        kb = tl.load(row_cols + j)
        offs_n = kb * BLOCK + tl.arange(0, BLOCK)
        tile = tl.load(row_tile + (h % Ht) * n_listed + j)
        k = _load_rows(K + base, offs_n, T, D)
        v = _load_rows(V + base, offs_n, T, D)
        s = scores(q, k, qk_scale, PRECISION)
        if (tile >= 0) | ((kb + 1) * BLOCK > T):
            s = tl.where(_allowed(tiles, tile, offs_m, offs_n, T, BLOCK, False), s, float("-inf"))
        dq = dq_step(s, do, lse, delta, k, v, dq, PRECISION)
    d = tl.arange(0, D)
    tl.store(DQ + base + offs_m[:, None] * D + d[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=inside[:, None])  # fmt: skip


@triton.jit
def _backward_dkdv(
    Q, K, V, DO, LSE, DELTA, DK, DV, col_ptr, col_rows, col_tile, tiles,
    H, T, nb, n_listed, Hl, Ht, qk_scale, scale,
    BLOCK: tl.constexpr, D: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    kb, bh = tl.program_id(0), tl.program_id(1)
    h = bh % H
    base = bh.to(tl.int64) * T * D
    offs_n = kb * BLOCK + tl.arange(0, BLOCK)
    k = _load_rows(K + base, offs_n, T, D)
    v = _load_rows(V + base, offs_n, T, D)
    dk = tl.zeros((BLOCK, D), tl.float32)
    dv = tl.zeros((BLOCK, D), tl.float32)
    col = (h % Hl) * nb + kb
    ragged = (kb + 1) * BLOCK > T
    for j in range(tl.load(col_ptr + col), tl.load(col_ptr + col + 1)):
        offs_m = tl.load(col_rows + j) * BLOCK + tl.arange(0, BLOCK)
        tile = tl.load(col_tile + (h % Ht) * n_listed + j)
        inside = offs_m < T
        q = _load_rows(Q + base, offs_m, T, D)
        do = _load_rows(DO + base, offs_m, T, D)
        lse = tl.load(LSE + bh.to(tl.int64) * T + offs_m, mask=inside, other=float("inf"))
        delta = tl.load(DELTA + bh.to(tl.int64) * T + offs_m, mask=inside, other=0.0)
        s_t = scores(k, q, qk_scale, PRECISION)
        if (tile >= 0) | ragged:
            s_t = tl.where(_allowed(tiles, tile, offs_m, offs_n, T, BLOCK, True), s_t,
                           float("-inf"))  # fmt: skip
        dk, dv = dkdv_step(s_t, q, do, lse, delta, v, dk, dv, PRECISION)
    d = tl.arange(0, D)
    rows = offs_n[:, None] * D + d[None, :]
    inside_n = (offs_n < T)[:, None]
    tl.store(DK + base + rows, (dk * scale).to(DK.dtype.element_ty), mask=inside_n)
    tl.store(DV + base + rows, dv.to(DV.dtype.element_ty), mask=inside_n)


class _BlockSparseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, tables: KernelTables, block: int, scale: float):
        B, H, T, D = q.shape
        q, k, v = (x.contiguous() for x in (q, k, v))
        out = flash.empty(q.shape, q)
        lse = flash.empty((B, H, T), q, torch.float32)
        nb = triton.cdiv(T, block)
        _forward[(nb, B * H)](
            q, k, v, out, lse, tables.row_ptr, tables.row_cols, tables.row_tile, tables.tiles,
            H, T, nb, tables.n_blocks, tables.n_layout_heads, tables.n_mask_heads,
            scale * LOG2E, BLOCK=block, D=D, PRECISION=precision(q.dtype),
            **launch_options(D, "block_sparse.forward"),
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.tables, ctx.block, ctx.scale = tables, block, scale
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        tables, block, scale = ctx.tables, ctx.block, ctx.scale
        B, H, T, D = q.shape
        do = grad_out.to(q.dtype).contiguous()
        delta = (do.float() * out.float()).sum(-1)  # (B, H, T): rowsum(dO * O)
        dq, dk, dv = (flash.empty(x.shape, x) for x in (q, k, v))
        nb = triton.cdiv(T, block)
        common = dict(BLOCK=block, D=D, PRECISION=precision(q.dtype))
        sizes = (H, T, nb, tables.n_blocks, tables.n_layout_heads, tables.n_mask_heads)
        _backward_dq[(nb, B * H)](
            q, k, v, do, lse, delta, dq, tables.row_ptr, tables.row_cols, tables.row_tile,
            tables.tiles, *sizes, scale * LOG2E, scale, **common,
            **launch_options(D, "block_sparse.dq"),
        )  # fmt: skip
        _backward_dkdv[(nb, B * H)](
            q, k, v, do, lse, delta, dk, dv, tables.col_ptr, tables.col_rows, tables.col_tile,
            tables.tiles, *sizes, scale * LOG2E, scale, **common,
            **launch_options(D, "block_sparse.dkdv"),
        )  # fmt: skip
        return dq, dk, dv, None, None, None


def block_sparse_attention_triton(
    q: Tensor, k: Tensor, v: Tensor, tables: KernelTables, block_size: int, scale: float
) -> Tensor:
    """Block-sparse attention of ``q, k, v`` ``(B, H, T, D)`` over ``tables``.

    The tables come from :meth:`BlockSparsePlan.kernel_tables`. ``k`` and ``v`` are cast to
    ``q``'s dtype. Returns ``(B, H, T, D)`` in ``q``'s dtype. The caller checks
    :func:`unsupported`. CPU tensors work only under ``TRITON_INTERPRET=1``.
    """
    k, v = k.to(q.dtype), v.to(q.dtype)
    return _BlockSparseAttention.apply(q, k, v, tables, block_size, scale)
