"""NSA, written slowly from the paper: Yuan et al. 2025, "Native Sparse Attention: Hardware-Aligned
and Natively Trainable Sparse Attention", arXiv 2502.11089, Sec. 3 (Eqs. 5-11), as restated in
SPEC Sec. 6.

Independent check: written from the paper and SPEC Sec. 6 only, without reading the zoo's code.
Python loops over batch, head and query on purpose; every number is float64. Each head is its own
group (the paper's sum over a GQA group, Sec. 3.3.2, is over one head). The compressed keys/values
come in already made by the learned MLP (Eq. 7); this file does not implement it.

For one query at 0-based position p (l = compress_block, d = compress_stride, l' = select_block):
  * compressed token i summarises [i*d, i*d + l) and is visible iff its last position
    i*d + l - 1 <= p (Eq. 7: i <= floor((t - l)/d) with 1-based t = p + 1);
  * p_cmp = softmax over the visible compressed tokens, scale 1/sqrt(D) (Eq. 8), 0 for the others;
  * block j = [j*l', (j+1)*l') gets importance sum_i w(i, j) * p_cmp[i] with w(i, j) = (length of
    the overlap of token i's span with block j) / d: the multiplicities of Eq. 9's double sum read
    as "sum the overlapping compressed blocks" (see README);
  * forced blocks (first n_initial, and the n_local most recent ending with the own block p // l')
    plus the best other eligible blocks (j*l' <= p) fill n_selected slots, ties to the earlier
    block (Eq. 10); the selected keys are those blocks' positions <= p (Eq. 11);
  * window: the last w positions, p - w + 1 .. p (Sec. 3.3.3);
  * a branch with nothing to attend gives exactly 0;
  * o = g_cmp * Attn_cmp + g_slc * Attn_slc + g_win * Attn_win (Eq. 5).
"""

import math

import torch
from torch import Tensor

__all__ = ["nsa_paper", "overlap_weight", "selection_importance", "select_blocks"]


def _attend(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """One query (D,) over keys/values (n, D): (output (D,), probabilities (n,)); zeros if n == 0."""
    if k.shape[0] == 0:
        return torch.zeros_like(q), torch.zeros(0, dtype=q.dtype)
    probs = torch.softmax((k @ q) / math.sqrt(q.shape[-1]), dim=0)  # (n,)
    return probs @ v, probs


def overlap_weight(
    i: int, j: int, compress_block: int, compress_stride: int, select_block: int
) -> int:
    """Eq. 9 weight of compressed token i in selection block j: shared positions / d (an integer).

    Token i covers [i*d, i*d + l), block j covers [j*l', (j+1)*l'). Cutting both into stride-d
    chunks, the weight counts the shared chunks, which is what Eq. 9's double sum over
    m < l'/d, n < l/d counts.
    """
    lo = max(i * compress_stride, j * select_block)
    hi = min(i * compress_stride + compress_block, (j + 1) * select_block)
    return max(0, hi - lo) // compress_stride


def selection_importance(
    p_cmp: list[float], n_blocks: int, compress_block: int, compress_stride: int, select_block: int
) -> list[float]:
    """Importance of selection blocks 0 .. n_blocks-1 from compressed probabilities p_cmp (Eq. 9).

    With l = l' = d the weight is 1 on i == j and 0 elsewhere, so importance == p_cmp (Eq. 9's
    first case).
    """
    return [
        sum(
            overlap_weight(i, j, compress_block, compress_stride, select_block) * p_i
            for i, p_i in enumerate(p_cmp)
        )
        for j in range(n_blocks)
    ]


def select_blocks(
    importance: list[float],
    p: int,
    select_block: int,
    n_selected: int,
    n_initial: int,
    n_local: int,
) -> list[int]:
    """The selection blocks for a query at position p, sorted, each once (Eq. 10 plus Sec. 4.1).

    Forced: blocks 0 .. n_initial-1 and own-n_local+1 .. own (own = p // l'), each only if it
    starts at or before p. The remaining n_selected - #forced slots (none when the forced blocks
    already fill n_selected; they are all kept) go to the other blocks starting at or before p,
    highest importance first, ties to the earlier block.
    """
    own = p // select_block
    eligible = [j for j in range(own + 1) if j * select_block <= p]
    forced = {j for j in eligible if j < n_initial or own - n_local < j}
    others = sorted((j for j in eligible if j not in forced), key=lambda j: (-importance[j], j))
    free = max(0, n_selected - len(forced))
    return sorted(forced | set(others[:free]))


def nsa_paper(
    q: Tensor,
    k_cmp: Tensor,
    v_cmp: Tensor,
    k_slc: Tensor,
    v_slc: Tensor,
    k_win: Tensor,
    v_win: Tensor,
    gates: Tensor,
    *,
    compress_block: int,
    compress_stride: int,
    select_block: int,
    n_selected: int,
    n_initial: int,
    n_local: int,
    window: int,
    q_cmp: Tensor | None = None,
) -> Tensor:
    """Causal NSA output (paper Eq. 5), one block set per (batch, head).

    Args:
        q: (B, H, T, D) queries of the selected and window branches, the LAST T of S positions.
        k_cmp, v_cmp: (B, H, N, D) compressed tokens, N = (S - l)//d + 1, or 0 when S < l.
        k_slc, v_slc, k_win, v_win: (B, H, S, D) keys/values of the selected and window branches.
        gates: (B, H, T, 3) in [0, 1], order (compressed, selected, window).
        compress_block, compress_stride: l and d (d divides l).
        select_block: l' (d divides l').
        n_selected: selection blocks per query, the forced ones included.
        n_initial, n_local: forced first blocks and forced most-recent blocks (own block last).
        window: w, the number of most recent positions (the query's own included) in the window.
        q_cmp: (B, H, T, D) queries of the compressed branch; default q.

    Returns:
        (B, H, T, D) float64.

    Raises:
        ValueError: on bad shapes or block sizes.
    """
    l, d, l_sel = compress_block, compress_stride, select_block
    if d < 1 or l < d or l % d or l_sel < 1 or l_sel % d:
        raise ValueError(f"need d >= 1, d | l, d | l' and l >= d; got l={l}, d={d}, l'={l_sel}")
    q_cmp = q if q_cmp is None else q_cmp
    b_, h_, t_, d_ = q.shape
    s_ = k_slc.shape[2]
    n_cmp = (s_ - l) // d + 1 if s_ >= l else 0
    if t_ > s_ or q_cmp.shape != q.shape or gates.shape != (b_, h_, t_, 3):
        raise ValueError(f"bad shapes q {tuple(q.shape)}, gates {tuple(gates.shape)}, S={s_}")
    for name, x, n in [
        ("k_cmp", k_cmp, n_cmp),
        ("v_cmp", v_cmp, n_cmp),
        ("k_slc", k_slc, s_),
        ("v_slc", v_slc, s_),
        ("k_win", k_win, s_),
        ("v_win", v_win, s_),
    ]:
        if x.shape != (b_, h_, n, d_):
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {(b_, h_, n, d_)}")
    q, q_cmp, gates = q.double(), q_cmp.double(), gates.double()
    k_cmp, v_cmp, k_slc, v_slc = k_cmp.double(), v_cmp.double(), k_slc.double(), v_slc.double()
    k_win, v_win = k_win.double(), v_win.double()
    n_blocks = -(-s_ // l_sel)
    out = torch.zeros(b_, h_, t_, d_, dtype=torch.float64)
    for b in range(b_):
        for h in range(h_):
            for t in range(t_):
                p = s_ - t_ + t  # absolute position of this query
                # Compressed branch (Eqs. 7-8): tokens whose last position is <= p.
                visible = [i for i in range(n_cmp) if i * d + l - 1 <= p]
                o_cmp, probs = _attend(q_cmp[b, h, t], k_cmp[b, h, visible], v_cmp[b, h, visible])
                p_cmp = [0.0] * n_cmp
                for i, pr in zip(visible, probs.tolist(), strict=True):
                    p_cmp[i] = pr
                # Selected branch (Eqs. 9-11).
                importance = selection_importance(p_cmp, n_blocks, l, d, l_sel)
                blocks = select_blocks(importance, p, l_sel, n_selected, n_initial, n_local)
                pos = [
                    j for blk in blocks for j in range(blk * l_sel, min((blk + 1) * l_sel, p + 1))
                ]
                o_slc, _ = _attend(q[b, h, t], k_slc[b, h, pos], v_slc[b, h, pos])
                # Window branch: the last `window` positions, p itself included.
                pos = list(range(max(0, p - window + 1), p + 1))
                o_win, _ = _attend(q[b, h, t], k_win[b, h, pos], v_win[b, h, pos])
                g = gates[b, h, t]
                out[b, h, t] = g[0] * o_cmp + g[1] * o_slc + g[2] * o_win
    return out
