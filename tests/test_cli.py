"""The `zoo` command end to end: recipes parse, a short real fit, test, predict, generate, errors."""

import csv
import json
import os
import signal
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from zoo.cli import main
from zoo.tasks import CausalLM

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted([*(REPO / "recipes").rglob("*.yaml"), *(REPO / "experiments").rglob("*.yaml")])
RECIPE = str(REPO / "recipes" / "transformer_lm" / "pg19mini.yaml")
FAST = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def zoo(command: str, *args: str) -> None:
    """Run `zoo COMMAND --config RECIPE ARGS` in this process."""
    main([command, "--config", RECIPE, *args, *FAST])


def ctrl_c_at_step_3(monkeypatch, *args: str) -> None:
    """`zoo ARGS` with a Ctrl-C (KeyboardInterrupt) during the 4th training step."""
    step = CausalLM.training_step

    def interrupt_at_step_3(self, batch, batch_idx):
        if self.global_step == 3:
            raise KeyboardInterrupt
        return step(self, batch, batch_idx)

    monkeypatch.setattr(CausalLM, "training_step", interrupt_at_step_3)
    handler = signal.getsignal(signal.SIGINT)  # Lightning ignores Ctrl-C while shutting down
    try:
        with pytest.raises(SystemExit):
            zoo(*args)
    finally:
        signal.signal(signal.SIGINT, handler)


def test_there_are_recipes():
    assert Path(RECIPE) in RECIPES


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(REPO)))
def test_recipe_parses_against_the_cli(recipe, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(recipe), "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["class_path"].startswith("zoo.")
    assert printed["data"]["class_path"].startswith("zoo.")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two optimizer steps of the default recipe on the real pg19mini data (found via ZOO_DATA_DIR)."""
    run = tmp_path_factory.mktemp("run")
    cwd = os.getcwd()
    os.chdir(run)  # the recipe writes under ./runs
    try:
        zoo("fit", "--trainer.max_steps=2", "--trainer.val_check_interval=2",
            "--trainer.limit_val_batches=2", "--trainer.log_every_n_steps=1")  # fmt: skip
    finally:
        os.chdir(cwd)
    return run / "runs" / "transformer_lm" / "pg19mini"


def test_two_step_fit_on_real_text(trained):
    assert (trained / "checkpoints" / "last.ckpt").is_file()
    assert (trained / "checkpoints" / "best.ckpt").is_file()
    (metrics,) = trained.glob("logs/version_*/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    val = [float(r["val/bpb"]) for r in rows if r.get("val/bpb")]
    assert len(val) == 1 and 4.0 < val[0] < 9.0  # an untrained byte model: around 8 bits per byte
    assert any(r.get("train/loss") for r in rows)


def test_test_reports_bits_per_byte(trained, capsys, monkeypatch):
    monkeypatch.chdir(trained)
    zoo("test", f"--ckpt_path={trained / 'checkpoints' / 'best.ckpt'}",
        "--trainer.limit_test_batches=2", "--trainer.logger=false")  # fmt: skip
    assert "test/bpb" in capsys.readouterr().out


def test_ckpt_path_says_which_model_flags_it_ignores(trained, capsys, monkeypatch):
    """LightningCLI takes the model's arguments from the checkpoint over the command line; a
    changed model setting must not be dropped silently."""
    monkeypatch.chdir(trained)
    ckpt = f"--ckpt_path={trained / 'checkpoints' / 'best.ckpt'}"
    common = ["--trainer.limit_test_batches=1", "--trainer.logger=false"]
    with pytest.warns(UserWarning, match=r"ignored: lr=0\.5 \(checkpoint: 0\.002"):
        zoo("test", ckpt, "--model.lr=0.5", *common)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*ckpt_path: the model is rebuilt.*")
        zoo("test", ckpt, *common)  # nothing changed: no warning


def test_ckpt_path_takes_compile_from_the_command_line_not_the_file(trained, monkeypatch, tmp_path):
    """A checkpoint of a compiled run does not compile where it is loaded; the flag does."""
    saved = torch.load(trained / "checkpoints" / "best.ckpt", weights_only=True)
    saved["hyper_parameters"]["compile"] = True
    torch.save(saved, tmp_path / "compiled.ckpt")
    compiled = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: compiled.append(self))
    monkeypatch.chdir(trained)
    common = [f"--ckpt_path={tmp_path / 'compiled.ckpt'}", "--trainer.limit_test_batches=1",
              "--trainer.logger=false"]  # fmt: skip
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*ckpt_path: the model is rebuilt.*")
        zoo("test", *common)
        assert compiled == []
        zoo("test", *common, "--model.compile=true")
    assert len(compiled) == 1


def test_predict_samples_the_prompts(trained, capsys, monkeypatch):
    monkeypatch.chdir(trained)
    monkeypatch.delenv("ZOO_DATA_DIR")  # sampling needs the prompts, not the data set
    predict = [f"--ckpt_path={trained / 'checkpoints' / 'best.ckpt'}", "--trainer.logger=false",
               f"--trainer.default_root_dir={trained}"]  # fmt: skip
    zoo("predict", *predict, '--data.init_args.prompts=["Once upon", "It was"]',
        '--model.init_args.sampling={"max_new_tokens": 8, "top_k": 5}')  # fmt: skip
    text = (trained / "samples.txt").read_text()
    samples = [s.split("\n", 1)[1] for s in text.split("--- sample ")[1:]]
    assert len(samples) == 2
    assert samples[0].startswith("Once upon") and samples[1].startswith("It was")
    assert len(samples[0]) > len("Once upon\n")  # the prompt, sampled bytes, the newline
    # --ckpt_path keeps the command line's sampling settings (8 bytes, not the default 256)
    assert all(
        len(s) <= len(p) + 8 + 1 for s, p in zip(samples, ("Once upon", "It was"), strict=True)
    )
    assert "Once upon" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        zoo("predict", *predict)
    assert e.value.code == 2 and "--data.init_args.prompts" in capsys.readouterr().err


def test_generate_from_the_checkpoint(trained, capsys):
    args = ["generate", "--checkpoint", str(trained / "checkpoints" / "last.ckpt"),
            "--prompt", "Once upon", "--max-new-tokens", "12", "--seed", "3", "--top-k", "5"]  # fmt: skip
    main(args)
    first = capsys.readouterr().out
    main(args)
    assert first.startswith("Once upon") and capsys.readouterr().out == first


def test_generate_compiled_gives_the_same_text(trained, capsys):
    args = ["generate", "--checkpoint", str(trained / "checkpoints" / "last.ckpt"),
            "--prompt", "Once upon", "--max-new-tokens", "10", "--temperature", "0"]  # fmt: skip
    from torch._dynamo.utils import counters

    main(args)
    eager = capsys.readouterr().out
    torch._dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]
    main([*args, "--compile"])
    assert capsys.readouterr().out == eager and eager.startswith("Once upon")
    assert counters["stats"]["unique_graphs"] > graphs  # the steps ran compiled


@pytest.mark.parametrize(
    "checkpoint, prompt, message",
    [("missing.ckpt", "x", "does not exist"), ("last.ckpt", "x" * 300, "--truncate-prompt")],
)
def test_generate_errors_are_clear(trained, checkpoint, prompt, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(
            [
                "generate",
                "--checkpoint",
                str(trained / "checkpoints" / checkpoint),
                "--prompt",
                prompt,
            ]
        )
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "command, args, message",
    [
        ("fit", ['--model.init_args.model_config={"n_layer": 3}'], "key(s) ['n_layer']"),
        (
            "fit",
            ["--model.init_args.model=transformer_lm_smal"],
            "Did you mean 'transformer_lm_small'",
        ),
        ("fit", ['--model.init_args.sampling={"temp": 1}'], "unknown sampling key(s) ['temp']"),
        ("validate", ["--data.init_args.data_dir=nodata"], "ZOO_DATA_DIR"),
    ],
)
def test_bad_input_is_a_clear_error(command, args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZOO_DATA_DIR")
    with pytest.raises(SystemExit) as e:
        zoo(command, *args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


def test_unknown_trainer_key_is_rejected(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        zoo("fit", "--trainer.max_stepz=3")
    assert e.value.code != 0 and "max_stepz" in capsys.readouterr().err


def test_models_and_help(capsys):
    main(["models"])
    assert "transformer_lm_small" in capsys.readouterr().out
    main([])
    assert "generate" in capsys.readouterr().out


def test_interrupted_fit_saves_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ["--trainer.max_steps=6", "--trainer.limit_val_batches=1",
              "--trainer.val_check_interval=100", "--model.init_args.model=transformer_lm_tiny"]  # fmt: skip
    step = CausalLM.training_step
    ctrl_c_at_step_3(monkeypatch, "fit", *common)
    saved = tmp_path / "runs/transformer_lm/pg19mini/checkpoints/interrupted.ckpt"
    first = torch.load(saved, weights_only=True)
    assert first["global_step"] == 3
    monkeypatch.setattr(CausalLM, "training_step", step)
    zoo("fit", *common, f"--ckpt_path={saved}")
    last = torch.load(saved.with_name("last.ckpt"), weights_only=True)
    assert last["global_step"] == 6
    # the training facts of the model card carry over the resume
    before, after = first["callbacks"]["TrainingSummary"], last["callbacks"]["TrainingSummary"]
    assert (before["tokens"], after["tokens"]) == (3 * 16 * 128, 6 * 16 * 128)
    assert after["wall_time"] > before["wall_time"] > 0
    # and the end of fit writes them with the final step (for an average of weights-only files)
    summary = json.loads(
        (tmp_path / "runs/transformer_lm/pg19mini/training_summary.json").read_text()
    )
    assert summary == {"global_step": 6} | after


def test_run_dir_moves_every_output_of_the_run(tmp_path, monkeypatch):
    """`--run_dir` reaches the recipe's two ModelCheckpoints and its logger, so a second seed of
    a recipe does not write into the first run's folder."""
    monkeypatch.chdir(tmp_path)
    zoo("fit", "--trainer.max_steps=2", "--trainer.val_check_interval=2",
        "--trainer.limit_val_batches=1", "--model.init_args.model=transformer_lm_tiny",
        "--seed_everything=1", "--run_dir=runs/seed1")  # fmt: skip
    run = tmp_path / "runs/seed1"
    assert {p.name for p in (run / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    assert list(run.glob("logs/version_*/metrics.csv"))
    assert (run / "training_summary.json").is_file()
    assert not (tmp_path / "runs/transformer_lm").exists()  # the recipe's own folder


def test_pattern_command_draws_png(tmp_path, capsys):
    out = tmp_path / "fixed.png"
    main(["pattern", "fixed", "--out", str(out), "--n", "32", "--stride", "8", "--c", "2"])
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert str(out) in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # a missing parameter is a one-line error, status 2
        main(["pattern", "fixed", "--out", str(out), "--stride", "8"])
    assert exc.value.code == 2
    assert "missing 1 required positional argument: 'c'" in capsys.readouterr().err


def test_sigterm_saves_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    """A scheduler's SIGTERM stops the run after saving interrupted.ckpt; the exit status says
    it did not finish (Lightning's SIGTERMException is a SystemExit with status 0)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    monkeypatch.chdir(tmp_path)
    step = CausalLM.training_step

    def sigterm_at_step_2(self, batch, batch_idx):
        if self.global_step == 2:
            raise SIGTERMException  # what the fit loop raises once the signal has arrived
        return step(self, batch, batch_idx)

    monkeypatch.setattr(CausalLM, "training_step", sigterm_at_step_2)
    with pytest.raises(SystemExit) as e:
        zoo("fit", "--trainer.max_steps=4", "--trainer.limit_val_batches=1",
            "--model.init_args.model=transformer_lm_tiny")  # fmt: skip
    assert e.value.code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in capsys.readouterr().err
    saved = tmp_path / "runs/transformer_lm/pg19mini/checkpoints/interrupted.ckpt"
    assert torch.load(saved, weights_only=True)["global_step"] == 2


def test_an_interrupted_and_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path, monkeypatch):
    """The training windows are positioned by the global step (ResumableOrder): stopping at
    step 3 and resuming from interrupted.ckpt gives the weights of 6 uninterrupted steps."""
    common = ["--trainer.max_steps=6", "--trainer.limit_val_batches=0", "--seed_everything=7",
              "--model.init_args.model=transformer_lm_tiny",
              '--model.init_args.model_config={"dropout": 0.0}']  # fmt: skip
    ckpts = Path("runs/transformer_lm/pg19mini/checkpoints")
    (tmp_path / "whole").mkdir()
    monkeypatch.chdir(tmp_path / "whole")
    zoo("fit", *common)
    whole = torch.load(ckpts / "last.ckpt", weights_only=True)
    (tmp_path / "resumed").mkdir()
    monkeypatch.chdir(tmp_path / "resumed")
    step = CausalLM.training_step
    ctrl_c_at_step_3(monkeypatch, "fit", *common)
    monkeypatch.setattr(CausalLM, "training_step", step)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*dataloader is not resumable.*")
        zoo("fit", *common, f"--ckpt_path={ckpts / 'interrupted.ckpt'}")
    resumed = torch.load(ckpts / "last.ckpt", weights_only=True)
    assert resumed["global_step"] == whole["global_step"] == 6
    for key, value in whole["state_dict"].items():
        assert torch.equal(resumed["state_dict"][key], value), key
