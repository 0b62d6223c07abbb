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


def test_generate_takes_a_tokenizers_output_and_transformers_length_keywords():
    model = tiny("transformer_lm_tiny")
    a, b = torch.randint(1, 256, (7,)), torch.randint(1, 256, (4,))
    batch = {"input_ids": torch.stack([a, torch.cat([torch.zeros(3, dtype=torch.long), b])]),
             "attention_mask": torch.tensor([[1] * 7, [0] * 3 + [1] * 4])}  # fmt: skip
    out = model.generate(**batch, max_length=15)  # the prompt's 7 positions count
    assert out.shape == (2, 15)
    assert torch.equal(out[1, 3:], model.generate(b[None], max_new_tokens=8)[0])
    with pytest.raises(ConfigError, match="max_length=7 leaves no room"):
        model.generate(**batch, max_length=7)
    with pytest.raises(ConfigError, match="not a keyword"):
        model.generate(a[None], output_scores=True)


def test_num_return_sequences_samples_each_prompt_n_times():
    model = tiny("transformer_lm_tiny")
    ids = prompt(model)
    out = model.generate(ids, max_new_tokens=6, do_sample=True, num_return_sequences=3, seed=0)
    assert out.shape == (6, 11) and torch.equal(out[:3, :5], ids[[0, 0, 0]])
    assert len({tuple(r) for r in out[:3, 5:].tolist()}) > 1  # three draws, not one copied
    with pytest.raises(ConfigError, match="needs do_sample=True"):
        model.generate(ids, num_return_sequences=2)


def test_repetition_penalty_is_transformers_processor():
    from transformers import RepetitionPenaltyLogitsProcessor

    from zoo.generation import penalize_repetition

    logits, seq = torch.randn(2, 64), torch.randint(0, 64, (2, 9))
    expected = RepetitionPenaltyLogitsProcessor(1.7)(seq, logits.clone())
    torch.testing.assert_close(penalize_repetition(logits, seq, 1.7), expected)
    model = tiny("transformer_lm_tiny")
    ids = prompt(model)
    plain, penalized = (
        model.generate(ids, max_new_tokens=30, repetition_penalty=p) for p in (1.0, 5.0)
    )
    assert not torch.equal(plain, penalized)
    assert torch.equal(plain, model.generate(ids, max_new_tokens=30))  # 1.0: no penalty


def test_streamer_and_generation_config():
    from transformers import GenerationConfig

    class Streamer:
        def __init__(self):
            self.got = []

        def put(self, ids):
            self.got.append(ids.tolist())

        def end(self):
            self.got.append("end")

    model = tiny("transformer_lm_tiny")
    ids = prompt(model, batch=1)
    streamer = Streamer()
    out = model.generate(ids, max_new_tokens=4, streamer=streamer)
    assert streamer.got == [ids.tolist(), *([t] for t in out[0, 5:].tolist()), "end"]
    config = GenerationConfig(max_new_tokens=9, do_sample=True, top_k=5)
    assert torch.equal(model.generate(ids, generation_config=config, seed=3),
                       model.generate(ids, max_new_tokens=9, do_sample=True, top_k=5, seed=3))  # fmt: skip
    assert model.generate(ids, generation_config=config, max_new_tokens=2).shape == (1, 7)
    with pytest.raises(ConfigError, match="return_dict_in_generate"):
        model.generate(ids, generation_config=GenerationConfig(return_dict_in_generate=True))


def test_pad_token_id_fills_a_row_after_its_eos():
    model = tiny("transformer_lm_tiny")
    ids = prompt(model)
    free = model.generate(ids, max_new_tokens=12)
    eos = int(free[0, 7])
    out = model.generate(ids, max_new_tokens=12, eos_token_id=eos, pad_token_id=3)
    first = 5 + next(t for t in range(8) if out[0, 5 + t] == eos)  # row 0's first EOS
    assert out[0, first] == eos and (out[0, first + 1 :] == 3).all()


@pytest.mark.parametrize("name", TRANSLATORS)
def test_translators_return_the_n_best_beams(name):
    model = tiny(name)
    src = sources()
    best = beam_search(model, src, beam_size=4, alpha=0.6, bos_id=BOS, eos_id=EOS)
    out = model.generate(src, num_beams=4, length_penalty=0.6, num_return_sequences=2)
    assert out.shape[0] == 6
    for row, hyp in zip(out, [h for hyps in best for h in hyps[:2]], strict=True):
        assert row[: len(hyp.tokens) + 1].tolist() == [BOS, *hyp.tokens]
    with pytest.raises(ConfigError, match="at most num_beams"):
        model.generate(src, num_beams=2, num_return_sequences=3)
    with pytest.raises(ConfigError, match="disagrees with the padding"):
        model.generate(src, attention_mask=torch.ones_like(src))
