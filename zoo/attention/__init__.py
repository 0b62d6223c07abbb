"""Attention modules: the seam through which every family plugs its attention into the shared block."""

from zoo.attention.cache import KVCache, LayerKVCache
from zoo.attention.dense import CausalSelfAttention
from zoo.attention.patterns import AttentionPattern, get_pattern
from zoo.attention.sparse import HeadGroup, SparseSelfAttention

__all__ = [
    "AttentionPattern",
    "CausalSelfAttention",
    "HeadGroup",
    "KVCache",
    "LayerKVCache",
    "SparseSelfAttention",
    "get_pattern",
]
