"""zoo export: the published folder, its model card and its registry entry."""

import json

import pytest
import torch
import yaml
from published import METRIC, NAME, REPO, REPO_ID

import zoo
from zoo.errors import (
    ChecksumError,
)
from zoo.hub import load_registry, sha256_file
from zoo.publishing import export_run


def test_export_writes_the_published_files_and_the_registry_entry(published, registry):
    assert sorted(p.name for p in published.iterdir()) == [
        "README.md", "config.json", "golden.json", "manifest.json", "model.safetensors",
        "recipe.yaml", "training.json",
    ]  # fmt: skip
    facts = json.loads((published / "training.json").read_text())
    assert facts["optimizer_steps"] == 3 and facts["tokens"] == 1536
    assert facts["wall_time_s"] == 2.5 and facts["hardware"] == "test CPU (2 threads)"
    card = (published / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["library_name"] == "attention-zoo"
    assert "transformer-lm" in meta["tags"]
    result = meta["model-index"][0]["results"][0]
    assert result["metrics"][0] == {
        "type": "bits_per_byte", "value": 7.9, "name": "bits/byte (first 4 windows)"
    }  # fmt: skip
    assert result["dataset"]["split"] == "test (slice: first 4 windows)"  # not the test score
    assert "| optimizer steps | 3 |" in card
    context = facts["data"]["seq_len"]  # the fake run's data module leaves it to the model
    assert context == zoo.create_model("transformer_lm_tiny").config.max_seq_len
    assert f"| training windows | 2 × {context:,} bytes per optimizer step |" in card
    entry = load_registry().get(NAME)
    assert entry.revision is None and entry.repo_id == REPO_ID
    assert entry.files["model.safetensors"]["sha256"] == sha256_file(
        published / "model.safetensors"
    )
    assert entry.config == json.loads((published / "config.json").read_text())["config"]
    assert entry.parameters == zoo.create_model("transformer_lm_tiny").num_parameters()


def test_export_a_saved_model_with_its_training_facts(tmp_path, registry):
    """A model saved on another machine (in bf16, say) and its training.json export as they are;
    without training.json, or with a file that does not match its manifest, nothing is exported."""
    from zoo.errors import CheckpointError

    model = zoo.create_model("transformer_lm_tiny")
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16)
    saved = model.save_pretrained(tmp_path / "saved")
    recipe = REPO / "recipes/transformer_lm/pg19mini.yaml"
    with pytest.raises(CheckpointError, match="without training.json"):
        export_run(saved, tmp_path / "out", name=NAME, recipe=recipe, metrics=[METRIC])
    facts = {
        "optimizer_steps": 7,
        "tokens": 7168,
        "wall_time_s": 1.5,
        "hardware": "a GPU",
        "data": {"dataset": "pg19mini", "extra_train": ["enwik8_prefix"], "seq_len": None},
    }
    (saved / "training.json").write_text(json.dumps(facts))
    out = export_run(saved, tmp_path / "out", name=NAME, recipe=recipe, metrics=[METRIC])
    assert (out / "model.safetensors").read_bytes() == (saved / "model.safetensors").read_bytes()
    assert json.loads((out / "training.json").read_text())["optimizer_steps"] == 7
    card = (out / "README.md").read_text()
    assert "| optimizer steps | 7 |" in card and "| hardware | a GPU |" in card
    assert "also held the training split of enwik8_prefix" in card
    assert "| training data | not recorded |" in card  # another data set too: no checksum
    loaded = zoo.from_pretrained(out)
    assert next(loaded.parameters()).dtype == torch.bfloat16  # loaded as saved
    weights = saved / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + bytes([weights.read_bytes()[-1] ^ 1]))
    with pytest.raises(ChecksumError):
        export_run(saved, tmp_path / "out2", name=NAME, recipe=recipe, metrics=[METRIC])


def test_card_says_when_training_windows_are_shorter_than_the_context():
    from zoo.publishing.training import training_windows

    short = training_windows({"batch_size": 8, "seq_len": 1024}, 4096)
    assert short.startswith("8 × 1,024 bytes per optimizer step (shorter than the context, 4,096")
    assert "never trained" in short
    assert training_windows({"batch_size": 2, "seq_len": 4096}, 4096) == (
        "2 × 4,096 bytes per optimizer step"
    )
    assert training_windows({}, 4096) == "unknown"


def test_card_lists_each_training_stage():
    from zoo.publishing.training import training_windows

    stages = [
        {"recipe": "a.yaml", "optimizer_steps": 3840, "batch_size": 8, "seq_len": 1024},
        {"recipe": "b.yaml", "optimizer_steps": 200, "batch_size": 2, "seq_len": 4096},
    ]
    text = training_windows({"batch_size": 2, "seq_len": 4096}, 4096, stages)
    assert text.startswith("8 × 1,024 bytes per optimizer step (shorter than the context")
    assert text.endswith(
        "for 3,840 steps (`a.yaml`); then 2 × 4,096 bytes per optimizer step for 200 steps "
        "(`b.yaml`)"
    )


def test_a_saved_model_exported_without_a_data_checksum_gets_one_marked_as_recomputed(
    tmp_path, registry, data_dir
):
    """Checkpoints exported before the zoo recorded the training data's sha256 get it from their
    data settings on the next export (refresh_card), and the card says it was recomputed."""
    from zoo.data import ByteTextDataModule
    from zoo.lineage import data_checksum

    saved = zoo.create_model("transformer_lm_tiny").save_pretrained(tmp_path / "saved")
    facts = {"optimizer_steps": 7, "tokens": 7168, "wall_time_s": 1.5,
             "data": {"dataset": "pg19mini", "seq_len": 128}}  # fmt: skip
    (saved / "training.json").write_text(json.dumps(facts))
    out = export_run(saved, tmp_path / "out", name=NAME, metrics=[METRIC],
                     recipe=REPO / "recipes/transformer_lm/pg19mini.yaml")  # fmt: skip
    dm = ByteTextDataModule(dataset="pg19mini", seq_len=128, data_dir=str(data_dir))
    dm.setup("fit")
    expected = data_checksum(dm, ["train", "valid"])
    recorded = json.loads((out / "training.json").read_text())["lineage"]["data"]
    assert recorded == expected | {"recorded": "at export"}
    assert "recomputed at export from the run's data settings" in (out / "README.md").read_text()


def test_refresh_card_renders_the_card_from_the_shipped_files_and_writes_nothing_else(
    published, registry
):
    """A card template change reaches published cards without measuring or loading anything:
    only README.md is written, and the entry changes only in README.md's sha256 and size. The
    card names the checkpoint, not the folder a benchmark was run from, and no session date."""
    from zoo.publishing import refresh_card

    bench = {"name": "./checkpoints/" + NAME, "date": "2026-11-24"}
    (published / "bench.json").write_text(json.dumps(bench))
    (published / "bench.md").write_text(
        f"# Benchmark of ./checkpoints/{NAME} on a CPU\n\ntransformer_lm, 1 warm-up; 2026-11-24.\n"
    )
    before = {p.name: p.read_bytes() for p in published.iterdir()}
    entry = load_registry().get(NAME)
    refreshed = refresh_card(NAME)
    after = {p.name: p.read_bytes() for p in published.iterdir()}
    assert {f for f in after if after[f] != before[f]} == {"README.md"}
    card = after["README.md"].decode()
    assert f"Benchmark of {NAME} on a CPU, measured with `zoo bench {NAME}`" in card
    assert "1 warm-up." in card and "2026-11-24" not in card and "./checkpoints" not in card
    assert refreshed.files["README.md"] == {
        "sha256": sha256_file(published / "README.md"), "size": len(after["README.md"])
    }  # fmt: skip
    assert refreshed == load_registry().get(NAME)
    others = {k: v for k, v in vars(entry).items() if k != "files"}
    assert {k: v for k, v in vars(refreshed).items() if k != "files"} == others
    assert {k: v for k, v in refreshed.files.items() if k != "README.md"} == {
        k: v for k, v in entry.files.items() if k != "README.md"
    }  # fmt: skip
    assert refresh_card(NAME) == refreshed  # rendering again changes nothing
