"""The Sparse Transformer (Child et al. 2019, "Generating Long Sequences with Sparse Transformers").

The decoder-only Transformer of :mod:`zoo.models.transformer` with the paper's changes:

- factorized attention (§4.3): the ``strided`` or ``fixed`` pattern (or ``local``, or dense
  ``causal`` as the baseline), integrated *interleaved*, *merged* or *multi-head* (§5.1, Eqs. 6–8),
  computed by :class:`~zoo.attention.SparseSelfAttention` without forming the ``n x n`` matrix;
- the pre-activation residual block ``a = attn(LN(H))``, ``b = ff(LN(H + a))``, ``H' = H + a + b``,
  with a final LayerNorm (§5.2); GELU feed-forward of width ``d_ff`` (4 ``d_model`` by default);
- initialisation (§5.2, §6): token embeddings ``N(0, 0.125/sqrt(d))``, position embeddings
  ``N(0, 0.125/sqrt(d n_emb))``, linear weights ``N(0, 0.125/sqrt(fan_in))`` with zero biases, an extra
  ``1/sqrt(2N)`` on ``W2`` and the attention output ``W_p``, and output logits starting at zero
  (``zero_init_logits``; the small CPU presets turn it off, see the presets);
- factorized learned position embeddings (§5.3): the sum of one embedding per coordinate of a
  position in a grid of shape ``position_shape`` -- ``(rows, stride)`` for text by default,
  ``(rows, columns, channels)`` for images;
- recomputation in the backward pass (§5.4) is the model's gradient checkpointing
  (``model.gradient_checkpointing_enable()``, every family's): whole blocks, attention and
  feed-forward, as Figure 4's caption describes; a saved config's ``checkpoint_attention: true``
  (the field it replaced) turns it on; queries and keys in fp32 for ``QK^T`` when decoding with a
  cache (§5.6).

Deviations: GELU is PyTorch's exact erf form (the paper's ``x sigmoid(1.702 x)`` approximates it);
no dropout on attention probabilities (residual and embedding dropout only); with ``block_size``
blocks the computed work is the pattern's block layout, but outputs follow the element pattern
exactly.

Shape legend: B batch, T positions, C d_model, V vocab_size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from zoo.attention.mechanisms import AttentionSpec, NoParams
from zoo.attention.mechanisms.patterns import FixedParams, LocalParams, StridedParams
from zoo.errors import ConfigError
from zoo.models.registry import register_model, register_preset
from zoo.models.transformer import TransformerConfig, TransformerLM

__all__ = ["SparseTransformerConfig", "SparseTransformerLM"]


@dataclass(frozen=True)
class SparseTransformerConfig(TransformerConfig):
    # the attention: `pattern` and the fields below build the registered mechanisms local,
    # strided, fixed or dense (own_attention) while `attention` is "dense"; a named attention
    # (zoo.models.attention_config) takes their place
    builds_own_attention: ClassVar[bool] = True
    own_attention_fields: ClassVar[tuple[str, ...]] = (
        "pattern", "integration", "c", "distinct_summaries", "window", "block_size"
    )  # fmt: skip
    attention_dropout: ClassVar[float] = 0.0  # the paper drops residual branches, not weights
    position: Literal["factorized", "learned", "sinusoidal", "rotary"] = "factorized"  # §5.3
    tie_weights: bool = False  # output logits start at zero (§6), so they are not shared
    scale_embeddings: bool = False
    pattern: Literal["fixed", "strided", "local", "causal"] = "fixed"  # causal: dense attention
    # the knobs' defaults are the mechanisms' (zoo/attention/mechanisms/patterns.py)
    integration: Literal["merged", "interleaved", "multihead"] = StridedParams.integration
    stride: int = StridedParams.stride  # l, near sqrt(max_seq_len); also the position grid's
    c: int = FixedParams.c  # fixed: summary cells at the end of every block of l
    distinct_summaries: bool = FixedParams.distinct_summaries  # fixed: head m's own sub-block
    window: int = LocalParams.window  # local: positions attended, itself included
    block_size: int = StridedParams.block_size  # block-sparse layouts' edge (work, not semantics)
    position_shape: tuple[int, ...] | None = None  # factorized grid; None = (rows, stride)
    zero_init_logits: bool = (
        True  # output-logit weights start at 0 (§6); False: N(0, 0.125/sqrt(d))
    )
    # the paper's initialisation (§5.2, §6), or "gpt2": the Transformer family's N(0, 0.02)
    init_scheme: Literal["sparse_transformer", "gpt2"] = "sparse_transformer"
    # recomputation (§5.4) is the model's gradient checkpointing now: a saved True turns it on
    retired_keys: ClassVar[dict[str, Any]] = {"checkpoint_attention": bool}

    def own_attention(self) -> tuple[AttentionSpec, ...]:
        """The registered mechanism ``pattern`` and its fields describe, in every layer: ``local``
        (``window``), ``strided`` or ``fixed`` (``stride``, ``integration``, and ``c``,
        ``distinct_summaries`` for fixed) with ``block_size``; ``causal`` is ``dense``."""
        common = {"stride": self.stride, "integration": self.integration,
                  "block_size": self.block_size}  # fmt: skip
        if self.pattern == "fixed":
            c, distinct = self.c, self.distinct_summaries
            spec = AttentionSpec("fixed", FixedParams(**common, c=c, distinct_summaries=distinct))
        elif self.pattern == "strided":
            spec = AttentionSpec("strided", StridedParams(**common))
        elif self.pattern == "local":
            spec = AttentionSpec("local", LocalParams(window=self.window, block_size=self.block_size))
        else:  # causal
            spec = AttentionSpec("dense", NoParams())
        return (spec,) * self.n_layers

    def structure(self) -> dict[str, Any]:
        """The factorized pattern and its parameters (Child et al. 2019, §4.2, §5.1), or the
        named attention's (:meth:`~zoo.models.attention_config.AttentionConfig.named_structure`)."""
        if self.names_attention:
            return self.named_structure()
        params = {
            "fixed": {"stride": self.stride, "c": self.c},
            "strided": {"stride": self.stride},
            "local": {"window": self.window},
            "causal": {},
        }[self.pattern]
        return {"pattern": self.pattern, **params, "integration": self.integration,
                "block_size": self.block_size, "context": self.max_seq_len,
                "position": self.position, "causal": True}  # fmt: skip

    def __post_init__(self) -> None:
        if isinstance(self.position_shape, list):  # from JSON / YAML
            object.__setattr__(self, "position_shape", tuple(self.position_shape))
        super().__post_init__()
        for key in ("stride", "c", "window", "block_size"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive, got {getattr(self, key)}")
        if self.tie_weights and self.zero_init_logits:
            raise ConfigError(
                "tie_weights=True needs zero_init_logits=False: the output logits start at zero "
                "(paper §6), which would zero the shared token embeddings"
            )
        if self.integration == "multihead" and self.n_heads < 2:
            raise ConfigError(
                "integration='multihead' splits heads between A1 and A2: n_heads >= 2"
            )
        if self.position == "factorized" and math.prod(self.position_dims) < self.max_seq_len:
            raise ConfigError(
                f"position_shape {self.position_dims} holds {math.prod(self.position_dims)} "
                f"positions, fewer than max_seq_len={self.max_seq_len}"
            )

    @property
    def position_dims(self) -> tuple[int, ...]:
        """The factorized position grid: ``position_shape`` or ``(ceil(max_seq_len/stride), stride)``."""
        if self.position_shape is not None:
            return self.position_shape
        return (math.ceil(self.max_seq_len / self.stride), self.stride)


@register_model
class SparseTransformerLM(TransformerLM):
    """Sparse Transformer: token ids ``(B, T)`` int64 -> next-token logits ``(B, T, V)``.

    Same interface as :class:`~zoo.models.transformer.TransformerLM` (``forward``,
    ``init_cache``); layer ``r`` attends through the heads groups of :meth:`build_attention`.

    Raises:
        SequenceTooLongError (a ValueError): the sequence (cached + new positions) is longer than
            ``max_seq_len``.
    """

    model_type = "sparse_transformer_lm"
    config_class = SparseTransformerConfig
    # small enough that the patterns are really sparse at 48 positions
    TINY: ClassVar[dict[str, Any]] = TransformerLM.TINY | dict(
        stride=8, c=2, window=6, block_size=4, position_shape=None
    )
    config: SparseTransformerConfig

    def __init__(self, config: SparseTransformerConfig) -> None:
        super().__init__(config)
        if config.retired.get("checkpoint_attention"):  # saved when it was a config field
            self.gradient_checkpointing_enable()

    def build_positions(self) -> None:
        c = self.config
        if c.position != "factorized":
            return super().build_positions()
        self.pos_embs = nn.ModuleList(nn.Embedding(size, c.d_model) for size in c.position_dims)

    def positions(self, start: int, T: int, device: torch.device) -> Tensor:
        """Sum of the embeddings of each grid coordinate of positions ``start..start+T-1``: ``(T, C)``."""
        if self.config.position != "factorized":
            return super().positions(start, T, device)
        pos = torch.arange(start, start + T, device=device)
        out = 0
        for emb, size in zip(
            reversed(self.pos_embs), reversed(self.config.position_dims), strict=True
        ):
            out = out + emb(pos % size)  # last coordinate varies fastest (raster order)
            pos = pos // size
        return out

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The paper's initialisation (§5.2 and §6; see the module docstring): weights
        N(0, 0.125 / sqrt(fan_in)), the residual projections further scaled by 1 / sqrt(2 N).
        ``init_scheme="gpt2"`` takes the Transformer family's N(0, 0.02) instead;
        ``zero_init_logits`` applies to both."""
        c = self.config
        if c.init_scheme == "gpt2":
            super().reset_parameters()
            if c.zero_init_logits and self.lm_head.weight is not self.tok_emb.weight:
                nn.init.zeros_(self.lm_head.weight)
            return
        n_emb = len(c.position_dims) if c.position == "factorized" else 1
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = 0.125 / math.sqrt(module.in_features)
                if name.endswith(("attention.out_proj", "ff.w2")):
                    std /= math.sqrt(2 * c.n_layers)
                nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, 0.125 / math.sqrt(c.d_model * n_emb))
        nn.init.normal_(self.tok_emb.weight, 0.0, 0.125 / math.sqrt(c.d_model))
        if c.zero_init_logits and self.lm_head.weight is not self.tok_emb.weight:
            nn.init.zeros_(self.lm_head.weight)


# --- presets -------------------------------------------------------------------------------------
# Small byte-level models sized for 2 CPU cores at a context of 4096 (pg19mini recipes); the three
# differ only in the attention pattern, for the paper's Table 2 comparison. They start the output
# logits from N(0, 0.125/sqrt(d)) instead of 0: in short runs zero logits learn much more slowly
# (docs/sparse_transformer.md measures it); the paper's runs were days long.
_SMALL = dict(
    vocab_size=256, max_seq_len=4096, d_model=256, n_layers=4, n_heads=4, d_ff=1024, dropout=0.0,
    zero_init_logits=False,
)  # fmt: skip
register_preset(
    "sparse_transformer_tiny",
    SparseTransformerLM,
    SparseTransformerConfig(
        vocab_size=256,
        max_seq_len=256,
        d_model=64,
        n_layers=2,
        n_heads=4,
        d_ff=256,
        dropout=0.0,
        pattern="fixed",
        stride=16,
        c=4,
        block_size=4,
    ),  # fmt: skip
    "fixed pattern, stride 16, 2 layers, d=64: for tests and smoke runs",
)
register_preset(
    "sparse_transformer_small",
    SparseTransformerLM,
    SparseTransformerConfig(**_SMALL, pattern="fixed", integration="merged", stride=128, c=32),
    "fixed pattern (stride 128, c=32, merged heads: the paper's enwik8 choice), 4 layers, "
    "d=256, context 4096",
)
register_preset(
    "sparse_transformer_small_strided",
    SparseTransformerLM,
    SparseTransformerConfig(**_SMALL, pattern="strided", integration="multihead", stride=64),
    "strided pattern (stride 64, heads split A1/A2), 4 layers, d=256, context 4096",
)
# The GPU-sized strided model (sparse_transformer_strided_8k.pg19mini; its recipes are named after
# it): 25.5M parameters, context 8192, rotary positions so it trains on shorter windows first.
_STRIDED_8K = _SMALL | dict(
    max_seq_len=8192, d_model=512, n_layers=8, n_heads=8, d_ff=2048, pattern="strided",
    integration="multihead", stride=128, position="rotary",
)  # fmt: skip
register_preset(
    "sparse_transformer_strided_8k",
    SparseTransformerLM,
    SparseTransformerConfig(**_STRIDED_8K),
    "strided pattern (stride 128, heads split A1/A2), rotary positions, 8 layers, d=512, 8 heads "
    "(25.5M parameters), context 8192: the GPU-sized model (sparse_transformer_strided_8k.pg19mini)",
)
register_preset(
    "sparse_transformer_small_dense",
    SparseTransformerLM,
    SparseTransformerConfig(**_SMALL, pattern="causal", stride=64),
    "dense causal attention in the Sparse Transformer architecture (the Table 2 baseline), "
    "context 4096",
)
register_preset(
    "sparse_transformer_enwik8",
    SparseTransformerLM,
    SparseTransformerConfig(
        vocab_size=256,
        max_seq_len=12288,
        d_model=512,
        n_layers=30,
        n_heads=8,
        d_ff=2048,
        dropout=0.4,
        pattern="fixed",
        integration="merged",
        stride=128,
        c=32,
    ),  # fmt: skip
    "the paper's enwik8 model (§7.3: 30 layers, 8 heads, d=512, fixed, stride 128, c=32, merged, "
    "context 12,288; train it with gradient checkpointing, §5.4): GPU-sized",
)
_cifar10 = register_preset(
    "sparse_transformer_cifar10",
    SparseTransformerLM,
    SparseTransformerConfig(
        vocab_size=257,
        max_seq_len=3072,
        d_model=256,
        n_layers=4,
        n_heads=4,
        d_ff=512,
        dropout=0.0,
        zero_init_logits=False,
        pattern="strided",
        integration="multihead",
        stride=96,
        position_shape=(32, 32, 3),
    ),  # fmt: skip
    "CIFAR-10 (§7.2's setup, small): strided, stride 96 = one row of sub-pixels (A1 the row "
    "before, A2 the column above), row/column/channel embeddings, half-width ff, 4 layers, d=256",
)
register_preset(
    "sparse_transformer_cifar10_rotary",
    SparseTransformerLM,
    _cifar10.config.replace(position="rotary", init_scheme="gpt2", tie_weights=True),
    "CIFAR-10, strided (stride 96 = one row of sub-pixels), with the long-context fix: rotary "
    "positions instead of row/column/channel embeddings, GPT-2 init, tied output; half-width ff, "
    "4 layers, d=256",
)
