"""The weights are what the config says (issue 77, item 3): a folder whose ``config.json`` was
edited after saving is refused, naming each key, unless the caller overrides the keys explicitly
(one warning); a folder saved before the config was recorded, with nothing to check against, loads
with one warning; a published checkpoint loads without one (``checkpoints.yaml`` binds its files);
integer or non-finite weights are refused, naming the tensor; an absurd config is refused before
anything is allocated, with the estimate."""

import json
import time
import warnings

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file, save_model
from torch import nn

import zoo
from zoo.config import check_memory
from zoo.errors import CheckpointError, ConfigError
from zoo.files import UnverifiedWeightsWarning, sha256_file
from zoo.hub import load_registry
from zoo.models.base import CONFIG_METADATA_KEY
from zoo.models.registry import get_preset, list_models
from zoo.pretrained import ConfigOverrideWarning, UncheckedConfigWarning, load_weights

PUBLISHED = "transformer_lm_small.pg19mini"  # shipped under checkpoints/, saved before the metadata


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


def rewrite_manifest(folder) -> None:
    """Record the folder's files as they are now: an edit the manifest does not catch (a folder
    edited and re-hashed, or a Hub repo whose owner edited both), so the checks here must."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["sha256"] = {name: sha256_file(folder / name) for name in manifest["sha256"]}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def edit_config(folder, **changes) -> None:
    meta = json.loads((folder / "config.json").read_text())
    meta["config"].update(changes)
    (folder / "config.json").write_text(json.dumps(meta))
    rewrite_manifest(folder)


def edit_weights(folder, edit) -> None:
    """Rewrite ``model.safetensors`` with ``edit(tensors, metadata)`` applied, re-hashed."""
    weights = folder / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
        metadata = f.metadata()
    edit(tensors, metadata)
    save_file(tensors, str(weights), metadata=metadata)
    rewrite_manifest(folder)


def saved_before_the_metadata(folder) -> None:
    """The folder as save_pretrained wrote it before it recorded the config in the weights."""
    edit_weights(folder, lambda tensors, metadata: metadata.pop(CONFIG_METADATA_KEY))


def save(preset: str, folder):
    torch.manual_seed(0)
    model = zoo.create_model(preset)
    model.save_pretrained(folder)
    return model


@pytest.fixture
def folder(tmp_path):
    save("transformer_lm_tiny", tmp_path)
    return tmp_path


def test_save_pretrained_records_the_config_in_the_weights(folder):
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        recorded = json.loads(f.metadata()[CONFIG_METADATA_KEY])
    meta = json.loads((folder / "config.json").read_text())
    assert recorded == {"model_type": meta["model_type"], "config": meta["config"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a folder saved now loads without a word
        zoo.from_pretrained(folder)


# the edits the issue names: each keeps every weight's shape, so only the recorded config tells
EDITS = [
    ("transformer_lm_tiny", "n_heads", 8),  # saved 4
    ("transformer_lm_tiny", "activation", "relu"),  # saved gelu
    ("transformer_lm_tiny", "scale_embeddings", True),  # saved False
    ("transformer_lm_tiny", "layer_norm_eps", 1e-6),  # saved 1e-5
    ("transformer_lm_tiny", "attention", "sparsemax"),  # saved dense: the attention mapping
    ("transformer_tiny", "attention_mapping", "entmax15"),  # saved softmax
    ("lstm_attention_tiny", "mapping", "sparsemax"),  # saved softmax
    ("image_transformer_tiny", "attention", "local_1d"),  # saved local_2d
]


@pytest.mark.parametrize("preset, key, value", EDITS, ids=[f"{p}-{k}" for p, k, _ in EDITS])
def test_an_edited_config_is_refused_naming_the_key(tmp_path, preset, key, value):
    saved = getattr(save(preset, tmp_path).config, key)
    edit_config(tmp_path, **{key: value})
    with pytest.raises(CheckpointError) as err:
        zoo.from_pretrained(tmp_path)
    text = one_line(err)
    assert f"{key} {value!r} (saved {saved!r})" in text, text
    assert "config.json disagrees with the config model.safetensors was saved with" in text
    assert f"from_pretrained(..., {key}={value!r})" in text  # how to override it


@pytest.mark.parametrize("preset, key, value", EDITS, ids=[f"{p}-{k}" for p, k, _ in EDITS])
def test_an_explicit_override_loads_with_one_warning(tmp_path, preset, key, value):
    saved = getattr(save(preset, tmp_path).config, key)
    edit_config(tmp_path, **{key: value})
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = zoo.from_pretrained(tmp_path, **{key: value})
    assert getattr(model.config, key) == value
    assert [w.category for w in record] == [ConfigOverrideWarning], [str(w.message) for w in record]
    message = str(record[0].message)
    assert f"{key}={value!r} (saved {saved!r})" in message and "\n" not in message


def test_every_differing_key_is_named_and_an_override_covers_only_its_own(folder):
    edit_config(folder, n_heads=8, activation="relu")
    with pytest.raises(CheckpointError) as err:
        zoo.from_pretrained(folder, n_heads=8)  # activation is still an unexplained edit
    text = one_line(err)
    assert "activation 'relu' (saved 'gelu')" in text and "n_heads" not in text
    restored = zoo.from_pretrained(folder, n_heads=4, activation="gelu")  # the saved values
    assert (restored.config.n_heads, restored.config.activation) == (4, "gelu")


def test_an_unknown_override_is_a_config_error(folder):
    with pytest.raises(ConfigError) as err:
        zoo.from_pretrained(folder, n_head=8)
    assert "Did you mean 'n_heads'?" in one_line(err)


def test_a_folder_saved_before_the_metadata_loads_with_one_warning(folder):
    saved_before_the_metadata(folder)
    edit_config(folder, n_heads=8)  # nothing to check it against: the warning says so
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = zoo.from_pretrained(folder)
    assert model.config.n_heads == 8
    messages = [str(w.message) for w in record]
    assert [w.category for w in record] == [UncheckedConfigWarning], messages
    message = messages[0]
    assert "records no config" in message and "Re-save it with model.save_pretrained" in message
    assert "\n" not in message


def test_an_old_folder_without_a_manifest_either_gets_one_warning(folder):
    saved_before_the_metadata(folder)
    (folder / "manifest.json").unlink()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        zoo.from_pretrained(folder)
    assert len(record) == 1 and issubclass(record[0].category, UnverifiedWeightsWarning)
    message = str(record[0].message)
    assert "no manifest.json" in message and "records no config" in message


def test_a_published_checkpoint_saved_before_the_metadata_loads_without_a_warning():
    shipped = load_registry().shipped_dir / PUBLISHED / "model.safetensors"
    with safe_open(str(shipped), framework="pt") as f:
        assert CONFIG_METADATA_KEY not in f.metadata()  # so this is the registry-bound path
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = zoo.from_pretrained(PUBLISHED)
    assert model.published_name == PUBLISHED


def test_overriding_a_published_checkpoint_warns_once():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = zoo.from_pretrained(PUBLISHED, layer_norm_eps=1e-3)
    assert model.config.layer_norm_eps == 1e-3
    assert [w.category for w in record] == [ConfigOverrideWarning]
    assert "layer_norm_eps=0.001 (saved 1e-05)" in str(record[0].message)


def test_an_exported_checkpoint_records_its_config(published):
    with safe_open(str(published / "model.safetensors"), framework="pt") as f:
        recorded = json.loads(f.metadata()[CONFIG_METADATA_KEY])
    assert recorded["config"] == json.loads((published / "config.json").read_text())["config"]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_weights_are_refused_naming_the_tensor(folder, dtype):
    def to_integers(tensors, metadata):
        tensors["blocks.0.ff.w1.weight"] = (tensors["blocks.0.ff.w1.weight"] * 100).to(dtype)

    edit_weights(folder, to_integers)
    with pytest.raises(CheckpointError) as err:
        zoo.from_pretrained(folder)
    text = one_line(err)
    assert "tensor blocks.0.ff.w1.weight is" in text and "floating-point" in text, text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_naming_the_tensor(folder, value):
    def poison(tensors, metadata):
        tensors["blocks.1.attention.qkv.weight"][3, 5] = value

    edit_weights(folder, poison)
    with pytest.raises(CheckpointError) as err:
        zoo.from_pretrained(folder)
    text = one_line(err)
    assert "tensor blocks.1.attention.qkv.weight holds 1 NaN or infinite value(s)" in text, text


def test_bf16_weights_load(folder):
    zoo.from_pretrained(folder, dtype=torch.bfloat16).save_pretrained(folder)
    assert zoo.from_pretrained(folder).dtype == torch.bfloat16  # as saved (issue 78)
    model = zoo.from_pretrained(folder, dtype=torch.float32)
    assert model.dtype == torch.float32  # built in fp32, the bf16 values cast up


class WithCounter(nn.Module):
    """A module with a legitimately integer buffer (a step counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros(2, dtype=torch.int64))


def test_integer_buffers_still_load_and_float_ones_there_are_refused(tmp_path):
    source = WithCounter()
    source.steps += torch.tensor([7, 9])
    save_model(source, str(tmp_path / "ok.safetensors"))
    target = WithCounter()
    load_weights(target, tmp_path / "ok.safetensors")
    assert target.steps.tolist() == [7, 9] and torch.equal(target.proj.weight, source.proj.weight)
    tensors = dict(source.state_dict()) | {"steps": torch.tensor([7.5, 9.0])}
    save_file(tensors, str(tmp_path / "bad.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_weights(WithCounter(), tmp_path / "bad.safetensors")
    assert "tensor steps is F32 where the model's is torch.int64" in one_line(err)


@pytest.fixture
def never_built(monkeypatch):
    """Fail the test if a model's constructor runs: the refusal must come before allocation."""
    cls = get_preset("transformer_lm_tiny").model_cls

    def constructor(self, config):
        raise AssertionError("the model was constructed before the config was checked")

    monkeypatch.setattr(cls, "__init__", constructor)


def assert_estimate(text: str, size: str) -> None:
    assert "a model of this config needs about" in text and "GiB" in text, text
    assert "GiB available" in text and size in text, text


@pytest.mark.parametrize(
    "overrides, size",
    [({"n_layers": 10**6}, "n_layers 1000000"), ({"d_model": 10**6}, "d_model 1000000")],
)
def test_create_model_refuses_an_absurd_config_before_allocating(never_built, overrides, size):
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        zoo.create_model("transformer_lm_tiny", **overrides)
    assert time.perf_counter() - start < 2.0
    assert_estimate(one_line(err), size)


@pytest.mark.parametrize(
    "change, size",
    [({"n_layers": 10**6}, "n_layers 1000000"), ({"d_model": 10**6}, "d_model 1000000")],
)
def test_an_absurd_config_json_is_refused_before_allocating(folder, never_built, change, size):
    saved_before_the_metadata(folder)  # nothing recorded: only the memory check stands
    edit_config(folder, **change)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncheckedConfigWarning)
        with pytest.raises(ConfigError) as err:
            zoo.from_pretrained(folder)
    assert time.perf_counter() - start < 2.0
    text = one_line(err)
    assert_estimate(text, size)
    assert str(folder / "config.json") in text


def test_an_absurd_override_is_refused_before_allocating(folder, never_built):
    with pytest.raises(ConfigError) as err:
        zoo.from_pretrained(folder, n_layers=10**6)
    assert_estimate(one_line(err), "n_layers 1000000")


def test_a_float_for_an_integer_field_is_refused(folder):
    with pytest.raises(ConfigError, match=r"n_layers=1000000.0 must be an integer"):
        zoo.create_model("transformer_lm_tiny", n_layers=1e6)
    saved_before_the_metadata(folder)
    edit_config(folder, d_model=1e6)  # JSON's 1e6 is a float
    with pytest.warns(UncheckedConfigWarning), pytest.raises(CheckpointError) as err:
        zoo.from_pretrained(folder)
    assert "d_model=1000000.0 must be an integer" in one_line(err)


def test_the_check_uses_the_memory_available(monkeypatch):
    """A model that fits here (0.5 MB) is refused on a machine with 64 KiB free: the estimate is
    compared with what is available, not with a constant."""
    zoo.create_model("transformer_lm_tiny")
    monkeypatch.setattr("zoo.config.available_memory", lambda device="cpu": 2**16)
    with pytest.raises(ConfigError) as err:
        zoo.create_model("transformer_lm_tiny")
    assert "0.0 GiB available" in one_line(err)


@pytest.mark.parametrize("name", list_models())
def test_the_estimate_is_close_below_the_true_count(name):
    """The estimate from the config alone against the parameters a model of it has (built on the
    meta device): never more than 2% above (so no config that fits is refused), not far below."""
    preset = get_preset(name)
    with torch.device("meta"):
        model = preset.model_cls(preset.config)
    actual = sum(p.numel() for p in model.parameters())
    estimate, activations = preset.config.memory_estimate()
    assert 0.4 * actual <= estimate <= 1.02 * actual, (estimate, actual)
    assert activations > 0
    check_memory(preset.config, name, "meta")  # meta allocates nothing: never refused


def test_a_published_checkpoints_shipped_copy_loaded_by_path_needs_no_warning():
    """checkpoints/<name>/ loaded by path (transformers' habit, checkpoint_folder): its manifest's
    sha256 are the registry's, which binds config.json and the weights: nothing to warn about."""
    import warnings

    from zoo import from_pretrained
    from zoo.hub import load_registry

    folder = load_registry().shipped_dir / "transformer_lm_small.pg19mini"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_pretrained(folder)
