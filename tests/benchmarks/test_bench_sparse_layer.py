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
    rows += [{"method": "ours_fixed", "n": n, "ms": 1e-3 * n**1.5, "peak_mib": 2.0, "stride": 64,
              "entries": n * n // 8} for n in (1024, 4096)]  # fmt: skip
    rows.append({"method": "dense_masked", "n": 4096, "error": "over 600 s"})
    text = bench.report(rows, tmp_path)
    assert "n=1024: l=64" in text
    assert "| sdpa_causal (ms) | 1,049 | 16,777 | 2.00 |" in text
    assert "| ours_fixed (ms) | 33 | 262 | 1.50 |" in text
    assert "over 600 s" in text
    # entry ratio 2 (n + 1) / (n / 4) * ... : H n (n + 1) / 2 over n^2 / 8 entries; speed-up
    # n^0.5 (32 at n = 1024); efficiency = speed-up / ratio
    ratio = 2 * 1024 * 1025 / 2 / (1024 * 1024 // 8)
    assert f"| 1,024 | 131,072 | {ratio:.2f} | 32.00 | {32 / ratio:.2f} |" in text
    assert {p.name for p in tmp_path.iterdir()} == {
        "sparse_layer_cpu.md", "sparse_layer_cpu.json", "sparse_layer_cpu.png"
    }  # fmt: skip


def test_fixed_entries_counts_the_pattern():
    pattern, _ = bench.fixed_pattern(256)
    assert bench.fixed_entries(256) == int(pattern.mask(256, bench.H).sum())
