"""segment_attention (the fixed pattern on a CPU, merged by log-sum-exp) against the dense masked
computation of the same pattern, and the engine's choice of it."""

import pytest
import torch
from test_block_sparse import check, inputs

from zoo.attention import functional
from zoo.attention.functional import attend, route
from zoo.attention.patterns import fixed, local, strided
from zoo.kernels import run_window_attention, segment_attention


def assert_exact(q, k, v, got, pattern):
    """Outputs and q, k, v gradients equal the spec on ``pattern``'s element mask."""
    T, H = q.shape[2], q.shape[1]
    check(q, k, v, got, pattern.mask(T, H if pattern.per_head else None))


# segment counts 1 .. 13: powers of two and not (the halving pads to 16), ragged ends
@pytest.mark.parametrize("T", [5, 16, 33, 64, 100, 203])
@pytest.mark.parametrize("distinct", [False, True])
def test_fixed_union_matches_the_dense_masked_computation(T, distinct):
    l, c, H = 16, 4, 3
    pattern = fixed(l, c, distinct_summaries=distinct)
    q, k, v = inputs(2, H, T, 8, torch.float64)
    got = attend(q, k, v, pattern)
    assert_exact(q, k, v, got, pattern)


@pytest.mark.parametrize("T", [7, 40])
def test_fixed_a1_alone_is_causal_within_segments(T):
    pattern = fixed(8, 2, component=1)
    q, k, v = inputs(1, 2, T, 4, torch.float64)
    assert_exact(q, k, v, attend(q, k, v, pattern), pattern)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_inputs_keep_their_dtype_and_match(dtype):
    pattern = fixed(32, 8, distinct_summaries=True)
    q, k, v = inputs(1, 4, 300, 16, dtype)
    got = attend(q, k, v, pattern)
    assert got.dtype == dtype
    assert_exact(q, k, v, got, pattern)


def test_autocast_is_switched_off_inside():
    pattern = fixed(16, 4)
    q, k, v = inputs(1, 2, 64, 8, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attend(q, k, v, pattern)
    assert got.dtype == torch.float32
    assert_exact(q, k, v, got, pattern)


@pytest.mark.parametrize("T", [3, 16, 45, 64])
@pytest.mark.parametrize("window, extra", [(16, 0), (17, 1)])  # local(l), strided A1
def test_a_window_over_the_previous_segment_is_sliding_window_attention(T, window, extra):
    """``window = l``: local(l); ``window = l + 1``: strided A1 (i - j <= l)."""
    l = window - extra
    pattern = local(window) if extra == 0 else strided(l, component=1)
    q, k, v = inputs(2, 3, T, 8, torch.float64)
    got = segment_attention(q, k, v, l, window=window)
    assert_exact(q, k, v, got, pattern)


def test_the_engine_routes_fixed_and_strided_a1_by_device():
    union, a1, a2 = fixed(16, 4), fixed(16, 4, component=1), fixed(16, 4, component=2)
    assert [route(p) for p in (union, a1, a2)] == ["segments", "segments", "block_sparse"]
    assert route(union, device_type="cuda") == "block_sparse"
    assert route(strided(8, component=1)) == "local"
    assert route(strided(8, component=1), device_type="cuda") == "block_sparse"
    assert route(strided(8)) == "block_sparse"  # the union: no structured route yet


def test_strided_a1_on_the_local_route_is_exact():
    pattern = strided(8, component=1)
    q, k, v = inputs(2, 2, 50, 4, torch.float64)
    assert_exact(q, k, v, attend(q, k, v, pattern), pattern)


def test_summary_offsets_are_read_off_the_pattern():
    assert functional._summary(fixed(16, 4), 3).tolist() == [[12, 13, 14, 15]]
    distinct = functional._summary(fixed(16, 4, distinct_summaries=True), 3)
    assert distinct.tolist() == [[12, 13, 14, 15], [8, 9, 10, 11], [4, 5, 6, 7]]
    assert functional._summary(fixed(16, 4, component=1), 3) is None


def test_strided_a2_columns_are_exact_in_fp64():
    pattern = strided(8, component=2)
    q, k, v = inputs(2, 3, 61, 4, torch.float64)
    assert_exact(q, k, v, attend(q, k, v, pattern), pattern)


def test_summaries_of_earlier_segments_only():
    """A query sees no summary of a later segment, and the summary of its own segment only up to
    itself: changing a later key changes nothing before it."""
    q, k, v = (x.detach() for x in inputs(1, 2, 64, 8, torch.float32))
    summary = torch.tensor([[12, 13, 14, 15]])
    before = segment_attention(q, k, v, 16, summary)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 30:], v2[:, :, 30:] = 5.0, -5.0
    after = segment_attention(q, k2, v2, 16, summary)
    torch.testing.assert_close(after[:, :, :30], before[:, :, :30])
    assert not torch.allclose(after[:, :, 30:], before[:, :, 30:])


@pytest.mark.parametrize(
    "summary, window, match",
    [
        (torch.tensor([[16]]), None, "summary must be"),
        (torch.tensor([[-1]]), None, "summary must be"),
        (torch.tensor([[1], [2], [3]]), None, "summary must be"),
        (None, 15, "window must be in 16..17"),
        (None, 18, "window must be in 16..17"),
        (torch.tensor([[15]]), 16, "cannot go with a summary"),
    ],
)
def test_bad_summaries_and_windows_raise(summary, window, match):
    q, k, v = (torch.randn(1, 2, 32, 4) for _ in range(3))
    with pytest.raises(ValueError, match=match):
        segment_attention(q, k, v, 16, summary, window=window)


def test_mismatched_shapes_raise():
    q = torch.randn(1, 2, 32, 4)
    with pytest.raises(ValueError, match="must share"):
        segment_attention(q, torch.randn(1, 2, 31, 4), q, 16)


@pytest.mark.parametrize("window, extra", [(16, 0), (17, 1)])
def test_first_segment_rows_with_very_negative_scores_keep_finite_gradients(window, extra):
    """Regression: segment 0 has no segment before it. It used to get zero keys there, and where
    its rows' log-sum-exp was below -88 the fused backward's exp(0 - lse) overflowed, so dq was
    inf * 0 = NaN (a CIFAR-10 run's gradients went NaN after 1,348 steps)."""
    l, T = window - extra, 64
    q, k, v = inputs(1, 2, T, 8, torch.float32)
    with torch.no_grad():  # every score of the first segment about -200: lse far below -88
        q[:, :, :l] = 0.0
        q[:, :, :l, 0] = 20.0
        k[:, :, :l] = 0.0
        k[:, :, :l, 0] = -20.0
    pattern = local(window) if extra == 0 else strided(l, component=1)
    got = segment_attention(q, k, v, l, window=window)
    got.backward(torch.ones_like(got))
    assert all(t.grad.isfinite().all() for t in (q, k, v))
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))  # and exact, in fp64
    assert_exact(q, k, v, segment_attention(q, k, v, l, window=window), pattern)


# --- runs of equal ids: causal routing's sequence sorted by cluster --------------------------------
def run_mask(runs, window):
    """The spec's element mask ``(B, H, T, T)``: ``i - window < j <= i`` within one id."""
    i = torch.arange(runs.shape[-1])
    near = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
    return near & (runs[..., :, None] == runs[..., None, :])


def sorted_runs(B, H, T, n_ids, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_ids, (B, H, T), generator=g).sort(-1).values


# runs longer and shorter than a block and the window, blocks above / below / not dividing it
@pytest.mark.parametrize(
    "T, window, block, n_ids",
    [(50, 7, 4, 5), (64, 16, 16, 3), (100, 13, 5, 20), (9, 3, 2, 1), (77, 16, 64, 2),
     (40, 16, 64, 4), (33, 8, 3, 40), (128, 32, 8, 2)],
)  # fmt: skip
def test_windows_inside_runs_match_the_dense_masked_computation(T, window, block, n_ids):
    q, k, v = inputs(2, 3, T, 8, torch.float64)
    runs = sorted_runs(2, 3, T, n_ids)
    got = run_window_attention(q, k, v, window, runs, block=block)
    check(q, k, v, got, run_mask(runs, window))


def test_runs_keep_low_precision_dtypes_and_switch_autocast_off():
    q, k, v = inputs(1, 2, 96, 16, torch.bfloat16)
    runs = sorted_runs(1, 2, 96, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = run_window_attention(q, k, v, 32, runs, block=16)
    assert got.dtype == torch.bfloat16
    check(q, k, v, got, run_mask(runs, 32))


def test_the_engine_sends_only_sorted_ids_to_the_run_op(monkeypatch):
    """Sorted ids (each id one run) take the run op on a CPU; unsorted ones the masked window."""
    calls = []
    real = functional.run_window_attention
    monkeypatch.setattr(
        functional, "run_window_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    q, k, v = inputs(1, 2, 48, 8, torch.float64)
    runs = sorted_runs(1, 2, 48, 4)
    shuffled = runs[..., torch.randperm(48, generator=torch.Generator().manual_seed(0))]
    for ids in (runs, shuffled):
        check(q, k, v, attend(q, k, v, local(12), segments=ids), run_mask(ids, 12))
    assert calls == [1]


@pytest.mark.parametrize(
    "runs, window, match",
    [(torch.tensor([[[0, 1, 0, 1]]]), 2, "non-decreasing"), (torch.zeros(1, 1, 3), 2, "runs must"),
     (torch.zeros(1, 1, 4), 0, "window and block")],
)  # fmt: skip
def test_bad_runs_and_windows_raise(runs, window, match):
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match=match):
        run_window_attention(q, q, q, window, runs.long())
