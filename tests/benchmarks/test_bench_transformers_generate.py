"""The transformers-generate benchmark runs and reports (timings themselves are never asserted):
both sides give the same tokens with one forward call per new token, within and past the
context."""

import pytest

pytest.importorskip("transformers")
from benchmarks import transformers_generate as bench  # noqa: E402


@pytest.mark.parametrize(("prompt", "new"), [(20, 6), (200, 60)])  # 200 + 60 > 256 positions
def test_both_sides_give_the_same_tokens_one_call_per_token(prompt, new):
    row = bench.measure("case", prompt, new, rounds=1)
    assert row["same"] and row["calls"] == {"zoo": 1.0, "hf": 1.0}
    assert row["zoo"] > 0 and row["hf"] > 0 and row["ratio"] == row["hf"] / row["zoo"]
    text = bench.report([row], "python benchmarks/transformers_generate.py")
    assert f"| case ({prompt} + {new}) |" in text and "| yes |" in text
