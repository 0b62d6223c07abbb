import json

import pytest
import torch

import zoo
from zoo.errors import CheckpointError


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = zoo.create_model("transformer_lm_tiny")
    model.save_pretrained(tmp_path)
    return model, tmp_path


def test_config_json_is_readable(saved):
    _, path = saved
    meta = json.loads((path / "config.json").read_text())
    assert meta["model_type"] == "transformer_lm"
    assert meta["config"]["d_model"] == 64


def test_tied_weights_are_stored_once_and_restored_tied(saved):
    from safetensors import safe_open

    _, path = saved
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert ("lm_head.weight" in names) != ("tok_emb.weight" in names)
    loaded = zoo.from_pretrained(path)
    assert loaded.lm_head.weight is loaded.tok_emb.weight


def test_dtype_and_device(saved):
    _, path = saved
    model = zoo.from_pretrained(path, device="cpu", dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_truncated_weights_give_a_checkpoint_error(saved):
    _, path = saved
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        zoo.from_pretrained(path)


def test_garbage_weights_give_a_checkpoint_error(saved):
    _, path = saved
    (path / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match="safetensors"):
        zoo.from_pretrained(path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"d_model": 128}, "does not match.*shape mismatches"),  # wider than the weights
        ({"n_layers": 1}, "unexpected tensors"),  # fewer layers than the weights
        ({"n_layers": 3}, "lacks tensors"),  # more layers than the weights
        ({"tie_weights": False}, "lacks tensors.*(tok_emb|lm_head)"),
        ({"n_layer": 1}, "unknown TransformerConfig key.*n_layer"),
    ],
)
def test_config_that_does_not_match_the_weights(saved, change, message):
    _, path = saved
    meta = json.loads((path / "config.json").read_text())
    meta["config"].update(change)
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=message):
        zoo.from_pretrained(path)


def test_missing_directory_and_missing_files(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        zoo.from_pretrained(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="config.json"):
        zoo.from_pretrained(tmp_path)


def test_failed_save_keeps_the_previous_checkpoint(saved, monkeypatch):
    model, path = saved
    before = (path / "model.safetensors").read_bytes()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("safetensors.torch.save_model", boom)
    with pytest.raises(KeyboardInterrupt):
        model.save_pretrained(path)
    assert (path / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
