"""Attention to blocks chosen per query: the op under MoBA's and NSA's selected branches.

Block-selection attentions (MoBA, Lu et al. 2025 §2.2; NSA's selected branch, Yuan et al. 2025
§3.3.2) cut the keys into blocks of ``block_size`` and let every query choose a few of them; the
query then attends, with one softmax, to the union of the keys of its blocks. Unlike the Sparse
Transformer's layouts (:mod:`zoo.kernels.block_sparse`), the choice differs from query to query,
even inside one block of queries.

- :func:`block_select_attention_ref`, the spec: dense fp64 attention under the element mask the
  chosen blocks expand to (:func:`~zoo.kernels.block_sparse.masked_attention_ref`), ``O(T S)``
  memory, for tests and small inputs;
- :func:`block_select_attention`, the PyTorch path, whose cost grows with the chosen keys
  (``T n block_size``) and not with the context ``S``.

How (the varlen design of MoBA's reference code, on a CPU): every (query, chosen block) pair is
one row of work. The pairs are sorted by block and cut into chunks of :data:`ROWS` queries of one
block, so each chunk is a ``(ROWS, D) x (D, b)`` matrix product against its block's keys,
gathered once per chunk (never per query). In training (causal, ``T = S``) the pairs of a query
and its own block, the only ones with keys to mask, are left out of the chunks: they are one
block-diagonal causal attention over the blocks as they lie. Each piece keeps its log-sum-exp and
its normalised output, and a query's pieces are merged as the pieces of one softmax over the
union (online-softmax rescaling), by a gather into a ``(queries, n)`` grid and sums over its
choices; the key blocks' gradients are segmented sums over their adjacent chunks. No scatter
adds: on a CPU they cost more than the attention. The maxima are constants of the result, so
they carry no gradient.

Shape legend: B batch, H heads, T queries, S keys, D head dim, b block_size, nb key blocks,
n chosen blocks per query, P (query, block) pairs, NC chunks, R rows per chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from zoo.kernels.block_sparse import masked_attention_ref

__all__ = [
    "GATHER_QUERIES",
    "ROWS",
    "block_select_attention",
    "block_select_attention_ref",
    "block_select_mask",
]

GATHER_QUERIES = 8  # up to this many queries (decoding) take the gather path
ROWS = 128  # queries per chunk (padding costs at most ROWS - 1 rows per key block)


def _check(q: Tensor, k: Tensor, v: Tensor, blocks: Tensor, block_size: int) -> None:
    if q.dim() != 4 or k.shape[:2] != q.shape[:2] or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"q, k, v must be (B, H, T, D) and (B, H, S, D); got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[2] > k.shape[2]:
        raise ValueError(f"more queries ({q.shape[2]}) than keys ({k.shape[2]})")
    if blocks.shape[:3] != q.shape[:3] or blocks.dtype != torch.int64:
        raise ValueError(
            f"blocks must be int64 (B, H, T, n) for q {tuple(q.shape)}, got "
            f"{blocks.dtype} {tuple(blocks.shape)}"
        )
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")


def _unique(blocks: Tensor) -> Tensor:
    """``blocks`` with repeats of a block in one query's list set to -1 (the union counts a
    block once)."""
    s, _ = blocks.sort(-1)
    repeat = torch.zeros_like(s, dtype=torch.bool)
    repeat[..., 1:] = s[..., 1:] == s[..., :-1]
    return s.masked_fill(repeat, -1)


def block_select_mask(blocks: Tensor, block_size: int, n_keys: int, causal: bool = True) -> Tensor:
    """The element mask of the chosen blocks: ``(B, H, T, S)`` bool, True where key ``j`` lies in
    one of query ``t``'s blocks (and, when ``causal``, ``j <= S - T + t``: queries are the last
    ``T`` positions)."""
    T = blocks.shape[2]
    key_block = torch.arange(n_keys, device=blocks.device) // block_size  # (S,)
    mask = (blocks[..., None, :] == key_block[:, None]).any(-1)  # (B, H, T, S)
    if causal:
        qpos = torch.arange(n_keys - T, n_keys, device=blocks.device)
        mask = mask & (torch.arange(n_keys, device=blocks.device) <= qpos[:, None])
    return mask


def block_select_attention_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    blocks: Tensor,
    block_size: int,
    *,
    causal: bool = True,
    scale: float | None = None,
) -> Tensor:
    """The executable spec of :func:`block_select_attention`: dense attention under
    :func:`block_select_mask`, computed and returned in fp64. Same arguments."""
    _check(q, k, v, blocks, block_size)
    mask = block_select_mask(blocks, block_size, k.shape[2], causal)
    return masked_attention_ref(q, k, v, mask, scale)


@dataclass(frozen=True)
class _Plan:
    """Which (query, block) pairs run, and where each sits in the chunks.

    Chunks that hold a pair with keys to mask (the query's own block, a partial last block) come
    first (``n_masked`` of them, with their ``allowed`` mask ``(NM, R, b)``), so both groups are
    slices. A pair with no allowed key is dropped here, so every pair has one. With ``diagonal``
    (causal, ``T = S``), the pairs of a query and its own block are not in the chunks: they are
    the block-diagonal causal attention of :class:`_FlashCPU`, and no chunk needs a mask.
    """

    chunk_block: Tensor  # (NC,) global key block (into B H nb) of each chunk
    rows: int  # R
    n_masked: int  # NM
    allowed: Tensor  # (NM, R, b) bool
    slot: Tensor  # (NC R,) the query row of each chunk row; the padding rows point past the end
    grid: Tensor  # (B H T n,) each (query, choice)'s row in [chunk rows | diagonal rows | none]
    order: Tensor  # (NC,) where each chunk sits, chunks in block order
    lengths: Tensor  # (B H nb,) chunks per key block
    own: Tensor | None  # (B H T,) bool, diagonal only: the query chose its own block
    none: int  # the row of grid's "no piece": the number of piece rows


def _plan(blocks: Tensor, S: int, b: int, causal: bool, diagonal: bool = False) -> _Plan:
    B, H, T, n = blocks.shape
    dev, nb = blocks.device, math.ceil(S / b)
    qpos = torch.arange(S - T, S, device=dev).view(T, 1)
    valid = (blocks >= 0) & (blocks < nb)
    if causal:  # a block that starts after the query has no key for it
        valid = valid & (blocks * b <= qpos)
    flat = _unique(blocks.masked_fill(~valid, -1))  # (B, H, T, n)
    own = (flat == qpos // b) if diagonal else None  # (B, H, T, n)
    flat = (flat.masked_fill(own, -1) if diagonal else flat).reshape(-1)  # (B H T n)
    pair = (flat >= 0).nonzero().squeeze(1)
    gid = flat[pair] + pair // (T * n) * nb
    # by block, then by query: the keys are unique, so an unstable sort gives the stable order
    pair = pair[torch.sort(gid * flat.numel() + pair).indices]
    gid = flat[pair] + pair // (T * n) * nb  # (P,)
    counts = torch.bincount(gid, minlength=B * H * nb)
    rows = max(1, min(ROWS, int(counts.max()) if pair.numel() else 1))
    rank = torch.arange(pair.numel(), device=dev) - (torch.cumsum(counts, 0) - counts)[gid]
    chunks = (counts + rows - 1) // rows
    chunk = (torch.cumsum(chunks, 0) - chunks)[gid] + rank // rows
    row = rank % rows
    chunk_block = torch.repeat_interleave(torch.arange(B * H * nb, device=dev), chunks)
    qi = pair // n
    qpos = qi % T + S - T
    key_end = gid % nb * b + b - 1  # the last position of the pair's block
    edge = (key_end >= S) | (key_end > qpos) if causal else key_end >= S
    is_masked = torch.zeros(chunk_block.numel(), dtype=torch.bool, device=dev)
    is_masked[chunk[edge]] = True
    perm = torch.argsort((~is_masked).to(torch.uint8), stable=True)  # masked chunks first
    new_id = torch.empty_like(perm)
    new_id[perm] = torch.arange(perm.numel(), device=dev)
    chunk, chunk_block, nm = new_id[chunk], chunk_block[perm], int(is_masked.sum())
    at = torch.full((chunk_block.numel(), rows), -1, device=dev).index_put((chunk, row), qpos)[:nm]
    key = (chunk_block[:nm] % nb)[:, None] * b + torch.arange(b, device=dev)  # (NM, b)
    allowed = (key[:, None, :] < S) & ((key[:, None, :] <= at[..., None]) if causal else True)
    allowed = allowed | (at < 0)[..., None]  # padding rows: any key (never read)
    n_rows = chunk_block.numel() * rows
    slot = torch.full((n_rows,), B * H * T, device=dev)
    slot[chunk * rows + row] = qi
    none = n_rows + B * H * nb * b * diagonal  # the row after the last piece's: no piece
    grid = torch.full((flat.numel(),), none, device=dev)
    grid[pair] = chunk * rows + row
    if diagonal:  # the query's row in the (B H, nb b) padded layout of the diagonal blocks
        at_own = own.reshape(-1).nonzero().squeeze(1)
        grid[at_own] = n_rows + at_own // (T * n) * (nb * b) + at_own // n % T
        own = own.any(-1).reshape(-1)
    return _Plan(chunk_block, rows, nm, allowed, slot, grid, new_id, chunks, own, none)


def _chunks(x: Tensor, plan: _Plan) -> Tensor:
    """Rows ``(B H T, d)`` -> chunk layout ``(NC, R, d)``, zeros in padding rows (one gather:
    ``index_select``, which on a CPU runs about twice as fast as indexing with a tensor)."""
    padded = torch.cat([x, x.new_zeros(1, x.shape[-1])])
    return padded.index_select(0, plan.slot).view(-1, plan.rows, x.shape[-1])


def _merge(o: Tensor, lse: Tensor, grid: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The pieces' normalised outputs ``o`` ``(N, Dv)`` and log-sum-exps ``lse`` ``(N,)`` (the last
    row: no piece, ``-inf``) -> each query's output over the union of its ``n`` choices' pieces,
    ``(Q, Dv)`` in ``lse``'s dtype, and its log-sum-exp ``(Q,)`` (``-inf`` and zeros for a query
    without pieces). ``grid`` ``(Q n,)`` is the row of each (query, choice): a gather and sums
    over the choices, no scatter."""
    og = o.index_select(0, grid).to(lse.dtype).view(-1, n, o.shape[-1])  # (Q, n, Dv)
    lg = lse.index_select(0, grid).view(-1, n)
    top = lg.detach().amax(-1, keepdim=True)
    top = torch.where(top.isfinite(), top, 0.0)
    w = torch.exp(lg - top)  # (Q, n)
    den = w.sum(-1, keepdim=True)
    out = (og * w[..., None]).sum(1) / torch.where(den > 0, den, 1.0)
    return out, torch.where(den > 0, top + den.log(), float("-inf"))[:, 0]


def _rows(x: Tensor, none: float) -> Tensor:
    """``(N, d)`` -> ``(N + 1, d)``, the last row filled with ``none``: the row of no piece."""
    return torch.cat([x, x.new_full((1, x.shape[-1]), none)])


def _pieces(plan: _Plan, new_empty, d: int, none: float) -> Tensor:  # noqa: ANN001
    """An empty ``(N + 1, d)`` buffer of every piece's rows, chunk rows then (with
    ``plan.own``) the diagonal's, as ``plan.grid`` counts them; the last row is ``none``."""
    x = new_empty(plan.none + 1, d)
    x[-1] = none
    return x


def _torch_path(q: Tensor, k: Tensor, v: Tensor, plan: _Plan, b: int, scale: float) -> Tensor:
    """Plain autograd ops (any device): every chunk's scores, masked where the plan says."""
    B, H, T, D = q.shape
    kb, vb = _key_blocks(k, b), _key_blocks(v, b)
    qp = _chunks(q.reshape(-1, D) * scale, plan)  # (NC, R, D)
    acc = torch.promote_types(q.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs
    s = torch.bmm(qp, kb.index_select(0, plan.chunk_block).transpose(1, 2)).to(acc)  # (NC, R, b)
    nm = plan.n_masked
    s = torch.cat([s[:nm].masked_fill(~plan.allowed, float("-inf")), s[nm:]])
    m = s.detach().amax(-1)  # (NC, R): finite, every row has a key
    e = torch.exp(s - m[..., None])
    l = e.sum(-1)
    o = torch.bmm(e.to(v.dtype), vb.index_select(0, plan.chunk_block)).to(acc) / l[..., None]
    n = plan.grid.numel() // (B * H * T)
    lse = _rows((m + l.log()).reshape(-1, 1), float("-inf"))[:, 0]
    out, _ = _merge(_rows(o.reshape(-1, o.shape[-1]), 0.0), lse, plan.grid, n)
    return out.to(v.dtype).view(B, H, T, -1)


def _gather_path(
    q: Tensor, k: Tensor, v: Tensor, blocks: Tensor, b: int, causal: bool, scale: float
) -> Tensor:
    """For a few queries (decoding): gather each query's chosen keys, ``(B, H, T, n b, D)``, and
    attend to them directly; no plan, no chunks."""
    B, H, T, D = q.shape
    S, n, dev = k.shape[2], blocks.shape[-1], q.device
    qpos = torch.arange(S - T, S, device=dev).view(T, 1, 1)
    ok = (blocks >= 0) & (blocks < math.ceil(S / b))
    if causal:
        ok = ok & (blocks * b <= qpos[..., 0])
    blocks = _unique(blocks.masked_fill(~ok, -1))
    key = blocks.clamp_min(0)[..., None] * b + torch.arange(b, device=dev)  # (B, H, T, n, b)
    allowed = (blocks[..., None] >= 0) & (key < S) & ((key <= qpos) if causal else True)
    idx = key.clamp(max=S - 1).view(B, H, T * n * b, 1)
    kg = k.gather(2, idx.expand(-1, -1, -1, D)).view(B, H, T, n * b, D)
    vg = v.gather(2, idx.expand(-1, -1, -1, v.shape[-1])).view(B, H, T, n * b, -1)
    acc = torch.promote_types(q.dtype, torch.float32)
    s = torch.einsum("bhtd,bhtkd->bhtk", q.to(acc), kg.to(acc)) * scale
    allowed = allowed.view(B, H, T, n * b)
    any_key = allowed.any(-1, keepdim=True)
    s = s.masked_fill(~allowed, float("-inf")).masked_fill(~any_key, 0.0)
    p = torch.softmax(s, -1) * any_key
    return torch.einsum("bhtk,bhtkd->bhtd", p, vg.to(acc)).to(v.dtype)


def _key_blocks(x: Tensor, b: int) -> Tensor:
    """``(B, H, S, d)`` -> ``(B H nb, b, d)``, the last block padded with zeros."""
    B, H, S, d = x.shape
    nb = math.ceil(S / b)
    return (F.pad(x, (0, 0, 0, nb * b - S)) if nb * b > S else x).reshape(B * H * nb, b, d)


_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BACKWARD = getattr(
    torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None
)


def _additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """``(NM, R, b)`` bool -> the kernel's additive mask ``(NM, 1, R, b)``: 0 or -inf."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, float("-inf")
    )[:, None]


class _FlashCPU(torch.autograd.Function):
    """The chunks through PyTorch's fused CPU attention kernel (the one SDPA uses), forward
    and backward; with ``plan.own``, the queries' own blocks as one block-diagonal causal
    call (no mask, no gather). The backward gives each piece the merged output and log-sum-exp
    of its queries, so every piece's gradient is that of the one softmax over the union (the
    recombination ring attention and MoBA's reference code use)."""

    @staticmethod
    def forward(ctx, q, k, v, plan: _Plan, b: int, scale: float):  # noqa: ANN001, ANN205
        B, H, T, D = q.shape
        qp = _chunks(q.reshape(-1, D), plan)[:, None]  # (NC, 1, R, D)
        kc = _key_blocks(k, b).index_select(0, plan.chunk_block)[:, None]  # (NC, 1, b, D)
        vc = _key_blocks(v, b).index_select(0, plan.chunk_block)[:, None]
        nm, NC, R = plan.n_masked, plan.chunk_block.numel(), plan.rows
        acc = torch.promote_types(q.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs
        # every piece's rows, written once where _merge reads them: [chunks | diagonal | none]
        o_all = _pieces(plan, qp.new_empty, vc.shape[-1], 0.0)
        lse_all = _pieces(plan, lambda *n: qp.new_empty(*n, dtype=acc), 1, -math.inf)[:, 0]
        o, lse = o_all[: NC * R].view(NC, R, o_all.shape[-1]), lse_all[: NC * R].view(NC, R)
        for part, mask in (
            (slice(0, nm), _additive(plan.allowed, q.dtype)),
            (slice(nm, None), None),
        ):
            if qp[part].shape[0]:
                o[part], lse[part] = (
                    x[:, 0]
                    for x in _FLASH(qp[part], kc[part], vc[part], attn_mask=mask, scale=scale)
                )
        diag = (None,) * 4
        if plan.own is not None:  # (B H nb, 1, b, D): each block's queries on its own keys
            diag = tuple(_key_blocks(x, b)[:, None] for x in (q, k, v))
            od, lsed = _FLASH(*diag, is_causal=True, scale=scale)[:2]
            o_all[NC * R : -1], lse_all[NC * R : -1] = od.reshape(-1, od.shape[-1]), lsed.reshape(-1)
            diag = (*diag, lse_all[NC * R : -1].view(-1, b))
        out, LSE = _merge(o_all, lse_all, plan.grid, plan.grid.numel() // (B * H * T))
        out = out.to(v.dtype)
        ctx.save_for_backward(qp, kc, vc, out, LSE, *diag)
        ctx.plan, ctx.b, ctx.scale, ctx.shapes = plan, b, scale, (k.shape, v.shape)
        return out.view(B, H, T, -1)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        qp, kc, vc, out, LSE, qd, kd, vd, lsed = ctx.saved_tensors
        plan, nm, kshape = ctx.plan, ctx.plan.n_masked, ctx.shapes[0]
        B, H, S = kshape[:3]
        T, b, D, R = out.shape[0] // (B * H), ctx.b, qp.shape[-1], plan.rows
        nb, NC = math.ceil(S / b), qp.shape[0]
        g = _chunks(grad.reshape(-1, out.shape[-1]).to(out.dtype), plan)[:, None]
        o = _chunks(out, plan)[:, None]
        lse = _chunks(LSE[:, None], plan)[:, None, :, 0]  # (NC, 1, R)
        dq_all = _pieces(plan, qp.new_empty, D, 0.0)  # as in forward: [chunks | diagonal | none]
        dq = dq_all[: NC * R].view(NC, R, D)
        dk, dv = kc.new_empty(NC, b, D), vc.new_empty(NC, b, vc.shape[-1])  # the parts cover them
        for part, mask in (
            (slice(0, nm), _additive(plan.allowed, qp.dtype)),
            (slice(nm, None), None),
        ):
            if qp[part].shape[0] == 0:
                continue
            dqc, dkc, dvc = _FLASH_BACKWARD(
                g[part], qp[part], kc[part], vc[part], o[part], lse[part], 0.0, False,
                attn_mask=mask, scale=ctx.scale,
            )  # fmt: skip
            dq[part], dk[part], dv[part] = dqc[:, 0], dkc[:, 0], dvc[:, 0]
        # each key block's chunks are adjacent in block order: one segmented sum, no scatter
        dk, dv = (
            torch.segment_reduce(
                (x.index_select(0, plan.order) if nm else x).flatten(1), "sum", lengths=plan.lengths
            )
            .view(B * H * nb, b, -1)
            for x in (dk, dv)
        )  # fmt: skip
        if plan.own is not None:  # the diagonal, given the merged output of the queries that chose it
            def blocks(x: Tensor) -> Tensor:  # (B H T, d) -> (B H nb, 1, b, d)
                return _key_blocks(x.view(B, H, T, -1), b)[:, None]

            own = blocks(plan.own[:, None].to(LSE.dtype))[..., 0] > 0  # (B H nb, 1, b)
            gd = blocks(grad.reshape(-1, out.shape[-1]).to(out.dtype)) * own[..., None]
            ld = torch.where(own, blocks(LSE[:, None])[..., 0], lsed[:, None])
            dqd, dkd, dvd = _FLASH_BACKWARD(
                gd, qd, kd, vd, blocks(out), ld, 0.0, True, scale=ctx.scale
            )  # fmt: skip
            dq_all[NC * R : -1], dk, dv = dqd.reshape(-1, D), dk + dkd[:, 0], dv + dvd[:, 0]
        n = plan.grid.numel() // (B * H * T)
        dq = dq_all.index_select(0, plan.grid).view(-1, n, D).to(LSE.dtype).sum(1).to(qp.dtype)
        dk = dk.view(B, H, nb * b, -1)[:, :, :S]
        dv = dv.view(B, H, nb * b, -1)[:, :, :S]
        return dq.view(B, H, T, -1), dk, dv, None, None, None


def block_select_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    blocks: Tensor,
    block_size: int,
    *,
    causal: bool = True,
    scale: float | None = None,
    path: str = "auto",
) -> Tensor:
    """Each query attends, with one softmax, to the keys of the blocks it chose.

    Args:
        q: ``(B, H, T, D)`` queries, the last ``T`` of the ``S`` positions (``T = S`` in training,
            ``T = 1`` when decoding with a cache).
        k: ``(B, H, S, D)`` keys; block ``i`` holds keys ``i b .. (i+1) b - 1``.
        v: ``(B, H, S, D)`` values, blocked as ``k``.
        blocks: ``(B, H, T, n)`` int64, the blocks each query chose; ``-1`` is no block, and a
            block listed twice counts once.
        block_size: ``b``.
        causal: mask keys after the query's position inside its chosen blocks.
        scale: score scale, default ``1 / sqrt(D)``.
        path: ``"flash_cpu"`` (PyTorch's fused CPU attention kernel on the chunks; the default
            on a CPU), ``"torch"`` (plain autograd ops on the chunks, any device), ``"gather"``
            (each query's chosen keys gathered and attended directly: the default for at most
            :data:`GATHER_QUERIES` queries, as in decoding) or ``"auto"``.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``; a query with no allowed key gets zeros. The
        pieces are merged in fp32.

    Raises:
        ValueError: shapes that do not fit, more queries than keys, a ``blocks`` of another
            dtype, an unknown ``path``.
    """
    _check(q, k, v, blocks, block_size)
    if path not in ("auto", "torch", "flash_cpu", "gather"):
        raise ValueError(f"path={path!r}: use 'auto', 'torch', 'flash_cpu' or 'gather'")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if path == "gather" or (path == "auto" and q.shape[2] <= GATHER_QUERIES):
        return _gather_path(q, k, v, blocks, block_size, causal, scale)
    flash = _FLASH is not None and q.device.type == "cpu" and q.dtype == k.dtype == v.dtype
    if path == "flash_cpu" or (path == "auto" and flash):
        diagonal = causal and q.shape[2] == k.shape[2]  # own blocks: one block-diagonal call
        plan = _plan(blocks, k.shape[2], block_size, causal, diagonal)
        with torch.autocast("cpu", enabled=False):
            return _FlashCPU.apply(q, k, v, plan, block_size, scale)
    return _torch_path(q, k, v, _plan(blocks, k.shape[2], block_size, causal), block_size, scale)
