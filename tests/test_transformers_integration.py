"""transformers loads zoo checkpoints (zoo.integrations.transformers): Auto classes without
trust_remote_code, logits equal to the zoo's exactly, greedy generation giving the same tokens for
one checkpoint of each family, the text-generation pipeline and streaming, and one-line errors."""

from __future__ import annotations

import pytest
import torch
from transformers import (  # the transformers extra, which `make setup` installs
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    TextStreamer,
    pipeline,
)

import zoo
import zoo.integrations.transformers as zt
from zoo.errors import ConfigError

LANGUAGE_MODELS = [  # one published checkpoint per language-model family
    "transformer_lm_small.pg19mini",
    "sparse_transformer_strided_8k.pg19mini",
    "routing_transformer_small_top2.pg19mini",
]
ENCODER_DECODERS = ["transformer_small.multi30k", "lstm_attention_small.multi30k"]
PROMPT = b"It was the best of times, it was the"
SOURCE = "Ein Hund läuft über eine Wiese."


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_causal_lm_equals_the_zoo_model(name):
    folder = zt.checkpoint_folder(name)
    config = AutoConfig.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    ref = zoo.from_pretrained(name)
    assert config.model_type == ref.model_type and not model.training
    assert config.max_position_embeddings == ref.config.max_seq_len
    x = torch.tensor([list(PROMPT)])
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref(x))
    out = model.generate(x, max_new_tokens=24, do_sample=False)
    assert torch.equal(out, ref.generate(x, max_new_tokens=24))


def test_tokenizer_pipeline_and_streaming_give_the_zoo_bytes(capsys):
    name = LANGUAGE_MODELS[0]
    folder = zt.checkpoint_folder(name)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer("héllo").input_ids == list("héllo".encode())  # id = UTF-8 byte
    model = AutoModelForCausalLM.from_pretrained(folder)
    expected = zoo.from_pretrained(name).generate(torch.tensor([list(PROMPT)]), max_new_tokens=30)
    text = bytes(expected[0].tolist()).decode()
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    (answer,) = generator(PROMPT.decode(), max_new_tokens=30, do_sample=False)
    assert answer["generated_text"] == text
    model.generate(torch.tensor([list(PROMPT)]), max_new_tokens=30,
                   streamer=TextStreamer(tokenizer))  # fmt: skip
    assert capsys.readouterr().out.strip() == text.strip()


def test_a_published_name_loads_through_the_zoo_class():
    model = zt.ZooForCausalLM.from_pretrained(LANGUAGE_MODELS[0], local_files_only=True)
    assert type(model).__name__ == "ZooForCausalLM" and model.config.vocab_size == 256


@pytest.mark.parametrize("name", ENCODER_DECODERS)
def test_seq2seq_equals_the_zoo_model(name):
    folder = zt.checkpoint_folder(name)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ref = zoo.from_pretrained(name)
    src = torch.tensor([tokenizer(SOURCE).input_ids])
    assert src[0].tolist() == ref.tokenizer.encode(SOURCE).ids
    tgt = torch.tensor([[1, 125, 330, 1401]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=src, decoder_input_ids=tgt).logits, ref(src, tgt))
    out = model.generate(src, num_beams=1, max_new_tokens=40)
    assert torch.equal(out, ref.generate(src, num_beams=1, max_new_tokens=40))
    assert tokenizer.decode(out[0], skip_special_tokens=True).startswith("A dog")


def test_bad_input_is_one_line(tmp_path):
    folder = zt.checkpoint_folder(LANGUAGE_MODELS[0])
    model = AutoModelForCausalLM.from_pretrained(folder)
    x = torch.tensor([list(PROMPT), list(PROMPT)])
    mask = torch.ones_like(x)
    mask[1, :3] = 0
    with pytest.raises(ConfigError, match="take no padding"):
        model(x, attention_mask=mask)
    with pytest.raises(ConfigError, match="unsupported arguments"):
        AutoModelForCausalLM.from_pretrained(folder, low_cpu_mem_usage=True, attn_implementation="x")
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
