"""A callback that records what each process of a fit held, for tests/test_ddp.py.

Passed to ``zoo fit`` with ``--trainer.callbacks+={"class_path": "ddp_probe.RankProbe", ...}``
and ``--allow_class_path ddp_probe`` (the test puts tests/ on ``PYTHONPATH``). Each process
writes ``rank{global_rank}.pt`` into ``out``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning import Callback, LightningModule, Trainer

from zoo.attention.kmeans import SphericalKMeans

__all__ = ["RankProbe"]


class RankProbe(Callback):
    """Records, on every process: the training loss of each step (this process's shard), the input
    windows and the routing centroids after each step, and at the end of training the model's
    state dict and how the centroids were initialised and revived.

    The centroids are read after each training batch, before anything else runs a forward: DDP
    broadcasts rank 0's buffers at every forward (``broadcast_buffers=True``), so after a
    validation pass every rank holds rank 0's centroids whether or not the updates agreed.
    """

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.losses: list[float] = []
        self.inputs: list[torch.Tensor] = []
        self.centroids: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.losses.append(float(outputs["loss"]))
        self.inputs.append(batch[0].detach().cpu().clone())  # (B, T) int64
        self.centroids.append({
            k: v.detach().cpu().clone()
            for k, v in pl_module.model.state_dict().items()
            if k.endswith("kmeans.centroids")
        })  # fmt: skip

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        kmeans = [m for m in pl_module.modules() if isinstance(m, SphericalKMeans)]
        state = {k: v.detach().cpu().clone() for k, v in pl_module.model.state_dict().items()}
        torch.save(
            {
                "world_size": trainer.world_size,
                "global_step": trainer.global_step,
                "losses": self.losses,
                "inputs": self.inputs,
                "centroids": self.centroids,
                "state": state,
                "fitted": [not m.needs_init for m in kmeans],
                "revived": sum(m.revived for m in kmeans),
            },
            self.out / f"rank{trainer.global_rank}.pt",
        )
