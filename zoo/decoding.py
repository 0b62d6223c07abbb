"""Incremental decoding of a batch of token rows, padded on the left or not, with any zoo
language model's key/value cache: what :func:`zoo.generate` and transformers' ``generate``
(through :mod:`zoo.integrations.transformers`) share, so both give the same tokens.

Two rules make a row's tokens the ones it gets alone:

- **Padding.** Rows with the same number of left padding positions form a group, decoded with a
  cache of its own and without the padding, so each row's positions start at 0 whatever the
  attention pattern (dense, local, strided or fixed blocks, routing windows). A batch without
  padding is one group: the model is called once per step.
- **Past the context.** When a group's cache is full (``max_seq_len`` positions), decoding goes on
  by re-encoding the group's most recent ``max_seq_len // 2`` tokens into a fresh cache (a
  sliding window); that call reads those positions, every other call only the new ones.

With ``compile=True`` the one-token steps run the model through ``torch.compile`` with dynamic
shapes (:func:`compiled_step`): one graph serves every cache length and batch size, so the
Python and dispatch overhead of the step's small operations goes, and the arithmetic is the
eager model's. The prompt and the re-encodings stay eager. Where the backend cannot compile a
model's step, a warning says so and decoding goes on eagerly, from a cache rebuilt from the
tokens (a failed compile may have run part of the step); that model's later decodings do not
try again.

Padding (:func:`padding_spans`): an ``attention_mask`` ``(B, T)`` of ones (tokens) and zeros
(padding) is a batch of rows padded on the left (zeros first, as transformers' ``generate``
wants) or on the right (zeros last). Anything else (holes inside a row, a row of only padding) is
refused: no zoo model has a meaning for it.

Shape legend: B batch, T new positions, V vocab_size.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from zoo.errors import ConfigError, compile_failure

__all__ = ["DecodingState", "compiled_step", "padding_offsets", "padding_spans"]


@dataclass
class _Group:
    """Rows ``rows`` ``(b,)`` int64 with ``offset`` left padding positions, and their cache."""

    offset: int
    rows: Tensor
    cache: object = None
    every: bool = False  # the group is the whole batch, in order: no gathering


class DecodingState:
    """The caches of a batch being decoded by ``model`` (``forward(ids, past_key_values=)``,
    ``init_cache(batch)``, ``config.max_seq_len``), one per group of equal left padding.

    Args:
        model: a zoo language model, in the mode it should decode in (eval for text).
        offsets: ``(B,)`` int64, each row's left padding positions
            (:func:`zoo.models.outputs.padding_offsets`), or ``None`` for none.
        batch_size: ``B`` (when ``offsets`` is ``None``).
        compile: run the one-token steps compiled (:func:`compiled_step`); the first such step
            compiles (seconds), every later one reuses the graph. Ignored for a model whose step
            failed to compile before.

    Raises:
        ConfigError: neither ``offsets`` nor ``batch_size``.
    """

    def __init__(
        self,
        model: nn.Module,
        offsets: Tensor | None = None,
        batch_size: int | None = None,
        *,
        compile: bool = False,
    ) -> None:
        if offsets is None and batch_size is None:
            raise ConfigError("DecodingState needs the rows' padding offsets or a batch size")
        self.model = model
        compile = compile and model not in _NOT_COMPILED
        self.step = compiled_step(model) if compile else model  # the one-token forward
        self.max_len: int = model.config.max_seq_len  # type: ignore[union-attr]
        self.tokens: Tensor | None = None  # (B, L): every position so far, padding included
        self.restarts = 0  # caches re-encoded from recent tokens (past the context)
        if offsets is None or not bool(offsets.any()):
            B = batch_size if offsets is None else offsets.shape[0]
            self.groups = [_Group(0, torch.arange(B), every=True)]
        else:
            self.groups = [
                _Group(int(n), (offsets == n).nonzero()[:, 0].to(offsets.device))
                for n in offsets.unique().tolist()
            ]

    @property
    def seq_len(self) -> int:
        """Positions seen so far, padding included (the next position's index)."""
        return 0 if self.tokens is None else self.tokens.shape[1]

    def advance(self, new_ids: Tensor) -> Tensor:
        """Logits ``(B, T, V)`` of ``new_ids`` ``(B, T)`` int64: the prompt (left padding
        included) on the first call, then the new tokens; positions of padding get zeros.

        Raises:
            SequenceTooLongError: a prompt longer than ``max_seq_len`` (the model raises it).
        """
        self.tokens = new_ids if self.tokens is None else torch.cat([self.tokens, new_ids], 1)
        T = new_ids.shape[1]
        logits: Tensor | None = None
        for group in self.groups:
            ids = self.tokens if group.every else self.tokens[group.rows]
            out = self._group_logits(group, ids, T)  # (b, t, V), t <= T
            if group.every:
                return out
            if logits is None:
                logits = out.new_zeros(new_ids.shape[0], T, out.shape[-1])
            logits[group.rows, T - out.shape[1] :] = out
        assert logits is not None
        return logits

    def _group_logits(self, group: _Group, ids: Tensor, T: int) -> Tensor:
        """Logits of a group's last ``T`` positions (fewer when some of them are padding)."""
        real = ids[:, group.offset :]  # (b, L - offset): the rows without their padding
        T = min(T, real.shape[1])
        cache = group.cache
        if cache is None:  # the prompt
            step = real
            group.cache = cache = self.model.init_cache(ids.shape[0])
        elif cache.seq_len + T > self.max_len:  # full: re-encode the most recent tokens
            step = real[:, -max(T, self.max_len // 2) :]
            group.cache = cache = self.model.init_cache(ids.shape[0])
            self.restarts += 1
        else:
            step = real[:, -T:]
            if T == 1 and self.step is not self.model:
                past = cache.seq_len
                try:
                    return self.step(step, past_key_values=cache).logits[:, -T:]
                except Exception as e:
                    if not _compile_failed(e):
                        raise
                    _NOT_COMPILED.add(self.model)  # later calls do not try again
                    self.step = self.model  # eager from here on, the cache rebuilt from tokens
                    step = real[:, -(past + T) :]
                    group.cache = cache = self.model.init_cache(ids.shape[0])
        return self.model(step, past_key_values=cache).logits[:, -T:]

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` ``(B',)`` int64 of the batch, in that order (beam search, or
        ``num_return_sequences`` after the prompt): each row keeps its group.
        """
        index = index.to(self.groups[0].rows.device)
        if self.tokens is not None:
            self.tokens = self.tokens.index_select(0, index.to(self.tokens.device))
        if len(self.groups) == 1 and self.groups[0].every:
            group = self.groups[0]
            group.rows = torch.arange(index.numel(), device=index.device)
            if group.cache is not None:
                group.cache.reorder(index)
            return
        old_group = torch.empty(int(max(g.rows.max() for g in self.groups)) + 1, dtype=torch.long,
                                device=index.device)  # fmt: skip
        local = torch.empty_like(old_group)
        for g, group in enumerate(self.groups):
            old_group[group.rows] = g
            local[group.rows] = torch.arange(group.rows.numel(), device=index.device)
        for g, group in enumerate(self.groups):
            new_rows = (old_group[index] == g).nonzero()[:, 0]
            if group.cache is not None and new_rows.numel():
                group.cache.reorder(local[index[new_rows]])
            group.rows = new_rows
        self.groups = [group for group in self.groups if group.rows.numel()]


_NOT_COMPILED: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # models whose step failed to compile


def compiled_step(model: nn.Module) -> Callable[..., object]:
    """``model``'s forward through ``torch.compile(dynamic=True)``: cache lengths and batch sizes
    are symbolic, so decoding compiles once (the Inductor backend; on a CPU it needs a C++
    compiler) rather than at every new position. The same arithmetic as ``model`` (fp32 logits
    agree to rounding; the tests check greedy tokens are the eager ones)."""
    return torch.compile(model, dynamic=True)


def _compile_failed(e: Exception) -> bool:
    """Whether ``e`` is the compiler backend failing (:func:`zoo.errors.compile_failure`); if
    so, warn in one line that decoding goes on eagerly."""
    cause = compile_failure(e)
    if cause is not None:
        warnings.warn(
            f"torch.compile could not compile the decoding step ({cause}); decoding goes on "
            "without compiling: the same tokens at eager speed",
            stacklevel=4,
        )
    return cause is not None


def padding_spans(attention_mask: Tensor, shape: torch.Size | tuple[int, ...]) -> Tensor | None:
    """Where each row's tokens are in a padded batch: ``(B, 2)`` int64 ``[start, stop)``, or
    ``None`` when there is no padding (no zeros in the mask).

    Args:
        attention_mask: ``(B, T)`` bool or integer, 1 at tokens, 0 at padding.
        shape: ``(B, T)`` of the ids it masks.

    Raises:
        ConfigError: the mask's shape differs from ``shape``; it holds values other than 0 and 1;
            a row is only padding; or a row's tokens are not one run (padding on both sides, or
            holes).
    """
    if tuple(attention_mask.shape) != tuple(shape):
        raise ConfigError(
            f"attention_mask is {tuple(attention_mask.shape)} but input_ids are {tuple(shape)}: "
            "pass the mask the tokenizer returned with these ids"
        )
    mask = attention_mask.long()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ConfigError("attention_mask must hold only 0 (padding) and 1 (token)")
    lengths = mask.sum(1)
    if bool((lengths == mask.shape[1]).all()):
        return None
    if not bool((lengths > 0).all()):
        row = int((lengths == 0).nonzero()[0])
        raise ConfigError(f"attention_mask row {row} is all padding: every row needs a token")
    # one run of ones, touching an end: at most one 0 <-> 1 step along the row
    steps = (mask[:, 1:] != mask[:, :-1]).sum(1)
    if not bool((steps <= 1).all()):
        row = int((steps > 1).nonzero()[0])
        raise ConfigError(
            f"attention_mask row {row} is not padded on one side: zoo models take rows padded "
            "on the left (tokenizer padding_side='left', what generate wants) or on the right"
        )
    start = torch.where(mask[:, 0] == 0, mask.shape[1] - lengths, torch.zeros_like(lengths))
    return torch.stack([start, start + lengths], 1)


def padding_offsets(attention_mask: Tensor, shape: torch.Size | tuple[int, ...]) -> Tensor | None:
    """How many padding positions begin each row of a left-padded batch (what decoding takes):
    ``(B,)`` int64, or ``None`` without padding.

    Raises:
        ConfigError: as :func:`padding_spans`, and for padding on the right (new tokens would
            follow it): pad on the left (a tokenizer's ``padding_side="left"``).
    """
    spans = padding_spans(attention_mask, shape)
    if spans is None:
        return None
    if bool((spans[:, 1] < shape[1]).any()):
        raise ConfigError(
            "generate takes prompts padded on the left (tokenizer padding_side='left'): with "
            "padding on the right the new tokens would follow the padding"
        )
    return spans[:, 0]
