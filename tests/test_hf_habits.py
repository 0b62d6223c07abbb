"""Hugging Face habits on every zoo model (issue 55, item 1): ``model.generate`` with transformers'
argument names, ``push_to_hub``, ``device`` / ``dtype``, ``create_model(pretrained=True)``
(timm's), and ``from_pretrained``'s ``local_files_only`` / ``token`` (tests/hub/test_download.py)."""

import pytest
import torch
from published import assert_same_weights

import zoo
from zoo.beam_search import beam_search, greedy_search
from zoo.errors import ConfigError, HubError, UnknownModelError

PAD, BOS, EOS = 0, 1, 2
LANGUAGE_MODELS = ["transformer_lm_tiny", "sparse_transformer_tiny", "routing_transformer_tiny",
                   "image_transformer_tiny"]  # fmt: skip
TRANSLATORS = ["transformer_tiny", "lstm_attention_tiny"]


def tiny(name, **overrides):
    torch.manual_seed(0)
    return zoo.create_model(name, **overrides).eval()


def prompt(model, batch=2, length=5):
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, min(model.config.vocab_size, 256), (batch, length), generator=g)


def sources(V=64):
    g = torch.Generator().manual_seed(3)
    src = torch.randint(3, V, (3, 8), generator=g)
    src[1, 5:] = PAD
    return src


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_generate_greedy_and_seeded_sampling_are_zoo_generate(name):
    model = tiny(name)
    ids = prompt(model)
    greedy = model.generate(ids, max_new_tokens=6)
    assert torch.equal(greedy, zoo.generate(model, ids, 6, temperature=0))
    sampled = model.generate(ids, max_new_tokens=6, do_sample=True, temperature=0.8, top_k=20,
                             seed=7)  # fmt: skip
    again = zoo.generate(model, ids, 6, temperature=0.8, top_k=20,
                         generator=torch.Generator().manual_seed(7))  # fmt: skip
    assert torch.equal(sampled, again) and sampled.shape == (2, 11)
    assert torch.equal(sampled[:, :5], ids)
    assert model.generate(ids).shape == (2, 25)  # transformers' default: 20 new tokens


def test_eos_token_id_ends_a_row_and_stops_when_all_have_ended():
    model = tiny("transformer_lm_tiny")
    ids = prompt(model)
    free = model.generate(ids, max_new_tokens=12)
    eos = int(free[0, 7])  # row 0's third new token: row 0 ends there
    out = model.generate(ids, max_new_tokens=12, eos_token_id=eos)
    assert torch.equal(out[0, :8], free[0, :8])
    assert (out[0, 8:] == eos).all()  # an ended row repeats its EOS
    ended_at = [
        next((t for t in range(5, free.shape[1]) if free[r, t] == eos), None) for r in range(2)
    ]
    if None not in ended_at:  # both rows end: decoding stops at the later end
        assert out.shape[1] == max(ended_at) + 1
    else:
        assert out.shape[1] == free.shape[1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_beams": 4}, "num_beams=4 is for encoder-decoder models"),
        ({"length_penalty": 1.0}, "length_penalty=1.0 is for encoder-decoder models"),
        ({"do_sample": True, "temperature": 0.0}, "temperature=0.0 must be > 0 to sample"),
        ({"max_new_tokens": 0}, "max_new_tokens=0 adds nothing"),
    ],
)
def test_what_a_language_model_does_not_take_is_a_one_line_error(kwargs, message):
    model = tiny("transformer_lm_tiny")
    with pytest.raises(ConfigError, match=message):
        model.generate(prompt(model), **kwargs)


def test_input_ids_must_be_token_ids():
    model = tiny("transformer_lm_tiny")
    with pytest.raises(ConfigError, match="is not token ids"):
        model.generate(prompt(model).float())


@pytest.mark.parametrize("name", TRANSLATORS)
def test_generate_on_a_translator_is_its_greedy_and_beam_search(name):
    model, src = tiny(name, vocab_size=64), sources()
    kw = dict(bos_id=BOS, eos_id=EOS, max_len_a=0.0, max_len_b=9)
    greedy = model.generate(src, max_new_tokens=9, num_beams=1)
    beams = model.generate(src, max_new_tokens=9, num_beams=3, length_penalty=1.0)
    expected = {
        "greedy": greedy_search(model, src, **kw),
        "beam": [b[0].tokens for b in beam_search(model, src, beam_size=3, alpha=1.0, **kw)],
    }
    for out, want in ((greedy, expected["greedy"]), (beams, expected["beam"])):
        assert (out[:, 0] == BOS).all() and out.shape[0] == 3
        for row, tokens in zip(out.tolist(), want, strict=True):
            assert row[1 : 1 + len(tokens)] == list(tokens)  # ends with EOS
            assert set(row[1 + len(tokens) :]) <= {PAD}  # then padding
    # defaults: the paper's decoding (beam 4, alpha 0.6, source + 50) for an unpublished model
    paper = [b[0].tokens for b in beam_search(model, src, bos_id=BOS, eos_id=EOS)]
    rows = model.generate(src).tolist()
    assert [r[1 : 1 + len(t)] for r, t in zip(rows, paper, strict=True)] == [list(t) for t in paper]
    with pytest.raises(ConfigError, match="do_sample=True is not implemented for encoder-decoder"):
        model.generate(src, do_sample=True)


def test_device_and_dtype_are_the_parameters():
    model = tiny("transformer_lm_tiny")
    assert model.device == torch.device("cpu") and model.dtype == torch.float32
    assert model.to(torch.float64).dtype == torch.float64


def test_push_to_hub_uploads_what_from_pretrained_loads(hub, tmp_path):
    model = tiny("transformer_tiny", vocab_size=64)
    sha = model.push_to_hub("someone/my-translator")
    files = hub.repos["someone/my-translator"].commits[sha]
    assert set(files) - {".gitattributes"} == {
        "config.json",
        "model.safetensors",
        "manifest.json",
        "README.md",
    }
    card = files["README.md"].data.decode()
    assert "library_name: attention-zoo" in card and "seq2seq" in card
    loaded = zoo.from_pretrained("someone/my-translator")
    folder = model.save_pretrained(tmp_path / "saved")
    assert_same_weights(loaded, folder)
    with pytest.raises(ConfigError, match="is not a valid repo id"):
        model.push_to_hub("bad--id")


def test_push_to_hub_without_a_token_says_so(hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(HubError, match="refused the push.*401"):
        tiny("transformer_lm_tiny").push_to_hub("someone/lm", token=False)


def test_create_model_pretrained_loads_the_presets_published_weights(published):
    model = zoo.create_model("transformer_lm_tiny", pretrained=True)
    assert model.training  # as a new model is
    assert_same_weights(model, published)
    with pytest.raises(ConfigError, match="takes no config overrides"):
        zoo.create_model("transformer_lm_tiny", pretrained=True, dropout=0.1)
    with pytest.raises(UnknownModelError, match="no published checkpoint.*transformer_lm_tiny"):
        zoo.create_model("transformer_tiny", pretrained=True)
