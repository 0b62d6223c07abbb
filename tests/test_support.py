"""zoo.support: the mean attention support of a translation model, `zoo evaluate --attention` and
the card section `zoo export --attention` publishes."""

import json

import pytest
import torch

import zoo
from zoo.cli import main
from zoo.data.translation import BOS_ID, train_bpe
from zoo.support import attention_maps_of, attention_support

PAIRS = [("ein Hund läuft im Park", "a dog runs in the park"), ("eine Frau liest", "a woman reads")]


def model_with(mapping: str):
    tokenizer = train_bpe([s for pair in PAIRS for s in pair] * 20, vocab_size=64)
    torch.manual_seed(0)
    model = zoo.create_model(  # real sentences are long in so small a vocabulary
        "lstm_attention_tiny", vocab_size=tokenizer.get_vocab_size(), mapping=mapping,
        max_seq_len=512,
    ).eval()  # fmt: skip
    model.tokenizer = tokenizer
    return model


def test_softmax_attends_everywhere_and_sparsemax_to_fewer():
    mean, length = attention_support(model_with("softmax"), PAIRS)
    assert mean == length > 0  # softmax: every source token, every step
    sparsemax = model_with("sparsemax")
    with torch.no_grad():  # an untrained model's scores are near-equal: spread them apart
        sparsemax.score.weight.weight.mul_(50.0)
    sparse, length2 = attention_support(sparsemax, PAIRS)
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
    maps = attention_maps_of(model, src, tgt)
    c = model.config
    assert len(maps) == c.n_heads * c.n_decoder_layers
    per_head = sum(float((w > 0).sum()) for w in maps) / (len(maps) * tgt.shape[1])
    mean, length = attention_support(model, PAIRS[:1])
    assert mean == pytest.approx(per_head) and length == src.shape[1]
    averaged = model.attention_weights(src, tgt)[0]  # the head average: the union of supports
    assert float((averaged > 0).sum()) / tgt.shape[1] >= per_head


def test_zoo_evaluate_attention_writes_the_profile_and_export_shows_it(tmp_path, data_dir, capsys):
    """On Multi30k's real test split: the numbers, the files, one-line refusals, and the card."""
    from zoo.publishing.card_sections import attention_section as _attention_section
    from zoo.support import load_attention_profile

    model = model_with("softmax")
    model.save_pretrained(tmp_path / "m")
    out = tmp_path / "attention"
    main(["evaluate", str(tmp_path / "m"), "--attention", "--dataset", "multi30k", "--split",
          "test", "--line", "3", "--out-dir", str(out), "--name", "lstm.tiny",
          "--data-dir", str(data_dir)])  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == [
        "attention.json", "attention.md", "attention.png"]  # fmt: skip
    p = load_attention_profile(out)
    data = json.loads((out / "attention.json").read_text())
    assert p.source == "lstm.tiny" and p.mapping == "softmax" and p.sentences == 1000
    assert p.support == p.source_tokens > 0 and data["share"] == 1.0  # softmax: every token
    assert p.line == 3 and p.sentence and p.reference and p.beam_size == 4
    assert "| softmax | multi30k | test | 1,000 |" in (out / "attention.md").read_text()
    assert "zoo evaluate NAME --attention --dataset multi30k --split test --line 3" in (
        _attention_section(p).replace("lstm.tiny", "NAME"))  # fmt: skip

    for flags, message in [
        (["--line", "5000"], "line 5000 is outside multi30k test, which has 1000 lines"),
        (["--probe", "copy"], "--attention measures a translation model's attention"),
    ]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            main(["evaluate", str(tmp_path / "m"), "--attention", "--dataset", "multi30k",
                  "--data-dir", str(data_dir), *flags])  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()[-1]  # argparse's usage, then the error
        assert e.value.code == 2 and message in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "m"), "--line", "3"])
    assert "--line goes with --attention" in capsys.readouterr().err
    zoo.create_model("transformer_lm_tiny").save_pretrained(tmp_path / "lm")
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "lm"), "--attention", "--dataset", "multi30k",
              "--data-dir", str(data_dir)])  # fmt: skip
    err = capsys.readouterr().err  # one line, from load_model
    assert "is a language model: --attention measures a translation model's" in err
    assert "--by-context" in err and "zoo generate" not in err
