"""python -m benchmarks.attention_kernels runs and reports (timings themselves are never asserted)."""

import json

import pytest
import torch

from benchmarks import attention_kernels as bench


def test_cpu_run_writes_a_table_with_the_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU table, on any machine
    bench.main(["--sizes", "256", "--head-dims", "64", "--methods", "triton", "sdpa", "torch",
                "--out", str(tmp_path)])  # fmt: skip
    data = json.loads((tmp_path / "kernels_cpu.json").read_text())
    env, rows = data["environment"], data["rows"]
    assert env["torch"] == torch.__version__ and "no GPU" in env["device"]
    assert env["triton"] != "" and env["command"].startswith("python -m benchmarks.attention_kernels ")
    # 2 layouts + routing, 3 methods, 2 passes
    assert len(rows) == 3 * 3 * 2
    for r in rows:
        if r["method"] == "triton":
            assert r["error"] == "needs CUDA"
        else:
            assert r["ms"] > 0 and r["tflops"] > 0, r
    density = {r["layout"]: r["density"] for r in rows if r["method"] == "torch" and "density" in r}
    # causal at 256 with blocks of 64: 10 of the 16 blocks (the triangle with its diagonal)
    assert density["causal"] == pytest.approx(10 / 16)
    assert density["fixed"] == pytest.approx(10 / 16)  # n < stride: the same triangle
    text = (tmp_path / "kernels_cpu.md").read_text()
    assert "| block_sparse | causal | 256 | 64 | fwd | 0.625 | needs CUDA |" in text


def test_routing_rows_take_each_cluster_size(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bench.main(["--sizes", "256", "--head-dims", "16", "--ops", "routing", "--methods", "torch",
                "--clusters", "64", "128", "--out", str(tmp_path)])  # fmt: skip
    rows = json.loads((tmp_path / "kernels_cpu.json").read_text())["rows"]
    assert [(r["layout"], r["pass"]) for r in rows] == [
        ("w=64", "fwd"), ("w=64", "fwd+bwd"), ("w=128", "fwd"), ("w=128", "fwd+bwd")
    ]  # fmt: skip
    assert all(r["ms"] > 0 for r in rows)
    # 4 clusters of 64 or 2 of 128: (n / w) * w (w + 1) / 2 entries per (batch, head)
    per_head = {r["layout"]: r["tflops"] * r["ms"] * 1e9 / (4 * 16 * 2) for r in rows
                if r["pass"] == "fwd"}  # fmt: skip
    assert per_head["w=64"] == pytest.approx(4 * 64 * 65 / 2)
    assert per_head["w=128"] == pytest.approx(2 * 128 * 129 / 2)


def test_report_computes_flex_over_triton():
    env = {"device": "GPU X", "torch": "t"}
    key = {"op": "block_sparse", "layout": "fixed", "n": 1024, "d": 64, "pass": "fwd"}
    rows = [
        {**key, "method": "triton", "ms": 2.0, "tflops": 400.0, "density": 0.25},
        {**key, "method": "flex", "ms": 3.0, "tflops": 266.7, "density": 0.25},
    ]
    text = bench.report(rows, env)
    assert text.startswith("# Kernel benchmark: GPU X")
    assert "| block_sparse | fixed | 1024 | 64 | fwd | 0.250 | 2 | 400 | 3 | 267 | 1.50 |" in text
