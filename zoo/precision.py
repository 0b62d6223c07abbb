"""The training precision a machine computes fastest: ``bf16-mixed`` or ``32-true``.

On a CUDA GPU with bf16, ``bf16-mixed``. On a CPU, bf16 is fast only where oneDNN has native bf16
kernels (AVX512-BF16 or AMX); elsewhere it emulates them, several times slower than fp32. Even
with native bf16, not every family gains: :data:`BF16_FASTER_ON_CPU` lists those that train faster
under bf16 autocast, measured by ``benchmarks/cpu_precision.py`` (the tables are
``docs/bench/cpu_precision_*.md``).

``zoo fit`` takes :func:`default_precision` for the model's family when neither the command line
nor the config names a precision, says which and why, and warns (:func:`slow_precision_warning`)
when an explicit precision is emulated on this CPU.
"""

from __future__ import annotations

import functools
import time

import torch

__all__ = [
    "BF16_FASTER_ON_CPU",
    "default_precision",
    "autocast_slowdown",
    "native_bf16_cpu",
    "slow_precision_warning",
]

# families whose training step is at least 1.2× faster under bf16 autocast than in fp32 on a CPU
# with native bf16 (docs/bench/cpu_precision_amd_avx512bf16.md). The others train in fp32 by
# default: the LSTM's recurrence runs in fp32 anyway, and a gain within the machines' noise is not
# worth numbers that differ between CPU kinds.
BF16_FASTER_ON_CPU: frozenset[str] = frozenset(
    {
        "transformer_lm",
        "sparse_transformer_lm",
        "routing_transformer_lm",
        "image_transformer_lm",
        "transformer_seq2seq",
    }  # fmt: skip
)


def native_bf16_cpu() -> bool:
    """Whether oneDNN computes bf16 natively on this CPU (AVX512-BF16 or AMX).

    oneDNN's own answer, so it honours ``ONEDNN_MAX_CPU_ISA`` (``AVX2`` makes an AMX machine
    answer as an AVX2-only one)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def default_precision(family: str | None = None) -> tuple[str, str]:
    """``(precision, why)``: the Lightning precision to train ``family`` (a registry family,
    e.g. ``"transformer_lm"``; ``None``: any) with on this machine, and a one-line reason."""
    if torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return "bf16-mixed", "this GPU computes bf16"
        return "32-true", "this GPU has no bf16"
    if not native_bf16_cpu():
        return "32-true", "this CPU has no native bf16 (AVX512-BF16 or AMX): bf16 would be emulated"
    if family is not None and family not in BF16_FASTER_ON_CPU:
        return "32-true", (
            f"this CPU has native bf16, but {family} trains less than 1.2× faster in bf16 on a "
            "CPU (docs/bench/cpu_precision_*.md)"
        )
    return "bf16-mixed", "this CPU computes bf16 natively (AVX512-BF16 or AMX)"


@functools.cache
def autocast_slowdown(dtype: torch.dtype = torch.bfloat16) -> float:
    """How many times longer a linear layer's forward takes under CPU autocast to ``dtype`` than
    in fp32 on this CPU (a 2,048 × 256 by 256 × 1,024 product, median of 5); measured once per
    process and dtype."""
    layer = torch.nn.Linear(256, 1024)
    x = torch.randn(2048, 256)

    def run(low: bool) -> float:
        t0 = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=low):
            layer(x)
        return time.perf_counter() - t0

    run(False), run(True)  # warm-up
    times = {False: [], True: []}
    for _ in range(5):
        for low in (False, True):
            times[low].append(run(low))
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return median(times[True]) / median(times[False])


def slow_precision_warning(precision: str | int | None) -> str | None:
    """A one-line warning if ``precision`` (a Lightning precision) is emulated, hence slow, on this
    CPU: bf16 without native bf16 (``16-mixed`` included: Lightning runs it as ``bf16-mixed`` on a
    CPU), or ``16-true`` (no CPU of ours computes fp16 natively); else None."""
    text = str(precision)
    if torch.cuda.is_available() or not text.startswith(("bf16", "16")):
        return None
    half = text.startswith("16") and text != "16-mixed"
    if not half and native_bf16_cpu():
        return None
    kind, dtype = ("fp16", torch.float16) if half else ("bf16", torch.bfloat16)
    return (
        f"precision {text}: this CPU has no native {kind} kernels, so they are emulated; a {kind} "
        f"matrix product takes {autocast_slowdown(dtype):.1f}× as long as in fp32 here. "
        "Training still runs; --trainer.precision 32-true is faster on this machine."
    )
