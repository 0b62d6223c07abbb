"""Routing attention (Roy et al. 2020, "Efficient Content-Based Sparse Attention with Routing
Transformers", TACL; Algorithm 1, §4.1) with local heads beside it.

The centroids are :class:`~zoo.attention.kmeans.SphericalKMeans` (its own file).
:class:`RoutingSelfAttention` splits a layer's heads into local heads (sliding window,
:func:`zoo.attention.functional.local_attention`) and routing heads, whose queries attend only to the
keys routed to the same centroid.

How a routing head picks its clusters (``routing``):

- ``"topw"`` (default, Algorithm 1): every centroid takes the ``w = ceil(T / k)`` tokens scoring
  highest against it, sorted back into time order; attention inside a cluster is causal on the
  tokens' original positions; outputs are averaged over the clusters a token joined (zero if none).
  Balanced and fast, but the top-``w`` runs over the WHOLE sequence: a later token can push an
  earlier one out of a cluster, so a past prediction can depend on the future through the
  selection (never through attention itself). docs/routing_transformer.md measures the effect.
- ``"causal"``: every token joins its nearest centroid (argmax) and attends to the most recent
  ``causal_window`` members of that cluster up to itself. Nothing depends on later tokens, so it
  passes the strict causality test; cached decoding always routes this way.
- ``"random"``: the paper's ablation, random ``w`` tokens per cluster instead of the top ``w``.

``shift_keys`` (causal routing, an ablation of the zoo's): a routing head's key at position ``s`` is
its query at ``s - 1``, so a query meets the positions that FOLLOW its earlier occurrences and
reads their values: a one-layer induction head (the fully shifted "smeared keys" of Olsson et al.
2022, "In-context Learning and Induction Heads"). Shared queries and keys then put a query and
the key it should copy from in one cluster whenever the two tokens are alike.

Shape legend: B batch, T new positions, S cached + new positions, C d_model, H heads,
h local/routing heads, D d_head, k clusters, w tokens per cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.cache import LayerKVCache
from zoo.attention.functional import attend, masked_attention
from zoo.attention.kmeans import (
    CENTROID_DEFAULTS,
    CentroidInit,
    CentroidOptions,
    ReviveSplit,
    SphericalKMeans,
    unit_layer_norm,
)
from zoo.attention.patterns import local
from zoo.attention.recompute import recomputing
from zoo.attention.relative import RelativePositions
from zoo.attention.rotary import RotaryEmbedding
from zoo.attention.routing_params import RoutingMode, RoutingParams
from zoo.kernels.routing import gather_clusters, scatter_mean
from zoo.kernels.softmax import masked_softmax

__all__ = [
    "RoutingMode",
    "RoutingParams",
    "RoutingSelfAttention",
    "RoutingSpec",
    "causal_routing_stats",
]



@torch.no_grad()
def causal_routing_stats(
    q: Tensor, clusters: Tensor, window: int, causal_window: int, exclude_self: bool = False
) -> dict[str, Tensor]:
    """Per routing head, where causal routing's attention goes and how selective it is.

    ``q``: the routing heads' queries (= keys) ``(B, h, T, D)`` as routing attention takes them
    (:meth:`RoutingSelfAttention.scaled`); ``clusters``: their nearest centroids ``(B, h, T)``.
    Each query attends to the last ``causal_window`` members of its cluster, itself included
    (``"causal"`` routing in the module docstring), or with ``exclude_self`` the last
    ``causal_window`` members before it (``shift_keys``: distances are then to the key's query,
    one position before its value), with content scores ``q·k / sqrt(D)``
    (relative-position biases left out). Returns fp32 ``(h,)`` tensors, means over queries:

    - ``far_share``: the probability mass on keys at least ``window`` positions back, what a
      local window of that size misses;
    - ``uniformity``: ``exp(entropy) / members attended``, over queries with at least 2 members;
      1 = uniform over the members (the head averages them), ``1 / members`` = all on one.

    Scores only each query's band of ``causal_window`` keys in cluster-sorted order, as blocks of
    that size against themselves and the block before: ``O(T causal_window)`` memory and time.
    """
    with torch.autocast(q.device.type, enabled=False):  # fp32 scores under bf16-mixed training
        B, h, T, D = q.shape
        C = min(causal_window, T)  # sorted by (cluster, position), a query's members are the
        order = (clusters * T + torch.arange(T, device=q.device)).argsort(-1)  # C before it
        n = -(-T // C)  # blocks of C sorted positions; the last one padded

        def blocks(x: Tensor, fill: float) -> Tensor:  # (B, h, T, ...) -> (B, h, n, C, ...)
            pad = [0, 0] * (x.dim() - 3) + [0, n * C - T]
            return F.pad(x, pad, value=fill).view(B, h, n, C, *x.shape[3:])

        def with_previous(x: Tensor, fill: float) -> Tensor:  # (B, h, n, C, ...) -> (.., 2C, ..)
            pad = [0, 0] * (x.dim() - 4) + [0, 0, 1, 0]
            return torch.cat([F.pad(x, pad, value=fill)[:, :, :-1], x], 3)

        qs = blocks(q.gather(2, order[..., None].expand(B, h, T, D)).float(), 0.0)
        segment = blocks(clusters.gather(2, order), -1)  # padding: segment -1, no real cluster
        position = blocks(order, 0)
        index = blocks(torch.arange(T, device=q.device).expand(B, h, T), T)  # sorted index
        s = (qs @ with_previous(qs, 0.0).transpose(-1, -2)) * D**-0.5  # (B, h, n, C, 2C)
        back = index[..., None] - with_previous(index, -T)[..., None, :]  # sorted steps back
        same = segment[..., None] == with_previous(segment, -1)[..., None, :]
        inside = (back >= 1) & (back <= C) if exclude_self else (back >= 0) & (back < C)
        allowed = same & inside & (segment[..., None] >= 0)
        p = masked_softmax(s, allowed)
        distance = position[..., None] - with_previous(position, 0)[..., None, :]
        far = (p * (distance >= window)).sum((2, 3, 4)) / T  # padding queries' rows are all 0
        members = allowed.sum(-1)
        several = members >= 2
        ratio = (-torch.special.xlogy(p, p).sum(-1)).exp() / members.clamp_min(1)
        uniformity = (ratio * several).sum((2, 3)) / several.sum((2, 3)).clamp_min(1)
        return {"far_share": far.mean(0), "uniformity": uniformity.mean(0)}


@dataclass(frozen=True)
class RoutingSpec:
    """Every option of a :class:`RoutingSelfAttention` layer, one name per knob: the names of
    :class:`~zoo.models.routing_transformer.RoutingTransformerConfig`, which builds one per layer.

    Args:
        d_model: model width ``C``.
        n_heads: heads ``H``; ``d_head = C / H``.
        n_local_heads: heads doing local attention; the other ``H - n_local_heads`` route.
        window: local attention window.
        n_clusters: centroids ``k`` per routing head.
        routing: ``"topw"``, ``"causal"`` or ``"random"`` (see the module docstring).
        causal_window: in causal routing, the number of most recent cluster members attended to.
        shared_qk: routing heads use their queries as keys (Algorithm 1 line 5; causal models).
        ema_decay: the EMA decay of the centroid update. It and the four options below are the
            centroids' :class:`~zoo.attention.kmeans.CentroidOptions`, with its defaults and
            checks, handed to :class:`~zoo.attention.kmeans.SphericalKMeans` under the same names.
        normalize_centroids: renormalise each centroid to unit norm after an update.
        centroid_init: ``"kmeans"`` fits a fresh layer's centroids to its first training batch;
            ``"random"`` keeps the random unit vectors it was built with.
        revive_below: a centroid whose occupancy falls below this takes part of the largest
            cluster (0: never).
        revive_split: how revival splits the largest cluster, ``"two_means"`` or ``"farthest"``.
        max_relative_position: > 0 adds Shaw et al. relative positions clipped at this distance.
        routing_score_scale: what the routing heads' scores ``q·k`` of LayerNorm'd queries and
            keys (norm ``sqrt(D)``) are multiplied by before the softmax. ``None``: ``1/sqrt(D)``,
            scaled dot product, scores in ``[-sqrt(D), sqrt(D)]``; ``1.0``: Algorithm 1 line 22
            as written, ``A = Q'K'^T``, scores in ``[-D, D]``. Applied by scaling the routed
            queries and keys, so clusters (scale-invariant) and centroid updates (on the
            LayerNorm'd vectors) are unchanged. Not with ``max_relative_position``.
        routing_layer_norm: LayerNorm (without scale and bias) on the routing heads' queries and
            keys before they route and attend (Algorithm 1, lines 5-6). ``False``, an ablation,
            causal routing only: they attend with the raw projections (any norm), and the
            centroids still learn from the LayerNorm'd vectors; a token's cluster (its argmax
            centroid) then sees the raw vector.
        shift_keys: a routing head's key at position ``s`` is its query at ``s - 1`` (module
            docstring): values shifted back one position, each query attending to the last
            ``causal_window`` members of its cluster strictly before it. Causal routing only,
            without relative positions.
        rotary: rotary positions (Su et al. 2021) on the LOCAL heads' queries and keys. Routing
            heads stay purely content-based: turning their queries before the k-means would make
            the clusters depend on position.
        bias: biases in the projections.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``, ``n_local_heads`` outside
            ``[0, n_heads]``, causal routing without ``shared_qk``, a ``routing_score_scale``
            that is not positive or comes with relative positions, ``routing_layer_norm=False``
            without causal routing, or ``shift_keys`` without causal routing or with relative
            positions; a bad centroid option (a :class:`~zoo.errors.ConfigError`, from
            :class:`~zoo.attention.kmeans.CentroidOptions`).
        TypeError: an unknown option (Python's own message names it).
    """

    d_model: int
    n_heads: int
    n_local_heads: int
    window: int
    n_clusters: int
    # the layer's own knobs take their defaults from RoutingParams (and CentroidOptions)
    routing: RoutingMode = RoutingParams.routing
    causal_window: int = 64  # resolved: a family passes max_seq_len // n_clusters or its own
    shared_qk: bool = RoutingParams.shared_qk
    ema_decay: float = CENTROID_DEFAULTS.ema_decay
    normalize_centroids: bool = CENTROID_DEFAULTS.normalize_centroids
    centroid_init: CentroidInit = CENTROID_DEFAULTS.centroid_init
    revive_below: float = CENTROID_DEFAULTS.revive_below
    revive_split: ReviveSplit = CENTROID_DEFAULTS.revive_split
    max_relative_position: int = RoutingParams.max_relative_position
    routing_score_scale: float | None = RoutingParams.routing_score_scale
    routing_layer_norm: bool = RoutingParams.routing_layer_norm
    shift_keys: bool = RoutingParams.shift_keys
    rotary: bool = False
    bias: bool = True

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if not 0 <= self.n_local_heads <= self.n_heads:
            raise ValueError(
                f"n_local_heads must be in [0, {self.n_heads}], got {self.n_local_heads}"
            )
        _ = self.params  # the layer's own knobs, checked where they are defined (ConfigError)

    @property
    def params(self) -> RoutingParams:
        """The layer's own knobs: this spec without the model's width, heads, positions and
        biases."""
        return RoutingParams(**{f.name: getattr(self, f.name) for f in fields(RoutingParams)})

    @property
    def centroid_options(self) -> CentroidOptions:
        """The centroids' options, checked (:class:`~zoo.attention.kmeans.CentroidOptions`)."""
        return CentroidOptions.of(self)


class RoutingSelfAttention(nn.Module):
    """A layer's heads split into ``n_local_heads`` local heads and routing heads.

    Built from a :class:`RoutingSpec`, or from its options as keywords
    (``RoutingSelfAttention(d_model=256, n_heads=8, n_local_heads=4, window=128, n_clusters=32)``).
    ``seed``: ``"random"`` routing in eval mode draws from its own generator seeded with
    ``(seed, T)``, so evaluation is repeatable and leaves the global RNG alone (models pass the
    layer index); training draws from the global RNG, like dropout.

    Input ``x``: ``(B, T, C)``; output ``(B, T, C)``, same dtype.

    Raises:
        ValueError, TypeError: as :class:`RoutingSpec`; TypeError also for a spec and keywords
            together.
    """

    def __init__(self, spec: RoutingSpec | None = None, /, *, seed: int = 0, **options) -> None:
        super().__init__()
        if spec is not None and options:
            raise TypeError(f"give a RoutingSpec or its options, not both (got {sorted(options)})")
        self.spec = spec = spec if spec is not None else RoutingSpec(**options)
        self.n_heads, self.d_head = spec.n_heads, spec.d_model // spec.n_heads
        # the routed q and k are multiplied by this, so SDPA's 1/sqrt(D) gives score_scale q·k
        scale = spec.routing_score_scale
        self.routing_gain = (scale * self.d_head**0.5) ** 0.5 if scale else None
        self.n_local, self.n_routing = spec.n_local_heads, spec.n_heads - spec.n_local_heads
        self.window, self.routing, self.causal_window = (
            spec.window,
            spec.routing,
            spec.causal_window,
        )
        # the engine's patterns: the local heads' window, and causal routing's window of members
        self.local_pattern = local(spec.window)
        self.routing_pattern = local(spec.causal_window, exclude_self=spec.shift_keys)
        self.shared_qk, self.seed = spec.shared_qk, seed
        width = 3 * self.n_local + (2 if spec.shared_qk else 3) * self.n_routing
        self.qkv = nn.Linear(spec.d_model, width * self.d_head, bias=spec.bias)
        self.out_proj = nn.Linear(spec.d_model, spec.d_model, bias=spec.bias)  # W^O
        self.kmeans = (
            SphericalKMeans(
                self.n_routing, spec.n_clusters, self.d_head, **spec.centroid_options.as_dict()
            )
            if self.n_routing
            else None
        )
        relative = spec.max_relative_position
        self.relative = RelativePositions(relative, self.d_head) if relative else None
        self.rotary = RotaryEmbedding(self.d_head) if spec.rotary and self.n_local else None

    def extra_repr(self) -> str:
        return (
            f"local_heads={self.n_local}, window={self.window}, routing_heads={self.n_routing}, "
            f"routing={self.routing!r}, shared_qk={self.shared_qk}"
        )

    def forward(
        self, x: Tensor, cache: LayerKVCache | None = None, padding_mask: Tensor | None = None
    ) -> Tensor:
        B, T, _ = x.shape
        ql, kl, vl, qr, kr, vr = self.project(x)
        qa, ka = self.scaled(qr, kr)  # what routing attention sees; the centroids see qr, kr
        if self.rotary is not None:
            ql, kl = self.rotary.rotate(ql, kl, cache.seq_len if cache is not None else 0)
        if cache is not None:
            y = self._cached(
                torch.cat([ql, qa], 1), torch.cat([kl, ka], 1), torch.cat([vl, vr], 1), cache
            )
        clusters = None  # causal routing's assignment of the queries, reused by the update
        if cache is None:
            routed, clusters = self._route(qa, ka, vr)
            y = torch.cat([self._local(ql, kl, vl), routed], 1)
        if self.training and self.kmeans is not None:  # after routing (Algorithm 1 lines 28-31)
            k_update = None if self.shared_qk else kr.detach()
            q_update = qr.detach() if self.spec.routing_layer_norm else unit_layer_norm(qr.detach())
            self.kmeans.update(q_update, k_update, padding_mask, q_clusters=clusters)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, -1))

    def project(self, x: Tensor) -> tuple[Tensor, ...]:
        """``(B, T, C)`` -> local ``q, k, v`` ``(B, h_local, T, D)`` and routing ``q, k, v``
        ``(B, h_routing, T, D)``, the routing queries and keys layer-normalised unless
        ``routing_layer_norm`` is off (``k is q`` when shared)."""
        B, T, _ = x.shape
        D, hl, hr = self.d_head, self.n_local, self.n_routing
        parts = self.qkv(x).view(B, T, -1, D).transpose(1, 2)  # (B, width, T, D)
        # split, not slicing: each slice's backward would zero-fill a full-size gradient
        sizes = [hl, hl, hl, hr] + ([hr] if self.shared_qk else [hr, hr])
        ql, kl, vl, qr, *rest = parts.split(sizes, dim=1)
        norm = unit_layer_norm if self.spec.routing_layer_norm else (lambda t: t)
        qr = norm(qr)
        kr = qr if self.shared_qk else norm(rest[0])
        return ql, kl, vl, qr, kr, rest[-1]

    def scaled(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The routing heads' LayerNorm'd ``q, k`` ``(B, h, T, D)`` as routing attention takes
        them: times ``routing_gain`` under a ``routing_score_scale`` (``k is q`` stays so when shared)."""
        if self.routing_gain is None:
            return q, k
        qa = q * self.routing_gain
        return qa, (qa if k is q else k * self.routing_gain)

    def _local(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if not self.n_local:  # a layer of routing heads only
            return v
        return attend(q, k, v, self.local_pattern, relative=self.relative)

    def _route(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor | None]:
        """Routing heads over a whole sequence: ``(B, h, T, D)`` -> ``(B, h, T, D)``, and under
        causal routing the queries' clusters ``(B, h, T)`` (``None`` otherwise)."""
        if self.kmeans is None:
            return v, None
        if self.routing == "causal":
            clusters = self.kmeans.assign(q)
            if self.training and not recomputing():  # for far_share()
                self._last_routing = (q.detach(), clusters)
            return self._route_causal(q, v, clusters), clusters
        q_idx, k_idx = self.select(q, k)
        if self.training and not recomputing():  # for far_share(), when a logger asks
            self._last_routing = (q.detach(), k.detach(), q_idx, k_idx)
        if self.relative is None:
            return attend(q, k, v, clusters=(q_idx, k_idx)), None
        return self._route_relative(q, k, v, q_idx, k_idx), None

    @torch.no_grad()
    def routing_stats(self) -> dict[str, Tensor]:
        """Where the last training step's routing heads attended: 0-dim fp32 tensors, means over
        routing heads and queries; ``{}`` before a routed training step. Content scores only:
        relative-position biases are left out.

        - ``far_share``: the probability mass on keys at least ``window`` positions back, i.e.
          outside what the local heads see; 0 would mean routing only repeats local attention.
          Top-w / random routing: within each centroid's ``w`` queries and keys. Causal routing:
          over each query's last ``causal_window`` cluster members (itself included).
        - ``uniformity`` (causal routing): ``exp(entropy) / members attended``; 1 = the heads
          average their members (:func:`causal_routing_stats`).
        """
        last = getattr(self, "_last_routing", None)
        if last is None:
            return {}
        if len(last) == 2:  # causal routing
            stats = causal_routing_stats(
                *last, self.window, self.causal_window, exclude_self=self.spec.shift_keys
            )
            return {name: value.mean() for name, value in stats.items()}
        q, k, q_idx, k_idx = last
        k_idx = q_idx if k_idx is None else k_idx
        qc, kc = gather_clusters(q, q_idx).float(), gather_clusters(k, k_idx).float()
        distance = q_idx[..., :, None] - k_idx[..., None, :]  # (B, h, k, w, w)
        with torch.autocast(q.device.type, enabled=False):  # fp32 scores under bf16-mixed
            s = (qc @ kc.transpose(-1, -2)) * q.shape[-1] ** -0.5
        p = masked_softmax(s, distance >= 0)
        far = (p * (distance >= self.window)).sum(-1)  # (B, h, k, w)
        return {"far_share": far.mean()}

    def far_share(self) -> Tensor | None:
        """``routing_stats()["far_share"]``, or ``None`` before a routed training step."""
        return self.routing_stats().get("far_share")

    def select(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor | None]:
        """Cluster members under ``"topw"`` / ``"random"`` routing (Algorithm 1 lines 9-18).

        ``q, k``: normalised ``(B, h, T, D)``. Returns ``q_idx`` ``(B, h, k, w)``, each centroid's
        ``w = ceil(T / k)`` best-scoring (or random) positions in time order, and ``k_idx`` likewise
        for the keys (``None`` when keys are shared).
        """
        assert self.kmeans is not None
        B, h, T, _ = q.shape
        n_clusters = self.kmeans.centroids.shape[1]
        w = math.ceil(T / n_clusters)
        if self.routing == "random":
            generator = None  # training: the global RNG, like dropout
            if not self.training:
                generator = torch.Generator(q.device).manual_seed(self.seed * 1_000_003 + T)
            scores = torch.rand(B, h, n_clusters, T, device=q.device, generator=generator)
        else:
            scores = self.kmeans.scores(q)  # (B, h, k, T)
        q_idx = scores.topk(w, -1).indices.sort(-1).values  # (B, h, k, w)
        if self.shared_qk:
            return q_idx, None
        k_scores = scores if self.routing == "random" else self.kmeans.scores(k)
        return q_idx, k_scores.topk(w, -1).indices.sort(-1).values

    def _route_relative(
        self, q: Tensor, k: Tensor, v: Tensor, q_idx: Tensor, k_idx: Tensor | None
    ) -> Tensor:
        """Routing with Shaw relative positions on original positions (the math path)."""
        k_idx = q_idx if k_idx is None else k_idx
        distance = q_idx[..., :, None] - k_idx[..., None, :]  # (B, h, k, w, w)
        y = masked_attention(
            gather_clusters(q, q_idx), gather_clusters(k, k_idx), gather_clusters(v, k_idx),
            distance >= 0, relative=self.relative, distance=distance,
        )  # fmt: skip
        return scatter_mean(y, q_idx, q.shape[2])

    def _route_causal(self, q: Tensor, v: Tensor, clusters: Tensor) -> Tensor:
        """Causal routing: sort tokens by (cluster, position), then local attention over the
        sorted sequence restricted to equal clusters = the last ``causal_window`` members (on a
        CPU the engine pads each cluster to its own blocks: :func:`zoo.kernels.run_window_attention`).
        ``clusters``: the queries' nearest centroids ``(B, h, T)``."""
        B, h, T, D = q.shape
        if self.spec.shift_keys:  # key j carries value j + 1; the last one is never attended
            v = F.pad(v[:, :, 1:], (0, 0, 0, 1))
        positions = torch.arange(T, device=q.device)
        order = (clusters * T + positions).argsort(-1)  # (B, h, T)
        gather = order[..., None].expand(B, h, T, D)
        qs = q.gather(2, gather)  # the keys too (shared): one gather, one scatter in backward
        y = attend(
            qs, qs, v.gather(2, gather), self.routing_pattern,
            segments=clusters.gather(2, order), positions=order, relative=self.relative,
        )  # fmt: skip
        return torch.empty_like(y).scatter(2, gather, y)

    def _cached(self, q: Tensor, k: Tensor, v: Tensor, cache: LayerKVCache) -> Tensor:
        """Incremental decoding with a cache; routing heads route causally (see module doc).

        ``q, k, v``: ``(B, H, T, D)`` of the new positions ``past..past+T-1``, local heads first.
        A prompt into an empty cache takes the whole-sequence path (local attention and
        :meth:`_route_causal`: the same attention in ``O(T window)`` memory); later positions
        attend through one ``(T, S)`` mask per head.
        """
        B, H, T, D = q.shape
        past, hl = cache.seq_len, self.n_local
        if past == 0 and self.shared_qk:  # a prompt: the whole-sequence path, O(T window) memory
            y_local = self._local(q[:, :hl], k[:, :hl], v[:, :hl])
            y_routed = v[:, hl:]  # no routing heads
            if self.kmeans is not None:
                clusters = self.kmeans.assign(q[:, hl:])  # keys are the queries
                y_routed = self._route_causal(q[:, hl:], v[:, hl:], clusters)
            cache.update(k, v)
            if self.kmeans is not None:
                cache.update_aux("clusters", clusters)
            return torch.cat([y_local, y_routed], 1)
        k, v = cache.update(k, v)  # (B, H, S, D)
        S, dev = k.shape[2], q.device
        qpos = torch.arange(past, past + T, device=dev)[:, None]  # (T, 1)
        kpos = torch.arange(S, device=dev)[None, :]  # (1, S)
        distance = qpos - kpos
        local = (distance >= 0) & (distance < self.window)  # (T, S)
        allowed = local.expand(B, H, T, S).clone()
        if self.kmeans is not None:
            new = self.kmeans.assign(q[:, hl:])  # (B, h, T): the queries' clusters
            clusters = cache.update_aux("clusters", self.kmeans.assign(k[:, hl:, past:]))
            same = clusters[:, :, None, :] == new[..., None]  # (B, h, T, S)
            same = same & (distance >= (1 if self.spec.shift_keys else 0))
            # members at or after each key, up to the query: the key must be among the last C
            later = same.flip(-1).cumsum(-1).flip(-1)
            allowed[:, hl:] = same & (later <= self.causal_window)
            if self.spec.shift_keys:  # key j carries value j + 1 (<= the query: cached)
                v = torch.cat([v[:, :hl], F.pad(v[:, hl:, 1:], (0, 0, 0, 1))], 1)
        return masked_attention(q, k, v, allowed, relative=self.relative, distance=distance)
