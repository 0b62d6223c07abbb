"""The zoo's MoBA and NSA against an independent implementation of the papers' definitions
(tests/independent/, written from SPEC §6 and the papers by someone who had not read the zoo's
code; its README lists its reading of every open point): values to 1e-10 in fp64 and 1e-5 in fp32,
gradients to 1e-10 in fp64, for whole sequences and decoding steps (T < S)."""

import pytest
import torch

from tests.independent.moba_paper import moba_paper
from tests.independent.nsa_paper import nsa_paper
from zoo.attention.mechanisms.moba import moba_attention
from zoo.attention.mechanisms.nsa import NSAKeys, NSAParams, nsa_attention

MOBA = [  # (S, T, block_size, top_k): partial last blocks, top-1, more slots than blocks, decoding
    (37, 37, 4, 3),
    (64, 64, 8, 2),
    (50, 50, 5, 4),
    (33, 33, 16, 1),
    (40, 40, 4, 12),
    (45, 3, 4, 3),
]


def _qkv(S, T, dtype, seed=0, B=2, H=3, D=8):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for n in (T, S, S))
    return [x.to(dtype).requires_grad_() for x in (q, k, v)]


@pytest.mark.parametrize(("S", "T", "block_size", "top_k"), MOBA)
def test_moba_equals_the_independent_reading_in_values_and_gradients(S, T, block_size, top_k):
    q, k, v = _qkv(S, T, torch.float64)
    ours = moba_attention(q, k, v, block_size=block_size, top_k=top_k)
    theirs = moba_paper(q, k, v, block_size, top_k, gate_dtype=torch.float32)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-10)
    w = torch.randn_like(ours)
    grads = torch.autograd.grad((ours * w).sum(), (q, k, v))
    expected = torch.autograd.grad((theirs * w).sum(), (q, k, v))
    for a, b in zip(grads, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    q32, k32, v32 = (x.detach().float() for x in (q, k, v))
    out32 = moba_attention(q32, k32, v32, block_size=block_size, top_k=top_k)
    ref32 = moba_paper(q32.double(), k32.double(), v32.double(), block_size, top_k,
                       gate_dtype=torch.float32)  # fmt: skip
    torch.testing.assert_close(out32.double(), ref32, rtol=0, atol=1e-5)


NSA = [  # (S, T, l, d, l', n_selected, n_initial, n_local, window)
    (40, 40, 4, 2, 4, 3, 1, 1, 6),  # d < l
    (48, 48, 8, 4, 8, 4, 1, 2, 8),
    (45, 45, 4, 4, 4, 3, 0, 1, 5),  # l = l' = d: the importance is p_cmp itself
    (64, 64, 8, 2, 4, 5, 1, 2, 16),  # l' < l
    (37, 37, 4, 2, 8, 2, 0, 1, 3),  # l' > l
    (30, 30, 4, 2, 4, 8, 1, 2, 4),  # more slots than blocks
    (7, 7, 8, 4, 8, 3, 1, 1, 4),  # S < l: no compressed token at all
    (50, 4, 4, 2, 8, 3, 1, 1, 6),  # decoding: the last 4 of 50 positions
]


def _nsa_inputs(S, T, l, d, dtype, seed=1, B=2, H=2, D=8):
    g = torch.Generator().manual_seed(seed)
    N = max(0, (S - l) // d + 1)

    def rand(n):
        return torch.randn(B, H, n, D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()

    q, q_cmp = rand(T), rand(T)
    kv = NSAKeys(rand(N), rand(N), rand(S), rand(S), rand(S), rand(S))
    gates = torch.rand(B, H, T, 3, generator=g, dtype=torch.float64).to(dtype)
    return q, q_cmp, kv, gates


@pytest.mark.parametrize(("S", "T", "l", "d", "ls", "n", "ni", "nl", "w"), NSA)
def test_nsa_equals_the_independent_reading_in_values_and_gradients(S, T, l, d, ls, n, ni, nl, w):
    params = NSAParams(compress_block=l, compress_stride=d, select_block=ls, n_selected=n,
                       n_initial=ni, n_local=nl, window=w)  # fmt: skip
    knobs = dict(compress_block=l, compress_stride=d, select_block=ls, n_selected=n,
                 n_initial=ni, n_local=nl, window=w)  # fmt: skip
    q, q_cmp, kv, gates = _nsa_inputs(S, T, l, d, torch.float64)
    ours = nsa_attention(q, kv, gates, params, q_cmp=q_cmp)
    theirs = nsa_paper(q, *kv, gates, **knobs, q_cmp=q_cmp)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-10)
    inputs = (q, q_cmp, *kv)
    w_out = torch.randn_like(ours)
    grads = torch.autograd.grad((ours * w_out).sum(), inputs, allow_unused=True)
    expected = torch.autograd.grad((theirs * w_out).sum(), inputs, allow_unused=True)
    for a, b, x in zip(grads, expected, inputs, strict=True):
        a = torch.zeros_like(x) if a is None else a
        b = torch.zeros_like(x) if b is None else b
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    q32, qc32, gates32 = q.detach().float(), q_cmp.detach().float(), gates.float()
    kv32 = NSAKeys(*(x.detach().float() for x in kv))
    out32 = nsa_attention(q32, kv32, gates32, params, q_cmp=qc32)
    ref32 = nsa_paper(q32.double(), *(x.double() for x in kv32), gates32.double(), **knobs,
                      q_cmp=qc32.double())  # fmt: skip
    torch.testing.assert_close(out32.double(), ref32, rtol=0, atol=1e-5)
