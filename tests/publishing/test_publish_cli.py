"""The publishing recipe through the `zoo` command, against the local Hub server:
fit -> evaluate -> export --register -> push --update-registry -> pull -> evaluate --registered ->
fine-tune with --model.init_from; and `zoo list`."""

import json
import shutil
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.hub import load_registry
from zoo.hub.registry import Registry
from zoo.lineage import git_commit

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "transformer_lm" / "pg19mini.yaml")
FAST = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
NAME = "transformer_lm_tiny.pg19mini"
REPO_ID = "attention-zoo/transformer_lm_tiny.pg19mini"


def test_publish_then_reproduce_through_the_cli(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the recipe writes under ./runs
    monkeypatch.setenv("COLUMNS", "250")  # rich tables on one line
    registry = tmp_path / "checkpoints.yaml"
    Registry(registry, {}).save()
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(registry))
    run = "runs/transformer_lm/pg19mini"

    main(["fit", "--config", RECIPE, "--model.init_args.model=transformer_lm_tiny",
          "--trainer.max_steps=2", "--trainer.val_check_interval=2",
          "--trainer.limit_val_batches=1", *FAST])  # fmt: skip
    main(["evaluate", run, "--windows", "4", "--out", f"{run}/results.json"])
    main(["evaluate", run, "--split", "valid", "--windows", "2", "--out", f"{run}/results.json"])
    results = json.loads(Path(run, "results.json").read_text())
    assert [(r["split"], r["windows"], r["targets"]) for r in results] == [
        ("test", 4, 4 * 128), ("valid", 2, 2 * 128)
    ]  # fmt: skip
    main(["export", run, "--name", NAME, "--recipe", RECIPE, "--register"])
    shipped = tmp_path / "checkpoints" / NAME
    assert (shipped / "README.md").is_file()
    assert load_registry().get(NAME).revision is None
    facts = json.loads((shipped / "training.json").read_text())
    assert facts["optimizer_steps"] == 2 and facts["tokens"] == 2 * 16 * 128
    lineage = facts["lineage"]  # recorded by TrainingSummary during the fit
    assert lineage["data"]["dataset"] == "pg19mini" and lineage["data"]["splits"] == [
        "train",
        "valid",
    ]
    assert len(lineage["data"]["sha256"]) == 64 and lineage["parent"] is None
    assert lineage["git_commits"] == [git_commit()] and lineage["export_commit"] == git_commit()
    assert f"`{lineage['data']['sha256']}`" in (shipped / "README.md").read_text()

    main(["push", str(shipped), "--repo-id", REPO_ID, "--update-registry"])
    sha = load_registry().get(NAME).revision
    assert sha == hub.repos[REPO_ID].refs["main"]
    capsys.readouterr()

    main(["list"])
    assert "repository copy" in capsys.readouterr().out
    shutil.rmtree(shipped)  # now only the Hub has it
    main(["list"])
    assert f"Hub: {REPO_ID}@{sha[:7]}" in capsys.readouterr().out
    main(["pull", NAME])
    assert "all files verified" in capsys.readouterr().out
    main(["evaluate", NAME, "--registered"])  # exits non-zero if a metric does not reproduce
    out = capsys.readouterr().out
    assert "registered vs measured" in out and "+0.0000" in out

    # the recipe's model (transformer_lm_small) is not this tiny checkpoint's: say so ...
    with pytest.raises(SystemExit) as e:
        main(["fit", "--config", RECIPE, "--model.init_from", NAME, "--trainer.max_steps=1"])
    assert e.value.code == 2 and "is not the model transformer_lm_small" in capsys.readouterr().err
    # ... and fine-tune the checkpoint's own architecture when asked to
    main(["fit", "--config", RECIPE, "--model.init_from", NAME, "--model.model", "null",
          "--trainer.max_steps=1", "--trainer.limit_val_batches=0",
          "--trainer.default_root_dir=ft", *FAST])  # fmt: skip


def test_list_shows_the_repository_checkpoints(capsys, monkeypatch):
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    monkeypatch.setenv("COLUMNS", "250")
    main(["list"])
    out = capsys.readouterr().out
    entries = load_registry(REPO / "checkpoints.yaml").entries.values()
    for e in entries:  # the retired ones only with --all
        assert (e.name in out) == (e.retired is None), e.name
    main(["list", "--all"])
    out = capsys.readouterr().out
    assert all(e.name in out for e in entries)
    main(["list", "--markdown"])
    assert capsys.readouterr().out.startswith("| checkpoint | family |")


def test_unknown_checkpoint_is_a_clear_cli_error(capsys, monkeypatch):
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["generate", "--checkpoint", "transformer_lm_smal.pg19mini"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Did you mean" in err and "Traceback" not in err
