"""The encoder-decoder Transformer (Vaswani et al. 2017): sizes, masking, caching, save/load."""

import pytest
import torch

import zoo
from zoo.attention import MultiHeadAttention
from zoo.errors import ConfigError
from zoo.models.registry import get_preset

PAD = 0


def tiny(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return zoo.create_model("transformer_tiny", **overrides).eval()


def batch(B=3, S=9, T=7, V=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, S), generator=g), torch.randint(1, V, (B, T), generator=g)


@pytest.mark.parametrize(
    "name, paper_millions", [("transformer_base", 65), ("transformer_big", 213)]
)
def test_paper_sizes(name, paper_millions):
    preset = get_preset(name)
    with torch.device("meta"):
        n = sum(p.numel() for p in preset.model_cls(preset.config).parameters())
    # the paper's counts (Table 3) with a joint vocabulary of ~37k; ours within 3%
    assert abs(n / 1e6 - paper_millions) / paper_millions < 0.03
    c = preset.config
    assert (c.norm, c.activation, c.share_embeddings) == ("post", "relu", True)


def test_shapes_and_shared_embeddings():
    model = tiny()
    src, tgt = batch()
    logits = model(src, tgt).logits
    assert logits.shape == (3, 7, 64) and torch.isfinite(logits).all()
    assert model.lm_head.weight is model.src_emb.weight is model.tgt_emb.weight
    separate = tiny(share_embeddings=False)
    assert separate.tgt_emb is not separate.src_emb


def test_encoder_sees_the_whole_source_decoder_only_the_past():
    model = tiny()
    src, tgt = batch()
    memory, _ = model.encode(src)
    src2 = src.clone()
    src2[:, -1] = (src2[:, -1] % 63) + 1  # change the last source token
    memory2, _ = model.encode(src2)
    assert not torch.allclose(memory[:, 0], memory2[:, 0])  # bidirectional
    logits = model(src, tgt).logits
    tgt2 = tgt.clone()
    tgt2[:, 4] = (tgt2[:, 4] % 63) + 1
    logits2 = model(src, tgt2).logits
    assert torch.allclose(logits[:, :4], logits2[:, :4], atol=1e-6)  # causal
    assert not torch.allclose(logits[:, 4:], logits2[:, 4:])


def test_source_padding_changes_nothing():
    model = tiny()
    src, tgt = batch()
    padded = torch.cat([src, torch.full((3, 5), PAD)], dim=1)
    assert torch.allclose(model(src, tgt).logits, model(padded, tgt).logits, atol=1e-5)


def test_cached_decoding_matches_the_full_forward():
    model = tiny()
    src, tgt = batch()
    full = model(src, tgt).logits
    memory, src_mask = model.encode(src)
    cache = model.init_cache(memory, src_mask)
    steps = [model.decode(tgt[:, t : t + 1], cache=cache) for t in range(tgt.shape[1])]
    assert cache.seq_len == tgt.shape[1]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_backward_reaches_every_parameter(norm):
    model = tiny(norm=norm).train()
    src, tgt = batch()
    model(src, tgt).logits.logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_post_norm_outputs_are_layer_normalised():
    model = tiny()
    memory, _ = model.encode(batch()[0])
    assert torch.allclose(memory.mean(-1), torch.zeros(3, 9), atol=1e-5)
    assert torch.allclose(memory.std(-1, unbiased=False), torch.ones(3, 9), atol=1e-3)


def test_save_load_round_trip(tmp_path):
    model = tiny()
    model.save_pretrained(tmp_path)
    loaded = zoo.from_pretrained(tmp_path)
    src, tgt = batch()
    assert torch.equal(model(src, tgt).logits, loaded(src, tgt).logits)
    assert loaded.lm_head.weight is loaded.src_emb.weight


def test_too_long_and_bad_config_are_clear_errors():
    model = tiny()
    with pytest.raises(ValueError, match="source of 65 tokens is longer than max_seq_len=64"):
        model.encode(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ConfigError, match="pad_id"):
        tiny(pad_id=64)


def test_a_query_with_no_visible_key_gets_zeros_not_nan():
    attn = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    none_visible = torch.zeros(2, 3, dtype=torch.bool)
    assert torch.equal(attn(x, key_padding_mask=none_visible), attn.out_proj.bias.expand(2, 3, 8))
