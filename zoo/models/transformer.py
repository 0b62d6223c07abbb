"""The decoder-only Transformer language model (Vaswani et al. 2017, "Attention Is All You Need").

Paper §3.1–3.5: stacked blocks of multi-head self-attention and a position-wise feed-forward network
``W2 act(W1 x + b1) + b2``, each wrapped in a residual connection with layer normalisation; sinusoidal
position encodings ``PE[pos, 2i] = sin(pos / 10000^(2i/d))``, ``PE[pos, 2i+1] = cos(...)``; token
embeddings multiplied by ``sqrt(d_model)`` and shared with the pre-softmax projection.

Deviations from the paper, each a config field:
- decoder only (the paper's encoder-decoder translation model is a family of its own);
- ``norm="pre"`` (default) puts LayerNorm before each sub-layer and once more before the output
  projection, which trains deep models without the warmup the post-norm original needs;
  ``norm="post"`` is the paper's ``LayerNorm(x + Dropout(Sublayer(x)))``;
- ``activation="gelu"`` (default) instead of the paper's ReLU; ``position="learned"`` is the paper's
  Table 3 row (E) variant; ``position="rotary"`` adds no position embeddings and turns every
  layer's queries and keys instead (RoFormer, Su et al. 2021: relative by construction, and usable
  past ``max_seq_len`` for evaluation, see :meth:`TransformerLM.extends_context`);
- weights of the output projections (attention ``W^O`` and FFN ``W2``) start with an extra
  ``1/sqrt(2 n_layers)`` factor (GPT-2; the Sparse Transformer paper §5.4 uses the same).

The attention is the seam: :meth:`TransformerLM.build_attention` returns one attention module per
layer, and other families (Sparse, Routing) override it and reuse everything else.

Shape legend: B batch, T positions, C d_model, V vocab_size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from zoo.attention import KVCache, LayerKVCache
from zoo.attention.mechanisms import build_attention, tiny_attention
from zoo.config import ModelConfig
from zoo.decoding import padding_spans
from zoo.errors import ConfigError, SequenceTooLongError
from zoo.models.attention_config import AttentionConfig
from zoo.models.base import PretrainedMixin
from zoo.models.outputs import CausalLMOutput, causal_lm_loss
from zoo.models.registry import register_model, register_preset

__all__ = ["FeedForward", "TransformerBlock", "TransformerConfig", "TransformerLM"]


@dataclass(frozen=True)
class TransformerConfig(AttentionConfig, ModelConfig):
    vocab_size: int = 256  # 256 = bytes
    max_seq_len: int = 512  # longest input (positions) the model accepts
    d_model: int = 512
    n_layers: int = 6
    n_heads: int = 8  # d_head = d_model / n_heads
    d_ff: int = 2048  # feed-forward inner width (paper: 4 * d_model)
    dropout: float = 0.1  # residual, embedding and attention-probability dropout
    activation: Literal["gelu", "relu"] = "gelu"  # paper: relu
    norm: Literal["pre", "post"] = "pre"  # post = the paper's LayerNorm(x + Dropout(Sublayer(x)))
    position: Literal["sinusoidal", "learned", "rotary"] = "sinusoidal"
    # a registered mechanism, {"name": ..., its parameters}, or a list of those, one per layer
    # (zoo.attention.mechanisms: dense, local, strided, fixed, routing, moba, nsa, ...;
    # zoo.models.attention_config says how it meets a family's own attention fields)
    attention: str | dict[str, Any] | tuple[str | dict[str, Any], ...] = "dense"
    tie_weights: bool = True  # share token embedding and output projection (paper §3.4)
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(d_model) (paper §3.4)
    bias: bool = True  # biases in linear layers
    layer_norm_eps: float = 1e-5

    def structure(self) -> dict[str, Any]:
        """The registered mechanisms of ``attention`` (:meth:`AttentionConfig.named_structure`:
        ``pattern`` ``dense`` for dense attention under any probability mapping, which
        ``mechanism`` names); see :meth:`ModelConfig.structure`."""
        return self.named_structure()

    def __post_init__(self) -> None:
        super().__post_init__()  # Literal fields
        for key in ("vocab_size", "max_seq_len", "d_model", "n_layers", "n_heads", "d_ff"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive, got {getattr(self, key)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        self._check_attention()

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads



def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """The paper's fixed encodings, ``(n_positions, d_model)`` float32 (§3.5)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq[: d_model // 2])
    return pe.float()


class FeedForward(nn.Module):
    """Position-wise ``W2 act(W1 x + b1) + b2``: ``(..., C) -> (..., C)``."""

    def __init__(
        self, d_model: int, d_ff: int, activation: str = "gelu", bias: bool = True
    ) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.act(self.w1(x)))


class TransformerBlock(nn.Module):
    """Attention and feed-forward sub-layers with residuals, pre- or post-norm.

    ``attention`` is any module called as ``attention(x, cache) -> (B, T, C)``.
    """

    def __init__(self, config: TransformerConfig, attention: nn.Module) -> None:
        super().__init__()
        self.pre_norm = config.norm == "pre"
        self.attention = attention
        self.ff = FeedForward(config.d_model, config.d_ff, config.activation, config.bias)
        self.norm1 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.norm2 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, cache: LayerKVCache | None = None, **attention_kwargs) -> Tensor:
        """``attention_kwargs`` go to the attention module (e.g. a routing layer's padding mask)."""
        if self.pre_norm:  # x + a, then + b: the Sparse Transformer's H + a + b
            x = x + self.dropout(self.attention(self.norm1(x), cache, **attention_kwargs))
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.attention(x, cache, **attention_kwargs)))
        return self.norm2(x + self.dropout(self.ff(x)))


@register_model
class TransformerLM(PretrainedMixin, nn.Module):
    """Decoder-only Transformer: ``input_ids`` ``(B, T)`` int64 -> a
    :class:`~zoo.models.outputs.CausalLMOutput` whose ``logits`` ``(B, T, V)`` predict the next
    token, with transformers' keywords (``attention_mask``, ``labels``, ``past_key_values``,
    ``output_hidden_states``, ``return_dict``: :meth:`forward`).

    ``forward(new_ids, past_key_values=cache)`` with a :class:`~zoo.attention.KVCache` (from
    :meth:`init_cache`) decodes incrementally: ``new_ids`` start at ``cache.seq_len``.

    Raises:
        SequenceTooLongError (a ValueError): the sequence (cached + new positions) is longer than
            ``max_seq_len``.
    """

    model_type = "transformer_lm"
    config_class = TransformerConfig
    # keywords of forward that go on to every layer's attention (a family's own)
    attention_keywords: ClassVar[tuple[str, ...]] = ()
    # the registry-driven tests' size (tests/models/test_models.py); families add their own fields
    TINY: ClassVar[dict[str, Any]] = dict(
        d_model=32, n_layers=2, n_heads=2, d_ff=64, max_seq_len=48, dropout=0.0, vocab_size=64
    )

    @classmethod
    def tiny_config(cls, config: TransformerConfig) -> TransformerConfig:
        """``config`` at the tests' tiny size: the fields of :attr:`TINY` replaced, and a
        registered attention's parameters shrunk with it (:func:`tiny_attention`)."""
        if not config.names_attention:
            return config.replace(**cls.TINY)
        tiny = {k: v for k, v in cls.TINY.items() if k not in config.own_attention_fields}
        return config.replace(**tiny, attention=tiny_attention(config.attention, tiny["n_layers"]))

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.build_positions()
        self.emb_dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(config, self.build_attention(i)) for i in range(config.n_layers)
        )
        # post-norm already ends every block with a LayerNorm
        self.norm_f = (
            nn.LayerNorm(config.d_model, config.layer_norm_eps)
            if config.norm == "pre"
            else nn.Identity()
        )
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.reset_parameters()
        if config.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    def build_attention(self, layer: int) -> nn.Module:
        """The attention module of block ``layer``: the registered mechanism ``config.attention``
        (:mod:`zoo.attention.mechanisms`); other families override this seam."""
        return build_attention(self.config.attention_specs[layer], self.config, layer)

    def build_positions(self) -> None:
        """Create the position encoding's modules or buffers (a seam, like ``build_attention``)."""
        c = self.config
        if c.position == "learned":
            self.pos_emb = nn.Embedding(c.max_seq_len, c.d_model)
        elif c.position == "sinusoidal":
            pe = sinusoidal_positions(c.max_seq_len, c.d_model)
            self.register_buffer("pos_table", pe, persistent=False)  # (max_seq_len, C)

    def positions(self, start: int, T: int, device: torch.device) -> Tensor | None:
        """Encodings of positions ``start..start+T-1``: ``(T, C)``, or ``None`` when positions
        enter the attention instead (``rotary``)."""
        if self.config.position == "learned":
            return self.pos_emb(torch.arange(start, start + T, device=device))
        if self.config.position == "sinusoidal":
            return self.pos_table[start : start + T]
        return None

    @property
    def extends_context(self) -> bool:
        """Whether the weights accept more than ``max_seq_len`` positions: True when no position
        table is learned up to ``max_seq_len`` (rotary, none, or sinusoidal, whose fixed table
        :meth:`build_positions` recomputes from ``max_seq_len``), so a copy of the model with a
        larger ``max_seq_len`` computes the same function on the first positions. Learned (and
        factorized) position embeddings end at ``max_seq_len``."""
        return self.config.position in ("rotary", "none", "sinusoidal")

    def context_config(self, max_seq_len: int) -> TransformerConfig:
        """This model's config for ``max_seq_len`` positions and the same weights (a seam: a
        family whose other settings derive from ``max_seq_len`` pins them here; a mechanism's
        parameters that do are written out, :meth:`AttentionConfig.pinned_attention`)."""
        if not self.config.names_attention:
            return self.config.replace(max_seq_len=max_seq_len)
        return self.config.replace(
            max_seq_len=max_seq_len, attention=self.config.pinned_attention()
        )

    def extended(self, max_seq_len: int) -> TransformerLM:
        """The same weights in a model that accepts ``max_seq_len`` positions, in the same mode.

        Raises:
            ValueError: the position scheme ends at this model's ``max_seq_len``
                (:attr:`extends_context` is False).
        """
        if not self.extends_context:
            raise ValueError(
                f"{self.config.position} positions end at max_seq_len={self.config.max_seq_len}"
            )
        longer = type(self)(self.context_config(max_seq_len))
        longer.load_state_dict(self.state_dict())
        return longer.train(self.training)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        c = self.config
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = 0.02
                if name.endswith(("attention.out_proj", "ff.w2")):
                    std /= math.sqrt(2 * c.n_layers)
                nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, 0.02)
        if c.scale_embeddings:  # unit-variance inputs after the sqrt(d_model) scaling
            nn.init.normal_(self.tok_emb.weight, 0.0, c.d_model**-0.5)

    def init_cache(self, batch_size: int | None = None) -> KVCache:
        """An empty key/value cache for incremental decoding (buffers are allocated lazily)."""
        return KVCache(self.config.n_layers, self.config.max_seq_len)

    def embed(self, idx: Tensor, start: int = 0) -> Tensor:
        """Token plus position embeddings of ``idx`` ``(B, T)`` at positions ``start..start+T-1``."""
        c = self.config
        T = idx.shape[1]
        if start + T > c.max_seq_len:
            past = f"{start} cached + {T} new" if start else f"{T}"
            raise SequenceTooLongError(
                f"sequence of {past} positions is longer than max_seq_len={c.max_seq_len}. "
                "Pass a shorter input (or truncate the prompt), or build the model with a larger "
                "max_seq_len."
            )
        x = self.tok_emb(idx)  # (B, T, C)
        if c.scale_embeddings:
            x = x * math.sqrt(c.d_model)
        pe = self.positions(start, T, idx.device)
        if pe is not None:
            x = x + pe.to(x.dtype)
        return self.emb_dropout(x)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        *,
        past_key_values: KVCache | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool = True,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        **attention_kwargs: Any,
    ) -> CausalLMOutput | tuple:
        """Next-token logits of ``input_ids`` ``(B, T)`` int64, with transformers' keywords.

        Args:
            attention_mask: ``(B, T)`` (or ``(B, S + T)`` with a cache), 1 at tokens, 0 at
                padding on the left or right (:func:`~zoo.decoding.padding_spans`). A padded
                row gives the logits it gives alone (rows run in groups of equal padding);
                logits at padding are 0. With a cache the mask must be all ones: padded
                batches decode through ``generate``.
            past_key_values: a :class:`~zoo.attention.KVCache` (:meth:`init_cache`) to decode
                incrementally: ``input_ids`` then hold only the new positions, which start at
                ``past_key_values.seq_len``; the cache is updated in place.
            labels: ``(B, T)`` int64, usually ``input_ids``; gives ``loss``
                (:func:`~zoo.models.outputs.causal_lm_loss`: shifted inside, -100 ignored).
            use_cache: ``True`` starts a cache when none is given (returned as
                ``past_key_values``).
            return_dict: ``False`` returns :meth:`CausalLMOutput.to_tuple` instead.
            output_hidden_states: also return the ``n_layers + 1`` hidden states.
            output_attentions: refused when True: the attention runs fused kernels and keeps
                no weights (an encoder-decoder's ``attention_weights`` draws its maps).
            attention_kwargs: reach every layer's attention, if the family names them in
                ``attention_keywords`` (the Routing Transformer's ``padding_mask``).

        Returns:
            :class:`~zoo.models.outputs.CausalLMOutput` with ``logits`` ``(B, T, V)``.

        Raises:
            SequenceTooLongError: cached plus new positions exceed ``max_seq_len``.
            ConfigError: a bad ``attention_mask`` or ``labels``, a mask with padding together
                with a cache, a cache passed positionally (pass ``past_key_values=``),
                ``output_attentions=True``, or a keyword the model does not take.
        """
        unknown = sorted(set(attention_kwargs) - set(self.attention_keywords))
        if unknown or output_attentions:
            raise ConfigError(
                f"{type(self).__name__}.forward does not take "
                f"{unknown or 'output_attentions=True (its attention keeps no weights)'}: it takes "
                "input_ids, attention_mask, past_key_values, labels, use_cache, return_dict, "
                f"output_hidden_states{''.join(', ' + k for k in self.attention_keywords)}"
            )
        if isinstance(attention_mask, KVCache):
            raise ConfigError("the second argument of forward is attention_mask (transformers' "
                              "order): pass the cache as past_key_values=cache")  # fmt: skip
        cache = past_key_values
        if cache is None and use_cache:
            cache = self.init_cache(input_ids.shape[0])
        spans = None
        if attention_mask is not None:
            start = cache.seq_len if cache is not None else 0
            spans = padding_spans(attention_mask, (input_ids.shape[0], start + input_ids.shape[1]))
            if cache is not None and spans is not None:
                raise ConfigError(
                    "a padded batch decodes through generate (model.generate, zoo.generate), "
                    "which runs each group of equal padding with its own cache; forward with a "
                    "cache takes rows without padding"
                )
        if spans is None:
            hidden = self._hidden_states(input_ids, cache, output_hidden_states, **attention_kwargs)
        else:
            hidden = self._padded(input_ids, spans, output_hidden_states, **attention_kwargs)
        logits = self.lm_head(hidden[-1])  # (B, T, V)
        out = CausalLMOutput(
            loss=causal_lm_loss(logits, labels) if labels is not None else None,
            logits=logits,
            past_key_values=cache,
            hidden_states=tuple(hidden) if output_hidden_states else None,
        )
        return out if return_dict else out.to_tuple()

    def _hidden_states(
        self, idx: Tensor, cache: KVCache | None, every: bool, **attention_kwargs: Any
    ) -> list[Tensor]:
        """The hidden states ``(B, T, C)`` of ``idx``: every layer's (embeddings first) or only
        the last; the last after the final LayerNorm."""
        x = self.embed(idx, cache.seq_len if cache is not None else 0)  # (B, T, C)
        states = [x] if every else []
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for i, block in enumerate(self.blocks):
            if recompute and cache is None:
                x = self._gradient_checkpointing_func(block, x, None, **attention_kwargs)
            else:
                x = block(x, cache[i] if cache is not None else None, **attention_kwargs)
            if every:
                states.append(x)
        x = self.norm_f(x)
        return [*states[:-1], x] if every else [x]

    def _padded(
        self, idx: Tensor, spans: Tensor, every: bool, **attention_kwargs: Any
    ) -> list[Tensor]:
        """:meth:`_hidden_states` of a padded batch (``spans`` ``(B, 2)``: each row's tokens
        ``[start, stop)``): rows with the same span run together without padding, so each row
        gives what it gives alone, whatever the pattern (positions start at 0; a routing layer
        sees the row's own length); padding positions get zeros."""
        out: list[Tensor] | None = None
        for start, stop in spans.unique(dim=0).tolist():
            rows = ((spans[:, 0] == start) & (spans[:, 1] == stop)).nonzero()[:, 0]
            states = self._hidden_states(idx[rows, start:stop], None, every, **attention_kwargs)
            if out is None:
                out = [s.new_zeros(idx.shape[0], idx.shape[1], s.shape[-1]) for s in states]
            for o, s in zip(out, states, strict=True):
                o[rows, start:stop] = s
        assert out is not None
        return out


# --- presets -------------------------------------------------------------------------------------
# GPT-2-style byte-level models: learned positions and tied embeddings of std 0.02, without the
# sqrt(d_model) factor. (Sinusoidal positions of magnitude ~1 need that factor, or they swamp
# 0.02-scale token embeddings: measured on pg19mini, 200 steps of the default recipe gave 4.56 val
# bits/byte unscaled vs 3.68 scaled sinusoidal vs 3.60 learned.)
_BYTE = dict(
    vocab_size=256, activation="gelu", norm="pre", position="learned", scale_embeddings=False
)

register_preset(
    "transformer_lm_tiny",
    TransformerLM,
    TransformerConfig(
        **_BYTE, max_seq_len=128, d_model=64, n_layers=2, n_heads=4, d_ff=256, dropout=0.0
    ),
    "byte-level, 2 layers, d=64: for tests and smoke runs",
)
register_preset(
    "transformer_lm_small",
    TransformerLM,
    TransformerConfig(
        **_BYTE, max_seq_len=256, d_model=256, n_layers=4, n_heads=4, d_ff=1024, dropout=0.0
    ),
    "byte-level, 4 layers, d=256: trains on 2 CPU cores in minutes",
)
register_preset(
    "transformer_lm_small_sparsemax",
    TransformerLM,
    TransformerConfig(
        **_BYTE,
        max_seq_len=256,
        d_model=256,
        n_layers=4,
        n_heads=4,
        d_ff=1024,
        dropout=0.0,
        attention="sparsemax",  # zoo/attention/mechanisms/sparsemax.py
    ),
    "transformer_lm_small with sparsemax attention (Martins & Astudillo 2016)",
)
register_preset(
    "transformer_lm_small_rotary",
    TransformerLM,
    TransformerConfig(
        **{**_BYTE, "position": "rotary"},
        max_seq_len=256,
        d_model=256,
        n_layers=4,
        n_heads=8,
        d_ff=1024,
        dropout=0.0,
    ),
    "the small model with 8 heads of 32 and rotary positions (the local-attention model's settings)",
)
register_preset(
    "transformer_lm_base",
    TransformerLM,
    TransformerConfig(
        **_BYTE, max_seq_len=1024, d_model=512, n_layers=8, n_heads=8, d_ff=2048, dropout=0.1
    ),
    "byte-level, 8 layers, d=512: a GPU-sized model",
)
register_preset(
    "transformer_lm_post_norm",
    TransformerLM,
    TransformerConfig(
        vocab_size=256,
        max_seq_len=512,
        d_model=512,
        n_layers=6,
        n_heads=8,
        d_ff=2048,
        dropout=0.1,
        activation="relu",
        norm="post",
    ),
    "the paper's decoder stack: post-norm, ReLU, sinusoidal, d=512, 6 layers (base sizes)",
)
