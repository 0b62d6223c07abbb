"""block_select_attention (both paths) against its spec: dense fp64 attention under the element
mask of the chosen blocks (zoo.kernels.block_select_attention_ref)."""

import pytest
import torch
from zoo.kernels.block_select import block_select_mask

from zoo.kernels import block_select_attention, block_select_attention_ref

# per-dtype tolerances (outputs, gradients): inputs are rounded, the pieces merge in fp32
TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 3e-2}
PATHS = ["torch", "flash_cpu", "gather"]


def inputs(B, H, T, S, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(B, H, n, D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        for n in (T, S, S)
    )
    return q, k, v, g


def check(got, want, q, k, v):
    tol = TOL[q.dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    grad = torch.randn_like(want)
    g_got = torch.autograd.grad(got, (q, k, v), grad.to(got.dtype))
    g_want = torch.autograd.grad(want, (q, k, v), grad)
    for name, a, b in zip("qkv", g_got, g_want, strict=True):
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol, msg=f"d{name}")


@pytest.mark.precision
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("T", "S", "b", "n"),
    [(37, 37, 5, 3), (64, 64, 8, 4), (1, 37, 5, 4), (10, 29, 7, 2), (5, 5, 8, 2), (40, 40, 8, 1)],
)
def test_equals_the_spec_for_any_choice_of_blocks(path, dtype, T, S, b, n):
    q, k, v, g = inputs(2, 3, T, S, 8, dtype)
    nb = -(-S // b)
    blocks = torch.randint(-1, nb + 1, (2, 3, T, n), generator=g)  # -1, repeats, one past the end
    got = block_select_attention(q, k, v, blocks, b, path=path)
    assert got.dtype == dtype and got.shape == q.shape
    check(got, block_select_attention_ref(q, k, v, blocks, b), q, k, v)


@pytest.mark.parametrize("path", PATHS)
def test_a_query_with_no_allowed_key_gets_zeros_and_no_gradient(path):
    q, k, v, _ = inputs(1, 1, 16, 16, 4, torch.float32)
    blocks = torch.full((1, 1, 16, 2), -1)
    blocks[0, 0, :, 0] = 3  # block 3 (keys 12..15) lies after queries 0..11
    out = block_select_attention(q, k, v, blocks, 4, path=path)
    assert out[0, 0, :12].eq(0).all() and out[0, 0, 12:].ne(0).any()
    out[0, 0, :12].sum().backward()
    assert q.grad.eq(0).all() and k.grad.eq(0).all() and v.grad.eq(0).all()


@pytest.mark.parametrize("path", PATHS)
def test_causal_inside_the_chosen_blocks_and_a_repeat_counts_once(path):
    q, k, v, _ = inputs(1, 2, 12, 12, 4, torch.float32)
    every = torch.arange(3).expand(1, 2, 12, 3)  # all blocks of 4: dense causal attention
    twice = torch.cat([every, every], -1)
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(block_select_attention(q, k, v, every, 4, path=path), dense)
    torch.testing.assert_close(block_select_attention(q, k, v, twice, 4, path=path), dense)
    full = block_select_attention(q, k, v, every, 4, causal=False, path=path)
    torch.testing.assert_close(full, torch.nn.functional.scaled_dot_product_attention(q, k, v))


def test_the_mask_puts_queries_at_the_last_positions():
    blocks = torch.tensor([[[[0, 2]]]])  # one query, the last of 10 positions (9)
    mask = block_select_mask(blocks, 4, 10)[0, 0, 0]
    assert mask.tolist() == [True] * 4 + [False] * 4 + [True, True]


def test_bad_arguments_are_one_line_errors():
    q, k, v, _ = inputs(1, 1, 4, 4, 2, torch.float32)
    with pytest.raises(ValueError, match="blocks must be int64"):
        block_select_attention(q, k, v, torch.zeros(1, 1, 4, 1, dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="more queries"):
        block_select_attention(q, k[:, :, :2], v[:, :, :2], torch.zeros(1, 1, 4, 1).long(), 2)
    with pytest.raises(ValueError, match="path="):
        block_select_attention(q, k, v, torch.zeros(1, 1, 4, 1).long(), 2, path="triton")
