"""How close a model runs to the machine: counted FLOPs and the measured matrix-product peak.

A step's **executed FLOPs** are counted by ``torch.utils.flop_counter.FlopCounterMode`` on one run
of it: the matrix products (``mm``, ``addmm``, ``bmm``, ...) and the attention kernels, two FLOPs
per multiply-add; element-wise work, softmax and the optimizer are not counted. PyTorch's counter
knows the CUDA attention kernels but not the CPU's fused one
(``_scaled_dot_product_flash_attention_for_cpu`` and its backward), which every dense CPU
attention here and the block-selection kernel run through; importing this module registers them,
with PyTorch's own formulas (``sdpa_flop_count``: ``4 B H T S D`` forward; ``sdpa_backward_flop_count``
for the backward), scaled to the entries a causal kernel computes (``is_causal``: query ``i``
sees keys ``0 .. i``, about half of ``T S``); a kernel given a mask computes every entry and is
counted whole. Nor does it know oneDNN's LSTM layer (``mkldnn_rnn_layer``, which ``nn.LSTM``
runs on a CPU): its gate products, ``2 (4 H) (I + H)`` per token, twice that backward.

The **matrix-product peak** of a dtype is the best ``torch.mm`` rate of that dtype on this machine
and thread count, over square products of 512 to 2,048 and the shapes of a small Transformer's
layers (:data:`PEAK_SHAPES`): the roof that a step's FLOP/s is a fraction of. The fraction
``achieved / peak`` can pass 1 a little: the peak is measured, not a datasheet's, and a model's
``addmm`` may run faster than a bare ``mm``. ``benchmarks/roofline.py`` prints the table of
every shape; ``zoo bench`` puts the fraction on every card.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils import flop_counter

__all__ = [
    "PEAK_SHAPES",
    "MatmulPeak",
    "count_flops",
    "counting",
    "matmul_peak",
    "matmul_rates",
]

# (m, k, n) of the products timed for the peak: squares, then a 4-layer d=256 LM's own products
# at 1,024 tokens (q/k/v, feed-forward in and out, the output layer)
PEAK_SHAPES: tuple[tuple[int, int, int], ...] = (
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (1024, 256, 768),
    (1024, 256, 1024),
    (1024, 1024, 256),
)
_SLOW_S = 0.5  # a product slower than this (an emulated dtype) ends the search at its size

_aten = torch.ops.aten


def _causal_share(t: int, s: int) -> float:
    """The share of the ``t x s`` scores a causal kernel computes: query ``i`` sees keys
    ``0 .. i`` (PyTorch's ``is_causal``, aligned to the top left)."""
    return sum(min(i + 1, s) for i in range(t)) / (t * s) if t and s else 1.0


if _aten._scaled_dot_product_flash_attention_for_cpu.default not in flop_counter.flop_registry:

    @flop_counter.register_flop_formula(_aten._scaled_dot_product_flash_attention_for_cpu)
    def _cpu_flash_flop(q, k, v, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kw):  # noqa: ANN001, ANN202
        share = _causal_share(q[-2], k[-2]) if is_causal else 1.0
        return round(flop_counter.sdpa_flop_count(q, k, v) * share)

    @flop_counter.register_flop_formula(_aten._scaled_dot_product_flash_attention_for_cpu_backward)
    def _cpu_flash_backward_flop(g, q, k, v, out, lse, dropout_p=0.0, is_causal=False, *args,  # noqa: ANN001, ANN202
                                 out_shape=None, **kw):  # fmt: skip
        share = _causal_share(q[-2], k[-2]) if is_causal else 1.0
        return round(flop_counter.sdpa_backward_flop_count(g, q, k, v) * share)


def _lstm_layer_flops(x: tuple[int, ...], w_ih: tuple[int, ...], w_hh: tuple[int, ...]) -> int:
    """An LSTM layer's gate products over every step: ``2 (4 H) (I + H)`` per token of ``x``
    ``(T, B, I)`` or ``(B, T, I)``, for ``w_ih`` ``(4 H, I)`` and ``w_hh`` ``(4 H, H)``."""
    return 2 * x[0] * x[1] * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1])


if _aten.mkldnn_rnn_layer.default not in flop_counter.flop_registry:
    # ``nn.LSTM`` on a CPU runs through oneDNN's whole-layer op, which the counter does not know

    @flop_counter.register_flop_formula(_aten.mkldnn_rnn_layer)
    def _lstm_flop(x, w_ih, w_hh, *args, out_shape=None, **kw):  # noqa: ANN001, ANN202
        return _lstm_layer_flops(x, w_ih, w_hh)

    @flop_counter.register_flop_formula(_aten.mkldnn_rnn_layer_backward)
    def _lstm_backward_flop(x, w_ih, w_hh, *args, out_shape=None, **kw):  # noqa: ANN001, ANN202
        return 2 * _lstm_layer_flops(x, w_ih, w_hh)  # the gradients of the inputs and weights


@contextmanager
def counting() -> Iterator[Callable[[], int]]:
    """Count the FLOPs executed inside the block (module docstring); yields a function that
    returns the count so far."""
    with flop_counter.FlopCounterMode(display=False) as counter:
        yield lambda: int(counter.get_total_flops())


def count_flops(run: Callable[[], object]) -> int:
    """The FLOPs ``run()`` executes (module docstring), counted on one call of it."""
    with counting() as total:
        run()
    return total()


@dataclass(frozen=True)
class MatmulPeak:
    """The best ``torch.mm`` rate of ``dtype`` on ``device`` with ``threads`` CPU threads:
    ``gflops`` (10^9 FLOP/s) at the product ``shape`` ``(m, k, n)``."""

    dtype: str
    device: str
    threads: int
    gflops: float
    shape: tuple[int, int, int]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rates(
    dtype: torch.dtype = torch.float32,
    *,
    device: str | torch.device = "cpu",
    shapes: tuple[tuple[int, int, int], ...] = PEAK_SHAPES,
    repeats: int = 5,
) -> dict[tuple[int, int, int], float]:
    """GFLOP/s of ``torch.mm`` of ``dtype`` for each ``(m, k, n)`` of ``shapes``: ``2 m k n``
    over the fastest of ``repeats`` runs after one warm-up. A product that takes more than half
    a second (a dtype this CPU emulates) is timed once and ends the search: larger shapes are
    left out."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(0)
    rates: dict[tuple[int, int, int], float] = {}
    for m, k, n in sorted(shapes, key=lambda s: s[0] * s[1] * s[2]):
        a = torch.randn(m, k, generator=g, device=dev).to(dtype)
        b = torch.randn(k, n, generator=g, device=dev).to(dtype)
        best = float("inf")
        for i in range(repeats + 1):
            _sync(dev)
            t0 = time.perf_counter()
            torch.mm(a, b)
            _sync(dev)
            took = time.perf_counter() - t0
            best = min(best, took) if i else best  # the first run warms up
            if took > _SLOW_S:
                best = min(best, took)
                break
        rates[m, k, n] = 2 * m * k * n / best / 1e9
        if best > _SLOW_S:
            break
    return rates


def matmul_peak(
    dtype: torch.dtype = torch.float32, *, device: str | torch.device = "cpu", repeats: int = 5
) -> MatmulPeak:
    """The machine's matrix-product peak for ``dtype``: the best of :func:`matmul_rates`.
    Measured once per process for each dtype, device and thread count."""
    dev = torch.device(device)
    return _peak(dtype, str(dev), torch.get_num_threads(), repeats)


@functools.cache
def _peak(dtype: torch.dtype, device: str, threads: int, repeats: int) -> MatmulPeak:
    rates = matmul_rates(dtype, device=device, repeats=repeats)
    shape = max(rates, key=rates.get)
    return MatmulPeak(
        dtype=str(dtype).removeprefix("torch."),
        device=device,
        threads=threads,
        gflops=rates[shape],
        shape=shape,
    )
