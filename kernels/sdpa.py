"""``scaled_dot_product_attention`` for many SHORT attention problems (local blocks, clusters), in
the precision that is fastest for them on the tensors' device.

On a CPU, PyTorch's fused attention kernel is slower in bf16 than in fp32 on short sequences
(local blocks, routing clusters), so under ``torch.autocast`` on a CPU the inputs are upcast and
autocast is switched off around the call. On one long causal sequence the two are about even, so
dense attention with heads of 64 does not use this; with heads of 32 it does
(``zoo.attention.functional.dense_attention``). The timings behind both rules are in
docs/kernels.md ("fp32 for short problems on a CPU"). Elsewhere (CUDA) the call is left to
autocast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["sdpa"]


def sdpa(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, **kwargs)``, fp32 (or fp64) on CPU; output in the
    dtype of ``v`` (or of autocast's choice off the CPU)."""
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    wide = torch.promote_types(q.dtype, torch.float32)  # fp64 stays fp64
    with torch.autocast("cpu", enabled=False):
        y = F.scaled_dot_product_attention(q.to(wide), k.to(wide), v.to(wide), **kwargs)
    return y.to(v.dtype)
