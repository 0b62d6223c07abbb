"""Factorized sparse self-attention (Child et al. 2019, "Generating Long Sequences with Sparse
Transformers", §4–5).

:class:`SparseSelfAttention` is multi-head attention whose heads are split into groups, each group
attending through one pattern of :mod:`zoo.attention.patterns`. The three ways the paper integrates
a factorized pattern (§5.1) are three ways of filling the groups (see
:func:`zoo.models.sparse_transformer.SparseTransformerLM.build_attention`): *interleaved* (one
component per layer), *merged* (one group over ``A1 ∪ A2``), *multi-head* (half the heads on each).

Routes, all exact (equal to dense attention under the pattern's element mask):

- block-sparse: :func:`zoo.kernels.block_sparse_attention` over the pattern's block layout, with the
  pattern predicate inside the computed blocks (every pattern);
- gathered blocks: a block-local pattern (the Image Transformer's ``local_1d`` / ``local_2d``)
  gathers each query block's memory and runs one dense masked problem per block;
- columns: the strided pattern's ``A2`` alone is causal attention among positions congruent mod
  ``l``; reshaping the sequence to ``(T/l, l)`` and transposing turns it into dense causal attention
  over each column (the paper's §5.5 "transposing the matrix"), run by SDPA in ``T^2 / l``;
- decoding with a cache: the new queries gather just the cached keys their pattern selects
  (scores in fp32, as the paper casts queries and keys when sampling, §5.6).

No dropout on attention probabilities (the paper drops the residual branches, not the weights).

Shape legend: B batch, H heads, T new positions, S cached + new positions, D d_head, C d_model.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from zoo.attention.cache import LayerKVCache
from zoo.attention.dense import CausalSelfAttention
from zoo.attention.functional import masked_attention
from zoo.attention.patterns import AttentionPattern
from zoo.kernels import BlockSparsePlan, block_sparse_attention, sdpa

__all__ = [
    "GatheredPlan",
    "HeadGroup",
    "SparseSelfAttention",
    "column_attention",
    "gathered_attention",
]

MAX_PLANS = 8  # block-sparse plans kept per layer (one per head group and sequence length)


@dataclass(frozen=True)
class HeadGroup:
    """``n_heads`` consecutive heads attending through ``pattern`` (head index counted within the
    group, so with distinct fixed summaries the group's first head takes the last ``c`` cells)."""

    n_heads: int
    pattern: AttentionPattern


def column_attention(q: Tensor, k: Tensor, v: Tensor, stride: int) -> Tensor:
    """Exact strided ``A2``: query ``i`` attends to keys ``j <= i`` with ``(i - j) mod stride == 0``.

    ``(B, H, T, D) -> (B, H, T, D)``. Position ``i`` is cell ``(i // l, i % l)`` of a ``(T/l, l)``
    grid; transposing makes each column a contiguous causal sequence (Child et al. 2019, §5.5).
    Padding goes at the end of each column, after every real query, so causality excludes it.
    """
    B, H, T, D = q.shape
    rows = math.ceil(T / stride)

    def to_columns(x: Tensor) -> Tensor:
        x = F.pad(x, (0, 0, 0, rows * stride - T)).view(B, H, rows, stride, -1)
        return x.transpose(2, 3).reshape(B, H * stride, rows, x.shape[-1])  # (B, H l, rows, D)

    y = F.scaled_dot_product_attention(*map(to_columns, (q, k, v)), is_causal=True)
    y = y.view(B, H, stride, rows, -1).transpose(2, 3).reshape(B, H, rows * stride, -1)
    return y[:, :, :T]


@dataclass(frozen=True)
class GatheredPlan:
    """What :func:`gathered_attention` needs for a block-local pattern at one length, built once.

    ``q_index`` ``(nb, Lq)`` and ``k_index`` ``(nb, Lk)``: positions of each query block and of its
    memory (``T`` marks padding: a zero row appended there); ``allowed`` ``(nb, Lq, Lk)`` bool: the
    pattern inside each block; ``slot`` ``(T,)``: where each position's output lands in the
    flattened blocks.
    """

    q_index: Tensor
    k_index: Tensor
    allowed: Tensor
    slot: Tensor

    @classmethod
    def build(cls, pattern: AttentionPattern, T: int, device: torch.device) -> GatheredPlan:
        """Raises ``ValueError`` if ``pattern`` has no ``query_blocks``."""
        if pattern.query_blocks is None:
            raise ValueError(f"{pattern.name} is not block-local (it has no query_blocks)")
        q_index, k_index = pattern.query_blocks(T)  # -1 = padding
        allowed = pattern.mask_mod(0, q_index[:, :, None], k_index[:, None, :])
        allowed &= (q_index >= 0)[:, :, None] & (k_index >= 0)[:, None, :]
        allowed[:, :, 0] |= ~allowed.any(-1)  # padding queries: any key, output dropped
        real = q_index.flatten() >= 0
        slot = torch.empty(T, dtype=torch.long)
        slot[q_index.flatten()[real]] = torch.arange(q_index.numel())[real]
        return cls(
            *(
                x.to(device)
                for x in (
                    q_index.where(q_index >= 0, T),
                    k_index.where(k_index >= 0, T),
                    allowed,
                    slot,
                )
            )  # fmt: skip
        )


def gathered_attention(q: Tensor, k: Tensor, v: Tensor, plan: GatheredPlan) -> Tensor:
    """Exact attention under a block-local pattern (``local_1d``, ``local_2d``), per query block.

    ``(B, H, T, D) -> (B, H, T, D)``. Each query block gathers its own keys (the Image Transformer's
    memory, Parmar et al. 2018 §3.2) and runs as one dense masked problem; the blocks are SDPA's
    heads, so one ``(nb, Lq, Lk)`` mask serves every batch row and head. Work ``O(T Lk)``.
    """
    B, H, T, D = q.shape

    def gather(x: Tensor, index: Tensor) -> Tensor:  # (B H, nb, L, D); index T = the zero row
        return F.pad(x, (0, 0, 0, 1))[:, :, index].flatten(0, 1)

    y = sdpa(
        gather(q, plan.q_index),
        gather(k, plan.k_index),
        gather(v, plan.k_index),
        attn_mask=plan.allowed,
    )  # (B H, nb, Lq, D)
    return y.view(B, H, -1, y.shape[-1])[:, :, plan.slot]


class SparseSelfAttention(CausalSelfAttention):
    """Multi-head causal self-attention whose head groups follow sparse patterns.

    Args:
        d_model: model width ``C``.
        groups: the head groups, in head order; their ``n_heads`` sum to ``H``.
        block_size: block edge of the block-sparse layouts.
        bias: biases in the projections.
        checkpoint: recompute this sub-layer in the backward pass instead of storing its
            activations (the paper's §5.4), when training.
        rotary: rotary positions on queries and keys (see :class:`CausalSelfAttention`).

    Input ``x``: ``(B, T, C)``; output ``(B, T, C)``, same dtype.
    """

    def __init__(
        self,
        d_model: int,
        groups: list[HeadGroup],
        block_size: int,
        bias: bool = True,
        checkpoint: bool = False,
        rotary: bool = False,
    ) -> None:
        n_heads = sum(g.n_heads for g in groups)
        super().__init__(d_model, n_heads, dropout=0.0, bias=bias, rotary=rotary)
        self.groups = list(groups)
        self.block_size = block_size
        self.checkpoint = checkpoint
        # most recently used last; prefills of many prompt lengths would otherwise pile up
        self._plans: OrderedDict[tuple[int, int, str], BlockSparsePlan | GatheredPlan] = (
            OrderedDict()
        )

    def extra_repr(self) -> str:
        parts = ", ".join(f"{g.n_heads} x {g.pattern.name}" for g in self.groups)
        return f"heads=[{parts}], block_size={self.block_size}, checkpoint={self.checkpoint}"

    def plan(self, group: int, T: int, device: torch.device) -> BlockSparsePlan | GatheredPlan:
        """The plan of ``groups[group]`` for ``T`` positions: gathered blocks for a block-local
        pattern, else block-sparse (built once; the ``MAX_PLANS`` most recently used are kept)."""
        key = (group, T, str(device))
        if key in self._plans:
            self._plans.move_to_end(key)
        else:
            g = self.groups[group]
            if g.pattern.query_blocks is not None:
                self._plans[key] = GatheredPlan.build(g.pattern, T, device)
            else:
                layout = g.pattern.layout(T, self.block_size, g.n_heads).to(device)
                self._plans[key] = BlockSparsePlan(
                    layout, self.block_size, T, mask_mod=g.pattern.mask_mod
                )
            while len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        return self._plans[key]

    def forward(self, x: Tensor, cache: LayerKVCache | None = None) -> Tensor:
        if self.checkpoint and cache is None and self.training and torch.is_grad_enabled():
            return checkpoint(self._forward, x, None, use_reentrant=False)
        return self._forward(x, cache)

    def _forward(self, x: Tensor, cache: LayerKVCache | None) -> Tensor:
        past = cache.seq_len if cache is not None else 0
        q, k, v = self.split_heads(x, past)  # (B, H, T, D)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, S, D)
        outputs, h0 = [], 0
        for i, group in enumerate(self.groups):
            heads = slice(h0, h0 + group.n_heads)
            h0 += group.n_heads
            qg, kg, vg = q[:, heads], k[:, heads], v[:, heads]
            if past:
                outputs.append(self._decode(qg, kg, vg, group.pattern, past))
            elif group.pattern.column_stride:
                outputs.append(column_attention(qg, kg, vg, group.pattern.column_stride))
            else:
                plan = self.plan(i, q.shape[2], x.device)
                attend = (
                    gathered_attention if isinstance(plan, GatheredPlan) else block_sparse_attention
                )
                outputs.append(attend(qg, kg, vg, plan))
        return self.merge_heads(torch.cat(outputs, 1))

    @staticmethod
    def _decode(q: Tensor, k: Tensor, v: Tensor, pattern: AttentionPattern, past: int) -> Tensor:
        """New queries at ``past..past+T-1`` against the cached keys their pattern selects.

        ``q``: ``(B, h, T, D)``; ``k, v``: ``(B, h, S, D)``. Only the selected keys are gathered
        (``O(|A_i|)`` per token, not ``O(S)``); scores and softmax run in fp32.
        """
        B, h, T, D = q.shape
        S, dev = k.shape[2], q.device
        rows = torch.arange(past, past + T, device=dev)[:, None]
        heads = torch.arange(h, device=dev)[:, None, None]
        allowed = pattern.mask_mod(heads, rows, torch.arange(S, device=dev)[None, :])
        allowed = torch.broadcast_to(allowed, (h, T, S))
        needed = allowed.any(1)  # (h, S): keys any new query uses
        n_keys = int(needed.sum(-1).max())
        idx = torch.sort((~needed).to(torch.uint8), dim=-1, stable=True).indices[:, :n_keys]
        keep = torch.gather(allowed, 2, idx[:, None, :].expand(h, T, n_keys))  # (h, T, K)
        keep = keep & (torch.arange(n_keys, device=dev) < needed.sum(-1, keepdim=True))[:, None]
        gather = idx[None, :, :, None].expand(B, h, n_keys, D)
        ks, vs = torch.gather(k, 2, gather), torch.gather(v, 2, gather)  # (B, h, K, D)
        return masked_attention(q, ks, vs, keep)
