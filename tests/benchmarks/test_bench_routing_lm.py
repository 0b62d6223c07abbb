"""The routing LM benchmark runs and reports (timings themselves are never asserted)."""

import math

import pytest

from benchmarks import routing_lm as bench


@pytest.mark.parametrize("method", ["ours_topw", "ours_causal", "ours_causal_bf16"])
def test_our_methods_run_at_a_small_size(method):
    row = bench.run_one(method, 256)
    assert row["method"] == method and row["n"] == 256
    assert row["ms"] > 0 and math.isfinite(row["peak_mib"]) and row["params"] > 0


def test_a_missing_baseline_is_a_row_with_the_reason(tmp_path):
    row = bench.measure("benchmarks.routing_lm", "routing_transformer", 256, 120,
                        {"PYTHONPATH": str(tmp_path)})  # fmt: skip
    assert "routing-transformer is not importable" in row["error"] and "ms" not in row
    rows = [row, bench.run_one("ours_topw", 256)]
    text = bench.report(rows, tmp_path)
    assert "| ours_topw (ms) |" in text and "routing_lm_cpu.png" in {
        p.name for p in tmp_path.iterdir()
    }
