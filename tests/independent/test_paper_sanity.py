"""Sanity tests of the independent paper implementations (moba_paper.py, nsa_paper.py).

They need nothing from the zoo; each compares against a dense masked-softmax reference built
here, or checks a property (causality, decode == full forward, no duplicate blocks).
"""

import math

import pytest
import torch

from .moba_paper import moba_paper
from .nsa_paper import nsa_paper, overlap_weight, select_blocks, selection_importance

D = 4


def _masked_attention(q, k, v, allowed):
    """Dense reference: (B, H, T, D) queries, (B, H, S, D) keys/values, allowed (T, S) bool."""
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.double()


def _causal(t, s):
    """(T, S) mask: query t (absolute position s - t + t) sees keys at or before it."""
    pos = torch.arange(s - t, s)[:, None]
    return torch.arange(s)[None, :] <= pos


def _qkv(s, b=1, h=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, D, generator=g, dtype=torch.float64) for _ in range(3)]


# ---------------------------------------------------------------- MoBA


@pytest.mark.parametrize(
    "s, block, top_k", [(8, 4, 2), (7, 3, 3), (12, 4, 3), (5, 8, 1), (9, 2, 5)]
)
def test_moba_dense_when_all_blocks_fit(s, block, top_k):
    q, k, v = _qkv(s)
    assert s <= block * top_k
    ref = _masked_attention(q, k, v, _causal(s, s))
    torch.testing.assert_close(moba_paper(q, k, v, block, top_k), ref, rtol=1e-12, atol=1e-12)


def test_moba_is_sparse_and_routes_to_the_best_block():
    # S = 8, blocks of 2, top-2: the last query (position 7) gets its own block {6, 7} plus the
    # one past block whose mean key best matches it; block 1 is made to win.
    q, k, v = _qkv(8, b=1, h=1, seed=1)
    k[0, 0, 2:4] = 2.0 * q[0, 0, 7] / q[0, 0, 7].norm()
    gate = [float(q[0, 0, 7] @ k[0, 0, 2 * i : 2 * i + 2].mean(0)) for i in range(3)]
    assert max(gate) == gate[1]
    out = moba_paper(q, k, v, block_size=2, top_k=2)
    allowed = torch.zeros(8, 8, dtype=torch.bool)
    allowed[7, [2, 3, 6, 7]] = True
    expected = _masked_attention(q[..., 7:, :], k, v, allowed[7:])
    torch.testing.assert_close(out[..., 7:, :], expected, rtol=1e-12, atol=1e-12)
    dense = _masked_attention(q, k, v, _causal(8, 8))
    assert not torch.allclose(out[..., 7:, :], dense[..., 7:, :])


@pytest.mark.parametrize("m", [3, 6, 10])
def test_moba_causal(m):
    q, k, v = _qkv(12, b=2)
    before = moba_paper(q, k, v, block_size=3, top_k=2)
    k2, v2 = k.clone(), v.clone()
    k2[..., m, :] += 3.0
    v2[..., m, :] -= 2.0
    after = moba_paper(q, k2, v2, block_size=3, top_k=2)
    torch.testing.assert_close(after[..., :m, :], before[..., :m, :], rtol=0, atol=0)
    assert not torch.allclose(after[..., m:, :], before[..., m:, :])


@pytest.mark.parametrize("t", [1, 3, 5])
def test_moba_decode_matches_full(t):
    q, k, v = _qkv(13, b=2, seed=2)
    full = moba_paper(q, k, v, block_size=3, top_k=2)
    step = moba_paper(q[..., -t:, :], k, v, block_size=3, top_k=2)
    torch.testing.assert_close(step, full[..., -t:, :], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- NSA


def _nsa_inputs(s, l, d, b=1, h=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = (s - l) // d + 1 if s >= l else 0

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    gates = torch.rand(b, h, s, 3, generator=g, dtype=torch.float64)
    return dict(
        q=r(b, h, s, D),
        k_cmp=r(b, h, n, D),
        v_cmp=r(b, h, n, D),
        k_slc=r(b, h, s, D),
        v_slc=r(b, h, s, D),
        k_win=r(b, h, s, D),
        v_win=r(b, h, s, D),
        gates=gates,
        q_cmp=r(b, h, s, D),
    )


CFG = dict(
    compress_block=4,
    compress_stride=2,
    select_block=4,
    n_selected=3,
    n_initial=1,
    n_local=1,
    window=5,
)


def _with_gates(x, g):
    x = dict(x)
    x["gates"] = torch.tensor(g, dtype=torch.float64).expand_as(x["gates"])
    return x


@pytest.mark.parametrize("s", [1, 9, 16])
def test_nsa_window_only_full_window_is_causal_attention(s):
    x = _with_gates(_nsa_inputs(s, 4, 2), (0.0, 0.0, 1.0))
    out = nsa_paper(**x, **{**CFG, "window": s})
    ref = _masked_attention(x["q"], x["k_win"], x["v_win"], _causal(s, s))
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_nsa_window_is_the_last_w_positions():
    s, w = 12, 3
    x = _with_gates(_nsa_inputs(s, 4, 2), (0.0, 0.0, 1.0))
    pos = torch.arange(s)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - w)
    ref = _masked_attention(x["q"], x["k_win"], x["v_win"], band)
    torch.testing.assert_close(nsa_paper(**x, **{**CFG, "window": w}), ref, rtol=1e-12, atol=1e-12)


def test_nsa_selected_only_all_blocks_is_causal_attention():
    s = 14
    x = _with_gates(_nsa_inputs(s, 4, 2), (0.0, 1.0, 0.0))
    out = nsa_paper(**x, **{**CFG, "n_selected": 4})  # 4 blocks of 4 cover all 14 positions
    ref = _masked_attention(x["q"], x["k_slc"], x["v_slc"], _causal(s, s))
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_nsa_selects_the_block_the_compressed_branch_attends_to():
    # l = l' = d = 2, S = 12, query at 11: forced blocks {0, 5}, one free slot among 1..4.
    # Compressed token 3 (positions 6, 7) is made to dominate, so block 3 must be chosen.
    s = 12
    x = _with_gates(_nsa_inputs(s, 2, 2, h=1, seed=3), (0.0, 1.0, 0.0))
    x["k_cmp"][0, 0, 3] = 20.0 * x["q_cmp"][0, 0, 11]
    cfg = dict(CFG, compress_block=2, compress_stride=2, select_block=2)
    out = nsa_paper(**x, **cfg)
    allowed = torch.zeros(1, s, dtype=torch.bool)
    allowed[0, [0, 1, 6, 7, 10, 11]] = True
    ref = _masked_attention(x["q"][..., 11:, :], x["k_slc"], x["v_slc"], allowed)
    torch.testing.assert_close(out[..., 11:, :], ref, rtol=1e-12, atol=1e-12)


def test_nsa_no_visible_compressed_token_gives_exactly_zero():
    l, d = 4, 2
    x = _with_gates(_nsa_inputs(10, l, d), (1.0, 0.0, 0.0))
    out = nsa_paper(**x, **CFG)
    assert torch.equal(out[..., : l - 1, :], torch.zeros_like(out[..., : l - 1, :]))
    # Position l - 1 sees token 0 alone: its value, exactly.
    torch.testing.assert_close(out[..., l - 1, :], x["v_cmp"][..., 0, :], rtol=1e-12, atol=1e-12)
    # S < l: no compressed token at all, still zero (and no error).
    y = _with_gates(_nsa_inputs(3, l, d), (1.0, 0.0, 0.0))
    assert torch.equal(nsa_paper(**y, **CFG), torch.zeros(1, 2, 3, D, dtype=torch.float64))


@pytest.mark.parametrize("m", [2, 5, 9])
def test_nsa_causal(m):
    s, l, d = 13, 4, 2
    x = _nsa_inputs(s, l, d, b=2)
    before = nsa_paper(**x, **CFG)
    y = {key: val.clone() for key, val in x.items()}
    for key in ("k_slc", "v_slc", "k_win", "v_win"):
        y[key][..., m, :] += 2.5
    for i in range(y["k_cmp"].shape[2]):  # every compressed token whose span holds position m
        if i * d <= m < i * d + l:
            y["k_cmp"][..., i, :] += 2.5
            y["v_cmp"][..., i, :] -= 1.5
    after = nsa_paper(**y, **CFG)
    torch.testing.assert_close(after[..., :m, :], before[..., :m, :], rtol=0, atol=0)
    assert not torch.allclose(after[..., m:, :], before[..., m:, :])


@pytest.mark.parametrize(
    "cfg",
    [
        CFG,
        dict(CFG, compress_block=4, compress_stride=2, select_block=8),
        dict(CFG, compress_block=6, compress_stride=2, select_block=4),
    ],
)
@pytest.mark.parametrize("t", [1, 4])
def test_nsa_decode_matches_full(cfg, t):
    x = _nsa_inputs(17, cfg["compress_block"], cfg["compress_stride"], seed=4)
    full = nsa_paper(**x, **cfg)
    for key in ("q", "q_cmp", "gates"):
        x[key] = x[key][..., -t:, :]
    torch.testing.assert_close(nsa_paper(**x, **cfg), full[..., -t:, :], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", range(0, 24))
@pytest.mark.parametrize("n_initial, n_local", [(1, 1), (1, 2), (2, 3), (0, 0), (3, 3)])
def test_nsa_selected_set_has_no_duplicates(p, n_initial, n_local):
    l_sel, n_sel = 4, 4
    own = p // l_sel
    # Importance that favours the forced blocks, so a naive "forced + top-n" would repeat them.
    importance = [10.0 if (j < n_initial or j > own - n_local) else float(j) for j in range(6)]
    blocks = select_blocks(importance, p, l_sel, n_sel, n_initial, n_local)
    assert len(blocks) == len(set(blocks))
    forced = {j for j in range(own + 1) if j < n_initial or j > own - n_local}
    assert forced <= set(blocks)
    assert len(blocks) == max(len(forced), min(n_sel, own + 1))
    assert all(j * l_sel <= p for j in blocks)


def test_eq9_overlap_weights():
    # l = 4, d = 2, l' = 4: block j gets tokens 2j-1, 2j, 2j+1 with weights 1, 2, 1.
    w = [[overlap_weight(i, j, 4, 2, 4) for i in range(8)] for j in range(4)]
    assert w[0] == [2, 1, 0, 0, 0, 0, 0, 0]
    assert w[2] == [0, 0, 0, 1, 2, 1, 0, 0]
    # l = l' = d: importance is p_cmp itself (Eq. 9's first case).
    p_cmp = [0.1, 0.2, 0.3, 0.4]
    assert selection_importance(p_cmp, 4, 2, 2, 2) == p_cmp
    # l = d = 2, l' = 4: block j sums tokens 2j and 2j+1.
    assert selection_importance(p_cmp, 2, 2, 2, 4) == pytest.approx([0.3, 0.7])
