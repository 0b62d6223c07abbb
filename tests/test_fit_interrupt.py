"""`zoo fit` stopped by Ctrl-C: exit status 130 with the checkpoint to resume from, as SIGTERM; and a
run resumed from that checkpoint logs its steps under their own numbers in metrics.csv."""

import csv
import signal

import pytest
import yaml

from zoo.cli import main
from zoo.tasks import CausalLM

CONFIG = {
    "seed_everything": 0,
    "trainer": {
        "max_steps": 4,
        "log_every_n_steps": 1,
        "limit_val_batches": 0,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": "run",
        "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                   "init_args": {"save_dir": "run", "name": "logs"}},
        "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                       "init_args": {"dirpath": "run/checkpoints", "filename": "interrupted",
                                     "save_top_k": 0, "save_on_exception": True,
                                     "enable_version_counter": False}}],
    },
    "model": {"class_path": "zoo.tasks.CausalLM",
              "init_args": {"model": "transformer_lm_tiny", "warmup_steps": 1}},
    "data": {"class_path": "zoo.data.ByteTextDataModule",
             "init_args": {"dataset": "text_file", "path": "tiny.txt", "seq_len": 32,
                           "batch_size": 2}},
}  # fmt: skip


def _steps(version: int) -> list[int]:
    with open(f"run/logs/version_{version}/metrics.csv") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]


def test_ctrl_c_exits_130_with_the_resume_hint_and_the_resumed_steps_keep_their_numbers(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(CONFIG))
    step = CausalLM.training_step

    def ctrl_c_at_step_2(self, batch, batch_idx):
        if self.global_step == 2:
            raise KeyboardInterrupt
        return step(self, batch, batch_idx)

    monkeypatch.setattr(CausalLM, "training_step", ctrl_c_at_step_2)
    handler = signal.getsignal(signal.SIGINT)  # Lightning ignores Ctrl-C while shutting down
    try:
        with pytest.raises(SystemExit) as e:
            main(["fit", "--config", "fit.yaml"])
    finally:
        signal.signal(signal.SIGINT, handler)
    saved = tmp_path / "run/checkpoints/interrupted.ckpt"
    err = capsys.readouterr().err
    assert e.value.code == 128 + signal.SIGINT
    assert "stopped by Ctrl-C" in err and f"resume with --ckpt_path {saved}" in err
    monkeypatch.setattr(CausalLM, "training_step", step)
    main(["fit", "--config", "fit.yaml", "--ckpt_path", str(saved)])
    assert _steps(0) == [0, 1] and _steps(1) == [2, 3]  # Lightning alone: [3, 4]
