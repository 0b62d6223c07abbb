"""benchmarks/compiled_decode.py runs and reports (timings themselves are never asserted)."""

import json

from benchmarks import compiled_decode as bench


def test_the_page_has_both_sides_and_the_tokens_agree(tmp_path):
    assert bench.main(["--presets", "transformer_lm_tiny", "--batches", "1", "2", "--prompt", "5",
                       "--new", "8", "--rounds", "1", "--out", str(tmp_path)]) == 0  # fmt: skip
    (md,) = tmp_path.glob("compiled_decode_cpu_*.md")
    text = md.read_text()
    assert "| transformer_lm_tiny | 1 |" in text and "| transformer_lm_tiny | 2 |" in text
    rows = json.loads(md.with_suffix(".json").read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 2]
    assert all(r["same_tokens"] for r in rows)
    assert all(r["eager_tokens_per_s"] > 0 and r["compiled_tokens_per_s"] > 0 for r in rows)
    assert rows[0]["weight_bound_tokens_per_s"] > 0 and rows[1]["weight_bound_tokens_per_s"] is None


def test_a_disagreement_is_reported_in_bold():
    row = {"preset": "p", "batch": 1, "eager_tokens_per_s": 10.0, "compiled_tokens_per_s": 20.0,
           "speedup": 2.0, "compile_s": 3.0, "same_tokens": False,
           "weight_bound_tokens_per_s": 100.0}  # fmt: skip
    assert "| p | 1 | 10 | 20 | 2.00x | 3.0 | **no** | 100 |" in bench.report([row], "cmd")
