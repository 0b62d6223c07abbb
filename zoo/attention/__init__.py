"""Attention: the modules every family plugs into the shared block, and the one engine they call
(:func:`attend`, :mod:`zoo.attention.functional`)."""

from zoo.attention.cache import KVCache, LayerKVCache
from zoo.attention.dense import CausalSelfAttention, MultiHeadAttention
from zoo.attention.functional import attend, local_attention, masked_attention
from zoo.attention.kmeans import SphericalKMeans
from zoo.attention.mechanisms.moba import moba_attention
from zoo.attention.patterns import AttentionPattern, get_pattern
from zoo.attention.relative import RelativePositions
from zoo.attention.routing import RoutingSelfAttention, RoutingSpec
from zoo.attention.sparse import HeadGroup, SparseSelfAttention

__all__ = [
    "AttentionPattern",
    "CausalSelfAttention",
    "HeadGroup",
    "KVCache",
    "LayerKVCache",
    "MultiHeadAttention",
    "RelativePositions",
    "RoutingSelfAttention",
    "RoutingSpec",
    "SparseSelfAttention",
    "SphericalKMeans",
    "attend",
    "get_pattern",
    "local_attention",
    "masked_attention",
    "moba_attention",
]
