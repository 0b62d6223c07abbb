"""Autoregressive sampling with a key/value cache: temperature, top-k and nucleus (top-p) sampling.

Works with any zoo language model that has ``forward(idx, cache)``, ``init_cache(batch_size)`` and
``config.max_seq_len``. When the cache is full, decoding continues by re-encoding the most recent
``max_seq_len // 2`` tokens into a fresh cache (a sliding window), so ``max_new_tokens`` is not bounded
by the context length.

Shape legend: B batch, T positions, V vocab_size.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["filter_logits", "generate"]


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
    for _ in range(max_new_tokens):
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
        if temperature == 0:
            next_token = logits.argmax(-1, keepdim=True)
        else:
            logits = filter_logits(logits / temperature, top_k, top_p)
            next_token = torch.multinomial(logits.softmax(-1), 1, generator=generator)
        seq = torch.cat([seq, next_token], dim=1)
        step_input = next_token
    return seq
