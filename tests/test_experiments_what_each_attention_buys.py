"""experiments/block_selection/what_each_attention_buys.py: the README's table reads every figure
from the registry and the measured files, and shows a dash where a file is missing."""

import yaml
from fakes import recipe_module

from zoo.profiles import load_copy_probe

page = recipe_module("experiments/block_selection/what_each_attention_buys.py")
NAME = "transformer_lm_small_moba.pg19mini"


def _entry():
    return yaml.safe_load((page.ROOT / "checkpoints.yaml").read_text())["checkpoints"][NAME]


def test_a_row_takes_its_figures_from_the_registry_and_the_measured_files():
    entry = _entry()
    r = page.row(NAME, entry)
    test = next(m for m in entry["metrics"] if m["split"] == "test" and m["windows"] is None)
    assert r["test"] == test["value"] and r["context"] == 4096 and r["distance"] == 1024
    probe = load_copy_probe(page.BENCH / "copy_by_kind" / NAME)
    for kind in page.KINDS:
        i = probe[kind].distances.index(1024)
        assert r[kind] == (probe[kind].gain[i], probe[kind].gain_low[i], probe[kind].gain_high[i])
    assert r["decode_tps"] > 0 and r["train_tps"] > 0 and r["hardware"]


def test_a_missing_measurement_is_a_dash_not_a_number(tmp_path, monkeypatch):
    monkeypatch.setattr(page, "BENCH", tmp_path)  # no held-out book, probe or bench files
    r = page.row(NAME, _entry())
    assert r["book"] is None and "letters" not in r and "train_tps" not in r
    line = page.table([r]).splitlines()[-1]
    assert line.count("–") == 6 and f"{r['test']:.4f}" in line


def test_the_probe_distance_fits_the_context():
    assert page.distance(256) == 128 and page.distance(4096) == 1024
