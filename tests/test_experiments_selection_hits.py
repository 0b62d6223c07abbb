"""experiments/block_selection/selection_hits.py: the recorder sees the blocks MoBA selects, a hit
is the block that holds the target, the uniform chance counts the eligible blocks, and a run on
tiny MoBA and NSA models gives a row per distance with a rate per layer."""

import json

import pytest
import torch
from fakes import recipe_module, word_salad

import zoo
from zoo.attention.mechanisms import moba
from zoo.errors import ConfigError

hits = recipe_module("experiments/block_selection/selection_hits.py")


def test_a_hit_is_a_selected_block_that_holds_the_target_position():
    blocks = torch.tensor([[[[3, 0], [3, -1]]]])  # (B=1, H=1, R=2, n=2), blocks of 8
    assert hits.hits(blocks, 8, torch.tensor([7, 24])).tolist() == [[[True, True]]]
    assert hits.hits(blocks, 8, torch.tensor([8, 31])).tolist() == [[[False, True]]]
    assert hits.hits(blocks, 8, torch.tensor([23, 32])).tolist() == [[[False, False]]]


def test_the_recorder_sees_the_blocks_moba_selects_and_changes_nothing():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 64, 8).unbind(0)
    plain = moba.moba_attention(q, k, v, block_size=8, top_k=2)
    with hits.recording(slice(40, 63)) as calls:
        seen = moba.moba_attention(q, k, v, block_size=8, top_k=2)
    assert torch.equal(seen, plain) and len(calls) == 1
    blocks, size = calls[0]
    assert size == 8
    assert torch.equal(blocks, moba.moba_blocks(q, k, block_size=8, top_k=2)[:, :, 40:63])


def test_uniform_chance_counts_the_free_slots_over_the_eligible_blocks():
    last = torch.tensor([4095])
    moba_spec = {"name": "moba", "block_size": 128, "top_k": 4}
    assert hits.uniform_chance(moba_spec, last) == pytest.approx(3 / 31)  # 31 blocks before
    nsa_spec = {"name": "nsa", "select_block": 64, "n_selected": 6, "n_initial": 1,
                "n_local": 2, "window": 128}  # fmt: skip
    assert hits.uniform_chance(nsa_spec, last) == pytest.approx(3 / 61)  # blocks 1 .. 61 free
    with pytest.raises(ConfigError, match="selects no blocks"):
        hits.uniform_chance({"name": "dense"}, last)


def _tiny(attention):
    torch.manual_seed(0)
    return zoo.create_model(
        "transformer_lm_small", attention=attention, max_seq_len=128, n_layers=2, d_model=32,
        n_heads=2, d_ff=64, position="rotary",
    ).eval()  # fmt: skip


SPECS = {
    "moba": {"name": "moba", "block_size": 8, "top_k": 3},
    "nsa": {"name": "nsa", "compress_block": 8, "compress_stride": 4, "select_block": 8,
            "n_selected": 4, "n_initial": 1, "n_local": 1, "window": 8},
}  # fmt: skip


@pytest.mark.parametrize("name", SPECS)
def test_a_run_gives_a_row_per_distance_and_a_rate_per_layer(name):
    model, docs = _tiny(SPECS[name]), [word_salad(4000, 0), word_salad(4000, 1)]
    rows = hits.measure(model, docs, span=16, distances=[32, 64], trials=3, cue=4, seed=0)
    assert [r["distance"] for r in rows] == [32, 64] and all(r["span"] == 16 for r in rows)
    for r in rows:
        assert len(r["hit_repeat"]) == len(r["hit_control"]) == 2  # one per layer
        assert all(0 <= x <= 1 for x in r["hit_repeat"] + r["hit_control"])
        assert r["control_bits"] > 0 and r["gain_half_width"] >= 0
    assert rows[0]["control_bits"] == rows[1]["control_bits"]  # one control per span
    again = hits.measure(model, docs, span=16, distances=[32, 64], trials=3, cue=4, seed=0)
    assert again == rows


def test_a_model_that_selects_no_blocks_is_a_one_line_error():
    with pytest.raises(ConfigError, match="no MoBA or NSA layer"):
        hits.measure(_tiny("dense"), [word_salad(4000, 0)], span=16, distances=[32], trials=2,
                     cue=4, seed=0)  # fmt: skip


def test_the_command_writes_the_table_and_the_json(tmp_path):
    model = _tiny(SPECS["moba"])
    model.save_pretrained(tmp_path / "tiny")
    text = tmp_path / "book.txt"
    text.write_bytes(word_salad(6000, 2))
    out = tmp_path / "out"
    assert hits.main([str(tmp_path / "tiny"), "--text-file", str(text), "--spans", "16", "64",
                      "--distances", "32", "64", "--trials", "2", "--out", str(out)]) == 0  # fmt: skip
    table = (out / "selection_hits.md").read_text()
    rows = [line.split(" | ")[1:3] for line in table.splitlines() if "tiny |" in line]
    assert rows == [["16", "32"], ["16", "64"], ["64", "64"]]  # d < span is left out
    saved = json.loads((out / "selection_hits.json").read_text())
    assert [r["distance"] for r in saved["results"][str(tmp_path / "tiny")]] == [32, 64, 64]
