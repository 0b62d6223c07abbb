"""The knobs of a Routing Transformer layer (Roy et al. 2020, §4): :class:`RoutingParams`, the
parameters of the registered mechanism ``routing`` and the one place those knobs get their
defaults and checks (:class:`~zoo.attention.routing.RoutingSpec` adds the model's width, heads,
positions and biases; the centroids' options come from
:class:`~zoo.attention.kmeans.CentroidOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from zoo.attention.kmeans import CentroidOptions
from zoo.config import require_positive
from zoo.errors import ConfigError

__all__ = ["RoutingMode", "RoutingParams"]

RoutingMode = Literal["topw", "causal", "random"]


@dataclass(frozen=True)
class RoutingParams(CentroidOptions):
    """A routing layer's own knobs, the parameters of the registered mechanism ``routing``
    (:mod:`zoo.attention.mechanisms.routing`): the one place they get their defaults and checks.
    :class:`RoutingSpec` adds the model's width, heads, positions and biases; the Routing
    Transformer family's fields of the same names build these (Roy et al. 2020, §4; the
    centroids' options and their defaults come from :class:`CentroidOptions`). Each field is
    documented at :class:`RoutingSpec`; ``causal_window`` ``None`` means the model's
    ``max_seq_len // n_clusters``.

    Raises:
        ConfigError: a wrong type or choice, a non-positive size, causal routing without
            ``shared_qk``, ``routing_layer_norm=False`` or ``shift_keys`` without causal routing,
            ``shift_keys`` or ``routing_score_scale`` with relative positions, or a bad centroid
            option.
    """

    n_local_heads: int = 4  # heads doing local attention; the rest route
    window: int = 128  # the local heads' window, the query's own position included
    n_clusters: int = 16  # k centroids per routing head
    routing: RoutingMode = "topw"  # topw (Algorithm 1) | causal | random (the ablation)
    causal_window: int | None = None  # causal routing: recent members; None: max_seq_len / k
    shared_qk: bool = True  # routing heads' keys are their queries (Algorithm 1 line 5)
    max_relative_position: int = 0  # > 0: Shaw et al. relative positions clipped here
    routing_score_scale: float | None = None  # None: 1/sqrt(d_head); 1.0: Algorithm 1 line 22
    routing_layer_norm: bool = True  # LayerNorm on routed q and k (Algorithm 1 lines 5-6)
    shift_keys: bool = False  # causal routing: a head's key at s is its query at s - 1

    def __post_init__(self) -> None:
        super().__post_init__()  # types, choices and the centroid options
        require_positive("routing", window=self.window, n_clusters=self.n_clusters,
                         causal_window=self.causal_window)  # fmt: skip
        require_positive("routing", 0, n_local_heads=self.n_local_heads,
                         max_relative_position=self.max_relative_position)  # fmt: skip
        if self.routing == "causal" and not self.shared_qk:
            raise ConfigError("routing='causal' needs shared_qk=True (one cluster per token)")
        if not self.routing_layer_norm and self.routing != "causal":
            raise ConfigError(
                "routing_layer_norm=false is an ablation of causal routing: set routing='causal'"
            )
        if self.shift_keys and (self.routing != "causal" or self.max_relative_position):
            raise ConfigError("shift_keys=true needs routing='causal' and max_relative_position 0")
        scale = self.routing_score_scale
        if scale is not None and scale <= 0:
            raise ConfigError(
                f"routing_score_scale must be positive (or null for 1/sqrt(d_head)), got {scale}"
            )
        if scale is not None and self.max_relative_position:
            raise ConfigError(
                "routing_score_scale works without relative positions: set max_relative_position 0"
            )

    @property
    def causal(self) -> bool:
        """False for top-w routing, which assigns cluster members over the whole sequence."""
        return self.routing != "topw"

    def at_context(self, max_seq_len: int) -> RoutingParams:
        """These parameters with the causal window of a model of ``max_seq_len`` positions
        written out, so that the same weights at another context keep it."""
        return replace(self, causal_window=self.causal_window or max(1, max_seq_len // self.n_clusters))

    def tiny(self) -> RoutingParams:
        """These parameters for the tests' tiny models: a window of 6, 4 clusters, at most one
        local head."""
        return replace(self, window=6, n_clusters=4, causal_window=None,
                       n_local_heads=min(self.n_local_heads, 1))  # fmt: skip
