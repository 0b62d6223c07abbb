"""benchmarks/train_throughput.py: every row trains in its own process, on this checkout or
another one, and the table relates each row to the first preset (timings are never asserted)."""

import argparse
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
