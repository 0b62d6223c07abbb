"""``attention: moba``: Mixture of Block Attention (Lu et al. 2025, "MoBA: Mixture of Block
Attention for Long-Context LLMs", arXiv 2502.13189, §2.2).

The keys are cut into blocks of ``block_size`` positions (the last may be partial). Each query
scores every block by the dot product of the query with the block's mean key (§2.2's gate: no
scale, no softmax, no parameters, computed in fp32 and without gradient) and attends, with one
softmax scaled by ``1/sqrt(d_head)``, to the union of its ``top_k`` chosen blocks:

- ``top_k`` counts the query's own block, which is always chosen (the paper's shared expert) and
  causally masked inside; the other ``top_k - 1`` are the best-scoring blocks that lie wholly
  before the query (a block is eligible for the query at position ``t`` once ``(i+1) B <= t``);
  future blocks never are;
- with fewer eligible blocks than ``top_k - 1``, the empty slots select nothing (never a
  padding block); a sequence of at most ``block_size * top_k`` positions therefore gets exactly
  dense causal attention;
- each head routes on its own.

Decoding with a cache is real MoBA: the new query scores the blocks of the cached keys, as in the
full forward (each block's mean key is kept in the cache once the block completes), so both give
the same outputs (the paper's reference code falls back to full
attention when decoding). The paper keeps the last few layers full (a hybrid); here that is a
per-layer spec, e.g. ``attention=[{"name": "moba", ...}] * 3 + ["dense"]``.

The work: :func:`moba_blocks` (the gate and the top-k) picks the blocks, and
:func:`zoo.kernels.block_select.block_select_attention` attends to them at a cost that grows with
the chosen keys (``T * top_k * block_size``), not with the context. :func:`moba_attention_ref` is
the executable spec, dense fp64 attention under the mask written out query by query.

No dropout on the attention probabilities (the config's residual and embedding dropout stay).

Shape legend: B batch, H heads, T queries (the last T of S positions), S keys, D head dim,
nb key blocks, nf whole key blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.cache import LayerKVCache
from zoo.attention.dense import CausalSelfAttention
from zoo.attention.mechanisms import register_attention
from zoo.config import CheckedFields, require_positive
from zoo.kernels.block_select import block_select_attention
from zoo.kernels.block_sparse import masked_attention_ref

__all__ = [
    "MoBAParams",
    "block_means",
    "MoBASelfAttention",
    "moba_attention",
    "moba_attention_ref",
    "moba_blocks",
]


@dataclass(frozen=True)
class MoBAParams(CheckedFields):
    """MoBA's two knobs (paper §3.1's scaling runs: blocks of 512, top-3, at 8K positions)."""

    block_size: int = 512  # B: key positions per block
    top_k: int = 3  # blocks each query attends to, its own block included

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("moba", block_size=self.block_size, top_k=self.top_k)

    def tiny(self) -> MoBAParams:
        """These parameters for the tests' tiny models: blocks of 4 positions."""
        return MoBAParams(block_size=4, top_k=self.top_k)


def _check(q: Tensor, k: Tensor, block_size: int, top_k: int) -> None:
    require_positive("moba_attention", block_size=block_size, top_k=top_k)
    if q.dim() != 4 or k.dim() != 4 or q.shape[2] > k.shape[2]:
        raise ValueError(
            f"q and k must be (B, H, T, D) and (B, H, S, D) with T <= S; got {tuple(q.shape)} "
            f"and {tuple(k.shape)}"
        )


def block_means(k: Tensor, block_size: int, start: int = 0) -> Tensor:
    """The mean key of every whole block ``(B, H, nf, D)`` fp32 of ``k[:, :, start:]``
    ``(B, H, S, D)`` (``start`` a multiple of ``block_size``): the gate's block representation."""
    B, H, S, D = k.shape
    nf = (S - start) // block_size
    return k[:, :, start : start + nf * block_size].float().view(B, H, nf, block_size, D).mean(3)


@torch.no_grad()
def moba_blocks(
    q: Tensor, k: Tensor, *, block_size: int, top_k: int, means: Tensor | None = None
) -> Tensor:
    """The blocks each query attends to (§2.2's gate and top-k), ``(B, H, T, top_k)`` int64.

    ``q`` ``(B, H, T, D)`` are the last ``T`` of the ``S`` positions of ``k`` ``(B, H, S, D)``.
    Column 0 is the query's own block; the others are the ``top_k - 1`` eligible blocks with the
    largest ``<q, mean(K[block])>`` (fp32), best first, and ``-1`` where fewer are eligible.
    ``means`` ``(B, H, S // block_size, D)`` fp32: the whole blocks' :func:`block_means`, when
    the caller keeps them (a decoding cache); computed from ``k`` when ``None``.
    """
    B, H, T, D = q.shape
    S = k.shape[2]
    nf = S // block_size
    qpos = torch.arange(S - T, S, device=q.device)  # (T,)
    own = (qpos // block_size).view(1, 1, T, 1).expand(B, H, T, 1)
    n_past = min(top_k - 1, nf)
    if n_past == 0:
        return torch.cat([own, own.new_full((B, H, T, top_k - 1), -1)], -1)
    means = block_means(k, block_size) if means is None else means
    gate = q.float() @ means.transpose(-1, -2)  # (B, H, T, nf)
    eligible = torch.arange(nf, device=q.device) < qpos[:, None] // block_size  # (T, nf)
    score, index = gate.masked_fill(~eligible, float("-inf")).topk(n_past, -1)
    index = index.masked_fill(score == float("-inf"), -1)  # not blocks: nothing eligible there
    empty = own.new_full((B, H, T, top_k - 1 - n_past), -1)
    return torch.cat([own, index, empty], -1)


def moba_attention(
    q: Tensor, k: Tensor, v: Tensor, *, block_size: int, top_k: int, means: Tensor | None = None
) -> Tensor:
    """Causal MoBA attention (Lu et al. 2025, §2.2; the module docstring has the definition).

    Args:
        q: ``(B, H, T, D)`` queries, the last ``T`` of the ``S`` positions (``T = S`` for a whole
            sequence, ``T = 1`` when decoding with a cache).
        k: ``(B, H, S, D)`` keys.
        v: ``(B, H, S, D)`` values.
        block_size: MoBA's ``B``, key positions per block.
        top_k: blocks per query, its own block included.
        means: the whole blocks' mean keys ``(B, H, S // block_size, D)`` fp32 when the caller
            keeps them (:func:`block_means`; a decoding cache does), else computed from ``k``.

    Returns:
        ``(B, H, T, D)`` in the dtype of ``v``.

    Raises:
        ValueError: shapes that do not fit, a non-positive ``block_size`` or ``top_k``
            (:class:`~zoo.errors.ConfigError`, a ``ValueError``).
    """
    _check(q, k, block_size, top_k)
    T, S = q.shape[2], k.shape[2]
    if S <= block_size * top_k:  # every query's blocks hold all its keys: dense causal attention
        if T == S:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mask = torch.arange(S, device=q.device) <= torch.arange(S - T, S, device=q.device)[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    blocks = moba_blocks(q, k, block_size=block_size, top_k=top_k, means=means)
    return block_select_attention(q, k, v, blocks, block_size)


def moba_attention_ref(q: Tensor, k: Tensor, v: Tensor, *, block_size: int, top_k: int) -> Tensor:
    """The executable spec of :func:`moba_attention`, written query by query from §2.2: the own
    block up to the query, plus the ``top_k - 1`` best of the blocks before the query's own by
    ``<q_t, mean(K[block])>`` in fp32; one dense softmax in fp64 over those keys. Same arguments;
    returns float64. ``O(T S)`` memory and a Python loop over queries: tests only."""
    _check(q, k, block_size, top_k)
    B, H, T, D = q.shape
    S = k.shape[2]
    mask = torch.zeros(B, H, T, S, dtype=torch.bool, device=q.device)
    for t in range(T):
        pos = S - T + t
        own = pos // block_size
        mask[:, :, t, own * block_size : pos + 1] = True
        if own == 0 or top_k == 1:
            continue
        means = torch.stack(
            [k[:, :, i * block_size : (i + 1) * block_size].float().mean(2) for i in range(own)], 2
        )  # (B, H, own, D): the blocks wholly before the query's own
        gate = torch.einsum("bhd,bhnd->bhn", q[:, :, t].float(), means)
        for i in gate.topk(min(top_k - 1, own), -1).indices.unbind(-1):  # (B, H) each
            keys = i[..., None] * block_size + torch.arange(block_size, device=q.device)
            mask[:, :, t].scatter_(-1, keys, True)
    return masked_attention_ref(q, k, v, mask)


class MoBASelfAttention(CausalSelfAttention):
    """Multi-head causal self-attention whose heads each attend by MoBA (:func:`moba_attention`).

    Args: ``d_model``, ``n_heads``, ``bias``, ``rotary`` as
    :class:`~zoo.attention.CausalSelfAttention`; ``block_size`` and ``top_k`` as
    :class:`MoBAParams`. Input ``x``: ``(B, T, C)``; output ``(B, T, C)``, same dtype. With a
    ``cache``, the new positions attend to the cached keys exactly as in the full forward.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        block_size: int,
        top_k: int,
        bias: bool = True,
        rotary: bool = False,
    ) -> None:
        super().__init__(d_model, n_heads, 0.0, bias, rotary=rotary)
        self.block_size = block_size
        self.top_k = top_k

    def forward(self, x: Tensor, cache: LayerKVCache | None = None) -> Tensor:
        past = cache.seq_len if cache is not None else 0
        q, k, v = self.split_heads(x, past)  # (B, H, T, D)
        means = None
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, S, D)
            means = self._remember_means(cache, k, past)
        y = moba_attention(q, k, v, block_size=self.block_size, top_k=self.top_k, means=means)
        return self.merge_heads(y)

    def _remember_means(self, cache: LayerKVCache, k: Tensor, past: int) -> Tensor:
        """Each block's mean key, computed once, when the block completes, and kept in
        ``cache`` at its last position: a decoding step reads ``S / block_size`` means, not the
        ``S`` keys. Returns the whole blocks' means ``(B, H, S // block_size, D)`` fp32."""
        b = self.block_size
        B, H, S, D = k.shape
        new = k.new_zeros(B, H, S - past, D, dtype=torch.float32)  # zeros: read by nobody
        first = past // b  # the first block ending at or after past
        if S // b > first:
            new[:, :, first * b + b - 1 - past :: b] = block_means(k, b, first * b)
        return cache.update_aux("moba_block_means", new)[:, :, b - 1 :: b]

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, top_k={self.top_k}"


@register_attention("moba", MoBAParams)
def build_moba(config, layer: int, params: MoBAParams) -> nn.Module:
    c = config
    return MoBASelfAttention(
        c.d_model, c.n_heads, block_size=params.block_size, top_k=params.top_k, bias=c.bias,
        rotary=c.position == "rotary",
    )  # fmt: skip
