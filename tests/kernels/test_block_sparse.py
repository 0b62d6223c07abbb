"""block_sparse_attention (the PyTorch path on a CPU) against the spec: dense attention masked by the
same pattern (zoo.kernels.masked_attention_ref, fp64)."""

import pytest
import torch
import torch.nn.functional as F

from zoo.attention.patterns import fixed, local, strided
from zoo.kernels import (
    BlockSparsePlan,
    block_sparse_attention,
    block_sparse_attention_ref,
    expand_layout,
    masked_attention_ref,
)

# per-dtype tolerances (outputs, gradients): inputs are rounded, math runs in fp32
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 2e-2}


def inputs(B, H, T, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(B, H, T, D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        for _ in range(3)
    ]


def check(q, k, v, got, mask):
    want = masked_attention_ref(q, k, v, mask)
    tol = TOL[q.dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    grad = torch.randn_like(want)
    g_got = torch.autograd.grad(got, (q, k, v), grad.to(got.dtype))
    g_want = torch.autograd.grad(want, (q, k, v), grad)
    for name, a, b in zip("qkv", g_got, g_want, strict=True):
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol, msg=f"d{name}")


PATTERNS = [
    strided(8),
    strided(8, component=2),
    fixed(16, 4),
    fixed(16, 4, distinct_summaries=True),
    local(7),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
@pytest.mark.parametrize(("T", "block"), [(64, 8), (61, 8), (37, 4), (5, 8)])
def test_matches_dense_attention_under_the_element_mask(dtype, pattern, T, block):
    H = 3
    q, k, v = inputs(2, H, T, 16, dtype)
    layout = pattern.layout(T, block, H)
    got = block_sparse_attention(q, k, v, layout, block, mask_mod=pattern.mask_mod)
    assert got.dtype == dtype and got.shape == q.shape
    check(q, k, v, got, pattern.mask(T, H if pattern.per_head else None))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
def test_layout_alone_means_the_expanded_layout(dtype, causal):
    """Without a predicate, whole blocks are attended (the kernel contract): the oracle is dense
    attention masked by the expanded layout (and j <= i when causal)."""
    T, block, H = 45, 8, 2
    nb = -(-T // block)
    g = torch.Generator().manual_seed(1)
    layout = torch.rand(H, nb, nb, generator=g) < 0.4  # per-head, arbitrary, some empty rows
    layout[:, 2] = False  # an empty row of blocks: its queries attend nothing -> zeros
    q, k, v = inputs(1, H, T, 8, dtype)
    got = block_sparse_attention(q, k, v, layout, block, causal=causal)
    mask = expand_layout(layout, block, T)
    if causal:
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
    check(q, k, v, got, mask)
    assert got[:, :, 2 * block : 3 * block].abs().max() == 0


def test_autocast_does_not_change_the_math():
    """Mixed-precision training calls the op inside ``torch.autocast`` (forward only): the scores
    must stay fp32 there too, or the backward pass (run outside autocast) recomputes
    probabilities that disagree with the saved log-sum-exp and returns wrong gradients."""
    T, block, H, pattern = 64, 8, 4, fixed(16, 4, distinct_summaries=True)
    q, k, v = inputs(1, H, T, 16, torch.bfloat16)
    with torch.no_grad():
        q *= 4  # logits of a trained model's size, where bf16 rounding shows
    plan = BlockSparsePlan(pattern.layout(T, block, H), block, T, mask_mod=pattern.mask_mod)
    grad = torch.randn(1, H, T, 16).bfloat16()
    results = []
    for enabled in (False, True):
        with torch.autocast("cpu", torch.bfloat16, enabled=enabled):
            out = block_sparse_attention(q, k, v, plan)
        results.append((out, *torch.autograd.grad(out, (q, k, v), grad)))
    for name, plain, mixed in zip(["out", "dq", "dk", "dv"], *results, strict=True):
        torch.testing.assert_close(mixed, plain, rtol=0, atol=0, msg=name)


def test_a_plan_is_reused_and_equals_the_layout_call():
    T, block, pattern = 50, 4, fixed(8, 2, distinct_summaries=True)
    q, k, v = inputs(2, 4, T, 8, torch.float32)
    plan = BlockSparsePlan(pattern.layout(T, block, 4), block, T, mask_mod=pattern.mask_mod)
    a = block_sparse_attention(q, k, v, plan)
    b = block_sparse_attention(q, k, v, plan)
    c = block_sparse_attention(
        q, k, v, pattern.layout(T, block, 4), block, mask_mod=pattern.mask_mod
    )
    assert torch.equal(a, b) and torch.equal(a, c)


def test_computes_only_the_layout_blocks(monkeypatch):
    """Work is proportional to the blocks: scores are formed for exactly nnz(layout) blocks
    (padded to the longest row of each chunk), never T x T."""
    T, block = 256, 16
    pattern = strided(16, component=1)  # a band: 2 blocks per row
    layout = pattern.layout(T, block)
    q, k, v = inputs(1, 1, T, 8, torch.float32)
    seen = []
    real_softmax_inputs = torch.logsumexp

    def spy(x, dim):
        seen.append(x.shape)
        return real_softmax_inputs(x, dim)

    monkeypatch.setattr(torch, "logsumexp", spy)
    block_sparse_attention(q, k, v, layout, block)
    score_elements = sum(s.numel() for s in seen)
    assert score_elements <= int(layout.sum()) * block * block + 2 * block * block
    assert score_elements < T * T / 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"layout": torch.ones(3, 3, dtype=torch.bool)}, r"bool \(4, 4\)"),
        ({"layout": torch.ones(4, 4)}, "bool"),
        ({"layout": torch.ones(5, 4, 4, dtype=torch.bool)}, "per-head layout has 5 heads"),
    ],
)
def test_bad_layouts_are_rejected(kwargs, match):
    q, k, v = inputs(1, 2, 30, 8, torch.float32)
    with pytest.raises(ValueError, match=match):
        block_sparse_attention(q, k, v, block_size=8, **kwargs)


def test_plan_for_another_length_is_rejected():
    plan = BlockSparsePlan(torch.ones(4, 4, dtype=torch.bool), 8, 32)
    q, k, v = inputs(1, 1, 30, 8, torch.float32)
    with pytest.raises(ValueError, match="built for 32 positions"):
        block_sparse_attention(q, k, v, plan)


def test_sdpa_agrees_with_the_oracle():
    """The oracle itself, against PyTorch's attention on a mask with no empty rows."""
    q, k, v = inputs(1, 2, 20, 8, torch.float64)
    mask = fixed(4, 1).mask(20)
    torch.testing.assert_close(
        masked_attention_ref(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    )


def test_the_spec_from_a_layout_is_the_patterns_element_mask():
    """block_sparse_attention_ref (layout + causal + mask_mod, expanded) equals the oracle on the
    pattern's own element mask, per-head summaries included."""
    pattern, T, block, H = fixed(8, 2, distinct_summaries=True), 37, 4, 3
    q, k, v = inputs(2, H, T, 4, torch.float64)
    spec = block_sparse_attention_ref(
        q, k, v, pattern.layout(T, block, H), block, mask_mod=pattern.mask_mod
    )
    assert spec.dtype == torch.float64
    torch.testing.assert_close(spec, masked_attention_ref(q, k, v, pattern.mask(T, H)))
    # and a layout block turned off removes exactly its keys
    layout = pattern.layout(T, block, H)
    layout[:, -1, 0] = False
    cut = block_sparse_attention_ref(q, k, v, layout, block, mask_mod=pattern.mask_mod)
    assert not torch.allclose(cut[:, :, -block:], spec[:, :, -block:])
    torch.testing.assert_close(cut[:, :, :-block], spec[:, :, :-block])
