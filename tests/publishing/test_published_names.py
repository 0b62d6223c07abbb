"""Published files name checkpoints, not folders of the machine that trained them (issue 52): the
parent in training.json, checkpoints.yaml, the card and `zoo list`; the model a by-position or
by-context curve was measured on, in the card and (with --name) in its files."""

import json
import warnings
from pathlib import Path

import pytest
import torch
from fakes import fake_run, pg19mini_test_books

from zoo.cli import main
from zoo.hub import Metric
from zoo.lineage import checkpoint_name
from zoo.publishing import export_run, register

REPO = Path(__file__).resolve().parents[2]
NAME = "transformer_lm_tiny.pg19mini"
RECIPE = REPO / "recipes/transformer_lm/pg19mini.yaml"
METRIC = Metric("bits_per_byte", 8.0, "pg19mini", "test", None, 547, "32-true", context=128)


def test_checkpoint_name_never_gives_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)  # the repository's registry
    run = "./runs/sparse_transformer/pg19mini_fixed_v3_8heads"  # a recipe's default_root_dir
    recipe = "recipes/sparse_transformer/sparse_transformer_small.pg19mini.stage1.yaml"
    assert checkpoint_name(run) == checkpoint_name(f"{run}/checkpoints/last.ckpt") == recipe
    assert checkpoint_name(recipe) == recipe  # what it gives is a name already
    strided = "sparse_transformer_strided_8k.pg19mini"
    assert checkpoint_name(f"./checkpoints/{strided}") == checkpoint_name(strided) == strided
    assert checkpoint_name(tmp_path / "two_means_fp32_revival") == "two_means_fp32_revival"
    assert checkpoint_name(str(tmp_path / "average.ckpt")) == "average.ckpt"
    assert checkpoint_name("ns/repo") == "ns/repo" and checkpoint_name(None) is None


def test_an_export_names_the_parent_and_the_measured_model(registry, tmp_path, capsys):
    first = fake_run(tmp_path / "machine" / "runs" / "first_stage", seed=1)
    second = fake_run(tmp_path / "machine" / "runs" / "second_stage", seed=2)
    ckpt = second / "checkpoints" / "best.ckpt"
    saved = torch.load(ckpt, weights_only=True)
    saved["hyper_parameters"]["init_from"] = str(first)  # trained on from the first run
    torch.save(saved, ckpt)
    corpus = pg19mini_test_books(tmp_path / "data", (300, 200, 50))
    named, unnamed = tmp_path / "named", tmp_path / "unnamed"
    for out, extra in ((named, ["--name", NAME]), (unnamed, [])):
        main(["evaluate", str(second), "--by-position", "--bucket", "64", "--data-dir",
              str(corpus), "--out-dir", str(out), *extra])  # fmt: skip
    assert json.loads((named / "by_position.json").read_text())["source"] == NAME
    assert f"`{NAME}` on pg19mini test" in (named / "by_position.md").read_text()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # measured under its name: published without a warning
        folder = export_run(second, registry.shipped_dir / NAME, name=NAME, recipe=RECIPE,
                            metrics=[METRIC], by_position=named)  # fmt: skip
    facts = json.loads((folder / "training.json").read_text())
    assert facts["lineage"]["parent"] == "first_stage"  # the run's name, not the folder
    card = (folder / "README.md").read_text()
    assert "| fine-tuned from | `first_stage` |" in card
    entry = register(folder, name=NAME, recipe=str(RECIPE), metrics=[METRIC])
    assert entry.training["parent"] == "first_stage"

    with pytest.warns(UserWarning, match=r"call the model .*second_stage', a local path.*--name"):
        again = export_run(second, tmp_path / "again", name=NAME, recipe=RECIPE,
                           metrics=[METRIC], by_position=unnamed)  # fmt: skip
    card = (again / "README.md").read_text()
    assert f"`{NAME}` on pg19mini test" in card and str(tmp_path / "machine") not in card
