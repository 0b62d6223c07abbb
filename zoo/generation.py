"""Autoregressive sampling with a key/value cache: temperature, top-k and nucleus (top-p) sampling.

Works with any zoo language model that has ``forward(idx, cache)``, ``init_cache(batch_size)`` and
``config.max_seq_len``. When the cache is full, decoding continues by re-encoding the most recent
``max_seq_len // 2`` tokens into a fresh cache (a sliding window), so ``max_new_tokens`` is not bounded
by the context length; one call holds at most :data:`MAX_TOKENS` tokens, and its rows must fit in
memory (:func:`check_generation`).

Every sampling setting is checked before a token is drawn (:func:`check_sampling`): a NaN or
infinite temperature, or one above :data:`MAX_TEMPERATURE` (where sampling is uniform noise), is an
error, not a traceback or uniform output; the limits (a temperature too small to divide by, a top-p
below float precision, a top-k above the vocabulary) have the meaning their definitions give,
documented in :func:`generate`.

Shape legend: B batch, T positions, V vocab_size.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import NoReturn

import numpy as np
import torch
from rich.progress import track
from torch import Tensor, nn

from zoo.decoding import DecodingState, padding_offsets
from zoo.errors import ConfigError, SequenceTooLongError

__all__ = [
    "MAX_SEED",
    "MAX_TEMPERATURE",
    "MAX_TOKENS",
    "MIN_TEMPERATURE",
    "check_generation",
    "check_sampling",
    "check_seed",
    "filter_logits",
    "generate",
    "penalize_repetition",
    "sample_images",
    "seeded_generator",
]

MAX_TEMPERATURE = 100.0
"""The largest temperature :func:`generate` takes: above it every token is about equally likely
(logits a few nats apart, divided by 100), so a sample is uniform noise, not the model's text."""

MIN_TEMPERATURE = 1e-30
"""Below this temperature :func:`generate` decodes greedily, the limit of a temperature going to 0:
dividing float32 logits by it would overflow to ``inf`` (and ``inf - inf`` is NaN in the softmax),
and below ``1.4e-45`` it is float32's 0."""

MAX_TOKENS = 10_000_000
"""The most tokens one :func:`generate` call holds: batch x (prompt + ``max_new_tokens``). Ten
million bytes of text, hours of decoding; ask for more in several calls."""

MAX_SEED = 2**64 - 1
"""The largest seed a ``torch.Generator`` (and NumPy's) takes; seeds are 0 to this."""


def _whole(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _real(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def check_sampling(
    *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> None:
    """Check the sampling settings of :func:`generate` (and ``zoo generate`` / ``zoo sample``'s
    flags), before any model is loaded or token drawn.

    Raises:
        ConfigError: (a ``ValueError``) naming the first bad value, its flag and the range that
            works: ``temperature`` not a number, NaN, infinite, below 0 or above
            :data:`MAX_TEMPERATURE`; ``top_k`` not a whole number or below 1; ``top_p`` not a
            number, NaN or outside ``(0, 1]``.
    """
    if not _real(temperature) or not 0 <= temperature <= MAX_TEMPERATURE:
        _bad("temperature", temperature, f"use a number from 0 to {MAX_TEMPERATURE:g} (0: greedy; "
             f"1: the model's own distribution; above {MAX_TEMPERATURE:g} samples are uniform "
             "noise)")  # fmt: skip
    if top_k is not None and (not _whole(top_k) or top_k < 1):
        _bad("top_k", top_k, "use a whole number >= 1 (or leave it out to keep every token)")
    if top_p is not None and (not _real(top_p) or not 0.0 < top_p <= 1.0):
        _bad("top_p", top_p, "use a number in (0, 1] (1 keeps every token; leave it out for 1)")


def check_seed(seed: int, name: str = "seed") -> int:
    """``seed`` if a ``torch.Generator`` and NumPy take it: a whole number from 0 to
    :data:`MAX_SEED`.

    Raises:
        ConfigError: (a ``ValueError``) any other value, named ``name`` in the message.
    """
    if not _whole(seed) or not 0 <= seed <= MAX_SEED:
        _bad(name, seed, f"use a whole number from 0 to 2**64 - 1 ({MAX_SEED})")
    return int(seed)


def seeded_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (:func:`check_seed`).

    Raises:
        ConfigError: a seed outside 0 to :data:`MAX_SEED`.
    """
    return torch.Generator(device).manual_seed(check_seed(seed))


def check_generation(
    model: nn.Module,
    batch_size: int,
    prompt_len: int,
    max_new_tokens: int,
    *,
    truncate_prompt: bool = False,
    use_cache: bool = True,
) -> int:
    """Check that :func:`generate` can continue ``batch_size`` prompts of ``prompt_len`` tokens by
    ``max_new_tokens``, before a tensor of them is built; returns the prompt length it will use
    (the last ``max_seq_len`` tokens with ``truncate_prompt``).

    The bounds: ``batch_size * (prompt + max_new_tokens)`` at most :data:`MAX_TOKENS`, and the
    rows' key/value cache and first forward pass within the free memory of the model's device
    (:func:`zoo.memory.check_decoding_memory`).

    Raises:
        SequenceTooLongError: (a ``ValueError``) a prompt longer than the model's ``max_seq_len``
            without ``truncate_prompt`` (the message says to pass it: ``--truncate-prompt``).
        ConfigError: (a ``ValueError``) a batch or prompt of no tokens, ``max_new_tokens`` not a
            whole number or below 0, more than :data:`MAX_TOKENS` tokens, or rows that would not
            fit in memory.
    """
    from zoo.memory import check_decoding_memory

    max_len = model.config.max_seq_len
    if not _whole(batch_size) or batch_size < 1:
        _bad("batch", batch_size, "give at least one prompt (--num-samples 1 or more)")
    if not _whole(prompt_len) or prompt_len < 1:
        _bad("prompt length", prompt_len, "give at least one token to continue")
    if not _whole(max_new_tokens) or max_new_tokens < 0:
        _bad("max_new_tokens", max_new_tokens, "use a whole number >= 0")
    if prompt_len > max_len:
        if not truncate_prompt:
            raise SequenceTooLongError(
                f"the prompt has {prompt_len} tokens but the model's max_seq_len is {max_len}. "
                "Shorten it, or pass truncate_prompt=True (--truncate-prompt) to keep the last "
                f"{max_len} tokens."
            )
        prompt_len = max_len
    tokens = batch_size * (prompt_len + max_new_tokens)
    if tokens > MAX_TOKENS:
        raise ConfigError(
            f"batch x (prompt + max_new_tokens) = {batch_size:,} x ({prompt_len:,} + "
            f"{max_new_tokens:,}) = {tokens:,} tokens is above the {MAX_TOKENS:,} one call "
            "generates: ask for fewer or shorter samples over several calls (--num-samples; "
            "zoo generate's --max-new-tokens)"
        )
    positions = prompt_len if use_cache else max_len
    check_decoding_memory(model, batch_size, positions,
                          fix="sample fewer rows at once (--num-samples)")  # fmt: skip
    return prompt_len


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set logits outside the top-k and/or the top-p nucleus to ``-inf``. ``logits``: ``(B, V)``.

    top-p keeps the smallest set of tokens whose probability sums to at least ``top_p`` (Holtzman et
    al. 2020); the most likely token is always kept, so a ``top_p`` at or below its probability
    (down to values below float precision, ``1e-45``) keeps only it: greedy decoding. A ``top_k``
    at or above the vocabulary size keeps every token.
    """
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        # drop a token if the tokens before it already reach top_p; never the most likely one (a
        # top_p below float32's smallest number compares as 0, which every prefix reaches)
        drop_sorted = probs.cumsum(-1) - probs >= top_p
        drop_sorted[..., 0] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.no_grad()
def generate(
    model: nn.Module,
    prompt: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    truncate_prompt: bool = False,
    use_cache: bool = True,
    suppress_tokens: Sequence[int] = (),
    eos_token_id: int | Sequence[int] | None = None,
    progress: bool = False,
    attention_mask: Tensor | None = None,
    repetition_penalty: float = 1.0,
    streamer: object | None = None,
    compile: bool = False,
) -> Tensor:
    """Sample ``max_new_tokens`` tokens after ``prompt``.

    Args:
        model: a zoo language model (put it in eval mode first for deterministic dropout-free logits).
        prompt: ``(B, T)`` int64 token ids, at least one per row.
        max_new_tokens: number of tokens to append, ``>= 0``; ``B * (T + max_new_tokens)`` at most
            :data:`MAX_TOKENS`.
        temperature: divides the logits, from 0 to :data:`MAX_TEMPERATURE`; ``0`` means greedy
            (argmax) decoding, and so does one below :data:`MIN_TEMPERATURE` (``1e-45``, too
            small to divide by): its limit, rather than NaN.
        top_k: sample only among the ``top_k`` most likely tokens (``>= 1``; at or above the
            vocabulary size, every token).
        top_p: sample only from the nucleus of probability mass ``top_p`` (0 < top_p <= 1); the
            most likely token is always kept, so a tiny ``top_p`` (even below float precision,
            ``1e-45``) is greedy decoding.
        generator: a ``torch.Generator`` on the model's device, for reproducible samples
            (:func:`seeded_generator`).
        truncate_prompt: keep only the last ``max_seq_len`` prompt tokens instead of raising.
        use_cache: decode with the key/value cache (``False`` re-runs the whole window every step).
        suppress_tokens: ids never sampled (e.g. an image model's start token).
        eos_token_id: id(s) that end a row: after one, the row repeats it, and decoding stops once
            every row has ended (so fewer than ``max_new_tokens`` may be added).
        progress: show a progress bar (rich) over the new tokens.
        attention_mask: ``(B, T)``, 0 at the left padding of shorter prompts, 1 at tokens (a
            tokenizer's ``padding_side="left"``): each row then gets the tokens it gets alone
            (:class:`zoo.decoding.DecodingState` decodes rows of equal padding together).
        repetition_penalty: CTRL's penalty (Keskar et al. 2019, §4.1), > 0: the logit of every
            token already in the row (prompt included) is divided by it when positive and
            multiplied by it when negative, before sampling; 1 leaves logits alone.
        streamer: an object with ``put(ids)`` and ``end()`` (transformers' ``TextStreamer``,
            one row): given the prompt ``(1, T)`` first, then each new token ``(1,)``.
        compile: run each one-token step through ``torch.compile`` (with ``use_cache``;
            :func:`zoo.decoding.compiled_step`): the same tokens, faster per token once compiled,
            but the first step compiles for seconds (docs/speed.md gives both), so it pays off
            for long or repeated generation.

    Returns:
        ``(B, T + N)`` int64: the prompt followed by the ``N <= max_new_tokens`` sampled tokens
        (``N = max_new_tokens`` without ``eos_token_id``).

    Raises:
        ConfigError: (a ``ValueError``) an empty prompt, a sampling setting out of range
            (:func:`check_sampling`), or a call too large for :data:`MAX_TOKENS` or for memory
            (:func:`check_generation`).
        SequenceTooLongError: (a ``ValueError``) a prompt longer than ``max_seq_len`` (unless
            ``truncate_prompt``).
    """
    max_len = model.config.max_seq_len
    if prompt.ndim != 2 or prompt.shape[1] == 0 or prompt.shape[0] == 0:
        raise ConfigError(
            f"prompt must be (batch, length) with batch and length >= 1, got {tuple(prompt.shape)}"
        )
    check_sampling(temperature=temperature, top_k=top_k, top_p=top_p)
    if not _real(repetition_penalty) or not 0 < repetition_penalty < float("inf"):
        _bad("repetition_penalty", repetition_penalty, "use a number > 0 (1: no penalty)")
    if streamer is not None and prompt.shape[0] != 1:
        _bad("streamer", type(streamer).__name__, "streams one row: pass a batch of one prompt")
    kept = check_generation(model, prompt.shape[0], prompt.shape[1], max_new_tokens,
                            truncate_prompt=truncate_prompt, use_cache=use_cache)  # fmt: skip
    prompt = prompt[:, -kept:]

    mask = None if attention_mask is None else attention_mask[:, -kept:].to(prompt.device)
    offsets = None if mask is None else padding_offsets(mask, prompt.shape)
    eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
    ended = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    seq = prompt
    state = DecodingState(model, offsets, prompt.shape[0], compile=compile) if use_cache else None
    step_input = seq  # what the next forward pass reads
    steps = range(max_new_tokens)
    if progress:
        steps = track(steps, description="sampling", transient=True)
    if streamer is not None:
        streamer.put(seq.cpu())
    for _ in steps:
        if state is None:  # the whole window (left padding, if any, masked) at every step
            window = None if offsets is None else mask[:, -max_len:]
            logits = model(seq[:, -max_len:], attention_mask=window).logits
        else:
            logits = state.advance(step_input)
        logits = logits[:, -1, :].float()  # (B, V)
        if repetition_penalty != 1.0:
            logits = penalize_repetition(logits, seq, repetition_penalty)
        if suppress_tokens:
            logits[:, list(suppress_tokens)] = float("-inf")
        if temperature < MIN_TEMPERATURE:  # 0, or so small that logits / it overflow: greedy
            next_token = logits.argmax(-1, keepdim=True)
        else:
            logits = filter_logits(logits / temperature, top_k, top_p)
            next_token = torch.multinomial(logits.softmax(-1), 1, generator=generator)
        if eos:
            next_token = torch.where(ended[:, None], seq[:, -1:], next_token)  # ended: repeat EOS
            ended |= torch.isin(next_token[:, 0], torch.tensor(eos, device=seq.device))
        seq = torch.cat([seq, next_token], dim=1)
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
        step_input = next_token
        if streamer is not None:
            streamer.put(next_token[:, 0].cpu())
        if eos and bool(ended.all()):
            break
    if streamer is not None:
        streamer.end()
    return seq


def penalize_repetition(logits: Tensor, seq: Tensor, penalty: float) -> Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019, §4.1): ``logits`` ``(B, V)`` float with the
    logit of each token in its row of ``seq`` ``(B, L)`` divided by ``penalty`` where positive
    and multiplied by it where negative (transformers' ``RepetitionPenaltyLogitsProcessor``
    applies the same rule)."""
    seen = logits.gather(1, seq)  # (B, L)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(1, seq, seen)


def _bad(name: str, value: object, fix: str) -> NoReturn:
    flag = f" (--{name.replace('_', '-')})" if name in ("temperature", "top_k", "top_p",
                                                      "max_new_tokens", "seed") else ""  # fmt: skip
    raise ConfigError(f"{name}{flag} is {value!r}: {fix}")


@torch.no_grad()
def sample_images(
    model: nn.Module,
    image_shape: Sequence[int],
    n: int = 0,
    *,
    prompt_images: np.ndarray | Tensor | None = None,
    prompt_rows: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> Tensor:
    """Sample images from an autoregressive pixel model, sub-pixel by sub-pixel in raster order.

    Args:
        model: a zoo image model (``vocab_size`` 257: intensities and the start token
            :data:`zoo.data.images.BOS_ID`), in eval mode; decoding uses its key/value cache.
        image_shape: ``(H, W, C)``.
        n: number of unconditional samples (without ``prompt_images``).
        prompt_images: ``(N, H, W, C)`` uint8 images whose top ``prompt_rows`` rows are kept and
            the rest completed (the papers' "completions").
        prompt_rows: rows given; ``0`` samples from scratch.
        temperature: as :func:`generate` (the start token is never sampled).
        top_k: as :func:`generate`.
        generator: as :func:`generate`.
        progress: show a progress bar.

    Returns:
        ``(N, H, W, C)`` uint8 on the CPU.

    Raises:
        ConfigError: (a ``ValueError``) ``n < 1`` without ``prompt_images``, a sampling setting
            out of range (:func:`check_sampling`), or more images than :data:`MAX_TOKENS` or the
            device's memory allow (:func:`check_generation`).
        ValueError: the model's vocabulary is not 257 or its context is shorter than ``H W C``,
            the model has an ``image_shape`` of its own (the Image Transformer) that is not
            ``image_shape``, ``prompt_images`` do not have ``image_shape``, or ``prompt_rows`` is
            not below ``H``.
    """
    from zoo.data.images import BOS_ID, image_to_sequence, sequence_to_image

    H, W, C = image_shape
    L = H * W * C
    config = model.config
    own = getattr(config, "image_shape", None)  # the Image Transformer's 2-D positions fix it
    if own is not None and tuple(own) != (H, W, C):
        h, w, c = own
        raise ValueError(
            f"{type(model).__name__} models {h}x{w}x{c} images, not {H}x{W}x{C}: sample or "
            f"complete images of its own shape (a data set of {h}x{w}x{c} images)"
        )
    if config.vocab_size != BOS_ID + 1 or config.max_seq_len < L:
        raise ValueError(
            f"{type(model).__name__} (vocab_size={config.vocab_size}, max_seq_len="
            f"{config.max_seq_len}) is not an image model for {H}x{W}x{C} images: that needs "
            f"vocab_size={BOS_ID + 1} and max_seq_len >= {L}"
        )
    check_sampling(temperature=temperature, top_k=top_k)
    device = next(model.parameters()).device
    if prompt_images is None:
        if not _whole(n) or n < 1:
            _bad("n", n, "ask for at least one sample (zoo sample: --num-samples)")
        check_generation(model, n, 1, L)  # before n rows are allocated
        known = torch.empty(n, 0, dtype=torch.long)
    else:
        images = torch.as_tensor(np.asarray(prompt_images))
        if tuple(images.shape[1:]) != (H, W, C):
            raise ValueError(
                f"prompt_images are {tuple(images.shape)}, expected (N, {H}, {W}, {C})"
            )
        if not 0 <= prompt_rows < H:
            raise ValueError(f"prompt_rows must be in [0, {H}), got {prompt_rows}")
        check_generation(model, len(images), 1 + prompt_rows * W * C, L - prompt_rows * W * C)
        known = image_to_sequence(images)[:, : prompt_rows * W * C]
    bos = torch.full((known.shape[0], 1), BOS_ID, dtype=torch.long)
    prompt = torch.cat([bos, known], 1).to(device)
    out = generate(
        model,
        prompt,
        L - known.shape[1],
        temperature=temperature,
        top_k=top_k,
        generator=generator,
        suppress_tokens=(BOS_ID,),
        progress=progress,
    )
    return sequence_to_image(out[:, 1:].cpu(), (H, W, C))
