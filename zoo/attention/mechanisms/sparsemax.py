"""``attention: sparsemax``: causal self-attention whose probabilities are the sparsemax of the
scores, ``[s - τ]_+`` (Martins & Astudillo 2016), instead of their softmax: each query attends to
a few keys exactly and to the rest not at all.

The scores are materialised (the engine's ``materialised`` route), so memory grows with ``T²``: a
mechanism for the contexts of a few hundred positions, like ``transformer_lm_small``'s 256. No
dropout on the probabilities (it would break their sparsity); the residual and embedding dropout of
the config stay.

Preset: ``transformer_lm_small_sparsemax`` (:mod:`zoo.models.transformer`), ``transformer_lm_small``
with this attention.
"""

from __future__ import annotations

from torch import nn

from zoo.attention.dense import CausalSelfAttention
from zoo.attention.mechanisms import register_attention


@register_attention("sparsemax", pattern="dense")
def build_sparsemax(config, layer: int, params) -> nn.Module:
    c = config
    return CausalSelfAttention(
        c.d_model, c.n_heads, 0.0, c.bias, rotary=c.position == "rotary", mapping="sparsemax"
    )
