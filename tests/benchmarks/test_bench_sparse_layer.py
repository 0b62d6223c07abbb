"""The CPU layer benchmark runs and reports (timings themselves are never asserted)."""

import math

import pytest

from benchmarks import sparse_layer as bench


@pytest.mark.parametrize("method", bench.METHODS)
def test_every_method_runs_at_a_small_size(method):
    row = bench.run_one(method, 256)
    assert row["method"] == method and row["n"] == 256
    assert row["ms"] > 0 and math.isfinite(row["peak_mib"])


def test_report_fits_the_growth_exponent_and_writes_files(tmp_path):
    rows = [
        {"method": "sdpa_causal", "n": n, "ms": 1e-3 * n**2, "peak_mib": 1.0} for n in (1024, 4096)
    ]
    rows += [{"method": "ours_fixed", "n": n, "ms": 1e-3 * n**1.5, "peak_mib": 2.0, "stride": 64}
             for n in (1024, 4096)]  # fmt: skip
    rows.append({"method": "dense_masked", "n": 4096, "error": "over 600 s"})
    text = bench.report(rows, tmp_path)
    assert "n=1024: l=64" in text
    assert "| sdpa_causal (ms) | 1,049 | 16,777 | 2.00 |" in text
    assert "| ours_fixed (ms) | 33 | 262 | 1.50 |" in text
    assert "over 600 s" in text
    assert {p.name for p in tmp_path.iterdir()} == {
        "sparse_layer_cpu.md", "sparse_layer_cpu.json", "sparse_layer_cpu.png"
    }  # fmt: skip
