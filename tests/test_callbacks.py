"""The zoo's Lightning callbacks beyond the CLI tests: last.ckpt holds the final step of a fit; the
progress bar of a max_steps run."""

from pathlib import Path

import torch
from lightning import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from zoo.callbacks import FinalLastCheckpoint, StepProgressBar
from zoo.data import ByteTextDataModule
from zoo.tasks import CausalLM


class FlatMetric(CausalLM):
    """Logs a validation metric that never improves, so ModelCheckpoint saves only once."""

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        self.log("val/flat", 1.0)


def _fit(directory, data_dir, callbacks) -> None:
    torch.manual_seed(0)
    checkpoint = ModelCheckpoint(dirpath=directory, filename="best", monitor="val/flat",
                                 save_last=True, enable_version_counter=False)  # fmt: skip
    trainer = Trainer(max_steps=4, val_check_interval=2, check_val_every_n_epoch=None,
                      limit_val_batches=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, accelerator="cpu",
                      callbacks=[checkpoint, *callbacks])  # fmt: skip
    data = ByteTextDataModule(dataset="pg19mini", seq_len=64, batch_size=2, data_dir=str(data_dir))
    trainer.fit(FlatMetric(model="transformer_lm_tiny", lr=1e-3), datamodule=data)


def _step(path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


def test_last_ckpt_holds_the_final_step_when_the_monitored_metric_stops_improving(
    tmp_path, data_dir
):
    _fit(tmp_path / "lightning", data_dir, [])  # Lightning alone: last.ckpt stays at step 2
    assert _step(tmp_path / "lightning" / "last.ckpt") == 2
    _fit(tmp_path / "zoo", data_dir, [FinalLastCheckpoint()])
    assert _step(tmp_path / "zoo" / "best.ckpt") == 2
    last = torch.load(tmp_path / "zoo" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 4 and "optimizer_states" in last  # resumable, not weights only


def test_the_progress_bar_of_a_max_steps_run_reads_epoch_0_and_the_step(monkeypatch, tmp_path):
    """Lightning's bar reads `Epoch 0/-2` (max_epochs -1 with max_steps); the zoo's reads
    `Epoch 0`, and `step N/max_steps` among its metrics. `zoo fit` installs it wherever a bar is
    shown and the config names none."""
    import lightning.pytorch as pl

    from zoo.cli import main

    seen = {}
    monkeypatch.setattr(pl.Trainer, "fit", lambda self, *a, **k: seen.update(trainer=self))
    monkeypatch.chdir(tmp_path)
    recipe = str(Path(__file__).resolve().parents[1] / "recipes/transformer_lm/pg19mini.yaml")
    main(["fit", "--config", recipe, "--trainer.max_steps=7"])
    trainer = seen["trainer"]
    bar = trainer.progress_bar_callback
    assert isinstance(bar, StepProgressBar)
    bar.setup(trainer, None, "fit")
    trainer.fit_loop.max_epochs = -1  # what fit sets when max_steps bounds the run
    assert bar._get_train_description(0).rstrip() == "Epoch 0"
    assert bar.get_metrics(trainer, CausalLM(model="transformer_lm_tiny"))["step"] == "0/7"
    trainer.fit_loop.max_epochs = 3
    assert bar._get_train_description(1).rstrip() == "Epoch 1/2"
    main(["fit", "--config", recipe, "--trainer.enable_progress_bar=false"])
    assert seen["trainer"].progress_bar_callback is None  # no bar asked: none installed
