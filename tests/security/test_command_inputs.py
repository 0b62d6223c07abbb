"""Issue 77, item 6: the numbers and names a user types into `zoo generate`, `sample`, `translate`,
`average`, `evaluate` and `verify`, and the Python functions behind them. Each bad input is a
one-line error (exit status 2, ``<prog>: error: ...`` on stderr, no traceback; in Python a
ZooError whose message has no newline) or a documented behaviour: never a traceback, a hang, or
silently uniform output."""

import math
import os
import shutil

import pytest
import torch
from fakes import run_zoo

import zoo
from zoo.errors import ConfigError, SequenceTooLongError, ZooError

TINY_LM_CONTEXT = 128  # transformer_lm_tiny's max_seq_len


def assert_one_line_error(code: int, err: str, prog: str, message: str) -> None:
    assert "Traceback" not in err, err
    assert code == 2, (code, err)
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"{prog}: error: "), err
    assert message in err, err


def assert_one_line_exception(exc: BaseException, message: str) -> None:
    assert isinstance(exc, ZooError), type(exc)
    assert "\n" not in str(exc) and message in str(exc), str(exc)


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A tiny byte-level language model saved as a folder (what --checkpoint takes)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("lm") / "tiny"
    zoo.create_model("transformer_lm_tiny").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lm_model(lm):
    return zoo.from_pretrained(lm).eval()


@pytest.fixture
def little_memory(monkeypatch):
    """The device has 1 GiB free, whatever this machine has: the memory checks are deterministic."""
    monkeypatch.setattr("zoo.config.available_memory", lambda device="cpu": 2**30)


# --- zoo generate / zoo.generate ------------------------------------------------------------------
TEMPERATURE = "use a number from 0 to 100"
TOP_P = "use a number in (0, 1]"
SEED = "use a whole number from 0 to 2**64 - 1"
TOO_MANY = "one call generates"

BAD_GENERATE_FLAGS = [
    (["--temperature", "nan"], "temperature (--temperature) is nan: " + TEMPERATURE),
    (["--temperature", "inf"], "temperature (--temperature) is inf: " + TEMPERATURE),
    (["--temperature=-inf"], "temperature (--temperature) is -inf: " + TEMPERATURE),
    (["--temperature", "-1"], "temperature (--temperature) is -1.0: " + TEMPERATURE),
    (["--temperature", "1e300"], "temperature (--temperature) is 1e+300: " + TEMPERATURE),
    (["--top-p", "nan"], "top_p (--top-p) is nan: " + TOP_P),
    (["--top-p", "0"], "top_p (--top-p) is 0.0: " + TOP_P),
    (["--top-p", "1.5"], "top_p (--top-p) is 1.5: " + TOP_P),
    (["--top-p=-1e-45"], "top_p (--top-p) is -1e-45: " + TOP_P),
    (["--top-k", "0"], "top_k (--top-k) is 0: use a whole number >= 1"),
    (["--top-k", "-5"], "top_k (--top-k) is -5: use a whole number >= 1"),
    (["--seed", "-1"], "seed (--seed) is -1: " + SEED),
    (["--seed", str(2**64)], f"seed (--seed) is {2**64}: " + SEED),
    (["--max-new-tokens", "-1"], "--max-new-tokens >= 0, got 1 and -1"),
    (["--num-samples", "0"], "--num-samples must be >= 1"),
    (["--num-samples", "-1"], "--num-samples must be >= 1"),
    (["--max-new-tokens", str(10**20)], TOO_MANY),
    (["--num-samples", str(10**11)], TOO_MANY),
    (["--num-samples", "6000000", "--max-new-tokens", "1"], TOO_MANY),
    (["--prompt", "x" * (TINY_LM_CONTEXT + 1)], "pass truncate_prompt=True (--truncate-prompt)"),
    (["--device", "garbage"], "--device 'garbage' is not a device"),
]


@pytest.mark.parametrize("flags, message", BAD_GENERATE_FLAGS, ids=lambda v: str(v)[:40])
def test_bad_generate_input_is_a_one_line_error(capsys, lm, flags, message):
    code, out, err = run_zoo(capsys, "generate", "--checkpoint", str(lm),
                             "--max-new-tokens", "2", *flags)  # fmt: skip
    assert_one_line_error(code, err, "zoo generate", message)
    assert out == ""  # nothing was generated


def test_more_rows_than_memory_is_a_one_line_error_before_anything_is_allocated(
    capsys, lm, little_memory
):
    """1,000,000 rows of 2 tokens are under the token cap, but their key/value caches are not
    under the device's free memory: refused with the estimate, before the prompt is copied."""
    code, _, err = run_zoo(capsys, "generate", "--checkpoint", str(lm), "--num-samples",
                           "1000000", "--max-new-tokens", "1")  # fmt: skip
    assert_one_line_error(code, err, "zoo generate", "decoding 1,000,000 sequences at once")
    assert "GiB available" in err and "--num-samples" in err


BAD_GENERATE_KWARGS = [
    ({"temperature": math.nan}, ConfigError, "temperature (--temperature) is nan"),
    ({"temperature": math.inf}, ConfigError, "temperature (--temperature) is inf"),
    ({"temperature": -math.inf}, ConfigError, "temperature (--temperature) is -inf"),
    ({"temperature": -0.5}, ConfigError, "temperature (--temperature) is -0.5"),
    ({"temperature": 1e300}, ConfigError, "temperature (--temperature) is 1e+300"),
    ({"top_p": math.nan}, ConfigError, "top_p (--top-p) is nan"),
    ({"top_p": 0.0}, ConfigError, "top_p (--top-p) is 0.0"),
    ({"top_p": 1.0000001}, ConfigError, "top_p (--top-p) is 1.0000001"),
    ({"top_k": 0}, ConfigError, "top_k (--top-k) is 0"),
    ({"top_k": 2.5}, ConfigError, "top_k (--top-k) is 2.5"),
    ({"max_new_tokens": -1}, ConfigError, "max_new_tokens (--max-new-tokens) is -1"),
    ({"max_new_tokens": 1.5}, ConfigError, "max_new_tokens (--max-new-tokens) is 1.5"),
    ({"max_new_tokens": 10**20}, ConfigError, TOO_MANY),
    ({"prompt_len": TINY_LM_CONTEXT + 1}, SequenceTooLongError, "--truncate-prompt"),
    ({"batch": 6_000_000}, ConfigError, TOO_MANY),
]


@pytest.mark.parametrize("kwargs, error, message", BAD_GENERATE_KWARGS, ids=str)
def test_bad_generate_arguments_raise_one_line_zoo_errors(lm_model, kwargs, error, message):
    from zoo.generation import generate

    kwargs = dict(kwargs)
    batch, length = kwargs.pop("batch", 1), kwargs.pop("prompt_len", 3)
    max_new_tokens = kwargs.pop("max_new_tokens", 2)
    # a huge batch is refused from its shape alone: an expanded view allocates nothing
    prompt = torch.zeros(1, length, dtype=torch.long).expand(batch, length)
    with pytest.raises(error) as e:
        generate(lm_model, prompt, max_new_tokens, **kwargs)
    assert_one_line_exception(e.value, message)


def test_generation_rows_beyond_memory_raise_before_allocating(lm_model, little_memory):
    from zoo.generation import generate

    prompt = torch.zeros(1, 1, dtype=torch.long).expand(1_000_000, 1)
    with pytest.raises(ConfigError) as e:
        generate(lm_model, prompt, 1)
    assert_one_line_exception(e.value, "decoding 1,000,000 sequences at once needs about")


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5])
def test_generate_like_transformers_refuses_a_seed_torch_cannot_take(lm_model, seed):
    from zoo.hf_generate import generate_like_transformers

    with pytest.raises(ConfigError) as e:
        generate_like_transformers(lm_model, torch.zeros(1, 2, dtype=torch.long), 2,
                                   do_sample=True, seed=seed)  # fmt: skip
    assert_one_line_exception(e.value, f"seed (--seed) is {seed!r}")


def _sample(model, **kwargs):
    from zoo.generation import generate

    prompt = torch.tensor([list(b"It was a")] * 3)
    return generate(model, prompt, 12, generator=torch.Generator().manual_seed(7), **kwargs)


@pytest.mark.parametrize("top_p", [1e-45, 1e-46, 1e-300, 5e-324])
def test_a_top_p_below_float_precision_is_greedy_decoding(lm_model, top_p):
    """Documented in zoo.generate: the most likely token is always kept, so a nucleus smaller than
    it (even one float32 rounds to 0) is that token alone: greedy, not NaN, not uniform."""
    greedy = _sample(lm_model, temperature=0)
    assert torch.equal(_sample(lm_model, top_p=top_p), greedy)


@pytest.mark.parametrize("temperature", [1e-45, 1e-300])
def test_a_temperature_too_small_to_divide_by_is_greedy_decoding(lm_model, temperature):
    """logits / 1e-45 overflow to inf (and 1e-300 is float32's 0), and inf - inf is NaN in the
    softmax: documented, a temperature below MIN_TEMPERATURE is its limit, greedy decoding."""
    greedy = _sample(lm_model, temperature=0)
    assert torch.equal(_sample(lm_model, temperature=temperature), greedy)


def test_a_top_k_above_the_vocabulary_keeps_every_token(lm_model):
    """Documented: a top_k at or above vocab_size (256) is no filter at all."""
    assert torch.equal(_sample(lm_model, top_k=10**9), _sample(lm_model))
    assert torch.equal(_sample(lm_model, top_k=256), _sample(lm_model))


def test_the_largest_temperature_still_samples(lm_model):
    out = _sample(lm_model, temperature=100.0)
    assert out.shape == (3, 8 + 12)


# --- zoo sample / sample_images -------------------------------------------------------------------
@pytest.fixture(scope="module")
def image_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("img") / "tiny"  # 4x4x3 images
    zoo.create_model("image_transformer_tiny").save_pretrained(folder)
    return folder


BAD_SAMPLE_FLAGS = [
    (["--temperature", "nan"], "temperature (--temperature) is nan: " + TEMPERATURE),
    (["--temperature", "inf"], "temperature (--temperature) is inf: " + TEMPERATURE),
    (["--top-k", "0"], "top_k (--top-k) is 0"),
    (["--seed", "-1"], "seed (--seed) is -1: " + SEED),
    (["--seed", str(10**30)], f"seed (--seed) is {10**30}: " + SEED),
    (["--scale", "100000000"], "Pillow opens: use a smaller --scale"),
    (["--num-samples", str(10**11)], "Pillow opens"),
    (["--num-samples", "1000000", "--scale", "1"], TOO_MANY),
]


@pytest.mark.parametrize("flags, message", BAD_SAMPLE_FLAGS, ids=lambda v: str(v)[:40])
def test_bad_sample_input_is_a_one_line_error(capsys, tmp_path, image_model, flags, message):
    out = tmp_path / "s.png"
    code, _, err = run_zoo(capsys, "sample", "--checkpoint", str(image_model), "--out", str(out),
                           "--completions", "0", "--num-samples", "1", *flags)  # fmt: skip
    assert_one_line_error(code, err, "zoo sample", message)
    assert not out.exists()


def test_sample_images_checks_before_it_allocates(image_model):
    from zoo.generation import sample_images

    model = zoo.from_pretrained(image_model).eval()
    for kwargs, message in (({"temperature": math.nan}, "temperature (--temperature) is nan"),
                            ({"n": 10**11}, TOO_MANY), ({"n": 0}, "n is 0")):  # fmt: skip
        kwargs = {"n": 1} | kwargs
        with pytest.raises(ConfigError) as e:
            sample_images(model, (4, 4, 3), **kwargs)
        assert_one_line_exception(e.value, message)


# --- zoo translate / zoo.translate ----------------------------------------------------------------
@pytest.fixture(scope="module")
def translator(tokenizer):
    torch.manual_seed(0)
    model = zoo.create_model("transformer_tiny", vocab_size=tokenizer.get_vocab_size()).eval()
    model.tokenizer = tokenizer
    return model


@pytest.fixture(scope="module")
def translator_folder(translator, tmp_path_factory):
    folder = tmp_path_factory.mktemp("translator") / "m"
    translator.save_pretrained(folder)
    return folder


def _long_sentence(model) -> str:
    return " ".join(["Hund"] * (model.config.max_seq_len + 1))


BAD_TRANSLATE_FLAGS = [
    (["--beam-size", "0"], "beam_size (--beam-size) is 0"),
    (["--alpha", "nan"], "alpha (--alpha) is nan"),
    (["--alpha=-inf"], "alpha (--alpha) is -inf"),
    (["--max-len-a", "inf"], "max_len_a (--max-len-a) is inf"),
    (["--batch-size", "0"], "batch_size (--batch-size) is 0"),
    (["--beam-size", str(10**27)], "decoding 1,000,000,000,000,000,000,000,000,000 sequences"),
    (["--device", "garbage"], "--device 'garbage' is not a device"),
]


@pytest.mark.parametrize("flags, message", BAD_TRANSLATE_FLAGS, ids=lambda v: str(v)[:40])
def test_bad_translate_input_is_a_one_line_error(
    capsys, tmp_path, translator_folder, flags, message
):
    source = tmp_path / "in.txt"
    source.write_text("ein Hund\n")
    code, out, err = run_zoo(capsys, "translate", "--checkpoint", str(translator_folder),
                             "--input", str(source), *flags)  # fmt: skip
    assert_one_line_error(code, err, "zoo translate", message)
    assert out == ""


def test_a_sentence_longer_than_the_context_is_one_line(capsys, tmp_path, translator,
                                                        translator_folder):  # fmt: skip
    source = tmp_path / "in.txt"
    source.write_text(f"ein Hund\n{_long_sentence(translator)}\n")
    code, out, err = run_zoo(capsys, "translate", "--checkpoint", str(translator_folder),
                             "--input", str(source))  # fmt: skip
    limit = translator.config.max_seq_len
    assert_one_line_error(code, err, "zoo translate", f"sentence 1 has {limit + 1} tokens")
    assert "split it into shorter sentences" in err and out == ""
    with pytest.raises(SequenceTooLongError) as e:
        zoo.translate(translator, ["ein Hund", _long_sentence(translator)])
    assert_one_line_exception(e.value, f"takes at most max_seq_len={limit}")
    from zoo.beam_search import translate_with_attention

    with pytest.raises(SequenceTooLongError) as e:
        translate_with_attention(translator, _long_sentence(translator))
    assert_one_line_exception(e.value, f"takes at most max_seq_len={limit}")


@pytest.mark.parametrize("flags", [["--max-len-b", str(10**23)], ["--max-len-a", "1e300"]])
def test_a_huge_max_length_is_the_models_positions(capsys, tmp_path, translator_folder, flags):
    """Documented: the output length is at most max_seq_len, however large a and b are (it
    overflowed to a traceback, or to 1-token outputs)."""
    source = tmp_path / "in.txt"
    source.write_text("ein Hund\n")
    code, out, err = run_zoo(capsys, "translate", "--checkpoint", str(translator_folder),
                             "--input", str(source), "--decoding", "greedy", "--max-len-b",
                             "4")  # fmt: skip
    assert code == 0, err
    code, huge, err = run_zoo(capsys, "translate", "--checkpoint", str(translator_folder),
                              "--input", str(source), "--decoding", "greedy", *flags)  # fmt: skip
    assert code == 0 and "Traceback" not in err, err
    assert len(huge) >= len(out)  # not cut to one token


def test_beam_search_checks_its_settings_and_memory(translator, little_memory):
    from zoo.beam_search import beam_search, greedy_search

    src = torch.tensor([[5, 6, 7]])
    for kwargs, message in (({"beam_size": 0}, "beam_size (--beam-size) is 0"),
                            ({"alpha": math.nan}, "alpha (--alpha) is nan"),
                            ({"beam_size": 10**7}, "decoding 10,000,000 sequences")):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            beam_search(translator, src, bos_id=1, eos_id=2, **kwargs)
        assert_one_line_exception(e.value, message)
    with pytest.raises(ConfigError) as e:
        greedy_search(translator, src.expand(10**7, 3), bos_id=1, eos_id=2)
    assert_one_line_exception(e.value, "decoding 10,000,000 sequences")


# --- zoo average / zoo.averaging ------------------------------------------------------------------
@pytest.fixture
def run_dir(tmp_path):
    import lightning

    from zoo.tasks import CausalLM

    folder = tmp_path / "every100"
    folder.mkdir()
    for step in (100, 200, 300):
        torch.manual_seed(step)
        task = CausalLM(model="transformer_lm_tiny")
        torch.save({"global_step": step, "state_dict": task.state_dict(),
                    "hyper_parameters": dict(task.hparams),
                    "pytorch-lightning_version": lightning.__version__},
                   folder / f"step{step}.ckpt")  # fmt: skip
    return folder


def _twins(run_dir) -> dict[str, list[str]]:
    """Two names of one checkpoint, spelled each way a user can."""
    first = run_dir / "step100.ckpt"
    os.symlink(first, run_dir.parent / "link.ckpt")
    shutil.copy(first, run_dir.parent / "copy.ckpt")
    return {
        "the same path": [str(first), str(first)],
        "through ./": [str(first), str(run_dir / "." / "step100.ckpt")],
        "through ..": [str(first), str(run_dir / ".." / run_dir.name / "step100.ckpt")],
        "through a symlink": [str(first), str(run_dir.parent / "link.ckpt")],
    }


@pytest.mark.parametrize(
    "spelling", ["the same path", "through ./", "through ..", "through a symlink"]
)
def test_averaging_a_checkpoint_with_itself_is_a_one_line_error(capsys, run_dir, spelling):
    from zoo.averaging import average_checkpoints

    paths = _twins(run_dir)[spelling]
    out = run_dir.parent / "avg.ckpt"
    code, _, err = run_zoo(capsys, "average", *paths, "--out", str(out))
    assert_one_line_error(code, err, "zoo average", "are the same file")
    assert not out.exists()
    with pytest.raises(ConfigError) as e:
        average_checkpoints(paths)
    assert_one_line_exception(e.value, "are the same file")


def test_averaging_a_copy_of_a_checkpoint_is_refused(capsys, run_dir):
    from zoo.averaging import average_checkpoints

    _twins(run_dir)
    paths = [str(run_dir / "step100.ckpt"), str(run_dir.parent / "copy.ckpt")]
    code, _, err = run_zoo(capsys, "average", *paths, "--out", str(run_dir.parent / "a.ckpt"))
    assert_one_line_error(code, err, "zoo average", "are both from step 100")
    with pytest.raises(ConfigError) as e:
        average_checkpoints(paths)
    assert_one_line_exception(e.value, "would count double")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--last", "0"], "--last is 0: average the last 1 or more"),
        (["--last=-3"], "--last is -3: average the last 1 or more"),
    ],
)
def test_bad_last_is_a_one_line_error(capsys, run_dir, flags, message):
    code, _, err = run_zoo(capsys, "average", str(run_dir), *flags, "--out",
                           str(run_dir.parent / "a.ckpt"))  # fmt: skip
    assert_one_line_error(code, err, "zoo average", message)


def test_last_with_files_or_two_directories_is_a_one_line_error(capsys, run_dir):
    files = [str(run_dir / "step100.ckpt"), str(run_dir / "step200.ckpt")]
    out = str(run_dir.parent / "a.ckpt")
    code, _, err = run_zoo(capsys, "average", *files, "--last", "2", "--out", out)
    assert_one_line_error(code, err, "zoo average", "--last picks from a directory")
    code, _, err = run_zoo(capsys, "average", str(run_dir), str(run_dir), "--out", out)
    assert_one_line_error(code, err, "zoo average", "is a directory: give one directory")


@pytest.mark.parametrize("n", [0, -3])
def test_last_checkpoints_refuses_fewer_than_one(run_dir, n):
    from zoo.averaging import last_checkpoints

    with pytest.raises(ConfigError) as e:
        last_checkpoints(run_dir, n)
    assert_one_line_exception(e.value, f"n (--last) is {n}")


def test_averaging_distinct_checkpoints_still_works(capsys, run_dir):
    out = run_dir.parent / "a.ckpt"
    code, stdout, err = run_zoo(capsys, "average", str(run_dir), "--last", "2", "--out", str(out))
    assert code == 0, err
    assert "averaged 2 checkpoints (step200.ckpt, step300.ckpt)" in stdout and out.is_file()


# --- zoo evaluate / zoo verify: --tolerance, --seed, --device -------------------------------------
LM = "transformer_lm_small.pg19mini"  # a published name; the flags are refused before it loads
TOLERANCE = "use a finite number >= 0"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--registered", "--tolerance=-1"], "--tolerance is -1.0: " + TOLERANCE),
        (["--registered", "--tolerance", "nan"], "--tolerance is nan: " + TOLERANCE),
        (["--registered", "--tolerance", "inf"], "--tolerance is inf: " + TOLERANCE),
        (["--tolerance", "0.1"], "--tolerance goes with --registered"),
        (["--probe", "copy", "--seed", "-1"], "seed (--seed) is -1: " + SEED),
        (["--probe", "copy", "--seed", str(2**64)], f"seed (--seed) is {2**64}: " + SEED),
    ],
)
def test_bad_evaluate_numbers_are_one_line_errors(capsys, monkeypatch, flags, message):
    def no_loading(*args, **kwargs):
        raise AssertionError("the flags were not checked before the model was loaded")

    monkeypatch.setattr("zoo.commands.evaluate._evaluate", no_loading)
    code, _, err = run_zoo(capsys, "evaluate", LM, *flags)
    assert_one_line_error(code, err, "zoo evaluate", message)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tolerance=-1"], "tolerance (--tolerance) is -1.0: " + TOLERANCE),
        (["--tolerance", "nan"], "tolerance (--tolerance) is nan: " + TOLERANCE),
        (["--device", "garbage"], "device (--device) 'garbage' is not a device"),
    ],
)
def test_bad_verify_input_is_a_one_line_error(capsys, monkeypatch, flags, message):
    def no_loading(*args, **kwargs):
        raise AssertionError("the arguments were not checked before the model was loaded")

    monkeypatch.setattr("zoo.pretrained.from_pretrained", no_loading)
    code, out, err = run_zoo(capsys, "verify", LM, *flags)
    assert_one_line_error(code, err, "zoo verify", message)
    assert "DRIFT" not in out  # not a verdict that no model (or every model) passes


@pytest.mark.parametrize("tolerance", [-1e-9, math.nan, math.inf, -math.inf])
def test_golden_verify_refuses_a_tolerance_nothing_or_everything_passes(tolerance):
    from zoo.golden import verify

    with pytest.raises(ConfigError) as e:
        verify(LM, tolerance=tolerance)
    assert_one_line_exception(e.value, f"tolerance (--tolerance) is {tolerance!r}")
