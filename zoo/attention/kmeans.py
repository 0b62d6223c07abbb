"""Online spherical k-means, the clustering behind routing attention (Roy et al. 2020, §4.1,
Algorithm 1 lines 28-31).

:class:`SphericalKMeans` holds one head's worth of centroids per routing head: a buffer, moved by
an exponential moving average of the queries and keys assigned to each centroid, never by
gradients. Each token goes to its argmax centroid and ``mu <- ema_decay mu + (1 - ema_decay)/2
(sum of its queries + sum of its keys)``, padding excluded; under
``torch.distributed`` the sums are all-reduced first, so every process keeps the same centroids.
A centroid whose share of the tokens falls too low is revived (:meth:`SphericalKMeans.fit`).

:class:`CentroidOptions` holds the five knobs of the centroids with their one default each:
:class:`SphericalKMeans`, :class:`~zoo.attention.routing.RoutingSpec` and
:class:`~zoo.models.routing_transformer.RoutingTransformerConfig` all read them from there, and
check them through it.

Shape legend: B batch, T positions, h routing heads, D d_head, k clusters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Self

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.recompute import keep_for_recompute, recomputing
from zoo.config import CheckedFields
from zoo.errors import ConfigError

__all__ = [
    "CENTROID_DEFAULTS",
    "CentroidInit",
    "CentroidOptions",
    "ReviveSplit",
    "SphericalKMeans",
    "two_means",
    "unit_layer_norm",
]

CentroidInit = Literal["kmeans", "random"]
ReviveSplit = Literal["farthest", "two_means"]


@dataclass(frozen=True)
class CentroidOptions(CheckedFields):
    """How a routing head's centroids start and move: the online spherical k-means of Roy et al.
    2020, §4.1 (Algorithm 1 lines 28-31), with the zoo's k-means init and revival around it.

    The one place these knobs get their defaults (those of the Routing Transformer family) and
    their checks: :class:`SphericalKMeans` takes its keyword defaults from
    :data:`CENTROID_DEFAULTS`, and :class:`~zoo.attention.routing.RoutingSpec` and
    :class:`~zoo.models.routing_transformer.RoutingTransformerConfig` their field defaults, under
    the same names; each checks its values by building one (:meth:`of`). Init and revival change
    training only; the routing itself is Algorithm 1's.

    Raises:
        ConfigError: a value of the wrong type or outside its choices (:class:`CheckedFields`),
            ``ema_decay`` or ``revive_below`` outside ``[0, 1)``.
    """

    # EMA decay lambda of the centroid update mu <- lambda mu + (1 - lambda)/2 (sum q + sum k)
    # (the paper's 0.999); in [0, 1)
    ema_decay: float = 0.999
    # renormalise each centroid to unit norm after an update (spherical k-means practice);
    # False: Algorithm 1's update as written
    normalize_centroids: bool = True
    # kmeans: a fresh module's first training update fits the centroids to that batch (k-means++
    # seeds, then Lloyd steps); random: keep the random unit vectors it was built with
    centroid_init: CentroidInit = "kmeans"
    # revive a centroid whose occupancy (share of the tokens x k; 1 = balanced) falls below this
    # by splitting the largest cluster; in [0, 1), 0: never
    revive_below: float = 0.5
    # how revival splits the largest cluster: two_means bisects its members (:func:`two_means`);
    # farthest moves halfway to its farthest member (docs/routing_transformer.md compares them)
    revive_split: ReviveSplit = "two_means"

    def __post_init__(self) -> None:
        super().__post_init__()  # types and choices
        for key in ("ema_decay", "revive_below"):
            if not 0.0 <= getattr(self, key) < 1.0:
                never = " (0: never revive)" if key == "revive_below" else ""
                raise ConfigError(f"{key} must be in [0, 1){never}, got {getattr(self, key)}")

    @classmethod
    def of(cls, source: Any) -> Self:
        """The options ``source`` holds under the same names (a
        :class:`~zoo.attention.routing.RoutingSpec`, a model config, a :class:`SphericalKMeans`),
        checked."""
        return cls(**{name: getattr(source, name) for name in cls.field_names()})

    def as_dict(self) -> dict[str, Any]:
        """The five options as keywords, e.g. for :class:`SphericalKMeans`."""
        return asdict(self)


# the defaults of every routing centroid: read these, never repeat the literals
CENTROID_DEFAULTS = CentroidOptions()


def unit_layer_norm(x: Tensor) -> Tensor:
    """LayerNorm without scale or bias (Algorithm 1 lines 7-8): every vector gets norm ``sqrt(D)``."""
    return F.layer_norm(x, x.shape[-1:])


class SphericalKMeans(nn.Module):
    """Online spherical k-means centroids, one set per head: ``centroids`` ``(H, k, D)`` fp32.

    Constructed as random unit vectors, so an untrained model already routes (and generates).

    Args:
        n_heads: heads ``H`` with their own centroids.
        n_clusters: ``k``.
        d_head: ``D``.
        ema_decay: the EMA decay of the centroid update. It and the four options below are the
            :class:`CentroidOptions`, defaults :data:`CENTROID_DEFAULTS` (checked there).
        normalize_centroids: not in Algorithm 1. Without it the argmax assignment favours
            centroids with large norms, i.e. clusters that were large before: on planted clusters
            (tests/attention/test_routing_layer.py) the literal update let 2-3 of 8 centroids
            take every point in 6 of 8 seeds; renormalised, 8 of 8 seeds recovered the clusters.
        centroid_init: ``"kmeans"``: k-means++ seeding, then ``init_iters`` Lloyd steps of
            spherical k-means on the normalised vectors, at the first training update of a
            freshly built module. Loading a state dict counts as initialised (fine-tuning keeps
            its centroids).
        revive_below: random unit vectors in ``D`` dimensions are nobody's nearest centroid once
            the queries concentrate, and the EMA never moves a centroid without members; a
            centroid below this occupancy takes half of the largest cluster (the usual k-means
            rule for an empty cluster).
        init_iters: the Lloyd steps of ``centroid_init="kmeans"``.
        revive_split: ``"farthest"``: the two centroids move apart along the line to that
            cluster's farthest member, each side then assumed to hold half of it.
            ``"two_means"``: bisecting k-means on the cluster's members (:func:`two_means`: a
            split along their principal axis, then ``split_iters`` Lloyd steps), each side then
            holding the share it measured. A farthest member is often an outlier, so the first
            rule can revive a centroid almost nobody is nearest to, which is then revived again
            (docs/routing_transformer.md compares the two rules).
        split_iters: the Lloyd steps of a ``"two_means"`` split.

    Raises:
        ConfigError: a bad centroid option (:class:`CentroidOptions`).

    Init and revival change training only; the routing itself is Algorithm 1's.
    """

    def __init__(
        self,
        n_heads: int,
        n_clusters: int,
        d_head: int,
        ema_decay: float = CENTROID_DEFAULTS.ema_decay,
        normalize_centroids: bool = CENTROID_DEFAULTS.normalize_centroids,
        *,
        centroid_init: CentroidInit = CENTROID_DEFAULTS.centroid_init,
        revive_below: float = CENTROID_DEFAULTS.revive_below,
        init_iters: int = 10,
        revive_split: ReviveSplit = CENTROID_DEFAULTS.revive_split,
        split_iters: int = 3,
    ) -> None:
        super().__init__()
        options = CentroidOptions(
            ema_decay, normalize_centroids, centroid_init, revive_below, revive_split
        )  # checks them
        self.ema_decay, self.normalize_centroids = options.ema_decay, options.normalize_centroids
        self.centroid_init, self.revive_below = options.centroid_init, options.revive_below
        self.revive_split = options.revive_split
        self.init_iters, self.split_iters = init_iters, split_iters
        self.register_buffer(
            "centroids", F.normalize(torch.randn(n_heads, n_clusters, d_head), dim=-1)
        )
        self.occupancy: Tensor | None = None  # (H, k) share of the last update's tokens x k
        self.needs_init = self.centroid_init == "kmeans"
        self.revived = 0  # centroids moved by revive_below over this module's life

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if prefix + "centroids" in state_dict:
            self.needs_init = False  # trained centroids: never refit them

    def _apply(self, fn, recurse=True):
        """``.to(dtype)``, ``.half()`` etc. move the centroids but keep them fp32: the EMA steps of
        ``(1 - ema_decay) = 1e-3`` vanish in bf16 / fp16, so they stay fp32 in every model dtype."""
        centroids = self.centroids
        super()._apply(fn, recurse)
        if self.centroids.dtype != centroids.dtype:
            self.centroids = centroids.to(device=self.centroids.device)
        return self

    def extra_repr(self) -> str:
        H, k, D = self.centroids.shape
        return (
            f"heads={H}, clusters={k}, d_head={D}, ema_decay={self.ema_decay}, "
            f"normalize_centroids={self.normalize_centroids}"
        )

    def _keep_fp32(self) -> None:
        """Put the centroids back to fp32 where something cast them without :meth:`_apply`.

        FSDP's mixed precision does: it casts every floating buffer to ``buffer_dtype`` by
        replacing its ``.data``, and Lightning's FSDP precision sets ``buffer_dtype`` to the compute
        dtype (bf16 for ``bf16-mixed``). Bf16 centroids failed :meth:`scores` (``expected scalar
        type Float but found BFloat16``; tests/test_ddp.py). FSDP casts once, at its first
        forward, so the centroids it started from come back rounded to bf16 (a k-means init fits
        after that); the EMA then runs in fp32, and a full state dict saves them in fp32 without
        casting again (measured with torch's FSDP on CPU). A no-op when they are fp32.
        """
        if self.centroids.dtype != torch.float32:
            self.centroids.data = self.centroids.data.float()

    def scores(self, x: Tensor) -> Tensor:
        """``mu x^T``: ``x`` ``(B, H, T, D)`` -> ``(B, H, k, T)`` in fp32 (also under autocast)."""
        self._keep_fp32()
        with torch.autocast(x.device.type, enabled=False):
            return torch.einsum("hkd,bhtd->bhkt", self.centroids, x.float())

    def assign(self, x: Tensor) -> Tensor:
        """Nearest centroid (largest ``mu . x``) of every vector: ``(B, H, T)`` int64."""
        self._keep_fp32()
        with torch.autocast(x.device.type, enabled=False):  # clusters last: a contiguous argmax
            return torch.einsum("hkd,bhtd->bhtk", self.centroids, x.float()).argmax(-1)

    @torch.no_grad()
    def update(
        self,
        q: Tensor,
        k: Tensor | None = None,
        padding_mask: Tensor | None = None,
        q_clusters: Tensor | None = None,
    ) -> None:
        """One EMA step from queries ``q`` and keys ``k`` ``(B, H, T, D)`` (``None``: shared).

        ``padding_mask`` ``(B, T)`` bool, True at padding: those tokens do not move centroids.
        ``q_clusters``: ``assign(q)`` where the caller already has it (ignored when the centroids
        are about to be fitted, since they move first).
        Under ``torch.distributed`` (DDP, FSDP) each centroid's sum and count are all-reduced
        first: every process applies the update of the global batch, which is what one process
        would do with the whole batch (Roy et al. 2020, §4.1: an exponential moving average of
        the queries and keys assigned to the centroid; tests/test_ddp.py).

        Everything here runs in fp32 with autocast off, as :meth:`scores` does: under
        ``bf16-mixed`` training, autocast would run the k-means init's and revival's matrix
        products in bf16, and revive different centroids.

        Under gradient checkpointing (:mod:`zoo.attention.recompute`) the recomputation in
        backward updates nothing and routes with the centroids from before this update, so a
        step moves the centroids once and routes as it would without checkpointing.
        """
        if recomputing():  # the forward pass made this step's update
            return
        keep_for_recompute(self.centroids)
        with torch.autocast(q.device.type, enabled=False):  # fp32 under bf16-mixed training
            self._update(q, k, padding_mask, q_clusters)

    def _update(
        self, q: Tensor, k: Tensor | None, padding_mask: Tensor | None, q_clusters: Tensor | None
    ) -> None:
        self._keep_fp32()
        both, both_mask = q, padding_mask  # the vectors init and revival look at
        if k is not None:
            both = torch.cat([q, k], 2)
            both_mask = None if padding_mask is None else torch.cat([padding_mask] * 2, 1)
        if self.needs_init:
            self._fit(both, both_mask)
            q_clusters = None
        sums, counts = self._sums(q, padding_mask, q_clusters)
        if k is None:
            sums, counts = 2 * sums, 2 * counts
        else:
            ks, kc = self._sums(k, padding_mask)
            sums, counts = sums + ks, counts + kc
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums)
            dist.all_reduce(counts)
        mu = self.ema_decay * self.centroids + (1 - self.ema_decay) / 2 * sums
        if self.normalize_centroids:
            mu = F.normalize(mu, dim=-1)
        self.centroids.copy_(mu)
        self.occupancy = counts / counts.sum(-1, keepdim=True).clamp(min=1) * counts.shape[-1]
        if self.revive_below > 0:
            self._revive(both, both_mask)

    def _vectors(self, x: Tensor, padding_mask: Tensor | None) -> Tensor:
        """The unit vectors of each head, padding dropped: ``(H, N, D)`` fp32."""
        B, H, T, D = x.shape
        x = F.normalize(x.float(), dim=-1).transpose(0, 1)  # (H, B, T, D)
        if padding_mask is not None:
            x = x[:, ~padding_mask]  # (H, N, D)
        return x.reshape(H, -1, D)

    @torch.no_grad()
    def fit(self, x: Tensor, padding_mask: Tensor | None = None) -> None:
        """Fit the centroids to ``x`` ``(B, H, T, D)``: k-means++ seeds, then ``init_iters`` Lloyd
        steps of spherical k-means, per head. Under ``torch.distributed`` rank 0's fit is
        broadcast, so every process starts from the same centroids. fp32, also under autocast."""
        with torch.autocast(x.device.type, enabled=False):
            self._fit(x, padding_mask)

    def _fit(self, x: Tensor, padding_mask: Tensor | None) -> None:
        self._keep_fp32()
        v = self._vectors(x, padding_mask)  # (H, N, D)
        H, N, D = v.shape
        k = self.centroids.shape[1]
        if N < k:
            return
        g = torch.Generator(device="cpu").manual_seed(0)
        heads = torch.arange(H, device=v.device)
        mu = v.new_empty(H, k, D)
        mu[:, 0] = v[heads, torch.randint(N, (H,), generator=g).to(v.device)]
        # k-means++ on the sphere: seed i drawn with probability ~ (1 - best cosine)^2
        best = torch.full((H, N), -1.0, device=v.device)
        for i in range(1, k):
            best = torch.maximum(best, torch.einsum("hnd,hd->hn", v, mu[:, i - 1]))
            weight = (1 - best).clamp(min=0).square().cpu() + 1e-12
            mu[:, i] = v[heads, torch.multinomial(weight, 1, generator=g)[:, 0].to(v.device)]
        for _ in range(self.init_iters):
            assign = torch.einsum("hkd,hnd->hkn", mu, v).argmax(1)  # (H, N)
            sums = v.new_zeros(H, k, D).scatter_add_(1, assign[..., None].expand(H, N, D), v)
            empty = sums.norm(dim=-1, keepdim=True) == 0
            mu = torch.where(empty, mu, F.normalize(sums, dim=-1))
        if dist.is_available() and dist.is_initialized():
            dist.broadcast(mu, 0)
        self.centroids.copy_(mu)
        self.needs_init = False

    @torch.no_grad()
    def _revive(self, x: Tensor, padding_mask: Tensor | None) -> None:
        """Split the largest cluster for each centroid with occupancy below ``revive_below``
        (the usual k-means rule for an empty cluster): the small centroid and the largest one
        move apart along the line from the largest one to its farthest member of ``x``
        ``(B, H, T, D)``, so the two share that cluster's tokens; under ``"two_means"`` they
        bisect its members instead (:func:`two_means`)."""
        assert self.occupancy is not None
        small = self.occupancy < self.revive_below  # (H, k)
        if not small.any():
            return
        v = self._vectors(x, padding_mask)  # (H, N, D)
        mu = self.centroids.clone()
        scores = torch.einsum("hkd,hnd->hnk", mu, v)  # (H, N, k): a contiguous argmax
        assign = scores.argmax(-1)  # (H, N)
        # every cluster's members as ascending token indices, split from one stable sort per head;
        # a split only moves members of the largest cluster to the small one, so the lists stay
        # exact without another pass over all N tokens
        H, k = small.shape
        order = assign.argsort(dim=-1, stable=True)  # (H, N)
        sizes = assign.new_zeros(H, k).scatter_add_(1, assign, torch.ones_like(assign))
        members = [list(order[h].split(sizes[h].tolist())) for h in range(H)]
        occupancy = self.occupancy.tolist()  # halving is exact in fp32 and in Python floats
        for h, c in small.nonzero().tolist():
            big = max(range(k), key=occupancy[h].__getitem__)  # the first largest, as argmax
            idx = members[h][big]
            if big == c or not len(idx):
                continue
            far = idx[scores[h, idx, big].argmin()]  # its farthest member (the first, on ties)
            step = 0.5 * (v[h, far] - mu[h, big])
            new, old = (
                F.normalize(mu[h, big] + step, dim=-1),
                F.normalize(mu[h, big] - step, dim=-1),
            )
            members_v = v[h, idx]  # (m, D)
            if self.revive_split == "two_means":
                new, old = two_means(members_v, new, old, self.split_iters)
            mu[h, c], mu[h, big] = new, old
            moved = members_v @ mu[h, c] > members_v @ mu[h, big]
            if self.revive_split == "two_means":  # the shares measured
                share = moved.float().mean().item()
                occupancy[h][c], occupancy[h][big] = (
                    occupancy[h][big] * share,
                    occupancy[h][big] * (1 - share),
                )
            else:
                occupancy[h][c] = occupancy[h][big] = occupancy[h][big] / 2
            members[h][c] = torch.cat([members[h][c], idx[moved]]).sort().values
            members[h][big] = idx[~moved]
            self.revived += 1
        if dist.is_available() and dist.is_initialized():
            dist.broadcast(mu, 0)
        self.centroids.copy_(mu)

    def _sums(
        self, x: Tensor, padding_mask: Tensor | None, clusters: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        B, H, T, D = x.shape
        k = self.centroids.shape[1]
        clusters = self.assign(x) if clusters is None else clusters
        rows = (clusters + torch.arange(H, device=x.device).view(1, H, 1) * k).flatten()
        x = x.float().reshape(-1, D)  # (B H T, D), fp32 sums over many tokens
        if padding_mask is not None:
            keep = (~padding_mask)[:, None, :].expand(B, H, T).flatten()
            rows, x = rows[keep], x[keep]
        sums = x.new_zeros(H * k, D).index_add_(0, rows, x)
        counts = torch.bincount(rows, minlength=H * k).to(x.dtype)
        return sums.view(H, k, D), counts.view(H, k)


def two_means(x: Tensor, a: Tensor, b: Tensor, iters: int) -> tuple[Tensor, Tensor]:
    """Split unit vectors ``x`` ``(m, D)`` in two, as bisecting k-means does: by the sign of their
    projection on the principal axis of ``x`` (the top eigenvector of their covariance, turned to
    point along ``a - b``), then ``iters`` Lloyd steps of spherical k-means with ``k = 2``,
    stopping early when one side is empty. Starts from the unit centroids ``a``, ``b`` ``(D,)``
    instead where the axis leaves one side empty (e.g. identical vectors), or where LAPACK's
    eigensolver fails on the covariance ("failed to converge ... ill-conditioned": it stopped a
    training run of a model that routes in layer 0; the failing cluster was not captured).
    Returns the two unit centroids, the one on ``a``'s side first.

    The principal axis, not the farthest member: a cluster of two equal groups and one outlier
    is split into the groups, where the farthest member would take the outlier alone.
    """
    centred = x - x.mean(0)
    try:
        axis = torch.linalg.eigh(centred.T @ centred).eigenvectors[:, -1]  # (D,), D x D: cheap
    except torch.linalg.LinAlgError:  # no axis: the Lloyd steps start from a, b
        axis = torch.zeros_like(a)
    to_a = centred @ (axis if axis @ (a - b) >= 0 else -axis) > 0
    if to_a.any() and not to_a.all():
        a, b = F.normalize(x[to_a].sum(0), dim=-1), F.normalize(x[~to_a].sum(0), dim=-1)
    for _ in range(iters):
        to_a = x @ a > x @ b
        if to_a.all() or not to_a.any():
            break
        a, b = F.normalize(x[to_a].sum(0), dim=-1), F.normalize(x[~to_a].sum(0), dim=-1)
    return a, b
