"""The zoo's Lightning callbacks beyond the CLI tests: last.ckpt holds the final step of a fit."""

import torch
from lightning import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from zoo.callbacks import FinalLastCheckpoint
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
    return torch.load(path, map_location="cpu", weights_only=False)["global_step"]


def test_last_ckpt_holds_the_final_step_when_the_monitored_metric_stops_improving(
    tmp_path, data_dir
):
    _fit(tmp_path / "lightning", data_dir, [])  # Lightning alone: last.ckpt stays at step 2
    assert _step(tmp_path / "lightning" / "last.ckpt") == 2
    _fit(tmp_path / "zoo", data_dir, [FinalLastCheckpoint()])
    assert _step(tmp_path / "zoo" / "best.ckpt") == 2
    last = torch.load(tmp_path / "zoo" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 4 and "optimizer_states" in last  # resumable, not weights only
