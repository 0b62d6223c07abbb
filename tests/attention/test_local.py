"""Local (sliding-window) attention and Shaw relative positions against dense masked oracles."""

import pytest
import torch

from zoo.attention import RelativePositions, local_attention


def oracle(q, k, v, allowed, relative=None, distance=None):
    """Dense fp64 attention under ``allowed`` ``(..., T, T)``, with Shaw's terms when given."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2)
    if relative is not None:
        d = distance.clamp(0, relative.max_distance)
        s = s + torch.einsum("...id,...ijd->...ij", q, relative.keys.weight.double()[d])
    p = torch.softmax((s / q.shape[-1] ** 0.5).masked_fill(~allowed, float("-inf")), -1)
    out = p @ v
    if relative is not None:
        out = out + torch.einsum("...ij,...ijd->...id", p, relative.values.weight.double()[d])
    return out


def window_mask(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (i - j >= 0) & (i - j < window)


@pytest.mark.parametrize(("T", "window"), [(64, 16), (61, 16), (10, 16), (33, 1), (40, 7)])
def test_equals_dense_attention_under_the_window_mask(T, window):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g, requires_grad=True) for _ in range(3))
    got = local_attention(q, k, v, window)
    want = oracle(q, k, v, window_mask(T, window))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(want)
    for a, b in zip(
        torch.autograd.grad(got, (q, k, v), grad.float()),
        torch.autograd.grad(want, (q, k, v), grad),
        strict=True,
    ):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("T", "window"), [(64, 16), (61, 16), (10, 16), (33, 1)])
def test_the_strictly_earlier_window_through_the_engine(T, window):
    """``local(W, exclude_self=True)``: the W positions before, never itself; the first query,
    with none, gets zeros (sorted segments take the same path, so the routing kernel is not used)."""
    from zoo.attention import attend
    from zoo.attention.patterns import local

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g, requires_grad=True) for _ in range(3))
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (i - j >= 1) & (i - j <= window)
    segments = torch.randint(0, 3, (2, 3, T), generator=g).sort(-1).values
    same = segments[..., :, None] == segments[..., None, :]
    for seg, mask in ((None, allowed), (segments, allowed & same)):
        got = attend(q, k, v, local(window, exclude_self=True), segments=seg)
        want = oracle(q, k, v, mask).nan_to_num(0.0)  # rows with no key: zeros
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        assert got[:, :, 0].abs().max() == 0
        grads = torch.autograd.grad(got.sum(), (q, k, v))
        assert all(bool(torch.isfinite(g).all()) for g in grads)


def test_segments_restrict_attention_to_equal_ids():
    T, window = 50, 8
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, T, 4, generator=g) for _ in range(3))
    segments = torch.randint(0, 3, (1, 2, T), generator=g).sort(-1).values
    got = local_attention(q, k, v, window, segments=segments)
    same = segments[..., :, None] == segments[..., None, :]
    torch.testing.assert_close(
        got.double(), oracle(q, k, v, window_mask(T, window) & same), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("max_distance", [3, 20])
def test_relative_positions_follow_shaw_et_al(max_distance):
    """Scores get q_i . a^K_{clip(i-j)}, outputs sum_j p_ij a^V_{clip(i-j)} (Shaw et al. eqs. 3-4)."""
    T, window = 37, 9
    torch.manual_seed(2)
    rel = RelativePositions(max_distance, 8)
    q, k, v = (torch.randn(2, 2, T, 8, requires_grad=True) for _ in range(3))
    got = local_attention(q, k, v, window, relative=rel)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    want = oracle(q, k, v, window_mask(T, window), rel, i - j)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    got.sum().backward()
    assert rel.keys.weight.grad.abs().sum() > 0 and rel.values.weight.grad.abs().sum() > 0
    if max_distance < window:  # distances beyond the clip share the last vector
        assert rel.values.weight.grad[max_distance].abs().sum() > 0


def test_relative_positions_use_given_positions():
    """On a permuted sequence, distances come from the tokens' original positions."""
    T = 20
    torch.manual_seed(3)
    rel = RelativePositions(30, 4)
    q, k, v = (torch.randn(1, 1, T, 4) for _ in range(3))
    positions = torch.arange(T).view(1, 1, T) * 3  # tokens 3 apart
    got = local_attention(q, k, v, 5, positions=positions, relative=rel)
    i, j = positions[0, 0][:, None], positions[0, 0][None, :]
    want = oracle(q, k, v, window_mask(T, 5), rel, i - j)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
