"""Registered attention mechanisms: the Transformer LM's ``attention`` field, one file per mechanism."""

import pytest
import torch

import zoo
from zoo.attention import CausalSelfAttention
from zoo.attention import mechanisms as mech
from zoo.attention.functional import masked_attention
from zoo.errors import ConfigError


def test_the_registry_holds_every_mechanism_file():
    assert {"dense", "sparsemax"} <= set(mech.attention_names())
    assert "transformer_lm_small_sparsemax" in zoo.list_models()


def test_sparsemax_attention_is_the_sparsemax_of_the_causal_scores():
    torch.manual_seed(0)
    model = zoo.create_model("transformer_lm_tiny", attention="sparsemax").eval()
    attn = model.blocks[0].attention
    assert attn.mapping == "sparsemax" and attn.dropout == 0.0
    x = torch.randn(2, 10, model.config.d_model) * 3
    q, k, v = attn.split_heads(x)
    causal = torch.ones(10, 10, dtype=torch.bool).tril()
    out, p = masked_attention(q, k, v, causal, mapping="sparsemax", return_weights=True)
    torch.testing.assert_close(attn(x), attn.merge_heads(out))
    assert (p[..., causal] == 0).any()  # some allowed keys get exactly zero: sparse


def test_a_new_mechanism_is_one_registration(monkeypatch):
    monkeypatch.setattr(mech, "_MECHANISMS", dict(mech._MECHANISMS))  # leave the registry as it was

    @mech.register_attention("half_heads")
    def half_heads(config, layer, params):
        return CausalSelfAttention(config.d_model, config.n_heads // 2, 0.0, config.bias)

    model = zoo.create_model("transformer_lm_tiny", attention="half_heads")
    assert model.blocks[0].attention.n_heads == model.config.n_heads // 2
    assert model(torch.randint(0, 64, (1, 8))).logits.shape == (1, 8, model.config.vocab_size)


def test_unknown_or_misplaced_attention_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown attention 'sparsmax'. Did you mean 'sparsemax'"):
        zoo.create_model("transformer_lm_tiny", attention="sparsmax")
    with pytest.raises(ConfigError, match="so pattern would have no effect"):
        zoo.create_model("sparse_transformer_small", attention="sparsemax", pattern="strided")
    with pytest.raises(ConfigError, match="so n_clusters, window would have no effect"):
        zoo.create_model("routing_transformer_small", attention="local", window=64, n_clusters=8)


def test_the_tests_tiny_models_shrink_a_mechanisms_blocks_and_keep_a_hybrids_last_layer():
    from zoo.models import TransformerLM, get_preset

    nsa = TransformerLM.tiny_config(get_preset("transformer_lm_small_nsa").config)
    assert (nsa.attention["compress_block"], nsa.attention["window"]) == (4, 4)
    assert nsa.attention["n_selected"] == 6 and nsa.attention["shared_kv"] is True  # kept
    hybrid = get_preset("transformer_lm_small_moba").config.replace(
        attention=[{"name": "moba", "block_size": 128}] * 3 + ["sparsemax"]
    )
    tiny = TransformerLM.tiny_config(hybrid)
    assert tiny.attention == ({"name": "moba", "block_size": 4, "top_k": 3}, "sparsemax")
