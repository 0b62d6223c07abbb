"""MoBA, written slowly from the paper: Lu et al. 2025, "MoBA: Mixture of Block Attention for
Long-Context LLMs", arXiv 2502.13189, Sec. 2.2 (Eqs. 3-6), as restated in SPEC Sec. 6.

Independent check: written from the paper and SPEC Sec. 6 only, without reading the zoo's code.
Python loops over batch, head and query on purpose; every number is float64.

For one query q at 0-based position p, with keys cut into blocks [i*B, (i+1)*B) (the last may be
partial):
  * gate score s_i = <q, mean(K[block i])>: raw dot product, no scale, no softmax (Eq. 5);
  * block i is eligible only when it lies wholly before p, i.e. (i+1)*B <= p (Sec. 2.2, causality);
  * the query's own block p // B is always used (the "shared expert"), masked causally inside;
  * top_k counts the own block, so the top_k - 1 best eligible blocks join it (all eligible ones
    when there are fewer); ties go to the earlier block;
  * one softmax with scale 1/sqrt(D) over the union of the chosen keys (Eq. 3).
"""

import math

import torch
from torch import Tensor

__all__ = ["moba_paper"]


def _attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Softmax attention of one query (D,) over keys/values (n, D); zero when n == 0."""
    if k.shape[0] == 0:
        return torch.zeros_like(q)
    scores = (k @ q) / math.sqrt(q.shape[-1])  # (n,)
    return torch.softmax(scores, dim=0) @ v  # (D,)


def moba_paper(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_size: int,
    top_k: int,
    *,
    gate_dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Causal MoBA attention (paper Sec. 2.2), one routing per (batch, head).

    Args:
        q: (B, H, T, D) queries; they are the LAST T of the S positions (T == S: a whole sequence;
            T < S: a decoding step after S - T cached positions).
        k, v: (B, H, S, D) keys and values, T <= S.
        block_size: positions per block; the last block may be partial.
        top_k: blocks per query, the query's own block included (>= 1).
        gate_dtype: dtype of the gate scores s_i (the paper's code uses float32; default float64).

    Returns:
        (B, H, T, D) float64.

    Raises:
        ValueError: on bad shapes, block_size < 1 or top_k < 1.
    """
    if block_size < 1 or top_k < 1:
        raise ValueError(f"need block_size >= 1 and top_k >= 1, got {block_size}, {top_k}")
    b_, h_, t_, d_ = q.shape
    s_ = k.shape[2]
    if k.shape != (b_, h_, s_, d_) or v.shape != k.shape or t_ > s_:
        raise ValueError(f"bad shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros(b_, h_, t_, d_, dtype=torch.float64)
    for b in range(b_):
        for h in range(h_):
            for t in range(t_):
                p = s_ - t_ + t  # absolute position of this query
                own = p // block_size
                # Eligible past blocks: wholly before p, i.e. (i + 1) * block_size <= p.
                past = [i for i in range(own) if (i + 1) * block_size <= p]
                gate = []
                for i in past:
                    mean_key = k[b, h, i * block_size : (i + 1) * block_size].mean(dim=0)
                    gate.append(float(q[b, h, t].to(gate_dtype) @ mean_key.to(gate_dtype)))
                # Best top_k - 1 past blocks; sorted() is stable, so ties keep the earlier block.
                ranked = sorted(range(len(past)), key=lambda n: -gate[n])
                chosen = sorted(past[n] for n in ranked[: top_k - 1])
                # Union of chosen keys: whole past blocks, then the own block up to p inclusive.
                positions = [j for i in chosen for j in range(i * block_size, (i + 1) * block_size)]
                positions += list(range(own * block_size, p + 1))
                idx = torch.tensor(positions, dtype=torch.long)
                out[b, h, t] = _attend(q[b, h, t], k[b, h, idx], v[b, h, idx])
    return out
