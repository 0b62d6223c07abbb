import json
import warnings

import pytest
import torch

import zoo
from zoo.errors import CheckpointError, ChecksumError, ConfigError, UnknownModelError
from zoo.files import UnverifiedWeightsWarning, explicit_path, sha256_file
from zoo.pretrained import find_checkpoint


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = zoo.create_model("transformer_lm_tiny")
    model.save_pretrained(tmp_path)
    return model, tmp_path


def without_recorded_config(weights) -> None:
    """Rewrite ``weights`` as save_pretrained wrote it before it recorded the config in the
    safetensors metadata (the tensors and the tied-weight entries kept)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(weights), framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
        metadata = f.metadata()
    del metadata["zoo_config"]
    save_file(tensors, str(weights), metadata=metadata)


@pytest.fixture
def unverified(saved):
    """A folder without manifest.json whose weights record no config (saved before either
    existed): loads with one warning, and the checks inside the loader still stop whatever is
    wrong with it."""
    (saved[1] / "manifest.json").unlink()
    without_recorded_config(saved[1] / "model.safetensors")
    with pytest.warns(UnverifiedWeightsWarning, match="no manifest.json") as record:
        yield saved
    assert len(record) == 1, [str(w.message) for w in record]


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


@pytest.mark.parametrize(
    "option, message, fix",
    [
        (
            {"device": "cuda"},
            "device='cuda' is not available: this machine has no cuda device",
            "device='cpu'",
        ),
        ({"device": "cpu:x"}, "device='cpu:x' is not a device", "use 'cpu', 'cuda'"),
        ({"dtype": torch.int8}, "dtype=torch.int8 is not a dtype to", "torch.bfloat16"),
    ],
)
def test_device_and_dtype_are_checked_before_loading(saved, monkeypatch, option, message, fix):
    """A CPU-only machine asked for CUDA, or an integer dtype: a one-line error naming the value
    and the fix, before any file is read (not a torch traceback after loading)."""
    import zoo.pretrained

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU-only build

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were read before the options were checked")

    monkeypatch.setattr(zoo.pretrained, "load_weights", no_loading)
    with pytest.raises(ConfigError) as err:
        zoo.from_pretrained(saved[1], **option)
    text = str(err.value)
    assert message in text and fix in text and "\n" not in text


def test_truncated_weights_give_a_checkpoint_error(unverified):
    _, path = unverified
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        zoo.from_pretrained(path)


def test_garbage_weights_give_a_checkpoint_error(unverified):
    _, path = unverified
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
def test_config_that_does_not_match_the_weights(unverified, change, message):
    _, path = unverified
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
    names = ["config.json", "manifest.json", "model.safetensors"]
    assert sorted(p.name for p in path.iterdir()) == names


def test_a_saved_folder_records_and_checks_every_file(saved):
    model, path = saved
    manifest = json.loads((path / "manifest.json").read_text())["sha256"]
    assert manifest == {f: sha256_file(path / f) for f in ("config.json", "model.safetensors")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a verified folder loads without a warning
        loaded = zoo.from_pretrained(path)
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


def test_one_flipped_byte_in_the_weights_is_a_checksum_error(saved):
    _, path = saved
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside a tensor: safetensors alone would load it silently
    weights.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="model.safetensors: its manifest.json records") as e:
        zoo.from_pretrained(path)
    assert e.value.actual == sha256_file(weights) != e.value.expected


def test_an_edited_config_is_a_checksum_error(saved):
    _, path = saved
    meta = json.loads((path / "config.json").read_text())
    meta["config"]["n_heads"] = 8  # still matches every weight's shape
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ChecksumError, match="config.json"):
        zoo.from_pretrained(path)


def test_a_file_added_after_saving_or_a_broken_manifest_is_an_error(saved):
    _, path = saved
    (path / "tokenizer.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"\['tokenizer.json'\].*does not list"):
        zoo.from_pretrained(path)
    (path / "tokenizer.json").unlink()
    (path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="not a valid manifest"):
        zoo.from_pretrained(path)


@pytest.mark.parametrize(
    "source, explicit",
    [
        ("transformer_lm_small.pg19mini", False), ("ns/repo", False), ("ns/repo@main", False),
        ("./transformer_lm_small.pg19mini", True), ("/abs/dir", True), ("~/dir", True),
        ("runs/family/data", True), ("best.ckpt", True), (".", True), ("my_model/", True),
    ],
)  # fmt: skip
def test_explicit_paths(source, explicit):
    assert (explicit_path(source) is not None) == explicit


def test_a_look_alike_folder_never_replaces_a_published_checkpoint(
    saved, tmp_path_factory, monkeypatch
):
    """A folder in the working directory named like a published checkpoint is not loaded by
    that name (only as ./name); an unregistered bare name with a folder says how to load it."""
    _, path = saved
    tmp_path = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(tmp_path)
    path.rename(tmp_path / "transformer_lm_small.pg19mini")  # a tiny model, d_model 64
    published = zoo.from_pretrained("transformer_lm_small.pg19mini")
    assert published.config.d_model == 256
    local = zoo.from_pretrained("./transformer_lm_small.pg19mini")
    assert local.config.d_model == 64
    run = tmp_path / "transformer_lm_small.pg19mini" / "checkpoints"
    run.mkdir()
    (run / "best.ckpt").write_bytes(b"a run directory with the same name")
    assert find_checkpoint("transformer_lm_small.pg19mini") is None  # `zoo evaluate NAME`
    assert find_checkpoint("./transformer_lm_small.pg19mini").resolve() == run / "best.ckpt"
    (tmp_path / "transformer_lm_small.pg19mini").rename(tmp_path / "my_model")
    with pytest.raises(UnknownModelError, match="pass './my_model'"):
        zoo.from_pretrained("my_model")
    (tmp_path / "runs").mkdir()
    (tmp_path / "my_model").rename(tmp_path / "runs" / "my_model")
    with pytest.raises(ConfigError, match="pass './runs/my_model' to use the folder"):
        zoo.from_pretrained("runs/my_model")  # one slash reads as a repo id: never guessed


def test_loading_inside_a_meta_device_context_gives_real_weights(saved):
    model, path = saved
    with torch.device("meta"):
        loaded = zoo.from_pretrained(path)
    assert loaded.lm_head.weight.device.type == "cpu"
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


def test_models_and_folders_load_without_lightning_datasets_or_the_hub(tmp_path):
    """`import zoo` is a lazy facade; the models and a folder's from_pretrained need only torch
    (not the integrations' transformers or lm-eval either)."""
    import subprocess
    import sys

    code = (
        "import sys, zoo\n"
        "assert 'torch' not in sys.modules, 'import zoo loaded torch'\n"
        "import zoo.models\n"
        f"zoo.create_model('routing_transformer_tiny').save_pretrained({str(tmp_path)!r})\n"
        f"zoo.from_pretrained({str(tmp_path)!r})\n"
        "print(sorted(m for m in ('lightning', 'datasets', 'huggingface_hub', 'transformers',\n"
        "                         'lm_eval') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
