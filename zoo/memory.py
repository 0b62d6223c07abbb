"""What decoding holds in memory, estimated from a model's config before anything is allocated,
and the check that refuses a batch that would not fit (:func:`zoo.config.available_memory`).
Shared by greedy and beam search (:mod:`zoo.beam_search`) and sampling (:mod:`zoo.generation`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.config import available_memory
from zoo.errors import ConfigError

__all__ = ["CHECKED_BYTES", "check_decoding_memory", "decoding_bytes"]

CHECKED_BYTES = 256 * 2**20
"""Below this estimate (256 MiB) :func:`check_decoding_memory` does not ask for free memory."""


def decoding_bytes(config: Any, rows: int, positions: int, source_len: int = 0) -> int:
    """An estimate, in bytes, of what decoding ``rows`` sequences at once holds: per row, the
    key/value cache (sized to ``max_seq_len``, as :class:`zoo.attention.KVCache` allocates it, plus
    ``source_len`` positions of encoder keys and values), and one forward pass over ``positions``
    tokens in fp32 (logits, the residual and feed-forward widths, one layer's ``positions x
    positions`` attention scores, four copies of the last position's logits). From the config's
    fields in the shared vocabulary (``d_model``, ``n_layers`` or ``n_decoder_layers``,
    ``n_heads``, ``d_ff``, ``vocab_size``, ``max_seq_len``); a field a family lacks counts 0. An
    upper bound for the LSTM, whose state does not grow with ``max_seq_len``."""

    def size(name: str) -> int:
        return int(getattr(config, name, 0) or 0)

    d, layers = size("d_model"), size("n_layers") + size("n_decoder_layers")
    cache = 2 * layers * (size("max_seq_len") + source_len) * d * 4
    step = 4 * positions * (size("vocab_size") + 4 * d + size("d_ff")) + 16 * size("vocab_size")
    scores = 4 * max(size("n_heads"), 1) * positions * positions
    return rows * (cache + step + scores)


def check_decoding_memory(
    model: nn.Module, rows: int, positions: int, *, source_len: int = 0, fix: str
) -> None:
    """Refuse to decode ``rows`` sequences at once when :func:`decoding_bytes` exceeds the free
    memory of the model's device (:func:`zoo.config.available_memory`), before anything is
    allocated; ``fix`` ends the message (which flags to lower).

    Raises:
        ConfigError: one line with the estimate and the memory available.
    """
    needed = decoding_bytes(model.config, rows, positions, source_len)
    if needed <= CHECKED_BYTES:
        return
    device = next(model.parameters()).device
    free = available_memory(str(device))
    if free is None or needed <= free:
        return
    gib = 2**30
    raise ConfigError(
        f"decoding {rows:,} sequences at once needs about {needed / gib:,.1f} GiB (key/value "
        f"cache and logits, estimated) but {device} has {free / gib:,.1f} GiB available: {fix}"
    )
