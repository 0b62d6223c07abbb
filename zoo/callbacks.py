"""Lightning callbacks of the zoo."""

from __future__ import annotations

import time
from pathlib import Path

from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from rich.console import Console
from rich.table import Table

__all__ = ["SampleWriter", "TrainingSummary"]


class TrainingSummary(Callback):
    """Counts training tokens, logs ``train/tokens_per_sec``, and prints a summary table after fit.

    Tokens are the input positions of every training batch (``batch[0].numel()``) summed over all
    processes. Wall time runs from the first to the last training batch, so it includes periodic
    validation but not start-up.
    """

    def __init__(self) -> None:
        self.tokens = 0
        self.start: float | None = None
        self.end: float | None = None

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int
    ) -> None:
        if self.start is None:
            self.start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        self.tokens += batch[0].numel() * trainer.world_size
        self.end = time.perf_counter()
        if self.start is not None and self.end > self.start:
            pl_module.log("train/tokens_per_sec", self.tokens / (self.end - self.start))

    def summary(self, pl_module: LightningModule, trainer: Trainer) -> dict[str, float]:
        wall = (self.end or 0.0) - (self.start or 0.0)
        model = getattr(pl_module, "model", pl_module)
        return {
            "parameters": sum(p.numel() for p in model.parameters()),
            "optimizer steps": trainer.global_step,
            "tokens seen": self.tokens,
            "train wall time (s)": round(wall, 1),
            "tokens / s": round(self.tokens / wall, 1) if wall > 0 else float("nan"),
        }

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero or self.start is None:
            return
        table = Table(title="training summary")
        table.add_column("quantity")
        table.add_column("value", justify="right")
        for key, value in self.summary(pl_module, trainer).items():
            table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
        for key, value in trainer.callback_metrics.items():
            if key.startswith("val/"):
                table.add_row(key, f"{float(value):.4f}")
        Console().print(table)


class SampleWriter(BasePredictionWriter):
    """Prints the samples of ``zoo predict`` and appends them to ``<default_root_dir>/samples.txt``.

    Token ids are decoded with the data module's ``tokenizer``.
    """

    def __init__(self) -> None:
        super().__init__(write_interval="batch")

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0
    ) -> None:
        tokenizer = trainer.datamodule.tokenizer
        path = Path(trainer.default_root_dir) / "samples.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            for row in prediction:
                text = tokenizer.decode(row)
                Console().print(f"[bold]--- sample {batch_idx}[/bold]")
                print(text)
                f.write(f"--- sample {batch_idx}\n{text}\n")
