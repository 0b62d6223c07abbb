"""The attention engine: every family's attention is one call to :func:`attend`.

``attend(q, k, v, pattern)`` computes ``mapping(q k^T / sqrt(d)) v`` with query ``i`` seeing key
``j`` iff ``pattern.mask_mod(h, i, j)`` (and the key is not padding). Patterns are pure
descriptions (:mod:`zoo.attention.patterns`); how one is computed is decided here, by
:func:`route`, from its ``kind`` and parameters, and every route is exact (equal to the dense
masked computation, :func:`masked_attention`, up to float rounding):

==============  ================================================================================
``dense``       no pattern (encoder, cross attention) or ``causal``: PyTorch's fused SDPA
``columns``     strided ``A2`` (``(i - j) mod l == 0``): dense causal attention down each column
                of the ``(T / l, l)`` grid (Child et al. 2019, §5.5, "transposing the matrix")
``local``       ``local(window)``: blocks of ``window`` queries against their block and the one
                before, as SDPA heads; also takes segment ids and Shaw relative positions. On a
                CPU also strided ``A1``, which is ``local(stride + 1)``; there, without segment
                ids or relative positions, each block's causal part and its look at the block
                before are two fused calls merged by log-sum-exp
                (:func:`zoo.kernels.segment_attention` with a ``window``); with sorted segment
                ids (causal routing's sequence sorted by cluster), each run of one id padded to
                its own blocks, so no scores cross a run (:func:`zoo.kernels.run_window_attention`)
``segments``    on a CPU, the fixed pattern (``A1 ∪ A2`` or ``A1``): causal attention within each
                segment of ``stride`` plus dense rectangles onto earlier segments' summaries,
                merged by log-sum-exp (:func:`zoo.kernels.segment_attention`)
``gathered``    ``local_1d`` / ``local_2d``: each query block gathers its own memory (Parmar et
                al. 2018, §3.2) and runs densely (:mod:`zoo.attention.gathered`)
``block_sparse`` any other pattern (and strided ``A1`` and fixed off the CPU):
                :func:`zoo.kernels.block_sparse_attention` over its block layout (Triton on
                CUDA, its PyTorch path elsewhere); under ``ZOO_ATTENTION_BACKEND=flex`` every
                pattern over a whole sequence without segment ids or relative positions comes
                here, and FlexAttention runs it as a ``BlockMask`` (:mod:`zoo.kernels.flex`)
``clusters``    content routing's clusters (``clusters=(q_idx, k_idx)``, Roy et al. 2020, Algorithm
                1): causal attention among each cluster's members, outputs averaged over the
                clusters a token joined (:func:`zoo.kernels.routing_attention`)
``decode``      new queries after ``past`` cached positions under a pattern: only the keys the
                pattern selects are gathered, then the masked path
``materialised``  a mapping other than softmax (:mod:`zoo.attention.mappings`): the masked path
==============  ================================================================================

:func:`masked_attention` is the one place where a score matrix is materialised (fp32, autocast off,
empty rows -> zeros); the ``decode`` and ``materialised`` routes, Shaw relative positions and the
routing layer's decode step use it.

Precision on a CPU: the routes of many short problems (``local``, ``gathered``, ``columns`` of
stride > 1) run SDPA in fp32 even under autocast (:func:`zoo.kernels.sdpa`, faster there); the one
long ``dense`` problem is left to autocast.

Shape legend: B batch, H heads, T new positions, S keys (cached + new), D head dim, W window, nb
blocks. ``...`` any batch dims.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.gathered import GatheredPlan, gathered_attention
from zoo.attention.mappings import MappingName, map_scores
from zoo.attention.patterns import AttentionPattern
from zoo.kernels import (
    BlockSparsePlan,
    block_sparse_attention,
    requested,
    routing_attention,
    run_window_attention,
    sdpa,
    segment_attention,
)
from zoo.kernels.softmax import masked_softmax

if TYPE_CHECKING:
    from zoo.attention.relative import RelativePositions

__all__ = [
    "Route",
    "attend",
    "column_attention",
    "local_attention",
    "masked_attention",
    "route",
]

Route = Literal[
    "dense",
    "columns",
    "local",
    "segments",
    "gathered",
    "block_sparse",
    "clusters",
    "decode",
    "materialised",
]
MAX_PLANS = 32  # block-sparse / gathered plans kept (one per pattern, length, heads, device)
_PLANS: OrderedDict[tuple, BlockSparsePlan | GatheredPlan] = OrderedDict()


# --- the planner ---------------------------------------------------------------------------------
def route(
    pattern: AttentionPattern | None,
    *,
    past: int = 0,
    mapping: MappingName = "softmax",
    device_type: str = "cpu",
    flex: bool = False,
) -> Route:
    """The route :func:`attend` takes for ``pattern`` (``None``: every key) after ``past`` cached
    positions, with ``mapping``, for tensors on ``device_type`` (``"cpu"``, ``"cuda"``, ...).
    ``flex``: FlexAttention is requested (``ZOO_ATTENTION_BACKEND=flex``), so every pattern over
    a whole sequence takes the block-sparse op, which runs it as a ``BlockMask``."""
    if mapping != "softmax":
        return "materialised"
    if pattern is None or pattern.kind == "causal":
        return "dense"
    if past:
        return "decode"
    if flex:
        return "block_sparse"
    if pattern.kind == "strided" and pattern.param("component") == 2:
        return "columns"
    if pattern.kind == "local":
        return "local"
    if pattern.kind in ("local_1d", "local_2d"):
        return "gathered"
    if device_type == "cpu" and pattern.param("component") != 2:
        if pattern.kind == "strided" and pattern.param("component") == 1:
            return "local"  # A1 is local(stride + 1)
        if pattern.kind == "fixed":
            return "segments"
    return "block_sparse"


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pattern: AttentionPattern | None = None,
    *,
    past: int = 0,
    key_padding_mask: Tensor | None = None,
    mapping: MappingName = "softmax",
    dropout_p: float = 0.0,
    block_size: int = 64,
    segments: Tensor | None = None,
    positions: Tensor | None = None,
    relative: RelativePositions | None = None,
    clusters: tuple[Tensor, Tensor | None] | None = None,
) -> Tensor:
    """Attention of ``q`` to ``k, v`` under ``pattern``, by the route :func:`route` picks, or
    within ``clusters``.

    Args:
        q: ``(B, H, T, D)``, the queries at positions ``past .. past + T - 1``.
        k: ``(B, H, S, D)``, keys at positions ``0 .. S - 1`` (``S = past + T`` for
            self-attention with a cache; any ``S`` for cross attention, ``pattern=None``).
        v: ``(B, H, S, D)``, the values of those positions.
        pattern: who attends to whom (``None``: everyone to every key, bidirectional); a
            ``per_head`` pattern's head index counts within these ``H`` heads.
        past: cached positions before the queries.
        key_padding_mask: ``(B, S)`` bool, True at real keys (``dense`` and ``materialised``
            routes). A query with no visible key gets zeros.
        mapping: scores to probabilities (:mod:`zoo.attention.mappings`); not softmax means the
            ``materialised`` route.
        dropout_p: dropout on the probabilities (``dense`` route only; the caller passes 0 in
            eval mode).
        block_size: block edge of the block-sparse layout.
        segments: for ``local``: per-position segment ids ``(B, H, T)`` (attend only within a
            segment; see :func:`local_attention`).
        positions: for ``local``: the positions relative distances count from.
        relative: for ``local``: Shaw relative positions.
        clusters: ``(q_idx, k_idx)``, int64 ``(B, H, k, w)`` sorted positions of each cluster's
            queries and keys (``k_idx`` ``None``: the same tokens), instead of a pattern: the
            ``clusters`` route (content routing's top-``w`` clusters).

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``.

    Raises:
        ValueError: an argument the chosen route cannot honour (dropout, padding or segments on a
            route that has none), so nothing is silently ignored.
    """
    if clusters is not None:
        if pattern is not None or past or mapping != "softmax" or dropout_p:
            raise ValueError("clusters take no pattern, cache, other mapping or dropout")
        return routing_attention(q, k, v, *clusters)
    flex = segments is None and relative is None and positions is None and requested() == "flex"
    r = route(pattern, past=past, mapping=mapping, device_type=q.device.type, flex=flex)
    if dropout_p and r != "dense":
        raise ValueError(f"attention dropout is supported on the dense route only, not {r!r}")
    if key_padding_mask is not None and r not in ("dense", "materialised"):
        raise ValueError(f"key_padding_mask is not supported on the {r!r} route")
    if (segments is not None or relative is not None) and r != "local":
        raise ValueError(f"segments and relative positions need the local route, not {r!r}")
    if r == "dense":
        return dense_attention(q, k, v, causal=pattern is not None, past=past,
                               key_padding_mask=key_padding_mask, dropout_p=dropout_p)  # fmt: skip
    if r == "materialised":
        allowed = _allowed(pattern, q.shape[1], past, q.shape[2], k.shape[2], q.device)
        if key_padding_mask is not None:
            allowed = allowed & key_padding_mask[:, None, None, :]
        return masked_attention(q, k, v, allowed, mapping=mapping)
    assert pattern is not None
    if r == "decode":
        return decode_attention(q, k, v, pattern, past)
    if r == "columns":
        return column_attention(q, k, v, pattern.param("stride"))
    if r == "local":
        window = pattern.param("window") or pattern.param("stride") + 1  # strided A1: i - j <= l
        if pattern.param("exclude_self"):  # the strictly earlier window: the reference path
            return local_attention(q, k, v, window, segments=segments, positions=positions,
                                   relative=relative, exclude_self=True)  # fmt: skip
        if q.device.type == "cpu" and segments is None and relative is None:
            # segments of the window (of the stride for A1) and the one before, merged
            return segment_attention(q, k, v, pattern.param("stride") or window, window=window)
        if q.device.type == "cpu" and relative is None and _sorted(segments):
            # runs of equal ids (a sequence sorted by cluster): each run's own blocks, merged
            return run_window_attention(q, k, v, window, segments)
        return local_attention(q, k, v, window, segments=segments,
                               positions=positions, relative=relative)  # fmt: skip
    if r == "segments":
        return segment_attention(q, k, v, pattern.param("stride"), _summary(pattern, q.shape[1]))
    plan = _plan(pattern, q.shape[2], q.shape[1], block_size, q.device, gathered=r == "gathered")
    if isinstance(plan, GatheredPlan):
        return gathered_attention(q, k, v, plan)
    return block_sparse_attention(q, k, v, plan)


def _sorted(segments: Tensor | None) -> bool:
    """Whether per-position ids ``(B, H, T)`` are non-decreasing along ``T`` (each id one run)."""
    return segments is not None and bool((segments.diff(dim=-1) >= 0).all())


def _summary(pattern: AttentionPattern, n_heads: int) -> Tensor | None:
    """The fixed pattern's summary offsets ``(1 or H, c)`` inside a segment, read off the pattern
    itself (which keys of segment 0 the last query of segment 1 sees); ``None`` for ``A1``."""
    l = pattern.param("stride")
    heads = torch.arange(n_heads if pattern.per_head else 1)[:, None]
    seen = pattern.mask_mod(heads, torch.tensor(2 * l - 1), torch.arange(l)[None])  # (H, l)
    seen = torch.broadcast_to(seen, (heads.shape[0], l))
    if not seen.any():
        return None
    return seen.nonzero()[:, 1].view(heads.shape[0], -1)


def _allowed(
    pattern: AttentionPattern | None, n_heads: int, past: int, T: int, S: int, device
) -> Tensor:
    """``pattern``'s mask for queries ``past..past+T-1`` and keys ``0..S-1``: bool, broadcastable
    to ``(1, H, T, S)`` (all True without a pattern)."""
    if pattern is None:
        return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)
    heads = torch.arange(n_heads if pattern.per_head else 1, device=device)[:, None, None]
    rows = torch.arange(past, past + T, device=device)[:, None]
    m = pattern.mask_mod(heads, rows, torch.arange(S, device=device)[None, :])
    return torch.broadcast_to(m, (heads.shape[0], T, S))[None]


def _plan(
    pattern: AttentionPattern,
    T: int,
    n_heads: int,
    block_size: int,
    device: torch.device,
    *,
    gathered: bool = False,
) -> BlockSparsePlan | GatheredPlan:
    """The plan of ``pattern`` at length ``T`` (``gathered``: the Image Transformer patterns'
    gathered plan, else a block-sparse one), built once (the ``MAX_PLANS`` most recently used are
    kept: prefills of many prompt lengths would otherwise pile up)."""
    key = (pattern, T, n_heads if pattern.per_head else 1, block_size, str(device), gathered)
    if key in _PLANS:
        _PLANS.move_to_end(key)
        return _PLANS[key]
    if gathered:
        plan: BlockSparsePlan | GatheredPlan = GatheredPlan.build(pattern, T, device)
    else:
        layout = pattern.layout(T, block_size, n_heads).to(device)
        plan = BlockSparsePlan(layout, block_size, T, mask_mod=pattern.mask_mod)
    _PLANS[key] = plan
    while len(_PLANS) > MAX_PLANS:
        _PLANS.popitem(last=False)
    return plan


# --- the masked path -----------------------------------------------------------------------------
def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor,
    *,
    scale: float | None = None,
    mapping: MappingName = "softmax",
    upper: Tensor | float | None = None,
    lam: float = 0.1,
    relative: RelativePositions | None = None,
    distance: Tensor | None = None,
    return_weights: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Attention with the score matrix materialised, under a boolean mask, in fp32 (fp64 for
    fp64 inputs):

        s = (q k^T [+ q . a^K_{i-j}]) * scale,  p = mapping(s, -inf where not allowed),
        y = p v [+ sum_j p_ij a^V_{i-j}]

    Args:
        q: ``(..., Lq, D)``; k, v: ``(..., Lk, D)`` (``v`` may have another last dim).
        allowed: bool, broadcastable to ``(..., Lq, Lk)``: which keys each query may attend to.
        scale: multiplies the scores (default ``D ** -0.5``, Vaswani et al. 2017 §3.2.1).
        mapping: scores to probabilities (:func:`zoo.attention.mappings.map_scores`), with its
            ``upper`` (csoftmax / csparsemax) and ``lam`` (fusedmax).
        relative: Shaw et al. relative positions; then ``distance`` (int64 ``i - j``,
            broadcastable to ``(..., Lq, Lk)``, read only where allowed) selects their terms.
        return_weights: also return the probabilities ``(..., Lq, Lk)`` in the computing dtype.

    Returns:
        ``(..., Lq, Dv)`` in the dtype of ``v`` (and the weights). A query with no allowed key gets
        zeros, not NaN.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    wide = torch.promote_types(q.dtype, torch.float32)
    with torch.autocast(q.device.type, enabled=False):
        qf = q.to(wide)
        s = qf @ k.to(wide).transpose(-1, -2)  # (..., Lq, Lk)
        if relative is not None:
            assert distance is not None, "relative positions need the distances"
            s, dist = relative.add_scores(qf, s, distance)
        s = s * scale
        if mapping == "softmax":
            p = masked_softmax(s, allowed)
        else:
            p = map_scores(s.masked_fill(~allowed, float("-inf")), mapping, upper=upper, lam=lam)
        out = p @ v.to(p.dtype)
        if relative is not None:
            out = out + relative.values_of(p, dist)
    out = out.to(v.dtype)
    return (out, p) if return_weights else out


# --- the routes ----------------------------------------------------------------------------------
def dense_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    past: int = 0,
    key_padding_mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """SDPA over every key (``causal``: keys ``j <= past + i``), padding masked; rows with no
    visible key give zeros (SDPA would give NaN)."""
    if causal and not past and key_padding_mask is None:
        if q.device.type == "cpu" and q.shape[-1] <= 32:  # fp32 is faster there: zoo.kernels.sdpa
            return sdpa(q, k, v, dropout_p=dropout_p, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    T, S = q.shape[2], k.shape[2]
    mask = None
    if causal:  # query i (absolute position past + i) sees keys j <= past + i
        rows = torch.arange(past, past + T, device=q.device)[:, None]
        mask = torch.arange(S, device=q.device)[None, :] <= rows  # (T, S)
    if key_padding_mask is not None:
        keep = key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
        mask = keep if mask is None else mask & keep
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    if key_padding_mask is not None:
        y = y.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return y


def column_attention(q: Tensor, k: Tensor, v: Tensor, stride: int) -> Tensor:
    """Exact strided ``A2``: query ``i`` attends to keys ``j <= i`` with ``(i - j) mod stride == 0``.

    ``(B, H, T, D) -> (B, H, T, D)``. Position ``i`` is cell ``(i // l, i % l)`` of a ``(T/l, l)``
    grid; transposing makes each column a contiguous causal sequence (Child et al. 2019, §5.5).
    Padding goes at the end of each column, after every real query, so causality excludes it.
    The columns are taken as strides of the ``(B, T, H, D)`` memory that the fused projections
    and SDPA use, so when ``T`` is a multiple of ``l`` nothing is copied (on a CPU, fp32: see
    :func:`zoo.kernels.sdpa`).
    """
    B, H, T, D = q.shape
    rows = math.ceil(T / stride)

    def to_columns(x: Tensor) -> Tensor:  # (B, H, T, D) -> (B, l H, rows, D)
        x = F.pad(x.transpose(1, 2), (0, 0, 0, 0, 0, rows * stride - T))  # (B, rows l, H, D)
        return x.reshape(B, rows, stride * H, x.shape[-1]).transpose(1, 2)

    y = sdpa(*map(to_columns, (q, k, v)), is_causal=True)  # (B, l H, rows, D)
    y = y.transpose(1, 2).reshape(B, rows * stride, H, -1)
    return y[:, :T].transpose(1, 2)


def local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    *,
    segments: Tensor | None = None,
    positions: Tensor | None = None,
    relative: RelativePositions | None = None,
    exclude_self: bool = False,
) -> Tensor:
    """Causal attention of each position to the previous ``window`` positions (itself included):
    the local heads of the Routing Transformer (Roy et al. 2020 §4), the Image Transformer's 1-D
    local attention.

    Runs blockwise in ``O(T * window)``: the sequence is cut into blocks of ``window`` positions
    and each block attends to itself and the block before it, a ``(window, 2 window)`` problem per
    block handed to SDPA (fp32 on a CPU).

    Args:
        q: ``(B, H, T, D)`` queries.
        k: ``(B, H, T, D)`` keys.
        v: ``(B, H, T, D)`` values.
        window: ``W``; position ``i`` attends to ``j`` with ``i - W < j <= i``.
        segments: optional ``(B, H, T)`` ids; then also ``segments[j] == segments[i]`` (the
            Routing Transformer's causal routing runs on a sequence sorted by cluster).
        positions: optional ``(B, H, T)`` positions used for relative distances (default
            ``0..T-1``; a sequence sorted by cluster passes its tokens' original positions).
        relative: Shaw relative positions (the masked path per block); ``None`` runs SDPA.
        exclude_self: attend to the ``W`` positions strictly before instead, ``i - W <= j < i``
            (:func:`~zoo.attention.patterns.local`'s ``exclude_self``); a query with none gets zeros.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``.
    """
    B, H, T, D = q.shape
    if window >= T and segments is None and relative is None and not exclude_self:  # all of it
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # as dense attention
    W = min(window, T)
    nb = math.ceil(T / W)
    pad = nb * W - T

    def key_blocks(x: Tensor, fill: int = 0) -> Tensor:
        """``(B, H, T, ...)`` -> per block the block before and itself ``(B, H, nb, 2W, ...)``."""
        tail = x.shape[3:]
        x = x.reshape(B, H, T, -1)
        x = F.pad(x, (0, 0, W, pad), value=fill).view(B, H, nb + 1, W, -1)  # a block in front
        x = torch.cat([x[:, :, :-1], x[:, :, 1:]], 3)  # (B, H, nb, 2W, ...): cheap backward
        return x.reshape(B, H, nb, 2 * W, *tail)

    qb = F.pad(q, (0, 0, 0, pad)).view(B, H, nb, W, D)
    kb, vb = key_blocks(k), key_blocks(v)
    qpos = torch.arange(nb * W, device=q.device).view(nb, W, 1)
    kpos = (torch.arange(nb, device=q.device) * W - W).view(nb, 1, 1) + torch.arange(
        2 * W, device=q.device
    )
    d = qpos - kpos  # every query's block pair spans distances up to W, so both windows fit
    inside = (d >= 1) & (d <= window) if exclude_self else (d >= 0) & (d < window)
    allowed = inside & (kpos >= 0)  # (nb, W, 2W)
    if segments is not None:
        sq = F.pad(segments, (0, pad), value=-1).view(B, H, nb, W, 1)
        sk = key_blocks(segments, fill=-2).view(B, H, nb, 1, 2 * W)
        allowed = allowed & (sq == sk)  # (B, H, nb, W, 2W)
    if relative is not None:
        if positions is None:
            distance = qpos - kpos  # (nb, W, 2W)
        else:
            pq = F.pad(positions, (0, pad)).view(B, H, nb, W, 1)
            pk = key_blocks(positions).view(B, H, nb, 1, 2 * W)
            distance = pq - pk
        y = masked_attention(qb, kb, vb, allowed, relative=relative, distance=distance)
    else:  # blocks as SDPA's heads, so one (nb, W, 2W) mask serves every (batch, head)
        y = sdpa(
            qb.reshape(-1, nb, W, D),
            kb.reshape(-1, nb, 2 * W, D),
            vb.reshape(-1, nb, 2 * W, vb.shape[-1]),
            attn_mask=allowed.reshape(-1, nb, W, 2 * W),
        )
    return y.reshape(B, H, nb * W, -1)[:, :, :T]


def decode_attention(
    q: Tensor, k: Tensor, v: Tensor, pattern: AttentionPattern, past: int
) -> Tensor:
    """New queries at ``past..past+T-1`` against the cached keys their pattern selects.

    ``q``: ``(B, h, T, D)``; ``k, v``: ``(B, h, S, D)``. Only the selected keys are gathered
    (``O(|A_i|)`` per token, not ``O(S)``); scores and softmax in fp32, as Child et al. (2019,
    §5.6) cast queries and keys when sampling. Under ``torch.compile`` the whole cache is
    masked instead (``O(S)``, the same weights): the gathered key count would break the graph.
    """
    B, h, T, D = q.shape
    S, dev = k.shape[2], q.device
    allowed = _allowed(pattern, h, past, T, S, dev)[0].expand(h, T, S)
    if torch.compiler.is_compiling():  # the key count is data-dependent: mask the whole cache
        return masked_attention(q, k, v, allowed)
    needed = allowed.any(1)  # (h, S): keys any new query uses
    n_keys = int(needed.sum(-1).max())
    idx = torch.sort((~needed).to(torch.uint8), dim=-1, stable=True).indices[:, :n_keys]
    keep = torch.gather(allowed, 2, idx[:, None, :].expand(h, T, n_keys))  # (h, T, K)
    keep = keep & (torch.arange(n_keys, device=dev) < needed.sum(-1, keepdim=True))[:, None]
    gather = idx[None, :, :, None].expand(B, h, n_keys, D)
    ks, vs = torch.gather(k, 2, gather), torch.gather(v, 2, gather)  # (B, h, K, D)
    return masked_attention(q, ks, vs, keep)
