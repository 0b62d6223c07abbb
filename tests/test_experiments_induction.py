"""experiments/long_range/induction.py: the fixed and varying runs differ only in their distances,
a few steps lower the bits of the fixed run (the loop trains), and the report writes its files."""

import json

from fakes import recipe_module

induction = recipe_module("experiments/long_range/induction.py")


def test_the_loop_trains_and_the_report_writes_its_files(tmp_path):
    common = {"seq_len": 128, "preset": "transformer_lm_small_rotary", "seed": 0, "lr": 1e-3,
              "batch_size": 32}  # fmt: skip
    fixed = induction.train("fixed", 40, 40, 3 * induction.BLOCK, **common)
    assert fixed["distances"] == [40, 40] and len(fixed["bits"]) == 3
    assert fixed["bits"][0] > 7.5 and fixed["bits"][-1] < fixed["bits"][0] - 0.5  # it learns
    varying = induction.train("varying", 32, 96, 3, **common)
    induction.report(
        [fixed, varying], tmp_path, {**common, "span": 32, "cue": 4, "hardware": "test"}
    )
    assert {p.name for p in tmp_path.iterdir()} == {"induction.md", "induction.json",
                                                   "induction.png"}  # fmt: skip
    saved = json.loads((tmp_path / "induction.json").read_text())
    assert [r["name"] for r in saved["runs"]] == ["fixed", "varying"]
    assert "| varying | 32–96 (log-uniform) | 3 |" in (tmp_path / "induction.md").read_text()
