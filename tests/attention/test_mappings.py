"""Probability mappings (zoo.attention.mappings): closed forms, hand cases, optimality conditions,
float64 gradcheck of the analytic backwards, masks, autocast and bad input."""

import math

import pytest
import torch

from zoo.attention.mappings import csoftmax, csparsemax, entmax15, fusedmax, sparsemax, tv_prox

NEG = -math.inf
MAPPINGS = {  # name -> p = f(scores), with the extra argument fixed
    "sparsemax": sparsemax,
    "entmax15": entmax15,
    "fusedmax": lambda s, dim=-1: fusedmax(s, 0.3, dim),
    "csoftmax": lambda s, dim=-1: csoftmax(s, 0.6, dim),
    "csparsemax": lambda s, dim=-1: csparsemax(s, 0.6, dim),
}


def rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def bounds(n, seed):
    """Upper bounds in [0.01, 0.31): some bind, and they sum past 1 for n = 12."""
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)).double() * 0.3 + 0.01


# --- shared contract -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MAPPINGS)
def test_a_distribution_over_dim_with_masks_and_empty_rows(name):
    f = MAPPINGS[name]
    s = rand(2, 5, 4, dtype=torch.float32) * 2
    s[0, :, 1] = NEG  # a masked key everywhere in the first batch
    s[1, 3] = NEG  # a row with no key at all
    s.requires_grad_(True)
    p = f(s, dim=-1)
    assert p.shape == s.shape and p.dtype == torch.float32
    assert (p >= 0).all() and not p.isnan().any()
    sums = p.sum(-1)
    torch.testing.assert_close(sums[1, 3], torch.tensor(0.0))  # empty row: zeros, not NaN
    keep = torch.ones_like(sums, dtype=torch.bool)
    keep[1, 3] = False
    torch.testing.assert_close(sums[keep], torch.ones(int(keep.sum())))
    assert (p[0, :, 1] == 0).all()
    (p * rand(*p.shape, seed=1, dtype=p.dtype)).sum().backward()
    assert torch.isfinite(s.grad).all()
    assert (s.grad[0, :, 1] == 0).all() and (s.grad[1, 3] == 0).all()


@pytest.mark.parametrize("name", MAPPINGS)
def test_dim_argument(name):
    f = MAPPINGS[name]
    s = rand(3, 6, 2)
    torch.testing.assert_close(f(s, dim=1), f(s.transpose(1, 2), dim=-1).transpose(1, 2))


@pytest.mark.parametrize("name", MAPPINGS)
def test_under_autocast_half_scores_map_in_float32(name):
    s = rand(4, 7, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p = MAPPINGS[name](s.bfloat16())
    assert p.dtype == torch.float32
    torch.testing.assert_close(p.sum(-1), torch.ones(4))
    torch.testing.assert_close(p, MAPPINGS[name](s.bfloat16().float()))


# --- sparsemax, entmax15 -----------------------------------------------------------------------------
def test_sparsemax_closed_forms():
    s = torch.tensor([[0.5, 0.0, -1.0], [3.0, 1.0, 0.0], [0.2, 0.2, 0.2]])
    want = torch.tensor([[0.75, 0.25, 0.0], [1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    torch.testing.assert_close(sparsemax(s), want)


def test_entmax15_is_the_squared_threshold_form():
    s = rand(5, 9)
    p = entmax15(s)
    # p = [s/2 - tau]_+^2: s/2 - sqrt(p) = tau on the support, one tau per row, above the rest
    support = p > 0
    tau = s / 2 - p.sqrt()
    hi = torch.where(support, tau, -math.inf).amax(-1, keepdim=True)
    lo = torch.where(support, tau, math.inf).amin(-1, keepdim=True)
    assert (hi - lo).max() < 1e-12
    assert (torch.where(support, -math.inf, s / 2) <= lo + 1e-12).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(5, dtype=torch.float64))


@pytest.mark.parametrize("f", [sparsemax, entmax15])
def test_sparse_mappings_gradcheck(f):
    s = rand(3, 6).requires_grad_(True)
    assert torch.autograd.gradcheck(f, (s,))


# --- the TV prox and fusedmax ------------------------------------------------------------------------
def tv_optimal(y, x, lam, tol=1e-9):
    """The optimality certificate of the 1-D TV prox: c = cumsum(y - x) satisfies |c| <= lam,
    c = -lam where x jumps up, +lam where it jumps down, and ends at 0."""
    c = torch.cumsum(y - x, -1)
    jump = x[1:] - x[:-1]
    ok = (c.abs() <= lam + tol).all() and abs(c[-1]) < tol
    ok = ok and ((c[:-1] + lam).abs()[jump > tol] < tol).all()
    return bool(ok and ((c[:-1] - lam).abs()[jump < -tol] < tol).all())


@pytest.mark.parametrize("lam", [0.0, 0.05, 0.5, 2.0, 50.0])
def test_tv_prox_satisfies_its_optimality_conditions(lam):
    for seed in range(20):
        y = rand(1 + 7 * seed % 40, seed=seed) * 3
        x = tv_prox(y, lam)
        assert tv_optimal(y, x, lam), (seed, y, x)


def test_tv_prox_hand_cases_and_masks():
    # two entries: each moves lam toward the other, or both meet at the mean
    torch.testing.assert_close(tv_prox(torch.tensor([0.0, 10.0]), 1.0), torch.tensor([1.0, 9.0]))
    torch.testing.assert_close(tv_prox(torch.tensor([0.0, 1.0]), 1.0), torch.tensor([0.5, 0.5]))
    y = torch.tensor([0.0, 10.0, 3.0, 3.5, -1.0])
    torch.testing.assert_close(tv_prox(y, 1.0), torch.tensor([1.0, 8.0, 3.25, 3.25, 0.0]))
    # a masked entry is skipped: its neighbours are adjacent
    masked = torch.tensor([0.0, NEG, 10.0])
    torch.testing.assert_close(tv_prox(masked, 1.0), torch.tensor([1.0, NEG, 9.0]))


def test_fusedmax_limits_and_segments():
    s = rand(4, 8)
    torch.testing.assert_close(fusedmax(s, 0.0), sparsemax(s))
    torch.testing.assert_close(fusedmax(s, 1e4), torch.full_like(s, 1 / 8))
    masked = s.clone()
    masked[:, 5:] = NEG
    torch.testing.assert_close(fusedmax(masked, 1e4)[:, :5], torch.full((4, 5), 0.2, dtype=s.dtype))
    # a plateau of close scores is fused into one segment of equal weights
    p = fusedmax(torch.tensor([0.0, 1.0, 1.1, 0.9, 0.0]), 0.2)
    assert p[1] == p[2] == p[3] > 0 and p[0] == p[4] == 0


def test_fusedmax_gradcheck_in_scores_and_lam():
    s = (rand(3, 7) * 2).requires_grad_(True)
    lam = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fusedmax, (s, lam))
    assert torch.autograd.gradcheck(lambda y, t: tv_prox(y, t), (s, lam))


def test_fusedmax_rejects_a_negative_lam():
    with pytest.raises(ValueError, match="lam must be a finite number >= 0, got -0.1"):
        fusedmax(torch.zeros(3), -0.1)


# --- constrained softmax / sparsemax -----------------------------------------------------------------
def test_constrained_mappings_without_active_bounds_are_the_plain_ones():
    s = rand(4, 6)
    torch.testing.assert_close(csoftmax(s, 1.0), torch.softmax(s, -1))
    torch.testing.assert_close(csparsemax(s, 1.0), sparsemax(s))


def test_constrained_hand_cases():
    torch.testing.assert_close(
        csoftmax(torch.zeros(3), torch.tensor([0.2, 1.0, 1.0])), torch.tensor([0.2, 0.4, 0.4])
    )
    torch.testing.assert_close(
        csparsemax(torch.tensor([1.0, 0.9, 0.0]), torch.tensor([0.3, 1.0, 1.0])),
        torch.tensor([0.3, 0.7, 0.0]),
    )
    # a bound of 0 removes an entry, as a fully spent fertility does
    torch.testing.assert_close(
        csoftmax(torch.tensor([5.0, 0.0]), torch.tensor([0.0, 1.0])), torch.tensor([0.0, 1.0])
    )
    # bounds that leave no room: p = u
    torch.testing.assert_close(
        csparsemax(torch.tensor([0.0, 3.0, 1.0]), torch.tensor([0.5, 0.25, 0.25])),
        torch.tensor([0.5, 0.25, 0.25]),
    )


def test_csoftmax_optimality():
    """p = min(u, exp(s - tau)): the free entries share one tau, the clipped ones lie above it."""
    for seed in range(10):
        s, u = rand(12, seed=seed) * 2, bounds(12, seed)
        p = csoftmax(s, u)
        assert abs(p.sum() - 1) < 1e-12 and (p <= u + 1e-12).all()
        free = p < u - 1e-12
        tau = s[free] - p[free].log()
        assert tau.max() - tau.min() < 1e-9
        assert (s[~free] - u[~free].log() >= tau.max() - 1e-9).all()


def test_csparsemax_optimality():
    """p = clip(s - tau, 0, u) with one tau for the row."""
    for seed in range(10):
        s, u = rand(12, seed=seed), bounds(12, seed)
        p = csparsemax(s, u)
        assert abs(p.sum() - 1) < 1e-12 and (p >= 0).all() and (p <= u + 1e-12).all()
        free = (p > 1e-12) & (p < u - 1e-12)
        tau = (s - p)[free]
        assert len(tau) and tau.max() - tau.min() < 1e-9
        assert (s[p <= 1e-12] <= tau.max() + 1e-9).all()
        assert (s[p >= u - 1e-12] - u[p >= u - 1e-12] >= tau.min() - 1e-9).all()


@pytest.mark.parametrize("f", [csoftmax, csparsemax])
def test_constrained_gradcheck_in_scores_and_broadcast_bounds(f):
    s = (rand(2, 3, 6) * 2).requires_grad_(True)
    u = torch.rand(6, generator=torch.Generator().manual_seed(3)).double() * 0.3 + 0.12
    u.requires_grad_(True)
    assert torch.autograd.gradcheck(f, (s, u))
    p = f(s, u)
    assert ((p - u).abs() < 1e-9).any()  # some bound is active, so both gradients are exercised


@pytest.mark.parametrize("f", [csoftmax, csparsemax])
def test_constrained_bad_bounds_are_clear_errors(f):
    with pytest.raises(ValueError, match="sum to 0.6 .* less than 1, so no distribution"):
        f(torch.zeros(2, 3), torch.full((3,), 0.2))
    # a fully masked row gives zeros whatever its bounds (there is nothing to distribute)
    s = torch.tensor([[0.0, 1.0, NEG], [NEG, NEG, NEG]])
    p = f(s, torch.tensor([[0.6, 0.6, 0.6], [0.1, 0.1, 0.1]]))
    assert (p[1] == 0).all() and torch.allclose(p[0].sum(), torch.tensor(1.0))
    # masked entries do not count toward the room
    with pytest.raises(ValueError, match="raise upper"):
        f(torch.tensor([0.0, NEG, NEG]), torch.full((3,), 0.5))
    with pytest.raises(ValueError, match="upper must be >= 0"):
        f(torch.zeros(3), torch.tensor([1.5, -0.5, 0.0]))
    with pytest.raises(ValueError, match=r"upper of shape \(4,\) does not broadcast"):
        f(torch.zeros(2, 3), torch.ones(4))
