"""experiments/lstm_attention/attention_maps.py: one sentence under several mappings, side by side."""

import pytest
import torch
from fakes import recipe_module

import zoo
from zoo.data.translation import train_bpe

attention_maps = recipe_module("experiments/lstm_attention/attention_maps.py")

TEXT = ["ein Hund läuft im Park", "a dog runs in the park", "eine Frau liest", "a woman reads"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(TEXT * 20, vocab_size=64)


def lstm(tokenizer, mapping: str):
    torch.manual_seed(0)
    model = zoo.create_model(
        "lstm_attention_tiny", vocab_size=tokenizer.get_vocab_size(), mapping=mapping
    ).eval()
    with torch.no_grad():  # an untrained model's scores are near-equal: spread them apart
        model.score.weight.weight.mul_(50.0)
    model.tokenizer = tokenizer
    return model


def test_one_panel_per_model_titled_by_its_mapping(tokenizer, tmp_path):
    mappings = ["softmax", "sparsemax", "fusedmax", "csparsemax"]
    models = [lstm(tokenizer, m) for m in mappings]
    maps, translations = attention_maps.attention_maps(models, "ein Hund liest", beam_size=2)
    assert [m.title for m in maps] == ["softmax", "sparsemax", "fusedmax (λ 0.1)", "csparsemax"]
    assert len(translations) == 4
    for m in maps:
        assert m.weights.shape == (len(m.output), len(m.source))
        assert torch.allclose(m.weights.sum(-1), torch.ones(len(m.output)), atol=1e-5)
    assert maps[3].source[-1] == "<sink>"  # the constrained mapping's sink column
    softmax, sparsemax = maps[0].weights, maps[1].weights
    assert (softmax > 0).all() and (sparsemax == 0).any()
    path = attention_maps.draw_attention_maps(maps, tmp_path / "maps.png")
    assert path.stat().st_size > 0


def test_transformer_reports_its_attention_mapping(tokenizer):
    model = zoo.create_model(
        "transformer_tiny", vocab_size=tokenizer.get_vocab_size(), attention_mapping="entmax15"
    )
    assert attention_maps.mapping_of(model) == "entmax15"
    assert attention_maps.mapping_of(lstm(tokenizer, "softmax")) == "softmax"


def test_an_empty_sentence_is_a_value_error(tokenizer):
    with pytest.raises(ValueError, match="empty"):
        attention_maps.attention_maps([lstm(tokenizer, "softmax")], "")


def test_decode_with_another_mapping_is_labelled_and_changes_the_attention(tokenizer):
    trained = attention_maps.attention_maps([lstm(tokenizer, "sparsemax")], "ein Hund liest")[0]
    model = attention_maps.decode_with(lstm(tokenizer, "sparsemax"), "softmax")
    (m,), _ = attention_maps.attention_maps([model], "ein Hund liest")
    assert m.title == "softmax\n(sparsemax-trained)"
    assert (m.weights > 0).all() and (trained[0].weights == 0).any()


def test_decode_with_refuses_to_add_or_drop_the_sink(tokenizer):
    with pytest.raises(ValueError, match="trained sink"):
        attention_maps.decode_with(lstm(tokenizer, "sparsemax"), "csparsemax")
    with pytest.raises(ValueError, match="trained sink"):
        attention_maps.decode_with(lstm(tokenizer, "csparsemax"), "softmax")


def test_fusedmax_panels_name_their_lambda(tokenizer):
    model = attention_maps.decode_with(lstm(tokenizer, "sparsemax"), "fusedmax", fusedmax_lam=3.0)
    assert model.config.fusedmax_lam == 3.0
    (m,), _ = attention_maps.attention_maps([model], "ein Hund liest")
    assert m.title == "fusedmax (λ 3)\n(sparsemax-trained)"
