"""The executable spec of NSA (:mod:`zoo.attention.mechanisms.nsa`; Yuan et al. 2025, §3): each
branch as dense fp64 attention under a mask written out position by position, and the selection
ranked query by query. ``O(T S)`` memory and Python loops: tests only."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.attention.mechanisms.nsa import NSAKeys, NSAParams, _check
from zoo.kernels.block_sparse import masked_attention_ref

__all__ = ["nsa_attention_ref"]


def _selected_mask_ref(p_cmp: Tensor, n_keys: int, params: NSAParams) -> Tensor:
    """The selected branch's ``(B, H, T, S)`` mask, query by query, from ``p_cmp`` (fp64)."""
    B, H, T, N = p_cmp.shape
    l, d, ls = params.compress_block, params.compress_stride, params.select_block
    n = params.n_selected
    nb = math.ceil(n_keys / ls)
    overlap = torch.zeros(N, nb, dtype=torch.float64)  # positions shared, in units of d
    for i in range(N):
        for j in range(nb):
            overlap[i, j] = len(range(max(i * d, j * ls), min(i * d + l, (j + 1) * ls))) / d
    importance = (p_cmp.detach().double().cpu() @ overlap).tolist()  # [B][H][T][nb]
    mask = torch.zeros(B, H, T, n_keys, dtype=torch.bool)
    for t in range(T):
        pos = n_keys - T + t
        own = pos // ls
        forced = {j for j in range(own + 1) if j < params.n_initial or j > own - params.n_local}
        others = [j for j in range(own + 1) if j not in forced]
        for b in range(B):
            for h in range(H):
                ranked = sorted(others, key=lambda j: (-importance[b][h][t][j], j))
                for j in forced | set(ranked[: n - len(forced)]):
                    mask[b, h, t, j * ls : min((j + 1) * ls, pos + 1)] = True
    return mask.to(p_cmp.device)


def nsa_attention_ref(
    q: Tensor, kv: NSAKeys, gates: Tensor, params: NSAParams, *, q_cmp: Tensor | None = None
) -> Tensor:
    """The executable spec of :func:`nsa_attention`, same arguments; returns float64.

    Each branch is dense fp64 attention (:func:`~zoo.kernels.block_sparse.masked_attention_ref`)
    under a mask written out position by position: compressed token ``i`` visible from
    ``i d + l - 1`` on; the selected blocks ranked query by query from the fp64 ``p_cmp`` times
    the positions each token shares with each block over ``d``; the window ``t - w < j <= t``.
    ``O(T S)`` memory and Python loops over queries: tests only.
    """
    _check(q, kv, gates, params, q_cmp)
    T, S, N = q.shape[2], kv.k_slc.shape[2], kv.k_cmp.shape[2]
    l, d, w = params.compress_block, params.compress_stride, params.window
    cmp_mask = torch.zeros(T, N, dtype=torch.bool, device=q.device)
    win_mask = torch.zeros(T, S, dtype=torch.bool, device=q.device)
    for t in range(T):
        pos = S - T + t
        for i in range(N):
            cmp_mask[t, i] = i * d + l - 1 <= pos
        win_mask[t, max(0, pos - w + 1) : pos + 1] = True
    qc = (q if q_cmp is None else q_cmp).double()
    s = qc @ kv.k_cmp.double().transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, H, T, N)
    p_cmp = torch.softmax(s.masked_fill(~cmp_mask, float("-inf")), -1).nan_to_num(0.0)
    o_cmp = p_cmp @ kv.v_cmp.double()
    slc_mask = _selected_mask_ref(p_cmp, S, params)
    o_slc = masked_attention_ref(q, kv.k_slc, kv.v_slc, slc_mask)
    o_win = masked_attention_ref(q, kv.k_win, kv.v_win, win_mask)
    g = gates.double()
    return g[..., 0:1] * o_cmp + g[..., 1:2] * o_slc + g[..., 2:3] * o_win
