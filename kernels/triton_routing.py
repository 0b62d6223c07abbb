"""Routing attention in Triton: dense attention inside each cluster of gathered tokens.

One program handles one ``(query tile, batch x head x cluster)``. It reads its rows through the
cluster's index list, so ``q, k, v`` are gathered straight from ``(B, H, T, D)`` and nothing is
copied first. The causal mask compares the tokens' original positions. With shared, sorted
query and key indices that is the lower triangle in cluster order, so a tile stops at the
diagonal. Otherwise every key tile is visited and the positions decide.

The cluster kernels work on per-cluster rows ``(B, H, k, w, D)``. Going back to positions (the
mean over the clusters a position appears in, and in the backward pass the sum of its
per-cluster gradients) is a fourth kernel, :func:`segment_sum`: the cluster slots are sorted by
position once (:func:`scatter_plan`), and each position adds up its own slots in cluster order.
Nothing is written twice, so it needs no atomics and is deterministic; PyTorch's ``index_add``
on CUDA uses atomics, and on an H200 it took 2.5 times as long as the cluster kernel's forward
pass (docs/bench/kernel_tuning_gpu_h200.md). Source: Roy et al. 2020, Algorithm 1 lines 19-27.
The tile steps are FlashAttention-2's (:mod:`zoo.kernels.triton_flash`).

Import this module only where Triton is present. Callers use
:func:`zoo.kernels.routing_attention`, which dispatches here for CUDA tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from zoo.kernels import triton_flash as flash
from zoo.kernels.routing import _flat_positions
from zoo.kernels.triton_flash import (
    LOG2E,
    dkdv_step,
    dq_step,
    launch_options,
    precision,
    softmax_finish,
    softmax_step,
)

__all__ = ["routing_attention_triton", "scatter_plan", "segment_sum"]


@triton.jit
def _gather_rows(base, idx_base, offs, w, D: tl.constexpr):
    """Cluster rows ``offs`` (``< w``): their positions ``(M,)`` and the ``(M, D)`` rows of the
    ``(T, D)`` matrix at ``base``. Rows past ``w`` read position 0 and zeros."""
    inside = offs < w
    pos = tl.load(idx_base + offs, mask=inside, other=0)
    d = tl.arange(0, D)
    rows = tl.load(base + pos[:, None] * D + d[None, :], mask=inside[:, None], other=0.0)
    return pos, rows


@triton.jit
def _cluster_rows(base, offs, w, D: tl.constexpr):
    """Rows ``offs`` of a per-cluster ``(w, D)`` matrix, zeros past ``w``."""
    d = tl.arange(0, D)
    return tl.load(base + offs[:, None] * D + d[None, :], mask=(offs < w)[:, None], other=0.0)


@triton.jit
def _forward(
    Q, K, V, Q_IDX, K_IDX, Y, LSE, T, w, n_clusters, qk_scale,
    CAUSAL: tl.constexpr, DIAGONAL: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    mt, bhc = tl.program_id(0), tl.program_id(1)
    base = (bhc // n_clusters).to(tl.int64) * T * D  # this (batch, head)'s (T, D) rows
    cluster = bhc.to(tl.int64) * w
    offs_m = mt * BLOCK + tl.arange(0, BLOCK)
    q_pos, q = _gather_rows(Q + base, Q_IDX + cluster, offs_m, w, D)
    m_i = tl.full((BLOCK,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK,), tl.float32)
    acc = tl.zeros((BLOCK, D), tl.float32)
    end = tl.minimum(w, (mt + 1) * BLOCK) if DIAGONAL else w
    for n0 in range(0, end, BLOCK):
        offs_n = n0 + tl.arange(0, BLOCK)
        k_pos, k = _gather_rows(K + base, K_IDX + cluster, offs_n, w, D)
        _, v = _gather_rows(V + base, K_IDX + cluster, offs_n, w, D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        allowed = (offs_m >= 0)[:, None] & (offs_n < w)[None, :]
        if CAUSAL:
            allowed = allowed & (q_pos[:, None] >= k_pos[None, :])
        m_i, l_i, acc = softmax_step(s, allowed, m_i, l_i, acc, v, PRECISION)
    out, lse = softmax_finish(m_i, l_i, acc)
    inside = offs_m < w
    d = tl.arange(0, D)
    tl.store(Y + cluster * D + offs_m[:, None] * D + d[None, :], out.to(Y.dtype.element_ty),
             mask=inside[:, None])  # fmt: skip
    tl.store(LSE + cluster + offs_m, lse, mask=inside)


@triton.jit
def _backward_dq(
    Q, K, V, Q_IDX, K_IDX, DY, LSE, DELTA, DQ, T, w, n_clusters, qk_scale, scale,
    CAUSAL: tl.constexpr, DIAGONAL: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    mt, bhc = tl.program_id(0), tl.program_id(1)
    base = (bhc // n_clusters).to(tl.int64) * T * D
    cluster = bhc.to(tl.int64) * w
    offs_m = mt * BLOCK + tl.arange(0, BLOCK)
    inside = offs_m < w
    q_pos, q = _gather_rows(Q + base, Q_IDX + cluster, offs_m, w, D)
    do = _cluster_rows(DY + cluster * D, offs_m, w, D)
    lse = tl.load(LSE + cluster + offs_m, mask=inside, other=float("inf"))
    delta = tl.load(DELTA + cluster + offs_m, mask=inside, other=0.0)
    dq = tl.zeros((BLOCK, D), tl.float32)
    end = tl.minimum(w, (mt + 1) * BLOCK) if DIAGONAL else w
    for n0 in range(0, end, BLOCK):
        offs_n = n0 + tl.arange(0, BLOCK)
        k_pos, k = _gather_rows(K + base, K_IDX + cluster, offs_n, w, D)
        _, v = _gather_rows(V + base, K_IDX + cluster, offs_n, w, D)
        allowed = (offs_m >= 0)[:, None] & (offs_n < w)[None, :]
        if CAUSAL:
            allowed = allowed & (q_pos[:, None] >= k_pos[None, :])
        dq = dq_step(q, do, lse, delta, k, v, allowed, dq, qk_scale, PRECISION)
    d = tl.arange(0, D)
    tl.store(DQ + cluster * D + offs_m[:, None] * D + d[None, :], dq * scale,
             mask=inside[:, None])  # fmt: skip


@triton.jit
def _backward_dkdv(
    Q, K, V, Q_IDX, K_IDX, DY, LSE, DELTA, DK, DV, T, w, n_clusters, qk_scale, scale,
    CAUSAL: tl.constexpr, DIAGONAL: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    nt, bhc = tl.program_id(0), tl.program_id(1)
    base = (bhc // n_clusters).to(tl.int64) * T * D
    cluster = bhc.to(tl.int64) * w
    offs_n = nt * BLOCK + tl.arange(0, BLOCK)
    k_pos, k = _gather_rows(K + base, K_IDX + cluster, offs_n, w, D)
    _, v = _gather_rows(V + base, K_IDX + cluster, offs_n, w, D)
    dk = tl.zeros((BLOCK, D), tl.float32)
    dv = tl.zeros((BLOCK, D), tl.float32)
    start = nt * BLOCK if DIAGONAL else 0
    for m0 in range(start, w, BLOCK):
        offs_m = m0 + tl.arange(0, BLOCK)
        inside = offs_m < w
        q_pos, q = _gather_rows(Q + base, Q_IDX + cluster, offs_m, w, D)
        do = _cluster_rows(DY + cluster * D, offs_m, w, D)
        lse = tl.load(LSE + cluster + offs_m, mask=inside, other=float("inf"))
        delta = tl.load(DELTA + cluster + offs_m, mask=inside, other=0.0)
        allowed_t = (offs_n < w)[:, None] & inside[None, :]
        if CAUSAL:
            allowed_t = allowed_t & (k_pos[:, None] <= q_pos[None, :])
        dk, dv = dkdv_step(q, do, lse, delta, k, v, allowed_t, dk, dv, qk_scale, PRECISION)
    d = tl.arange(0, D)
    rows = cluster * D + offs_n[:, None] * D + d[None, :]
    inside_n = (offs_n < w)[:, None]
    tl.store(DK + rows, dk * scale, mask=inside_n)
    tl.store(DV + rows, dv, mask=inside_n)


@triton.jit
def _segment_sum(
    Y, ORDER, OFFSETS, OUT, n_rows, max_count,
    MEAN: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr,
):  # fmt: skip
    """Rows ``OUT[r] = sum of Y[ORDER[OFFSETS[r]:OFFSETS[r + 1]]]`` (divided by the count, at
    least 1, when ``MEAN``), ``ROWS`` rows per program, accumulated in fp32. ``max_count`` is the
    largest count (the loop's bound, passed in: Triton 3.6 failed to compile a bound taken from
    ``tl.max`` of the counts on an H200)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    inside = rows < n_rows
    start = tl.load(OFFSETS + rows, mask=inside, other=0)
    count = tl.load(OFFSETS + rows + 1, mask=inside, other=0) - start
    d = tl.arange(0, D)
    acc = tl.zeros((ROWS, D), tl.float32)
    for j in range(0, max_count):
        has = j < count
        slot = tl.load(ORDER + start + j, mask=has, other=0).to(tl.int64)
        acc += tl.load(Y + slot[:, None] * D + d[None, :], mask=has[:, None], other=0.0).to(
            tl.float32
        )
    if MEAN:
        acc = acc / tl.maximum(count, 1).to(tl.float32)[:, None]
    tl.store(OUT + rows.to(tl.int64)[:, None] * D + d[None, :], acc.to(OUT.dtype.element_ty),
             mask=inside[:, None])  # fmt: skip


def scatter_plan(idx: Tensor, T: int) -> tuple[Tensor, Tensor, Tensor, int]:
    """What :func:`segment_sum` reads for the clusters ``idx`` ``(B, H, k, w)``: the flat
    positions of the cluster slots ``(B H k w,)``, the slots sorted by position (stably, so each
    position's slots stay in cluster order) ``(B H k w,)``, and each position's range in that
    order, ``offsets`` ``(B H T + 1,)`` (a CSR), and the most clusters any position is in.
    ``flat`` is int64, ``order`` and ``offsets`` int32. Reading the maximum synchronises with
    the device once per plan."""
    B, H = idx.shape[:2]
    flat = _flat_positions(idx, T)
    order = torch.argsort(flat, stable=True).to(torch.int32)
    offsets = flat.new_zeros(B * H * T + 1, dtype=torch.int32)
    counts = torch.bincount(flat, minlength=B * H * T)
    offsets[1:] = counts.cumsum(0)
    return flat, order, offsets, int(counts.max())


def segment_sum(y: Tensor, plan: tuple[Tensor, Tensor, Tensor, int], T: int, *, mean: bool,
                dtype: torch.dtype) -> Tensor:  # fmt: skip
    """Cluster rows ``y`` ``(B, H, k, w, D)`` back to positions ``(B, H, T, D)`` in ``dtype``:
    each position's sum over the clusters it appears in (the mean when ``mean``), zero where it
    appears in none. ``plan`` is :func:`scatter_plan`'s. Deterministic; not differentiable (the
    autograd function below calls it in both passes). Equals
    :func:`zoo.kernels.routing.scatter_sum` / ``scatter_mean`` up to fp32 rounding."""
    B, H, _, _, D = y.shape
    _, order, offsets, max_count = plan
    out = flash.empty((B, H, T, D), y, dtype)
    rows = 32
    _segment_sum[(triton.cdiv(B * H * T, rows),)](
        y.contiguous(), order, offsets, out, B * H * T, max_count, MEAN=mean, ROWS=rows, D=D
    )
    return out


class _ClusterAttention(torch.autograd.Function):
    """``(q, k, v, q_idx, k_idx)`` -> the outputs at their positions ``(B, H, T, D)``."""

    @staticmethod
    def forward(ctx, q, k, v, q_idx, k_idx, causal: bool, scale: float, block: int):
        B, H, T, D = q.shape
        n_clusters, w = q_idx.shape[2:]
        shared = k_idx.data_ptr() == q_idx.data_ptr()
        q, k, v = (x.contiguous() for x in (q, k, v))
        q_idx, k_idx = q_idx.contiguous(), k_idx.contiguous()
        y = flash.empty((B, H, n_clusters, w, D), q)
        lse = flash.empty((B, H, n_clusters, w), q, torch.float32)
        ctx.options = dict(
            CAUSAL=causal, DIAGONAL=causal and shared, BLOCK=block, D=D,
            PRECISION=precision(q.dtype),
        )  # fmt: skip
        grid = (triton.cdiv(w, block), B * H * n_clusters)
        _forward[grid](q, k, v, q_idx, k_idx, y, lse, T, w, n_clusters, scale * LOG2E,
                       **ctx.options, **launch_options(D, "routing.forward"))  # fmt: skip
        ctx.q_plan = scatter_plan(q_idx, T)
        ctx.k_plan = ctx.q_plan if shared else scatter_plan(k_idx, T)
        ctx.save_for_backward(q, k, v, q_idx, k_idx, y, lse)
        ctx.scale = scale
        return segment_sum(y, ctx.q_plan, T, mean=True, dtype=q.dtype)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, q_idx, k_idx, y, lse = ctx.saved_tensors
        B, H, T, D = q.shape
        n_clusters, w = q_idx.shape[2:]
        flat, _, offsets, _ = ctx.q_plan
        # the mean's backward: each slot gets its position's gradient over the position's count
        counts = (offsets[1:] - offsets[:-1]).clamp_(min=1)
        dy = (grad_out.reshape(-1, D).float() / counts[:, None])[flat]
        dy = dy.to(q.dtype).view(B, H, n_clusters, w, D)
        delta = (dy.float() * y.float()).sum(-1)  # (B, H, k, w)
        dq_c, dk_c, dv_c = (flash.empty((B, H, n_clusters, w, D), q, torch.float32) for _ in "qkv")
        grid = (triton.cdiv(w, ctx.options["BLOCK"]), B * H * n_clusters)
        args = (T, w, n_clusters, ctx.scale * LOG2E, ctx.scale)
        _backward_dq[grid](q, k, v, q_idx, k_idx, dy, lse, delta, dq_c, *args, **ctx.options,
                           **launch_options(D, "routing.dq"))  # fmt: skip
        _backward_dkdv[grid](q, k, v, q_idx, k_idx, dy, lse, delta, dk_c, dv_c, *args,
                             **ctx.options, **launch_options(D, "routing.dkdv"))  # fmt: skip
        return (
            segment_sum(dq_c, ctx.q_plan, T, mean=False, dtype=q.dtype),
            segment_sum(dk_c, ctx.k_plan, T, mean=False, dtype=k.dtype),
            segment_sum(dv_c, ctx.k_plan, T, mean=False, dtype=v.dtype),
            None, None, None, None, None,
        )  # fmt: skip


def routing_attention_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_idx: Tensor,
    k_idx: Tensor | None = None,
    *,
    causal: bool = True,
    scale: float | None = None,
    block: int = 64,
) -> Tensor:
    """Routing attention, with the same contract as
    :func:`zoo.kernels.routing.routing_attention_torch`. Returns ``(B, H, T, D)`` in ``q``'s
    dtype.

    ``block`` is the tile edge (a power of two, 16 or more on a GPU). The caller checks
    :func:`zoo.kernels.triton_flash.unsupported`. CPU tensors work only under ``TRITON_INTERPRET=1``.
    """
    D = q.shape[3]
    k, v = k.to(q.dtype), v.to(q.dtype)
    k_idx = q_idx if k_idx is None else k_idx
    return _ClusterAttention.apply(
        q, k, v, q_idx, k_idx, causal, D**-0.5 if scale is None else scale, block
    )
