"""Dense multi-head causal self-attention (Vaswani et al. 2017, §3.2).

``softmax(Q K^T / sqrt(d_head)) V`` computed by ``torch.nn.functional.scaled_dot_product_attention``,
which picks a fused (flash / memory-efficient) kernel when one applies.

This module is the *seam* of the zoo: a model's blocks call ``attention(x, cache)`` and nothing else,
so the Sparse and Routing Transformers plug in their own attention module (same signature) without
copying the block code. See :meth:`zoo.models.transformer.TransformerLM.build_attention`.

Shape legend: B batch, T new positions, S cached + new positions, C d_model, H heads, D d_head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.cache import LayerKVCache

__all__ = ["CausalSelfAttention"]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with an optional key/value cache.

    Args:
        d_model: model width ``C``.
        n_heads: number of heads ``H``; ``d_head = d_model // n_heads``.
        dropout: dropout on the attention probabilities (training only). Residual dropout belongs
            to the block.
        bias: whether the projections have biases.

    Input ``x``: ``(B, T, C)`` float. Output: ``(B, T, C)``, same dtype.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def split_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(B, T, C)`` -> q, k, v each ``(B, H, T, D)``."""
        B, T, _ = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, D)
        return q, k, v

    def merge_heads(self, y: Tensor) -> Tensor:
        """``(B, H, T, D)`` -> output projection -> ``(B, T, C)``."""
        B, H, T, D = y.shape
        y = y.transpose(1, 2).reshape(B, T, H * D)
        return self.out_proj(y)

    def forward(self, x: Tensor, cache: LayerKVCache | None = None) -> Tensor:
        q, k, v = self.split_heads(x)  # (B, H, T, D)
        past = 0
        if cache is not None:
            past = cache.seq_len
            k, v = cache.update(k, v)  # (B, H, S, D), S = past + T
        T, S = q.shape[2], k.shape[2]
        dropout_p = self.dropout if self.training else 0.0
        if past == 0:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        else:
            # query i (absolute position past + i) sees keys j <= past + i
            rows = torch.arange(past, past + T, device=x.device)[:, None]
            mask = torch.arange(S, device=x.device)[None, :] <= rows  # (T, S)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        return self.merge_heads(y)
