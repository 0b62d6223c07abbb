"""Segment-summary attention on a CPU: the Sparse Transformer's fixed pattern as a few dense
attention problems on PyTorch's fused kernel, merged exactly by log-sum-exp.

The layout (Child et al. 2019, §4.3, the fixed pattern ``A1 ∪ A2``): positions fall into
segments of ``l``; query ``i`` attends causally to its own segment (``A1``) and to the ``c``
summary positions of every EARLIER segment (``A2`` outside its own segment; ``A2`` inside it is
part of ``A1``). With ``summary=None`` only the segment part is computed (``A1`` alone). With
``window`` instead of summaries, queries also see the previous segment's keys within ``window``
positions: sliding-window (local) attention, the Routing Transformer's local heads and the strided
pattern's ``A1``. :func:`run_window_attention` is the same sliding window on a sequence of runs
(causal routing's tokens sorted by cluster), each run padded to its own blocks so that no score
crosses a run.

How: the two key sets are disjoint, so the softmax over their union is the merge of two partial
softmaxes by their row log-sum-exp (the identity FlashAttention's tiles use):
``L = logaddexp(L1, L2)``, ``O = exp(L1 - L) O1 + exp(L2 - L) O2``. Each part is dense:

- the segment part is causal attention within each segment, one batched causal problem;
- the window part (``window``) is each segment against the one before it under one ``(l, l)``
  additive mask, the same for every segment;
- the summary part is, in the compacted summary keys, a strictly block-lower-triangular matrix
  (segment ``s`` sees the summaries of segments ``< s``). It is split into full rectangles by
  halving: at level ``d`` the second half of each of the ``2^d`` groups of segments sees the
  first half's summaries, with no mask. ``log2(segments)`` batched problems cover the triangle
  exactly.

Every part runs through ``_scaled_dot_product_flash_attention_for_cpu``, which also returns the
row log-sum-exp. The backward pass hands each part's backward kernel the MERGED output and
log-sum-exp: the gradient of a part's keys and values, and its share of the query gradient,
depend only on ``P = exp(S - L)`` and ``rowsum(dO * O)``, both of the union (FlashAttention's
backward, recomputing from ``L``). So forward and backward are exact and never hold more than
one part's tiles. Computed entries: ``n l / 2`` for the segments plus ``n^2 c / (2 l)`` for the
summaries, against ``n^2 / 2`` for dense causal attention.

Scores and softmax are fp32 (the inputs are upcast; fp64 stays fp64): on the CPUs this project
measured, PyTorch's fused kernel is slower in bf16 on short problems (see :mod:`zoo.kernels.sdpa`).

Shape legend: B batch, H heads, T positions, D head dim, l segment length, S segments (padded
to a power of two), c summary positions per segment.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["run_window_attention", "segment_attention"]


def segment_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    segment: int,
    summary: Tensor | None = None,
    *,
    window: int | None = None,
    scale: float | None = None,
) -> Tensor:
    """Causal attention within segments of ``segment`` positions, plus the summary positions of
    all earlier segments, or the previous segment's keys within a sliding window.

    Args:
        q: ``(B, H, T, D)`` CPU tensor, fp32, bf16, fp16 or fp64; ``T`` need not be a multiple
            of ``segment``.
        k: ``(B, H, T, D)``, the dtype of ``q``.
        v: ``(B, H, T, D)``, the dtype of ``q``.
        segment: ``l``, the segment length (the fixed pattern's stride).
        summary: int64 ``(H, c)`` (or ``(1, c)``, shared), the offsets ``0 <= r < l`` inside each
            segment of head ``h``'s summary positions, sorted; ``None`` for no summaries.
        window: ``w`` with ``l <= w <= l + 1``: query ``i`` also sees the previous segment's keys
            with ``i - j < w`` (with ``w = l``: ``local(l)``; ``w = l + 1``: strided ``A1`` of
            stride ``l``). Not with ``summary``.
        scale: score scale, default ``1 / sqrt(D)``.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``: for query ``i``, softmax over keys ``j <= i`` in
        ``i``'s segment and keys ``j`` in earlier segments with ``j mod l`` in ``summary[h]``
        (or with ``i - j < window``).

    Raises:
        ValueError: non-CPU tensors, mismatched shapes, a summary outside ``0..l-1``, or a
            window outside ``l..l+1`` or given with a summary.
    """
    B, H, T, D = q.shape
    if q.device.type != "cpu":
        raise ValueError(f"segment_attention runs on a CPU; got {q.device} tensors")
    if k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k, v must share (B, H, T): got {q.shape}, {k.shape}, {v.shape}")
    if summary is not None and (
        summary.dim() != 2
        or summary.shape[0] not in (1, H)
        or int(summary.min()) < 0
        or int(summary.max()) >= segment
    ):
        raise ValueError(
            f"summary must be int offsets (1 or {H}, c) in 0..{segment - 1}; got "
            f"{tuple(summary.shape)} {summary.tolist() if summary.numel() < 9 else ''}"
        )
    if window is not None and (summary is not None or not segment <= window <= segment + 1):
        raise ValueError(
            f"window must be in {segment}..{segment + 1} (the segment length or one more) and "
            f"cannot go with a summary; got window={window}"
            + (", summary given" if summary is not None else "")
        )
    scale = D**-0.5 if scale is None else scale
    return _SegmentAttention.apply(q, k, v, segment, summary, window, scale)


# --- the parts ------------------------------------------------------------------------------------
def _flash(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """PyTorch's fused CPU attention on ``(B, N, Tq, D)``: output and row log-sum-exp (fp32),
    under an optional additive ``mask`` (broadcastable to ``(B, N, Tq, Tk)``)."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=mask, scale=scale
    )
    return out, lse


def _flash_backward(do, q, k, v, out, lse, causal: bool, scale: float, mask=None):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        do, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale
    )


class _Layout:
    """Views for each part, in the ``(B, T, H, D)`` memory order that PyTorch's fused CPU kernel
    reads and writes (its outputs, log-sum-exps and gradients are laid out so): the segments, and
    per halving level the query half and the summary half of its rectangles. With the inputs
    from a fused QKV projection and ``T`` a power-of-two number of segments, no part copies its
    queries, keys, values or outputs."""

    def __init__(
        self, B: int, H: int, T: int, l: int, summary: Tensor | None, window: int | None
    ) -> None:
        self.B, self.H, self.T, self.l = B, H, T, l
        self.n_segments = math.ceil(T / l)
        self.S = self.n_segments  # whole segments; a power of two for the summaries' halving
        if summary is not None:
            self.S = 1 << max(0, (self.n_segments - 1).bit_length())
        self.summary, self.window = summary, window
        self.levels = []  # (rectangles per level R, kept M, segments per half)
        if summary is not None:
            size = self.S // 2
            while size >= 1:
                R = self.S // (2 * size)
                # rectangle m's queries start at segment (2m + 1) size: keep those before the end
                M = min(R, max(0, math.ceil((self.n_segments - size) / (2 * size))))
                if M:
                    self.levels.append((R, M, size))
                size //= 2

    def bthd(self, x: Tensor) -> Tensor:
        """``(B, H, T, D)`` -> ``(B, S l, H, D)``, fp32 or wider, zero-padded at the end (a view
        when no padding or cast is needed)."""
        x = x.transpose(1, 2).to(torch.promote_types(x.dtype, torch.float32))
        pad = self.S * self.l - self.T
        return F.pad(x, (0, 0, 0, 0, 0, pad)) if pad else x

    def segments(self, x: Tensor) -> Tensor:
        """``(B, S l, H, ...)`` -> ``(B S, H, l, ...)``, the kernel's ``(N, H, L, D)``."""
        return x.reshape(self.B * self.S, self.l, *x.shape[2:]).transpose(1, 2)

    def unsegment(self, x: Tensor) -> Tensor:
        """The kernel's ``(B S, H, l, ...)`` -> ``(B, S l, H, ...)``."""
        x = x.transpose(1, 2)
        return x.reshape(self.B, self.S * self.l, *x.shape[2:])

    def summaries(self, x: Tensor) -> Tensor:
        """``(B, S l, H, D)`` -> the summary positions ``(B, S c, H, D)`` (a copy)."""
        xs = x.view(self.B, self.S, self.l, self.H, -1)
        idx = self.summary.to(x.device)  # (1 or H, c)
        if idx.shape[0] == 1:
            g = xs[:, :, idx[0]]  # (B, S, c, H, D)
        else:
            g = torch.stack([xs[:, :, idx[h], h] for h in range(self.H)], 3)
        return g.reshape(self.B, -1, self.H, x.shape[-1])

    def later(self, x: Tensor) -> Tensor:
        """``(B, S l, H, ...)`` -> segments ``1 .. S-1`` as the kernel's ``(B (S-1), H, l, ...)``."""
        xs = x.view(self.B, self.S, self.l, *x.shape[2:])[:, 1:]
        return xs.reshape(self.B * (self.S - 1), self.l, *x.shape[2:]).transpose(1, 2)

    def earlier(self, x: Tensor) -> Tensor:
        """``(B, S l, H, ...)`` -> segments ``0 .. S-2`` as the kernel's ``(B (S-1), H, l, ...)``:
        at index ``s``, the segment before :meth:`later`'s ``s``."""
        xs = x.view(self.B, self.S, self.l, *x.shape[2:])[:, :-1]
        return xs.reshape(self.B * (self.S - 1), self.l, *x.shape[2:]).transpose(1, 2)

    def unlater(self, x: Tensor) -> Tensor:
        """The kernel's ``(B (S-1), H, l, ...)`` -> ``(B, (S-1) l, H, ...)``."""
        x = x.transpose(1, 2)
        return x.reshape(self.B, (self.S - 1) * self.l, *x.shape[2:])

    def window_mask(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The previous segment's additive ``(1, 1, l, l)`` mask (query ``i'``, key ``j'``
        offsets: ``l + i' - j' < window``) and the bool ``(l,)`` rows it leaves some key."""
        off = torch.arange(self.l)
        allowed = self.l + off[:, None] - off[None, :] < self.window
        mask = torch.zeros(self.l, self.l, dtype=dtype).masked_fill(~allowed, float("-inf"))
        return mask[None, None], allowed.any(-1)

    def add_summaries(self, into: Tensor, g: Tensor) -> None:
        """Add ``(B, S c, H, D)`` gradients at the summary positions of ``into`` ``(B, S l, H, D)``."""
        xs = into.view(self.B, self.S, self.l, self.H, -1)
        idx = self.summary.to(into.device)
        g = g.view(self.B, self.S, idx.shape[1], self.H, -1)
        if idx.shape[0] == 1:
            xs[:, :, idx[0]] += g
        else:
            for h in range(self.H):
                xs[:, :, idx[h], h] += g[:, :, :, h]

    def half(self, x: Tensor, level: tuple[int, int, int], which: int, per_segment: int) -> Tensor:
        """Level ``level``'s query half (``which=1``) or key half (``0``) of each kept rectangle, as
        a view ``(B, M, size * per_segment, H, ...)`` of ``x`` ``(B, S per_segment, H, ...)``."""
        R, M, size = level
        return x.view(self.B, R, 2, size * per_segment, *x.shape[2:])[:, :M, which]


def _kernel(x: Tensor) -> Tensor:
    """``(B, M, L, H, ...)`` -> the kernel's ``(B M, H, L, ...)`` (a view when ``M`` is all)."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]).transpose(1, 2)


def _unkernel(x: Tensor, B: int) -> Tensor:
    """The kernel's ``(B M, H, L, ...)`` -> ``(B, M, L, H, ...)``."""
    x = x.transpose(1, 2)
    return x.reshape(B, x.shape[0] // B, *x.shape[1:])


def _merge(out: Tensor, lse: Tensor, part_out: Tensor, part_lse: Tensor) -> None:
    """Merge a part's softmax ``(part_out, part_lse)`` into ``(out, lse)`` in place (views;
    ``out`` ``(..., D)``, ``lse`` the same without ``D``)."""
    new = torch.logaddexp(lse, part_lse)
    out.mul_(torch.exp(lse - new)[..., None]).add_(part_out * torch.exp(part_lse - new)[..., None])
    lse.copy_(new)


class _SegmentAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, l, summary, window, scale):
        with torch.autocast("cpu", enabled=False):
            B, H, T, D = q.shape
            lay = _Layout(B, H, T, l, summary, window)
            qt, kt, vt = (lay.bthd(x) for x in (q, k, v))  # (B, S l, H, D)
            out, lse = _flash(*(lay.segments(x) for x in (qt, kt, vt)), True, scale)
            out = lay.unsegment(out)  # (B, S l, H, D); every query sees itself: lse is finite
            lse = lay.unsegment(lse)  # (B, S l, H), a copy: merged into below
            if window is not None and lay.S > 1:  # segments 1.. attend to the one before
                mask, rows = lay.window_mask(qt.dtype)
                part_out, part_lse = _flash(
                    lay.later(qt), lay.earlier(kt), lay.earlier(vt), False, scale, mask
                )
                part_out, part_lse = lay.unlater(part_out), lay.unlater(part_lse)
                part_lse[:, ~rows.repeat(lay.S - 1)] = float("-inf")  # kernel: lse 0 if no key
                _merge(out[:, l:], lse[:, l:], part_out, part_lse)
            if lay.levels:
                ks, vs = lay.summaries(kt), lay.summaries(vt)  # (B, S c, H, D)
                c = ks.shape[1] // lay.S
                for level in lay.levels:
                    part_out, part_lse = _flash(
                        _kernel(lay.half(qt, level, 1, l)),
                        _kernel(lay.half(ks, level, 0, c)),
                        _kernel(lay.half(vs, level, 0, c)),
                        False,
                        scale,
                    )
                    _merge(
                        lay.half(out, level, 1, l),
                        lay.half(lse, level, 1, l),
                        _unkernel(part_out, B),
                        _unkernel(part_lse, B),
                    )
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.layout, ctx.scale = lay, scale
            return out[:, :T].transpose(1, 2).to(v.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        with torch.autocast("cpu", enabled=False):
            q, k, v, out, lse = ctx.saved_tensors
            lay, scale, l = ctx.layout, ctx.scale, ctx.layout.l
            B, H, T, _ = q.shape
            qt, kt, vt = (lay.bthd(x) for x in (q, k, v))
            do = lay.bthd(grad_out).to(out.dtype)
            dq, dk, dv = (
                lay.unsegment(g)
                for g in _flash_backward(
                    *(lay.segments(x) for x in (do, qt, kt, vt, out, lse)), True, scale
                )
            )  # (B, S l, H, D), views of the kernel's gradients
            if lay.window is not None and lay.S > 1:
                # segments 1.. against the one before. Segment 0 has no part here: giving it
                # zero keys instead made the kernel's exp(0 - lse) overflow where its rows' lse
                # is below -88, and inf * 0 key = NaN in dq (seen in training)
                mask, _ = lay.window_mask(qt.dtype)
                dq_p, dk_p, dv_p = (
                    lay.unlater(g)
                    for g in _flash_backward(
                        *(lay.later(x) for x in (do, qt)),
                        lay.earlier(kt),
                        lay.earlier(vt),
                        *(lay.later(x) for x in (out, lse)),
                        False,
                        scale,
                        mask,
                    )
                )
                dq[:, l:] += dq_p
                dk[:, :-l] += dk_p
                dv[:, :-l] += dv_p
            if lay.levels:
                ks, vs = lay.summaries(kt), lay.summaries(vt)
                c = ks.shape[1] // lay.S
                dks, dvs = torch.zeros_like(ks), torch.zeros_like(vs)
                for level in lay.levels:
                    dq_p, dk_p, dv_p = _flash_backward(
                        _kernel(lay.half(do, level, 1, l)),
                        _kernel(lay.half(qt, level, 1, l)),
                        _kernel(lay.half(ks, level, 0, c)),
                        _kernel(lay.half(vs, level, 0, c)),
                        _kernel(lay.half(out, level, 1, l)),
                        _kernel(lay.half(lse, level, 1, l)),
                        False,
                        scale,
                    )
                    lay.half(dq, level, 1, l).add_(_unkernel(dq_p, B))
                    lay.half(dks, level, 0, c).add_(_unkernel(dk_p, B))
                    lay.half(dvs, level, 0, c).add_(_unkernel(dv_p, B))
                lay.add_summaries(dk, dks)
                lay.add_summaries(dv, dvs)

            def back(g: Tensor, like: Tensor) -> Tensor:
                return g[:, :T].transpose(1, 2).to(like.dtype)

            return back(dq, q), back(dk, k), back(dv, v), None, None, None, None


# --- sliding windows inside runs of equal ids (causal routing's sorted sequence) -----------------
def run_window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    runs: Tensor,
    *,
    block: int = 64,
    scale: float | None = None,
) -> Tensor:
    """Causal sliding-window attention that never crosses a change of id: query ``i`` sees key
    ``j`` iff ``i - window < j <= i`` and ``runs[j] == runs[i]``, with every id's positions
    contiguous (``runs`` sorted along ``T``).

    This is the Routing Transformer's causal routing (Roy et al. 2020, §4.1, as the zoo runs it:
    tokens sorted by (cluster, position), each attending to its cluster's last ``window`` members)
    without computing the scores across cluster boundaries that a masked sliding window computes.
    Each run is padded to whole blocks of ``block`` positions, so every block belongs to one run.
    A block attends causally to itself, fully to the run's blocks that lie wholly inside the
    window, and under one ``(block, block)`` mask to the block the window's edge cuts. These are
    batched fused calls merged by log-sum-exp, forward and backward exact as in
    :func:`segment_attention`. Computed entries: about ``T block / 2`` plus ``block^2`` per pair
    of blocks of one run within the window, instead of ``2 T window``.

    Args:
        q: ``(B, H, T, D)`` CPU tensor, fp32, bf16, fp16 or fp64.
        k: ``(B, H, T, D)``, the dtype of ``q``.
        v: ``(B, H, T, D)``, the dtype of ``q``.
        window: ``W >= 1``, the most recent run members (itself included) a query sees.
        runs: ``(B, H, T)`` integer ids, non-decreasing along ``T``.
        block: the block edge, capped at ``window``. Smaller blocks waste less padding on short
            runs, larger ones make fewer, bigger fused problems (64 was the fastest of 16, 32 and
            64 for causal routing's window of 128 at T = 1,024 and 4,096 on a 2-core CPU).
        scale: score scale, default ``1 / sqrt(D)``.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``.

    Raises:
        ValueError: non-CPU tensors, mismatched shapes, ``runs`` of the wrong shape or not
            sorted, or a window or block below 1.
    """
    B, H, T, D = q.shape
    if q.device.type != "cpu":
        raise ValueError(f"run_window_attention runs on a CPU; got {q.device} tensors")
    if k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k, v must share (B, H, T): got {q.shape}, {k.shape}, {v.shape}")
    if runs.shape != (B, H, T):
        raise ValueError(f"runs must be (B, H, T) = {(B, H, T)}; got {tuple(runs.shape)}")
    if T > 1 and bool((runs.diff(dim=-1) < 0).any()):
        raise ValueError("runs must be non-decreasing along T (sort the sequence by run id first)")
    if window < 1 or block < 1:
        raise ValueError(f"window and block must be >= 1; got window={window}, block={block}")
    scale = D**-0.5 if scale is None else scale
    plan = _RunBlocks(runs, min(block, window), window)  # a block's causal part: inside W
    return _RunWindowAttention.apply(q, k, v, plan, scale)


class _RunBlocks:
    """Where each position goes when every run is padded to whole blocks, over all ``(B, H)``
    rows at once: ``dest`` ``(B H T,)`` rows of the padded ``(N block, D)`` buffer, and per
    offset ``d >= 1`` the blocks ``s`` whose run also holds block ``s - d`` within the window,
    with the ``(block, block)`` additive mask of that offset (``None``: fully inside)."""

    def __init__(self, runs: Tensor, b: int, window: int) -> None:
        T = runs.shape[-1]
        flat = runs.reshape(-1, T)
        starts = torch.ones_like(flat, dtype=torch.bool)
        starts[:, 1:] = flat[:, 1:] != flat[:, :-1]
        starts = starts.reshape(-1)
        first = starts.nonzero().squeeze(1)  # (runs,) flat index of each run's first position
        lengths = torch.diff(first, append=first.new_tensor([starts.numel()]))
        n_blocks = (lengths + b - 1) // b
        offset = torch.cumsum(n_blocks, 0) - n_blocks  # each run's first block
        run = torch.cumsum(starts, 0) - 1  # (B H T,) the run of each position
        rank = torch.arange(starts.numel()) - first[run]
        self.dest = offset[run] * b + rank
        self.n = int(n_blocks.sum())
        self.b = b
        in_run = torch.arange(self.n) - torch.repeat_interleave(offset, n_blocks)  # block rank
        self.pairs = []  # (d, s, additive mask or None, rows with some allowed key)
        off = torch.arange(b)
        for d in range(1, (window + b - 2) // b + 1):  # some j with d b + i - j < window
            s = (in_run >= d).nonzero().squeeze(1)
            if not len(s):
                break  # ranks only shrink as d grows
            allowed = d * b + off[:, None] - off[None, :] < window
            mask = None
            if not allowed.all():
                mask = torch.zeros(b, b).masked_fill(~allowed, float("-inf"))[None, None]
            self.pairs.append((d, s, mask, allowed.any(-1)))


class _RunWindowAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan, scale):
        with torch.autocast("cpu", enabled=False):
            B, H, T, D = q.shape
            dtype = torch.promote_types(q.dtype, torch.float32)
            qp, kp, vp = (_pad_runs(x, plan, dtype) for x in (q, k, v))  # (N, 1, b, D)
            out, lse = _flash(qp, kp, vp, True, scale)  # (N, 1, b, D), (N, 1, b)
            for d, s, mask, rows in plan.pairs:
                mask = None if mask is None else mask.to(dtype)
                part_out, part_lse = _flash(
                    qp.index_select(0, s), *(x.index_select(0, s - d) for x in (kp, vp)),
                    False, scale, mask,
                )  # fmt: skip
                part_lse[:, :, ~rows] = float("-inf")  # the kernel: lse 0 where no key
                o, l_ = out.index_select(0, s), lse.index_select(0, s)
                _merge(o, l_, part_out, part_lse)
                out.index_copy_(0, s, o)
                lse.index_copy_(0, s, l_)
            ctx.save_for_backward(qp, kp, vp, out, lse)
            ctx.plan, ctx.scale = plan, scale
            ctx.like = [(x.shape, x.dtype) for x in (q, k, v)]
            y = out.reshape(-1, out.shape[-1]).index_select(0, plan.dest)
            return y.view(B, H, T, -1).to(v.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        with torch.autocast("cpu", enabled=False):
            qp, kp, vp, out, lse = ctx.saved_tensors
            plan, scale = ctx.plan, ctx.scale
            do = _pad_runs(grad_out, plan, out.dtype)
            dq, dk, dv = (
                g.contiguous() for g in _flash_backward(do, qp, kp, vp, out, lse, True, scale)
            )
            for d, s, mask, _ in plan.pairs:
                mask = None if mask is None else mask.to(out.dtype)
                at_s = (x.index_select(0, s) for x in (do, qp))
                at_key = (x.index_select(0, s - d) for x in (kp, vp))
                dq_p, dk_p, dv_p = _flash_backward(
                    *at_s, *at_key, out.index_select(0, s), lse.index_select(0, s),
                    False, scale, mask,
                )  # fmt: skip
                dq.index_add_(0, s, dq_p)
                dk.index_add_(0, s - d, dk_p)
                dv.index_add_(0, s - d, dv_p)

            def back(g: Tensor, like: tuple[torch.Size, torch.dtype]) -> Tensor:
                g = g.reshape(-1, g.shape[-1]).index_select(0, plan.dest)
                return g.view(like[0]).to(like[1])

            grads = zip((dq, dk, dv), ctx.like, strict=True)
            return (*(back(g, like) for g, like in grads), None, None)


def _pad_runs(x: Tensor, plan: _RunBlocks, dtype: torch.dtype) -> Tensor:
    """``(B, H, T, D)`` -> the padded blocks ``(N, 1, b, D)`` (zeros in the padding)."""
    D = x.shape[-1]
    padded = x.new_zeros(plan.n * plan.b, D, dtype=dtype)
    padded.index_copy_(0, plan.dest, x.reshape(-1, D).to(dtype))
    return padded.view(plan.n, 1, plan.b, D)
