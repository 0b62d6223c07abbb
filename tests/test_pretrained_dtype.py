"""``zoo.from_pretrained`` loads weights as saved (issue 78, item 5): the saved dtype read from the
safetensors header, ``dtype="auto"``, dtype strings, transformers' ``torch_dtype`` and
``device_map`` for one device, and one-line errors for what a zoo model cannot honour. (Test names
avoid the word "dtype": conftest marks those precision-sensitive, and these are not.)"""

import pytest
import safetensors.torch
import torch

import zoo
import zoo.pretrained
from zoo.errors import ConfigError
from zoo.placement import checked_device_and_dtype, saved_dtype


def save(tmp_path, dtype):
    torch.manual_seed(0)
    model = zoo.create_model("transformer_lm_tiny").to(dtype)
    model.save_pretrained(tmp_path / "saved")
    return model, tmp_path / "saved"


@pytest.fixture
def bf16(tmp_path):
    return save(tmp_path, torch.bfloat16)


def floating(model):
    """The dtypes of a model's floating-point parameters and buffers."""
    tensors = [*model.parameters(), *model.buffers()]
    return {t.dtype for t in tensors if t.is_floating_point()}


@pytest.mark.parametrize("saved_as", [torch.bfloat16, torch.float16, torch.float32])
def test_a_folder_loads_back_as_saved_by_default(tmp_path, saved_as):
    model, path = save(tmp_path, saved_as)
    for loaded in (zoo.from_pretrained(path), zoo.from_pretrained(path, dtype="auto")):
        assert loaded.dtype == saved_as and floating(loaded) == {saved_as}
        assert torch.equal(loaded.tok_emb.weight, model.tok_emb.weight)  # exactly, no round trip


@pytest.mark.parametrize(
    "option, expected",
    [
        ({"dtype": "float32"}, torch.float32),
        ({"dtype": "torch.float16"}, torch.float16),
        ({"dtype": "fp32"}, torch.float32),
        ({"dtype": "bf16"}, torch.bfloat16),
        ({"dtype": torch.float64}, torch.float64),
        ({"torch_dtype": "float32"}, torch.float32),  # transformers' older name
        ({"torch_dtype": torch.float16}, torch.float16),
        ({"dtype": "bfloat16", "torch_dtype": torch.bfloat16}, torch.bfloat16),  # both, the same
        ({"torch_dtype": "auto"}, torch.bfloat16),
    ],
)
def test_names_and_the_older_alias_cast_what_was_saved(bf16, option, expected):
    model, path = bf16
    loaded = zoo.from_pretrained(path, **option)
    assert loaded.dtype == expected and floating(loaded) == {expected}
    assert torch.equal(loaded.tok_emb.weight, model.tok_emb.weight.to(expected))


def test_the_saved_type_comes_from_the_header_and_the_tensors_are_read_once(bf16, monkeypatch):
    """One read of the tensors (load_weights'), none to find the saved dtype."""
    _, path = bf16
    reads = []
    real = safetensors.torch.load_file

    def load_file(*args, **kwargs):
        reads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "load_file", load_file)  # load_model reads through it
    assert zoo.from_pretrained(path).dtype == torch.bfloat16
    assert reads == [str(path / "model.safetensors")]


def test_the_type_most_floating_values_have_is_the_saved_one():
    header = {
        "tok_emb.weight": ("BF16", (256, 64)),
        "norm.weight": ("F32", (64,)),  # a small fp32 tensor among bf16 weights
        "positions": ("I64", (1024,)),  # not floating: not counted
    }
    assert saved_dtype(header, None, "w") == torch.bfloat16
    assert saved_dtype({"ids": ("I64", (4,))}, None, "w") is None  # nothing floating: as built
    fp8 = {"w": ("F8_E4M3", (64, 64))}
    with pytest.raises(ConfigError, match="holds F8_E4M3 weights.*pass dtype='bfloat16'") as err:
        saved_dtype(fp8, None, "model.safetensors")
    assert "\n" not in str(err.value)
    assert saved_dtype(fp8, torch.bfloat16, "w") is None  # cast to what the caller asks


@pytest.mark.parametrize(
    "option, message",
    [
        ({"dtype": "bfloat"}, "dtype='bfloat' is not a dtype: pass 'auto'.*Did you mean.*'bfloat16'"),
        ({"dtype": "int8"}, "dtype=torch.int8 is not a dtype to load weights in"),
        ({"dtype": 16}, "dtype=16 is not a dtype: pass 'auto'"),
        ({"torch_dtype": "float8"}, "torch_dtype='float8' is not a dtype"),
        ({"dtype": "bf16", "torch_dtype": "float32"}, "dtype='bf16' and torch_dtype='float32' differ"),
        ({"dtype": "auto", "torch_dtype": "float32"}, "differ; torch_dtype is transformers' older"),
        ({"device_map": {"embed": "cpu", "blocks": 0}}, "names cpu, cuda:0; a zoo model loads whole"),
        ({"device_map": "balanced"}, "offloads or spreads the model.*pass device_map='auto'"),
        ({"device_map": {"": "cpu", "head": "disk"}}, "offloads or spreads the model \\('disk'\\)"),
        ({"device_map": {}}, "names no device"),
        ({"device_map": "gpu"}, "device_map='gpu' is not a device map: pass one device"),
        ({"device_map": 1.5}, "device_map=1.5 is not a device map"),
        ({"device_map": "cuda:1"}, "device_map='cuda:1' is not available.*use device_map='cpu'"),
        ({"device_map": 0}, "device_map=0 is not available: this machine has no cuda device"),
    ],
)  # fmt: skip
def test_what_cannot_be_honoured_is_one_line_before_loading(bf16, monkeypatch, option, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU-only machine

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were read before the options were checked")

    monkeypatch.setattr(zoo.pretrained, "load_weights", no_loading)
    with pytest.raises(ConfigError, match=message) as err:
        zoo.from_pretrained(bf16[1], **option)
    assert "\n" not in str(err.value) and str(err.value).startswith("from_pretrained: ")


@pytest.mark.parametrize(
    "device_map",
    ["cpu", "auto", torch.device("cpu"), {"": "cpu"}, {"tok_emb": "cpu", "blocks": "cpu"}],
)
def test_a_device_map_for_one_device_loads_there(bf16, monkeypatch, device_map):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert checked_device_and_dtype(None, None, device_map=device_map) == (
        torch.device("cpu"),
        None,
    )
    loaded = zoo.from_pretrained(bf16[1], device_map=device_map)
    assert loaded.device == torch.device("cpu") and loaded.dtype == torch.bfloat16
    assert zoo.from_pretrained(bf16[1], device_map=device_map, device="cpu").device.type == "cpu"


def test_device_map_auto_is_the_first_gpu_and_must_agree_with_device(monkeypatch):
    """Checked without a GPU: what "auto" and an int resolve to where torch reports one."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert checked_device_and_dtype(None, None, device_map="auto") == (torch.device("cuda:0"), None)
    assert checked_device_and_dtype(None, "bf16", device_map=1) == (
        torch.device("cuda:1"), torch.bfloat16,
    )  # fmt: skip
    assert checked_device_and_dtype("cuda", None, device_map={"": 0})[0] == torch.device("cuda:0")
    with pytest.raises(ConfigError, match="device='cpu' and device_map='auto' name different"):
        checked_device_and_dtype("cpu", None, device_map="auto")


def test_create_model_pretrained_takes_the_loading_options(published):
    model = zoo.create_model("transformer_lm_tiny", pretrained=True, dtype="bf16")
    assert model.dtype == torch.bfloat16 and model.training
    assert zoo.create_model("transformer_lm_tiny", pretrained=True).dtype == torch.float32
    with pytest.raises(ConfigError, match="torch_dtype='int8'|torch_dtype=torch.int8"):
        zoo.create_model("transformer_lm_tiny", pretrained=True, torch_dtype="int8")
