"""The `zoo` command end to end: recipes parse, a short real fit, test, generate, errors."""

import csv
import os
from pathlib import Path

import pytest
import yaml

from zoo.cli import main

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))
FAST = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def test_there_are_recipes():
    assert REPO / "recipes" / "transformer_lm" / "pg19mini.yaml" in RECIPES


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(REPO / "recipes")))
def test_recipe_parses_against_the_cli(recipe, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(recipe), "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["class_path"].startswith("zoo.")
    assert printed["data"]["class_path"].startswith("zoo.")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_dir):
    """Two optimizer steps of the default recipe on the real pg19mini data."""
    run = tmp_path_factory.mktemp("run")
    cwd = os.getcwd()
    os.chdir(run)  # the recipe writes under ./runs
    try:
        main(
            [
                "fit",
                "--config",
                str(REPO / "recipes/transformer_lm/pg19mini.yaml"),
                "--trainer.max_steps",
                "2",
                "--trainer.val_check_interval",
                "2",
                "--trainer.limit_val_batches",
                "2",
                "--data.init_args.data_dir",
                str(data_dir),
                *FAST,
            ]
        )
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


def test_test_reports_bits_per_byte(trained, data_dir, capsys, monkeypatch):
    monkeypatch.chdir(trained)
    main(
        [
            "test",
            "--config",
            str(REPO / "recipes/transformer_lm/pg19mini.yaml"),
            "--ckpt_path",
            str(trained / "checkpoints" / "best.ckpt"),
            "--trainer.limit_test_batches",
            "2",
            "--trainer.logger",
            "false",
            "--trainer.default_root_dir",
            str(trained),
            "--data.init_args.data_dir",
            str(data_dir),
            *FAST,
        ]
    )
    assert "test/bpb" in capsys.readouterr().out


def test_generate_from_the_checkpoint(trained, capsys):
    args = [
        "generate",
        "--checkpoint",
        str(trained / "checkpoints" / "last.ckpt"),
        "--prompt",
        "Once upon",
        "--max-new-tokens",
        "12",
        "--seed",
        "3",
        "--top-k",
        "5",
    ]
    main(args)
    first = capsys.readouterr().out
    main(args)
    assert first.startswith("Once upon") and capsys.readouterr().out == first


def test_predict_samples_the_prompts(trained, capsys, monkeypatch):
    monkeypatch.chdir(trained)
    monkeypatch.delenv("ZOO_DATA_DIR")  # sampling needs the prompts, not the data set
    base = [
        "predict",
        "--config",
        str(REPO / "recipes/transformer_lm/pg19mini.yaml"),
        "--ckpt_path",
        str(trained / "checkpoints" / "best.ckpt"),
        "--trainer.logger",
        "false",
        "--trainer.default_root_dir",
        str(trained),
        *FAST,
    ]
    main(
        [
            *base,
            "--data.init_args.prompts",
            '["Once upon", "It was"]',
            "--model.init_args.sampling",
            '{"max_new_tokens": 8, "top_k": 5}',
        ]
    )
    samples = [
        s.split("\n", 1)[1] for s in (trained / "samples.txt").read_text().split("--- sample ")[1:]
    ]
    assert len(samples) == 2
    assert samples[0].startswith("Once upon") and samples[1].startswith("It was")
    assert len(samples[0]) > len("Once upon\n")  # the prompt, sampled bytes, the newline
    assert "Once upon" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(base)
    assert e.value.code == 2 and "--data.init_args.prompts" in capsys.readouterr().err


def test_generate_errors_are_clear(tmp_path, trained, capsys):
    with pytest.raises(SystemExit) as e:
        main(["generate", "--checkpoint", str(tmp_path / "missing.ckpt")])
    assert e.value.code == 2 and "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(
            [
                "generate",
                "--checkpoint",
                str(trained / "checkpoints" / "last.ckpt"),
                "--prompt",
                "x" * 300,
            ]
        )
    assert e.value.code == 2 and "--truncate-prompt" in capsys.readouterr().err


def test_unknown_model_config_key_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(
            [
                "fit",
                "--config",
                str(REPO / "recipes/transformer_lm/pg19mini.yaml"),
                "--model.init_args.model_config",
                '{"n_layer": 3}',
                "--trainer.default_root_dir",
                str(tmp_path),
                *FAST,
            ]
        )
    assert e.value.code == 2
    assert "unknown TransformerConfig key(s) ['n_layer']" in capsys.readouterr().err


def test_unknown_model_name_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(
            [
                "fit",
                "--config",
                str(REPO / "recipes/transformer_lm/pg19mini.yaml"),
                "--model.init_args.model",
                "transformer_lm_smal",
                "--trainer.default_root_dir",
                str(tmp_path),
                *FAST,
            ]
        )
    assert e.value.code == 2
    assert "Did you mean 'transformer_lm_small'" in capsys.readouterr().err


def test_missing_data_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    with pytest.raises(SystemExit) as e:
        main(
            [
                "validate",
                "--config",
                str(REPO / "recipes/transformer_lm/pg19mini.yaml"),
                "--data.init_args.data_dir",
                str(tmp_path / "nodata"),
                *FAST,
            ]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "pg19mini" in err and "ZOO_DATA_DIR" in err and "Traceback" not in err


def test_unknown_trainer_key_is_rejected(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(
            [
                "fit",
                "--config",
                str(REPO / "recipes/transformer_lm/pg19mini.yaml"),
                "--trainer.max_stepz",
                "3",
            ]
        )
    assert e.value.code != 0 and "max_stepz" in capsys.readouterr().err


def test_models_and_help(capsys):
    main(["models"])
    assert "transformer_lm_small" in capsys.readouterr().out
    main([])
    assert "generate" in capsys.readouterr().out


def test_interrupted_fit_saves_and_resumes(tmp_path, monkeypatch, data_dir):
    import signal

    from zoo.tasks import CausalLM

    monkeypatch.chdir(tmp_path)
    recipe = str(REPO / "recipes/transformer_lm/pg19mini.yaml")
    common = [
        "--trainer.limit_val_batches",
        "1",
        "--trainer.val_check_interval",
        "100",
        "--model.init_args.model",
        "transformer_lm_tiny",
        *FAST,
    ]
    step = CausalLM.training_step

    def interrupt_at_step_3(self, batch, batch_idx):
        if self.global_step == 3:
            raise KeyboardInterrupt
        return step(self, batch, batch_idx)

    monkeypatch.setattr(CausalLM, "training_step", interrupt_at_step_3)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):
            main(["fit", "--config", recipe, "--trainer.max_steps", "6", *common])
    finally:
        signal.signal(
            signal.SIGINT, handler
        )  # Lightning ignores further Ctrl-C while shutting down
    saved = tmp_path / "runs/transformer_lm/pg19mini/checkpoints/interrupted.ckpt"
    assert saved.is_file()
    import torch

    assert torch.load(saved, weights_only=False)["global_step"] == 3
    monkeypatch.setattr(CausalLM, "training_step", step)
    main(
        ["fit", "--config", recipe, "--trainer.max_steps", "6", "--ckpt_path", str(saved), *common]
    )
    last = torch.load(saved.with_name("last.ckpt"), weights_only=False)
    assert last["global_step"] == 6
