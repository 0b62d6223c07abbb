"""Memory: what decoding holds, estimated from a model's config before anything is allocated,
and the check that refuses a batch that would not fit (:func:`zoo.config.available_memory`),
shared by greedy and beam search (:mod:`zoo.beam_search`) and sampling (:mod:`zoo.generation`);
and the peak memory of a measurement (``zoo bench``, :mod:`zoo.bench`): on CUDA
``torch.cuda.max_memory_allocated``, on a Linux CPU the growth of the process's peak resident set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.config import available_memory
from zoo.errors import ConfigError

__all__ = [
    "CHECKED_BYTES",
    "check_decoding_memory",
    "decoding_bytes",
    "peak_memory_method",
    "peak_memory_since",
    "peak_memory_start",
]

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


# --- the peak memory of a measurement -------------------------------------------------------------
def _status_bytes(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024  # reported in kB
    raise OSError(f"/proc/self/status has no {key}")


def _malloc_trim() -> None:
    """Return freed heap to the system (glibc), so RSS before a measurement is what is live."""
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def peak_memory_start(device: torch.device) -> int | None:
    """Reset the peak counter; the bytes in use now (``None``: peak memory not measurable)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    _malloc_trim()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to VmRSS (Linux >= 4.0)
        return _status_bytes("VmRSS")
    except OSError:
        return None


def peak_memory_since(device: torch.device, start: int | None) -> int | None:
    """Bytes of peak memory above ``start`` since :func:`peak_memory_start`."""
    if start is None:
        return None
    if device.type == "cuda":
        return max(0, torch.cuda.max_memory_allocated(device) - start)
    return max(0, _status_bytes("VmHWM") - start)


def peak_memory_method(device: torch.device) -> str:
    """What the peak memory columns measure on ``device``, in words."""
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated above the memory allocated before"
    if peak_memory_start(device) is None:
        return "not measured (needs Linux /proc/self/clear_refs)"
    return "growth of the process's peak resident set (VmHWM) over its RSS before"
