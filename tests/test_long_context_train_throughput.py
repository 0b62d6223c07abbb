"""recipes/long_context/train_throughput.py: it trains each preset for the asked steps on each path,
restores the kernel dispatch afterwards, and writes its table (timings are never asserted)."""

import argparse

import pytest
import torch
import zoo.kernels
from fakes import recipe_module

throughput = recipe_module("recipes/long_context/train_throughput.py")


def test_rows_and_table(tmp_path):
    before = zoo.kernels.use_triton
    out = tmp_path / "throughput.md"
    rows = throughput.main(
        ["sparse_transformer_tiny", "--batches", "2x64", "3x32", "--steps", "1", "--out", str(out)]
    )
    # on a CPU the `kernels` path is the reference itself, so only `ref` rows are measured
    expected_paths = ["kernels", "ref"] if torch.cuda.is_available() else ["ref"]
    assert [(r["path"], r["batch"], r["length"]) for r in rows] == [
        (p, b, n) for p in expected_paths for b, n in [(2, 64), (3, 32)]
    ]
    assert all(r["tokens_per_s"] > 0 and r["parameters"] > 0 for r in rows)
    assert zoo.kernels.use_triton is before
    text = out.read_text()
    assert "| sparse_transformer_tiny | ref | 2 × 64 |" in text
    assert f"- torch: {torch.__version__}" in text and "train_throughput.py sparse" in text


def test_a_malformed_batch_is_a_clear_error():
    with pytest.raises(argparse.ArgumentTypeError, match="BATCHxLENGTH"):
        throughput.parse_batch("16by8192")
