"""The FlashAttention tile steps that the Triton kernels share (Dao 2023, FlashAttention-2).

Each kernel loads its own tiles, since block-sparse attention reads contiguous blocks and routing
attention reads gathered rows. It then calls these steps on them. Conventions:

- Scores are kept in base 2: ``s = (q . k) * scale * log2(e)``. ``exp2`` is the fast path on
  a GPU, and the row log-sum-exp ``lse`` is stored in the same base-2 units.
- A key that a query may not see has the score ``-inf``. The kernels mask only the tiles that
  need it (a partial block, a tile on the causal diagonal, the ragged end of a sequence or
  cluster); a tile that is wholly allowed skips the mask, as FlashAttention does.
- A query row with no allowed key has ``lse = +inf``. Its output is 0, and in the backward pass
  ``exp2(s - lse) = 0``, so its gradients are 0 too. No NaN can appear.
- Matmuls take their inputs in the tensors' dtype (fp16/bf16 on the tensor cores) and accumulate
  in fp32. ``PRECISION`` is ``"ieee"`` for fp32 inputs (exact, to match the reference) and
  ``"tf32"`` otherwise (where it is ignored).

This module imports Triton: import it only where Triton is known to be present.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def scores(a, b, qk_scale, PRECISION: tl.constexpr):
    """Base-2 scores ``(a . b^T) * qk_scale`` ``(M, N)`` fp32 of the tiles ``a`` ``(M, D)`` and
    ``b`` ``(N, D)``; ``qk_scale`` is the softmax scale times log2(e)."""
    return tl.dot(a, tl.trans(b), input_precision=PRECISION) * qk_scale


@triton.jit
def softmax_step(s, m_i, l_i, acc, v, PRECISION: tl.constexpr):
    """One key tile of the online softmax. ``s`` ``(M, N)`` is the base-2 scores, ``-inf``
    where a key is not allowed (the caller masks only the tiles that need it). ``v`` ``(N, D)``
    is the value tile. The running row max ``m_i`` and row sum ``l_i`` are ``(M,)``, and
    ``acc`` is ``(M, D)`` fp32."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing allowed yet
    p = tl.math.exp2(s - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def softmax_finish(m_i, l_i, acc):
    """The normalised output ``(M, D)`` fp32 and the base-2 ``lse`` ``(M,)``. Empty rows give
    0 and ``+inf``."""
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
    return out, lse


@triton.jit
def dq_step(s, do, lse, delta, k, v, dq, PRECISION: tl.constexpr):
    """Adds one key tile's contribution to ``dq`` ``(M, D)``, which is left unscaled (the
    caller multiplies by the softmax scale). ``s`` ``(M, N)`` is the masked base-2 scores, as
    for :func:`softmax_step`. Query-side ``lse`` and ``delta = rowsum(dO * O)`` are ``(M,)``.
    A masked score gives ``exp2(-inf - lse) = 0``, and so does any score of an empty row
    (``lse = +inf``)."""
    p = tl.math.exp2(s - lse[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    return dq + tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)


@triton.jit
def dkdv_step(s_t, q, do, lse, delta, v, dk, dv, PRECISION: tl.constexpr):
    """Adds one query tile's contribution to ``dk`` and ``dv`` ``(N, D)``. ``dk`` is left
    unscaled. This is the transposed form: ``s_t`` ``(N, M)`` is the masked base-2 scores,
    keys by queries."""
    p_t = tl.math.exp2(s_t - lse[None, :])
    dv = dv + tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
    dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
    ds_t = p_t * (dp_t - delta[None, :])
    dk = dk + tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
    return dk, dv


HEAD_DIMS = (16, 32, 64, 128)


def unsupported(q, v) -> str | None:
    """Why the kernels cannot take ``q`` and ``v``, or ``None`` when they can. They take head
    dims of 16 to 128 (powers of two) with ``v``'s equal to ``q``'s, in fp16, bf16 or fp32."""
    if q.shape[-1] not in HEAD_DIMS:
        return f"head dim {q.shape[-1]} is not one of {HEAD_DIMS}"
    if v.shape[-1] != q.shape[-1]:
        return f"v's head dim {v.shape[-1]} differs from q's {q.shape[-1]}"
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {q.dtype} is not fp16, bf16 or fp32"
    return None


def empty(shape: tuple[int, ...], like, dtype=None):
    """An uninitialised kernel output on ``like``'s device. The tests swap this for a
    NaN-filled tensor, to catch tiles that a kernel never writes."""
    return torch.empty(shape, device=like.device, dtype=like.dtype if dtype is None else dtype)


def precision(dtype) -> str:
    """``tl.dot``'s ``input_precision`` for inputs of ``dtype``."""
    return "ieee" if dtype == torch.float32 else "tf32"


# Launch options measured per (kernel, head dim) by ``python -m benchmarks.kernel_tuning`` on a
# GPU; a pair that is not listed takes :func:`default_launch_options`. Kernels are named
# "<op>.<pass>": "block_sparse.forward", "block_sparse.dq", "block_sparse.dkdv", and the same
# three for "routing".
LAUNCH: dict[tuple[str, int], dict] = {}


def default_launch_options(head_dim: int) -> dict:
    """The untuned starting point: 4 warps and 3 stages up to head dim 64, else 8 and 2."""
    return {"num_warps": 4 if head_dim <= 64 else 8, "num_stages": 3 if head_dim <= 64 else 2}


def launch_options(head_dim: int, kernel: str = "") -> dict:
    """``num_warps`` / ``num_stages`` for launching ``kernel`` at ``head_dim`` (none in the
    interpreter, which takes no launch options): :data:`LAUNCH`'s entry, else
    :func:`default_launch_options`. They are looked up, not autotuned: the interpreter cannot
    autotune, and a table keeps every launch reproducible."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return {}
    return dict(LAUNCH.get((kernel, head_dim)) or default_launch_options(head_dim))
