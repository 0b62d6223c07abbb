"""python -m benchmarks.kernel_tuning: the sweep sets one kernel's launch options at a time and
reports the best set per kernel (in Triton's interpreter here; timings are never asserted)."""

import pytest
import torch

from benchmarks import kernel_tuning as tuning
from zoo.kernels import triton_flash


def test_sweep_launches_each_kernel_with_each_set_and_restores_the_table(monkeypatch):
    seen = []
    real = triton_flash.launch_options

    def spy(head_dim, kernel=""):
        seen.append((kernel, dict(triton_flash.LAUNCH)))
        return real(head_dim, kernel)

    for module in ("triton_block_sparse", "triton_routing"):
        monkeypatch.setattr(f"zoo.kernels.{module}.launch_options", spy)
    rows = tuning.sweep(
        "block_sparse", tuning.block_sparse_op(128, 16, 32), 128, 16, [(4, 3), (8, 2)], 32
    )
    assert [(r["kernel"], r["num_warps"], r["num_stages"]) for r in rows] == [
        ("forward", 4, 3), ("dq", 4, 3), ("dkdv", 4, 3),
        ("forward", 8, 2), ("dq", 8, 2), ("dkdv", 8, 2),
    ]  # fmt: skip
    assert all(r["ms"] > 0 for r in rows)
    # while a kernel is swept, the table lists that kernel alone, with the set under test
    overrides = {k: v for _, table in seen for k, v in table.items()}
    assert overrides[("block_sparse.dkdv", 16)] in ({"num_warps": 4, "num_stages": 3},
                                                    {"num_warps": 8, "num_stages": 2})  # fmt: skip
    assert all(len(table) <= 1 for _, table in seen)
    assert triton_flash.LAUNCH == {}


def test_launch_options_read_the_table_outside_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setitem(triton_flash.LAUNCH, ("routing.dq", 64), {"num_warps": 2, "num_stages": 1})
    assert triton_flash.launch_options(64, "routing.dq") == {"num_warps": 2, "num_stages": 1}
    assert triton_flash.launch_options(64, "routing.dkdv") == {"num_warps": 4, "num_stages": 3}
    assert triton_flash.launch_options(128) == {"num_warps": 8, "num_stages": 2}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_flash.launch_options(64, "routing.dq") == {}


def test_report_names_the_best_set_against_the_default():
    key = {"op": "routing", "tile": 64, "n": 4096, "d": 64, "kernel": "dq"}
    rows = [
        {**key, "num_warps": 4, "num_stages": 3, "ms": 2.0},  # the default for d = 64
        {**key, "num_warps": 4, "num_stages": 2, "ms": 1.6},
        {**key, "num_warps": 8, "num_stages": 2, "error": "OutOfResources: shared memory"},
        {"op": "routing", "n": 4096, "d": 64, "breakdown": {"whole forward": 0.5}},
    ]
    text = tuning.report(rows, {"device": "GPU X", "torch": "t"})
    assert "| routing | 64 | 4096 | 64 | dq | 2 | 1.6 | 4 | 2 | 1.25x |" in text
    assert "- whole forward: 0.5" in text


def test_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        tuning.main([])
