"""Stand-ins shared by the tests: a run directory as `zoo fit` leaves it."""

from pathlib import Path

import lightning
import torch

from zoo.tasks import CausalLM


def fake_run(directory: Path, seed: int = 0) -> Path:
    """A run directory with checkpoints/best.ckpt as `zoo fit` writes it (tiny model, 3 steps)."""
    torch.manual_seed(seed)
    module = CausalLM(model="transformer_lm_tiny", lr=1e-3)
    ckpt = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "datamodule_hyper_parameters": {"dataset": "pg19mini", "batch_size": 2, "seed": 0},
        "pytorch-lightning_version": lightning.__version__,
        "global_step": 3,
        "epoch": 0,
        "callbacks": {
            "TrainingSummary": {
                "tokens": 1536,
                "wall_time": 2.5,
                "hardware": ["test CPU (2 threads)"],
                "precision": "32-true",
            }
        },
    }
    (directory / "checkpoints").mkdir(parents=True)
    torch.save(ckpt, directory / "checkpoints" / "best.ckpt")
    return directory
