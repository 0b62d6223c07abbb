"""Key/value caches for incremental (token-by-token) decoding.

A :class:`KVCache` holds one :class:`LayerKVCache` per layer. Each layer appends the keys and values
of the new positions and reads back everything cached so far, so decoding a token costs O(t) instead
of re-running the whole prefix. Buffers are allocated on the first append, with the dtype and device
of the keys, and sized to the model's ``max_seq_len``.

Families whose attention reads only part of the past (the Sparse Transformer's strided and fixed
patterns, local windows) reuse this interface: a layer receives its ``LayerKVCache`` and the absolute
position of the new tokens (``cache.seq_len`` before the append) and picks what it needs.

Shape legend: B batch, H heads, T new positions, S cached positions, D head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KVCache", "LayerKVCache"]


class LayerKVCache:
    """The keys and values one attention layer has seen so far, shape ``(B, H, S, D)``."""

    def __init__(self, max_seq_len: int) -> None:
        self.max_seq_len = max_seq_len
        self.seq_len = 0  # number of cached positions S
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._aux: dict[str, Tensor] = {}

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k, v`` of shape ``(B, H, T, D)``; return all cached keys and values ``(B, H, S+T, D)``.

        Raises:
            ValueError: the cache would grow past ``max_seq_len``.
        """
        B, H, T, D = k.shape
        end = self.seq_len + T
        if end > self.max_seq_len:
            raise ValueError(
                f"KV cache overflow: {self.seq_len} cached + {T} new positions exceeds "
                f"max_seq_len={self.max_seq_len}. Start a new cache (zoo.generate does this by "
                "re-encoding a window of recent tokens)."
            )
        if self._k is None:
            self._k = k.new_empty(B, H, self.max_seq_len, D)
            self._v = v.new_empty(B, H, self.max_seq_len, v.shape[-1])
        assert self._v is not None
        self._k[:, :, self.seq_len : end] = k
        self._v[:, :, self.seq_len : end] = v
        self.seq_len = end
        return self._k[:, :, :end], self._v[:, :, :end]

    def update_aux(self, name: str, x: Tensor) -> Tensor:
        """Store per-position side information of the positions the last :meth:`update` appended
        (``x`` ``(B, h, T, ...)``, e.g. a routing head's cluster ids); return all of it so far,
        ``(B, h, S, ...)``."""
        T, end = x.shape[2], self.seq_len
        if name not in self._aux:
            self._aux[name] = x.new_empty(*x.shape[:2], self.max_seq_len, *x.shape[3:])
        self._aux[name][:, :, end - T : end] = x
        return self._aux[name][:, :, :end]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` ``(B',)`` int64, in that order (beam search).

        Only the ``seq_len`` filled positions are moved, in place when the batch keeps its size
        (a beam search step), so a step costs what is cached, not the buffer's ``max_seq_len``.
        """
        S = self.seq_len
        buffers = {"_k": self._k, "_v": self._v, **{f"aux:{n}": x for n, x in self._aux.items()}}
        for name, x in buffers.items():
            if x is None:
                continue
            if x.shape[0] == index.numel():
                x[:, :, :S] = x[:, :, :S].index_select(0, index)
            else:  # the batch changes size: a new buffer
                x = x.index_select(0, index)
            if name.startswith("aux:"):
                self._aux[name[4:]] = x
            else:
                setattr(self, name, x)


class KVCache:
    """One :class:`LayerKVCache` per layer; ``cache.seq_len`` is the number of decoded positions."""

    def __init__(self, n_layers: int, max_seq_len: int) -> None:
        self.max_seq_len = max_seq_len
        self.layers = [LayerKVCache(max_seq_len) for _ in range(n_layers)]

    def __getitem__(self, layer: int) -> LayerKVCache:
        return self.layers[layer]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def seq_len(self) -> int:
        """Positions already in the cache: the absolute position of the next token."""
        return self.layers[0].seq_len if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` of every layer (beam search reorders its hypotheses)."""
        for layer in self.layers:
            layer.reorder(index)

    @torch.no_grad()
    def reset(self) -> None:
        for layer in self.layers:
            layer.seq_len = 0
