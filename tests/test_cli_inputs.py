"""What the `zoo` command does with the inputs users get wrong (issue 19): settings are never
dropped silently, and bad input is a one-line error with exit status 2."""

from pathlib import Path

import pytest
import torch
import yaml
from fakes import run_zoo
from lightning import LightningDataModule, LightningModule

from zoo.commands.lightning import ZooCLI

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "experiments/transformer_lm/pg19mini_v1.yaml"


def trainer_of(args: list[str]):
    cli = ZooCLI(
        LightningModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True,
        args=args, auto_configure_optimizers=False, run=False,
    )  # fmt: skip
    return cli.trainer


@pytest.mark.parametrize(
    "written, expected", [("1", 1), ("3", 3), ("1.0", 1.0), ("0.5", 0.5), ("0", 0)]
)
def test_integer_batch_limits_stay_integers(written, expected):
    """`--trainer.limit_val_batches 1` is one batch, not 100% (an int that became 1.0)."""
    trainer = trainer_of(["--config", str(RECIPE), "--trainer.limit_val_batches", written])
    assert trainer.limit_val_batches == expected
    assert type(trainer.limit_val_batches) is type(expected)


def test_integer_batch_limits_from_a_config_file_stay_integers(tmp_path):
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["trainer"]["limit_val_batches"] = 1
    recipe["trainer"]["limit_train_batches"] = 1.0
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    trainer = trainer_of(["--config", str(path)])
    assert trainer.limit_val_batches == 1 and type(trainer.limit_val_batches) is int
    assert trainer.limit_train_batches == 1.0 and type(trainer.limit_train_batches) is float


def test_init_from_a_checkpoint_of_another_architecture_is_an_error(capsys):
    """The routing recipe with a dense checkpoint used to train the dense model silently."""
    from zoo.cli import main

    routing = str(REPO / "experiments/routing_transformer/pg19mini_v1.yaml")
    with pytest.raises(SystemExit) as e:
        main(["fit", "--config", routing, "--model.init_args.init_from",
              "transformer_lm_small.pg19mini", "--trainer.max_steps", "0"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "transformer_lm_small.pg19mini is a TransformerLM" in err
    assert "routing_transformer_small_causal (RoutingTransformerLM)" in err
    assert "--model.init_args.model null" in err


def test_init_from_with_the_checkpoints_own_model_or_none():
    from zoo.errors import ConfigError
    from zoo.tasks import CausalLM

    name = "routing_transformer_small.pg19mini"  # causal routing, rotary positions
    rotary = {"position": "rotary"}
    assert CausalLM(model="routing_transformer_small_causal", model_config=rotary, init_from=name)
    assert (
        CausalLM(model=None, init_from=name, model_config={"dropout": 0.2}).model.config.dropout
        == 0.2
    )
    with pytest.raises(ConfigError, match=r"routing: 'topw' \(checkpoint: 'causal'\)"):
        CausalLM(model="routing_transformer_small", model_config=rotary, init_from=name)


def test_init_from_keeps_the_checkpoints_revival_rule_unless_overridden():
    """Revival steers only training's centroid updates, so a preset whose default rule differs
    from the checkpoint's (bisection at 0.5 since 2026-11-27; the published model trained with
    the farthest split at 0.25) still describes the checkpoint, which keeps its own rule."""
    from zoo.tasks import CausalLM

    name, rotary = "routing_transformer_small.pg19mini", {"position": "rotary"}
    kept = CausalLM(model="routing_transformer_small_causal", model_config=rotary, init_from=name)
    km = kept.model.blocks[-1].attention.kmeans
    assert (km.revive_below, km.revive_split) == (0.25, "farthest")
    two = rotary | {"revive_below": 0.5, "revive_split": "two_means"}
    moved = CausalLM(model="routing_transformer_small_causal", model_config=two, init_from=name)
    km = moved.model.blocks[-1].attention.kmeans
    assert (km.revive_below, km.revive_split) == (0.5, "two_means")


def test_init_from_a_run_directory_starts_from_its_weights(tmp_path):
    """A second training stage (pg19mini_fixed_v3_4096.yaml) names the first stage's run: its
    best.ckpt's weights are the start, and a damaged .ckpt is a one-line CheckpointError."""
    from fakes import fake_run

    from zoo.errors import CheckpointError, ConfigError
    from zoo.tasks import CausalLM

    run = fake_run(tmp_path / "stage1", seed=3)
    stage1 = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
    for source in (f"{run}", f"{run}/checkpoints/best.ckpt"):
        stage2 = CausalLM(model="transformer_lm_tiny", init_from=source, lr=1e-4)
        for key, value in stage2.state_dict().items():
            assert torch.equal(value, stage1[key]), key
    assert not torch.equal(CausalLM(model="transformer_lm_tiny").state_dict()[key], stage1[key])
    with pytest.raises(ConfigError, match="routing_transformer_tiny"):
        CausalLM(model="routing_transformer_tiny", init_from=str(run))
    (run / "checkpoints" / "best.ckpt").write_bytes(b"cut short")
    with pytest.raises(CheckpointError, match=r"best\.ckpt could not be loaded: it is truncated"):
        CausalLM(model="transformer_lm_tiny", init_from=str(run))


# --- item 6: one-line errors (exit 2) or the documented behaviour -------------------------------
LM = "transformer_lm_small.pg19mini"


def test_a_prompt_that_is_not_utf8_is_continued_byte_for_byte(capsys, tmp_path):
    """The models are byte-level: arguments come back as the bytes typed (surrogateescape), and
    --prompt-file takes any bytes."""
    import os

    typed = os.fsdecode(b"caf\xe9 ")  # how Python hands a Latin-1 argument over
    code, out, err = run_zoo(capsys, "generate", "--checkpoint", LM, "--prompt", typed,
                             "--max-new-tokens", "4", "--temperature", "0")  # fmt: skip
    assert code == 0, err
    assert out.startswith("caf\ufffd ")
    (tmp_path / "prompt.bin").write_bytes(b"caf\xe9 ")
    code, out2, err = run_zoo(capsys, "generate", "--checkpoint", LM, "--prompt-file",
                              str(tmp_path / "prompt.bin"), "--max-new-tokens", "4",
                              "--temperature", "0")  # fmt: skip
    assert code == 0 and out2 == out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt", ""], "the prompt is empty"),
        (["--num-samples", "0"], "--num-samples must be >= 1"),
        (["--prompt-file", "no/such/file"], "--prompt-file no/such/file does not exist"),
        (["--device", "cuda:0"], "this machine has no cuda device"),
        (["--device", "gpu"], "--device 'gpu' is not a device"),
    ],
)
def test_bad_generate_input_is_a_one_line_error(capsys, args, message):
    import torch

    if "cuda:0" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, _, err = run_zoo(capsys, "generate", "--checkpoint", LM, *args)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("preset", ["transformer_tiny", "lstm_attention_tiny"])
def test_translate_says_which_line_is_not_utf8(capsys, monkeypatch, tmp_path, preset):
    import io

    import zoo
    from zoo.data.translation import train_bpe

    tokenizer = train_bpe(["ein Hund", "a dog"] * 20, vocab_size=40)
    model = zoo.create_model(preset, vocab_size=tokenizer.get_vocab_size())
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path / "m")
    stdin = io.TextIOWrapper(io.BytesIO(b"ein Hund\nein \xff Hund\n"), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    code, _, err = run_zoo(capsys, "translate", "--checkpoint", str(tmp_path / "m"))
    assert code == 2 and "stdin is not UTF-8 text (byte 0xff on line 2)" in err


def test_a_translation_checkpoint_given_to_generate_names_the_right_command(capsys, tmp_path):
    import lightning
    import torch

    from zoo.tasks import Translation

    task = Translation(model="transformer_tiny")
    hparams = {**task.hparams, "_class_path": "zoo.tasks.Translation"}  # as LightningCLI saves
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": hparams,
                "pytorch-lightning_version": lightning.__version__}, tmp_path / "t.ckpt")  # fmt: skip
    code, _, err = run_zoo(capsys, "generate", "--checkpoint", str(tmp_path / "t.ckpt"))
    assert code == 2 and "a translation model: use `zoo translate`" in err
    assert "blocked" not in err and len(err.strip().splitlines()) == 1
    from zoo.loading import checkpoint_task

    assert checkpoint_task(tmp_path / "t.ckpt") is Translation  # read without unpickling code


@pytest.mark.parametrize("value", [4.0, "4", True])
def test_a_config_json_with_a_wrongly_typed_value_is_a_checkpoint_error(tmp_path, value):
    import json

    import zoo
    from zoo.errors import CheckpointError

    zoo.create_model("transformer_lm_tiny").save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["config"]["n_layers"] = value
    (tmp_path / "config.json").write_text(json.dumps(meta))
    (tmp_path / "manifest.json").unlink()  # not a checksum question here
    with (
        pytest.warns(UserWarning),
        pytest.raises(CheckpointError, match="n_layers=.* must be an integer"),
    ):
        zoo.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--data.init_args.batch_size=-1", "batch_size must be a positive integer, got -1"),
        ("--data.init_args.seq_len=0", "seq_len must be a positive integer, got 0"),
        ("--data.init_args.num_workers=-2", "num_workers must be an integer >= 0, got -2"),
    ],
)
def test_bad_data_sizes_are_one_line_errors(capsys, flag, message):
    code, _, err = run_zoo(capsys, "fit", "--config", str(RECIPE), flag)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_trainer_setting_lightning_refuses_is_a_one_line_error(capsys):
    code, _, err = run_zoo(capsys, "fit", "--config", str(RECIPE), "--trainer.max_time=00:00:8:00")
    assert code == 2 and "Traceback" not in err
    assert "the trainer settings:" in err and "not a valid duration" in err and "DD:HH:MM:SS" in err


def test_pull_without_the_hub_says_what_the_shipped_copy_offers(capsys, monkeypatch):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    code, _, err = run_zoo(capsys, "pull", LM)
    assert code == 2 and "the shipped copy" in err and "is intact" in err
    assert "zoo pull" not in err.replace("zoo: error", "")  # it does not recommend itself


def test_evaluate_without_data_names_its_own_flag(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path))
    code, _, err = run_zoo(capsys, "evaluate", LM, "--data-dir", str(tmp_path), "--windows", "1")
    assert code == 2 and "zoo evaluate: --data-dir" in err


def test_config_takes_a_packaged_recipe_name_or_inline_yaml():
    from zoo.commands.lightning import with_packaged_config
    from zoo.errors import ConfigError

    out = with_packaged_config(["fit", "--config", "transformer_lm/pg19mini"])
    assert Path(out[2]).is_file() and out[2].endswith("transformer_lm/pg19mini.yaml")
    # a published checkpoint's recipe by the checkpoint's name alone, as `zoo pull` names it
    out = with_packaged_config(["fit", "--config=transformer_lm_small.pg19mini"])
    assert out[1].endswith("recipes/transformer_lm/transformer_lm_small.pg19mini.yaml")
    with pytest.raises(ConfigError, match="Did you mean 'transformer_lm_small.pg19mini'"):
        with_packaged_config(["fit", "--config", "transformer_lm_smal.pg19mini"])
    inline = ["fit", "--config", '{"trainer": {"max_steps": 1}}']
    assert with_packaged_config(inline) == inline  # jsonargparse reads it as a config itself


def test_sample_refuses_what_does_not_fit_an_image_transformers_shape(
    capsys, tmp_path, monkeypatch
):
    """The Image Transformer's 2-D positions fix its image shape: a data set of another shape, a
    completion that no data set has images for, more completions than test images or a scale below
    1 are one-line errors before anything is sampled or written; unconditional samples of its own
    shape need no data set."""
    import numpy as np

    import zoo

    tiny = tmp_path / "tiny"  # 4x4x3 images: no data set has them
    zoo.create_model("image_transformer_tiny").save_pretrained(tiny)
    out = tmp_path / "s.png"
    cases = [
        ([], "--completions needs test images of the model's 4x4x3 shape, and no image data set"),
        (["--dataset", "mnist"], "the model completes 4x4x3 images, and mnist's are 28x28x1"),
        (["--completions", "0", "--dataset", "mnist"], "models 4x4x3 images, not 28x28x1"),
        (["--scale", "0"], "--scale is 0: draw each image pixel as at least 1 PNG pixel"),
    ]
    for flags, message in cases:
        code, _, err = run_zoo(capsys, "sample", "--checkpoint", str(tiny), "--out", str(out),
                               "--num-samples", "1", "--completions", "1", *flags)  # fmt: skip
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (flags, err)
        assert not out.exists()  # nothing was drawn before the error
    code, stdout, _ = run_zoo(capsys, "sample", "--checkpoint", str(tiny), "--out", str(out),
                              "--num-samples", "2", "--completions", "0")  # fmt: skip
    assert code == 0 and out.read_bytes()[:4] == b"\x89PNG"

    wide = tmp_path / "wide"  # CIFAR-10's shape, so cifar10 is its data set without --dataset
    zoo.create_model("image_transformer_tiny", image_shape=(32, 32, 3), max_seq_len=3072)\
        .save_pretrained(wide)  # fmt: skip
    three = {"test": np.zeros((3, 32, 32, 3), np.uint8)}
    monkeypatch.setattr("zoo.data.images.load_images", lambda *a, **k: three)
    code, _, err = run_zoo(capsys, "sample", "--checkpoint", str(wide), "--out", str(out),
                           "--num-samples", "0", "--completions", "4")  # fmt: skip
    assert code == 2 and "--completions 4: the test split of cifar10 has 3 images" in err
