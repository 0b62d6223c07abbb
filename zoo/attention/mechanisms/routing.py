"""``attention: routing``: the Routing Transformer's layer (Roy et al. 2020, §4): ``n_local_heads``
heads attend to a local window, the others to the members of their query's cluster under an
online spherical k-means (:class:`~zoo.attention.RoutingSelfAttention`, which the module of this
mechanism is).

The parameters are :class:`~zoo.attention.routing.RoutingParams`, the one place routing's knobs
get their defaults and checks; the model supplies the width, heads, rotary positions (which turn
only the local heads) and biases. ``causal_window`` left ``None`` is ``max_seq_len // n_clusters``
of the model it is built in. ``routing: topw`` looks at the whole sequence to fill the clusters,
so such a layer is not strictly causal (the registry's ``structure`` says ``causal: false``).
The Routing Transformer family builds this mechanism from its own fields
(:meth:`zoo.models.routing_transformer.RoutingTransformerConfig.own_attention`).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from zoo.attention.mechanisms import register_attention
from zoo.attention.routing import RoutingParams, RoutingSelfAttention, RoutingSpec
from zoo.errors import ConfigError

__all__ = ["layer_spec"]


def layer_spec(config, params: RoutingParams) -> RoutingSpec:
    """The :class:`RoutingSpec` of a layer with ``params`` in a model of ``config``: its width,
    heads, rotary positions (which turn the local heads) and biases, and the causal window of its
    context when ``params`` leaves it ``None``.

    Raises:
        ConfigError: more local heads than the model has heads.
    """
    if params.n_local_heads > config.n_heads:
        raise ConfigError(
            f"routing: n_local_heads={params.n_local_heads} exceeds the model's "
            f"n_heads={config.n_heads}"
        )
    values = dataclasses.asdict(params.at_context(config.max_seq_len))
    return RoutingSpec(d_model=config.d_model, n_heads=config.n_heads, **values,
                       rotary=config.position == "rotary", bias=config.bias)  # fmt: skip


@register_attention("routing", RoutingParams)
def build_routing(config, layer: int, params: RoutingParams) -> nn.Module:
    return RoutingSelfAttention(layer_spec(config, params), seed=layer)
