"""What trained a checkpoint: ``training.json``'s facts, read from a Lightning checkpoint.

:func:`training_facts` reads optimizer steps, tokens, wall time, hardware, precision, the
optimisation and data settings and the lineage (:mod:`zoo.lineage`) from a checkpoint's
:class:`~zoo.callbacks.TrainingSummary` state; :func:`with_earlier_stages` adds the stages of
the published checkpoint that a run continued (a recipe's ``stage1`` before it), so the totals
cover every stage; :func:`training_windows` and :func:`stage_source` word them for the card.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from zoo.hub.registry import load_registry
from zoo.lineage import git_commit
from zoo.tasks.checkpoint import read_checkpoint

__all__ = [
    "data_checksum_at_export",
    "stage_source",
    "training_facts",
    "training_windows",
    "with_earlier_stages",
]


def data_checksum_at_export(context: int, data: dict[str, Any]) -> dict[str, Any] | None:
    """The training data's checksum, loading it again with the run's data settings (for runs
    that predate the checksum; ``context``: the model's), marked ``"recorded": "at export"``;
    ``None`` when the data is not here, or the run also trained on other data sets."""
    checksum = _loaded_data_checksum(context, data)
    return checksum | {"recorded": "at export"} if checksum else None


def _loaded_data_checksum(context: int, data: dict[str, Any]) -> dict[str, Any] | None:
    from zoo.data import ByteTextDataModule, ImageDataModule, TranslationDataModule
    from zoo.data.images import IMAGE_DATASETS
    from zoo.errors import ZooError
    from zoo.lineage import data_checksum

    dataset = data.get("dataset")
    if not dataset or data.get("extra_train"):
        return None
    try:
        if data.get("source_lang"):  # a parallel corpus: data_checksum reads its sentence pairs
            return data_checksum(
                TranslationDataModule(
                    dataset=dataset,
                    source_lang=data["source_lang"],
                    target_lang=data["target_lang"],
                )
            )
        if dataset in IMAGE_DATASETS:
            dm = ImageDataModule(dataset=dataset, seed=data.get("seed") or 0)
        else:
            dm = ByteTextDataModule(dataset=dataset, seq_len=context)
        dm.setup("fit")
    except (ZooError, OSError, ValueError):
        return None
    return data_checksum(dm, [s for s in dm.splits if s != "test"])


def _run_summary(ckpt: dict[str, Any], path: Path | None) -> dict[str, Any]:
    """The :class:`~zoo.callbacks.TrainingSummary` state of a checkpoint. An average (``zoo
    average``) keeps no callback state: its newest input's run gives it, from the run's
    ``training_summary.json`` (written at the end of fit) or a ``last.ckpt``, whichever is of the
    newest input's step, found beside the average or up to two folders above its inputs."""
    from zoo.callbacks import TrainingSummary

    summary = ckpt.get("callbacks", {}).get("TrainingSummary")
    averaged = ckpt.get("averaged_from")
    if summary is not None or not averaged or path is None:
        return summary or {}
    step = max(averaged["global_steps"])
    newest = Path(averaged["files"][-1])
    folders = dict.fromkeys([path.parent, path.parent.parent, *newest.parents[:3]])
    for folder in folders:
        facts = folder / TrainingSummary.FILE
        if facts.is_file() and json.loads(facts.read_text()).get("global_step") == step:
            return json.loads(facts.read_text())
        last = folder / "last.ckpt"
        if last.is_file():
            run = read_checkpoint(last)
            if run.get("global_step") == step:
                return run.get("callbacks", {}).get("TrainingSummary", {})
    return {}


def training_facts(ckpt: dict[str, Any], path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Training facts from a loaded Lightning checkpoint dict (what ``training.json`` holds);
    ``path``, where it was read from, finds the run of an averaged checkpoint."""
    summary = _run_summary(ckpt, Path(path) if path is not None else None)
    hp = ckpt.get("hyper_parameters", {})
    dm = ckpt.get("datamodule_hyper_parameters", {})
    wall = summary.get("wall_time")
    tokens = summary.get("tokens")
    return {
        "optimizer_steps": ckpt.get("global_step"),
        "tokens": tokens,
        "wall_time_s": round(wall, 1) if wall else None,
        "tokens_per_s": round(tokens / wall) if tokens and wall else None,
        "hardware": ", ".join(summary.get("hardware", [])) or None,
        "precision": summary.get("precision") or None,
        "optimization": {
            k: hp.get(k)
            for k in ("lr", "weight_decay", "betas", "eps", "warmup_steps", "lr_schedule")
        }
        | {k: hp[k] for k in ("lr_scale", "label_smoothing") if k in hp},  # translation's
        "data": {
            k: dm.get(k)
            for k in ("dataset", "batch_size", "seq_len", "seed")
            + (
                ("source_lang", "target_lang", "vocab_size", "max_tokens")
                if "max_tokens" in dm
                else ()
            )
        }
        | ({"extra_train": list(dm["extra_train"])} if dm.get("extra_train") else {})
        | _task_settings(dm),  # fmt: skip
        "lineage": {
            "git_commits": summary.get("git_commits") or None,  # None: trained before recorded
            "data": summary.get("data"),
            "parent": hp.get("init_from"),
            "export_commit": git_commit(),
        },
        "averaged_from": {"global_steps": ckpt["averaged_from"]["global_steps"]}
        if ckpt.get("averaged_from")
        else None,  # fmt: skip
        "versions": {
            "attention-zoo": _version("attention-zoo"),
            "torch": torch.__version__,
            "lightning": _version("lightning"),
        },
    }


def _task_settings(dm: dict[str, Any]) -> dict[str, Any]:
    """A long-range task data module's hyperparameters: the fields of its task
    (:class:`zoo.data.long_range_tasks.LongRangeTask`) and, as ``dataset``, the corpus its windows
    come from (``pg19mini`` for ``pg19_repeats``, :data:`zoo.data.long_range.TASK_CORPUS`). ``{}``
    for other data modules."""
    if "task" not in dm:
        return {}
    from dataclasses import fields

    from zoo.data.long_range import TASK_CORPUS
    from zoo.data.long_range_tasks import LongRangeTask

    task = {f.name: dm[f.name] for f in fields(LongRangeTask) if f.name in dm}
    return {"dataset": dm.get("dataset") or TASK_CORPUS.get(dm["task"])} | task


def _stage(facts: dict[str, Any], **source: str) -> dict[str, Any]:
    """One entry of ``training.json``'s ``stages``: what one run of a staged training did."""
    data, opt = facts.get("data") or {}, facts.get("optimization") or {}
    return source | {
        "optimizer_steps": facts.get("optimizer_steps"),
        "tokens": facts.get("tokens"),
        "wall_time_s": facts.get("wall_time_s"),
        "hardware": facts.get("hardware"),
        "seq_len": data.get("seq_len"),
        "batch_size": data.get("batch_size"),
        "lr": opt.get("lr"),
    }


def _previous_version(parent: str | None, name: str | None) -> dict[str, Any] | None:
    """The ``training.json`` facts of the published ``name`` that a run was trained on from, when
    ``parent`` (its ``init_from``) is that checkpoint: its name, or its folder (whose name is
    ``name``). Such a run is the checkpoint's next version, trained on from the previous one (the
    GPU model's second stage), not a fine-tune into another model. ``None`` otherwise."""
    if not parent or not name:
        return None
    from zoo.files import explicit_path

    folder = explicit_path(parent)
    if folder is None:
        if parent != name:
            return None
        folder = load_registry().shipped_dir / name
    facts = folder / "training.json"
    if folder.name != name or not facts.is_file():
        return None
    return json.loads(facts.read_text())


def with_earlier_stages(
    facts: dict[str, Any], name: str | None = None, **source: str
) -> dict[str, Any]:
    """``facts`` of a run that continued an earlier one, with ``stages``, the earlier runs first
    and this one last (named by ``source``: ``recipe=...``), and the totals of all stages:
    optimizer steps, tokens, wall time. Two kinds of run continue an earlier one:

    - ``init_from`` a run directory or ``.ckpt``: a later training stage (e.g. 200 steps on
      4,096-byte windows after 3,640 on 1,024); each earlier stage is named by its run directory;
    - ``init_from`` the published checkpoint ``name`` itself (its name or folder): its next
      version, trained on from the previous one; the earlier stages are the previous version's
      (its own ``stages``, or itself, named by its registered recipe).

    A run from another published checkpoint or ``save_pretrained`` folder is a fine-tune into
    another model, not a stage: its facts stay its own, with the parent in the lineage. Facts that
    already hold ``stages`` are returned as they are; exporting a version again over its own folder
    does not count its stage twice."""
    from zoo.pretrained import find_checkpoint

    if facts.get("stages"):
        return facts
    parent = (facts.get("lineage") or {}).get("parent")
    ckpt = find_checkpoint(parent) if parent else None
    if ckpt is not None:
        earlier = read_checkpoint(ckpt)
        first = with_earlier_stages(training_facts(earlier, ckpt), run=str(parent))
        first_source: dict[str, str] = {"run": str(parent)}
    else:
        first = _previous_version(parent, name)
        if first is None:
            return facts
        entry = load_registry().entries.get(name)
        first_source = {"checkpoint": f"{name} (previous version)"} | (
            {"recipe": entry.recipe} if entry is not None and entry.recipe else {}
        )
    earlier = first.get("stages") or [_stage(first, **first_source)]
    this = _stage(facts, **source)
    if earlier[-1] == this:  # the folder is this version, exported before: export it again
        earlier = earlier[:-1]
    stages = [*earlier, this]
    steps, tokens, wall = (
        [st[k] for st in stages] for k in ("optimizer_steps", "tokens", "wall_time_s")
    )  # fmt: skip
    total = {
        "optimizer_steps": sum(steps) if None not in steps else None,
        "tokens": sum(tokens) if None not in tokens else None,
        "wall_time_s": round(sum(wall), 1) if None not in wall else None,
    }
    total["tokens_per_s"] = (
        round(total["tokens"] / total["wall_time_s"]) if total["tokens"] and total["wall_time_s"]
        else None
    )  # fmt: skip
    hardware = list(dict.fromkeys(st["hardware"] for st in stages if st["hardware"]))
    return facts | total | {"hardware": "; ".join(hardware) or None, "stages": stages}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def stage_source(stage: dict[str, Any]) -> str:
    """What trained one stage (``training.json``'s ``stages``): its recipe, or its run directory
    (an earlier stage named by ``init_from``)."""
    from zoo.lineage import checkpoint_name

    if stage.get("recipe"):
        return f"`{stage['recipe']}`"
    run = checkpoint_name(stage.get("run")) or "?"  # a packaged recipe's run: the recipe
    return f"`{run}`" if run.endswith((".yaml", ".yml")) else f"the run `{run}`"


def training_windows(
    data: dict[str, Any], context: int | None, stages: list[dict] | None = None, unit: str = "bytes"
) -> str:
    """``"8 x 1,024 bytes per optimizer step"``, saying so when the windows are shorter than the
    model's context (the positions past them are then never trained). A model trained in
    ``stages`` (``training.json``: each with ``recipe``, ``optimizer_steps``, ``batch_size``,
    ``seq_len``) gets one such line per stage."""
    if stages:
        return "; then ".join(
            f"{training_windows(st, context, unit=unit)} for {st.get('optimizer_steps', '?'):,} steps "
            f"({stage_source(st)})"
            for st in stages
        )
    if data.get("max_tokens"):  # translation: token-bucketed batches of sentence pairs
        return (
            f"batches of sentence pairs of similar length, up to {data['max_tokens']:,} padded "
            "source tokens each"
        )
    batch, seq_len = data.get("batch_size"), data.get("seq_len")
    if not batch or not seq_len:
        return "unknown"
    text = f"{batch} × {seq_len:,} {unit} per optimizer step"
    if context and seq_len < context:
        text += (
            f" (shorter than the context, {context:,}: positions {seq_len:,} and later are "
            "evaluated but never trained, an extrapolation of the position scheme)"
        )
    return text
