"""python -m benchmarks.kernel_versions: another checkout's Triton kernels load beside this one's,
each bound to its own tile steps, and both run on the same inputs (in Triton's interpreter here;
timings are never asserted)."""

import sys
from pathlib import Path

import pytest

import zoo.kernels
from benchmarks import kernel_versions as versions
from zoo.kernels import triton_block_sparse, triton_flash, triton_routing

REPO = Path(__file__).resolve().parents[2]


def test_the_other_checkouts_kernels_load_beside_ours_on_their_own_flash(tmp_path):
    old = versions.load_kernels(REPO)
    assert set(old) == {"triton_block_sparse", "triton_routing"}
    assert old["triton_routing"] is not triton_routing
    assert old["triton_routing"].flash is not triton_flash
    assert old["triton_routing"].flash is old["triton_block_sparse"].flash
    # ours are untouched
    assert sys.modules["zoo.kernels.triton_flash"] is triton_flash
    assert zoo.kernels.triton_flash is triton_flash


def test_rows_time_both_versions_on_each_pass_and_the_report_divides_them():
    new = {"triton_block_sparse": triton_block_sparse, "triton_routing": triton_routing}
    rows = versions.measure(new, versions.load_kernels(REPO), [64], 16, 16, rounds=1, cluster=32)
    assert [(r["op"], r["pass"]) for r in rows] == [
        ("block_sparse", "fwd"), ("block_sparse", "fwd+bwd"), ("routing w=32", "fwd"),
        ("routing w=32", "fwd+bwd"),
    ]  # fmt: skip
    assert all(r["new_ms"] > 0 and r["old_ms"] > 0 and r["sdpa_ms"] > 0 for r in rows)
    row = {"op": "routing", "n": 4096, "d": 64, "pass": "fwd", "new_ms": 0.5, "old_ms": 0.75,
           "sdpa_ms": 0.25}  # fmt: skip
    text = versions.report([row], {"device": "GPU X"}, "/tmp/old")
    assert "| routing | 4096 | 64 | fwd | 0.5 | 0.75 | 1.50 | 0.25 | 2.00 |" in text


def test_a_folder_without_kernels_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no triton_flash.py, triton_block_sparse.py"):
        versions.load_kernels(tmp_path)
