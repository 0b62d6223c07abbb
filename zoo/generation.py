"""Autoregressive sampling with a key/value cache: temperature, top-k and nucleus (top-p) sampling.

Works with any zoo language model that has ``forward(idx, cache)``, ``init_cache(batch_size)`` and
``config.max_seq_len``. When the cache is full, decoding continues by re-encoding the most recent
``max_seq_len // 2`` tokens into a fresh cache (a sliding window), so ``max_new_tokens`` is not bounded
by the context length.

Shape legend: B batch, T positions, V vocab_size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from rich.progress import track
from torch import Tensor, nn

__all__ = ["filter_logits", "generate", "sample_images"]


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set logits outside the top-k and/or the top-p nucleus to ``-inf``. ``logits``: ``(B, V)``.

    top-p keeps the smallest set of tokens whose probability sums to at least ``top_p`` (Holtzman et
    al. 2020); the most likely token is always kept.
    """
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        # drop a token if the tokens before it already reach top_p
        drop_sorted = probs.cumsum(-1) - probs >= top_p
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
    progress: bool = False,
) -> Tensor:
    """Sample ``max_new_tokens`` tokens after ``prompt``.

    Args:
        model: a zoo language model (put it in eval mode first for deterministic dropout-free logits).
        prompt: ``(B, T)`` int64 token ids, at least one per row.
        max_new_tokens: number of tokens to append.
        temperature: divides the logits; ``0`` means greedy (argmax) decoding.
        top_k: sample only among the ``top_k`` most likely tokens.
        top_p: sample only from the nucleus of probability mass ``top_p`` (0 < top_p <= 1).
        generator: a ``torch.Generator`` on the model's device, for reproducible samples.
        truncate_prompt: keep only the last ``max_seq_len`` prompt tokens instead of raising.
        use_cache: decode with the key/value cache (``False`` re-runs the whole window every step).
        suppress_tokens: ids never sampled (e.g. an image model's start token).
        progress: show a progress bar (rich) over the new tokens.

    Returns:
        ``(B, T + max_new_tokens)`` int64: the prompt followed by the sampled tokens.

    Raises:
        ValueError: an empty prompt, a prompt longer than ``max_seq_len`` (unless
            ``truncate_prompt``), or an invalid sampling parameter.
    """
    max_len = model.config.max_seq_len
    if prompt.ndim != 2 or prompt.shape[1] == 0:
        raise ValueError(
            f"prompt must be (batch, length) with length >= 1, got {tuple(prompt.shape)}"
        )
    if prompt.shape[1] > max_len:
        if not truncate_prompt:
            raise ValueError(
                f"the prompt has {prompt.shape[1]} tokens but the model's max_seq_len is {max_len}. "
                "Shorten it, or pass truncate_prompt=True (--truncate-prompt) to keep the last "
                f"{max_len} tokens."
            )
        prompt = prompt[:, -max_len:]
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")

    seq = prompt
    cache = None
    step_input = seq  # what the next forward pass reads
    steps = range(max_new_tokens)
    if progress:
        steps = track(steps, description="sampling", transient=True)
    for _ in steps:
        if not use_cache:
            logits = model(seq[:, -max_len:])
        else:
            if cache is None or cache.seq_len + step_input.shape[1] > max_len:
                # (re)start: encode a window of recent tokens into a fresh cache
                keep = seq.shape[1] if cache is None else max(1, max_len // 2)
                step_input = seq[:, -keep:]
                cache = model.init_cache(seq.shape[0])
            logits = model(step_input, cache)
        logits = logits[:, -1, :].float()  # (B, V)
        if suppress_tokens:
            logits[:, list(suppress_tokens)] = float("-inf")
        if temperature == 0:
            next_token = logits.argmax(-1, keepdim=True)
        else:
            logits = filter_logits(logits / temperature, top_k, top_p)
            next_token = torch.multinomial(logits.softmax(-1), 1, generator=generator)
        seq = torch.cat([seq, next_token], dim=1)
        step_input = next_token
    return seq


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
        temperature, top_k, generator: as :func:`generate` (the start token is never sampled).
        progress: show a progress bar.

    Returns:
        ``(N, H, W, C)`` uint8 on the CPU.

    Raises:
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
    device = next(model.parameters()).device
    if prompt_images is None:
        known = torch.empty(n, 0, dtype=torch.long)
    else:
        images = torch.as_tensor(np.asarray(prompt_images))
        if tuple(images.shape[1:]) != (H, W, C):
            raise ValueError(
                f"prompt_images are {tuple(images.shape)}, expected (N, {H}, {W}, {C})"
            )
        if not 0 <= prompt_rows < H:
            raise ValueError(f"prompt_rows must be in [0, {H}), got {prompt_rows}")
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
