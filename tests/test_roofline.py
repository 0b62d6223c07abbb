"""zoo.roofline: the FLOPs counted are those of the products and the attention (the CPU's fused
attention included, causal at the share it computes), and the peak is the best measured rate."""

import pytest
import torch
import torch.nn.functional as F
from zoo.kernels.block_select import block_select_attention

from zoo import roofline
from zoo.roofline import count_flops, counting, matmul_peak, matmul_rates


def test_a_matrix_product_counts_two_flops_per_multiply_add():
    a, b = torch.randn(6, 5), torch.randn(5, 7)
    assert count_flops(lambda: a @ b) == 2 * 6 * 5 * 7
    layer = torch.nn.Linear(5, 7)
    with counting() as total:
        layer(a)
        first = total()
        layer(a)
    assert first == 2 * 6 * 5 * 7 and total() == 2 * first


@pytest.mark.parametrize("t, s, share", [(4, 4, 10 / 16), (2, 4, 3 / 8), (8, 8, 36 / 64)])
def test_the_causal_share_is_what_each_query_sees(t, s, share):
    assert roofline._causal_share(t, s) == pytest.approx(share)


def test_the_cpus_fused_attention_is_counted_causal_at_its_share():
    B, H, T, D = 1, 2, 64, 16
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    full = 4 * B * H * T * T * D  # QK^T and PV
    assert count_flops(lambda: F.scaled_dot_product_attention(q, k, v)) == full
    causal = count_flops(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert causal == round(full * (T + 1) / (2 * T))
    both = count_flops(
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    )
    assert both - causal == round(2.5 * full * (T + 1) / (2 * T))  # PyTorch's backward formula


def test_an_lstm_layer_counts_its_gate_products():
    """nn.LSTM runs as one oneDNN op on a CPU; its products are counted, twice over backward."""
    lstm = torch.nn.LSTM(16, 32, batch_first=True)
    x = torch.randn(3, 5, 16, requires_grad=True)
    forward = 2 * 3 * 5 * (4 * 32) * (16 + 32)
    assert count_flops(lambda: lstm(x)) == forward
    assert count_flops(lambda: lstm(x)[0].sum().backward()) == 3 * forward


def test_the_block_selection_kernel_is_counted():
    """Its chunks run through the fused CPU kernel inside an autograd Function: counted too."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 64, 8) for _ in range(3))
    blocks = torch.stack([torch.arange(64) // 8, torch.zeros(64, dtype=torch.long)], -1)[None, None]
    flops = count_flops(lambda: block_select_attention(q, k, v, blocks, 8))
    assert 0 < flops < 4 * 64 * 64 * 8  # below dense attention over all 64 keys


def test_the_peak_is_the_best_rate_measured_once_per_process():
    rates = matmul_rates(shapes=((16, 16, 16), (32, 32, 32)), repeats=2)
    assert set(rates) == {(16, 16, 16), (32, 32, 32)} and all(r > 0 for r in rates.values())
    peak = matmul_peak(repeats=1)
    assert peak.gflops > 0 and peak.dtype == "float32" and peak.shape in roofline.PEAK_SHAPES
    assert matmul_peak(repeats=1) is peak  # cached


def test_a_slow_product_ends_the_search(monkeypatch):
    """An emulated dtype's product past the time limit is timed once, larger ones not at all."""
    monkeypatch.setattr(roofline, "_SLOW_S", 0.0)
    rates = matmul_rates(shapes=((64, 64, 64), (16, 16, 16), (32, 32, 32)), repeats=3)
    assert list(rates) == [(16, 16, 16)]
