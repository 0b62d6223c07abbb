"""`zoo evaluate` on the inputs issue 52 found it wrong on: an empty test book (a warning, the
other books measured, `--registered` refusing other data), an explicit `--data-dir` without the
data while `$ZOO_DATA_DIR` has it (the named directory only), and nothing to evaluate (`--windows
0`, every book empty: one-line errors, not `KeyError: 'test/bpb'`)."""

import warnings
from pathlib import Path

import pytest
import torch
from fakes import pg19mini_test_books, run_zoo

import zoo
from zoo.data.byte_corpora import EmptyDataWarning
from zoo.errors import ConfigError, DataNotFoundError
from zoo.evaluation import evaluate

SIZES = (300, 200, 50)  # bytes of the three pg19mini test books


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """A save_pretrained folder of the tiny Transformer (random weights)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("model") / "tiny"
    zoo.create_model("transformer_lm_tiny").save_pretrained(folder)
    return str(folder)


def test_an_empty_test_book_warns_and_the_others_are_measured(model, tmp_path):
    corpus = pg19mini_test_books(tmp_path, (SIZES[0], 0, SIZES[2]))
    with pytest.warns(
        EmptyDataWarning, match=r"pg19mini test: .*768\.txt is empty .* other 2 of 3"
    ):
        m = evaluate(model, data_dir=str(corpus), progress=False)
    assert m.targets == (SIZES[0] - 1) + (SIZES[2] - 1)  # the empty book scores nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyDataWarning)  # complete books: no warning
        evaluate(model, data_dir=str(pg19mini_test_books(tmp_path / "full", SIZES)),
                 windows=1, progress=False)  # fmt: skip


def test_registered_refuses_a_measurement_of_other_bytes(published, tmp_path, capsys):
    """A book emptied since the metric was registered: `--registered` fails, naming the bytes."""
    from published import NAME

    from zoo.publishing import register

    corpus = pg19mini_test_books(tmp_path / "data", SIZES)
    whole = evaluate(NAME, data_dir=str(corpus), progress=False)
    register(published, name=NAME, recipe="recipes/transformer_lm/pg19mini.yaml", metrics=[whole])
    assert run_zoo(capsys, "evaluate", NAME, "--registered", "--data-dir", str(corpus))[0] == 0
    (corpus / "pg19mini" / "768.txt").write_bytes(b"")
    code, _, err = run_zoo(capsys, "evaluate", NAME, "--registered", "--data-dir", str(corpus))
    assert code == 1 and "Traceback" not in err
    assert f"registered on {whole.targets:,}: the data differs" in err and "768.txt is empty" in err


def test_an_explicit_data_dir_is_the_only_place_searched(model, tmp_path, monkeypatch, capsys):
    real = pg19mini_test_books(tmp_path / "real", SIZES)
    monkeypatch.setenv("ZOO_DATA_DIR", str(real))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match=f"found in {empty / 'pg19mini'}, the data dir"):
        evaluate(model, data_dir=str(empty), windows=1, progress=False)
    code, _, err = run_zoo(capsys, "evaluate", model, "--data-dir", str(empty), "--windows", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"found in {empty / 'pg19mini'}" in err and "$ZOO_DATA_DIR is not" in err
    assert f"$ZOO_DATA_DIR ({real}), which has pg19mini/" in err  # the way out
    assert evaluate(model, windows=1, progress=False).targets > 0  # no --data-dir: $ZOO_DATA_DIR


@pytest.mark.parametrize("flag, value", [("--windows", "0"), ("--windows", "-1"),
                                         ("--first-bytes", "0"), ("--batch-size", "0")])  # fmt: skip
def test_nothing_to_evaluate_is_a_one_line_error(model, tmp_path, capsys, flag, value):
    corpus = pg19mini_test_books(tmp_path, SIZES)
    code, _, err = run_zoo(capsys, "evaluate", model, "--data-dir", str(corpus), flag, value)
    assert code == 2 and err == f"zoo evaluate: error: {flag} must be >= 1, got {value}" + (
        " (leave it out to measure the whole split)\n" if flag != "--batch-size" else "\n"
    )
    with pytest.raises(ConfigError, match=f"must be >= 1, got {value}"):
        evaluate(model, data_dir=str(corpus), progress=False,
                 **{flag[2:].replace("-", "_"): int(value)})  # fmt: skip


def test_every_book_empty_is_a_one_line_error(model, tmp_path, capsys):
    corpus = pg19mini_test_books(tmp_path, (0, 0, 0))
    code, _, err = run_zoo(capsys, "evaluate", model, "--data-dir", str(corpus))
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and "KeyError" not in err
    assert lines[0].startswith("zoo evaluate: warning: pg19mini test:")  # one warning line ...
    assert lines[1:] == [  # ... and one error line
        f"zoo: error: no bytes to evaluate in {Path(corpus) / 'pg19mini'}/test: its 3 document(s) "
        "hold 0 bytes; restore the files, or point --data-dir (data_dir=) at a complete copy of "
        "the data set"
    ]


def test_a_text_file_is_measured_on_its_last_five_percent(model, tmp_path, capsys):
    """`--text-file`: bits per byte on a book outside the data sets (split 90/5/5 % in order)."""
    import gzip

    from fakes import word_salad

    text = word_salad(4000, seed=1)
    book = tmp_path / "book.txt.gz"
    book.write_bytes(gzip.compress(text))
    m = evaluate(model, text_file=book, progress=False)
    assert (m.dataset, m.split) == ("book.txt.gz", "test")
    assert m.targets == len(text) - int(len(text) * 0.95) - 1  # the last 5 %, first byte unscored
    v = evaluate(model, text_file=str(book), split="valid", progress=False)
    assert v.targets == int(len(text) * 0.95) - int(len(text) * 0.90) - 1
    assert v.value != m.value
    code, out, _ = run_zoo(capsys, "evaluate", model, "--text-file", str(book))
    assert code == 0 and f"{m.value:.4f}" in out and "book.txt.gz" in out


def test_a_missing_text_file_or_a_data_set_too_is_one_line(model, tmp_path, capsys):
    with pytest.raises(DataNotFoundError, match=r"text file '.*nope\.txt' not found"):
        evaluate(model, text_file=tmp_path / "nope.txt", progress=False)
    book = tmp_path / "book.txt"
    book.write_bytes(b"x" * 400)
    with pytest.raises(ConfigError, match="give a data set \\(tinyshakespeare\\) or a text file"):
        evaluate(model, dataset="tinyshakespeare", text_file=book, progress=False)
    code, _, err = run_zoo(capsys, "evaluate", model, "--text-file", str(tmp_path / "nope.txt"))
    assert code != 0 and "not found" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
