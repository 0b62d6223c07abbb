"""Lightning callbacks of the zoo."""

from __future__ import annotations

import json
import time
import weakref
from pathlib import Path
from typing import Any

import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter, ModelCheckpoint, RichProgressBar
from rich.console import Console
from rich.table import Table

__all__ = [
    "FinalLastCheckpoint",
    "SampleWriter",
    "StepProgressBar",
    "TrainingSummary",
    "hardware",
    "quiet_lightning_warnings",
    "resume_hint",
]

_stopped: weakref.ref[Trainer] | None = None  # the last fit an exception stopped (resume_hint)


def quiet_lightning_warnings() -> None:
    """Silence Lightning warnings that are expected on a CPU-only machine (they drown the progress
    bar) and the one LightningCLI gives because ``zoo`` passes ``sys.argv`` on explicitly."""
    import warnings

    for pattern in (
        ".*does not have many workers.*",
        ".*GPU available but not used.*",
        ".*Checkpoint directory .* exists and is not empty.*",
        ".*isinstance.treespec, LeafSpec.*",
        ".*LightningCLI's args parameter is intended.*",
    ):
        warnings.filterwarnings("ignore", message=pattern)


def hardware(trainer: Trainer | None = None) -> str:
    """The machine a run uses, for model cards: ``"1 x NVIDIA H100 80GB HBM3"`` or
    ``"AMD EPYC 9R14 (2 threads)"``."""
    from zoo.lineage import device_name

    if torch.cuda.is_available() and (
        trainer is None or trainer.strategy.root_device.type == "cuda"
    ):
        n = trainer.num_devices if trainer is not None else 1
        return f"{n} x {device_name('cuda')}"
    return device_name("cpu")


class StepProgressBar(RichProgressBar):
    """Lightning's rich progress bar, for runs bounded by ``max_steps``.

    The training description is ``Epoch 0``, with ``/last`` only when ``max_epochs`` bounds the
    run (Lightning writes ``Epoch 0/-2`` when ``max_epochs`` is -1, as with ``max_steps``), and
    the metrics start with the optimizer step out of ``max_steps`` (``step 120/2400``).
    """

    def _get_train_description(self, current_epoch: int) -> str:
        description = f"Epoch {current_epoch}"
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and max_epochs > 0:
            description += f"/{max_epochs - 1}"
        width = len(self.validation_description)  # as Lightning's: no flicker between the bars
        return f"{description:{width}}" if width > len(description) else description

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        if trainer.max_steps is not None and trainer.max_steps > 0:
            return {"step": f"{trainer.global_step}/{trainer.max_steps}", **metrics}
        return metrics


def _saved_at_stop(trainer: Trainer) -> str | None:
    """The resumable checkpoint holding ``trainer``'s current step, if one was written (by a
    ``ModelCheckpoint(save_on_exception=True)`` when the run stopped, else by any other one at
    this step); weights-only checkpoints do not count."""
    callbacks = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)]
    callbacks.sort(key=lambda c: not c.save_on_exception)
    for callback in callbacks:
        path = getattr(callback, "_last_checkpoint_saved", "")  # Lightning 2.6's record
        step = getattr(callback, "_last_global_step_saved", None)
        if path and step == trainer.global_step and not callback.save_weights_only:
            if Path(path).is_file():
                return str(path)
    return None


def resume_hint() -> str:
    """How to resume the last fit that an exception (Ctrl-C, SIGTERM) stopped, naming the
    checkpoint actually written (``zoo fit`` prints it). Forgets that fit."""
    global _stopped
    trainer, _stopped = (_stopped() if _stopped is not None else None), None
    if trainer is None:
        return "no checkpoint was saved."
    path = _saved_at_stop(trainer)
    if path is not None:
        return (
            f"the run saved its state after {trainer.global_step} optimizer steps to {path}: "
            f"resume with --ckpt_path {path}"
        )
    last = next((c.last_model_path for c in trainer.checkpoint_callbacks
                 if getattr(c, "last_model_path", "")), "")  # fmt: skip
    return (
        f"no checkpoint holds step {trainer.global_step}"
        + (f" (the newest is {last})" if last else "")
        + ": add a ModelCheckpoint with save_on_exception: true to the trainer's callbacks, as "
        "the recipes do, to save one when a run is stopped."
    )


class TrainingSummary(Callback):
    """Counts training tokens, logs ``train/tokens_per_sec``, and prints a summary table after fit.

    Tokens are the input positions of every training batch (``batch[0].numel()``) summed over all
    processes. Wall time runs from the first to the last training batch, so it includes periodic
    validation but not start-up. Tokens, wall time, hardware and precision are saved in every
    checkpoint (the callback's state) and carried over when a run resumes: ``zoo push`` reads them
    for the model card. So are the lineage facts of :mod:`zoo.lineage`: the git commit of each fit
    and the checksum of the training data (the data module's splits other than test).

    At the end of fit the state is also written to ``<default_root_dir>/training_summary.json``
    with the final ``global_step``: a run whose last checkpoint predates its final step (Lightning
    writes ``last.ckpt`` only when it saves another checkpoint) still has its final facts, which
    ``zoo export`` reads for an average of its periodic weights-only checkpoints.

    The zoo's other per-run fixes to Lightning (2.6) live here too, since ``zoo fit`` always
    attaches this callback:

    - A run resumed from a checkpoint written inside a training step (Ctrl-C, an error: the
      ``save_on_exception`` checkpoint) logs its steps from the right number: Lightning adds one
      to the logging step of every resume not saved at a batch's end or after validation, so
      ``metrics.csv`` labelled each step one too high.
    - A fit stopped by an exception is remembered for :func:`resume_hint`.
    """

    FILE = "training_summary.json"

    def __init__(self) -> None:
        self.tokens = 0
        self.start: float | None = None
        self.end: float | None = None
        self.previous_wall = 0.0  # seconds trained before a resume
        self.hardware: list[str] = []
        self.precision = ""
        self.git_commits: list[str] = []  # the code of each fit (a resume may run newer code)
        self.data: dict[str, Any] | None = None  # zoo.lineage.data_checksum of the training data
        self._resumed_step: int | None = None  # the logging step a mid-batch checkpoint holds

    @property
    def wall_time(self) -> float:
        """Training wall time in seconds, over all resumes."""
        return self.previous_wall + (self.end or 0.0) - (self.start or 0.0)

    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        global _stopped
        _stopped = weakref.ref(trainer)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        loop = trainer.fit_loop.epoch_loop
        mid_batch = not (loop.restarted_on_train_batch_end or loop.restarted_on_last)
        self._resumed_step = loop._batches_that_stepped if loop.restarting and mid_batch else None

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        from zoo.lineage import data_checksum, git_commit

        here = hardware(trainer)
        if here not in self.hardware:
            self.hardware.append(here)
        self.precision = str(trainer.precision)
        commit = git_commit()
        if commit is not None and commit not in self.git_commits:
            self.git_commits.append(commit)
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is not None and self.data is None:
            loaded = getattr(datamodule, "splits", {}) or {}
            self.data = data_checksum(datamodule, [s for s in loaded if s != "test"])

    def state_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "wall_time": self.wall_time,
            "hardware": list(self.hardware),
            "precision": self.precision,
            "git_commits": list(self.git_commits),
            "data": self.data,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.tokens = int(state_dict.get("tokens", 0))
        self.previous_wall = float(state_dict.get("wall_time", 0.0))
        self.hardware = list(state_dict.get("hardware", []))
        self.git_commits = list(state_dict.get("git_commits", []))
        self.data = state_dict.get("data")
        self.start = self.end = None

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int
    ) -> None:
        if self.start is None:
            self.start = time.perf_counter()
        if self._resumed_step is not None:  # undo Lightning's +1 of a mid-batch resume (above)
            loop = trainer.fit_loop.epoch_loop
            if loop._batches_that_stepped == self._resumed_step + 1:
                loop._batches_that_stepped = self._resumed_step
            self._resumed_step = None

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        self.tokens += batch[0].numel() * trainer.world_size
        self.end = time.perf_counter()
        if self.wall_time > 0:
            pl_module.log("train/tokens_per_sec", self.tokens / self.wall_time)

    def summary(self, pl_module: LightningModule, trainer: Trainer) -> dict[str, float]:
        wall = self.wall_time
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
        path = Path(trainer.default_root_dir) / self.FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        facts = {"global_step": trainer.global_step} | self.state_dict()
        path.write_text(json.dumps(facts, indent=2) + "\n")


class FinalLastCheckpoint(Callback):
    """Makes each ``ModelCheckpoint(save_last=True)``'s ``last.ckpt`` hold the final step of a fit.

    Lightning (2.6) writes ``last.ckpt`` only when the callback saves another checkpoint. When the
    monitored metric does not improve at the last validation, ``last.ckpt`` stays at an earlier
    step, and ``zoo fit --ckpt_path last.ckpt`` would silently resume from there (the Multi30k v1
    run's ``last.ckpt`` was step 2,500 of 3,000). At the end of a fit that was not interrupted,
    this writes every such ``last.ckpt`` again (weights only where the callback saves weights
    only). ``save_last="link"`` is left alone.
    """

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for callback in trainer.checkpoint_callbacks:
            if callback.save_last is not True or callback.dirpath is None:
                continue
            last = Path(callback.dirpath) / (
                callback.CHECKPOINT_NAME_LAST + callback.FILE_EXTENSION
            )
            trainer.save_checkpoint(last, weights_only=callback.save_weights_only)
            callback.last_model_path = str(last)


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
