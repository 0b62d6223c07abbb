"""``scaled_dot_product_attention`` for many SHORT attention problems (local blocks, clusters), in
the precision that is fastest for them on the tensors' device.

On a CPU, PyTorch's fused attention kernel is much slower in bf16 than in fp32 on short
sequences (fwd+bwd, head dim 32; on one of this project's 2-core CPUs with native bf16: 128
blocks of 128 queries x 256 keys with a mask 24 ms fp32 vs 43 ms bf16, 128 causal clusters of
128 tokens 7 ms vs 23 ms; on the 2-core AMD EPYC with AVX512-BF16, torch 2.13, 2026-11-25: 256
causal clusters of 128 tokens 21 ms vs 63 ms, 256 causal blocks of 128 32 ms vs 36 ms), so under
``torch.autocast`` on a CPU the inputs are upcast and autocast is switched off around the call.
On one long causal sequence the two are about even (4096 tokens, 8 heads: 574 vs 589 ms; a
dense 4096-context LM trained at about 5,000 instead of 5,950 tokens/s with fp32 attention, in a
run partly overlapped by other work), so dense attention with heads of 64 does not use this.
With heads of 32 it does (``zoo.attention.functional.dense_attention``): on the EPYC, 32 x 8
causal heads of 256 fwd+bwd took 74.5 ms in bf16 and 63.5 ms in fp32, and the published dense
model with 8 heads of 32 trained 5 to 10% faster in bf16 (docs/bench/dense_sdpa_fp32_cpu.md,
2026-11-26). Elsewhere (CUDA) the call is left to autocast.
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
