"""Precision chosen by what the CPU can do (zoo.precision) and how `zoo fit` uses it."""

import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest

import zoo.precision as precision
from zoo.cli import main

REPO = Path(__file__).resolve().parents[1]
RECIPE = str(REPO / "recipes" / "transformer_lm" / "pg19mini.yaml")


@pytest.fixture
def cpu(monkeypatch):
    """Set whether this 'CPU' has native bf16; the slowdown of an emulated product is 6×."""

    def set_native(native: bool) -> None:
        monkeypatch.setattr(precision, "native_bf16_cpu", lambda: native)
        monkeypatch.setattr(precision, "autocast_slowdown", lambda dtype=None: 6.0)

    return set_native


def test_default_precision_by_cpu_and_family(cpu):
    cpu(False)
    assert precision.default_precision("transformer_lm")[0] == "32-true"
    assert "no native bf16" in precision.default_precision(None)[1]
    cpu(True)
    assert precision.default_precision("transformer_lm")[0] == "bf16-mixed"
    assert precision.default_precision(None)[0] == "bf16-mixed"
    choice, why = precision.default_precision("lstm_seq2seq")
    assert choice == "32-true" and "lstm_seq2seq" in why


def test_only_an_emulated_precision_warns(cpu):
    cpu(True)
    assert precision.slow_precision_warning("bf16-mixed") is None
    assert precision.slow_precision_warning("32-true") is None
    assert "fp16" in precision.slow_precision_warning("16-true")
    cpu(False)
    message = precision.slow_precision_warning("bf16-mixed")
    assert "6.0×" in message and "32-true is faster" in message and "\n" not in message
    assert "bf16" in precision.slow_precision_warning("16-mixed")  # Lightning's CPU bf16


def test_oneDNN_limited_to_avx2_reads_as_no_native_bf16():
    """What `make test`'s second run relies on: this torch's oneDNN honours ONEDNN_MAX_CPU_ISA."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    code = "import zoo.precision as p; print(p.native_bf16_cpu(), p.default_precision()[0])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    assert out == ["False", "32-true"]


@pytest.fixture
def fit_precision(monkeypatch, tmp_path):
    """`zoo fit` of the default recipe up to the Trainer: the precision it was built with."""
    seen = {}

    def fake_fit(self, *args, **kwargs):
        seen["precision"] = self.precision

    monkeypatch.setattr(pl.Trainer, "fit", fake_fit)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> str:
        main(["fit", "--config", RECIPE, "--trainer.enable_progress_bar=false", *args])
        return seen["precision"]

    return run


@pytest.mark.parametrize("native, expected", [(True, "bf16-mixed"), (False, "32-true")])
def test_fit_chooses_the_precision_and_says_why(native, expected, cpu, fit_precision, capsys):
    cpu(native)
    assert fit_precision() == expected
    err = capsys.readouterr().err
    assert f"zoo: precision {expected}: " in err and "--trainer.precision" in err


def test_fit_keeps_an_explicit_precision_and_warns_once_if_emulated(cpu, fit_precision, capsys):
    cpu(False)
    assert fit_precision("--trainer.precision", "bf16-mixed") == "bf16-mixed"
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "emulated" in line]
    assert line.startswith("zoo: warning: precision bf16-mixed: ") and "6.0×" in line
    assert "32-true is faster" in line and "zoo: precision" not in err
    cpu(True)
    assert fit_precision("--trainer.precision", "32-true") == "32-true"


def test_evaluate_in_an_emulated_precision_warns_and_measures(cpu, capsys):
    cpu(False)
    main(["evaluate", "transformer_lm_small.pg19mini", "--precision", "bf16-mixed", "--windows=1"])
    out, err = capsys.readouterr()
    assert "zoo evaluate: warning: precision bf16-mixed: " in err and "32-true is faster" in err
    assert "bits/byte" in out or "bpb" in out
