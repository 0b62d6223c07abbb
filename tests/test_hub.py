"""Published checkpoints end to end against the local Hub server: export, register, push, pull,
from_pretrained's verification and fallbacks, and the bad inputs of the checkpoints issue."""

import json
import shutil
from pathlib import Path

import huggingface_hub.constants as hf_constants
import pytest
import torch
import yaml
from fakes import fake_run

import zoo
from zoo.errors import (
    ChecksumError,
    ConfigError,
    HubError,
    RegistryError,
    UnknownModelError,
)
from zoo.hub import (
    Metric,
    export_run,
    load_registry,
    pin_revision,
    pull,
    push,
    register,
    sha256_file,
)
from zoo.tasks import CausalLM

REPO = Path(__file__).resolve().parents[1]
NAME = "transformer_lm_tiny.pg19mini"
REPO_ID = "attention-zoo/transformer_lm_tiny.pg19mini"
METRIC = Metric("bits_per_byte", 7.9, "pg19mini", "test", 4, 1020, "32-true", context=256)


@pytest.fixture
def published(registry, tmp_path) -> Path:
    """The tiny checkpoint exported and registered (shipped copy, not pushed)."""
    run = fake_run(tmp_path / "run")
    recipe = "recipes/transformer_lm/pg19mini.yaml"
    folder = export_run(
        run, registry.shipped_dir / NAME, name=NAME, recipe=REPO / recipe, metrics=[METRIC]
    )
    register(folder, name=NAME, recipe=recipe, metrics=[METRIC])
    return folder


def reference_state(folder: Path) -> dict:
    return zoo.from_pretrained(folder).state_dict()


def assert_same_weights(model, folder: Path) -> None:
    ref = reference_state(folder)
    for k, v in model.state_dict().items():
        assert torch.equal(v, ref[k]), k


def test_export_writes_the_published_files_and_the_registry_entry(published, registry):
    assert sorted(p.name for p in published.iterdir()) == [
        "README.md", "config.json", "manifest.json", "model.safetensors", "recipe.yaml",
        "training.json",
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
    loaded = zoo.from_pretrained(out)
    assert next(loaded.parameters()).dtype == torch.float32  # bf16 values, loaded as fp32
    weights = saved / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + bytes([weights.read_bytes()[-1] ^ 1]))
    with pytest.raises(ChecksumError):
        export_run(saved, tmp_path / "out2", name=NAME, recipe=recipe, metrics=[METRIC])


def test_from_pretrained_uses_the_shipped_copy_offline(published, monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    model = zoo.from_pretrained(NAME, dtype=torch.float64)
    assert not model.training
    assert next(model.parameters()).dtype == torch.float64
    assert zoo.from_pretrained("transformer_lm_tiny").config == model.config  # bare model name


def test_unknown_name_suggests_close_matches(published):
    with pytest.raises(UnknownModelError, match="Did you mean 'transformer_lm_tiny.pg19mini'"):
        zoo.from_pretrained("transformer_lm_tiny.pg19mimi")


def test_tampered_shipped_file_without_hub_copy_is_a_checksum_error(published):
    weights = published / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    registered = load_registry().get(NAME).files["model.safetensors"]["sha256"]
    with pytest.raises(ChecksumError) as err:
        zoo.from_pretrained(NAME)
    message = str(err.value)
    assert "model.safetensors" in message and registered in message
    assert sha256_file(weights) in message and "nothing was loaded" in message


def test_truncated_shipped_file_is_a_checksum_error(published):
    weights = published / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ChecksumError, match="model.safetensors"):
        zoo.from_pretrained(NAME)


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


def test_tampered_shipped_copy_falls_back_to_the_pinned_hub_revision(published, hub, tmp_path):
    keep = tmp_path / "keep"
    shutil.copytree(published, keep)
    pin_revision(published, REPO_ID, push(published, REPO_ID))
    (published / "model.safetensors").write_bytes(b"not the weights")
    with pytest.warns(UserWarning, match="differs from checkpoints.yaml"):
        model = zoo.from_pretrained(NAME)
    assert_same_weights(model, keep)


def test_tampered_hub_file_is_refused_and_evicted_from_the_cache(published, hub, tmp_path):
    from hub_server import Blob

    sha = push(published, REPO_ID)
    pin_revision(published, REPO_ID, sha)
    good = hub.repos[REPO_ID].commits[sha]["model.safetensors"].data
    hub.repos[REPO_ID].commits[sha]["model.safetensors"] = Blob(good[:-8] + b"\0" * 8, lfs=True)
    shutil.rmtree(published)
    with pytest.raises(ChecksumError) as err:
        zoo.from_pretrained(NAME)
    assert "model.safetensors" in str(err.value) and err.value.expected in str(err.value)
    cache = Path(hf_constants.HF_HUB_CACHE)
    cached = [p for p in cache.rglob("model.safetensors*") if p.is_file()]
    assert cached == []  # the bad download is not left for the next (offline) load


def test_offline_with_nothing_cached_says_what_to_do(published, hub, monkeypatch):
    pin_revision(published, REPO_ID, push(published, REPO_ID))
    shutil.rmtree(published)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match="HF_HUB_OFFLINE=1 is set.*zoo pull transformer_lm_tiny"):
        zoo.from_pretrained(NAME)


def test_interrupted_downloads_resume(published, hub, tmp_path, monkeypatch):
    pin_revision(published, REPO_ID, push(published, REPO_ID))
    shutil.rmtree(published)
    entry = load_registry().get(NAME)
    registered = entry.files["model.safetensors"]["sha256"]
    # the client writes whole chunks (10 MB on the Hub); small ones make a 0.5 MB file resumable
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 1000)
    # the connection drops twice: the client resumes from where each attempt stopped
    hub.cut_downloads["model.safetensors"] = [1000, 3000]
    snapshot = pull(NAME)
    assert [r for r in hub.ranges if r] == ["bytes=1000-", "bytes=4000-"]
    assert sha256_file(snapshot / "model.safetensors") == registered

    # every attempt drops: the client gives up, and nothing is cached under the file's name
    cache = tmp_path / "other-cache"
    hub.cut_downloads["model.safetensors"] = [2000] + [0] * 10
    with pytest.raises(HubError, match="interrupted.*run the same command again"):
        pull(NAME, cache_dir=cache)
    assert not list(cache.rglob("snapshots/*/model.safetensors"))
    assert not [p for p in cache.rglob("blobs/*") if p.stat().st_size >= 2000]  # no partial blob
    snapshot = pull(NAME, cache_dir=cache)  # the next run completes and verifies
    assert sha256_file(snapshot / "model.safetensors") == registered


def test_push_without_token_or_rights_reports_the_refusal(published, hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(HubError, match="401.*HF_TOKEN"):
        push(published, REPO_ID)
    hub.tokens["read-only"] = set()
    with pytest.raises(HubError, match="403.*cannot write to attention-zoo"):
        push(published, REPO_ID, token="read-only")
    assert REPO_ID not in hub.repos


def test_repo_id_outside_the_registry_loads_unverified(published, hub):
    push(published, "someone/tiny")
    model = zoo.from_pretrained("someone/tiny@main")
    assert_same_weights(model, published)
    with pytest.raises(HubError, match="neither a local directory"):
        zoo.from_pretrained("someone/missing")


def test_registry_names_are_pinned(published):
    with pytest.raises(ConfigError, match="pinned"):
        zoo.from_pretrained(NAME, revision="main")


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda e: e["files"]["model.safetensors"].update(sha256="abc"), "sha256"),
        (lambda e: e.pop("recipe"), "'recipe' is a required property"),
        (lambda e: e.update(colour="blue"), "colour"),
        (lambda e: e["metrics"][0].update(split="Dev set"), "metrics.0.split"),
        (lambda e: e.update(task="regression"), "task"),
        (lambda e: e["hub"].update(revision="main"), "hub.revision"),
    ],
)
def test_schema_violations_name_the_key(published, registry, edit, where):
    data = yaml.safe_load(registry.path.read_text())
    edit(data["checkpoints"][NAME])
    registry.path.write_text(yaml.safe_dump(data))
    with pytest.raises(RegistryError, match="fails schema validation") as err:
        load_registry()
    assert where in str(err.value)


def test_init_from_starts_fine_tuning_from_published_weights(published):
    module = CausalLM(init_from=NAME, model_config={"dropout": 0.1})
    assert module.model.training and module.model.config.dropout == 0.1
    assert_same_weights(module.model, published)
    with pytest.raises(ConfigError, match="changes the shapes"):
        CausalLM(init_from=NAME, model_config={"d_model": 32, "n_heads": 2})


def test_push_a_run_exports_it_on_the_fly(registry, hub, tmp_path):
    run = fake_run(tmp_path / "run")
    recipe = REPO / "recipes/transformer_lm/pg19mini.yaml"
    sha = push(run, REPO_ID, name=NAME, recipe=recipe, metrics=[METRIC])
    files = hub.repos[REPO_ID].commits[sha]
    assert set(files) == {".gitattributes", "config.json", "model.safetensors", "README.md",
                          "recipe.yaml", "training.json", "manifest.json"}  # fmt: skip
    assert b"model-index" in files["README.md"].data
    with pytest.raises(ConfigError, match="not an exported folder"):
        push(run, REPO_ID)  # a run needs its name and recipe


def test_card_says_when_training_windows_are_shorter_than_the_context():
    from zoo.hub.publish import _training_windows

    short = _training_windows({"batch_size": 8, "seq_len": 1024}, 4096)
    assert short.startswith("8 × 1,024 bytes per optimizer step (shorter than the context, 4,096")
    assert "never trained" in short
    assert _training_windows({"batch_size": 2, "seq_len": 4096}, 4096) == (
        "2 × 4,096 bytes per optimizer step"
    )
    assert _training_windows({}, 4096) == "unknown"


def test_card_lists_each_training_stage():
    from zoo.hub.publish import _training_windows

    stages = [
        {"recipe": "a.yaml", "optimizer_steps": 3840, "batch_size": 8, "seq_len": 1024},
        {"recipe": "b.yaml", "optimizer_steps": 200, "batch_size": 2, "seq_len": 4096},
    ]
    text = _training_windows({"batch_size": 2, "seq_len": 4096}, 4096, stages)
    assert text.startswith("8 × 1,024 bytes per optimizer step (shorter than the context")
    assert text.endswith(
        "for 3,840 steps (`a.yaml`); then 2 × 4,096 bytes per optimizer step for 200 steps "
        "(`b.yaml`)"
    )
