"""The masked softmax: every probability the zoo materialises goes through :func:`masked_softmax`
(the engine's masked route, routing's statistics and its PyTorch path, the block-sparse
PyTorch path). Two places write it out on purpose:

- the fp64 references (``*_ref``), the specification the tests check against;
- the block-sparse PyTorch path's autograd function (``block_sparse._probs``), which computes the
  same probabilities as ``exp(s - lse)``. It keeps the row log-sum-exp ``lse`` for its backward
  (flash attention's recomputation), which this function does not return."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_softmax"]


def masked_softmax(s: Tensor, allowed: Tensor) -> Tensor:
    """``softmax(s)`` over the last dim with the scores where ``allowed`` is False left out.

    ``s``: scores ``(..., Lq, Lk)`` (computed in fp32 by the callers); ``allowed``: bool,
    broadcastable to it. A row with no allowed key gets zeros, not NaN. Returns ``s``'s dtype
    and the broadcast shape.
    """
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
