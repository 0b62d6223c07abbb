"""transformers loads zoo checkpoints (zoo.integrations.transformers): Auto classes without
trust_remote_code taking every loading keyword of the installed transformers, standard config
names, logits equal to the zoo's exactly, generation giving zoo.generate's tokens for one
checkpoint of each family, the text-generation pipeline on a folder (batched, left-padded), the
byte tokenizer's NUL eos/pad, saving and pushing the tied weights, and one-line errors. The cache
itself: tests/test_transformers_cache.py; Trainer: tests/test_transformers_trainer.py."""

from __future__ import annotations

import shutil

import pytest
import torch
from transformers import (  # the transformers extra, which `make setup` installs
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GenerationConfig,
    TextStreamer,
    pipeline,
)

import zoo
import zoo.integrations.transformers as zt
from zoo.errors import ConfigError
from zoo.integrations.transformers_loading import KEYWORDS, transformers_keywords

LANGUAGE_MODELS = [  # one published checkpoint per language-model family
    "transformer_lm_small.pg19mini",
    "sparse_transformer_strided_8k.pg19mini",
    "routing_transformer_small_top2.pg19mini",
]
ENCODER_DECODERS = ["transformer_small.multi30k", "lstm_attention_small.multi30k"]
PROMPT = b"It was the best of times, it was the"
SOURCE = "Ein Hund läuft über eine Wiese."


@pytest.fixture(scope="module")
def lm_folder():
    return zt.checkpoint_folder(LANGUAGE_MODELS[0])


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_causal_lm_equals_the_zoo_model(name):
    folder = zt.checkpoint_folder(name)
    config = AutoConfig.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    ref = zoo.from_pretrained(name)
    assert config.model_type == ref.model_type and not model.training
    c = ref.config
    assert (config.max_position_embeddings, config.vocab_size) == (c.max_seq_len, c.vocab_size)
    assert (config.hidden_size, config.num_hidden_layers) == (c.d_model, c.n_layers)
    assert (config.num_attention_heads, config.intermediate_size) == (c.n_heads, c.d_ff)
    x = torch.tensor([list(PROMPT)])
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref(x).logits)
    out = model.generate(x, max_new_tokens=24, do_sample=False)  # with the zoo cache
    assert torch.equal(out, zoo.generate(ref, x, 24, temperature=0))
    if name == LANGUAGE_MODELS[0]:  # without the cache: every family in test_transformers_cache
        slow = model.generate(x, max_new_tokens=24, do_sample=False, use_cache=False)
        assert torch.equal(slow, out)


def test_every_loading_keyword_of_transformers_is_classified():
    """A transformers release that passes or documents a new from_pretrained keyword fails here
    (add it to KEYWORDS with what the zoo does with it), not in a user's hands."""
    found = transformers_keywords()  # read from the installed transformers
    assert {"proxies", "subfolder", "cache_dir", "dtype", "device_map", "_from_auto"} <= set(found)
    new = sorted(set(found) - set(KEYWORDS))
    assert not new, f"transformers' loading keywords the zoo does not classify yet: {new}"
    assert {how for how, _ in KEYWORDS.values()} == {"zoo", "wrapper", "ignored", "default"}


def test_from_pretrained_takes_each_keyword_at_its_transformers_default(lm_folder):
    defaults = {k: v for k, v in transformers_keywords().items() if k != "config"}
    model = zt.ZooForCausalLM.from_pretrained(lm_folder, **defaults)
    assert model.dtype == torch.float32


def test_from_pretrained_honours_dtype_device_map_subfolder_and_overrides(lm_folder, tmp_path):
    assert AutoModelForCausalLM.from_pretrained(lm_folder, dtype="auto").dtype == torch.float32
    half = AutoModelForCausalLM.from_pretrained(lm_folder, dtype=torch.bfloat16, device_map="cpu")
    assert half.dtype == half.zoo_model.dtype == torch.bfloat16
    assert AutoModelForCausalLM.from_pretrained(lm_folder, torch_dtype="float16").dtype == (
        torch.float16
    )
    shutil.copytree(lm_folder, tmp_path / "inner")
    model, info = AutoModelForCausalLM.from_pretrained(
        tmp_path, subfolder="inner", output_loading_info=True, low_cpu_mem_usage=True,
        trust_remote_code=False, generation_config=GenerationConfig(max_new_tokens=5),
    )  # fmt: skip
    assert info["missing_keys"] == info["unexpected_keys"] == set()
    assert model.generation_config.max_new_tokens == 5
    tuned = AutoModelForCausalLM.from_pretrained(lm_folder, dropout=0.25)  # a zoo config field
    assert tuned.zoo_model.config.dropout == 0.25


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"foo": 1}, r"unsupported arguments \['foo'\]"),
        ({"attn_implementation": "sdpa"}, "attn_implementation='sdpa' is not supported: a zoo"),
        ({"quantization_config": {"bits": 4}}, "quantization_config=.* float dtype"),
        ({"proxies": {"https": "http://proxy"}}, "proxies=.* HTTPS_PROXY"),
        ({"use_safetensors": False}, "safetensors only"),
    ],
)
def test_a_keyword_the_zoo_cannot_honour_is_one_line(lm_folder, kwargs, message):
    with pytest.raises(ConfigError, match=message) as err:
        AutoModelForCausalLM.from_pretrained(lm_folder, **kwargs)
    assert "\n" not in str(err.value)


def test_a_subfolder_must_be_a_folder(lm_folder):
    # (through the Auto classes AutoConfig looks first, with transformers' own error)
    with pytest.raises(ConfigError, match="subfolder 'nowhere' is not a folder"):
        zt.ZooForCausalLM.from_pretrained(lm_folder, subfolder="nowhere")
    with pytest.raises(ConfigError, match="subfolder='x' needs a local folder"):
        zt.ZooForCausalLM.from_pretrained("someone/lm", subfolder="x")


def test_the_pipeline_loads_a_folder_and_pads_a_batch_on_the_left(lm_folder):
    ref = zoo.from_pretrained(LANGUAGE_MODELS[0])
    prompts = [PROMPT.decode(), "Call me"]
    generator = pipeline("text-generation", model=str(lm_folder))
    assert generator.tokenizer.padding_side == "left" and generator.tokenizer.pad_token_id == 0
    answers = generator(prompts, batch_size=2, max_new_tokens=30, do_sample=False)
    for prompt, (answer,) in zip(prompts, answers, strict=True):
        alone = zoo.generate(ref, torch.tensor([list(prompt.encode())]), 30, temperature=0)
        assert answer["generated_text"] == bytes(alone[0].tolist()).decode()


def test_streaming_gives_the_zoo_bytes(lm_folder, capsys):
    tokenizer = AutoTokenizer.from_pretrained(lm_folder)
    model = AutoModelForCausalLM.from_pretrained(lm_folder)
    expected = zoo.from_pretrained(LANGUAGE_MODELS[0]).generate(
        torch.tensor([list(PROMPT)]), max_new_tokens=30
    )
    model.generate(torch.tensor([list(PROMPT)]), max_new_tokens=30,
                   streamer=TextStreamer(tokenizer))  # fmt: skip
    assert capsys.readouterr().out.strip() == bytes(expected[0].tolist()).decode().strip()


def test_the_byte_tokenizer_has_nul_as_eos_and_pad(lm_folder):
    tokenizer = AutoTokenizer.from_pretrained(lm_folder)
    assert tokenizer("héllo").input_ids == list("héllo".encode())  # id = UTF-8 byte, no specials
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token_id) == ("\x00", 0, 0)
    batch = tokenizer(["ab", "abcd"], padding=True)
    assert batch.input_ids[0] == [0, 0, 97, 98] and batch.attention_mask[0] == [0, 0, 1, 1]
    assert tokenizer.decode([104, 0, 105], skip_special_tokens=True) == "hi"
    # the model's generation config has no eos: generate runs to max_new_tokens, as zoo.generate
    model = AutoModelForCausalLM.from_pretrained(lm_folder)
    assert model.generation_config.eos_token_id is None
    x = torch.tensor([list(PROMPT)])
    ref = zoo.from_pretrained(LANGUAGE_MODELS[0])
    for eos in (None, 0):  # both stop at the same place with eos 0 (NUL, never generated here)
        out = model.generate(x, max_new_tokens=40, do_sample=False, eos_token_id=eos)
        assert torch.equal(out, zoo.generate(ref, x, 40, temperature=0, eos_token_id=eos))
        assert out.shape[1] == x.shape[1] + 40


def test_a_published_name_loads_through_the_zoo_class():
    model = zt.ZooForCausalLM.from_pretrained(LANGUAGE_MODELS[0], local_files_only=True)
    assert type(model).__name__ == "ZooForCausalLM" and model.config.vocab_size == 256


@pytest.mark.parametrize("name", ENCODER_DECODERS)
def test_seq2seq_equals_the_zoo_model(name):
    folder = zt.checkpoint_folder(name)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ref = zoo.from_pretrained(name)
    assert model.config.num_hidden_layers == ref.config.n_decoder_layers
    src = torch.tensor([tokenizer(SOURCE).input_ids])
    assert src[0].tolist() == ref.tokenizer.encode(SOURCE).ids
    tgt = torch.tensor([[1, 125, 330, 1401]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=src, decoder_input_ids=tgt).logits, ref(src, tgt).logits)
        labels = torch.tensor([[125, 330, 1401, 2]])  # decoder inputs made from them: BOS first
        assert torch.equal(model(input_ids=src, labels=labels).logits, ref(src, tgt).logits)
    out = model.generate(src, num_beams=1, max_new_tokens=40)
    assert torch.equal(out, ref.generate(src, num_beams=1, max_new_tokens=40))
    assert tokenizer.decode(out[0], skip_special_tokens=True).startswith("A dog")


def test_save_pretrained_writes_what_both_loaders_load(lm_folder, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(lm_folder)
    model.save_pretrained(tmp_path / "saved")
    assert {p.name for p in (tmp_path / "saved").iterdir()} == {
        "config.json", "model.safetensors", "manifest.json"}  # fmt: skip
    x = torch.tensor([list(PROMPT)])
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    plain = zoo.from_pretrained(tmp_path / "saved")
    assert again.zoo_model.lm_head.weight is again.zoo_model.tok_emb.weight  # still tied
    with torch.no_grad():
        assert torch.equal(again(x).logits, model(x).logits)
        assert torch.equal(plain(x).logits, model(x).logits)
    # Trainer's call: the wrapper's own state_dict, or other weights for the same model
    changed = {k: v + 1 if k.endswith("norm_f.bias") else v for k, v in model.state_dict().items()}
    model.save_pretrained(tmp_path / "changed", state_dict=changed, is_main_process=True)
    saved = zoo.from_pretrained(tmp_path / "changed")
    assert torch.equal(saved.norm_f.bias, model.zoo_model.norm_f.bias + 1)
    with pytest.raises(ConfigError, match=r"unsupported arguments \['variant'\]"):
        model.save_pretrained(tmp_path / "never", variant="fp16")
    assert not (tmp_path / "never").exists()  # refused before anything is written


def test_push_to_hub_takes_branch_and_create_pr(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants

    # transformers downloads through huggingface_hub's endpoint, read at its import
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        hub.url + "/{repo_id}/resolve/{revision}/{filename}")  # fmt: skip
    torch.manual_seed(0)
    model = zt.wrap(zoo.create_model("transformer_lm_tiny").eval())
    main = model.push_to_hub("someone/lm")
    dev = model.push_to_hub("someone/lm", branch="dev")
    assert hub.repos["someone/lm"].refs == {"main": main, "dev": dev}
    x = torch.tensor([list(b"a test")])
    loaded = AutoModelForCausalLM.from_pretrained("someone/lm", revision="dev")
    with torch.no_grad():
        assert torch.equal(loaded(x).logits, model(x).logits)
        assert torch.equal(zoo.from_pretrained("someone/lm", revision="dev")(x).logits,
                           model(x).logits)  # fmt: skip
    pr = model.push_to_hub("someone/lm", create_pr=True, commit_message="Propose")
    assert pr.pr_revision == "refs/pr/1" and hub.repos["someone/lm"].refs["main"] == main
    model.save_pretrained(tmp_path / "local", push_to_hub=True, repo_id="someone/other")
    assert "someone/other" in hub.repos


def test_bad_input_is_one_line(lm_folder, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(lm_folder)
    x = torch.tensor([list(PROMPT), list(PROMPT)])
    mask = torch.ones_like(x)
    mask[1, 3:6] = 0  # a hole inside a row
    with pytest.raises(ConfigError, match="is not padded on one side"):
        model(x, attention_mask=mask)
    with pytest.raises(ConfigError, match="not inputs_embeds"):
        model.generate(inputs_embeds=torch.zeros(1, 3, 256), max_new_tokens=2)
    with pytest.raises(ConfigError, match="unsupported positional arguments"):
        zt.ZooForCausalLM.from_pretrained(lm_folder, "extra")
    with pytest.raises(ConfigError, match="not a zoo model"):
        zt.wrap(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="has no tokenizer.json"):
        zt.ZooBPETokenizer.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    ("module", "extra"), [("transformers", "transformers"), ("lm_eval_harness", "lm-eval")]
)
def test_a_missing_extra_is_named_in_one_line(module, extra):
    import subprocess
    import sys

    hidden = "transformers" if module == "transformers" else "lm_eval"
    code = (f"import sys; sys.modules[{hidden!r}] = None\n"
            f"import zoo.integrations.{module}\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1
    assert last.startswith("ModuleNotFoundError: ") and f"attention-zoo[{extra}]" in last
