"""Routing attention in Triton: dense attention inside each cluster of gathered tokens.

One program handles one ``(query tile, batch x head x cluster)``. It reads its rows through the
cluster's index list, so ``q, k, v`` are gathered straight from ``(B, H, T, D)`` and nothing is
copied first. The causal mask compares the tokens' original positions. With shared, sorted
query and key indices that is the lower triangle in cluster order, so a tile stops at the
diagonal. Otherwise every key tile is visited and the positions decide.

The cluster kernels work on per-cluster rows ``(B, H, k, w, D)``. Going back to positions (the
mean over the clusters a position appears in, and in the backward pass the sum of its
per-cluster gradients) is a fourth kernel, :func:`segment_sum`: the cluster slots are sorted by
position once (:func:`scatter_plan`, on the device, with no host sync), and each position adds
up its own slots in cluster order. Nothing is written twice, so it needs no atomics and is
deterministic; PyTorch's ``index_add`` on CUDA uses atomics, and on an H200 it took 2.5 times
as long as the cluster kernel's forward pass (docs/bench/kernel_tuning_gpu_h200.md). The
backward pass starts with a fifth, :func:`slot_gradients`: the mean's backward and ``delta``
in one pass. Source: Roy et al. 2020, Algorithm 1 lines 19-27. The tile steps are
FlashAttention-2's (:mod:`zoo.kernels.triton_flash`); tiles wholly below the diagonal and inside
the cluster skip the mask.

Import this module only where Triton is present. Callers use
:func:`zoo.kernels.routing_attention`, which dispatches here for CUDA tensors.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor
from zoo.kernels.routing import flat_positions
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

__all__ = [
    "ScatterPlan",
    "routing_attention_triton",
    "scatter_plan",
    "segment_sum",
    "slot_gradients",
]


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
def _partial(n0, m0, w, CAUSAL: tl.constexpr, DIAGONAL: tl.constexpr, BLOCK: tl.constexpr):
    """Whether the key tile at cluster row ``n0`` needs a mask against the query tile at
    ``m0``: it runs past ``w``, or some of its keys may come after a query. With shared, sorted
    indices (``DIAGONAL``) that is only the tile on the diagonal; otherwise every causal tile."""
    need = n0 + BLOCK > w
    if CAUSAL:
        if DIAGONAL:
            need = need | (n0 + BLOCK > m0)
        else:
            need = need | (n0 >= 0)
    return need


@triton.jit
def _allowed(q_pos, k_pos, offs_n, w, CAUSAL: tl.constexpr, TRANSPOSED: tl.constexpr):
    """``(M, N)`` (``(N, M)`` when ``TRANSPOSED``): the key rows ``offs_n`` inside the
    cluster, and (``CAUSAL``) at positions no later than the queries'."""
    if TRANSPOSED:
        allowed = (offs_n < w)[:, None] & (q_pos >= 0)[None, :]
        if CAUSAL:
            allowed = allowed & (k_pos[:, None] <= q_pos[None, :])
    else:
        allowed = (q_pos >= 0)[:, None] & (offs_n < w)[None, :]
        if CAUSAL:
            allowed = allowed & (q_pos[:, None] >= k_pos[None, :])
    return allowed


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
        s = scores(q, k, qk_scale, PRECISION)
        if _partial(n0, mt * BLOCK, w, CAUSAL, DIAGONAL, BLOCK):
            s = tl.where(_allowed(q_pos, k_pos, offs_n, w, CAUSAL, False), s, float("-inf"))
        m_i, l_i, acc = softmax_step(s, m_i, l_i, acc, v, PRECISION)
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
        s = scores(q, k, qk_scale, PRECISION)
        if _partial(n0, mt * BLOCK, w, CAUSAL, DIAGONAL, BLOCK):
            s = tl.where(_allowed(q_pos, k_pos, offs_n, w, CAUSAL, False), s, float("-inf"))
        dq = dq_step(s, do, lse, delta, k, v, dq, PRECISION)
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
        s_t = scores(k, q, qk_scale, PRECISION)
        # query rows past w need no mask: they hold zeros and lse = +inf, so they add nothing
        if _partial(nt * BLOCK, m0, w, CAUSAL, DIAGONAL, BLOCK):
            s_t = tl.where(_allowed(q_pos, k_pos, offs_n, w, CAUSAL, True), s_t, float("-inf"))
        dk, dv = dkdv_step(s_t, q, do, lse, delta, v, dk, dv, PRECISION)
    d = tl.arange(0, D)
    rows = cluster * D + offs_n[:, None] * D + d[None, :]
    inside_n = (offs_n < w)[:, None]
    tl.store(DK + rows, dk * scale, mask=inside_n)
    tl.store(DV + rows, dv, mask=inside_n)


SEGMENT_ROWS = 32  # positions per program of :func:`segment_sum`


@triton.jit
def _segment_sum(
    Y, ORDER, OFFSETS, BOUNDS, OUT, n_rows,
    MEAN: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr,
):  # fmt: skip
    """Rows ``OUT[r] = sum of Y[ORDER[OFFSETS[r]:OFFSETS[r + 1]]]`` (divided by the count, at
    least 1, when ``MEAN``), ``ROWS`` rows per program, accumulated in fp32. ``BOUNDS[program]``
    is the largest count among the program's rows: the loop's bound, read on the device (a bound
    from ``tl.max`` of the counts did not compile in Triton 3.6, and one read on the host
    synchronises)."""
    program = tl.program_id(0)
    rows = program * ROWS + tl.arange(0, ROWS)
    inside = rows < n_rows
    start = tl.load(OFFSETS + rows, mask=inside, other=0)
    count = tl.load(OFFSETS + rows + 1, mask=inside, other=0) - start
    d = tl.arange(0, D)
    acc = tl.zeros((ROWS, D), tl.float32)
    for j in range(0, tl.load(BOUNDS + program)):
        has = j < count
        slot = tl.load(ORDER + start + j, mask=has, other=0).to(tl.int64)
        acc += tl.load(Y + slot[:, None] * D + d[None, :], mask=has[:, None], other=0.0).to(
            tl.float32
        )
    if MEAN:
        acc = acc / tl.maximum(count, 1).to(tl.float32)[:, None]
    tl.store(OUT + rows.to(tl.int64)[:, None] * D + d[None, :], acc.to(OUT.dtype.element_ty),
             mask=inside[:, None])  # fmt: skip


@triton.jit
def _slot_gradients(
    GRAD, FLAT, OFFSETS, Y, DY, DELTA, n_slots, ROWS: tl.constexpr, D: tl.constexpr,
):  # fmt: skip
    """The mean's backward and FlashAttention's ``delta`` in one pass over the cluster slots:
    ``DY[s] = GRAD[FLAT[s]] / count`` (rounded to ``DY``'s dtype) and
    ``DELTA[s] = rowsum(DY[s] * Y[s])`` in fp32."""
    slots = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    inside = slots < n_slots
    pos = tl.load(FLAT + slots, mask=inside, other=0)
    count = tl.load(OFFSETS + pos + 1, mask=inside, other=1) - tl.load(
        OFFSETS + pos, mask=inside, other=0
    )
    d = tl.arange(0, D)
    grad = tl.load(GRAD + pos.to(tl.int64)[:, None] * D + d[None, :], mask=inside[:, None],
                   other=0.0).to(tl.float32)  # fmt: skip
    dy = (grad / tl.maximum(count, 1).to(tl.float32)[:, None]).to(DY.dtype.element_ty)
    rows = slots.to(tl.int64)[:, None] * D + d[None, :]
    y = tl.load(Y + rows, mask=inside[:, None], other=0.0).to(tl.float32)
    tl.store(DY + rows, dy, mask=inside[:, None])
    tl.store(DELTA + slots, tl.sum(dy.to(tl.float32) * y, 1), mask=inside)


class ScatterPlan(NamedTuple):
    """Where the cluster slots of ``idx`` ``(B, H, k, w)`` go among the ``B H T`` positions,
    for :func:`segment_sum`; all int32 and on ``idx``'s device.

    - ``flat`` ``(B H k w,)``: each slot's flat position.
    - ``order`` ``(B H k w,)``: the slots sorted by position, stably, so each position's slots
      stay in cluster order.
    - ``offsets`` ``(B H T + 1,)``: each position's range in ``order`` (a CSR).
    - ``bounds`` ``(ceil(B H T / SEGMENT_ROWS),)``: the most slots of any position in each
      program's rows.
    """

    flat: Tensor
    order: Tensor
    offsets: Tensor
    bounds: Tensor


def scatter_plan(idx: Tensor, T: int) -> ScatterPlan:
    """The :class:`ScatterPlan` of the clusters ``idx`` ``(B, H, k, w)`` over ``T`` positions.
    A sort, a binary search and a max, all on the device: nothing synchronises with the host.
    Raises ``ValueError`` past 2**31 - 1 positions or slots (the int32 indices)."""
    B, H = idx.shape[:2]
    n = B * H * T
    if max(n, idx.numel()) >= 2**31:
        raise ValueError(f"routing over {n:,} positions and {idx.numel():,} cluster slots "
                         "exceeds the kernel's int32 indices; use a smaller batch")  # fmt: skip
    flat = flat_positions(idx, T).to(torch.int32)
    keys, order = torch.sort(flat, stable=True)
    rows = torch.arange(n + 1, device=idx.device, dtype=torch.int32)
    offsets = torch.searchsorted(keys, rows, out_int32=True)  # slots before each position
    counts = offsets.diff()
    bounds = F.pad(counts, (0, -n % SEGMENT_ROWS)).view(-1, SEGMENT_ROWS).amax(1)
    return ScatterPlan(flat, order.to(torch.int32), offsets, bounds)


def segment_sum(y: Tensor, plan: ScatterPlan, T: int, *, mean: bool,
                dtype: torch.dtype) -> Tensor:  # fmt: skip
    """Cluster rows ``y`` ``(B, H, k, w, D)`` back to positions ``(B, H, T, D)`` in ``dtype``:
    each position's sum over the clusters it appears in (the mean when ``mean``), zero where it
    appears in none. ``plan`` is :func:`scatter_plan`'s. Deterministic; not differentiable (the
    autograd function below calls it in both passes). Equals
    :func:`zoo.kernels.routing.scatter_sum` / ``scatter_mean`` up to fp32 rounding."""
    B, H, _, _, D = y.shape
    out = flash.empty((B, H, T, D), y, dtype)
    _segment_sum[(plan.bounds.numel(),)](
        y.contiguous(), plan.order, plan.offsets, plan.bounds, out, B * H * T, MEAN=mean,
        ROWS=SEGMENT_ROWS, D=D,
    )  # fmt: skip
    return out


def slot_gradients(grad_out: Tensor, y: Tensor, plan: ScatterPlan) -> tuple[Tensor, Tensor]:
    """The gradient reaching each cluster slot through the mean, ``dy`` ``(B, H, k, w, D)`` in
    ``y``'s dtype, and ``delta = rowsum(dy * y)`` ``(B, H, k, w)`` fp32, from the positions'
    gradient ``grad_out`` ``(B, H, T, D)`` and the cluster outputs ``y``."""
    D = y.shape[-1]
    dy = flash.empty(y.shape, y)
    delta = flash.empty(y.shape[:-1], y, torch.float32)
    rows = 64
    _slot_gradients[(triton.cdiv(plan.flat.numel(), rows),)](
        grad_out.contiguous(), plan.flat, plan.offsets, y, dy, delta, plan.flat.numel(),
        ROWS=rows, D=D,
    )  # fmt: skip
    return dy, delta


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
        dy, delta = slot_gradients(grad_out, y, ctx.q_plan)
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
