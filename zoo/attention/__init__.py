"""Attention modules: the seam through which every family plugs its attention into the shared block."""

from zoo.attention.cache import KVCache, LayerKVCache
from zoo.attention.dense import CausalSelfAttention

__all__ = ["CausalSelfAttention", "KVCache", "LayerKVCache"]
