"""The gradient checkpointing benchmark runs and reports (timings themselves are never asserted)."""

import pytest

from benchmarks import gradient_checkpointing as bench


@pytest.mark.parametrize("row", ["transformer_lm_tiny:2x48", "transformer_tiny:2x9x7"])
def test_a_row_measures_both_sides_and_reports(row):
    results = [bench.run_one(row, side, steps=1) for side in (0, 1, 2)]
    off, on, times = results
    assert on["kept_mib"] < 0.5 * off["kept_mib"]  # what checkpointing drops
    assert on["peak_mib"] > 0 and off["peak_mib"] > off["kept_mib"]  # weights, grads, temporaries
    assert off["rss_mib"] >= 0 and times["ms_0"] > 0 and times["ms_1"] > 0
    text = bench.report([row], results, "python -m benchmarks.gradient_checkpointing")
    line = next(line for line in text.splitlines() if line.startswith(f"| {row} |"))
    assert line.count("→") == 4 and "error" not in line


def test_a_failed_side_is_a_cell_with_the_reason():
    results = [{"row": "x:1x1", "side": s, "error": "over 1 s"} for s in (0, 1, 2)]
    assert "| x:1x1 | - | over 1 s |" in bench.report(["x:1x1"], results, "cmd")
