"""experiments/lstm_attention/support_size.py: the mean attention support of a translation model."""

import pytest
import torch
from fakes import recipe_module

import zoo
from zoo.data.translation import BOS_ID, train_bpe

support_size = recipe_module("experiments/lstm_attention/support_size.py")

PAIRS = [("ein Hund läuft im Park", "a dog runs in the park"), ("eine Frau liest", "a woman reads")]


def model_with(mapping: str):
    tokenizer = train_bpe([s for pair in PAIRS for s in pair] * 20, vocab_size=64)
    torch.manual_seed(0)
    model = zoo.create_model(
        "lstm_attention_tiny", vocab_size=tokenizer.get_vocab_size(), mapping=mapping
    ).eval()
    model.tokenizer = tokenizer
    return model


def test_softmax_attends_everywhere_and_sparsemax_to_fewer():
    mean, length = support_size.support(model_with("softmax"), PAIRS)
    assert mean == length > 0  # softmax: every source token, every step
    sparsemax = model_with("sparsemax")
    with torch.no_grad():  # an untrained model's scores are near-equal: spread them apart
        sparsemax.score.weight.weight.mul_(50.0)
    sparse, length2 = support_size.support(sparsemax, PAIRS)
    assert length2 == length and 1 <= sparse < length


def test_transformer_support_is_counted_per_head_and_layer():
    tokenizer = train_bpe([s for pair in PAIRS for s in pair] * 20, vocab_size=64)
    torch.manual_seed(0)
    model = zoo.create_model(
        "transformer_tiny", vocab_size=tokenizer.get_vocab_size(), attention_mapping="sparsemax"
    ).eval()
    model.tokenizer = tokenizer
    src = torch.tensor([tokenizer.encode(PAIRS[0][0]).ids])
    tgt = torch.tensor([[BOS_ID, *tokenizer.encode(PAIRS[0][1]).ids]])
    maps = support_size._maps(model, src, tgt)
    c = model.config
    assert len(maps) == c.n_heads * c.n_decoder_layers
    per_head = sum(float((w > 0).sum()) for w in maps) / (len(maps) * tgt.shape[1])
    mean, length = support_size.support(model, PAIRS[:1])
    assert mean == pytest.approx(per_head) and length == src.shape[1]
    averaged = model.attention_weights(src, tgt)[0]  # the head average: the union of supports
    assert float((averaged > 0).sum()) / tgt.shape[1] >= per_head
