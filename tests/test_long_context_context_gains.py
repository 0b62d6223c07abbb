"""experiments/long_context/context_gains.py: each model's gain from a stretch of context and its gain
over a reference, from saved by-context profiles."""

import pytest
from fakes import recipe_module

from zoo.by_context import ContextProfile, save_context_profile

context_gains = recipe_module("experiments/long_context/context_gains.py")


def _profile(name: str, block_bits) -> ContextProfile:
    """A profile of 3 blocks at contexts 4, 8, 16 from its per-block bits (one row per context)."""
    bits = [sum(r) / len(r) for r in block_bits]
    return ContextProfile(
        source=name, dataset="pg19mini", split="test", max_seq_len=16, contexts=(4, 8, 16),
        min_context=(3, 5, 9), bits=bits, gain=[b - bits[-1] for b in bits], gain_se=[0.0] * 3,
        target_len=4, block_spacing=16, blocks=3, targets=12, block_bits=block_bits,
    )  # fmt: skip


def test_gains_and_gains_over_the_reference(tmp_path, capsys):
    ref = _profile("ref", [[2.0, 2.0, 2.0], [1.9, 1.9, 1.9], [1.9, 1.9, 1.9]])  # gains 0.1, 0
    model = _profile("m", [[2.0, 2.1, 2.2], [1.8, 1.8, 1.9], [1.6, 1.7, 1.7]])
    save_context_profile(ref, tmp_path / "ref")
    save_context_profile(model, tmp_path / "m")
    context_gains.main([f"reference={tmp_path / 'ref'}", f"model={tmp_path / 'm'}",
                        "--stretch", "4:8", "8:16", "--out", str(tmp_path / "t.md")])  # fmt: skip
    out = capsys.readouterr().out
    assert out == (tmp_path / "t.md").read_text()
    rows = out.splitlines()
    assert (
        rows[0] == "| model | gain 4 → 8 | over the reference | gain 8 → 16 | over the reference |"
    )
    assert rows[2] == "| reference | +0.1000 ± 0.0000 | – | +0.0000 ± 0.0000 | – |"
    # the model's gains per block, 4 -> 8: 0.2, 0.3, 0.3 (mean 0.2667, std 0.0577, se 0.0333), over
    # the reference's 0.1 each; 8 -> 16: 0.2, 0.1, 0.2 (mean 0.1667, se 0.0333), over the reference's 0
    assert (
        rows[3]
        == "| model | +0.2667 ± 0.0333 | +0.1667 ± 0.0333 | +0.1667 ± 0.0333 | +0.1667 ± 0.0333 |"
    )


def test_a_bad_stretch_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        context_gains.main(["a=x", "--stretch", "1024:256"])
    assert e.value.code == 2 and "SHORT < LONG" in capsys.readouterr().err
