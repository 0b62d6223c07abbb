"""The NSA branch benchmark runs and reports (timings themselves are never asserted)."""

import math

from benchmarks import nsa_branches as bench


def test_every_part_runs_at_a_small_size():
    ms = bench.measure(256, rounds=1)
    assert set(ms) == set(bench.PARTS)
    assert all(t > 0 and math.isfinite(t) for t in ms.values())


def test_the_selected_branch_runs_on_the_blocks_nsa_chose():
    steps = bench.parts(256)
    blocks = steps["compressed"]()  # (1, H, 256, n_selected)
    assert blocks.shape == (1, bench.H, 256, bench._nsa_spec()["n_selected"])
    assert int(blocks.max()) == 256 // bench._nsa_spec()["select_block"] - 1


def test_report_gives_each_part_against_dense_and_writes_the_file(tmp_path):
    ms = {"dense": 100.0, "compressed": 20.0, "selected": 50.0, "window": 10.0,
          "dense module": 120.0, "nsa module": 96.0}  # fmt: skip
    text = bench.report(ms, 4096, rounds=3)
    assert "| selected | 50 | 0.50 |" in text and "| dense | 100 | 1.00 |" in text
    assert "The three branches: 80 ms, 0.80 of dense SDPA" in text
    assert "the NSA module over the dense module: 0.80" in text
    assert "7 interleaved" not in text and "3 interleaved" in text
    bench.main(["--n", "128", "--rounds", "1", "--out", str(tmp_path)])
    assert "| nsa module |" in (tmp_path / "nsa_branches_cpu.md").read_text()
