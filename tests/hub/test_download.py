"""Resolving and verifying published checkpoints against the local Hub server: the shipped copy,
the pinned Hub revision, tampered and truncated files, offline use, resumed downloads, the registry
schema, and fine-tuning from published weights."""

import shutil
from pathlib import Path

import huggingface_hub.constants as hf_constants
import pytest
import torch
import yaml
from published import NAME, REPO_ID, assert_same_weights

import zoo
from zoo.errors import (
    ChecksumError,
    ConfigError,
    HubError,
    RegistryError,
    UnknownModelError,
)
from zoo.hub import load_registry, pull, sha256_file
from zoo.publishing import pin_revision, push
from zoo.tasks import CausalLM


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


def test_local_files_only_never_asks_the_hub(published, hub, tmp_path):
    pin_revision(published, REPO_ID, push(published, REPO_ID))
    keep = tmp_path / "keep"
    shutil.copytree(published, keep)
    shutil.rmtree(published)
    asked = len(hub.requests)
    with pytest.raises(
        HubError, match="local_files_only=True was passed.*without local_files_only"
    ):
        zoo.from_pretrained(NAME, local_files_only=True)
    assert len(hub.requests) == asked  # nothing was requested
    pull(NAME)  # now cached
    asked = len(hub.requests)
    model = zoo.from_pretrained(NAME, local_files_only=True)
    assert len(hub.requests) == asked
    assert_same_weights(model, keep)
    with pytest.raises(ConfigError, match="pass one of them"):
        zoo.from_pretrained(NAME, local_files_only=True, force_download=True)


def test_the_token_given_is_the_one_sent(published, hub, monkeypatch):
    pin_revision(published, REPO_ID, push(published, REPO_ID))
    shutil.rmtree(published)
    monkeypatch.delenv("HF_TOKEN")
    hub.read_auth.clear()
    zoo.from_pretrained(NAME, token="reader-token")
    assert hub.read_auth and set(hub.read_auth) == {"Bearer reader-token"}


def _cached_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file() and "/.locks/" not in str(p)]


@pytest.mark.parametrize("name", [NAME, REPO_ID])  # published (verified) and a bare repo id
def test_a_rejected_token_is_one_line_and_caches_nothing(published, hub, tmp_path, name):
    pin_revision(published, REPO_ID, push(published, REPO_ID))
    keep = tmp_path / "keep"
    shutil.copytree(published, keep)
    shutil.rmtree(published)
    hub.check_read_tokens = True  # as the Hub: an invalid token is refused, even for a public repo
    with pytest.raises(HubError) as err:
        zoo.from_pretrained(name, token="hf_not-a-token")
    message = str(err.value)
    assert "\n" not in message and "401" in message and "token=False" in message
    assert not _cached_files(Path(hf_constants.HF_HUB_CACHE))
    assert_same_weights(zoo.from_pretrained(name, token="test-token"), keep)  # a valid one loads


def test_a_wheel_without_network_fails_fast_and_names_no_shipped_copy(
    published, hub, registry, monkeypatch
):
    """HF_HUB_OFFLINE unset and no network: the error comes at once (not after the client's
    23 s of retries) and says how to fix it; a wheel has no shipped copy, so none is named."""
    import socket
    import time

    pin_revision(published, REPO_ID, push(published, REPO_ID))
    shutil.rmtree(registry.shipped_dir)  # a wheel: no checkpoints/ beside checkpoints.yaml
    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    start = time.perf_counter()
    with pytest.raises(HubError) as err:
        zoo.from_pretrained(NAME)
    assert time.perf_counter() - start < 5
    message = str(err.value)
    assert "could not be reached" in message and f"zoo pull {NAME}" in message
    assert "set HF_HUB_OFFLINE=1 to fail at once" in message
    assert "shipped" not in message and "checkpoints/" not in message
    registry.shipped_dir.mkdir()  # a clone whose copy of this checkpoint was deleted
    with pytest.raises(HubError, match=f"git checkout -- checkpoints/{NAME}"):
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


def test_repo_id_outside_the_registry_loads_unverified(published, hub):
    push(published, "someone/tiny")
    model = zoo.from_pretrained("someone/tiny@main")
    assert_same_weights(model, published)
    with pytest.raises(HubError, match="neither a local directory"):
        zoo.from_pretrained("someone/missing")


def test_registry_names_are_pinned(published):
    with pytest.raises(ConfigError, match="pinned"):
        zoo.from_pretrained(NAME, revision="main")


def test_the_advice_for_another_revision_is_not_circular(published, hub):
    """A published name loads only its pinned revision; the error's advice (the repo id with
    the revision) loads another revision, unverified, and a revision the Hub lacks says so."""
    pinned = push(published, REPO_ID)
    pin_revision(published, REPO_ID, pinned)
    newer = push(published, REPO_ID)  # a later commit of the same repo
    with pytest.raises(ConfigError) as err:
        zoo.from_pretrained(NAME, revision=newer)
    advice = f"from_pretrained({REPO_ID!r}, revision={newer!r})"
    assert pinned in str(err.value) and advice in str(err.value)
    assert_same_weights(zoo.from_pretrained(REPO_ID, revision=newer), published)  # as advised
    cached = _cached_files(Path(hf_constants.HF_HUB_CACHE))
    with pytest.raises(HubError) as err:
        zoo.from_pretrained(REPO_ID, revision="does-not-exist")
    assert _cached_files(Path(hf_constants.HF_HUB_CACHE)) == cached  # nothing written
    message = str(err.value)
    assert "\n" not in message
    assert "has no revision 'does-not-exist'" in message and pinned in message
    assert f"from_pretrained({NAME!r}) loads it" in message


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
