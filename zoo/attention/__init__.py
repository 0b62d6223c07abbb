"""Attention modules: the seam through which every family plugs its attention into the shared block."""

from zoo.attention.cache import KVCache, LayerKVCache
from zoo.attention.dense import CausalSelfAttention, MultiHeadAttention
from zoo.attention.local import RelativePositions, local_attention
from zoo.attention.patterns import AttentionPattern, get_pattern
from zoo.attention.routing import RoutingSelfAttention, SphericalKMeans
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
    "SparseSelfAttention",
    "SphericalKMeans",
    "get_pattern",
    "local_attention",
]
