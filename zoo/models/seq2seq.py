"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al. 2017), for translation.

Paper §3: an encoder of ``N`` layers (self-attention, feed-forward) and a decoder of ``N`` layers
(masked self-attention, encoder-decoder attention, feed-forward), each sub-layer wrapped as
``LayerNorm(x + Dropout(Sublayer(x)))`` (post-norm; ``norm="pre"`` is the option that trains
without warmup); ReLU feed-forward ``W2 relu(W1 x + b1) + b2``; sinusoidal positions added to token
embeddings multiplied by ``sqrt(d_model)``; dropout on the sums of embeddings and positions and on
every sub-layer output. With a joint source/target vocabulary the two embedding matrices and the
pre-softmax projection are one matrix (§3.4, ``share_embeddings``).

Presets: ``transformer_base`` and ``transformer_big`` have the paper's sizes (Table 3; a joint BPE
vocabulary of 37,000 tokens as for WMT14 En-De); ``transformer_small`` is sized for Multi30k on a CPU;
``transformer_tiny`` for tests.

Shape legend: B batch, S source positions, T target positions, C d_model, V vocab_size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from zoo.attention import KVCache, LayerKVCache, MultiHeadAttention
from zoo.attention.functional import masked_attention
from zoo.attention.mappings import CONSTRAINED, MappingName
from zoo.attention.mechanisms import (
    AttentionSpec,
    attention_pattern,
    build_attention,
    canonical_attention,
    parse_attention,
)
from zoo.config import ModelConfig
from zoo.errors import ConfigError, SequenceTooLongError
from zoo.models.base import PretrainedMixin
from zoo.models.outputs import seq2seq_forward
from zoo.models.registry import register_model, register_preset
from zoo.models.transformer import FeedForward, sinusoidal_positions

__all__ = ["Seq2SeqCache", "TransformerSeq2Seq", "TransformerSeq2SeqConfig"]


@dataclass(frozen=True)
class TransformerSeq2SeqConfig(ModelConfig):
    vocab_size: int = 37000  # joint source/target vocabulary (paper: shared BPE, ~37,000 tokens)
    max_seq_len: int = 1024  # longest source or target sequence (positions)
    d_model: int = 512
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    n_heads: int = 8  # d_k = d_v = d_model / n_heads
    d_ff: int = 2048
    dropout: float = 0.1  # P_drop: sub-layer outputs and embedding sums (paper §5.4)
    attention_dropout: float = 0.0  # on attention probabilities (not in the paper)
    attention_mapping: MappingName = "softmax"  # every attention's; entmax15: Correia et al. 2019
    # the decoder's self-attention: None, the paper's (with attention_mapping); or a registered
    # causal mechanism, a mapping with its parameters, or one per decoder layer
    # (zoo.attention.mechanisms: local, moba, nsa, ...). The encoder (bidirectional over a padded
    # source) and the encoder-decoder attention keep attention_mapping
    decoder_attention: str | dict[str, Any] | tuple[str | dict[str, Any], ...] | None = None
    # what the mechanisms' builders read: positions are the paper's sinusoids, added to the input
    position: ClassVar[str] = "sinusoidal"
    activation: Literal["relu", "gelu"] = "relu"
    norm: Literal["post", "pre"] = "post"  # post = the paper's LayerNorm(x + Dropout(Sublayer(x)))
    share_embeddings: bool = True  # source, target and output embeddings one matrix (§3.4)
    pad_id: int = 0  # padding token: masked out of every attention's keys
    bias: bool = True
    layer_norm_eps: float = 1e-5

    def structure(self) -> dict[str, Any]:
        """Encoder self-attention over the whole source, causal decoder self-attention, and
        encoder-decoder attention (Vaswani et al. 2017, §3.2.3)."""
        own = {} if self.decoder_attention is None else {
            "decoder_pattern": attention_pattern(self.decoder_attention_specs),
            "decoder_attention": self.decoder_attention,
        }  # fmt: skip
        return {"pattern": "encoder-decoder", "mechanism": self.attention_mapping, **own,
                "context": self.max_seq_len, "position": "sinusoidal", "causal": True}  # fmt: skip

    @property
    def decoder_attention_specs(self) -> tuple[AttentionSpec, ...]:
        """One :class:`~zoo.attention.mechanisms.AttentionSpec` per decoder layer (requires
        ``decoder_attention``)."""
        return parse_attention(self.decoder_attention, self.n_decoder_layers)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("vocab_size", "max_seq_len", "d_model", "n_encoder_layers",
                    "n_decoder_layers", "n_heads", "d_ff"):  # fmt: skip
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive, got {getattr(self, key)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ConfigError(
                f"pad_id={self.pad_id} is not a token id of vocab_size={self.vocab_size}"
            )
        if self.attention_mapping in CONSTRAINED:
            raise ConfigError(
                f"attention_mapping={self.attention_mapping!r} needs upper bounds per source "
                "word: use it in lstm_seq2seq, or softmax / sparsemax / entmax15 here"
            )
        if self.decoder_attention is not None:  # checked, and saved with every parameter
            saved = canonical_attention(self.decoder_attention, self.n_decoder_layers)
            object.__setattr__(self, "decoder_attention", saved)
        if self.attention_mapping != "softmax" and self.attention_dropout:
            raise ConfigError(
                f"attention_dropout applies to softmax attention only, not "
                f"{self.attention_mapping}: set it to 0"
            )


class _SubLayer(nn.Module):
    """``LayerNorm(x + Dropout(f(x)))`` (post) or ``x + Dropout(f(LayerNorm(x)))`` (pre)."""

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.pre = config.norm == "pre"
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, f) -> Tensor:
        if self.pre:
            return x + self.dropout(f(self.norm(x)))
        return self.norm(x + self.dropout(f(x)))


def _attention(c: TransformerSeq2SeqConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        c.d_model, c.n_heads, c.attention_dropout, c.bias, mapping=c.attention_mapping
    )


class EncoderLayer(nn.Module):
    def __init__(self, c: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.self_attn = _attention(c)
        self.ff = FeedForward(c.d_model, c.d_ff, c.activation, c.bias)
        self.sub1, self.sub2 = _SubLayer(c), _SubLayer(c)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        x = self.sub1(x, lambda h: self.self_attn(h, key_padding_mask=src_mask))
        return self.sub2(x, self.ff)


class DecoderLayer(nn.Module):
    """Masked self-attention (the paper's, or the registered mechanism of
    ``decoder_attention``), encoder-decoder attention and the feed-forward network."""

    def __init__(self, c: TransformerSeq2SeqConfig, layer: int = 0) -> None:
        super().__init__()
        self.mechanism = c.decoder_attention is not None
        self.self_attn = (
            build_attention(c.decoder_attention_specs[layer], c, layer)
            if self.mechanism
            else _attention(c)
        )
        self.cross_attn = _attention(c)
        self.ff = FeedForward(c.d_model, c.d_ff, c.activation, c.bias)
        self.sub1, self.sub2, self.sub3 = _SubLayer(c), _SubLayer(c), _SubLayer(c)

    def forward(
        self,
        x: Tensor,
        memory: tuple[Tensor, Tensor],
        src_mask: Tensor,
        cache: LayerKVCache | None = None,
    ) -> Tensor:
        if self.mechanism:  # a registered mechanism: attention(x, cache), causal by itself
            x = self.sub1(x, lambda h: self.self_attn(h, cache))
        else:
            x = self.sub1(x, lambda h: self.self_attn(h, causal=True, cache=cache))
        x = self.sub2(x, lambda h: self.cross_attn(h, memory, key_padding_mask=src_mask))
        return self.sub3(x, self.ff)


def _decoder_layer(layer: DecoderLayer, x: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
    """``layer`` over ``x`` ``(B, T, C)`` attending to the encoder output ``memory`` ``(B, S, C)``,
    whose keys and values it projects here (without a cache)."""
    return layer(x, layer.cross_attn.project_memory(memory), src_mask)


@dataclass
class Seq2SeqCache:
    """Incremental decoding state: the decoder's self-attention keys/values (grow by one position
    per step) and each layer's encoder-decoder keys/values (computed once from the source)."""

    self_kv: KVCache
    memory: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # per layer, (B, H, S, D)
    src_mask: Tensor | None = None  # (B, S) bool

    @property
    def seq_len(self) -> int:
        return self.self_kv.seq_len

    def reorder(self, index: Tensor, *, same_source: bool = False) -> None:
        """Keep batch rows ``index`` ``(B',)`` int64, in that order (beam search).

        ``same_source=True`` promises that every row of ``index`` has the source of the row it
        replaces (a beam search step moves hypotheses only among one sentence's beams), so the
        source side (``memory``, ``src_mask``) is left as it is and only the decoder's keys and
        values move.
        """
        self.self_kv.reorder(index)
        if same_source:
            return
        self.memory = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.memory]
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, index)


@register_model
class TransformerSeq2Seq(PretrainedMixin, nn.Module):
    """Encoder-decoder Transformer: ``forward(src (B, S), tgt (B, T))`` int64 -> logits ``(B, T, V)``.

    ``tgt`` is the decoder input (the target shifted right, starting with the BOS token); logits at
    ``t`` predict target token ``t``. Padding (``pad_id``) in ``src`` is masked out of attention.
    Incremental decoding: ``memory, src_mask = encode(src)``, ``cache = init_cache(memory, src_mask)``,
    then ``decode(new_tokens, cache=cache)`` step by step.

    ``tokenizer`` (a ``tokenizers.Tokenizer`` or None) is the joint BPE the model was trained with;
    ``save_pretrained`` writes it as ``tokenizer.json`` and ``from_pretrained`` restores it, so
    :func:`zoo.translate` needs nothing else.

    Raises:
        ValueError: a source or target longer than ``max_seq_len``.
    """

    model_type = "transformer_seq2seq"
    config_class = TransformerSeq2SeqConfig
    is_encoder_decoder: ClassVar[bool] = True

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tokenizer: Tokenizer | None = None
        self.src_emb = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_emb = (
            self.src_emb
            if c.share_embeddings
            else nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        )
        self.register_buffer(
            "pos_table", sinusoidal_positions(c.max_seq_len, c.d_model), persistent=False
        )
        self.emb_dropout = nn.Dropout(c.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c, i) for i in range(c.n_decoder_layers))
        final = c.norm == "pre"  # pre-norm stacks end with a LayerNorm; post-norm layers already do
        eps = c.layer_norm_eps
        self.encoder_norm = nn.LayerNorm(c.d_model, eps=eps) if final else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model, eps=eps) if final else nn.Identity()
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.reset_parameters()
        if c.share_embeddings:
            self.lm_head.weight = self.src_emb.weight

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Xavier-uniform linear layers, zero biases, embeddings ``N(0, d_model^-1/2)`` so that
        ``sqrt(d_model)``-scaled embeddings have unit variance (as fairseq and tensor2tensor)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, self.config.d_model**-0.5)
                module.weight[self.config.pad_id].zero_()

    def _embed(self, emb: nn.Embedding, idx: Tensor, start: int, what: str) -> Tensor:
        c = self.config
        T = idx.shape[1]
        if start + T > c.max_seq_len:
            raise SequenceTooLongError(
                f"{what} of {start + T} tokens is longer than max_seq_len={c.max_seq_len}: "
                "shorten it (training data: --data.init_args.max_length), or build the model "
                "with a larger max_seq_len."
            )
        x = emb(idx) * math.sqrt(c.d_model) + self.pos_table[start : start + T].to(emb.weight.dtype)
        return self.emb_dropout(x)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder output ``(B, S, C)`` and the source mask ``(B, S)`` bool (True = real token)."""
        src_mask = src != self.config.pad_id
        x = self._embed(self.src_emb, src, 0, "source")
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.encoder:
            if recompute:  # keep only the layer's input; rebuild the rest in backward
                x = self._gradient_checkpointing_func(layer, x, src_mask)
            else:
                x = layer(x, src_mask)
        return self.encoder_norm(x), src_mask

    def init_cache(self, memory: Tensor, src_mask: Tensor) -> Seq2SeqCache:
        """A decoding cache for ``memory`` ``(B, S, C)``: each layer's cross-attention keys and
        values are computed here, once."""
        c = self.config
        cache = Seq2SeqCache(KVCache(c.n_decoder_layers, c.max_seq_len), src_mask=src_mask)
        cache.memory = [layer.cross_attn.project_memory(memory) for layer in self.decoder]
        return cache

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None = None,
        src_mask: Tensor | None = None,
        cache: Seq2SeqCache | None = None,
    ) -> Tensor:
        """Logits ``(B, T, V)`` of the decoder input ``tgt`` ``(B, T)`` given the encoder output.

        Without a cache pass ``memory`` and ``src_mask`` (from :meth:`encode`); with one, ``tgt``
        holds only the new positions, which start at ``cache.seq_len``.
        """
        start = cache.seq_len if cache is not None else 0
        if cache is None and (memory is None or src_mask is None):
            raise ValueError("decode needs memory and src_mask (from encode) or a cache")
        x = self._embed(self.tgt_emb, tgt, start, "target")
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for i, layer in enumerate(self.decoder):
            if cache is not None:
                x = layer(x, cache.memory[i], cache.src_mask, cache.self_kv[i])
            elif recompute:  # the layer's keys and values of the memory are recomputed too
                x = self._gradient_checkpointing_func(_decoder_layer, layer, x, memory, src_mask)
            else:
                x = _decoder_layer(layer, x, memory, src_mask)
        return self.lm_head(self.decoder_norm(x))

    # (input_ids, decoder_input_ids | labels, attention_mask) -> Seq2SeqLMOutput: transformers' keywords
    forward = seq2seq_forward

    @torch.no_grad()
    def attention_weights(
        self, src: Tensor, tgt: Tensor, layer: int = -1, *, average_heads: bool = True
    ) -> Tensor:
        """The encoder-decoder attention ``(B, T, S)`` float32 of decoder layer ``layer`` (default
        the last), averaged over its heads, for the decoder input ``tgt`` ``(B, T)`` over the
        source ``src`` ``(B, S)`` (teacher-forced): ``mapping(q k^T / sqrt(d_k))`` (§3.2.1).
        ``average_heads=False`` returns every head's: ``(B, H, T, S)``."""
        attn = self.decoder[layer].cross_attn
        seen: list[Tensor] = []
        hook = attn.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
        try:
            memory, src_mask = self.encode(src)
            self.decode(tgt, memory, src_mask)
        finally:
            hook.remove()
        q = attn._heads(attn.q_proj(seen[0]))  # (B, H, T, D)
        k, v = attn.project_memory(memory)
        allowed = src_mask[:, None, None, :]
        _, p = masked_attention(q, k, v, allowed, mapping=attn.mapping, return_weights=True)
        return p.mean(1) if average_heads else p


# --- presets -------------------------------------------------------------------------------------
_PAPER = dict(activation="relu", norm="post", share_embeddings=True, max_seq_len=1024)
register_preset(
    "transformer_base",
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig(
        **_PAPER, vocab_size=37000, d_model=512, n_heads=8, d_ff=2048, dropout=0.1
    ),
    "the paper's base model: 6+6 layers, d=512, h=8, post-norm, joint vocab 37k (Table 3)",
)
register_preset(
    "transformer_big",
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig(
        **_PAPER, vocab_size=37000, d_model=1024, n_heads=16, d_ff=4096, dropout=0.3
    ),
    "the paper's big model: 6+6 layers, d=1024, h=16, dropout 0.3 (Table 3)",
)
register_preset(
    "transformer_small",
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig(
        **_PAPER | {"max_seq_len": 256},
        vocab_size=8000,
        d_model=256,
        n_encoder_layers=3,
        n_decoder_layers=3,
        n_heads=4,
        d_ff=1024,
        dropout=0.1,
    ),  # fmt: skip
    "3+3 layers, d=256, h=4, post-norm, joint vocab 8k: sized for Multi30k on a CPU",
)
register_preset(
    "transformer_tiny",
    TransformerSeq2Seq,
    TransformerSeq2SeqConfig(
        **_PAPER | {"max_seq_len": 64},
        vocab_size=64,
        d_model=32,
        n_encoder_layers=2,
        n_decoder_layers=2,
        n_heads=2,
        d_ff=64,
        dropout=0.0,
    ),  # fmt: skip
    "2+2 layers, d=32: for tests",
)
