"""The lecture's running example: an LSTM encoder-decoder with attention, for translation.

The encoder is a bidirectional LSTM over source embeddings (Bahdanau et al. 2015, §3.2): the state
of source word ``j`` is ``h_j = [→h_j; ←h_j]``. The decoder is Luong et al. (2015)'s global
attention with input feeding (§3.1, §3.3), the score function and the probability mapping chosen
by the config:

    s_t = LSTM([E y_{t-1}; h~_{t-1}], s_{t-1})        input feeding: the last attentional state
    a_t = mapping(score(h_j, s_t) for every j)         a distribution over the source words
    c_t = sum_j a_tj h_j
    h~_t = tanh(W_c [c_t; s_t])                         the attentional state
    p(y_t | y_<t, x) = softmax(W_o h~_t)

``score`` is one of :mod:`zoo.attention.scores` (additive, dot, bilinear, scaled dot); ``mapping``
one of :mod:`zoo.attention.mappings` (softmax, sparsemax, entmax15, fusedmax, csoftmax,
csparsemax). For the constrained mappings the upper bounds are each source word's remaining
fertility ``u_tj = max(0, fertility - sum_{t'<t} a_t'j)`` (Malaviya et al. 2018, §3: constant
fertility), and a learned sink state is appended to the source with an unbounded fertility, so that
the bounds always leave room for a distribution (their "<SINK>" token).

The decoder's first state comes from the encoder: ``s_0 = tanh(W_s mean_j h_j)`` (a bridge, as
Bahdanau et al.'s ``tanh(W_s ←h_1)``), memory cell 0.

Precision: on a CPU both LSTMs run in fp32 with autocast off, also under ``bf16-mixed`` or
``16-mixed`` training (:func:`_run_lstm`). oneDNN, which computes ``nn.LSTM`` there, has a bf16 LSTM
only on CPUs with AVX512-BF16 or AMX and an fp16 one on none of ours; elsewhere autocast asked it
for a primitive it does not have. fp32 everywhere gives the same numbers on every CPU kind. The
score, the mapping and the linear layers still follow autocast.

The model follows :class:`~zoo.models.seq2seq.TransformerSeq2Seq`'s protocol, so the Translation
task, beam search, ``zoo translate`` and BLEU take it as they are: ``forward(src, tgt)``,
``encode``, ``init_cache``, ``decode`` with a cache that :meth:`RNNSeq2SeqCache.reorder` keeps in
step with the beams. The cache also keeps every step's attention (``cache.attention``), which
``zoo translate --attention-map`` draws.

Shape legend: B batch, S source positions (+1 with the sink), T target positions, E embedding
width, H hidden width, V vocab_size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from zoo.attention.mappings import CONSTRAINED, MappingName, map_scores
from zoo.attention.scores import ScoreName, build_score
from zoo.config import ModelConfig
from zoo.errors import ConfigError, SequenceTooLongError
from zoo.models.base import PretrainedMixin
from zoo.models.outputs import seq2seq_forward
from zoo.models.registry import register_model, register_preset

__all__ = ["LSTMSeq2Seq", "LSTMSeq2SeqConfig", "RNNSeq2SeqCache"]


@dataclass(frozen=True)
class LSTMSeq2SeqConfig(ModelConfig):
    vocab_size: int = 8000  # joint source/target vocabulary
    max_seq_len: int = 256  # longest source or target sequence
    d_embedding: int = 256  # E
    d_hidden: int = 256  # H: decoder state; each encoder direction has H / 2
    n_encoder_layers: int = 1
    n_decoder_layers: int = 1
    dropout: float = 0.3  # on embeddings, between LSTM layers and on the attentional state
    score: ScoreName = "bilinear"  # Luong's "general"
    d_attention: int = 256  # hidden width of the additive score
    mapping: MappingName = "softmax"
    fusedmax_lam: float = 0.1  # fusedmax's λ
    fertility: float = 2.0  # csoftmax / csparsemax: each source word's attention budget
    input_feeding: bool = True  # Luong §3.3
    share_embeddings: bool = True  # one embedding matrix for source and target (joint BPE)
    pad_id: int = 0

    @property
    def d_model(self) -> int:
        """The width the Translation task's learning-rate schedule scales with (``d_model^-0.5``)."""
        return self.d_hidden

    def structure(self) -> dict[str, Any]:
        """LSTM encoder-decoder with ``score`` and ``mapping`` over the source states (Luong et
        al. 2015; Bahdanau et al. 2015)."""
        return {"pattern": "encoder-decoder", "score": self.score, "mechanism": self.mapping,
                "context": self.max_seq_len, "position": "recurrent", "causal": True}  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in (
            "vocab_size",
            "max_seq_len",
            "d_embedding",
            "d_hidden",
            "n_encoder_layers",
            "n_decoder_layers",
            "d_attention",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive, got {getattr(self, key)}")
        if self.d_hidden % 2:
            raise ConfigError(f"d_hidden={self.d_hidden} must be even (two encoder directions)")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.fusedmax_lam < 0:
            raise ConfigError(f"fusedmax_lam must be >= 0, got {self.fusedmax_lam}")
        if self.fertility <= 0:
            raise ConfigError(f"fertility must be positive, got {self.fertility}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ConfigError(
                f"pad_id={self.pad_id} is not a token id of vocab_size={self.vocab_size}"
            )


def _run_lstm(
    lstm: nn.LSTM,
    x: Tensor | nn.utils.rnn.PackedSequence,
    state: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor | nn.utils.rnn.PackedSequence, tuple[Tensor, Tensor]]:
    """``lstm(x, state)``, in fp32 with autocast off when CPU autocast is on (see the module
    docstring); on a GPU, or without autocast, exactly ``lstm(x, state)``.

    ``x`` ``(B, T, in)`` (batch first) or a PackedSequence; ``state`` ``(h, c)`` each
    ``(layers * directions, B, H)``. The outputs are float32 on the CPU path.
    """
    on_cpu = (x.data if isinstance(x, nn.utils.rnn.PackedSequence) else x).device.type == "cpu"
    if not (on_cpu and torch.is_autocast_enabled("cpu")):
        return lstm(x, state)
    with torch.autocast("cpu", enabled=False):
        x = x.float()
        if state is not None:
            state = (state[0].float(), state[1].float())
        return lstm(x, state)


@dataclass
class RNNSeq2SeqCache:
    """Decoding state: the source side (computed once) and the decoder's recurrent state.

    ``memory`` ``(B, S, H)`` encoder states (with the sink for constrained mappings), ``keys``
    their prepared form for the score, ``src_mask`` ``(B, S)`` bool (True = a real position),
    ``state`` the LSTM's ``(h, c)`` ``(layers, B, H)``, ``feed`` ``(B, H)`` the last attentional
    state, ``coverage`` ``(B, S)`` the attention each source position has received, and
    ``attention`` ``(B, t, S)`` every step's distribution so far.
    """

    memory: Tensor
    keys: Tensor
    src_mask: Tensor
    state: tuple[Tensor, Tensor]
    feed: Tensor
    coverage: Tensor
    attention: Tensor
    seq_len: int = 0
    extra: dict = field(default_factory=dict)

    def reorder(self, index: Tensor, *, same_source: bool = False) -> None:
        """Keep batch rows ``index`` ``(B',)`` int64, in that order (beam search).

        ``same_source=True`` promises that every row of ``index`` has the source of the row it
        replaces (a beam search step), so ``memory``, ``keys`` and ``src_mask`` are left as they
        are.
        """
        pick = lambda x: x.index_select(0, index)  # noqa: E731
        if not same_source:
            self.memory, self.keys, self.src_mask = (
                pick(self.memory),
                pick(self.keys),
                pick(self.src_mask),
            )
        self.state = tuple(x.index_select(1, index) for x in self.state)  # type: ignore[assignment]
        self.feed, self.coverage, self.attention = (
            pick(self.feed),
            pick(self.coverage),
            pick(self.attention),
        )


@register_model
class LSTMSeq2Seq(PretrainedMixin, nn.Module):
    """LSTM encoder-decoder with attention: ``forward(src (B, S), tgt (B, T))`` int64 -> logits
    ``(B, T, V)`` float32 (see the module docstring for the equations).

    ``tgt`` is the decoder input (BOS + target); logits at ``t`` predict target token ``t``. Padding
    (``pad_id``) in ``src`` gets no attention. ``tokenizer`` is the joint BPE, saved and restored
    with the weights.

    Raises:
        SequenceTooLongError: a source or target longer than ``max_seq_len``.
    """

    model_type = "lstm_seq2seq"
    config_class = LSTMSeq2SeqConfig
    is_encoder_decoder: ClassVar[bool] = True

    def __init__(self, config: LSTMSeq2SeqConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tokenizer: Tokenizer | None = None
        self.src_emb = nn.Embedding(c.vocab_size, c.d_embedding, padding_idx=c.pad_id)
        self.tgt_emb = (
            self.src_emb
            if c.share_embeddings
            else nn.Embedding(c.vocab_size, c.d_embedding, padding_idx=c.pad_id)
        )
        self.dropout = nn.Dropout(c.dropout)
        H = c.d_hidden
        self.encoder = nn.LSTM(
            c.d_embedding,
            H // 2,
            c.n_encoder_layers,
            batch_first=True,
            bidirectional=True,
            dropout=c.dropout if c.n_encoder_layers > 1 else 0.0,
        )
        self.bridge = nn.Linear(H, H)  # s_0 = tanh(W_s mean_j h_j)
        self.decoder = nn.LSTM(
            c.d_embedding + (H if c.input_feeding else 0),
            H,
            c.n_decoder_layers,
            batch_first=True,
            dropout=c.dropout if c.n_decoder_layers > 1 else 0.0,
        )
        self.score = build_score(c.score, H, H, c.d_attention)
        self.combine = nn.Linear(2 * H, H, bias=False)  # W_c
        self.lm_head = nn.Linear(H, c.vocab_size)  # W_o
        self.sink = nn.Parameter(torch.zeros(H)) if c.mapping in CONSTRAINED else None

    # --- encoder ---------------------------------------------------------------------------------
    def _check_length(self, n: int, what: str) -> None:
        if n > self.config.max_seq_len:
            raise SequenceTooLongError(
                f"{what} of {n} tokens is longer than max_seq_len={self.config.max_seq_len}: "
                "shorten it (training data: --data.init_args.max_length), or build the model "
                "with a larger max_seq_len."
            )

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder states ``(B, S, H)`` and the source mask ``(B, S)`` bool (True = real token).
        With a constrained mapping the learned sink is appended: ``(B, S + 1, H)``."""
        self._check_length(src.shape[1], "source")
        src_mask = src != self.config.pad_id
        x = self.dropout(self.src_emb(src))
        lengths = src_mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            x, lengths, batch_first=True, enforce_sorted=False
        )
        out, _ = _run_lstm(self.encoder, packed)
        memory, _ = nn.utils.rnn.pad_packed_sequence(
            out, batch_first=True, total_length=src.shape[1]
        )
        if self.sink is not None:
            B = src.shape[0]
            memory = torch.cat([memory, self.sink.to(memory.dtype).expand(B, 1, -1)], 1)
            src_mask = torch.cat([src_mask, src_mask.new_ones(B, 1)], 1)
        return memory, src_mask

    def init_cache(self, memory: Tensor, src_mask: Tensor) -> RNNSeq2SeqCache:
        """The decoding state for ``memory`` ``(B, S, H)`` from :meth:`encode`."""
        c = self.config
        B, S, H = memory.shape
        real = src_mask.clone()
        if self.sink is not None:
            real[:, -1] = False  # the sink does not enter the bridge's mean
        mean = (memory * real[..., None]).sum(1) / real.sum(1, keepdim=True).clamp(min=1)
        h0 = torch.tanh(self.bridge(mean)).expand(c.n_decoder_layers, B, H).contiguous()
        return RNNSeq2SeqCache(
            memory=memory,
            keys=self.score.prepare(memory),
            src_mask=src_mask,
            state=(h0, torch.zeros_like(h0)),
            feed=memory.new_zeros(B, H),
            coverage=memory.new_zeros(B, S),
            attention=memory.new_zeros(B, 0, S),
        )

    # --- decoder ---------------------------------------------------------------------------------
    def _upper(self, coverage: Tensor) -> Tensor | None:
        """Remaining fertility ``(B, S)`` after ``coverage`` ``(B, S)``; the sink's is unbounded
        (``max_seq_len``)."""
        if self.config.mapping not in CONSTRAINED:
            return None
        upper = (self.config.fertility - coverage).clamp(min=0.0)
        return torch.cat(
            [upper[:, :-1], upper.new_full((upper.shape[0], 1), float(self.config.max_seq_len))], 1
        )

    def _attend(
        self, emb: Tensor, feed: Tensor, h: Tensor, c: Tensor, coverage: Tensor, keys: Tensor,
        memory: Tensor, src_mask: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
        """One target position as a function of tensors (so that gradient checkpointing can
        recompute it): ``emb`` ``(B, E)``, the last attentional state ``feed`` ``(B, H)``, the
        LSTM state ``h, c`` ``(layers, B, H)`` and the ``coverage`` ``(B, S)`` -> the new
        attentional state ``(B, H)``, ``h``, ``c`` and the attention ``(B, S)``."""
        cfg = self.config
        x = torch.cat([emb, feed], -1) if cfg.input_feeding else emb
        out, (h, c) = _run_lstm(self.decoder, x[:, None], (h, c))  # (B, 1, H)
        s = out[:, 0]
        scores = self.score.score(keys, s[:, None])[:, 0].float()  # (B, S)
        scores = scores.masked_fill(~src_mask, float("-inf"))
        a = map_scores(scores, cfg.mapping, upper=self._upper(coverage), lam=cfg.fusedmax_lam)
        context = (a.to(memory.dtype)[:, None] @ memory)[:, 0]  # (B, H)
        return torch.tanh(self.combine(torch.cat([context, s], -1))), h, c, a

    def _step(self, emb: Tensor, cache: RNNSeq2SeqCache, recompute: bool = False) -> Tensor:
        """One target position: ``emb`` ``(B, E)`` -> the attentional state ``(B, H)``, the
        cache advanced; ``recompute``: checkpointed (kept: the step's inputs and outputs)."""
        args = (emb, cache.feed, *cache.state, cache.coverage, cache.keys, cache.memory,
                cache.src_mask)  # fmt: skip
        if recompute:
            attentional, h, c, a = self._gradient_checkpointing_func(self._attend, *args)
        else:
            attentional, h, c, a = self._attend(*args)
        cache.state = (h, c)
        cache.feed = attentional
        cache.coverage = cache.coverage + a.to(cache.coverage.dtype)
        cache.attention = torch.cat([cache.attention, a.to(cache.attention.dtype)[:, None]], 1)
        cache.seq_len += 1
        return attentional

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None = None,
        src_mask: Tensor | None = None,
        cache: RNNSeq2SeqCache | None = None,
    ) -> Tensor:
        """Logits ``(B, T, V)`` of the decoder input ``tgt`` ``(B, T)``.

        Without a cache pass ``memory`` and ``src_mask`` (from :meth:`encode`); with one, ``tgt``
        holds only the new positions, and the cache advances by ``T`` steps.
        """
        if cache is None:
            if memory is None or src_mask is None:
                raise ValueError("decode needs memory and src_mask (from encode) or a cache")
            cache = self.init_cache(memory, src_mask)
        self._check_length(cache.seq_len + tgt.shape[1], "target")
        emb = self.dropout(self.tgt_emb(tgt))  # (B, T, E)
        # gradient checkpointing: each step keeps its inputs and outputs, not its LSTM gates,
        # scores and mapping (docs/bench/gradient_checkpointing.md measures what that saves)
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        states = [self._step(emb[:, t], cache, recompute) for t in range(tgt.shape[1])]
        return self.lm_head(self.dropout(torch.stack(states, 1))).float()

    # (input_ids, decoder_input_ids | labels, attention_mask) -> Seq2SeqLMOutput: transformers' keywords
    forward = seq2seq_forward

    @torch.no_grad()
    def attention_weights(self, src: Tensor, tgt: Tensor) -> Tensor:
        """The attention ``(B, T, S)`` float32 of each decoder input position of ``tgt`` ``(B, T)``
        over the source ``src`` ``(B, S)`` (teacher-forced); with a constrained mapping the last
        of ``S + 1`` columns is the sink."""
        memory, src_mask = self.encode(src)
        cache = self.init_cache(memory, src_mask)
        self.decode(tgt, cache=cache)
        return cache.attention.float()


# --- presets -------------------------------------------------------------------------------------
_SMALL = dict(
    vocab_size=8000, max_seq_len=256, d_embedding=256, d_hidden=256, d_attention=256, dropout=0.3
)
register_preset(
    "lstm_attention_small",
    LSTMSeq2Seq,
    LSTMSeq2SeqConfig(**_SMALL),
    "bi-LSTM encoder, LSTM decoder with input feeding, bilinear scores, softmax (Luong 2015); "
    "H=256, vocab 8k: sized for Multi30k on a CPU",
)
for _mapping in ("sparsemax", "entmax15", "fusedmax", "csparsemax"):
    register_preset(
        f"lstm_attention_small_{_mapping}",
        LSTMSeq2Seq,
        LSTMSeq2SeqConfig(**_SMALL, mapping=_mapping),
        f"lstm_attention_small with {_mapping} attention"
        + (" (fertility 2, a sink; Malaviya et al. 2018)" if _mapping in CONSTRAINED else "")
        + (" (lam 0.1)" if _mapping == "fusedmax" else ""),
    )
register_preset(
    "lstm_attention_tiny",
    LSTMSeq2Seq,
    LSTMSeq2SeqConfig(
        vocab_size=64, max_seq_len=64, d_embedding=16, d_hidden=32, d_attention=16, dropout=0.0
    ),
    "H=32: for tests",
)
