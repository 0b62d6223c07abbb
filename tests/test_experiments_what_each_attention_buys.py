"""experiments/block_selection/what_each_attention_buys.py: the README's table reads every figure
from the registry and the measured files, and shows a dash where a file is missing."""

import pytest
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
    monkeypatch.setattr(page, "CARDS", tmp_path)  # nor a card's curves
    r = page.row(NAME, _entry())
    assert r["book"] is None and "letters" not in r and "train_tps" not in r
    assert r["by_distance"] == {} and "by_context" not in r
    line = page.summary([r]).splitlines()[-1]
    assert line.count("–") == 7 and f"{r['test']:.4f}" in line


def test_the_probe_distance_fits_the_context():
    assert page.distance(256) == 128 and page.distance(4096) == 1024


def test_gain_by_distance_reads_the_card_first_then_the_probe_measured_here(tmp_path, monkeypatch):
    found = page.by_distance(NAME)  # the MoBA card has every kind at every distance
    card = load_copy_probe(page.CARDS / NAME)
    assert found["text"][1024][0] == card["text"].gain[card["text"].distances.index(1024)]
    monkeypatch.setattr(page, "CARDS", tmp_path)  # no card: nothing unless measured here
    monkeypatch.setattr(page, "BENCH", tmp_path)
    assert page.by_distance(NAME) == {}


def test_a_cell_at_the_rows_distance_falls_back_to_the_probe_by_kind():
    r = {"distance": 1024, "text": (0.5, 0.4, 0.6), "by_distance": {}}
    assert page.gain(r, "text", 1024, interval=False) == "+0.50"
    assert page.gain(r, "text", 128) == "–"
    r["by_distance"] = {"text": {"128": (0.25, 0.2, 0.3)}}
    assert page.gain(r, "text", 128) == "+0.25 [+0.20, +0.30]"


def test_the_readme_table_is_what_the_files_say():
    """The README's block is the summary of the committed files: rerun the script when a file moves."""
    registry = yaml.safe_load((page.ROOT / "checkpoints.yaml").read_text())["checkpoints"]
    rows = [page.row(n, registry[n]) for n in page.MODELS if n in registry]
    assert page.summary(rows) in page.README.read_text()


def test_write_readme_replaces_only_the_block_and_needs_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    start, end = page.MARKERS
    readme.write_text(f"before\n{start} -->\nold\n{end}\nafter\n")
    page.write_readme("new\n", readme)
    text = readme.read_text()
    assert "old" not in text and "new\n" in text and text.startswith("before") and "after" in text
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- what-each-attention-buys:start"):
        page.write_readme("new\n", readme)
