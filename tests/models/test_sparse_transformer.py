"""The Sparse Transformer: its attention integrations, positions, init, decoding."""

import math

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.attention import SparseSelfAttention
from zoo.attention.functional import attend, route
from zoo.attention.patterns import fixed, strided
from zoo.errors import ConfigError
from zoo.models import SparseTransformerConfig, SparseTransformerLM

SMALL = dict(
    vocab_size=32, max_seq_len=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, dropout=0.0,
    stride=8, c=2, block_size=4,
)  # fmt: skip


def model_with(**overrides) -> SparseTransformerLM:
    torch.manual_seed(0)
    return SparseTransformerLM(SparseTransformerConfig(**(SMALL | overrides)))


def dense_layer(attn: SparseSelfAttention, x, masks):
    """The same projections, dense attention under per-head element masks ``(H, T, T)``."""
    q, k, v = attn.split_heads(x)
    return attn.merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=masks))


def expected_masks(config, layer, T):
    """Per-head masks ``(H, T, T)`` the paper's integrations prescribe (§5.1)."""
    H, l, c = config.n_heads, config.stride, config.c
    if config.pattern == "strided":
        a1, a2 = strided(l, 1).mask(T), strided(l, 2).mask(T)
        per_head = False
    else:
        a1 = fixed(l, c, 1).mask(T)
        a2 = fixed(l, c, 2, distinct_summaries=config.distinct_summaries)
        per_head = config.distinct_summaries
    if config.integration == "interleaved":
        m = a1 if layer % 2 == 0 else (a2.mask(T, H) if per_head else a2)
        return m.expand(H, T, T) if m.dim() == 2 else m
    if config.integration == "merged":
        a2m = a2.mask(T, H) if per_head else a2
        return (a1 | a2m).expand(H, T, T)
    half = H // 2  # multihead: first half A1, second half A2 (head index within its group)
    a2m = a2.mask(T, H - half) if per_head else a2.expand(H - half, T, T)
    return torch.cat([a1.expand(half, T, T), a2m])


@pytest.mark.parametrize("pattern", ["strided", "fixed"])
@pytest.mark.parametrize("integration", ["interleaved", "merged", "multihead"])
@pytest.mark.parametrize("T", [64, 37])
def test_each_integration_attends_exactly_the_paper_sets(pattern, integration, T):
    model = model_with(pattern=pattern, integration=integration)
    x = torch.randn(2, T, 32)
    for layer, block in enumerate(model.blocks):
        got = block.attention(x)
        want = dense_layer(block.attention, x, expected_masks(model.config, layer, T))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_interleaving_alternates_the_components():
    model = model_with(pattern="fixed", integration="interleaved", n_layers=4)
    names = [b.attention.groups[0].pattern.name for b in model.blocks]
    assert [n.rsplit(".", 1)[1] for n in names] == ["A1", "A2", "A1", "A2"]


def test_multihead_splits_heads_between_components():
    groups = model_with(pattern="strided", integration="multihead").blocks[0].attention.groups
    assert [(g.n_heads, g.pattern.name.rsplit(".", 1)[1]) for g in groups] == [(2, "A1"), (2, "A2")]
    # strided A2 runs on the transposed sequence; A1 as local(stride + 1) on a CPU, through the
    # block-sparse op (the Triton kernel) on CUDA
    assert [route(g.pattern) for g in groups] == ["local", "columns"]
    assert [route(g.pattern, device_type="cuda") for g in groups] == ["block_sparse", "columns"]
    assert groups[1].pattern.param("stride") == 8


# recomputation in backward (§5.4) is every family's gradient checkpointing now:
# tests/models/test_gradient_checkpointing.py


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decoding_takes_qk_in_fp32_so_half_precision_does_not_overflow(dtype):
    """Paper §5.6: QK^T can exceed fp16's 65504 when sampling; the cached path casts q, k."""
    attn = model_with(pattern="strided", integration="merged").blocks[0].attention
    B, H, S, D = 1, 4, 20, 8
    q = torch.full((B, H, 1, D), 120.0)
    k = torch.full((B, H, S, D), 120.0)  # q.k = 115,200 > fp16 max
    k[..., 3, :] = 119.0
    v = torch.randn(B, H, S, D)
    pattern = attn.groups[0].pattern
    got = attend(q.to(dtype), k.to(dtype), v.to(dtype), pattern, past=S - 1)
    assert torch.isfinite(got).all()
    mask = pattern.mask(S)[-1:]
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)
    with pytest.raises(AssertionError):  # the naive half-precision product does overflow
        assert torch.isfinite(q.half() @ k.half().transpose(-1, -2)).all()


def test_decoding_scores_stay_fp32_under_autocast():
    """Sampling under ``torch.autocast`` must not let the fp32 QK^T drop back to half precision."""
    attn = model_with(pattern="fixed", integration="merged").blocks[0].attention
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, 8, generator=g) * s for n, s in ((1, 6), (30, 6), (30, 1)))
    pattern = attn.groups[0].pattern
    plain = attend(q, k, v, pattern, past=29)
    with torch.autocast("cpu", torch.bfloat16):
        mixed = attend(q, k, v, pattern, past=29)
    torch.testing.assert_close(mixed, plain, rtol=1e-6, atol=1e-6)


def test_factorized_positions_are_row_plus_column_embeddings():
    model = model_with()
    assert model.config.position_dims == (8, 8)
    rows, cols = model.pos_embs
    got = model.positions(5, 20, torch.device("cpu"))
    pos = torch.arange(5, 25)
    torch.testing.assert_close(got, rows.weight[pos // 8] + cols.weight[pos % 8])


def test_image_positions_are_row_column_channel():
    model = model_with(max_seq_len=48, position_shape=[4, 4, 3])  # a list, as JSON gives it
    assert model.config.position_shape == (4, 4, 3)
    r, c, ch = model.pos_embs
    i = torch.tensor([0, 1, 2, 3, 13, 47])  # 13 = row 1, column 0, channel 1
    want = r.weight[i // 12] + c.weight[(i // 3) % 4] + ch.weight[i % 3]
    torch.testing.assert_close(model.positions(0, 48, torch.device("cpu"))[i], want)


def test_initialisation_follows_the_paper():
    config = SparseTransformerConfig(**(SMALL | {"d_model": 256, "d_ff": 1024, "n_layers": 8}))
    torch.manual_seed(0)
    model = SparseTransformerLM(config)
    assert not model.lm_head.weight.any(), "output logits start at zero (§6)"
    N, d = 8, 256

    def std(t):
        return t.detach().std().item()

    assert std(model.tok_emb.weight) == pytest.approx(0.125 / math.sqrt(d), rel=0.05)
    assert std(model.pos_embs[1].weight) == pytest.approx(0.125 / math.sqrt(2 * d), rel=0.2)
    blk = model.blocks[0]
    assert std(blk.ff.w1.weight) == pytest.approx(0.125 / math.sqrt(d), rel=0.05)
    assert std(blk.attention.qkv.weight) == pytest.approx(0.125 / math.sqrt(d), rel=0.05)
    scaled = 1 / math.sqrt(2 * N)
    assert std(blk.ff.w2.weight) == pytest.approx(0.125 / math.sqrt(1024) * scaled, rel=0.05)
    assert std(blk.attention.out_proj.weight) == pytest.approx(0.125 / d**0.5 * scaled, rel=0.05)
    assert not blk.ff.w1.bias.any() and not blk.attention.qkv.bias.any()


def test_gpt2_init_scheme_takes_the_transformer_familys_initialisation():
    config = SparseTransformerConfig(
        **(SMALL | {"d_model": 256, "d_ff": 1024, "n_layers": 8, "init_scheme": "gpt2"})
    )
    torch.manual_seed(0)
    model = SparseTransformerLM(config)
    assert not model.lm_head.weight.any(), "zero_init_logits still applies"
    blk = model.blocks[0]
    assert blk.ff.w1.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert blk.ff.w2.weight.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


def test_untrained_model_predicts_uniform_and_generates():
    model = model_with().eval()
    logits = model(torch.randint(0, 32, (1, 10))).logits
    assert torch.equal(logits, torch.zeros_like(logits))
    out = zoo.generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=70)
    assert out.shape == (1, 73)  # past max_seq_len=64: re-encodes a window, as the dense model


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"tie_weights": True}, "needs zero_init_logits=False"),
        ({"integration": "multihead", "n_heads": 1, "d_model": 32}, "n_heads >= 2"),
        ({"integration": "stacked"}, "integration='stacked' is not one of"),
        ({"pattern": "fixed", "c": 16}, "1 <= c <= stride"),
        ({"block_size": 0}, "block_size must be a positive integer"),
        ({"position_shape": (4, 4)}, "fewer than max_seq_len=64"),
    ],
)
def test_bad_configs_raise(overrides, match):
    with pytest.raises(ConfigError, match=match):
        SparseTransformerConfig(**(SMALL | overrides))


def test_config_round_trips_through_json(tmp_path):
    model = model_with(position_shape=(8, 2, 4), pattern="strided", integration="multihead")
    model.save_pretrained(tmp_path)
    loaded = zoo.from_pretrained(tmp_path)
    assert loaded.config == model.config and loaded.config.position_shape == (8, 2, 4)


def test_plans_are_reused_and_bounded():
    """The engine builds a plan once per pattern and length and reuses it; prefills of many
    lengths do not accumulate plans without bound."""
    from zoo.attention import functional

    pattern = (
        model_with(pattern="fixed", integration="merged").blocks[0].attention.groups[0].pattern
    )
    cpu = torch.device("cpu")
    first = functional._plan(pattern, 40, 4, 8, cpu)
    assert functional._plan(pattern, 40, 4, 8, cpu) is first
    for T in range(10, 10 + 3 * functional.MAX_PLANS):
        functional._plan(pattern, T, 4, 8, cpu)
    assert len(functional._PLANS) == functional.MAX_PLANS
    assert (
        pattern,
        10 + 3 * functional.MAX_PLANS - 1,
        4,
        8,
        "cpu",
        False,  # a block-sparse plan, not a gathered one
    ) in functional._PLANS  # per head
