"""Dense multi-head attention (Vaswani et al. 2017, §3.2).

``softmax(Q K^T / sqrt(d_head)) V``, computed by the engine (:func:`zoo.attention.functional.attend`:
PyTorch's fused ``scaled_dot_product_attention``, or the masked path for other mappings).

This module is the *seam* of the zoo: a model's blocks call ``attention(x, cache)`` and nothing else,
so the Sparse and Routing Transformers plug in their own attention module (same signature) without
copying the block code. See :meth:`zoo.models.transformer.TransformerLM.build_attention`.

Shape legend: B batch, T new positions, S cached + new positions, C d_model, H heads, D d_head.
"""

from __future__ import annotations

from torch import Tensor, nn

from zoo.attention.cache import LayerKVCache
from zoo.attention.functional import attend
from zoo.attention.mappings import CONSTRAINED, MappingName
from zoo.attention.patterns import causal
from zoo.attention.rotary import RotaryEmbedding

__all__ = ["CausalSelfAttention", "MultiHeadAttention"]

CAUSAL = causal()


def _check_mapping(mapping: str, dropout: float) -> None:
    if mapping in CONSTRAINED:
        raise ValueError(
            f"{mapping} attention needs upper bounds per key: use it in the LSTM model "
            "(lstm_seq2seq), or softmax / sparsemax / entmax15 / fusedmax here"
        )
    if mapping != "softmax" and dropout:
        raise ValueError(
            f"attention dropout applies to softmax attention only, not {mapping}: set it to 0"
        )


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with an optional key/value cache.

    Args:
        d_model: model width ``C``.
        n_heads: number of heads ``H``; ``d_head = d_model // n_heads``.
        dropout: dropout on the attention probabilities (training only). Residual dropout belongs
            to the block.
        bias: whether the projections have biases.
        rotary: turn queries and keys by their positions (:class:`~zoo.attention.RotaryEmbedding`,
            Su et al. 2021) before attending; the model then adds no position embeddings.
        mapping: scores to probabilities (:mod:`zoo.attention.mappings`); other than softmax the
            scores are materialised (``O(T^2)`` memory) and ``dropout`` must be 0.

    Input ``x``: ``(B, T, C)`` float. Output: ``(B, T, C)``, same dtype.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``; a constrained mapping; dropout with
            a mapping other than softmax.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        rotary: bool = False,
        mapping: MappingName = "softmax",
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        _check_mapping(mapping, dropout)
        self.mapping = mapping
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.rotary = RotaryEmbedding(self.d_head) if rotary else None

    def split_heads(self, x: Tensor, start: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """``(B, T, C)`` at positions ``start..`` -> q, k, v each ``(B, H, T, D)`` (q and k
        rotated when the layer has rotary positions)."""
        B, T, _ = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, D)
        if self.rotary is not None:
            q, k = self.rotary.rotate(q, k, start)
        return q, k, v

    def merge_heads(self, y: Tensor) -> Tensor:
        """``(B, H, T, D)`` -> output projection -> ``(B, T, C)``."""
        B, H, T, D = y.shape
        y = y.transpose(1, 2).reshape(B, T, H * D)
        return self.out_proj(y)

    def forward(self, x: Tensor, cache: LayerKVCache | None = None) -> Tensor:
        past = cache.seq_len if cache is not None else 0
        q, k, v = self.split_heads(x, past)  # (B, H, T, D)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, S, D), S = past + T
        dropout_p = self.dropout if self.training else 0.0
        y = attend(q, k, v, CAUSAL, past=past, mapping=self.mapping, dropout_p=dropout_p)
        return self.merge_heads(y)


class MultiHeadAttention(nn.Module):
    """Multi-head attention of the encoder-decoder Transformer (Vaswani et al. 2017, §3.2.3): encoder
    self-attention, masked decoder self-attention, and encoder-decoder (cross) attention.

    Args: as :class:`CausalSelfAttention`.

    ``forward(x, memory=None, *, key_padding_mask=None, causal=False, cache=None)``:

    - ``x`` ``(B, T, C)``: the queries (and keys/values for self-attention);
    - ``memory``: ``(k, v)`` from :meth:`project_memory` for cross-attention (computed once per
      source and reused at every decoding step), else ``None`` for self-attention;
    - ``key_padding_mask`` ``(B, S)`` bool, True at real (non-padding) keys;
    - ``causal``: query ``i`` sees keys ``<= i`` (absolute positions, with a ``cache``);
    - ``cache``: a :class:`LayerKVCache` for incremental self-attention.

    Returns ``(B, T, C)``. A query whose keys are all masked gets a zero output, not NaN.

    ``mapping`` other than ``"softmax"`` (``"sparsemax"``, ``"entmax15"``, ``"fusedmax"``:
    :mod:`zoo.attention.mappings`; Correia et al. 2019 put entmax in every head) materialises the
    scores (:func:`~zoo.attention.functional.masked_attention`) instead of calling SDPA.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``; a constrained mapping (it needs
            bounds per key, which this layer has none of); dropout with a mapping other than
            softmax.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        mapping: MappingName = "softmax",
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        _check_mapping(mapping, dropout)
        self.mapping = mapping
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, D)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder output ``(B, S, C)``: two ``(B, H, S, D)``."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(
        self,
        x: Tensor,
        memory: tuple[Tensor, Tensor] | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: LayerKVCache | None = None,
    ) -> Tensor:
        q = self._heads(self.q_proj(x))  # (B, H, T, D)
        past = 0
        if memory is None:
            k, v = self.project_memory(x)
            if cache is not None:
                past = cache.seq_len
                k, v = cache.update(k, v)
        else:
            k, v = memory
        y = attend(
            q, k, v, CAUSAL if causal else None, past=past, key_padding_mask=key_padding_mask,
            mapping=self.mapping, dropout_p=self.dropout if self.training else 0.0,
        )  # fmt: skip
        B, H, T, D = y.shape
        return self.out_proj(y.transpose(1, 2).reshape(B, T, H * D))
