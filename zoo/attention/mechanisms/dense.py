"""``attention: dense``: multi-head causal softmax attention (Vaswani et al. 2017, §3.2), the
Transformer LM's default. Its attention-probability dropout is the config's ``attention_dropout``
where the family has one (the Sparse Transformer's is 0: the paper drops residual branches, not
attention weights), else ``dropout``."""

from __future__ import annotations

from torch import nn

from zoo.attention.dense import CausalSelfAttention
from zoo.attention.mechanisms import register_attention


@register_attention("dense")
def build_dense(config, layer: int, params) -> nn.Module:
    c = config
    return CausalSelfAttention(
        c.d_model, c.n_heads, getattr(c, "attention_dropout", c.dropout), c.bias,
        rotary=c.position == "rotary",
    )
