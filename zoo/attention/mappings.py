"""Probability mappings: attention scores to a distribution (the lecture on neural attention).

Every mapping here is a regularised argmax over the simplex (lecture, "Attention mappings";
SPEC §5), ``p = argmax_{p in Δ} p^T s - Ω(p)``:

- :func:`sparsemax`: ``Ω(p) = ½‖p‖²``, i.e. the Euclidean projection ``p = [s - τ]_+``
  (Martins & Astudillo 2016);
- :func:`entmax15`: Tsallis α = 1.5 entropy, between softmax and sparsemax (Peters, Niculae &
  Martins 2019; Correia et al. 2019);
- :func:`fusedmax`: ``Ω(p) = ½‖p‖² + λ Σ_j |p_j - p_{j-1}|``, computed as the sparsemax of the 1-D
  total-variation prox of the scores (Niculae & Blondel 2017, Proposition 2): neighbouring
  positions get equal weight, so attention picks contiguous segments;
- :func:`csoftmax`: softmax with upper bounds ``p <= u`` (Martins & Kreutzer 2017);
- :func:`csparsemax`: sparsemax with upper bounds ``p <= u`` (Malaviya et al. 2018), the mapping
  of fertility-constrained attention in translation.

sparsemax and entmax15 come from the authors' ``entmax`` package. The TV prox (Condat's direct
algorithm, 2013) and the constrained mappings are written here, each with its analytic backward
(:class:`torch.autograd.Function`).

Shared conventions:

- ``scores``: any shape; the distribution is over ``dim``. ``-inf`` marks a masked entry, which
  gets probability 0; a row with no finite entry gives all zeros (not NaN), as the attention paths
  do for empty rows.
- Dtypes: float32 and float64 scores are mapped in their own dtype; float16 / bfloat16 scores
  (e.g. under autocast) are mapped in float32 and the result is float32, the policy autocast
  applies to softmax. Autocast is switched off inside.
- The output has the shape of ``scores``; ``upper`` broadcasts against ``scores`` and gets a
  gradient of its own shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, get_args

import entmax
import numpy as np
import torch
from torch import Tensor

__all__ = [
    "CONSTRAINED",
    "MAPPINGS",
    "MappingName",
    "csoftmax",
    "csparsemax",
    "entmax15",
    "fusedmax",
    "map_scores",
    "softmax",
    "sparsemax",
    "tv_prox",
]

MappingName = Literal["softmax", "sparsemax", "entmax15", "fusedmax", "csoftmax", "csparsemax"]
MAPPINGS: tuple[str, ...] = get_args(MappingName)
CONSTRAINED = frozenset({"csoftmax", "csparsemax"})  # the mappings that take upper bounds

_BISECTION_STEPS = 80  # float64 bisection of the threshold; then an exact solve on its sets


def _compute_dtype(x: Tensor) -> torch.dtype:
    return x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32


def _rowwise(f: Callable[..., Tensor], scores: Tensor, dim: int, *extra: Tensor | None) -> Tensor:
    """Run ``f(s, *extra)`` on ``(..., n)`` rows with ``dim`` moved last, in the compute dtype
    with autocast off; rows without a finite entry map to zeros."""
    dtype = _compute_dtype(scores)
    with torch.autocast(scores.device.type, enabled=False):
        s = scores.to(dtype).movedim(dim, -1)
        extra = tuple(
            None if e is None else torch.broadcast_to(e.to(dtype), scores.shape).movedim(dim, -1)
            for e in extra
        )
        empty = ~torch.isfinite(s).any(-1, keepdim=True)
        if empty.any():  # give empty rows a harmless finite row (and bounds), then zero them
            s = s.masked_fill(empty, 0.0)
            extra = tuple(None if e is None else e.masked_fill(empty, 1.0) for e in extra)
            p = f(s, *extra).masked_fill(empty, 0.0)
        else:
            p = f(s, *extra)
        return p.movedim(-1, dim)


def softmax(scores: Tensor, dim: int = -1) -> Tensor:
    """Softmax with the conventions of this module (a fully masked row gives zeros)."""
    return _rowwise(lambda s: torch.softmax(s, -1), scores, dim)


# --- sparsemax and entmax15: the entmax package ------------------------------------------------------
def sparsemax(scores: Tensor, dim: int = -1) -> Tensor:
    """Sparsemax (Martins & Astudillo 2016): the Euclidean projection of ``scores`` onto the
    simplex along ``dim``, ``p = [s - τ]_+``, exactly sparse.

    Args:
        scores: any shape, floating point; ``-inf`` = masked.
        dim: the dimension the distribution is over.

    Returns:
        ``p`` of the shape of ``scores`` (float32 for half-precision input), summing to 1 along
        ``dim`` (0 for a fully masked row). Backward: ``J = diag(m) - m m^T / |S|``, ``m`` the
        support indicator (the ``entmax`` package's).
    """
    return _rowwise(lambda s: entmax.sparsemax(s, dim=-1), scores, dim)


def entmax15(scores: Tensor, dim: int = -1) -> Tensor:
    """1.5-entmax (Peters et al. 2019): ``p = [s/2 - τ]_+^2``, sparse like sparsemax, smoother.

    Args and returns as :func:`sparsemax`; exact sort-based forward and analytic backward from the
    ``entmax`` package.
    """
    return _rowwise(lambda s: entmax.entmax15(s, dim=-1), scores, dim)


# --- fusedmax: sparsemax of the 1-D total-variation prox -------------------------------------------
def _condat(y: np.ndarray, lam: float) -> list[tuple[int, int, float]]:
    """Condat's direct algorithm (IEEE SPL 2013) for ``argmin_x ½‖x - y‖² + lam Σ|x_{i+1} - x_i|``.

    ``y``: 1-D float64, length ``N >= 1``. Returns the solution as segments ``(start, stop,
    value)``: ``x[start:stop] = value``, in order, covering ``0..N``.
    """
    N = len(y)
    segments: list[tuple[int, int, float]] = []
    if N == 1 or lam == 0:
        return [(i, i + 1, float(y[i])) for i in range(N)]
    k = k0 = k_minus = k_plus = 0
    v_min, v_max = y[0] - lam, y[0] + lam  # bounds of the current segment's value
    u_min, u_max = lam, -lam  # the dual variable at k for v_min / v_max
    while True:
        while k == N - 1:  # the end: close the current segment(s)
            if u_min < 0:  # v_min is too high: a negative jump after k_minus
                segments.append((k0, k_minus + 1, v_min))
                k = k0 = k_minus = k_minus + 1
                v_min, u_min = y[k], lam
                u_max = v_min + u_min - v_max
            elif u_max > 0:  # v_max is too low: a positive jump after k_plus
                segments.append((k0, k_plus + 1, v_max))
                k = k0 = k_plus = k_plus + 1
                v_max, u_max = y[k], -lam
                u_min = v_max + u_max - v_min
            else:
                segments.append((k0, N, v_min + u_min / (k - k0 + 1)))
                return segments
        u_min += y[k + 1] - v_min
        if u_min < -lam:  # a negative jump is necessary after k_minus
            segments.append((k0, k_minus + 1, v_min))
            k = k0 = k_minus = k_plus = k_minus + 1
            v_min = y[k]
            v_max = v_min + 2 * lam
            u_min, u_max = lam, -lam
            continue
        u_max += y[k + 1] - v_max
        if u_max > lam:  # a positive jump is necessary after k_plus
            segments.append((k0, k_plus + 1, v_max))
            k = k0 = k_minus = k_plus = k_plus + 1
            v_max = y[k]
            v_min = v_max - 2 * lam
            u_min, u_max = lam, -lam
            continue
        k += 1
        if u_min >= lam:  # v_min moves up
            k_minus = k
            v_min += (u_min - lam) / (k - k0 + 1)
            u_min = lam
        if u_max <= -lam:  # v_max moves down
            k_plus = k
            v_max += (u_max + lam) / (k - k0 + 1)
            u_max = -lam


class _TVProx(torch.autograd.Function):
    """Row-wise 1-D TV prox over the finite entries (in order); ``-inf`` entries stay ``-inf``.

    Backward (Niculae & Blondel 2017, Lemma 1): the prox is constant on each fused segment ``G``
    and ``x_G = mean(y_G) + λ (σ_right - σ_left) / |G|``, ``σ`` the signs of the jumps at the
    segment's ends, so ``∂x/∂y`` averages the incoming gradient over each segment and
    ``∂x_G/∂λ = (σ_right - σ_left) / |G|``.
    """

    @staticmethod
    def forward(ctx, y: Tensor, lam: Tensor) -> Tensor:
        rows = y.detach().reshape(-1, y.shape[-1]).cpu().double().numpy()
        value = float(lam)
        x = np.full_like(rows, -np.inf)
        group = np.full(rows.shape, -1, dtype=np.int64)  # segment id (global), -1: masked
        size = np.ones(rows.shape)  # the size of each entry's segment
        dlam = np.zeros(rows.shape)  # ∂x/∂λ
        next_id = 0
        for r, row in enumerate(rows):
            keep = np.flatnonzero(np.isfinite(row))
            if not len(keep):
                continue
            segments = _condat(row[keep], value)
            for i, (a, b, v) in enumerate(segments):
                left = 0.0 if i == 0 else math.copysign(1.0, v - segments[i - 1][2])
                right = (
                    0.0 if i == len(segments) - 1 else math.copysign(1.0, segments[i + 1][2] - v)
                )
                where = keep[a:b]
                x[r, where] = v
                group[r, where] = next_id
                size[r, where] = b - a
                dlam[r, where] = (right - left) / (b - a)
                next_id += 1
        as_tensor = lambda a: torch.from_numpy(a).to(y.device)  # noqa: E731
        ctx.save_for_backward(as_tensor(group), as_tensor(size).to(y.dtype), as_tensor(dlam))
        ctx.n_groups = next_id
        ctx.shape = y.shape
        return as_tensor(x).to(y.dtype).reshape(y.shape)

    @staticmethod
    def backward(ctx, grad: Tensor):
        group, size, dlam = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        kept = group >= 0
        ids = group[kept]
        sums = g.new_zeros(ctx.n_groups).index_add_(0, ids, g[kept])
        grad_y = torch.zeros_like(g)
        grad_y[kept] = sums[ids] / size[kept]
        grad_lam = None
        if ctx.needs_input_grad[1]:
            grad_lam = (g[kept] * dlam[kept].to(g.dtype)).sum()
        return grad_y.reshape(ctx.shape), grad_lam


def _check_lam(lam: float | Tensor) -> Tensor:
    value = float(lam.detach()) if isinstance(lam, Tensor) else float(lam)
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"fusedmax: lam must be a finite number >= 0, got {value}")
    return lam if isinstance(lam, Tensor) else torch.tensor(value)


def tv_prox(scores: Tensor, lam: float | Tensor, dim: int = -1) -> Tensor:
    """The 1-D total-variation prox ``argmin_x ½‖x - s‖² + lam Σ_j |x_j - x_{j-1}|`` along ``dim``
    (the fused lasso, Tibshirani et al. 2005), by Condat's direct algorithm, row by row on the CPU.

    Masked (``-inf``) entries are skipped: the neighbours are the finite entries in order, and the
    masked ones stay ``-inf``. Differentiable in ``scores`` and in ``lam`` (a float or a 0-dim
    tensor). Raises ValueError for ``lam < 0``.
    """
    lam_t = _check_lam(lam)
    with torch.autocast(scores.device.type, enabled=False):
        s = scores.to(_compute_dtype(scores)).movedim(dim, -1)
        return _TVProx.apply(s, lam_t.to(s.dtype)).movedim(-1, dim)


def fusedmax(scores: Tensor, lam: float | Tensor, dim: int = -1) -> Tensor:
    """Fusedmax (Niculae & Blondel 2017): ``argmax_{p in Δ} p^T s - ½‖p‖² - lam Σ_j |p_j - p_{j-1}|``
    along ``dim``, computed as ``sparsemax(tv_prox(scores, lam))`` (their Proposition 2).

    Adjacent positions with close scores get exactly equal weight, so the attention selects
    contiguous segments (of a source sentence, say). ``lam = 0`` is sparsemax; a large ``lam``
    gives the uniform distribution over the unmasked entries.

    Args:
        scores: any shape, floating point; ``-inf`` = masked (skipped by the fused penalty: a
            masked entry's neighbours become adjacent).
        lam: the fused penalty ``λ >= 0`` (float, or a 0-dim tensor, which gets a gradient).
        dim: the dimension the distribution is over.

    Returns:
        ``p`` of the shape of ``scores``, as :func:`sparsemax`. The prox runs on the CPU in
        float64, row by row (the contexts where fusedmax is used are short).

    Raises:
        ValueError: ``lam`` is negative or not finite.
    """
    _check_lam(lam)
    return sparsemax(tv_prox(scores, lam, dim), dim)


# --- constrained softmax / sparsemax --------------------------------------------------------------
def _check_upper(name: str, s: Tensor, u: Tensor) -> Tensor:
    """Bounds of the finite entries; raises ValueError when they are negative or cannot sum to 1."""
    if torch.isnan(u).any() or (u < 0).any():
        raise ValueError(f"{name}: upper must be >= 0 everywhere (and not NaN)")
    finite = torch.isfinite(s)
    total = torch.where(finite, u, 0.0).sum(-1)
    bad = finite.any(-1) & (total < 1 - 1e-6)
    if bad.any():
        raise ValueError(
            f"{name}: the upper bounds of a row sum to {float(total[bad].min()):.4g} over its "
            "unmasked entries, less than 1, so no distribution satisfies p <= upper; raise upper"
        )
    return finite


def _bisect(mass: Callable[[Tensor], Tensor], lo: Tensor, hi: Tensor) -> Tensor:
    """The ``τ`` in ``[lo, hi]`` where the decreasing ``mass(τ)`` crosses 1 (per row)."""
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        above = mass(mid) >= 1
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    return (lo + hi) / 2


class _CSparsemax(torch.autograd.Function):
    """``p = clip(s - τ, 0, u)``, ``Σ p = 1``. Backward (Malaviya et al. 2018, §3.2): with ``F``
    the free entries (``0 < p < u``) and ``A`` the saturated ones (``p = u``),
    ``∂L/∂s = [F] (g - mean_F g)`` and ``∂L/∂u = [A] (g - mean_F g)``."""

    @staticmethod
    def forward(ctx, s: Tensor, u: Tensor) -> Tensor:
        finite = _check_upper("csparsemax", s, u)
        sd, ud = s.double(), u.double()
        big = torch.finfo(torch.float64).max
        lo = torch.where(finite, sd - ud, big).amin(-1, keepdim=True)  # every p = u: mass >= 1
        hi = torch.where(finite, sd, -big).amax(-1, keepdim=True)  # every p = 0
        mass = lambda t: torch.where(finite, (sd - t).clamp(min=0).minimum(ud), 0.0).sum(-1, True)  # noqa: E731
        tau = _bisect(mass, lo, hi)
        sat = finite & (sd - tau >= ud)
        free = finite & ~sat & (sd > tau)
        n_free = free.sum(-1, keepdim=True)
        exact = (
            torch.where(free, sd, 0.0).sum(-1, True) - 1 + torch.where(sat, ud, 0.0).sum(-1, True)
        ) / n_free.clamp(min=1)
        tau = torch.where(n_free > 0, exact, tau)
        p = torch.where(sat, ud, torch.where(free, sd - tau, 0.0)).clamp(min=0).minimum(ud)
        ctx.save_for_backward(free, sat)
        return p.to(s.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):
        free, sat = ctx.saved_tensors
        mean = (g * free).sum(-1, keepdim=True) / free.sum(-1, keepdim=True).clamp(min=1)
        centred = g - mean
        return centred * free, centred * sat


class _CSoftmax(torch.autograd.Function):
    """``p = min(u, exp(s - τ))``, ``Σ p = 1``. Backward (Martins & Kreutzer 2017, §3): with ``F``
    the unsaturated entries, ``m = Σ_F p`` and ``c = Σ_F g p / m``,
    ``∂L/∂s = [F] p (g - c)`` and ``∂L/∂u = [A] (g - c)``."""

    @staticmethod
    def forward(ctx, s: Tensor, u: Tensor) -> Tensor:
        finite = _check_upper("csoftmax", s, u)
        sd, ud = s.double(), u.double()
        log_u = ud.log()  # -inf where u = 0: always saturated at 0
        hi = torch.where(finite, sd, -math.inf).logsumexp(-1, keepdim=True)  # mass <= 1
        lo = torch.where(finite & (ud > 0), sd - log_u, math.inf).amin(-1, keepdim=True)
        lo = torch.minimum(lo, hi)  # all saturated: mass = Σ u >= 1
        mass = lambda t: torch.where(finite, (sd - t).exp().minimum(ud), 0.0).sum(-1, True)  # noqa: E731
        tau = _bisect(mass, lo, hi)
        sat = finite & (sd - tau >= log_u)
        free = finite & ~sat
        room = 1 - torch.where(sat, ud, 0.0).sum(-1, keepdim=True)  # what the free entries share
        soft = torch.where(free, sd, -math.inf)
        has_free = free.any(-1, keepdim=True)
        soft = torch.softmax(torch.where(has_free, soft, 0.0), -1) * free
        p = torch.where(sat, ud, room.clamp(min=0) * soft)
        ctx.save_for_backward(p.to(s.dtype), free, sat)
        return p.to(s.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):
        p, free, sat = ctx.saved_tensors
        m = (p * free).sum(-1, keepdim=True)
        c = (g * p * free).sum(-1, keepdim=True) / torch.where(m > 0, m, 1.0)
        centred = g - c
        return p * centred * free, centred * sat


def _constrained(
    fn: type[torch.autograd.Function], scores: Tensor, upper: Tensor | float, dim: int
) -> Tensor:
    upper_t = torch.as_tensor(upper, dtype=_compute_dtype(scores), device=scores.device)
    try:
        torch.broadcast_shapes(upper_t.shape, scores.shape)
    except RuntimeError:
        raise ValueError(
            f"{fn.__name__.strip('_').lower()}: upper of shape {tuple(upper_t.shape)} does not "
            f"broadcast to the scores' shape {tuple(scores.shape)}"
        ) from None
    return _rowwise(lambda s, u: fn.apply(s, u), scores, dim, upper_t)


def csparsemax(scores: Tensor, upper: Tensor | float, dim: int = -1) -> Tensor:
    """Constrained sparsemax (Malaviya et al. 2018): ``argmin_{p in Δ, p <= u} ‖p - s‖²`` along
    ``dim``, i.e. ``p = clip(s - τ, 0, u)`` with ``τ`` such that ``Σ p = 1``.

    In fertility-constrained attention ``upper`` is each source word's remaining fertility
    (its fertility minus the attention it already received).

    Args:
        scores: any shape, floating point; ``-inf`` = masked (probability 0).
        upper: bounds ``u >= 0``, broadcastable to ``scores`` (a tensor or a float); gets a
            gradient of its own shape.
        dim: the dimension the distribution is over.

    Returns:
        ``p`` of the shape of ``scores`` with ``0 <= p <= upper``, summing to 1 along ``dim``
        (0 for a fully masked row); float32 for half-precision input. The threshold is found by
        bisection in float64, then solved exactly on the resulting sets.

    Raises:
        ValueError: ``upper`` is negative, does not broadcast, or sums to less than 1 over a row's
            unmasked entries.
    """
    return _constrained(_CSparsemax, scores, upper, dim)


def csoftmax(scores: Tensor, upper: Tensor | float, dim: int = -1) -> Tensor:
    """Constrained softmax (Martins & Kreutzer 2017): ``argmin_{p in Δ, p <= u} KL(p ‖
    softmax(s))`` along ``dim``, i.e. ``p = min(u, exp(s - τ))`` with ``Σ p = 1``: the softmax,
    with every entry that would exceed its bound clipped to it and the rest renormalised.

    Args, returns and errors as :func:`csparsemax` (``p`` is dense: every unmasked entry with
    ``u > 0`` gets some mass).
    """
    return _constrained(_CSoftmax, scores, upper, dim)


def map_scores(
    scores: Tensor,
    mapping: MappingName = "softmax",
    *,
    dim: int = -1,
    upper: Tensor | float | None = None,
    lam: float | Tensor = 0.1,
) -> Tensor:
    """Attention probabilities from ``scores`` with the mapping named ``mapping`` (one of
    :data:`MAPPINGS`): ``upper`` goes to the constrained ones (required there), ``lam`` to
    fusedmax. Raises ValueError for an unknown name or a missing ``upper``."""
    if mapping not in MAPPINGS:
        raise ValueError(f"unknown mapping {mapping!r}: choose one of {', '.join(MAPPINGS)}")
    if mapping in CONSTRAINED:
        if upper is None:
            raise ValueError(f"{mapping} needs upper bounds: pass upper=")
        return (csoftmax if mapping == "csoftmax" else csparsemax)(scores, upper, dim)
    if mapping == "fusedmax":
        return fusedmax(scores, lam, dim)
    return {"softmax": softmax, "sparsemax": sparsemax, "entmax15": entmax15}[mapping](scores, dim)
