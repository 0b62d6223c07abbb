"""The one masked attention path (zoo.attention.functional.masked_attention) and the layers on it."""

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.attention import MultiHeadAttention
from zoo.attention.functional import attend, masked_attention
from zoo.attention.patterns import causal
from zoo.attention.relative import RelativePositions
from zoo.errors import ConfigError


def qkv(B=2, H=3, T=5, S=7, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, D, generator=g), torch.randn(B, H, S, D, generator=g),
            torch.randn(B, H, S, D, generator=g))  # fmt: skip


def test_softmax_equals_sdpa_under_the_same_mask():
    q, k, v = qkv()
    allowed = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(1)) > 0.4
    allowed[..., 0] = True  # every row has a key (SDPA gives NaN otherwise)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(masked_attention(q, k, v, allowed), want)
    out, p = masked_attention(q, k, v, allowed, return_weights=True, scale=0.5)
    torch.testing.assert_close(p.sum(-1), torch.ones(2, 3, 5))
    assert (p[~allowed.expand_as(p)] == 0).all()
    torch.testing.assert_close(out, p @ v)


@pytest.mark.parametrize("mapping", ["softmax", "sparsemax", "entmax15", "fusedmax"])
def test_empty_rows_give_zeros_and_half_inputs_come_back_in_their_dtype(mapping):
    q, k, v = qkv()
    allowed = torch.ones(5, 7, dtype=torch.bool)
    allowed[2] = False
    out = masked_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), allowed, mapping=mapping)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert (out[:, :, 2] == 0).all()


def test_sparse_mappings_give_sparse_weights():
    q, k, v = qkv()
    _, p = masked_attention(q * 4, k, v, torch.ones(5, 7, dtype=torch.bool), mapping="sparsemax",
                            return_weights=True)  # fmt: skip
    assert (p == 0).any() and torch.allclose(p.sum(-1), torch.ones(2, 3, 5))


def test_relative_positions_add_both_shaw_terms():
    q, k, v = qkv(T=4, S=4, D=6)
    rel = RelativePositions(max_distance=2, d_head=6)
    distance = torch.arange(4)[:, None] - torch.arange(4)[None, :]
    allowed = distance >= 0
    out = masked_attention(q, k, v, allowed, relative=rel, distance=distance)
    # by hand, Shaw et al. eqs. 3-4 with distances clipped at 2
    d = distance.clamp(0, 2)
    aK, aV = rel.keys.weight[d], rel.values.weight[d]  # (4, 4, D)
    s = (q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, aK)) / 6**0.5
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    want = p @ v + torch.einsum("bhij,ijd->bhid", p, aV)
    torch.testing.assert_close(out, want)


def test_multi_head_attention_with_entmax15():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, mapping="entmax15")
    x, mem = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True, True, False, False, False]])
    y = mha(x, mha.project_memory(mem), key_padding_mask=keep)
    assert y.shape == (2, 3, 16) and torch.isfinite(y).all()
    soft = MultiHeadAttention(16, 2)
    soft.load_state_dict(mha.state_dict())  # the same weights: only the mapping differs
    assert not torch.allclose(soft(x, soft.project_memory(mem), key_padding_mask=keep), y)
    with pytest.raises(ValueError, match="needs upper bounds per key"):
        MultiHeadAttention(16, 2, mapping="csparsemax")
    with pytest.raises(ValueError, match="dropout applies to softmax attention only"):
        MultiHeadAttention(16, 2, dropout=0.1, mapping="sparsemax")


def test_transformer_seq2seq_with_entmax15_attention():
    torch.manual_seed(0)
    m = zoo.create_model("transformer_tiny", attention_mapping="entmax15").eval()
    src, tgt = torch.randint(1, 64, (2, 6)), torch.randint(1, 64, (2, 4))
    src[1, 4:] = 0
    full = m(src, tgt).logits
    memory, mask = m.encode(src)
    cache = m.init_cache(memory, mask)
    steps = torch.cat([m.decode(tgt[:, t : t + 1], cache=cache) for t in range(4)], 1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
    w = m.attention_weights(src, tgt)
    assert (w[1, :, 4:] == 0).all()  # no attention on padding
    with pytest.raises(ConfigError, match="needs upper bounds per source word"):
        zoo.create_model("transformer_tiny", attention_mapping="csoftmax")
    with pytest.raises(ConfigError, match="attention_dropout applies to softmax attention only"):
        zoo.create_model("transformer_tiny", attention_mapping="entmax15", attention_dropout=0.1)


@pytest.mark.parametrize("d_head, fp32", [(32, True), (64, False)])
def test_dense_causal_attention_on_a_cpu_runs_small_heads_in_fp32(d_head, fp32):
    """Under bf16 autocast on a CPU, heads of 32 or less go to the fused kernel in fp32 (faster
    there: zoo.kernels.sdpa) and come back in bf16; wider heads stay in autocast's bf16."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, d_head).bfloat16() for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attend(q, k, v, causal())
    wide = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    low = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, wide.bfloat16() if fp32 else low)
    assert not torch.equal(wide.bfloat16(), low)  # the two precisions are told apart


def test_the_clusters_route_is_routing_attention_within_the_engine():
    """Content routing's top-w clusters are one of attend()'s routes (issue 54: one engine): the
    same outputs as the fp64 reference, and no pattern, cache or dropout beside them."""
    from zoo.kernels.routing import routing_attention_ref

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 12, 8) for _ in range(3))
    q_idx = torch.stack([torch.randperm(12)[:8].view(2, 4).sort(-1).values for _ in range(6)])
    q_idx = q_idx.view(2, 3, 2, 4)
    want = routing_attention_ref(q, k, v, q_idx).float()
    torch.testing.assert_close(attend(q, k, v, clusters=(q_idx, None)), want)
    with pytest.raises(ValueError, match="clusters take no pattern"):
        attend(q, k, v, causal(), clusters=(q_idx, None))
