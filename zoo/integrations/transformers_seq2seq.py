"""The transformers wrapper of the zoo's encoder-decoders (:mod:`zoo.integrations.transformers`):
``AutoModelForSeq2SeqLM`` loads them; ``generate`` decodes with the zoo's own decoding cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from transformers import GenerationConfig
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from zoo.errors import ConfigError
from zoo.integrations.transformers_base import CACHE, ZooConfig, ZooModel, check_unused, pop_cache
from zoo.integrations.transformers_cache import ZooSeq2SeqCache
from zoo.models.outputs import seq2seq_loss, shift_right

__all__ = ["ZooEncoderOutput", "ZooForSeq2SeqLM"]


@dataclass
class ZooEncoderOutput(BaseModelOutput):
    """The encoder's output with the source mask the decoder attends with: ``last_hidden_state``
    ``(B, S, C)`` and ``src_mask`` ``(B, S)`` bool (True at source tokens; the LSTM's learned sink
    included), expanded with it for beams."""

    src_mask: Tensor | None = None


class _Encoder(torch.nn.Module):
    """``get_encoder()`` of :class:`ZooForSeq2SeqLM`: source ids -> :class:`ZooEncoderOutput`."""

    def __init__(self, zoo_model: torch.nn.Module) -> None:
        super().__init__()
        self.zoo_model = zoo_model

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                **_: Any) -> ZooEncoderOutput:  # fmt: skip
        memory, src_mask = self.zoo_model.encode(input_ids)
        return ZooEncoderOutput(last_hidden_state=memory, src_mask=src_mask)


class ZooForSeq2SeqLM(ZooModel):
    """A zoo encoder-decoder (Transformer or LSTM with attention, Multi30k BPE ids) as a
    transformers seq2seq LM: source ``input_ids`` ``(B, S)`` (padded with ``pad_token_id``) and
    ``decoder_input_ids`` ``(B, T)`` (BOS first; made from ``labels`` when left out) ->
    ``Seq2SeqLMOutput`` with ``logits`` ``(B, T, V)`` and, given ``labels`` ``(B, T)``, the mean
    cross-entropy ``loss`` in nats. The source mask is the zoo's (``input_ids != pad``).

    ``generate`` decodes with a :class:`ZooSeq2SeqCache` (one decoder step per token); greedy
    search (``num_beams=1``) gives the zoo's ``greedy_search`` tokens; beam search is transformers'
    (``length_penalty`` is its exponent of the length, not the zoo's GNMT alpha).

    Raises:
        ConfigError: no ``decoder_input_ids`` nor ``labels``; keywords the zoo does not take.
        SequenceTooLongError: a source or target longer than ``max_seq_len``.
    """

    def __init__(self, config: ZooConfig, zoo_model: torch.nn.Module | None = None) -> None:
        super().__init__(config, zoo_model)
        self.generation_config = GenerationConfig(
            do_sample=False, num_beams=1, bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
        )  # fmt: skip

    def generate(self, inputs: Tensor | None = None, generation_config: GenerationConfig | None = None,
                 **kwargs: Any) -> Any:  # fmt: skip
        """transformers' ``generate``; without ``max_length``, ``max_new_tokens`` or a
        ``generation_config``, a translation may take the model's ``max_seq_len`` positions
        (transformers' default would stop it after 20). Set here rather than in the generation
        config, which would make transformers warn at every ``max_new_tokens``."""
        if generation_config is None and not {"max_length", "max_new_tokens"} & kwargs.keys():
            kwargs["max_length"] = self.config.max_position_embeddings
        return super().generate(inputs, generation_config, **kwargs)

    def _new_cache(self) -> ZooSeq2SeqCache:
        return ZooSeq2SeqCache(self.zoo_model)

    def get_encoder(self, modality: str | None = None) -> torch.nn.Module:
        return _Encoder(self.zoo_model)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                decoder_input_ids: Tensor | None = None,
                encoder_outputs: BaseModelOutput | tuple | None = None, *,
                cache: ZooSeq2SeqCache | None = None,
                past_key_values: ZooSeq2SeqCache | None = None, labels: Tensor | None = None,
                use_cache: bool | None = None, return_dict: bool = True,
                **kwargs: Any) -> Seq2SeqLMOutput:  # fmt: skip
        check_unused("ZooForSeq2SeqLM.forward", kwargs)
        if decoder_input_ids is None and labels is not None:
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id,
                                            self.config.pad_token_id)  # fmt: skip
        if decoder_input_ids is None:
            raise ConfigError(
                "decoder_input_ids are needed: BOS then the target tokens (or labels)"
            )
        cache = cache if cache is not None else past_key_values
        if cache is None and use_cache:
            cache = self._new_cache()
        if cache is not None and not isinstance(cache, ZooSeq2SeqCache):
            raise ConfigError(f"ZooForSeq2SeqLM.forward: the cache must be a ZooSeq2SeqCache (or "
                              f"none), got {type(cache).__name__}")  # fmt: skip
        memory = src_mask = None
        if cache is None or cache.get_seq_length() == 0:
            memory, src_mask = self._memory(input_ids, attention_mask, encoder_outputs)
        if cache is None:
            logits = self.zoo_model.decode(decoder_input_ids, memory, src_mask)
        else:
            logits = cache.advance(decoder_input_ids, memory, src_mask)
        loss = seq2seq_loss(logits, labels) if labels is not None else None
        out = Seq2SeqLMOutput(loss=loss, logits=logits, encoder_last_hidden_state=memory,
                              **{CACHE: cache})  # fmt: skip
        return out if return_dict else out.to_tuple()

    def _memory(self, input_ids: Tensor | None, attention_mask: Tensor | None,
                encoder_outputs: BaseModelOutput | tuple | None) -> tuple[Tensor, Tensor]:  # fmt: skip
        """The encoder's output ``(B, S, C)`` and the source mask ``(B, S)`` bool: encoded here,
        or taken from ``encoder_outputs`` (its ``src_mask``, else ``attention_mask`` or
        ``input_ids != pad``, with the LSTM sink's position added)."""
        if encoder_outputs is None:
            if input_ids is None:
                raise ConfigError("ZooForSeq2SeqLM.forward needs input_ids or encoder_outputs")
            return self.zoo_model.encode(input_ids)
        memory = encoder_outputs[0]
        src_mask = getattr(encoder_outputs, "src_mask", None)
        if src_mask is None:
            if attention_mask is not None:
                src_mask = attention_mask.bool()
            elif input_ids is not None:
                src_mask = input_ids != self.config.pad_token_id
            else:
                src_mask = memory.new_ones(memory.shape[:2], dtype=torch.bool)
            if src_mask.shape[1] == memory.shape[1] - 1:  # the LSTM's learned sink
                src_mask = torch.cat([src_mask, src_mask.new_ones(src_mask.shape[0], 1)], 1)
        return memory, src_mask

    def prepare_inputs_for_generation(self, input_ids: Tensor, next_sequence_length: int | None = None,
                                      **kwargs: Any) -> dict:  # fmt: skip
        """One step's decoder inputs: with a cache, the new target token(s); without, the whole
        target so far. The encoder's output travels along."""
        cache = pop_cache(kwargs)
        for dropped in ("labels", "decoder_position_ids", "is_first_iteration",
                        "decoder_attention_mask", "next_sequence_length"):  # fmt: skip
            kwargs.pop(dropped, None)
        ids = input_ids
        if cache is not None:
            kwargs[CACHE] = cache
            ids = (
                input_ids if next_sequence_length is None else input_ids[:, -next_sequence_length:]
            )
        return self._device_inputs({"decoder_input_ids": ids, **kwargs}, ids)
