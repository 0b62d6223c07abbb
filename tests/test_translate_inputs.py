"""`zoo translate` and zoo.translate() on the inputs a user gives: blank lines, decoding settings out
of range, and the default decoding, which both paths resolve the same way."""

import io
import math

import pytest
import test_translate

import zoo
import zoo.beam_search
from zoo.beam_search import translate
from zoo.cli import main
from zoo.errors import ConfigError

model = test_translate.model  # the tiny translator fixture, shared

PUBLISHED = "transformer_small.multi30k"  # shipped in checkpoints/; registered with alpha 1.0


class Untouchable:
    """A stdin that fails the test if anything reads it."""

    def __getattr__(self, name):
        raise AssertionError("stdin was read before the flags were checked")


def test_blank_lines_translate_to_empty_lines_without_the_model(
    model, tmp_path, capsys, monkeypatch
):
    blanks = ["   ", "\t", " \u3000 ", "\xa0", ""]  # the tokenizer gives tokens for all but ""
    assert all(model.tokenizer.encode(b).ids for b in blanks[:-1])
    real = translate(model, ["ein Hund läuft", "Mann"], max_len_b=6)
    lines = ["ein Hund läuft", *blanks, "Mann"]
    out = translate(model, lines, batch_size=2, max_len_b=6)
    assert out == [real[0], "", "", "", "", "", real[1]]  # the input order kept

    model.save_pretrained(tmp_path / "m")
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    main(["translate", "--checkpoint", str(tmp_path / "m"), "--max-len-b", "6"])
    assert capsys.readouterr().out == "".join(line + "\n" for line in out)  # both paths agree
    with pytest.raises(SystemExit) as e:
        main(["translate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0
    assert "whitespace-only line translates to an empty line, without running the" in help_text

    def refuse(*args, **kwargs):
        raise AssertionError("a blank line reached the model")

    monkeypatch.setattr(model, "encode", refuse)
    assert translate(model, blanks) == [""] * len(blanks)
    with pytest.raises(ValueError, match="empty"):
        zoo.beam_search.translate_with_attention(model, " \t ")


BAD_SETTINGS = [  # (keyword arguments, the same as flags, the start of the message)
    ({"beam_size": 0}, ["--beam-size", "0"], "beam_size (--beam-size) is 0: a beam keeps at least"),
    ({"batch_size": 0}, ["--batch-size", "0"], "batch_size (--batch-size) is 0: a batch holds"),
    ({"alpha": -5.0}, ["--alpha", "-5"], "alpha (--alpha) is -5.0: use a finite value >= 0"),
    ({"alpha": math.nan}, ["--alpha", "nan"], "alpha (--alpha) is nan: use a finite value >= 0"),
    ({"max_len_a": -1.0}, ["--max-len-a", "-1"], "max_len_a (--max-len-a) is -1.0: an output"),
    ({"max_len_b": -1}, ["--max-len-b", "-1"], "max_len_b (--max-len-b) is -1: an output"),
    ({"max_len_a": 0.0, "max_len_b": 0}, ["--max-len-a", "0", "--max-len-b", "0"],
     "max_len_a (--max-len-a) and max_len_b (--max-len-b) are both 0"),
]  # fmt: skip


def test_out_of_range_settings_are_one_line_errors_in_python_and_the_cli(
    model, tmp_path, capsys, monkeypatch
):
    model.save_pretrained(tmp_path / "m")
    monkeypatch.setattr("sys.stdin", Untouchable())  # the flags are checked first
    for kwargs, flags, message in BAD_SETTINGS:
        with pytest.raises(ConfigError) as python:
            translate(model, ["ein Hund"], **kwargs)
        assert str(python.value).startswith(message), str(python.value)
        with pytest.raises(SystemExit) as e:
            main(["translate", "--checkpoint", str(tmp_path / "m"), *flags])
        assert e.value.code == 2
        assert capsys.readouterr().err == f"zoo translate: error: {python.value}\n"  # one line
    with pytest.raises(ConfigError, match="beam_size"):
        zoo.beam_search.translate_with_attention(model, "ein Hund", beam_size=0)


def test_python_and_the_cli_default_to_the_published_checkpoints_decoding(
    model, monkeypatch, capsys
):
    from zoo.beam_search import PAPER_DECODING, default_decoding

    assert zoo.from_pretrained(PUBLISHED).published_name == PUBLISHED  # recorded at load time
    registered = default_decoding(PUBLISHED)
    assert registered["alpha"] != PAPER_DECODING["alpha"]
    keys = {"search": "decoding", "beam_size": "beam_size", "alpha": "alpha",
            "max_len_a": "max_len_a", "max_len_b": "max_len_b"}  # fmt: skip
    seen = []

    def recording(model, src, **kwargs):  # what the decoder is asked for, not its (slow) answer
        seen.append({k: kwargs[k] for k in keys.values()})
        return [[5]] * len(src)

    monkeypatch.setattr(zoo.beam_search, "translate_ids", recording)
    model.published_name = PUBLISHED  # as from_pretrained records it, on a tiny model for speed
    monkeypatch.setattr("zoo.commands.translate.load_model", lambda *args, **kwargs: model)
    for given, flags in [({}, []), ({"alpha": 0.3, "beam_size": 2}, ["--alpha", "0.3",
                                                                      "--beam-size", "2"])]:  # fmt: skip
        seen.clear()
        python = translate(model, ["ein Hund"], **given)
        monkeypatch.setattr("sys.stdin", io.StringIO("ein Hund\n"))
        main(["translate", "--checkpoint", PUBLISHED, *flags])
        assert capsys.readouterr().out == python[0] + "\n"
        assert seen[0] == seen[1] == {keys[k]: v for k, v in registered.items()} | given
    model.published_name = None  # a model of one's own: the paper's decoding
    seen.clear()
    translate(model, ["ein Hund"])
    assert seen == [{keys[k]: v for k, v in PAPER_DECODING.items()}]
