"""What the transformers wrappers of zoo models share (:mod:`zoo.integrations.transformers`):
the config with transformers' standard attribute names, and loading (every keyword of
transformers' loading, :mod:`zoo.integrations.transformers_loading`), saving and pushing (the zoo
module's own), and the zoo cache ``generate`` decodes with
(:mod:`zoo.integrations.transformers_cache`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from transformers import (
    AutoConfig,
    GenerationConfig,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

from zoo.errors import ConfigError
from zoo.integrations.transformers_cache import _ZooCache
from zoo.integrations.transformers_loading import KEYWORDS, loading_arguments
from zoo.models.registry import get_model_class
from zoo.pretrained import from_pretrained

__all__ = [
    "CACHE",
    "ENCODER_DECODERS",
    "LANGUAGE_MODELS",
    "ZooConfig",
    "ZooModel",
    "check_unused",
    "pop_cache",
]

LANGUAGE_MODELS = ("transformer_lm", "sparse_transformer_lm", "routing_transformer_lm",
                   "image_transformer_lm")  # fmt: skip
ENCODER_DECODERS = ("transformer_seq2seq", "lstm_seq2seq")
# the name transformers gives the cache in forward, prepare_inputs and outputs (5.25: "cache")
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
# transformers' standard config attributes, from the zoo fields that mean them
_STANDARD = {"hidden_size": ("d_model", "d_hidden"), "num_hidden_layers": ("n_layers",
             "n_decoder_layers"), "num_attention_heads": ("n_heads",), "intermediate_size": ("d_ff",),
             "encoder_layers": ("n_encoder_layers",), "decoder_layers": ("n_decoder_layers",),
             "vocab_size": ("vocab_size",), "max_position_embeddings": ("max_seq_len",)}  # fmt: skip


class ZooConfig(PretrainedConfig):
    """A zoo ``config.json`` (``{"model_type", "config": {...}}``) as a transformers config; the
    zoo's fields stay in ``config``, and transformers' standard attributes are derived from them
    (``hidden_size`` = ``d_model``, ``num_hidden_layers`` = ``n_layers`` (a decoder's),
    ``num_attention_heads`` = ``n_heads``, ``intermediate_size`` = ``d_ff``, ``vocab_size``,
    ``max_position_embeddings`` = ``max_seq_len``; ``None`` where a family has no such field).
    Each family registers a subclass with its ``model_type``."""

    model_type = "zoo"
    config: dict | None = None  # the zoo's own fields, as in its config.json
    zoo_version: str | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    intermediate_size: int | None = None
    encoder_layers: int | None = None
    decoder_layers: int | None = None
    tie_word_embeddings: bool = False  # the zoo module ties its own

    def __post_init__(self, **kwargs: Any) -> None:
        self.config = dict(self.config or {})
        for name, fields in _STANDARD.items():
            if getattr(self, name) is None:
                setattr(
                    self, name, next((self.config[f] for f in fields if f in self.config), None)
                )
        if self.model_type in ENCODER_DECODERS:  # the Multi30k BPE's special tokens
            from zoo.data.translation import BOS_ID, EOS_ID

            self.is_encoder_decoder = True
            self.pad_token_id = self.config.get("pad_id", 0)
            self.bos_token_id = self.decoder_start_token_id = BOS_ID
            self.eos_token_id = EOS_ID
        elif self.model_type in LANGUAGE_MODELS and self.vocab_size == 256:
            self.pad_token_id = 0  # a byte model's padding, NUL (ZooByteTokenizer); no eos
        super().__post_init__(**kwargs)

    def zoo_module(self) -> torch.nn.Module:
        """A new zoo module of this config (weights are loaded separately), refused before it is
        allocated if it cannot fit in memory (:func:`zoo.config.check_memory`)."""
        from zoo.config import check_memory

        cls = get_model_class(self.model_type)
        config = cls.config_class.from_dict(self.config)
        check_memory(config, f"{type(self).__name__}({self.model_type})")
        return cls(config)


class ZooModel(PreTrainedModel, GenerationMixin):
    """What both wrappers share: loading, saving, the cache ``generate`` makes, embeddings."""

    config_class = ZooConfig
    base_model_prefix = "zoo_model"
    main_input_name = "input_ids"
    accepts_loss_kwargs = False  # the loss is a mean over tokens (no num_items_in_batch)
    # transformers' gradient_checkpointing_enable sets the zoo module's own flag
    # (gradient_checkpointing: each block recomputed in the backward pass)
    supports_gradient_checkpointing = True

    def __init__(self, config: ZooConfig, zoo_model: torch.nn.Module | None = None) -> None:
        super().__init__(config)
        self.zoo_model = zoo_model if zoo_model is not None else config.zoo_module()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *model_args: Any,
                        config: ZooConfig | None = None, **kwargs: Any):  # fmt: skip
        """Load a zoo folder, published name or Hub repo id through :func:`zoo.from_pretrained`
        (sha256-checked, in eval mode). Every keyword of transformers' loading is taken, honoured
        or ignored as :data:`zoo.integrations.transformers_loading.KEYWORDS` states (``dtype``,
        ``torch_dtype`` and ``device_map`` as :func:`zoo.from_pretrained` takes them: ``"auto"``
        is as saved); zoo config fields are overrides.

        Raises:
            ConfigError: positional arguments, unknown keywords, a value the zoo cannot honour, or
                a ``config`` of another model type; and what :func:`zoo.from_pretrained` raises.
        """
        where = f"{cls.__name__}.from_pretrained"
        if model_args:
            raise ConfigError(f"{where}: unsupported positional arguments {list(model_args)}")
        fields: frozenset[str] = frozenset()
        if config is not None:
            # AutoConfig keeps attn_implementation= for itself; transformers' own check of it
            # would raise from deep inside PreTrainedModel.__init__
            asked = getattr(config, "_attn_implementation_internal", None)
            if asked not in (None, "eager"):
                raise ConfigError(f"{where}: attn_implementation={asked!r} is not supported: "
                                  f"{KEYWORDS['attn_implementation'][1]}")  # fmt: skip
            fields = frozenset(get_model_class(config.model_type).config_class.__dataclass_fields__)
        target, zoo_kwargs, own = loading_arguments(
            where, pretrained_model_name_or_path, kwargs, fields
        )
        module = from_pretrained(target, **zoo_kwargs)
        if config is None:
            config = AutoConfig.for_model(module.model_type, config=module.config.to_dict())
        elif config.model_type != module.model_type:
            raise ConfigError(f"{where}: config is a {config.model_type} config but "
                              f"{pretrained_model_name_or_path} holds a {module.model_type}")  # fmt: skip
        model = cls(config, zoo_model=module).eval()
        if own.get("generation_config") is not None:
            model.generation_config = own["generation_config"]
        if own.get("output_loading_info"):
            empty = {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set(),
                     "error_msgs": []}  # fmt: skip
            return model, empty  # zoo loading is strict: nothing missing or unexpected
        return model

    def save_pretrained(self, save_directory: str | os.PathLike, is_main_process: bool = True,
                        state_dict: dict[str, Tensor] | None = None, push_to_hub: bool = False,
                        **kwargs: Any) -> None:  # fmt: skip
        """The zoo module's ``save_pretrained``: ``config.json``, ``model.safetensors`` (tied
        weights once), ``tokenizer.json`` for a translation model and ``manifest.json``, each
        written whole (a temporary file renamed), so a failure leaves no half-written file. The
        folder loads with the Auto classes and :func:`zoo.from_pretrained` alike.

        ``state_dict`` (this wrapper's keys, as ``Trainer`` passes it) is saved instead of the
        current weights; ``push_to_hub=True`` then pushes (keywords of :meth:`push_to_hub`,
        ``repo_id`` defaulting to the folder's name). ``safe_serialization``, ``max_shard_size``
        and ``save_function`` are accepted and change nothing (one safetensors file).

        Raises:
            ConfigError: other keywords, or a ``state_dict`` with other keys.
        """
        hub = {k: kwargs.pop(k) for k in ("repo_id", "branch", "create_pr", "private", "token",
                                           "commit_message") if k in kwargs}  # fmt: skip
        for accepted in ("safe_serialization", "max_shard_size", "save_function"):
            kwargs.pop(accepted, None)
        if kwargs:
            raise ConfigError(f"save_pretrained: unsupported arguments {sorted(kwargs)}")
        if not is_main_process:
            return
        module = self.zoo_model if state_dict is None else self._with_state(state_dict)
        module.save_pretrained(save_directory)
        if push_to_hub:
            self.push_to_hub(hub.pop("repo_id", Path(save_directory).name), **hub)

    def _with_state(self, state_dict: dict[str, Tensor]) -> torch.nn.Module:
        """The zoo module holding ``state_dict`` (this wrapper's keys): itself when these are its
        own tensors, else a copy."""
        prefix = f"{self.base_model_prefix}."
        own = {k.removeprefix(prefix): v for k, v in state_dict.items()}
        current = self.zoo_model.state_dict()
        ptr = Tensor.data_ptr
        if own.keys() == current.keys() and all(ptr(v) == ptr(current[k]) for k, v in own.items()):
            return self.zoo_model
        import copy

        module = copy.deepcopy(self.zoo_model)
        try:
            module.load_state_dict(own)
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0]
            raise ConfigError(
                f"save_pretrained: state_dict does not fit the model: {first}"
            ) from None
        return module

    def push_to_hub(self, repo_id: str, *, branch: str | None = None, create_pr: bool = False,
                    private: bool | None = None, token: str | bool | None = None,
                    commit_message: str | None = None, **kwargs: Any):  # fmt: skip
        """The zoo module's ``push_to_hub`` (:meth:`zoo.models.base.PretrainedMixin.push_to_hub`):
        the folder :meth:`save_pretrained` writes and a model card, in one commit to ``repo_id``
        on ``branch`` (created if needed) or as a pull request (``create_pr=True``); returns the
        commit sha (a ``str`` with ``.commit_url``, ``.pr_url``, ...). ``revision`` is
        transformers' name for ``branch``.

        Raises:
            ConfigError: other keywords; and what the zoo's ``push_to_hub`` raises.
        """
        branch = kwargs.pop("revision", None) if branch is None else branch
        if kwargs:
            raise ConfigError(f"push_to_hub: unsupported arguments {sorted(kwargs)}")
        return self.zoo_model.push_to_hub(
            repo_id, branch=branch, create_pr=create_pr, private=bool(private), token=token,
            commit_message=commit_message,
        )  # fmt: skip

    def get_input_embeddings(self) -> torch.nn.Module | None:
        return getattr(self.zoo_model, "tok_emb", None) or getattr(self.zoo_model, "tgt_emb", None)

    def _prepare_cache_for_generation(self, generation_config: GenerationConfig,
                                      model_kwargs: dict, *args: Any, **kwargs: Any) -> None:  # fmt: skip
        """The cache ``generate`` decodes with: a new zoo cache, unless ``use_cache=False`` or the
        caller passed one of this model's."""
        given = model_kwargs.get(CACHE)
        if given is not None:
            if not isinstance(given, _ZooCache):
                raise ConfigError(f"generate: {CACHE}= must be a zoo cache (or left out): "
                                  f"got {type(given).__name__}")  # fmt: skip
            return
        if generation_config.use_cache is False:
            return
        if generation_config.cache_implementation not in (None, "dynamic"):
            raise ConfigError(f"generate: cache_implementation="
                              f"{generation_config.cache_implementation!r} is not available: zoo "
                              "models decode with their own cache (leave it out)")  # fmt: skip
        model_kwargs[CACHE] = self._new_cache()

    def _new_cache(self) -> _ZooCache:
        raise NotImplementedError

    def _device_inputs(self, inputs: dict[str, Any], ids: Tensor) -> dict[str, Any]:
        """``inputs``' tensors on the model's device (``generate`` may keep ``ids`` on the CPU);
        ``inputs`` themselves when ``ids`` are there already (every step of a usual call)."""
        head = getattr(self.zoo_model, "lm_head", None)  # every zoo model has one: a cheap look
        device = (
            head.weight.device if head is not None else next(self.zoo_model.parameters()).device
        )
        if ids.device == device:
            return inputs
        return {k: v.to(device) if isinstance(v, Tensor) else v for k, v in inputs.items()}


def pop_cache(kwargs: dict[str, Any]) -> _ZooCache | None:
    """The cache among ``prepare_inputs_for_generation``'s keywords (either name), or None."""
    cache = kwargs.pop(CACHE, None)
    other = kwargs.pop("past_key_values", None)
    return cache if cache is not None else other


def check_unused(where: str, kwargs: dict[str, Any]) -> None:
    """Keywords of transformers' callers that a zoo model ignores at ``None``/``False``."""
    used = sorted(k for k, v in kwargs.items() if v is not None and v is not False)
    if used:
        raise ConfigError(f"{where}: unsupported arguments {used} (zoo models take input_ids, "
                          "attention_mask, labels and a cache)")  # fmt: skip
