"""Language-modelling metrics as torchmetrics ``Metric`` s (so they reduce correctly under DDP).

Units: losses inside the zoo are natural-log cross-entropies (nats). ``BitsPerByte`` converts a sum
of nats over a number of bytes into bits per byte: ``sum_nats / (n_bytes * ln 2)``. For byte-level
models a token is a byte, so this is also bits per token. ``BitsPerDim`` is the same quantity per
sub-pixel for image models.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["BitsPerByte", "BitsPerDim"]


class BitsPerByte(Metric):
    """Accumulates ``(sum of NLL in nats, number of bytes)``; ``compute()`` gives bits per byte."""

    full_state_update = False
    higher_is_better = False
    is_differentiable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state(
            "nll_sum", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum"
        )
        self.add_state("count", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(self, nll_sum: Tensor, count: Tensor | int) -> None:
        """Add a summed NLL in nats (scalar tensor) over ``count`` bytes."""
        self.nll_sum += nll_sum.detach().to(torch.float64)
        self.count += torch.as_tensor(count, device=self.count.device, dtype=torch.int64)

    def compute(self) -> Tensor:
        return (self.nll_sum / self.count.clamp(min=1) / math.log(2)).float()


class BitsPerDim(BitsPerByte):
    """Bits per sub-pixel (dim) for autoregressive image models: same arithmetic as bits per byte."""
