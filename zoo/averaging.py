"""Checkpoint averaging: one model whose weights are the element-wise mean of the last N checkpoints.

Vaswani et al. 2017, §6.1: the base models are "a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals" (the big models: the last 20). Averaging
nearby points of one training run smooths the noise of the final optimizer steps; it is free at
test time.

``zoo average DIR --last N --out averaged.ckpt`` writes a Lightning checkpoint that ``zoo test
--ckpt_path`` (and ``zoo translate``) loads like any other: the newest input's hyperparameters,
tokenizer and loop state, the averaged ``state_dict``, and ``averaged_from`` (files and steps); no
optimizer state, since the average is not a point the optimizer visited.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rich.progress import track

from zoo.errors import CheckpointError, ConfigError
from zoo.pretrained import atomic_path

__all__ = ["average_checkpoints", "last_checkpoints", "save_average"]

DROPPED = ("optimizer_states", "lr_schedulers", "callbacks")  # state of the optimizer's own path


def _load(path: Path, mmap: bool = False) -> dict[str, Any]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:
        raise CheckpointError(
            f"{path} could not be read as a Lightning checkpoint ({type(e).__name__}: {e}); "
            "it is truncated or corrupt: leave it out."
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} has no state_dict: it is not a Lightning checkpoint.")
    return ckpt


def last_checkpoints(directory: str | os.PathLike, n: int) -> list[Path]:
    """The ``n`` checkpoints (``*.ckpt``) of ``directory`` with the highest ``global_step``, oldest
    first.

    Raises:
        ConfigError: fewer than ``n`` checkpoints, or two files of the same step (a checkpoint would
            count twice: keep periodic checkpoints in a directory of their own).
    """
    directory = Path(directory)
    files = sorted(directory.glob("*.ckpt"))
    if n < 1 or len(files) < n:
        raise ConfigError(
            f"{directory} has {len(files)} checkpoint(s); averaging the last {n} needs at least "
            f"{max(n, 1)}. Save them during training (ModelCheckpoint every_n_train_steps, "
            "save_top_k=-1), as recipes/transformer/multi30k_de_en.yaml does."
        )
    steps: dict[int, Path] = {}
    for f in files:
        step = int(_load(f, mmap=True).get("global_step", -1))
        if step in steps:
            raise ConfigError(
                f"{steps[step].name} and {f.name} in {directory} are both from step {step}; "
                "keep the periodic checkpoints in a directory of their own."
            )
        steps[step] = f
    return [steps[s] for s in sorted(steps)[-n:]]


def average_checkpoints(paths: Sequence[str | os.PathLike], progress: bool = False) -> dict:
    """A checkpoint whose ``state_dict`` is the mean of those of ``paths`` (the last path supplies
    everything else).

    Floating-point tensors are averaged in float64 and cast back to their dtype; other tensors
    (integer buffers) must be equal in every checkpoint.

    Raises:
        CheckpointError: an unreadable file, or checkpoints of different models (keys or shapes).
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    first: dict[str, torch.Tensor] = {}
    steps: list[int] = []
    for path in track(paths, description="averaging", disable=not progress, transient=True):
        ckpt = _load(path)
        steps.append(int(ckpt.get("global_step", -1)))
        state = ckpt["state_dict"]
        if not first:
            first = state
            total = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
            continue
        if state.keys() != first.keys():
            diff = sorted(state.keys() ^ first.keys())[:5]
            raise CheckpointError(
                f"{path} and {paths[0]} hold different tensors ({diff}): average checkpoints of "
                "one training run."
            )
        for k, v in state.items():
            if v.shape != first[k].shape:
                raise CheckpointError(
                    f"{k} is {tuple(v.shape)} in {path} but {tuple(first[k].shape)} in "
                    f"{paths[0]}: average checkpoints of one training run."
                )
            if v.is_floating_point():
                total[k] += v.double()
            elif not torch.equal(v, first[k]):
                raise CheckpointError(
                    f"the integer tensor {k} differs between {paths[0]} and {path}"
                )
    out = {k: v for k, v in ckpt.items() if k not in DROPPED}
    out["state_dict"] = {
        k: (v / len(paths)).to(first[k].dtype) if first[k].is_floating_point() else v
        for k, v in total.items()
    }
    out["averaged_from"] = {
        "files": [str(p) for p in paths],
        "global_steps": steps,
    }
    return out


def save_average(
    paths: Sequence[str | os.PathLike], out: str | os.PathLike, progress: bool = False
) -> Path:
    """Average ``paths`` (:func:`average_checkpoints`) and write the result to ``out`` atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    averaged = average_checkpoints(paths, progress=progress)
    with atomic_path(out) as tmp:
        torch.save(averaged, tmp)
    return out
