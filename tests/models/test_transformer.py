import math

import pytest
import torch

import zoo
from zoo.errors import ConfigError
from zoo.models.transformer import TransformerConfig, TransformerLM, sinusoidal_positions


def test_sinusoidal_positions_match_the_paper_formula():
    pe = sinusoidal_positions(50, 16)
    for pos in (0, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_variants_build_and_run(norm, position):
    config = TransformerConfig(
        max_seq_len=16, d_model=16, n_layers=1, n_heads=2, d_ff=32, norm=norm, position=position
    )
    model = TransformerLM(config)
    assert model(torch.randint(0, 256, (1, 16))).logits.shape == (1, 16, 256)
    assert hasattr(model, "pos_emb") == (position == "learned")
    assert isinstance(model.norm_f, torch.nn.LayerNorm) == (norm == "pre")


def test_weight_tying():
    tied = zoo.create_model("transformer_lm_tiny")
    assert tied.lm_head.weight is tied.tok_emb.weight
    untied = zoo.create_model("transformer_lm_tiny", tie_weights=False)
    assert untied.lm_head.weight is not untied.tok_emb.weight
    assert untied.num_parameters() == tied.num_parameters() + 256 * 64


def test_sequence_longer_than_max_seq_len_is_a_clear_error():
    model = zoo.create_model("transformer_lm_tiny")
    with pytest.raises(ValueError, match="longer than max_seq_len=128"):
        model(torch.zeros(1, 129, dtype=torch.long))


def test_invalid_config_values():
    with pytest.raises(ConfigError, match="divisible"):
        TransformerConfig(d_model=30, n_heads=4)
    with pytest.raises(ConfigError, match="norm"):
        TransformerConfig(norm="sandwich")


def test_attention_is_a_seam():
    """A subclass replaces only build_attention and reuses the blocks."""

    class Scaled(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, cache=None):
            return 0.0 * self.inner(x, cache)

    class NoAttention(TransformerLM):
        def build_attention(self, layer):
            return Scaled(super().build_attention(layer))

    config = TransformerConfig(max_seq_len=8, d_model=16, n_layers=2, n_heads=2, d_ff=32)
    model = NoAttention(config).eval()
    assert all(isinstance(b.attention, Scaled) for b in model.blocks)
    # without attention every position is independent of its context
    a = model(torch.tensor([[1, 2, 3]])).logits
    b = model(torch.tensor([[9, 9, 3]])).logits
    torch.testing.assert_close(a[:, 2], b[:, 2])
