"""What the zoo's models return, and the padding and label conventions of Hugging Face
transformers that their ``forward`` follows.

``model(input_ids)`` returns a :class:`CausalLMOutput` (language models) or a
:class:`Seq2SeqLMOutput` (encoder-decoders): dataclasses with transformers' field names
(``.logits``, ``.loss``, ``.past_key_values``, ``.hidden_states``), indexable as transformers'
``ModelOutput`` is (``out[0]``, ``out["logits"]``), or a plain tuple with ``return_dict=False``.

Padding: an ``attention_mask`` ``(B, T)`` of ones (tokens) and zeros (padding) is a batch of rows
padded on the left or the right (:func:`zoo.decoding.padding_offsets`).

Labels (:func:`causal_lm_loss`): ``labels`` ``(B, T)`` are the input ids themselves; position
``t``'s logits predict label ``t + 1`` (the shift happens inside, as in transformers), and
``-100`` marks positions left out of the loss (:data:`IGNORE_INDEX`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from zoo.errors import ConfigError

__all__ = [
    "IGNORE_INDEX",
    "CausalLMOutput",
    "Seq2SeqLMOutput",
    "causal_lm_loss",
    "seq2seq_loss",
    "shift_right",
]

IGNORE_INDEX = -100
"""The label that leaves a position out of the loss (PyTorch's ``cross_entropy`` default)."""


class _Output:
    """transformers' ``ModelOutput`` habits: ``out[0]`` and ``out["logits"]``, and
    :meth:`to_tuple` (the fields that are not ``None``, in order)."""

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(v for f in fields(self) if (v := getattr(self, f.name)) is not None)

    def __getitem__(self, key: int | slice | str) -> Any:
        if isinstance(key, str):
            if key not in {f.name for f in fields(self)} or getattr(self, key) is None:
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]

    def keys(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


@dataclass(kw_only=True)
class CausalLMOutput(_Output):
    """A language model's output.

    Attributes:
        loss: 0-dim float32, the mean next-token cross-entropy in nats over labels that are
            not :data:`IGNORE_INDEX` (only given ``labels``).
        logits: ``(B, T, V)`` next-token logits, the model's dtype.
        past_key_values: the key/value cache after this call (given one, or ``use_cache=True``).
        hidden_states: ``n_layers + 1`` tensors ``(B, T, C)``: the embeddings and each block's
            output, the last after the final LayerNorm (``output_hidden_states=True``).
    """

    loss: Tensor | None = None
    logits: Tensor
    past_key_values: Any = None
    hidden_states: tuple[Tensor, ...] | None = None


@dataclass(kw_only=True)
class Seq2SeqLMOutput(_Output):
    """An encoder-decoder's output.

    Attributes:
        loss: 0-dim float32, the mean cross-entropy in nats of ``logits`` against ``labels``
            (not shifted: label ``t`` is the target token at decoder position ``t``).
        logits: ``(B, T, V)``, the decoder's logits.
        encoder_last_hidden_state: ``(B, S, C)``, the encoder's output.
    """

    loss: Tensor | None = None
    logits: Tensor
    encoder_last_hidden_state: Tensor | None = None


def causal_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean next-token cross-entropy (nats, float32) of ``logits`` ``(B, T, V)`` against
    ``labels`` ``(B, T)`` int64 shifted by one: logits at ``t`` predict ``labels[:, t + 1]``;
    :data:`IGNORE_INDEX` positions are left out.

    Raises:
        ConfigError: ``labels`` are not ``(B, T)`` integers of the logits' batch and length.
    """
    if labels.shape != logits.shape[:2] or labels.is_floating_point():
        raise ConfigError(
            f"labels must be (batch, length) token ids like input_ids {tuple(logits.shape[:2])}, "
            f"got {labels.dtype} {tuple(labels.shape)}: pass labels=input_ids (the shift is "
            "inside), with -100 where a position is left out"
        )
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX
    )


def seq2seq_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy (nats, float32) of decoder ``logits`` ``(B, T, V)`` against ``labels``
    ``(B, T)`` at the same positions; :data:`IGNORE_INDEX` positions are left out.

    Raises:
        ConfigError: ``labels`` do not have the logits' batch and length.
    """
    if labels.shape != logits.shape[:2] or labels.is_floating_point():
        raise ConfigError(
            f"labels must be (batch, length) target ids {tuple(logits.shape[:2])}, got "
            f"{labels.dtype} {tuple(labels.shape)}"
        )
    return F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX
    )


def shift_right(labels: Tensor, start_id: int, pad_id: int) -> Tensor:
    """The decoder input of target ``labels`` ``(B, T)``: ``start_id`` then the labels without
    their last token, :data:`IGNORE_INDEX` replaced by ``pad_id`` (transformers' convention)."""
    shifted = labels.new_full(labels.shape, pad_id)
    shifted[:, 0] = start_id
    shifted[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == IGNORE_INDEX, pad_id)
    return shifted


def seq2seq_forward(
    model: Any,
    input_ids: Tensor,
    decoder_input_ids: Tensor | None = None,
    *,
    attention_mask: Tensor | None = None,
    labels: Tensor | None = None,
    return_dict: bool = True,
) -> Seq2SeqLMOutput | tuple:
    """``forward`` of the encoder-decoders (``model.encode``/``model.decode``), with
    transformers' keywords: source ``input_ids`` ``(B, S)`` int64 padded with
    ``model.config.pad_id``; ``decoder_input_ids`` ``(B, T)`` (BOS, then the target), or
    ``labels`` ``(B, T)`` (the target then EOS), from which they are made (:func:`shift_right`);
    ``attention_mask`` ``(B, S)`` must mark the same padding as ``input_ids`` does.

    Raises:
        ConfigError: neither ``decoder_input_ids`` nor ``labels``; an ``attention_mask`` that
            disagrees with the padding of ``input_ids``; bad ``labels``.
    """
    from zoo.data.translation import BOS_ID

    pad = model.config.pad_id
    if attention_mask is not None:
        if tuple(attention_mask.shape) != tuple(input_ids.shape) or bool(
            (attention_mask.bool() != (input_ids != pad)).any()
        ):
            raise ConfigError(
                f"attention_mask disagrees with the padding of input_ids (pad id {pad}): pass "
                "the mask the tokenizer returned, or none (the model masks its pad id)"
            )
    if decoder_input_ids is None:
        if labels is None:
            raise ConfigError("pass decoder_input_ids (BOS, then the target) or labels")
        decoder_input_ids = shift_right(labels, BOS_ID, pad)
    memory, src_mask = model.encode(input_ids)
    logits = model.decode(decoder_input_ids, memory, src_mask)
    out = Seq2SeqLMOutput(
        loss=seq2seq_loss(logits, labels) if labels is not None else None,
        logits=logits,
        encoder_last_hidden_state=memory,
    )
    return out if return_dict else out.to_tuple()
