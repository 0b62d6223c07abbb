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

The turn is one autograd function (:class:`_Turn`): a product and a multiply-add per half of the
channels, computed in fp32 and rounded once to the input's dtype, and a backward pass that turns the
gradient back by minus the angles. It keeps only the angles for the backward pass, where composing
``cat``, ``neg``, products and a sum kept a chain of fp32 copies (measured in
experiments/kernels/log.md).

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
        """``cos`` and ``sin`` of positions ``start..start+T-1``: two fp32 ``(T, D)`` (each half
        of the channels repeats the ``D/2`` angles)."""
        cos, sin = self._half_angles(start, T, device)
        return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)

    def _half_angles(self, start: int, T: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin`` of ``m * theta_i``: two fp32 ``(T, D/2)``."""
        pos = torch.arange(start, start + T, device=device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq.to(device))  # (T, D/2)
        return freqs.cos(), freqs.sin()

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """``x`` ``(..., T, D)`` turned by its positions ``start + t``; same shape and dtype."""
        return _Turn.apply(x, *self._half_angles(start, x.shape[-2], x.device))

    def rotate(self, q: Tensor, k: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """Queries and keys ``(B, H, T, D)`` at positions ``start..``: both turned (the angles
        computed once for the two)."""
        cos, sin = self._half_angles(start, q.shape[-2], q.device)
        return _Turn.apply(q, cos, sin), _Turn.apply(k, cos, sin)


def _turned(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x`` ``(..., T, D)`` with channel pairs ``(x1, x2) = (x_i, x_{i + D/2})`` turned by the
    angles whose ``cos`` and ``sin`` are ``(T, D/2)``: ``(x1 cos - x2 sin, x2 cos + x1 sin)``.
    Computed in ``cos``'s dtype (fp32) or wider, rounded once to ``x``'s; same strides as ``x``."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    if torch.compiler.is_compiling():  # out= into a view breaks the graph; Inductor fuses this
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)
    out = torch.empty_like(x)
    for o, a, b, sign in ((out[..., :half], x1, x2, -1), (out[..., half:], x2, x1, 1)):
        if torch.promote_types(x.dtype, cos.dtype) == x.dtype:  # fp32 / fp64: in place
            torch.mul(a, cos, out=o).addcmul_(b, sin, value=sign)
        else:  # bf16 / fp16: in fp32, then one rounding
            o.copy_(torch.mul(a, cos).addcmul_(b, sin, value=sign))
    return out


class _Turn(torch.autograd.Function):
    """:func:`_turned` with its backward pass: a rotation's transpose is the rotation by minus the
    angle, so the gradient turns back by ``(cos, -sin)``. Saves only the angles."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        ctx.save_for_backward(cos, sin)
        return _turned(x, cos, sin)

    @staticmethod
    def backward(ctx, grad: Tensor):
        cos, sin = ctx.saved_tensors
        return _turned(grad, cos, -sin), None, None
