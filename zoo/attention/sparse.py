"""Factorized sparse self-attention (Child et al. 2019, "Generating Long Sequences with Sparse
Transformers", §4–5).

:class:`SparseSelfAttention` is multi-head attention whose heads are split into groups, each group
attending through one pattern of :mod:`zoo.attention.patterns`. The three ways the paper integrates
a factorized pattern (§5.1) are three ways of filling the groups (see
:func:`zoo.models.sparse_transformer.SparseTransformerLM.build_attention`): *interleaved* (one
component per layer), *merged* (one group over ``A1 ∪ A2``), *multi-head* (half the heads on each).

Each group is one call to the engine, :func:`zoo.attention.functional.attend`, which picks an exact
route for its pattern: columns for strided ``A2`` (the paper's §5.5 transpose), gathered blocks for
the Image Transformer's block-local patterns, the block-sparse op for the rest, and a gathered-keys
step when decoding with a cache (scores in fp32, as the paper casts queries and keys when sampling,
§5.6).

No dropout on attention probabilities (the paper drops the residual branches, not the weights).
The paper's recomputation in the backward pass (§5.4) is the model's gradient checkpointing, which
recomputes whole blocks (:meth:`zoo.models.base.PretrainedMixin.gradient_checkpointing_enable`).

Shape legend: B batch, H heads, T new positions, S cached + new positions, D d_head, C d_model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.attention.cache import LayerKVCache
from zoo.attention.dense import CausalSelfAttention
from zoo.attention.functional import attend
from zoo.attention.patterns import AttentionPattern

__all__ = ["HeadGroup", "SparseSelfAttention"]


@dataclass(frozen=True)
class HeadGroup:
    """``n_heads`` consecutive heads attending through ``pattern`` (head index counted within the
    group, so with distinct fixed summaries the group's first head takes the last ``c`` cells)."""

    n_heads: int
    pattern: AttentionPattern


class SparseSelfAttention(CausalSelfAttention):
    """Multi-head causal self-attention whose head groups follow sparse patterns.

    Args:
        d_model: model width ``C``.
        groups: the head groups, in head order; their ``n_heads`` sum to ``H``.
        block_size: block edge of the block-sparse layouts.
        bias: biases in the projections.
        rotary: rotary positions on queries and keys (see :class:`CausalSelfAttention`).

    Input ``x``: ``(B, T, C)``; output ``(B, T, C)``, same dtype.
    """

    def __init__(
        self,
        d_model: int,
        groups: list[HeadGroup],
        block_size: int,
        bias: bool = True,
        rotary: bool = False,
    ) -> None:
        n_heads = sum(g.n_heads for g in groups)
        super().__init__(d_model, n_heads, dropout=0.0, bias=bias, rotary=rotary)
        self.groups = list(groups)
        self.block_size = block_size

    def extra_repr(self) -> str:
        parts = ", ".join(f"{g.n_heads} x {g.pattern.name}" for g in self.groups)
        return f"heads=[{parts}], block_size={self.block_size}"

    def forward(self, x: Tensor, cache: LayerKVCache | None = None) -> Tensor:
        past = cache.seq_len if cache is not None else 0
        q, k, v = self.split_heads(x, past)  # (B, H, T, D)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, S, D)
        outputs, h0 = [], 0
        for group in self.groups:
            heads = slice(h0, h0 + group.n_heads)
            h0 += group.n_heads
            outputs.append(
                attend(
                    q[:, heads],
                    k[:, heads],
                    v[:, heads],
                    group.pattern,
                    past=past,
                    block_size=self.block_size,
                )  # fmt: skip
            )
        return self.merge_heads(torch.cat(outputs, 1))
