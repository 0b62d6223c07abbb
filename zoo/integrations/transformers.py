"""Hugging Face transformers loads zoo checkpoints (``pip install "attention-zoo[transformers]"``,
transformers 5): ``import zoo.integrations.transformers`` registers every zoo family with
``AutoConfig``, ``AutoModelForCausalLM`` (language models) or ``AutoModelForSeq2SeqLM``
(encoder-decoders), and ``AutoTokenizer``, without ``trust_remote_code``.

    import zoo.integrations.transformers as zt
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    folder = zt.checkpoint_folder("transformer_lm_small.pg19mini")  # verified, shipped or cached
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    pipeline("text-generation", model=model, tokenizer=tokenizer)("It was", max_new_tokens=40)

The loaded object is a ``PreTrainedModel`` with ``GenerationMixin`` that holds the zoo module
(``.zoo_model``, the very weights of :func:`zoo.from_pretrained`, sha256-checked), so its logits are
the zoo's. Its ``generate`` re-reads the last ``max_seq_len`` tokens at every step (zoo caches are
not transformers ``Cache`` objects: ``use_cache`` is off), which is slower than
:func:`zoo.generate` but gives the same tokens. A byte model's tokenizer maps text to its UTF-8
bytes, id = byte value, with no special tokens; a translation model's is its ``tokenizer.json``.
transformers 5 has no translation pipeline: translate with ``generate``. transformers resolves
names itself, so a published name goes through :func:`checkpoint_folder` (or
``ZooForCausalLM.from_pretrained(name)``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

try:
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
        GenerationConfig,
        GenerationMixin,
        PretrainedConfig,
        PreTrainedModel,
        PreTrainedTokenizer,
        PreTrainedTokenizerFast,
    )
    from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput, Seq2SeqLMOutput
except ModuleNotFoundError:
    raise ModuleNotFoundError(
        "zoo.integrations.transformers needs transformers 5: pip install 'attention-zoo[transformers]'"
    ) from None

from zoo.errors import ConfigError
from zoo.models.registry import get_model_class
from zoo.pretrained import from_pretrained

__all__ = [
    "ZooBPETokenizer",
    "ZooByteTokenizer",
    "ZooConfig",
    "ZooForCausalLM",
    "ZooForSeq2SeqLM",
    "checkpoint_folder",
]

LANGUAGE_MODELS = ("transformer_lm", "sparse_transformer_lm", "routing_transformer_lm",
                   "image_transformer_lm")  # fmt: skip
ENCODER_DECODERS = ("transformer_seq2seq", "lstm_seq2seq")


def checkpoint_folder(name: str, revision: str | None = None, **hub: Any) -> Path:
    """The folder of a published checkpoint (``zoo list``), verified against ``checkpoints.yaml``:
    the shipped copy, else the Hugging Face cache (``hub``: ``cache_dir``, ``local_files_only``,
    ``token``, ``force_download``). Raises what :func:`zoo.from_pretrained` raises."""
    from zoo.hub.download import resolve

    return Path(resolve(name, revision, **hub)[0])


class ZooConfig(PretrainedConfig):
    """A zoo ``config.json`` (``{"model_type", "config": {...}}``) as a transformers config; the
    zoo's fields stay in ``config``. Each family registers a subclass with its model_type."""

    model_type = "zoo"
    config: dict | None = None  # the zoo's own fields, as in its config.json
    zoo_version: str | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    tie_word_embeddings: bool = False  # the zoo module ties its own

    def __post_init__(self, **kwargs: Any) -> None:
        self.config = dict(self.config or {})
        if self.vocab_size is None:
            self.vocab_size = self.config.get("vocab_size")
        if self.max_position_embeddings is None:
            self.max_position_embeddings = self.config.get("max_seq_len")
        if self.model_type in ENCODER_DECODERS:  # the Multi30k BPE's special tokens
            from zoo.data.translation import BOS_ID, EOS_ID, PAD_ID

            self.is_encoder_decoder = True
            self.pad_token_id, self.bos_token_id, self.eos_token_id = PAD_ID, BOS_ID, EOS_ID
            self.decoder_start_token_id = BOS_ID
        super().__post_init__(**kwargs)

    def zoo_module(self) -> torch.nn.Module:
        """A new zoo module of this config (weights are loaded separately), refused before it is
        allocated if it cannot fit in memory (:func:`zoo.config.check_memory`)."""
        from zoo.config import check_memory

        cls = get_model_class(self.model_type)
        config = cls.config_class.from_dict(self.config)
        check_memory(config, f"{type(self).__name__}({self.model_type})")
        return cls(config)


class _ZooLoading:
    """``from_pretrained`` of the transformers classes, through :func:`zoo.from_pretrained`."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any,
                        config: ZooConfig | None = None, revision: str | None = None,
                        dtype: torch.dtype | str | None = None, device_map: Any = None,
                        **kwargs: Any):  # fmt: skip
        """Load through :func:`zoo.from_pretrained` (sha256-checked): a zoo folder, a published
        name or a Hub repo id; ``dtype`` (``"auto"``: as saved), ``device_map`` (one device),
        ``cache_dir``, ``local_files_only``, ``token``, ``force_download`` as transformers names
        them. Other keyword arguments are a one-line ConfigError."""
        hub = {k: kwargs.pop(k) for k in ("cache_dir", "local_files_only", "token", "force_download")
               if k in kwargs}  # fmt: skip
        for ignored in ("trust_remote_code", "_from_auto", "adapter_kwargs", "_commit_hash"):
            kwargs.pop(ignored, None)
        if args or kwargs:
            raise ConfigError(f"{cls.__name__}.from_pretrained: unsupported arguments "
                              f"{sorted(kwargs) or list(args)}")  # fmt: skip
        dtype = None if dtype in (None, "auto") else getattr(torch, str(dtype).removeprefix("torch."))
        module = from_pretrained(pretrained_model_name_or_path, revision=revision, dtype=dtype,
                                 device=device_map, **hub)  # fmt: skip
        if config is None:
            config = AutoConfig.for_model(module.model_type, config=module.config.to_dict())
        return cls(config, zoo_model=module).eval()


class ZooForCausalLM(_ZooLoading, PreTrainedModel, GenerationMixin):
    """A zoo language model as a transformers causal LM: ``input_ids`` ``(B, T)`` int64 ->
    ``CausalLMOutput`` with ``logits`` ``(B, T, V)`` (fp32 weights unless loaded with ``dtype``)
    and, given ``labels``, the mean next-token cross-entropy ``loss`` in nats.

    ``attention_mask`` is accepted for transformers' callers and must be all ones: zoo models
    take no padding (a left-padded batch would change what content routing sees).
    """

    config_class = ZooConfig
    base_model_prefix = "zoo_model"
    main_input_name = "input_ids"
    _supports_cache_class = False

    def __init__(self, config: ZooConfig, zoo_model: torch.nn.Module | None = None) -> None:
        super().__init__(config)
        self.zoo_model = zoo_model if zoo_model is not None else config.zoo_module()
        self.generation_config = GenerationConfig(use_cache=False, do_sample=False)

    def get_input_embeddings(self) -> torch.nn.Module | None:
        return getattr(self.zoo_model, "tok_emb", None)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **_: Any) -> CausalLMOutput:  # fmt: skip
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ConfigError("zoo models take no padding: pass rows of equal length, one row "
                              "at a time, or no attention_mask")  # fmt: skip
        logits = self.zoo_model(input_ids[:, -self.config.max_position_embeddings :])
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
            )
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, **kwargs: Any) -> dict:
        return {"input_ids": input_ids}  # the whole sequence at every step (no cache)


class _Encoder(torch.nn.Module):
    """``get_encoder()`` of :class:`ZooForSeq2SeqLM`: source ids -> the zoo encoder's output."""

    def __init__(self, zoo_model: torch.nn.Module) -> None:
        super().__init__()
        self.zoo_model = zoo_model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **_: Any) -> BaseModelOutput:  # fmt: skip
        return BaseModelOutput(last_hidden_state=self.zoo_model.encode(input_ids)[0])


class ZooForSeq2SeqLM(_ZooLoading, PreTrainedModel, GenerationMixin):
    """A zoo encoder-decoder (Transformer or LSTM with attention, Multi30k BPE ids) as a
    transformers seq2seq LM: source ``input_ids`` ``(B, S)`` (padded with ``pad_token_id``) and
    ``decoder_input_ids`` ``(B, T)`` (BOS first) -> ``Seq2SeqLMOutput`` with ``logits``
    ``(B, T, V)``. The source mask is ``input_ids != pad`` (or ``attention_mask``), as the zoo
    computes it. ``generate`` decodes without a cache; its beam search is transformers' (its
    ``length_penalty`` is an exponent of the length, not the zoo's GNMT alpha), so only greedy
    search (``num_beams=1``) is the same as ``model.generate`` of the zoo module."""

    config_class = ZooConfig
    base_model_prefix = "zoo_model"
    main_input_name = "input_ids"
    _supports_cache_class = False

    def __init__(self, config: ZooConfig, zoo_model: torch.nn.Module | None = None) -> None:
        super().__init__(config)
        self.zoo_model = zoo_model if zoo_model is not None else config.zoo_module()
        self.generation_config = GenerationConfig(
            use_cache=False, do_sample=False, num_beams=1, bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
            max_length=config.max_position_embeddings,
        )  # fmt: skip

    def get_encoder(self) -> torch.nn.Module:
        return _Encoder(self.zoo_model)

    def forward(self, input_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None,
                encoder_outputs: BaseModelOutput | tuple | None = None,
                labels: torch.Tensor | None = None, **_: Any) -> Seq2SeqLMOutput:  # fmt: skip
        if encoder_outputs is None:
            memory, src_mask = self.zoo_model.encode(input_ids)
        else:
            memory = encoder_outputs[0]
            if attention_mask is not None:
                src_mask = attention_mask.bool()
            elif input_ids is not None:
                src_mask = input_ids != self.config.pad_token_id
            else:
                src_mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        if decoder_input_ids is None:
            raise ConfigError("decoder_input_ids are needed: BOS then the target tokens")
        logits = self.zoo_model.decode(decoder_input_ids, memory, src_mask)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100
            )
        return Seq2SeqLMOutput(loss=loss, logits=logits, encoder_last_hidden_state=memory)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, encoder_outputs=None,
                                      attention_mask=None, **kwargs: Any) -> dict:  # fmt: skip
        """Every step reads the whole target so far (no cache)."""
        return {"decoder_input_ids": input_ids, "encoder_outputs": encoder_outputs,
                "attention_mask": attention_mask}  # fmt: skip


class ZooByteTokenizer(PreTrainedTokenizer):
    """Text <-> UTF-8 bytes, id = byte value (0-255), no special tokens: the zoo's byte models'
    "tokenizer". Needs no files; decoding replaces invalid UTF-8."""

    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return 256

    def get_vocab(self) -> dict[str, int]:
        return {chr(i): i for i in range(256)}

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        return ord(token) if len(token) == 1 and ord(token) < 256 else 0

    def _convert_id_to_token(self, index: int) -> str:
        return chr(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return bytes(ord(t) for t in tokens if len(t) == 1 and ord(t) < 256).decode(
            "utf-8", errors="replace"
        )

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()  # nothing to save: the vocabulary is the 256 byte values


class ZooBPETokenizer(PreTrainedTokenizerFast):
    """The translation checkpoints' ``tokenizer.json`` (the Multi30k BPE, ``tokenizers``), with its
    special tokens named: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3. A source sentence is
    its plain ids, as the zoo encodes it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for key, token in (("pad_token", "<pad>"), ("bos_token", "<s>"), ("eos_token", "</s>"),
                           ("unk_token", "<unk>")):  # fmt: skip
            kwargs.setdefault(key, token)
        super().__init__(*args, **kwargs)

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *args: Any, **kwargs: Any):
        """The folder's ``tokenizer.json`` (a zoo checkpoint folder: :func:`checkpoint_folder`)."""
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(f"{folder} has no tokenizer.json: pass a zoo translation "
                              "checkpoint's folder (checkpoint_folder(name))")  # fmt: skip
        return cls(tokenizer_file=str(path))


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


_register()
