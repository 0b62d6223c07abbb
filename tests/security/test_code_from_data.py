"""No code runs from a file a user loads: a checkpoint's hyper-parameters, a pickle, a recipe.

Each payload would create a sentinel file if anything ran it (``os.system("touch ...")`` through
jsonargparse's ``{class_path, init_args}``, or a pickled ``__reduce__``); each test asserts the
sentinel is absent and the refusal is one line naming the file and the key.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from zoo.cli import main
from zoo.errors import CheckpointError
from zoo.tasks import CausalLM, Translation
from zoo.tasks.checkpoint import MODEL_RECORD, load_checkpoint, migrate_checkpoint

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "transformer_lm" / "pg19mini.yaml"
ERROR = re.compile(r"^zoo( \w+)?: error: ")  # `zoo: error:` or `zoo generate: error:`
TINY = {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32, "max_seq_len": 32}


@pytest.fixture
def sentinel(tmp_path):
    path = tmp_path / "PWNED"
    yield path
    assert not path.exists(), "a payload ran"


def payload(sentinel: Path) -> dict:
    return {"class_path": "os.system", "init_args": {"command": f"touch {sentinel}"}}


def write_ckpt(path: Path, record: bool = True, **hp) -> Path:
    """A checkpoint as `zoo fit` writes one (weights, LightningCLI's hyper-parameter keys)."""
    task = CausalLM(model="transformer_lm_small", model_config=TINY)
    hyper = {"_class_path": "zoo.tasks.CausalLM", "model": "transformer_lm_small",
             "model_config": TINY, "lr": 1e-3, "sampling": None, "init_from": None,
             "_instantiator": "lightning.pytorch.cli.instantiate_module", **hp}  # fmt: skip
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": hyper, "global_step": 1,
            "pytorch-lightning_version": "2.6.6"}  # fmt: skip
    if record:
        task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return path


def one_line(err) -> str:
    text = str(err.value) if hasattr(err, "value") else str(err)
    assert "\n" not in text.strip(), text
    return text


def test_a_clean_checkpoint_loads(tmp_path):
    task = CausalLM.load_from_checkpoint(write_ckpt(tmp_path / "ok.ckpt"))
    assert task.model.config.d_model == 16 and task.hparams.model_config == TINY


def test_a_checkpoint_trained_compiled_loads_eager(tmp_path):
    """`compile` in a file says how it was trained; loading it starts no compiler (a C++
    toolchain) unless the caller asks in code."""
    ckpt = write_ckpt(tmp_path / "compiled.ckpt", compile=True)
    task = load_checkpoint(ckpt)
    assert task.model._compiled_call_impl is None and task.hparams.compile is False
    task = load_checkpoint(ckpt, overrides={"compile": True})
    assert task.model._compiled_call_impl is not None and task.hparams.compile is True


@pytest.mark.parametrize("key", ["model_config", "sampling"])
def test_a_class_path_in_hyperparameters_is_refused(tmp_path, sentinel, key):
    value = {"x": payload(sentinel)} if key == "model_config" else payload(sentinel)
    ckpt = write_ckpt(tmp_path / "evil.ckpt", **{key: value})
    with pytest.raises(CheckpointError) as err:
        CausalLM.load_from_checkpoint(ckpt)
    assert str(ckpt) in one_line(err) and f"hyper_parameters.{key}" in str(err.value)


def test_the_class_path_of_the_task_must_be_a_zoo_task(tmp_path, sentinel):
    ckpt = write_ckpt(tmp_path / "evil.ckpt", _class_path="os.system")
    with pytest.raises(CheckpointError, match="_class_path") as err:
        load_checkpoint(ckpt)
    one_line(err)


def test_lightnings_instantiator_is_never_followed(tmp_path, sentinel):
    ckpt = write_ckpt(tmp_path / "evil.ckpt", _instantiator="os.system")
    assert isinstance(CausalLM.load_from_checkpoint(ckpt), CausalLM)


def test_an_unknown_hyperparameter_is_refused(tmp_path):
    ckpt = write_ckpt(tmp_path / "odd.ckpt", callback=1)
    with pytest.raises(CheckpointError, match="callback") as err:
        CausalLM.load_from_checkpoint(ckpt)
    one_line(err)


class Payload:
    def __init__(self, sentinel):
        self.sentinel = sentinel

    def __reduce__(self):
        return (os.system, (f"touch {self.sentinel}",))


def test_a_pickled_object_is_refused_before_it_runs(tmp_path, sentinel):
    ckpt = tmp_path / "pickle.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"x": Payload(sentinel)}}, ckpt)
    with pytest.raises(CheckpointError, match="could not be read as data") as err:
        load_checkpoint(ckpt)
    one_line(err)


def test_a_translation_checkpoint_refuses_a_payload_too(tmp_path, sentinel):
    task = Translation(model="transformer_tiny")
    ckpt = tmp_path / "mt.ckpt"
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": {
        "_class_path": "zoo.tasks.Translation", "model": "transformer_tiny",
        "model_config": {"x": payload(sentinel)}}}, ckpt)  # fmt: skip
    with pytest.raises(CheckpointError, match="model_config"):
        Translation.load_from_checkpoint(ckpt)


# --- init_from: only published names are followed from a file ----------------------------------


@pytest.mark.parametrize("source", ["someone/evil-repo", "../../elsewhere", "/tmp/base"])
def test_init_from_a_path_or_repo_named_by_the_file_is_refused(tmp_path, source):
    ckpt = write_ckpt(tmp_path / "ft.ckpt", record=False, init_from=source)
    with pytest.raises(CheckpointError, match="zoo migrate") as err:
        CausalLM.load_from_checkpoint(ckpt)
    assert repr(source) in one_line(err)


def test_init_from_itself_is_refused_even_when_trusted(tmp_path):
    ckpt = tmp_path / "self.ckpt"
    write_ckpt(ckpt, record=False, init_from=str(ckpt))
    with pytest.raises(CheckpointError, match="itself"):
        load_checkpoint(ckpt, trust_init_from=True)


def test_a_recorded_architecture_fetches_nothing(tmp_path, monkeypatch):
    import zoo.pretrained

    def no_fetch(*args, **kwargs):
        raise AssertionError("fetched init_from")

    monkeypatch.setattr(zoo.pretrained, "from_pretrained", no_fetch)
    ckpt = write_ckpt(tmp_path / "ft.ckpt", init_from="someone/evil-repo", model=None,
                      model_config={"dropout": 0.0})  # fmt: skip
    task = CausalLM.load_from_checkpoint(ckpt)
    assert task.model.config.d_model == 16
    assert task.hparams.init_from == "someone/evil-repo"  # the lineage, as saved


def test_zoo_migrate_records_an_older_checkpoint_once_trusted(tmp_path, capsys):
    base = tmp_path / "base"
    CausalLM(model="transformer_lm_small", model_config=TINY).model.save_pretrained(base)
    ckpt = write_ckpt(tmp_path / "old.ckpt", record=False, init_from=str(base), model=None,
                      model_config=None)  # fmt: skip
    with pytest.raises(SystemExit) as done:
        main(["generate", "--checkpoint", str(ckpt), "--max-new-tokens", "2"])
    assert done.value.code == 2 and "zoo migrate" in capsys.readouterr().err
    main(["migrate", str(ckpt)])
    assert MODEL_RECORD in torch.load(ckpt, weights_only=True)
    base.joinpath("model.safetensors").unlink()  # the source is no longer needed
    assert load_checkpoint(ckpt).model.config.d_model == 16


def test_migrate_checkpoint_writes_a_copy_beside_the_original(tmp_path):
    base = tmp_path / "base"
    CausalLM(model="transformer_lm_small", model_config=TINY).model.save_pretrained(base)
    old = write_ckpt(tmp_path / "old.ckpt", record=False, init_from=str(base), model=None,
                     model_config=None)  # fmt: skip
    new = migrate_checkpoint(old, tmp_path / "new.ckpt")
    assert MODEL_RECORD not in torch.load(old, weights_only=True)  # the original is untouched
    assert torch.load(new, weights_only=True)[MODEL_RECORD]["config"]["d_model"] == 16


# --- through the command line -------------------------------------------------------------------


def test_zoo_generate_on_a_payload_checkpoint_is_one_line(tmp_path, sentinel, capsys):
    ckpt = write_ckpt(tmp_path / "evil.ckpt", model_config={"x": payload(sentinel)})
    with pytest.raises(SystemExit) as done:
        main(["generate", "--checkpoint", str(ckpt), "--max-new-tokens", "2"])
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2 and ERROR.match(err) and len(err.splitlines()) == 1, err


def test_validate_ckpt_path_reads_the_hyperparameters_as_data(tmp_path, sentinel, capsys):
    ckpt = write_ckpt(tmp_path / "evil.ckpt", sampling=payload(sentinel))
    with pytest.raises(SystemExit) as done:
        main(["validate", "--config", str(RECIPE), "--ckpt_path", str(ckpt),
              "--trainer.enable_progress_bar=false"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and ERROR.match(err[-1]) and "sampling" in err[-1], err


def recipe_with(tmp_path: Path, change) -> Path:
    config = yaml.safe_load(RECIPE.read_text())
    change(config)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    "where",
    ["model_config", "sampling", "callback", "callback_function", "logger_string"],
)
def test_a_recipe_names_no_class_it_may_not(tmp_path, sentinel, capsys, where):
    def change(config):
        init = config["model"].setdefault("init_args", {})
        if where in ("model_config", "sampling"):
            init[where] = {"x": payload(sentinel)} if where == "model_config" else payload(sentinel)
        elif where == "callback":
            config["trainer"].setdefault("callbacks", []).append(payload(sentinel))
        elif where == "callback_function":  # an allowed module, but a function, not a class
            config["trainer"]["callbacks"] = [{"class_path": "lightning.fabric.utilities.cloud_io"
                                               "._load", "init_args": {"path_or_url": "x"}}]
        else:
            config["trainer"]["logger"] = "os.system"

    recipe = recipe_with(tmp_path, change)
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(recipe), "--print_config"])
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(err) == 1 and ERROR.match(err[0]), err


def test_a_class_path_on_the_command_line_is_checked_too(sentinel, capsys):
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(RECIPE), "--print_config",
              "--model.init_args.sampling", '{"class_path": "os.system"}'])  # fmt: skip
    assert done.value.code == 2 and "plain settings" in capsys.readouterr().err


def test_allow_class_path_lets_a_users_own_callback_through(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_callbacks.py").write_text(
        "from lightning.pytorch import Callback\n\nclass Hello(Callback):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    recipe = recipe_with(tmp_path, lambda c: c["trainer"].setdefault("callbacks", []).append(
        {"class_path": "my_callbacks.Hello"}))  # fmt: skip
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(recipe), "--print_config"])
    assert done.value.code == 2 and "--allow_class_path my_callbacks" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(recipe), "--print_config", "--allow_class_path", "my_callbacks"])
    assert done.value.code == 0 and "my_callbacks.Hello" in capsys.readouterr().out


def test_no_weights_only_false_anywhere():
    """The repository never calls torch.load with weights_only off (code, tests, experiments)."""
    found = subprocess.run(
        ["git", "grep", "-n", "weights_only" + "=False", "--", "*.py"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert found.returncode == 1 and not found.stdout, found.stdout  # 1: no match (2: an error)


def test_a_planted_cifar_release_is_never_unpickled(tmp_path, sentinel, monkeypatch):
    import io
    import pickle
    import tarfile

    from zoo.data.images import load_images
    from zoo.errors import DataNotFoundError

    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cifar10").mkdir()
    with tarfile.open(tmp_path / "cifar10" / "cifar-10-python.tar.gz", "w:gz") as tf:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            data = pickle.dumps(Payload(sentinel))
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    with pytest.raises(DataNotFoundError, match="it was not unpickled") as err:
        load_images("cifar10", data_dir=str(tmp_path))
    one_line(err)
