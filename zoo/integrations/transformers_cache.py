"""transformers ``Cache`` objects that hold the zoo's own decoding state, so that transformers'
``generate`` decodes a zoo model incrementally (:mod:`zoo.integrations.transformers`).

- :class:`ZooLMCache`: a language model's :class:`zoo.decoding.DecodingState`, the very state
  :func:`zoo.generate` decodes with: one zoo ``KVCache`` per group of rows of equal left padding,
  and the zoo's sliding window past ``max_seq_len`` (a full cache is re-encoded from the last
  ``max_seq_len // 2`` tokens). Each step then reads only the new token, and the tokens are
  :func:`zoo.generate`'s.
- :class:`ZooSeq2SeqCache`: an encoder-decoder's cache (``model.init_cache(memory, src_mask)``:
  cross-attention keys and values computed once, the decoder's state advanced token by token).

Both answer what ``GenerationMixin`` asks of a cache: :meth:`get_seq_length` (positions seen),
``reorder_cache`` (beam search), ``batch_select_indices`` and ``batch_repeat_interleave``
(``num_return_sequences``, contrastive search), ``reset``. They are not compileable
(``is_compileable`` is False, so ``generate`` never builds 4-D masks or compiles for them), and
``crop`` (assisted decoding's rollback) is refused: the zoo's caches cannot forget positions.

Shape legend: B batch, T new positions, V vocab_size, S source positions, C channels.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache

from zoo.decoding import DecodingState, padding_offsets
from zoo.errors import ConfigError

__all__ = ["ZooLMCache", "ZooSeq2SeqCache"]


class _ZooCache(Cache):
    """What both caches share: no transformers layers, no compilation, no cropping."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(layers=[])
        self.model = model  # the zoo module (not the transformers wrapper)

    def __bool__(self) -> bool:  # Cache's len() counts transformers layers, of which it has none
        return True

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_croppable(self) -> bool:
        return False

    @property
    def is_initialized(self) -> bool:
        return self.get_seq_length() > 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1  # no fixed maximum: a language model slides past max_seq_len

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise ConfigError("zoo caches cannot forget positions (crop): assisted and "
                              "speculative decoding need use_cache=False")  # fmt: skip

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat each row ``repeats`` times, in place: row ``i`` becomes rows ``i*r .. i*r+r-1``."""
        B = self.batch_size
        if B > 0:
            self.batch_select_indices(torch.arange(B).repeat_interleave(repeats))

    def update(self, *args: object, **kwargs: object) -> None:
        raise ConfigError("a zoo cache is advanced by the zoo model itself, not by update()")


class ZooLMCache(_ZooCache):
    """The decoding state of a zoo language model (:class:`zoo.decoding.DecodingState`), as a
    transformers ``Cache``: the first :meth:`advance` takes the prompt (``(B, T)``, left padding
    given by ``attention_mask``), each later one the new tokens. ``model`` is the zoo module, in
    the mode it decodes in (eval for text)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self.state: DecodingState | None = None

    def advance(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Logits ``(B, T, V)`` of ``input_ids`` ``(B, T)`` int64, given what the cache has seen.

        ``attention_mask`` ``(B, L)`` (1 at tokens, 0 at padding; ``L`` = positions so far,
        these included) matters on the first call, where it gives each row's left padding; a row
        then decodes as it does alone (logits at padding are 0).

        Raises:
            ConfigError: a mask with padding that is not on the left, or padding in new tokens.
            SequenceTooLongError: a prompt longer than ``max_seq_len``.
        """
        if self.state is None:
            offsets = None
            if attention_mask is not None:
                offsets = padding_offsets(attention_mask[:, -input_ids.shape[1] :], input_ids.shape)
            self.state = DecodingState(self.model, offsets, input_ids.shape[0])
        elif attention_mask is not None and not bool(
            attention_mask[:, -input_ids.shape[1] :].all()
        ):
            raise ConfigError("only a prompt may hold padding: new tokens are all real (mask 1)")
        return self.state.advance(input_ids)

    @property
    def restarts(self) -> int:
        """How often a full cache was re-encoded from recent tokens (past ``max_seq_len``)."""
        return 0 if self.state is None else self.state.restarts

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions seen so far, left padding included (what ``generate`` slices by)."""
        return 0 if self.state is None else self.state.seq_len

    @property
    def batch_size(self) -> int:
        if self.state is None or self.state.tokens is None:
            return -1
        return self.state.tokens.shape[0]

    def reorder_cache(self, beam_idx: Tensor) -> None:
        """Keep rows ``beam_idx`` ``(B',)`` int64, in that order (beam search)."""
        if self.state is not None:
            self.state.reorder(beam_idx)

    def batch_select_indices(self, indices: Tensor) -> None:
        self.reorder_cache(indices)

    def reset(self) -> None:
        self.state = None


class ZooSeq2SeqCache(_ZooCache):
    """An encoder-decoder's decoding cache (the zoo model's ``init_cache(memory, src_mask)``), as
    a transformers ``Cache``: made on the first :meth:`advance` from the encoder's output, then
    advanced one target token per step."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self.cache: object | None = None  # Seq2SeqCache or RNNSeq2SeqCache

    def advance(self, decoder_input_ids: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """Logits ``(B, T, V)`` of the new target tokens ``decoder_input_ids`` ``(B, T)``;
        ``memory`` ``(B, S, C)`` and ``src_mask`` ``(B, S)`` bool (True at source tokens) are
        read on the first call only.

        Raises:
            SequenceTooLongError: a target longer than ``max_seq_len``.
        """
        if self.cache is None:
            self.cache = self.model.init_cache(memory, src_mask)
        return self.model.decode(decoder_input_ids, cache=self.cache)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Target positions decoded so far."""
        return 0 if self.cache is None else int(self.cache.seq_len)  # type: ignore[attr-defined]

    @property
    def batch_size(self) -> int:
        return -1 if self.cache is None else int(self.cache.src_mask.shape[0])  # type: ignore[attr-defined]

    def reorder_cache(self, beam_idx: Tensor) -> None:
        """Beam search's step: rows ``beam_idx`` move only among one sentence's beams, so the
        source side stays where it is (``same_source=True``) and only the decoder's state moves."""
        if self.cache is not None:
            self.cache.reorder(beam_idx, same_source=True)  # type: ignore[attr-defined]

    def batch_select_indices(self, indices: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(indices)  # type: ignore[attr-defined]

    def reset(self) -> None:
        self.cache = None
