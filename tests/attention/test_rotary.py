import pytest
import torch

import zoo
from zoo.attention.rotary import RotaryEmbedding


def test_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    rope = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    scores = []
    for shift in (0, 7, 300):
        qr, kr = rope(q, start=shift + 5), rope(k, start=shift + 2)
        scores.append((qr * kr).sum())
    torch.testing.assert_close(scores[1], scores[0])
    torch.testing.assert_close(scores[2], scores[0])
    # and they do depend on the distance
    assert not torch.allclose((rope(q, start=9) * rope(k, start=2)).sum(), scores[0])


def test_rotation_keeps_norms_and_position_zero_is_identity():
    x = torch.randn(2, 3, 10, 8)
    rope = RotaryEmbedding(8)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rope(x)[..., 0, :], x[..., 0, :])


def test_each_channel_pair_turns_by_its_position_times_its_frequency():
    """RoFormer §3.4 with the rotate-half pairing: channels (i, i + D/2) at position m turn by
    m * base^(-2i/D); queries and keys alike; a bf16 input is turned in fp32 and rounded once."""
    torch.manual_seed(0)
    D, T, start = 8, 5, 3
    rope = RotaryEmbedding(D)
    x = torch.randn(2, 4, T, D)
    m = torch.arange(start, start + T, dtype=torch.float64)[:, None]
    theta = m * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (T, D/2)
    x1, x2 = x.double()[..., : D // 2], x.double()[..., D // 2 :]
    expected = torch.cat(
        [x1 * theta.cos() - x2 * theta.sin(), x1 * theta.sin() + x2 * theta.cos()], -1
    )
    torch.testing.assert_close(rope(x, start).double(), expected, rtol=1e-5, atol=1e-5)
    q, k = rope.rotate(x, x.flip(0), start)
    assert torch.equal(q, rope(x, start)) and torch.equal(k, rope(x.flip(0), start))
    low = rope(x.bfloat16(), start)
    assert low.dtype == torch.bfloat16
    assert torch.equal(low, rope(x.bfloat16().float(), start).bfloat16())


def composed(x, cos, sin):
    """The turn written as the composition of tensor ops (the previous implementation)."""
    half = x.shape[-1] // 2
    return (x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin).to(x.dtype)


def test_turn_and_its_gradient_equal_the_composed_formula():
    """The autograd function (two fused multiply-adds per half, gradient turned back by minus
    the angle) against autograd through the composed ops: fp64 gradcheck, fp32 to rounding, and
    a bf16 gradient within bf16's precision of the fp64 one."""
    torch.manual_seed(0)
    rope = RotaryEmbedding(16)
    x = torch.randn(2, 3, 12, 16, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda t: rope(t, start=5), (x,))
    cos, sin = rope.angles(5, 12, x.device)
    g = torch.randn_like(x)
    for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 1e-2)):
        xd = x.detach().to(dtype).requires_grad_()
        got = rope(xd, start=5)
        (dx,) = torch.autograd.grad(got, xd, g.to(dtype))
        x64 = xd.detach().double().requires_grad_()
        want = composed(x64, cos.double(), sin.double())
        (dx64,) = torch.autograd.grad(want, x64, g.to(dtype).double())
        assert got.dtype == dx.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
        torch.testing.assert_close(dx.double(), dx64, rtol=tol, atol=tol)
    # fp32 output equals the composed ops' to rounding
    x32 = x.detach().float()
    torch.testing.assert_close(rope(x32, 5), composed(x32, cos, sin), rtol=1e-6, atol=1e-6)


def test_a_strided_view_is_turned_in_its_own_layout():
    """Queries and keys are (B, H, T, D) views of the fused projection's (B, T, H, D) memory."""
    torch.manual_seed(0)
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 6, 3, 8).transpose(1, 2)  # (B, H, T, D), not contiguous
    out = rope(x, start=2)
    assert out.stride() == x.stride()
    torch.testing.assert_close(out, rope(x.contiguous(), start=2), rtol=0, atol=0)


def test_odd_head_dimension_is_refused():
    with pytest.raises(ValueError, match="even head dimension"):
        RotaryEmbedding(7)


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("transformer_lm_tiny", {}),
        ("sparse_transformer_tiny", {}),
        ("routing_transformer_tiny", {"routing": "causal"}),
    ],
)
def test_rotary_models_have_no_position_weights_and_decode_like_the_full_pass(name, overrides):
    torch.manual_seed(0)
    model = zoo.create_model(name, position="rotary", **overrides).eval()
    assert not any("pos" in key for key in model.state_dict())
    idx = torch.randint(0, 256, (2, 40))
    full = model(idx).logits
    cache = model.init_cache()
    steps = [model(idx[:, :17], past_key_values=cache).logits] + [
        model(idx[:, t : t + 1], past_key_values=cache).logits for t in range(17, 40)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=2e-4, rtol=1e-4)


def test_rotary_model_runs_past_its_trained_length_when_rebuilt_longer():
    torch.manual_seed(0)
    model = zoo.create_model("transformer_lm_tiny", position="rotary").eval()
    assert model.extends_context
    longer = model.extended(4 * model.config.max_seq_len)
    assert not longer.training and longer.config.max_seq_len == 512
    idx = torch.randint(0, 256, (1, 3 * model.config.max_seq_len))
    out = longer(idx).logits
    torch.testing.assert_close(out[:, :128], model(idx[:, :128]).logits)
    assert torch.isfinite(out).all()


def test_learned_positions_do_not_extend():
    model = zoo.create_model("transformer_lm_tiny")
    assert not model.extends_context
    with pytest.raises(ValueError, match="learned positions end at max_seq_len=128"):
        model.extended(256)


def test_an_extended_routing_model_keeps_its_causal_window():
    model = zoo.create_model("routing_transformer_tiny", position="rotary", routing="causal")
    longer = model.extended(1024)
    assert longer.config.routing_window == model.config.routing_window == 256 // 4
