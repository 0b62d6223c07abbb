"""A command line that answers at once (issue 78): `zoo --help` and every command's `--help` import
neither Lightning nor torch (each command imports them after parsing); `zoo models` has a real
`--help` and fits 80 columns; `zoo fit --help` leads with the zoo's options and `--model.help TASK`
shows a task's settings. Behaviour only: timings are benchmarks/cli_startup.py's."""

import json
import re
import subprocess
import sys

import pytest

from zoo.cli import COMMANDS, main

# imported by no command's --help (each takes seconds on a 2-core CPU)
KEPT_OUT = ("lightning", "torch", "transformers", "datasets", "matplotlib")
# nor these, except by the commands whose choices come from zoo.hub (which imports huggingface_hub)
LIGHT_ONLY = ("huggingface_hub", "numpy")
HUB_CHOICES = ("list", "evaluate")  # --task / --metric: zoo.hub.schema

# `zoo ARGS` in a fresh interpreter; the exit status and the heavy modules left loaded, on stderr
PROBE = f"""
import json, sys
from zoo.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as e:
    code = e.code or 0
loaded = sorted(m for m in {KEPT_OUT + LIGHT_ONLY!r} if m in sys.modules)
print(json.dumps({{"code": code, "loaded": loaded}}), file=sys.stderr)
"""


def probe(*args: str, cwd) -> tuple[int, list[str], str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)  # fmt: skip
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["loaded"], done.stdout


@pytest.mark.parametrize("command", ["", *COMMANDS], ids=lambda c: f"zoo {c} --help")
def test_help_imports_neither_lightning_nor_torch(command, tmp_path):
    code, loaded, out = probe(*([command] if command else []), "--help", cwd=tmp_path)
    assert code == 0 and out.startswith("usage: zoo")
    kept_out = KEPT_OUT if command in HUB_CHOICES else KEPT_OUT + LIGHT_ONLY
    assert [m for m in loaded if m in kept_out] == []


def test_zoo_list_reads_the_registry_without_torch_or_lightning(tmp_path):
    """`zoo list` (make run's first command) is the registry and its table: no model is built."""
    code, loaded, out = probe("list", cwd=tmp_path)
    assert code == 0 and "transformer_lm_small.pg19mini" in out
    assert [m for m in loaded if m in KEPT_OUT] == []


def test_the_probe_sees_torch_where_a_command_needs_it(tmp_path):
    """The probe above is not blind: `zoo models` counts parameters with torch."""
    code, loaded, out = probe("models", "transformer_lm_tiny", cwd=tmp_path)
    assert code == 0 and "transformer_lm_tiny" in out
    assert "torch" in loaded and "lightning" not in loaded


def test_models_help_prints_usage_not_the_table(capsys):
    with pytest.raises(SystemExit) as e:
        main(["models", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert out.startswith("usage: zoo models") and "pattern" in out
    assert not re.search(r"registered models \(\d+\)", out) and "transformer_lm_small" not in out


@pytest.mark.parametrize("columns", [80, 50])
def test_models_fits_the_terminal_and_names_every_model_whole(columns, capsys, monkeypatch):
    from zoo.models.registry import get_preset, list_models

    monkeypatch.setenv("COLUMNS", str(columns))
    main(["models"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    words, text = set(out.split()), "".join(out.split())
    for name in list_models():
        assert name in words  # never cut or wrapped
        # the description whole, its lines one after the other (wrapped, never cut)
        assert "".join(get_preset(name).description.split()) in text
    assert "…" not in out


def test_models_with_a_pattern_that_matches_nothing(capsys):
    main(["models", "no_such_model*"])
    assert "no registered model matches 'no_such_model*'" in capsys.readouterr().out


def test_fit_help_leads_with_the_zoos_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    usage, body = out.split("\n\n", 1)
    assert usage.index("--config") < usage.index("--trainer.")
    first_trainer_flag = len(usage) + body.index("--trainer.")
    for option in ("--config", "--model.help", "--data.help", "--run_dir", "--ckpt_path",
                   "--allow_class_path"):  # fmt: skip
        assert out.index(option) < first_trainer_flag, option
    # the groups: the task and the data before the Trainer's settings, which come last
    task, data = out.index("The task (--model TASK"), out.index("The data (--data DATAMODULE")
    trainer = out.index("The Trainer's settings (--trainer.NAME VALUE):")
    preamble, groups = out.split("\noptions:\n", 1)
    assert task < data < trainer and "--trainer." not in out[len(preamble) : trainer]
    assert max(len(line) for line in preamble.splitlines()) <= 80


@pytest.mark.parametrize(
    ("name", "class_path", "setting"),
    [
        ("CausalLM", "zoo.tasks.CausalLM", "--model.lr_schedule"),
        ("ImageLM", "zoo.tasks.ImageLM", "--model.lr_schedule"),
        ("Translation", "zoo.tasks.Translation", "--model.label_smoothing"),
        ("zoo.tasks.CausalLM", "zoo.tasks.CausalLM", "--model.init_from"),
    ],
)
def test_model_help_lists_a_tasks_settings(name, class_path, setting, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--model.help", name])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert f"Help for --model.help={class_path}" in out
    assert "--model.model MODEL" in out and setting in out


def test_data_help_lists_a_data_modules_settings(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--data.help", "ByteTextDataModule"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "Help for --data.help=zoo.data.ByteTextDataModule" in out and "--data.dataset" in out


def test_model_help_imports_no_module_outside_the_trusted_ones(tmp_path, monkeypatch, capsys):
    """`--model.help NAME` makes jsonargparse import NAME's module: it is checked like a
    class_path first (zoo.commands.class_paths)."""
    marker = tmp_path / "imported"
    (tmp_path / "planted_help.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass Task:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as e:
        main(["fit", "--model.help", "planted_help.Task"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--model.help: class_path 'planted_help.Task'" in err and "nothing was imported" in err
    assert not marker.exists()


def test_choices_named_without_torch_match_their_tables():
    """verify, bench and pattern name their choices so that --help imports no torch; the tables
    they come from are the truth."""
    import zoo.attention.patterns
    import zoo.bench
    import zoo.golden
    from zoo.commands import bench, models, verify

    assert set(verify.DTYPES) == set(zoo.golden.DTYPES)
    assert set(bench.PRECISIONS) == set(zoo.bench.PRECISIONS)
    assert set(models.PATTERNS) == set(zoo.attention.patterns.PATTERNS)


def test_device_default_is_decided_after_parsing():
    import torch

    from zoo.commands.common import default_device

    assert default_device("cpu") == "cpu"
    assert default_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")
