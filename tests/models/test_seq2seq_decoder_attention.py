"""The encoder-decoder's decoder self-attention as a registered mechanism (``decoder_attention``):
causal, cached decoding equal to the full forward, saved and loaded, a clear error when wrong."""

import pytest
import torch

import zoo
from zoo.errors import ConfigError

TINY_MOBA = {"name": "moba", "block_size": 4, "top_k": 2}
TINY_NSA = {"name": "nsa", "compress_block": 4, "compress_stride": 2, "select_block": 4,
            "n_selected": 3, "n_initial": 1, "n_local": 1, "window": 4}  # fmt: skip


def _model(decoder_attention):
    torch.manual_seed(0)
    return zoo.create_model(
        "transformer_tiny", decoder_attention=decoder_attention, dropout=0.0
    ).eval()


@pytest.mark.parametrize(
    "spec", [[{"name": "local", "window": 6, "block_size": 4}, TINY_MOBA], TINY_NSA]
)
def test_cached_decoding_equals_the_full_forward_and_is_causal(spec):
    model = _model(spec)
    assert type(model.decoder[1].self_attn).__name__ in ("MoBASelfAttention", "NSASelfAttention")
    src = torch.randint(1, 64, (2, 9))
    tgt = torch.randint(1, 64, (2, 30))
    memory, src_mask = model.encode(src)
    full = model.decode(tgt, memory, src_mask)
    cache = model.init_cache(memory, src_mask)
    steps = [model.decode(tgt[:, t : t + 1], cache=cache) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    changed = tgt.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % 63 + 1
    torch.testing.assert_close(model.decode(changed, memory, src_mask)[:, :20], full[:, :20])


def test_saved_with_every_parameter_and_loaded(tmp_path):
    model = _model([{"name": "local", "window": 6}, TINY_MOBA])
    assert model.config.decoder_attention[0]["block_size"] == 32  # written out
    assert model.config.structure()["decoder_pattern"] == "local+moba"
    model.save_pretrained(tmp_path)
    loaded = zoo.from_pretrained(tmp_path)
    assert loaded.config == model.config
    src, tgt = torch.randint(1, 64, (1, 7)), torch.randint(1, 64, (1, 12))
    torch.testing.assert_close(loaded(src, tgt).logits, model(src, tgt).logits)


def test_the_papers_self_attention_by_default_and_errors_in_one_line():
    assert zoo.create_model("transformer_tiny").config.decoder_attention is None
    assert "decoder_pattern" not in zoo.create_model("transformer_tiny").config.structure()
    with pytest.raises(ConfigError, match="unknown attention 'mobba'. Did you mean 'moba'"):
        zoo.create_model("transformer_tiny", decoder_attention="mobba")
    with pytest.raises(ConfigError, match="attention lists 3 layers but the model has n_layers=2"):
        zoo.create_model("transformer_tiny", decoder_attention=["local"] * 3)
