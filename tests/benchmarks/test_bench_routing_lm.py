"""The routing LM benchmark runs and reports (timings themselves are never asserted)."""

import math

import pytest
import torch

from benchmarks import routing_lm as bench


@pytest.mark.parametrize("method", ["ours_topw", "ours_causal", "ours_causal_bf16", "floor"])
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


def test_the_floor_is_our_dense_work_without_queries_keys_and_scores():
    floor, ours = bench.build("floor", 256), bench.build("ours_topw", 256)
    d = bench.D_MODEL

    def linears(model):
        return sorted(
            tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)
        )

    # ours projects q, k and v with one (> d, d) matrix per layer; the floor only v, with (d, d)
    ours_linears = linears(ours)
    qkv = [s for s in ours_linears if s[1] == d and s[0] > d and s[0] < 4 * d]
    assert len(qkv) == bench.LAYERS
    expected = sorted([s for s in ours_linears if s not in qkv] + [(d, d)] * bench.LAYERS)
    assert linears(floor) == expected
    assert floor(torch.randint(0, 256, (1, 16))).shape == (1, 16, 256)
