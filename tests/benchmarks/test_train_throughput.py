"""benchmarks/train_throughput.py: every row trains in its own process, on this checkout or
another one, and the table relates each row to the first preset (timings are never asserted)."""

import argparse
import os
import subprocess

import pytest
import torch

from benchmarks import train_throughput as throughput


def test_rows_and_table(tmp_path):
    out = tmp_path / "throughput.md"
    rows = throughput.main(
        ["transformer_lm_tiny:2x32", "sparse_transformer_tiny", "--batches", "1x64",
         "--precision", "fp32", "--steps", "1", "--out", str(out)]
    )  # fmt: skip
    paths = ["kernels", "torch"] if torch.cuda.is_available() else ["kernels"]
    assert [(r["preset"], r["batch"], r["length"], r["path"]) for r in rows] == [
        (name, b, n, p)
        for p in paths
        for name, b, n in [("transformer_lm_tiny", 2, 32), ("sparse_transformer_tiny", 1, 64)]
    ]
    assert all(r["tokens_per_s"] > 0 and r["parameters"] > 0 for r in rows), rows
    text = out.read_text()
    first, second = rows[0]["tokens_per_s"], rows[1]["tokens_per_s"]
    assert f"| transformer_lm_tiny | 2 × 32 | fp32 | kernels | {rows[0]['code']} |" in text
    assert text.splitlines()[-1].endswith(f"| {second / first:.2f} |")
    assert f"- torch: {torch.__version__}" in text and "train_throughput transformer" in text


def test_compare_with_runs_the_other_checkouts_code(tmp_path):
    """A stand-in checkout whose `zoo` cannot train: its rows carry its error, beside ours."""
    other = tmp_path / "old"
    (other / "zoo").mkdir(parents=True)
    (other / "zoo" / "__init__.py").write_text("raise ImportError('the old code ran')\n")
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    rows = throughput.main(
        ["transformer_lm_tiny:1x16", "--precision", "fp32", "--steps", "1",
         "--compare-with", str(other)]
    )  # fmt: skip
    ours, theirs = rows
    assert ours["tokens_per_s"] > 0 and "error" not in ours
    assert theirs["error"] == "ImportError: the old code ran"
    assert theirs["code"] != ours["code"]


def test_a_malformed_shape_is_a_clear_error():
    with pytest.raises(argparse.ArgumentTypeError, match="BATCHxLENGTH"):
        throughput.parse_preset("transformer_lm_tiny:16by8192", (1, 1))


def fake_runs(speeds, log):
    """A stand-in for :func:`throughput.run`: each process's rows get the next speeds."""

    def run(rows, steps, code, timeout):
        log.append([row["preset"] for row in rows])
        return [{**row, "tokens_per_s": next(speeds), "ms_per_step": 1.0, "parameters": 1,
                 "peak_gib": None} for row in rows]  # fmt: skip

    return run


def test_rounds_take_turns_and_report_the_median_round(tmp_path, monkeypatch):
    """Round 1 of every row, then round 2, ...; a row keeps its median round and the spread."""
    log = []
    speeds = iter([100.0, 10.0, 300.0, 30.0, 200.0, 20.0])
    monkeypatch.setattr(throughput, "run", fake_runs(speeds, log))
    out = tmp_path / "t.md"
    rows = throughput.main(
        ["a:1x8", "b:1x8", "--precision", "fp32", "--rounds", "3", "--out", str(out)]
    )  # fmt: skip
    assert log == [["a"], ["b"]] * 3
    assert [(r["tokens_per_s"], r["spread"], r["rounds"]) for r in rows] == [
        (200.0, 3.0, 3), (20.0, 3.0, 3)
    ]  # fmt: skip
    assert out.read_text().splitlines()[-1].endswith("| 3.00 (3) | 0.10 |")


def test_together_puts_a_checkouts_rows_in_one_process(monkeypatch):
    log = []
    monkeypatch.setattr(throughput, "run", fake_runs(iter(range(1, 9)), log))
    rows = throughput.main(["a:1x8", "b:1x8", "--precision", "fp32", "bf16", "--together",
                            "--rounds", "2"])  # fmt: skip
    assert log == [["a", "b", "a", "b"]] * 2
    assert [r["tokens_per_s"] for r in rows] == [1, 2, 3, 4]  # the lower of two rounds


def test_rows_taking_turns_in_one_process_all_train(monkeypatch):
    """The real thing, tiny: two presets in one process, each its own median step; the backend
    variable each row sets is put back."""
    monkeypatch.delenv("ZOO_ATTENTION_BACKEND", raising=False)
    row = {"batch": 1, "length": 32, "precision": "fp32", "path": "kernels", "config": {}}
    rows = [{**row, "preset": p} for p in ("transformer_lm_tiny", "sparse_transformer_tiny")]
    out = throughput.measure(rows, steps=2)
    assert [r["preset"] for r in out] == ["transformer_lm_tiny", "sparse_transformer_tiny"]
    assert all(r["tokens_per_s"] > 0 and r["parameters"] > 0 for r in out)
    assert out[0]["parameters"] != out[1]["parameters"]
    assert "ZOO_ATTENTION_BACKEND" not in os.environ


def test_a_failed_round_is_the_rows_result(monkeypatch):
    results = iter([{"tokens_per_s": 5.0}, {"error": "over 1 s"}])
    monkeypatch.setattr(throughput, "run", lambda rows, *a: [{**rows[0], **next(results)}])
    (row,) = throughput.main(["a:1x8", "--precision", "fp32", "--rounds", "2"])
    assert row["error"] == "over 1 s"


def test_rounds_below_one_are_refused():
    with pytest.raises(SystemExit):
        throughput.main(["a:1x8", "--rounds", "0"])


def test_text_rows_train_on_a_new_window_of_the_data_each_step():
    """--text: every step is a new batch of real training windows; a published name is trained
    from its own configuration and weights."""
    row = {"preset": "transformer_lm_small.pg19mini", "batch": 2, "length": 16,
           "precision": "fp32", "path": "kernels", "config": {}, "text": "tinyshakespeare"}  # fmt: skip
    model, step = throughput.trainer(row, "cpu")
    assert model.config.max_seq_len == 256  # the published model's configuration
    seen, forward = [], model.forward
    model.forward = lambda x, *a, **k: seen.append(x.clone()) or forward(x, *a, **k)
    step()
    step()
    first, second = seen
    assert first.shape == (2, 16) and not torch.equal(first, second)
    from zoo.data.byte_corpora import load_byte_corpus

    text = b"".join(load_byte_corpus("tinyshakespeare", splits=["train"])["train"])
    assert bytes(first[0].tolist()) in text  # windows of the real training text


def test_a_copy_inside_a_checkout_is_labelled_by_its_folder(tmp_path):
    """An unpacked old version inside this checkout must not take this checkout's revision."""
    import subprocess

    from benchmarks.train_throughput import revision

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    (tmp_path / "old").mkdir()
    assert revision(tmp_path / "old") == "old"
    rev = revision(tmp_path)
    assert len(rev) >= 7 and rev != "old"
