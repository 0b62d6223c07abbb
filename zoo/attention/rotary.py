"""Rotary position embeddings (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position
Embedding", §3.2-3.4).

Queries and keys are rotated, pair of channels by pair of channels, by an angle proportional to their
position: channel pair ``i`` of a vector at position ``m`` turns by ``m * theta_i`` with
``theta_i = base^(-2i / D)``. The score ``q_m . k_n`` then depends on the positions only through
``m - n``, so attention is relative by construction, there are no position weights to learn, and a
model accepts positions past the length it was trained on (whether it *uses* them well is measured
by ``zoo evaluate --by-position``).

The channels are paired as ``(x_i, x_{i + D/2})`` (the "rotate half" layout of GPT-NeoX and most
later models), which is the paper's interleaved pairing up to a fixed permutation of the channels.

Only queries and keys turn; values do not. A layer applies the rotation to ``q`` and ``k`` before
any pattern, cluster selection or cache, so every attention path (dense, block-sparse, local,
decode steps) sees rotated vectors.

Shape legend: B batch, H heads, T positions, D head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["RotaryEmbedding"]


class RotaryEmbedding(nn.Module):
    """Rotates ``(B, H, T, D)`` queries or keys at positions ``start..start+T-1``.

    Args:
        d_head: ``D``, the head dimension; must be even.
        base: the wavelength base (paper: 10000); the longest wavelength is ``2 pi base``.

    Holds no weights (nothing in the state dict): the angles are recomputed, in fp32, per call.

    Raises:
        ValueError: ``d_head`` is odd.
    """

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"rotary positions need an even head dimension, got d_head={d_head}")
        self.d_head, self.base = d_head, base
        inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)  # (D/2,)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, base={self.base:g}"

    def angles(self, start: int, T: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin`` of positions ``start..start+T-1``: two fp32 ``(T, D)``."""
        pos = torch.arange(start, start + T, device=device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq.to(device))  # (T, D/2)
        freqs = torch.cat([freqs, freqs], -1)  # (T, D)
        return freqs.cos(), freqs.sin()

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """``x`` ``(..., T, D)`` turned by its positions ``start + t``; same shape and dtype."""
        return self._turn(x, *self.angles(start, x.shape[-2], x.device))

    def rotate(self, q: Tensor, k: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """Queries and keys ``(B, H, T, D)`` at positions ``start..``: both turned (the angles
        computed once for the two)."""
        cos, sin = self.angles(start, q.shape[-2], q.device)
        return self._turn(q, cos, sin), self._turn(k, cos, sin)

    @staticmethod
    def _turn(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return (x * cos + rotated * sin).to(x.dtype)
