"""zoo push against the local Hub server: pinning, refusals, exporting a run on the fly."""

import shutil

import pytest
from fakes import fake_run
from published import METRIC, NAME, REPO, REPO_ID, assert_same_weights

import zoo
from zoo.errors import (
    ConfigError,
    HubError,
)
from zoo.hub import load_registry, pull
from zoo.publishing import pin_revision, push


def test_push_pin_then_download_verified_from_the_hub(published, hub, tmp_path):
    sha = push(published, REPO_ID)
    files = hub.repos[REPO_ID].commits[sha]
    assert set(files) >= {"config.json", "model.safetensors", "README.md", "recipe.yaml"}
    assert files["model.safetensors"].data == (published / "model.safetensors").read_bytes()
    assert pin_revision(published, REPO_ID, sha).revision == sha
    assert load_registry().get(NAME).revision == sha

    keep = tmp_path / "keep"
    shutil.copytree(published, keep)
    shutil.rmtree(published)  # no shipped copy: from_pretrained goes to the Hub
    model = zoo.from_pretrained(NAME)
    assert_same_weights(model, keep)
    assert any(path.endswith("/model.safetensors") for _, path in hub.requests)

    snapshot = pull(NAME)  # every file, into the HF cache
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(load_registry().get(NAME).files)


def test_push_without_token_or_rights_reports_the_refusal(published, hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(HubError, match="401.*HF_TOKEN"):
        push(published, REPO_ID)
    hub.tokens["read-only"] = set()
    with pytest.raises(HubError, match="403.*cannot write to attention-zoo"):
        push(published, REPO_ID, token="read-only")
    assert REPO_ID not in hub.repos


def test_push_a_run_exports_it_on_the_fly(registry, hub, tmp_path):
    run = fake_run(tmp_path / "run")
    recipe = REPO / "recipes/transformer_lm/pg19mini.yaml"
    sha = push(run, REPO_ID, name=NAME, recipe=recipe, metrics=[METRIC])
    files = hub.repos[REPO_ID].commits[sha]
    assert set(files) == {".gitattributes", "config.json", "model.safetensors", "README.md",
                          "recipe.yaml", "training.json", "manifest.json", "golden.json"}  # fmt: skip
    assert b"model-index" in files["README.md"].data
    with pytest.raises(ConfigError, match="not an exported folder"):
        push(run, REPO_ID)  # a run needs its name and recipe


@pytest.mark.parametrize(
    "repo_id", ["attention zoo/tiny", "a/b/c", "ns/tiny--v2", "ns/.tiny", "ns/tiny!"]
)
def test_an_illegal_repo_id_is_a_one_line_error_before_anything_is_sent(
    published, repo_id, capsys, monkeypatch
):
    """Checked with huggingface_hub's own validator, up front: no HFValidationError traceback."""
    import importlib

    from zoo.cli import main
    from zoo.publishing.push import checked_repo_id

    module = importlib.import_module("zoo.hub.upload")
    monkeypatch.setattr(module, "HfApi", None)  # nothing may reach the Hub
    with pytest.raises(SystemExit) as e:
        main(["push", str(published), "--repo-id", repo_id])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"--repo-id {repo_id!r} is not a valid repo id: a Hub repo id is 'namespace/name'" in err
    with pytest.raises(ConfigError, match="not a valid repo id"):
        push(published, repo_id)
    assert checked_repo_id("you/transformer_lm_tiny.pg19mini-v2")  # a legal one passes
