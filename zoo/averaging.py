"""Checkpoint averaging: one model whose weights are the element-wise mean of the last N checkpoints.

Vaswani et al. 2017, §6.1: the base models are "a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals" (the big models: the last 20). Averaging
nearby points of one training run smooths the noise of the final optimizer steps; it is free at
test time.

``zoo average DIR --last N --out averaged.ckpt`` writes a Lightning checkpoint that ``zoo test
--ckpt_path`` (and ``zoo translate``) loads like any other: the newest input's hyperparameters,
tokenizer and loop state, the averaged ``state_dict``, and ``averaged_from`` (files and steps); no
optimizer state, since the average is not a point the optimizer visited.

Only checkpoints of one model are averaged, read from their saved hyperparameters before their
tensors: the task (``_class_path``) and the model's full config (the preset ``model`` with its
``model_config`` overrides) must agree, since two models can share every tensor shape and still
compute different functions (a sparsemax and a softmax attention). Settings that do not change
what the trained model computes may differ: the task's optimisation and decoding settings (``lr``,
``warmup_steps``, ``beam_size``, ...), every dropout rate (inactive in eval mode), and the config's
``training_only`` fields (e.g. the routing centroids' update rule). A checkpoint without saved
hyperparameters is compared by its tensors alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rich.progress import track

from zoo.errors import CheckpointError, ConfigError, UnknownModelError
from zoo.files import atomic_path

__all__ = ["average_checkpoints", "last_checkpoints", "model_settings", "save_average"]

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


def _neutral(name: str, config_class: type | None) -> bool:
    """Whether config field ``name`` may differ between averaged checkpoints: a dropout rate
    (inactive in eval mode) or a ``training_only`` field of the config class."""
    return "dropout" in name or name in getattr(config_class, "training_only", ())


def model_settings(hparams: dict[str, Any]) -> dict[str, Any]:
    """The settings of a Lightning checkpoint's ``hyper_parameters`` that decide which model it
    holds: ``task`` (the saved ``_class_path``), ``family`` and every field of the model's config
    (its preset with the ``model_config`` overrides), without the fields that may differ (dropout
    rates, ``training_only``). A preset this zoo does not know, or ``model=None`` with ``init_from``
    (the architecture is the pretrained checkpoint's), gives the raw ``model``,
    ``model_config`` and ``init_from`` instead.
    """
    from zoo.models.registry import get_preset

    out: dict[str, Any] = {}
    if hparams.get("_class_path"):
        out["task"] = str(hparams["_class_path"])
    overrides = dict(hparams.get("model_config") or {})
    try:
        preset = get_preset(hparams.get("model"))
        config = preset.config.replace(**overrides)
    except (UnknownModelError, ConfigError, TypeError):  # compare what was saved instead
        raw = {k: hparams.get(k) for k in ("model", "init_from")}
        raw |= {f"model_config.{k}": v for k, v in sorted(overrides.items())}
        return out | {k: v for k, v in raw.items() if not _neutral(k.split(".")[-1], None)}
    out["family"] = preset.family
    fields = config.to_dict()
    return out | {k: v for k, v in fields.items() if not _neutral(k, type(config))}


def _check_same_model(first: Path, hp_first: Any, path: Path, hp: Any) -> None:
    """Raise :class:`CheckpointError` naming the first setting in which ``path``'s saved
    hyperparameters describe another model than ``first``'s (no check if either has none)."""
    if not isinstance(hp_first, dict) or not isinstance(hp, dict):
        return
    a, b = model_settings(hp_first), model_settings(hp)
    for key in list(a) + [k for k in b if k not in a]:
        if _same(a.get(key), b.get(key)):
            continue
        raise CheckpointError(
            f"{first} and {path} are checkpoints of different models: {key} is "
            f"{a.get(key)!r} in {first.name} but {b.get(key)!r} in {path.name}. Average "
            "checkpoints of one model (only dropout and the training settings may differ)."
        )


def _same(a: Any, b: Any) -> bool:
    """Equal as saved values: a tuple and the list YAML or JSON turned it into are the same."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def last_checkpoints(directory: str | os.PathLike, n: int) -> list[Path]:
    """The ``n`` checkpoints (``*.ckpt``) of ``directory`` with the highest ``global_step``, oldest
    first.

    Raises:
        ConfigError: ``n`` below 1, fewer than ``n`` checkpoints, or two files of the same step (a
            checkpoint would count twice: keep periodic checkpoints in a directory of their own).
    """
    directory = Path(directory)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(
            f"n (--last) is {n!r}: average the last 1 or more checkpoints (the paper: 5, its "
            "big models 20)"
        )
    files = sorted(directory.glob("*.ckpt"))
    if len(files) < n:
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
    (integer buffers) must be equal in every checkpoint. Each checkpoint counts once: the same file
    named twice (again, through ``./`` or a symlink) is refused, and so are two files of the same
    ``global_step`` (a copy of one checkpoint, or ``best.ckpt`` beside the periodic one it
    duplicates), which would weigh that step double.

    Raises:
        ConfigError: no paths, or a checkpoint named twice (the same file, or the same step).
        CheckpointError: an unreadable file, or checkpoints of different models: their saved
            hyperparameters (:func:`model_settings`, the first differing setting named), tensor
            names or shapes.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("no checkpoints to average: name two or more .ckpt files, or a directory")
    _check_distinct_files(paths)
    total: dict[str, torch.Tensor] = {}
    first: dict[str, torch.Tensor] = {}
    first_hparams: Any = None
    steps: list[int] = []
    for path in track(paths, description="averaging", disable=not progress, transient=True):
        ckpt = _load(path)
        step = int(ckpt.get("global_step", -1))
        if step >= 0 and step in steps:
            twin = paths[steps.index(step)]
            raise ConfigError(
                f"{twin} and {path} are both from step {step}: the same checkpoint twice (a "
                "copy?) would count double; average checkpoints of different steps."
            )
        steps.append(step)
        state = ckpt["state_dict"]
        if not first:
            first, first_hparams = state, ckpt.get("hyper_parameters")
            total = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
            continue
        _check_same_model(paths[0], first_hparams, path, ckpt.get("hyper_parameters"))
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


def _check_distinct_files(paths: Sequence[Path]) -> None:
    """Refuse a file named twice in ``paths``, however spelled (``./``, ``..``, a symlink)."""
    seen: dict[tuple[int, int] | Path, Path] = {}
    for path in paths:
        try:
            st = path.stat()
            key: tuple[int, int] | Path = (st.st_dev, st.st_ino)
        except OSError:  # missing: _load says so
            key = path.resolve()
        if key in seen:
            raise ConfigError(
                f"{seen[key]} and {path} are the same file: averaging a checkpoint with itself "
                "gives it back; name each checkpoint once."
            )
        seen[key] = path


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
