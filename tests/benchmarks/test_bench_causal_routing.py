"""The causal-routing benchmark runs both routes on the shipped checkpoint and reports them (timings
themselves are never asserted)."""

import torch

from benchmarks import causal_routing as bench
from zoo.attention import functional


def test_both_routes_run_and_compute_the_same_loss(monkeypatch):
    calls = {"runs": 0}
    real = functional.run_window_attention

    def counted(*args, **kwargs):
        calls["runs"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(functional, "run_window_attention", counted)
    text = torch.randint(0, 256, (2, 65), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(bench, "windows", lambda B, L, data_dir: text)
    row = bench.measure((2, 64), "fp32", reps=1, data_dir=None)
    assert row["masked window"] > 0 and row["sorted runs"] > 0
    assert row["loss difference"] < 1e-4
    assert calls["runs"] > 0  # the sorted-run route ran
    assert functional._sorted(torch.zeros(1, 1, 3))  # the masked-window switch was undone


def test_the_report_is_a_table(tmp_path):
    row = {"shape": (8, 1024), "precision": "bf16", "masked window": 1200.0,
           "sorted runs": 1000.0, "loss difference": 1e-5}  # fmt: skip
    text = bench.report([row], tmp_path)
    assert "| 8 × 1,024 | bf16 | 1,200 | 1,000 | 1.20× | 8,192 |" in text
    assert (tmp_path / "causal_routing_cpu.md").read_text() == text
