"""Hugging Face transformers loads, generates with, fine-tunes and saves zoo checkpoints
(``pip install "attention-zoo[transformers]"``, transformers 5): ``import
zoo.integrations.transformers`` registers every zoo family with ``AutoConfig``,
``AutoModelForCausalLM`` (language models) or ``AutoModelForSeq2SeqLM`` (encoder-decoders), and
``AutoTokenizer``, without ``trust_remote_code``.

    import zoo.integrations.transformers as zt
    from transformers import AutoModelForCausalLM, pipeline

    folder = zt.checkpoint_folder("transformer_lm_small.pg19mini")  # verified, shipped or cached
    model = AutoModelForCausalLM.from_pretrained(folder)
    pipeline("text-generation", model=folder)(["It was", "Call me"], batch_size=2,
                                              max_new_tokens=40, do_sample=False)

- **Loading.** The model is a ``PreTrainedModel`` with ``GenerationMixin`` holding the zoo module
  (``.zoo_model``, loaded by :func:`zoo.from_pretrained`, sha256-checked), so its logits are the
  zoo's. ``from_pretrained`` takes every keyword transformers' loading passes, read from the
  installed transformers: each is honoured or ignored for a stated reason
  (:mod:`zoo.integrations.transformers_loading`); ``dtype="auto"`` loads as saved; a zoo config
  field (``dropout=0.0``) is an override; anything else is a one-line ``ConfigError``. The config
  has transformers' standard names (``hidden_size``, ``num_hidden_layers``, ...).
- **Generating.** ``generate`` decodes with a transformers ``Cache`` holding the zoo's own
  decoding state (:mod:`zoo.integrations.transformers_cache`): one forward call per new token on
  that token only, and exactly :func:`zoo.generate`'s tokens (greedy, and sampled under the same
  seed), past ``max_seq_len`` too (a full cache is re-encoded from the last ``max_seq_len // 2``
  tokens: those calls read the window; transformers' one-time note that the call "exceeded the
  model's predefined maximum length" is then harmless). An ``attention_mask`` with left padding
  gives each row the tokens it gets alone. ``use_cache=False`` re-reads the last ``max_seq_len``
  tokens each step. Speed against :func:`zoo.generate`: docs/bench/transformers_generate.md.
  Encoder-decoders: greedy search equals the zoo's ``greedy_search``; beam search is
  transformers' own (its ``length_penalty`` is an exponent of the length, not the zoo's GNMT
  alpha), reordering the zoo cache. transformers 5 has no translation pipeline: use ``generate``.
- **Tokenizers.** A byte model's maps text to its UTF-8 bytes, id = byte value; byte 0 (NUL) is its
  ``eos_token`` and ``pad_token`` (no zoo text corpus contains it) and it pads on the left, as
  ``generate`` wants. A translation model's is its folder's ``tokenizer.json``.
- **Training and saving.** ``forward(input_ids, labels=input_ids)`` gives the mean next-token loss
  in nats, so transformers' ``Trainer`` fine-tunes the model; ``save_pretrained`` and
  ``push_to_hub`` are the zoo module's (tied embeddings and all): the folder loads with
  ``AutoModelForCausalLM.from_pretrained`` and :func:`zoo.from_pretrained` alike.

transformers resolves names itself, so a published name goes through :func:`checkpoint_folder`
(or ``ZooForCausalLM.from_pretrained(name)``); :func:`wrap` wraps a zoo module in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

try:
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
        GenerationConfig,
    )
    from transformers.modeling_outputs import CausalLMOutputWithPast
except ModuleNotFoundError:
    raise ModuleNotFoundError(
        "zoo.integrations.transformers needs transformers 5: pip install 'attention-zoo[transformers]'"
    ) from None

from zoo.errors import ConfigError
from zoo.integrations.transformers_base import (
    CACHE,
    ENCODER_DECODERS,
    LANGUAGE_MODELS,
    ZooConfig,
    ZooModel,
    check_unused,
    pop_cache,
)
from zoo.integrations.transformers_cache import ZooLMCache, ZooSeq2SeqCache
from zoo.integrations.transformers_seq2seq import ZooForSeq2SeqLM
from zoo.integrations.transformers_tokenizers import ZooBPETokenizer, ZooByteTokenizer
from zoo.models.outputs import causal_lm_loss

__all__ = [
    "ZooBPETokenizer",
    "ZooByteTokenizer",
    "ZooConfig",
    "ZooForCausalLM",
    "ZooForSeq2SeqLM",
    "ZooLMCache",
    "ZooSeq2SeqCache",
    "checkpoint_folder",
    "wrap",
]


def checkpoint_folder(name: str, revision: str | None = None, **hub: Any) -> Path:
    """The folder of a published checkpoint (``zoo list``), verified against ``checkpoints.yaml``:
    the shipped copy, else the Hugging Face cache (``hub``: ``cache_dir``, ``local_files_only``,
    ``token``, ``force_download``). Raises what :func:`zoo.from_pretrained` raises."""
    from zoo.hub.download import resolve

    return Path(resolve(name, revision, **hub)[0])


def wrap(module: torch.nn.Module) -> ZooForCausalLM | ZooForSeq2SeqLM:
    """The transformers model (the class registered for its ``model_type``) around the zoo
    ``module``, sharing its weights and keeping its mode (train or eval).

    Raises:
        ConfigError: ``module`` is not a zoo model of a registered family.
    """
    model_type = getattr(module, "model_type", None)
    if model_type not in LANGUAGE_MODELS + ENCODER_DECODERS:
        raise ConfigError(f"{type(module).__name__} is not a zoo model: wrap takes one of "
                          f"{', '.join(LANGUAGE_MODELS + ENCODER_DECODERS)}")  # fmt: skip
    config = AutoConfig.for_model(model_type, config=module.config.to_dict())
    return _CLASSES[model_type](config, zoo_model=module).train(module.training)


class ZooForCausalLM(ZooModel):
    """A zoo language model as a transformers causal LM: ``input_ids`` ``(B, T)`` int64 ->
    ``CausalLMOutputWithPast`` with ``logits`` ``(B, T, V)`` (the weights' dtype) and, given
    ``labels`` (usually ``input_ids``: shifted inside, -100 ignored), the mean next-token
    cross-entropy ``loss`` in nats.

    ``attention_mask`` ``(B, T)`` may pad rows on the left (each row's logits are those it gets
    alone; 0 at padding) or the right. With ``use_cache=True`` or a :class:`ZooLMCache`
    (``cache=``, transformers 5.25's name; ``past_key_values=`` too) the call decodes
    incrementally: the first takes the prompt, later ones the new tokens, and the output carries
    the cache. ``output_hidden_states`` works without a cache.

    Raises:
        ConfigError: bad masks or labels (as the zoo model raises them), hidden states with a
            cache, a cache of another kind, or keywords the zoo does not take (``inputs_embeds``,
            ``position_ids``, ``output_attentions=True``).
        SequenceTooLongError: more than ``max_seq_len`` positions without a cache.
    """

    def __init__(self, config: ZooConfig, zoo_model: torch.nn.Module | None = None) -> None:
        super().__init__(config, zoo_model)
        self.generation_config = GenerationConfig(
            pad_token_id=getattr(config, "pad_token_id", None)
        )

    def _new_cache(self) -> ZooLMCache:
        return ZooLMCache(self.zoo_model)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, *,
                cache: ZooLMCache | None = None, past_key_values: ZooLMCache | None = None,
                labels: Tensor | None = None, use_cache: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool = True,
                **kwargs: Any) -> CausalLMOutputWithPast:  # fmt: skip
        check_unused("ZooForCausalLM.forward", kwargs)
        cache = cache if cache is not None else past_key_values
        if cache is None and use_cache:
            cache = self._new_cache()
        hidden = None
        if cache is None:
            out = self.zoo_model(input_ids, attention_mask, labels=labels,
                                 output_hidden_states=bool(output_hidden_states))  # fmt: skip
            logits, loss, hidden = out.logits, out.loss, out.hidden_states
        elif not isinstance(cache, ZooLMCache):
            raise ConfigError(f"ZooForCausalLM.forward: the cache must be a ZooLMCache (or none), "
                              f"got {type(cache).__name__}")  # fmt: skip
        elif output_hidden_states:
            raise ConfigError("ZooForCausalLM.forward: hidden states come without a cache "
                              "(use_cache=False)")  # fmt: skip
        else:
            logits = cache.advance(input_ids, attention_mask)  # (B, T, V)
            loss = causal_lm_loss(logits, labels) if labels is not None else None
        out = CausalLMOutputWithPast(
            loss=loss, logits=logits, hidden_states=hidden, **{CACHE: cache}
        )
        return out if return_dict else out.to_tuple()

    def prepare_inputs_for_generation(
        self,
        input_ids: Tensor,
        next_sequence_length: int | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        **kwargs: Any,
    ) -> dict:
        """One step's inputs: with a cache, the positions it has not seen (the prompt, then one
        token); without, the last ``max_seq_len`` positions (and their mask)."""
        cache = pop_cache(kwargs)
        if inputs_embeds is not None:
            raise ConfigError("generate: zoo models take input_ids, not inputs_embeds")
        for dropped in ("labels", "position_ids", "is_first_iteration", "next_sequence_length"):
            kwargs.pop(dropped, None)
        if cache is None:  # the last max_seq_len positions at every step
            n = self.config.max_position_embeddings
            ids = input_ids[:, -n:]
            mask = None if attention_mask is None else attention_mask[:, -n:]
        else:  # the positions the cache has not seen
            n = next_sequence_length
            ids = input_ids if n is None else input_ids[:, -n:]
            mask, kwargs[CACHE] = attention_mask, cache
        return self._device_inputs({"input_ids": ids, "attention_mask": mask, **kwargs}, ids)


_CLASSES: dict[str, type[ZooModel]] = {}  # model_type -> its registered transformers class


def _register() -> None:
    """One config and one model class per zoo family, registered with the Auto classes; byte
    models get :class:`ZooByteTokenizer`, encoder-decoders their folder's ``tokenizer.json``."""
    for model_type in LANGUAGE_MODELS + ENCODER_DECODERS:
        name = "".join(part.title() for part in model_type.split("_"))
        config_cls = type(f"Zoo{name}Config", (ZooConfig,), {"model_type": model_type})
        AutoConfig.register(model_type, config_cls, exist_ok=True)
        if model_type in LANGUAGE_MODELS:
            base, auto = ZooForCausalLM, AutoModelForCausalLM
            AutoTokenizer.register(config_cls, slow_tokenizer_class=ZooByteTokenizer,
                                   exist_ok=True)  # fmt: skip
        else:
            base, auto = ZooForSeq2SeqLM, AutoModelForSeq2SeqLM
            AutoTokenizer.register(config_cls, fast_tokenizer_class=ZooBPETokenizer,
                                   exist_ok=True)  # fmt: skip
        model_cls = type(f"Zoo{name}For{base.__name__[6:]}", (base,), {"config_class": config_cls})
        auto.register(config_cls, model_cls, exist_ok=True)
        _CLASSES[model_type] = model_cls


_register()
