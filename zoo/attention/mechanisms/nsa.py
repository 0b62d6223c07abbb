"""``attention: nsa``: Native Sparse Attention (Yuan et al. 2025, "Native Sparse Attention:
Hardware-Aligned and Natively Trainable Sparse Attention", arXiv 2502.11089, §3).

Each head's output at position ``t`` is a gated sum of three attentions (§3.2, Eq. 5), each with
its own softmax (scale ``1/sqrt(d_head)``) and its own keys and values (§3.3.3):

    o_t = g_cmp Attn(q_t, K_cmp, V_cmp) + g_slc Attn(q_t, K_slc, V_slc) + g_win Attn(q_t, K_win, V_win)

- **compressed** (§3.3.1, Eq. 7): compressed token ``i`` (``i = 0 .. (t - l) // d``) summarises
  positions ``[i d, i d + l)`` as ``phi(K[block]) = W2 GELU(W1 flatten(K[block] + pos))``, with
  ``pos`` a learned ``(l, D)`` intra-block position embedding (:class:`BlockCompressor`; one for
  keys, one for values, shared by the heads). Token ``i`` is visible to query ``t`` once its block
  is complete, ``i d + l - 1 <= t``; a query that sees none (``t < l - 1``) gets exactly zero
  from this branch (rows with no key are zeros, never a finite mask that leaks to the future).
- **selected** (§3.3.2, Eqs. 8-11): the importance of selection block ``j`` (positions
  ``[j l', (j+1) l')``) to query ``t`` is ``sum_i p_cmp[t, i] overlap(i, j)``, ``p_cmp`` the
  compressed branch's probabilities and ``overlap`` the number of stride-``d`` pieces token
  ``i``'s span and block ``j``'s span share (Eq. 9 read as an overlap in units of ``d``, hence
  ``d | l`` and ``d | l'``; with ``l = l' = d`` it is ``p_cmp`` itself). Blocks that start at or
  before ``t`` are eligible. The first ``n_initial`` and the ``n_local`` most recent eligible
  blocks (ending with the query's own) are always chosen, each once; the other
  ``n_selected - forced`` slots go to the most important other eligible blocks (ties to the
  earlier block); with fewer eligible blocks the empty slots are ``-1``, never a padding block.
  The query attends to the union with one softmax, its own block causally masked. The choice is
  made without gradient: gradients reach it only through the compressed branch (§3).
- **window** (§3.3.3): the last ``w`` positions, ``t - w < j <= t``.
- **gates**: ``g = sigmoid(Linear(x_t))``, one per head and branch.

Where we deviate, or decide what the paper leaves open:

- the paper sums the importance over the heads of a GQA group so that a group shares its blocks
  (Eq. 10); the zoo's attention is multi-head, so each head is its own group;
- rotary positions (``position: rotary``) turn the query and the keys of the selected and window
  branches by absolute position; the compressed branch uses the unturned query and keys (a
  compressed token has no single position: its keys carry positions only through ``pos``, and
  order comes from the visibility rule);
- the gate is one linear layer (the paper's "MLP"); ``shared_kv`` gives the three branches one
  key/value projection instead of §3.3.3's three;
- ``n_initial`` may be 0; ``n_local >= 1``, so a query always attends its own block; no dropout
  on the attention probabilities (the config's residual and embedding dropout stay).

Cached decoding computes what the full forward computes: the cache holds the selected branch's
keys and values (``update``), the window branch's and the raw compression inputs (``update_aux``),
and compressed token ``i`` at the position of its last token ``i d + l - 1`` (``update_aux``), so
each is computed once, when its block completes; the compressed tokens are ``aux[:, :, l-1::d]``.

The work: :func:`compressed_attention` (SDPA's fused kernel over the ``~S/d`` compressed tokens,
in chunks of queries whose probabilities turn into their blocks at once, :func:`nsa_blocks`, in
``O(T N)`` and one ``topk``), :func:`zoo.kernels.block_select.block_select_attention` (``T n l'``)
and :func:`zoo.attention.functional.local_attention` (``T w``).
:func:`zoo.attention.mechanisms.nsa_reference.nsa_attention_ref` is the executable spec: fp64
dense attention per branch under masks written out position by position.

Shape legend: B batch, H heads, T queries (the last T of S positions), S keys, D head dim,
N compressed tokens, nb selection blocks, n selected blocks per query."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.cache import LayerKVCache
from zoo.attention.functional import local_attention, masked_attention
from zoo.attention.mechanisms import register_attention
from zoo.attention.rotary import RotaryEmbedding
from zoo.config import CheckedFields, require_positive
from zoo.errors import ConfigError
from zoo.kernels.block_select import block_select_attention

__all__ = ["BlockCompressor", "NSAKeys", "NSAParams", "NSASelfAttention", "compressed_attention",
           "nsa_attention", "nsa_blocks"]  # fmt: skip


@dataclass(frozen=True)
class NSAParams(CheckedFields):
    """NSA's knobs; the defaults are the paper's (§4.1, at 8K-64K positions)."""

    compress_block: int = 32  # l: positions per compressed token
    compress_stride: int = 16  # d: positions between compressed tokens; d | l
    select_block: int = 64  # l': positions per selection block; d | l'
    n_selected: int = 16  # n: blocks per query in the selected branch, the forced ones included
    n_initial: int = 1  # the first blocks, always selected (0: none)
    n_local: int = 2  # the most recent blocks, always selected: the own block and those before it
    window: int = 512  # w: the sliding window, the query's own position included
    shared_kv: bool = False  # one key/value projection for the three branches (§3.3.3: False)

    def __post_init__(self) -> None:
        super().__post_init__()
        l, d, ls = self.compress_block, self.compress_stride, self.select_block
        require_positive(
            "nsa", compress_block=l, compress_stride=d, select_block=ls,
            n_selected=self.n_selected, n_local=self.n_local, window=self.window,
        )  # fmt: skip
        require_positive("nsa", 0, n_initial=self.n_initial)
        for name, size in (("compress_block", l), ("select_block", ls)):
            if size % d:  # block importance counts overlaps in units of the stride
                raise ConfigError(f"nsa: compress_stride={d} must divide {name}={size}")
        if self.n_selected < self.n_initial + self.n_local:
            raise ConfigError(
                f"nsa: n_selected={self.n_selected} must be at least n_initial + n_local = "
                f"{self.n_initial + self.n_local} (the forced blocks count among the selected): "
                "raise n_selected or lower n_initial / n_local"
            )

    def tiny(self) -> NSAParams:
        """These parameters for the tests' tiny models: blocks and a window of a few positions."""
        return replace(self, compress_block=4, compress_stride=2, select_block=4, window=4)


class NSAKeys(NamedTuple):
    """The keys and values of NSA's three branches.

    ``k_cmp, v_cmp``: ``(B, H, N, D)`` compressed tokens, token ``i`` summarising positions
    ``[i d, i d + l)``, every complete block of the ``S`` positions (``N = (S - l) // d + 1``, or
    0 when ``S < l``). ``k_slc, v_slc, k_win, v_win``: ``(B, H, S, D)``, one per position (the
    selected and window keys turned by rotary positions when the model has them).
    """

    k_cmp: Tensor
    v_cmp: Tensor
    k_slc: Tensor
    v_slc: Tensor
    k_win: Tensor
    v_win: Tensor


def _check(q: Tensor, kv: NSAKeys, gates: Tensor, params: NSAParams, q_cmp: Tensor | None):
    if q.dim() != 4 or any(x.dim() != 4 for x in kv):
        raise ValueError("q and every key/value must be 4-d, (B, H, ., D)")
    B, H, T, D = q.shape
    S, N = kv.k_slc.shape[2], kv.k_cmp.shape[2]
    n_cmp = max(0, (S - params.compress_block) // params.compress_stride + 1)  # complete blocks
    if T > S or any(x.shape[:2] != (B, H) for x in kv):
        raise ValueError(f"q must be (B, H, T, D) and every key/value (B, H, ., D) with T <= S; "
                         f"got q {tuple(q.shape)} and {[tuple(x.shape) for x in kv]}")  # fmt: skip
    if kv.k_win.shape[2] != S or N != n_cmp:
        raise ValueError(f"the window keys must cover the S={S} positions of the selected keys "
                         f"(got {kv.k_win.shape[2]}) and k_cmp hold their {n_cmp} compressed "
                         f"tokens (got {N})")  # fmt: skip
    if gates.shape != (B, H, T, 3) or (q_cmp is not None and q_cmp.shape != q.shape):
        got = None if q_cmp is None else tuple(q_cmp.shape)
        raise ValueError(f"gates must be (B, H, T, 3) = {(B, H, T, 3)} and q_cmp like q; got "
                         f"{tuple(gates.shape)}, {got}")  # fmt: skip


CHUNK = 512  # queries per piece of the compressed branch: bounds its (B, H, CHUNK, N) scratch


def compressed_attention(
    q: Tensor, k_cmp: Tensor, v_cmp: Tensor, n_keys: int, params: NSAParams,
    reduce: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The compressed branch (§3.3.1, Eqs. 7-8): query ``t`` attends to the first
    ``c_t = min(N, (t - l + 1) // d + 1)`` tokens, those whose block it has seen whole. The rows
    that see none come first (zeros); the rest run in chunks of :data:`CHUNK` queries through
    SDPA's fused kernel (and its backward) on the tokens the chunk's last query sees, under the
    staircase mask ``i < c_t``; the chunk's probabilities are recomputed without gradient and
    reduced at once, so ``(B, H, T, N)`` is never held whole when ``reduce`` shrinks them.

    Args:
        q: ``(B, H, T, D)`` queries, the last ``T`` of ``n_keys`` positions (unturned).
        k_cmp, v_cmp: ``(B, H, N, D)`` compressed tokens (:class:`NSAKeys`).
        n_keys: ``S``.
        params: ``compress_block`` and ``compress_stride`` are read.
        reduce: ``(p, pos) -> (B, H, Tc, .)`` for a chunk's probabilities ``p``
            ``(B, H, Tc, Nc)`` fp32 (its first ``Nc`` tokens) at positions ``pos`` ``(Tc,)``;
            default: ``p`` itself, padded to ``N``.

    Returns:
        The output ``(B, H, T, D)`` in ``v_cmp``'s dtype, computed in fp32 (fp64 for fp64; zeros
        where a query sees no token), and ``reduce``'s results along ``T`` (``p_cmp`` by default).
    """
    B, H, T, _ = q.shape
    N, l, d = k_cmp.shape[2], params.compress_block, params.compress_stride
    reduce = reduce or (lambda p, _: F.pad(p, (0, N - p.shape[-1])))
    pos = torch.arange(n_keys - T, n_keys, device=q.device)
    count = ((pos - l + 1).div(d, rounding_mode="floor") + 1).clamp(0, N)  # (T,) c_t
    first = min(T, max(0, l - 1 - (n_keys - T)))  # the first query that sees a token
    sizes = ([first] if first else []) + [min(CHUNK, T - a) for a in range(first, T, CHUNK)]
    dtype, wide = v_cmp.dtype, torch.promote_types(v_cmp.dtype, torch.float32)
    k_cmp, v_cmp = k_cmp.to(wide), v_cmp.to(wide)
    edges, outs, reduced = list(itertools.accumulate(sizes, initial=0)), [], []
    with torch.autocast(q.device.type, enabled=False):
        for qc, a, b in zip(q.to(wide).split(sizes, 2), edges, edges[1:], strict=False):
            nc = 0 if a < first else min(N, (n_keys - T + b - l) // d + 1)  # c of the last
            if nc == 0:
                outs.append(F.pad(qc[..., :0], (0, v_cmp.shape[-1])))  # zeros, q in the graph
                reduced.append(reduce(qc.new_zeros(B, H, b - a, 0, dtype=torch.float32), pos[a:b]))
                continue
            allowed = torch.arange(nc, device=q.device) < count[a:b, None]  # (Tc, Nc): i < c_t
            mask = torch.where(allowed, 0.0, -math.inf).to(wide)
            kc, vc = k_cmp[:, :, :nc], v_cmp[:, :, :nc]
            outs.append(F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask))
            with torch.no_grad():
                qf, kf = qc.float().flatten(0, 1), kc.float().flatten(0, 1)  # (B H, ., D)
                s = torch.baddbmm(mask.float(), qf, kf.transpose(1, 2), alpha=q.shape[-1] ** -0.5)
                reduced.append(reduce(torch.softmax(s, -1).view(B, H, b - a, nc), pos[a:b]))
    return torch.cat(outs, 2).to(dtype), torch.cat(reduced, 2)


def _importance(p_cmp: Tensor, n_keys: int, params: NSAParams) -> Tensor:
    """Block importance (Eq. 9) ``(B, H, T, nb)`` fp32: ``p_cmp`` ``(B, H, T, Nc)`` (the first
    ``Nc`` tokens) times the overlap, in ``O(T Nc)``: token ``i`` puts its probability on each
    stride-``d`` piece ``i .. i + l/d - 1`` it covers, and a block sums its ``l'/d`` pieces."""
    per_token = params.compress_block // params.compress_stride
    per_block = params.select_block // params.compress_stride
    nb, n_cmp = -(-n_keys // params.select_block), p_cmp.shape[-1]  # integer ceil: traceable
    p = p_cmp.float()
    mass = F.pad(p, (0, nb * per_block - n_cmp))  # (B, H, T, pieces): N + l/d - 1 <= pieces
    for r in range(1, per_token):
        mass[..., r : r + n_cmp] += p
    mass = mass.unflatten(-1, (nb, per_block))
    score = mass[..., 0].clone()  # strided adds: a sum over a short last dim is slower
    for r in range(1, per_block):
        score += mass[..., r]
    return score


def _choose(score: Tensor, pos: Tensor, params: NSAParams) -> Tensor:
    """:func:`nsa_blocks` from the importance ``score`` ``(B, H, T, nb)`` (fp32, >= 0) of the
    queries at positions ``pos`` ``(T,)``. The forced blocks hang on the position alone: all of
    ``0 .. own`` while ``own < n_initial + n_local - 1``, else ``0 .. n_initial - 1`` and
    ``own - n_local + 1 .. own``; the others come from one ``topk`` over integer keys (the
    score's bits, then the earlier block: no two keys of a row are equal)."""
    nb, ni, nl = score.shape[-1], params.n_initial, params.n_local
    n_forced, k = ni + nl, params.n_selected - ni - nl
    own = (pos // params.select_block)[:, None]  # (T, 1)
    slot = torch.arange(n_forced, device=score.device)
    forced = torch.where((own < n_forced - 1) | (slot < ni), slot, own - n_forced + 1 + slot)
    forced = forced.masked_fill(forced > own, -1).expand(*score.shape[:2], -1, -1)  # (B, H, T, nf)
    if k == 0:
        return forced
    j = torch.arange(nb, device=score.device)
    free = (j >= ni) & (j <= own - nl)  # (T, nb): eligible, not forced
    bits = (score.float() + 0.0).view(torch.int32).long()  # the order of floats >= 0; -0 -> +0
    top = torch.add(nb - 1 - j, bits, alpha=nb).masked_fill(~free, -1).topk(min(k, nb), dim=-1)
    others = F.pad(top.indices.masked_fill(top.values < 0, -1), (0, max(0, k - nb)), value=-1)
    return torch.cat([forced, others], -1)


@torch.no_grad()
def nsa_blocks(p_cmp: Tensor, n_keys: int, params: NSAParams) -> Tensor:
    """The selection blocks each query attends to (§3.3.2, Eqs. 9 and 11), from ``p_cmp``
    ``(B, H, T, N)``, the compressed-branch probabilities of the last ``T`` of ``n_keys``
    positions (:func:`compressed_attention`); the block sizes, ``n_selected``, ``n_initial``
    and ``n_local`` of ``params`` are read.

    Returns ``(B, H, T, n_selected)`` int64: the forced blocks (the first ``n_initial`` and the
    ``n_local`` ending with the query's own, those that exist), then the most important other
    blocks that start at or before the query (ties to the earlier), each block once; ``-1`` in
    the slots left when fewer are eligible. No gradient.
    """
    T = p_cmp.shape[2]
    pos = torch.arange(n_keys - T, n_keys, device=p_cmp.device)
    return _choose(_importance(p_cmp, n_keys, params), pos, params)


def _window_attention(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    """The last ``T`` of ``S`` positions attend to ``t - w < j <= t``: ``(B, H, T, D)``."""
    T, S = q.shape[2], k.shape[2]
    if T == S:
        return local_attention(q, k, v, window)  # O(T w)
    start = max(0, S - T - window + 1)  # decoding: only the keys some new query sees
    qpos = torch.arange(S - T, S, device=q.device)[:, None]
    kpos = torch.arange(start, S, device=q.device)
    allowed = (kpos <= qpos) & (kpos > qpos - window)  # (T, S - start)
    return masked_attention(q, k[:, :, start:], v[:, :, start:], allowed)


def nsa_attention(
    q: Tensor, kv: NSAKeys, gates: Tensor, params: NSAParams, *, q_cmp: Tensor | None = None
) -> Tensor:
    """Native Sparse Attention of the last ``T`` of ``S`` positions (the module docstring has
    the definition; Yuan et al. 2025, §3).

    Args:
        q: ``(B, H, T, D)`` queries (turned, with rotary positions), the last ``T`` of the ``S``
            positions of ``kv`` (``T = S`` for a whole sequence, fewer when decoding).
        kv: the three branches' keys and values, :class:`NSAKeys`.
        gates: ``(B, H, T, 3)`` gates in ``[0, 1]``: compressed, selected, window.
        params: :class:`NSAParams` (``shared_kv`` is not read here).
        q_cmp: the compressed branch's queries (unturned), default ``q``.

    Returns ``(B, H, T, D)`` in the dtype of the values. Raises ValueError for shapes that do
    not fit, or a ``k_cmp`` that does not hold the compressed tokens of the ``S`` positions.
    """
    _check(q, kv, gates, params, q_cmp)
    S = kv.k_slc.shape[2]
    qc = q if q_cmp is None else q_cmp

    def choose(p: Tensor, pos: Tensor) -> Tensor:  # a chunk's p_cmp -> its blocks (B, H, Tc, n)
        return _choose(_importance(p, S, params), pos, params)

    o_cmp, blocks = compressed_attention(qc, kv.k_cmp, kv.v_cmp, S, params, choose)
    o_slc = block_select_attention(q, kv.k_slc, kv.v_slc, blocks, params.select_block)
    o_win = _window_attention(q, kv.k_win, kv.v_win, params.window)
    g = gates.to(o_cmp.dtype)
    return g[..., 0:1] * o_cmp + g[..., 1:2] * o_slc + g[..., 2:3] * o_win


class BlockCompressor(nn.Module):
    """``phi`` of §3.3.1 (Eq. 7): each block of ``block`` positions at stride ``stride`` to one
    vector, ``W2 GELU(W1 flatten(x[block] + pos))``, shared by the heads.

    Args:
        block: ``l``; stride: ``d``; d_head: ``D``; bias: biases in ``W1`` and ``W2``.

    Input ``(B, H, S, D)``; output ``(B, H, N, D)``, ``N = (S - l) // d + 1`` (0 when ``S < l``),
    same dtype.
    """

    def __init__(self, block: int, stride: int, d_head: int, bias: bool = True) -> None:
        super().__init__()
        self.block, self.stride = block, stride
        self.pos = nn.Parameter(torch.randn(block, d_head) * 0.02)  # intra-block positions
        self.fc1 = nn.Linear(block * d_head, d_head, bias=bias)  # W1
        self.fc2 = nn.Linear(d_head, d_head, bias=bias)  # W2

    def forward(self, x: Tensor) -> Tensor:
        """``W1 flatten(x[block] + pos)`` as ``W1 flatten(pos) + b1`` plus, for each of the
        ``l / d`` stride-``d`` pieces of a block, its slice of ``W1`` times the piece: the pieces
        are ``x`` reshaped, never the ``(B, H, N, l, D)`` blocks (``l / d`` times ``x``)."""
        B, H, S, D = x.shape
        l, d = self.block, self.stride
        if S < l:
            return x.new_zeros(B, H, 0, D)
        n, per = (S - l) // d + 1, l // d
        pieces = x[:, :, : (n + per - 1) * d].reshape(B, H, n + per - 1, d * D)
        w, h = self.fc1.weight, self.fc1(self.pos.flatten())  # (D, l D), (D,)
        for r in range(per):
            h = h + pieces[:, :, r : r + n] @ w[:, r * d * D : (r + 1) * d * D].T
        return self.fc2(F.gelu(h))  # (B, H, N, D)


class NSASelfAttention(nn.Module):
    """Multi-head causal self-attention whose heads each attend by NSA (:func:`nsa_attention`).

    Args:
        d_model: ``C``; n_heads: ``H`` (``d_head = C / H``, even with rotary positions).
        params: :class:`NSAParams`.
        bias: biases in the projections, the gate and ``phi``.
        rotary: turn the query and the selected and window keys by their positions.

    Input ``x``: ``(B, T, C)``; output ``(B, T, C)``, same dtype. With a ``cache``
    (:class:`~zoo.attention.LayerKVCache`), the new positions attend exactly as in the full
    forward. Raises ValueError for a ``d_model`` not divisible by ``n_heads``.
    """

    def __init__(
        self, d_model: int, n_heads: int, params: NSAParams, *, bias: bool = True,
        rotary: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.params, self.n_heads, self.d_head = params, n_heads, d_model // n_heads
        n_kv = 1 if params.shared_kv else 3  # (cmp, slc, win) key/value pairs
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.kv_proj = nn.Linear(d_model, 2 * n_kv * d_model, bias=bias)
        self.gate = nn.Linear(d_model, 3 * n_heads, bias=bias)
        l, d = params.compress_block, params.compress_stride
        self.compress_k = BlockCompressor(l, d, self.d_head, bias)
        self.compress_v = BlockCompressor(l, d, self.d_head, bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.rotary = RotaryEmbedding(self.d_head) if rotary else None

    def project(self, x: Tensor, start: int = 0) -> tuple[Tensor, Tensor, list[Tensor], Tensor]:
        """``x`` ``(B, T, C)`` at positions ``start..`` -> the turned query ``q``, the unturned
        ``q_cmp`` (both ``(B, H, T, D)``), the six ``(B, H, T, D)`` keys and values
        ``[k_cmp, v_cmp, k_slc, v_slc, k_win, v_win]`` (``k_slc``, ``k_win`` turned, ``k_cmp``
        not) and the gates ``(B, H, T, 3)``."""
        B, T, _ = x.shape
        H, D = self.n_heads, self.d_head
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        kv = list(self.kv_proj(x).view(B, T, -1, H, D).permute(2, 0, 3, 1, 4))  # (B, H, T, D)
        kv = kv * 3 if self.params.shared_kv else kv
        gates = torch.sigmoid(self.gate(x)).view(B, T, H, 3).transpose(1, 2)  # (B, H, T, 3)
        q_cmp = q
        if self.rotary is not None:
            q, kv[2] = self.rotary.rotate(q, kv[2], start)
            kv[4] = kv[2] if self.params.shared_kv else self.rotary(kv[4], start)
        return q, q_cmp, kv, gates

    def forward(self, x: Tensor, cache: LayerKVCache | None = None) -> Tensor:
        past = cache.seq_len if cache is not None else 0
        q, q_cmp, kv, gates = self.project(x, past)
        if cache is None:
            keys = NSAKeys(self.compress_k(kv[0]), self.compress_v(kv[1]), *kv[2:])
        else:
            keys = self._remember(cache, past, kv)
        y = nsa_attention(q, keys, gates, self.params, q_cmp=q_cmp)  # (B, H, T, D)
        B, H, T, D = y.shape
        return self.out_proj(y.transpose(1, 2).reshape(B, T, H * D))

    def _remember(self, cache: LayerKVCache, past: int, kv: list[Tensor]) -> NSAKeys:
        """Append the new positions' keys and values to ``cache``; return every branch's so far
        (compressed tokens computed once each, when their block completes)."""
        k_cmp, v_cmp, k_slc, v_slc, k_win, v_win = kv
        shared = self.params.shared_kv
        k_slc, v_slc = cache.update(k_slc, v_slc)  # (B, H, S, D)
        if shared:
            k_win, v_win = k_slc, v_slc
        else:
            k_win = cache.update_aux("nsa_k_win", k_win)
            v_win = cache.update_aux("nsa_v_win", v_win)
        raw_k = k_slc if shared and self.rotary is None else cache.update_aux("nsa_k_raw", k_cmp)
        raw_v = v_slc if shared else cache.update_aux("nsa_v_raw", v_cmp)
        l, d = self.params.compress_block, self.params.compress_stride
        ck = cache.update_aux("nsa_k_cmp", self._completed(self.compress_k, raw_k, past))
        cv = cache.update_aux("nsa_v_cmp", self._completed(self.compress_v, raw_v, past))
        return NSAKeys(ck[:, :, l - 1 :: d], cv[:, :, l - 1 :: d], k_slc, v_slc, k_win, v_win)

    def _completed(self, phi: BlockCompressor, raw: Tensor, past: int) -> Tensor:
        """``(B, H, T, D)``: the compressed tokens of ``raw`` ``(B, H, S, D)`` whose block ends at
        one of the new positions ``past..S-1``, each at its last position; zeros elsewhere (read
        by nobody)."""
        B, H, S, D = raw.shape
        l, d = phi.block, phi.stride
        if S - past == 1 and torch.compiler.is_compiling():
            return _completed_at_last(phi, raw)
        out = raw.new_zeros(B, H, S - past, D)
        first = max(0, -(-(past - l + 1) // d))  # the first token ending at or after past
        last = (S - l) // d  # the last token ending before S
        if S < l or first > last:
            return out
        out[:, :, first * d + l - 1 - past :: d] = phi(raw[:, :, first * d : last * d + l])
        return out

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self.params).items())


def _completed_at_last(phi: BlockCompressor, raw: Tensor) -> Tensor:
    """:meth:`NSASelfAttention._completed` of one new position, the last of ``raw``
    ``(B, H, S, D)``: ``(B, H, 1, D)``, ``phi`` of the block ending there, or zeros where none
    ends. Whether one ends is a tensor, not a branch on ``S``: compiled, such a branch makes a
    graph for each outcome and a recompile every ``d`` positions."""
    S, l, d = raw.shape[2], phi.block, phi.stride
    window = raw[:, :, -l:]  # the block ending at the new position (fewer rows while S < l)
    window = F.pad(window, (0, 0, l - window.shape[2], 0))
    pos = torch.arange(S - 1, S, device=raw.device)  # (1,): the new position
    ends = (pos >= l - 1) & ((pos - l + 1) % d == 0)
    return torch.where(ends[:, None], phi(window), 0.0)


@register_attention("nsa", NSAParams)
def build_nsa(config, layer: int, params: NSAParams) -> nn.Module:
    rotary = config.position == "rotary"
    return NSASelfAttention(config.d_model, config.n_heads, params, bias=config.bias, rotary=rotary)
