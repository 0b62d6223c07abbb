"""The Routing Transformer (Roy et al. 2020, "Efficient Content-Based Sparse Attention with Routing
Transformers", TACL 2021).

The decoder-only Transformer of :mod:`zoo.models.transformer` whose attention is
:class:`~zoo.attention.RoutingSelfAttention`: in each layer ``n_local_heads`` heads attend locally
(the previous ``window`` positions) and the rest route through online spherical k-means (§4.1,
Algorithm 1). Routing can be restricted to the top ``n_routing_layers`` layers, as in the paper's
PG-19 model (the lower layers are then all local); ``routing="random"`` is the paper's ablation and
``routing="causal"`` the strictly causal assignment (docs/routing_transformer.md explains when to use
which). Shaw et al. relative positions are an option (``max_relative_position``), alone
(``position="none"``) or with absolute positions.

Generation with a cache always routes causally (a token joins its nearest centroid and attends to
that cluster's most recent ``causal_window`` members), because top-``w`` selection needs the whole
sequence. For a model trained with ``routing="causal"`` cached and uncached decoding agree exactly.

Shape legend: B batch, T positions, C d_model, V vocab_size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from zoo.attention import RoutingSelfAttention
from zoo.attention.kmeans import CENTROID_DEFAULTS, CentroidInit, ReviveSplit
from zoo.attention.mechanisms import AttentionSpec
from zoo.attention.mechanisms.routing import layer_spec
from zoo.attention.routing import RoutingMode, RoutingParams, RoutingSpec
from zoo.errors import ConfigError
from zoo.models.registry import register_model, register_preset
from zoo.models.transformer import TransformerConfig, TransformerLM

__all__ = ["RoutingTransformerConfig", "RoutingTransformerLM", "future_dependence"]


@dataclass(frozen=True)
class RoutingTransformerConfig(TransformerConfig):
    # the attention: the fields below build the registered mechanism `routing` in every layer
    # (own_attention) while `attention` is "dense"; a named attention takes their place
    # (zoo.models.attention_config). Their defaults and checks are RoutingParams'
    # (zoo/attention/routing_params.py), which says what each does.
    builds_own_attention: ClassVar[bool] = True
    # none: relative only (max_relative_position); rotary: turns the local heads' queries and keys
    position: Literal["learned", "sinusoidal", "rotary", "none"] = "learned"
    n_local_heads: int = RoutingParams.n_local_heads  # in routing layers; other layers: all
    n_routing_layers: int | None = None  # routing heads in the top this-many layers; None = all
    window: int = RoutingParams.window
    n_clusters: int = RoutingParams.n_clusters
    routing: RoutingMode = RoutingParams.routing
    causal_window: int | None = RoutingParams.causal_window
    shared_qk: bool = RoutingParams.shared_qk
    # since 2026-11-27 revival bisects below half a share (earlier models: docs/routing_transformer.md)
    ema_decay: float = CENTROID_DEFAULTS.ema_decay
    normalize_centroids: bool = CENTROID_DEFAULTS.normalize_centroids
    centroid_init: CentroidInit = CENTROID_DEFAULTS.centroid_init
    revive_below: float = CENTROID_DEFAULTS.revive_below
    revive_split: ReviveSplit = CENTROID_DEFAULTS.revive_split
    max_relative_position: int = RoutingParams.max_relative_position
    routing_score_scale: float | None = RoutingParams.routing_score_scale
    routing_layer_norm: bool = RoutingParams.routing_layer_norm
    shift_keys: bool = RoutingParams.shift_keys
    own_attention_fields: ClassVar[tuple[str, ...]] = (
        "n_local_heads", "n_routing_layers", *(f.name for f in fields(RoutingParams))
    )  # fmt: skip
    # what a config.json that lacks a key was trained with: without centroid_init and revive_below
    # (saved before these options existed), random centroids and no revival; without
    # revive_split, the farthest split
    saved_defaults: ClassVar[dict[str, Any]] = {
        "centroid_init": "random",
        "revive_below": 0.0,
        "revive_split": "farthest",
    }
    training_only: ClassVar[tuple[str, ...]] = ("centroid_init", "revive_below", "revive_split")

    def structure(self) -> dict[str, Any]:
        """Local and routing heads (Roy et al. 2020, §4). Top-w routing assigns each cluster's
        members by looking at the whole sequence, so its likelihood is not strictly causal. With
        no routing heads the model is local attention (dense where the window covers the
        context), as the paper's ablations. A named attention reports its mechanisms
        (:meth:`~zoo.models.attention_config.AttentionConfig.named_structure`)."""
        if self.names_attention:
            return self.named_structure()
        layers = self.n_layers if self.n_routing_layers is None else self.n_routing_layers
        routing_heads = (self.n_heads - self.n_local_heads) if layers else 0
        common = {"context": self.max_seq_len, "position": self.position}
        if not routing_heads:
            dense = self.window >= self.max_seq_len
            return {"pattern": "dense" if dense else "local", "window": self.window, **common,
                    "causal": True}  # fmt: skip
        return {
            "pattern": "routing",
            "local_heads": self.n_local_heads,
            "routing_heads": routing_heads,
            "routing_layers": layers,
            "window": self.window,
            "clusters": self.n_clusters,
            "routing": self.routing,
            **({"shift_keys": True} if self.shift_keys else {}),  # keys at s = queries at s - 1
            **common,
            "causal": self.routing != "topw",
        }

    def __post_init__(self) -> None:
        super().__post_init__()  # the routing knobs: checked by RoutingParams (own_attention)
        if self.names_attention:  # the fields below are not used
            return
        if not 0 <= self.n_local_heads <= self.n_heads:
            raise ConfigError(
                f"n_local_heads={self.n_local_heads} must be in [0, n_heads={self.n_heads}]"
            )
        if self.n_routing_layers is not None and not 0 <= self.n_routing_layers <= self.n_layers:
            raise ConfigError(
                f"n_routing_layers={self.n_routing_layers} must be in [0, n_layers={self.n_layers}]"
            )

    @property
    def routing_window(self) -> int:
        """Members of a cluster a token attends to under causal routing."""
        return self.causal_window or max(1, self.max_seq_len // self.n_clusters)

    def has_routing(self, layer: int) -> bool:
        n = self.n_layers if self.n_routing_layers is None else self.n_routing_layers
        return layer >= self.n_layers - n and self.n_local_heads < self.n_heads

    def routing_params(self, layer: int) -> RoutingParams:
        """Layer ``layer``'s routing knobs: this config's fields of the same names; a layer
        without routing has all heads local, and causal routing's window is
        :attr:`routing_window`."""
        same = {f.name: getattr(self, f.name) for f in fields(RoutingParams)}
        local = self.n_local_heads if self.has_routing(layer) else self.n_heads
        return RoutingParams(**same | {"n_local_heads": local}).at_context(self.max_seq_len)

    def routing_spec(self, layer: int) -> RoutingSpec:
        """Layer ``layer``'s :class:`RoutingSpec`: :meth:`routing_params` with the width, heads,
        rotary positions (which turn the local heads) and biases of this config."""
        return layer_spec(self, self.routing_params(layer))

    def own_attention(self) -> tuple[AttentionSpec, ...]:
        """The registered mechanism ``routing`` in every layer, with :meth:`routing_params`."""
        return tuple(AttentionSpec("routing", self.routing_params(i)) for i in range(self.n_layers))


@register_model
class RoutingTransformerLM(TransformerLM):
    """Routing Transformer: token ids ``(B, T)`` int64 -> next-token logits ``(B, T, V)``.

    ``forward`` as :class:`~zoo.models.transformer.TransformerLM`'s, and ``padding_mask`` ``(B, T)``
    bool marking padding tokens, which then do not move the centroids (an ``attention_mask``'s
    padding never reaches the layers: padded rows run without it). Centroids are buffers: they are
    saved with the weights and updated only in training mode.

    Raises:
        SequenceTooLongError (a ValueError): the sequence (cached + new positions) is longer than
            ``max_seq_len``.
    """

    model_type = "routing_transformer_lm"
    config_class = RoutingTransformerConfig
    TINY: ClassVar[dict[str, Any]] = TransformerLM.TINY | dict(window=6, n_clusters=4)
    attention_keywords: ClassVar[tuple[str, ...]] = ("padding_mask",)

    @classmethod
    def tiny_config(cls, config: RoutingTransformerConfig) -> RoutingTransformerConfig:
        """Tiny, keeping the preset's share of local heads."""
        if config.names_attention:
            return super().tiny_config(config)
        n_local = config.n_local_heads * cls.TINY["n_heads"] // config.n_heads
        return config.replace(**cls.TINY, n_local_heads=n_local)

    config: RoutingTransformerConfig

    def context_config(self, max_seq_len: int) -> RoutingTransformerConfig:
        """Keeps the causal routing window: by default it is ``max_seq_len / n_clusters``."""
        if self.config.names_attention:
            return super().context_config(max_seq_len)
        return self.config.replace(
            max_seq_len=max_seq_len, causal_window=self.config.routing_window
        )

    def training_logs(self) -> dict[str, Tensor]:
        """Routing statistics of the last training step, for the logger.

        ``routing/occupancy_min`` and ``_max``: the share of tokens whose nearest centroid is
        each centroid, times ``k`` (1 = balanced), over routing heads and layers; a min near 0
        and a max near ``k`` mean the clusters collapsed; ``routing/empty_share``: the share of
        centroids that are no token's nearest. ``routing/far_share``: the mean share
        of routed attention on keys outside the local window; ``routing/uniformity`` (causal
        routing): 1 when the routing heads attend uniformly over their cluster members
        (:meth:`~zoo.attention.RoutingSelfAttention.routing_stats`). With routing in more than
        one layer, ``routing/layer{i}/occupancy_min`` is block ``i``'s own minimum: in a model
        that routes in layer 0 that layer sets the overall one (its routing queries depend on
        the current token alone)."""
        occupancy = {
            i: block.attention.kmeans.occupancy
            for i, block in enumerate(self.blocks)
            if isinstance(block.attention, RoutingSelfAttention)
            and block.attention.kmeans is not None
            and block.attention.kmeans.occupancy is not None
        }
        if not occupancy:
            return {}
        every = torch.cat([o.flatten() for o in occupancy.values()])
        logs = {
            "routing/occupancy_min": every.min(),
            "routing/occupancy_max": every.max(),
            "routing/empty_share": (every == 0).float().mean(),
        }
        if len(occupancy) > 1:
            logs |= {f"routing/layer{i}/occupancy_min": o.min() for i, o in occupancy.items()}
        stats = [m.routing_stats() for m in self.modules() if isinstance(m, RoutingSelfAttention)]
        for name in ("far_share", "uniformity"):
            values = [s[name] for s in stats if name in s]
            if values:
                logs[f"routing/{name}"] = torch.stack(values).mean()
        return logs


@torch.no_grad()
def future_dependence(model: nn.Module, idx: Tensor, changes: list[int]) -> list[dict[str, float]]:
    """How much the predictions BEFORE position ``t`` move when only token ``t`` changes.

    For each ``t`` in ``changes``, token ``t`` of every row of ``idx`` ``(B, T)`` is replaced by the
    next byte (``+1 mod V``) and the model re-run. A strictly causal model gives zeros. Returns one
    dict per ``t``: ``max_logprob_change`` (nats, over positions ``< t`` and the vocabulary),
    ``moved_positions`` (share of positions ``< t`` whose log-probabilities changed by > 1e-5),
    ``nll_change_bits`` (mean absolute change of the next-token loss at positions ``< t - 1``, whose
    targets are unchanged, in bits).
    """
    V = model.config.vocab_size
    base = model(idx).logits.float().log_softmax(-1)  # (B, T, V)
    rows = []
    for t in changes:
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1) % V
        out = model(changed).logits.float().log_softmax(-1)
        diff = (out[:, :t] - base[:, :t]).abs()  # (B, t, V)
        targets = idx[:, 1:t, None]  # next tokens of positions 0..t-2, unchanged
        nll = (out[:, : t - 1].gather(-1, targets) - base[:, : t - 1].gather(-1, targets)).abs()
        rows.append({
            "t": t,
            "max_logprob_change": diff.max().item() if t else 0.0,
            "moved_positions": (diff.amax(-1) > 1e-5).float().mean().item() if t else 0.0,
            "nll_change_bits": nll.mean().item() / math.log(2) if t > 1 else 0.0,
        })  # fmt: skip
    return rows


# --- presets -------------------------------------------------------------------------------------
_SMALL = dict(
    vocab_size=256, max_seq_len=4096, d_model=256, n_layers=4, n_heads=8, d_ff=1024, dropout=0.0,
    position="learned", tie_weights=True, scale_embeddings=False, window=128, n_clusters=32,
)  # fmt: skip

register_preset(
    "routing_transformer_tiny",
    RoutingTransformerLM,
    RoutingTransformerConfig(
        vocab_size=256,
        max_seq_len=256,
        d_model=64,
        n_layers=2,
        n_heads=4,
        d_ff=256,
        dropout=0.0,
        position="learned",
        scale_embeddings=False,
        n_local_heads=2,
        window=16,
        n_clusters=4,
    ),  # fmt: skip
    "byte-level, 2 layers, d=64, 2 local + 2 routing heads: for tests and smoke runs",
)
register_preset(
    "routing_transformer_small",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_SMALL, n_local_heads=4),
    "4 local (window 128) + 4 routing heads (k=32) per layer, 4 layers, d=256, context 4096",
)
register_preset(
    "routing_transformer_small_local",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_SMALL, n_local_heads=8),
    "the small model with all 8 heads local (window 128): the routing ablation's baseline",
)
register_preset(
    "routing_transformer_small_random",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_SMALL, n_local_heads=4, routing="random"),
    "the small model with random instead of top-w routing (the paper's ablation)",
)
register_preset(
    "routing_transformer_small_causal",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_SMALL, n_local_heads=4, routing="causal"),
    "the small model with strictly causal routing (nearest centroid, last 128 members)",
)
register_preset(
    "routing_transformer_small_top2",
    RoutingTransformerLM,
    RoutingTransformerConfig(
        **{**_SMALL, "position": "rotary"},
        n_local_heads=6,
        n_routing_layers=2,
        routing="causal",
        shift_keys=True,
        routing_score_scale=1.0,
    ),  # fmt: skip
    "the paper's PG-19 layout at small size: 8 rotary local heads (window 128) per layer, of which "
    "the top 2 layers route 2 (causal routing, k=32, shifted keys, unscaled scores), context 4096",
)
register_preset(
    "routing_transformer_small_dense",
    RoutingTransformerLM,
    RoutingTransformerConfig(**{**_SMALL, "n_local_heads": 8, "window": 4096}),
    "the small model with dense causal attention (window = context): the full-attention baseline",
)
# GPU size, as sparse_transformer_strided_8k (8 layers, d 512, 8 heads of 64, context 8,192, rotary):
# the paper's PG-19 layout with its window and k guesses of routing_transformer_pg19 (window 256,
# k = 32 clusters of 256), and the same model with every head local (the routing ablation).
_GPU_8K = _SMALL | dict(
    max_seq_len=8192, d_model=512, n_layers=8, d_ff=2048, position="rotary", window=256
)
register_preset(
    "routing_transformer_top2_8k",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_GPU_8K, n_local_heads=6, n_routing_layers=2, routing="causal"),
    "the paper's PG-19 layout at GPU size: 8 layers, d=512, 8 rotary local heads (window 256), of "
    "which the top 2 layers route 2 (causal routing, k=32 clusters of 256), context 8192 "
    "(experiments/routing_transformer/pg19mini_gpu.yaml)",
)
register_preset(
    "routing_transformer_local_8k",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_GPU_8K, n_local_heads=8),
    "routing_transformer_top2_8k with all 8 heads local (window 256) in every layer: its routing "
    "ablation (experiments/routing_transformer/pg19mini_gpu_local.yaml)",
)
register_preset(
    "routing_transformer_pg19",
    RoutingTransformerLM,
    RoutingTransformerConfig(
        vocab_size=98_304,
        max_seq_len=8192,
        d_model=1032,
        n_layers=22,
        n_heads=8,
        d_ff=4128,
        dropout=0.0,
        position="none",
        max_relative_position=256,
        n_local_heads=6,
        n_routing_layers=2,
        window=256,
        n_clusters=32,
    ),  # fmt: skip
    "the paper's PG-19 shape (22 layers, 8 heads, d=1032, n=8192, routing in the top 2 layers "
    "with 2 routing heads, ~98k sub-word vocab); d_ff, window, k and relative positions are our "
    "guesses (the paper does not give them). Not trained here",
)

# CIFAR-10, a small version of the paper's Table 1 ablation (12 layers, 8 heads, k = 6 clusters of
# 512): the four presets share every size and differ only in what the heads of the top 2 layers do.
_CIFAR10 = dict(
    vocab_size=257, max_seq_len=3072, d_model=256, n_layers=4, n_heads=8, d_ff=1024, dropout=0.0,
    position="learned", tie_weights=True, scale_embeddings=False, window=512, n_clusters=6,
    n_routing_layers=2,
)  # fmt: skip
register_preset(
    "routing_transformer_cifar10",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_CIFAR10, n_local_heads=4),
    "CIFAR-10: 4 layers, d=256, 8 heads local (window 512); the top 2 layers route 4 of them "
    "(k=6 clusters of 512)",
)
register_preset(
    "routing_transformer_cifar10_local",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_CIFAR10, n_local_heads=8),
    "the CIFAR-10 model with every head local (window 512): Table 1's local baseline",
)
register_preset(
    "routing_transformer_cifar10_random",
    RoutingTransformerLM,
    RoutingTransformerConfig(**_CIFAR10, n_local_heads=4, routing="random"),
    "the CIFAR-10 model routing to random clusters: Table 1's random ablation",
)
register_preset(
    "routing_transformer_cifar10_dense",
    RoutingTransformerLM,
    RoutingTransformerConfig(**{**_CIFAR10, "n_local_heads": 8, "window": 3072}),
    "the CIFAR-10 model with dense causal attention (window = 3072): Table 1's full attention",
)
