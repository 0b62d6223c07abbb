"""Measuring bits per byte of any trained model on a split of a byte-level data set (``zoo evaluate``).

The measurement is Lightning's evaluation loop over :class:`~zoo.data.ByteTextDataModule`'s windows
(non-overlapping windows of the model's context, each document on its own; the metric is summed NLL
over all scored bytes / ln 2 / bytes, :class:`~zoo.metrics.BitsPerByte`), so it is exactly what
``zoo test`` reports. ``windows=N`` measures the first ``N`` windows of the split, in order: the
fixed slice the test suite re-measures for each published checkpoint. Published metrics are
measured in full fp32 (``precision="32-true"``) so that they reproduce to ~1e-4 bits on any CPU.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from pathlib import Path

from lightning import Trainer

from zoo.callbacks import hardware
from zoo.data.text import EvalWindows
from zoo.errors import CheckpointError, ConfigError
from zoo.hub.registry import Metric

__all__ = ["evaluate", "find_checkpoint", "load_metrics", "load_task", "save_metric"]


def find_checkpoint(source: str | os.PathLike) -> Path | None:
    """The Lightning checkpoint a run or ``.ckpt`` path names, or ``None`` for other sources.

    A run directory (``runs/<family>/<dataset>``) gives ``checkpoints/best.ckpt`` (else ``last.ckpt``).
    """
    path = Path(source)
    if path.is_file() and path.suffix == ".ckpt":
        return path
    for name in ("best.ckpt", "last.ckpt"):
        if (path / "checkpoints" / name).is_file():
            return path / "checkpoints" / name
    if path.suffix == ".ckpt":
        raise CheckpointError(f"{path} does not exist.")
    return None


def load_task(source: str | os.PathLike):
    """A :class:`~zoo.tasks.CausalLM` for a ``.ckpt``, a run directory, or anything
    :func:`zoo.from_pretrained` takes (published name, repo id, ``save_pretrained`` directory)."""
    from zoo.tasks import CausalLM

    ckpt = find_checkpoint(source)
    if ckpt is None:
        return CausalLM(init_from=str(source))
    try:
        return CausalLM.load_from_checkpoint(ckpt, map_location="cpu")
    except Exception as e:
        raise CheckpointError(f"could not load {ckpt} ({type(e).__name__}: {e})") from None


def _targets(module, datamodule, split: str, windows: int | None) -> int:
    ds = EvalWindows(datamodule.splits[split], module.model.config.max_seq_len)
    n = len(ds) if windows is None else min(windows, len(ds))
    return sum(min(ds.seq_len, len(ds.docs[d]) - 1 - start) for d, start in ds.index[:n])


def evaluate(
    source,
    *,
    dataset: str = "pg19mini",
    split: str = "test",
    windows: int | None = None,
    first_bytes: int | None = None,
    precision: str = "32-true",
    batch_size: int | None = None,
    data_dir: str | None = None,
    progress: bool = True,
) -> Metric:
    """Bits per byte of ``source`` (see :func:`load_task`) on ``split`` of ``dataset``.

    Args:
        windows: measure only the first ``windows`` evaluation windows of the split (None: all).
        first_bytes: instead of ``windows``: as many windows as cover this many bytes
            (``ceil(first_bytes / context)``), the same slice of the text for any context.
        precision: a Lightning precision; published metrics use ``"32-true"``.
        batch_size: windows per batch (default: 16, or 1 for contexts of 2048 bytes and more).

    Returns:
        a :class:`~zoo.hub.registry.Metric` (``value`` in bits per byte) with the bytes scored.

    Raises:
        ConfigError: an unknown split; CheckpointError / HubError: the model cannot be loaded;
        DataNotFoundError: the data set is not found.
    """
    from zoo.data import ByteTextDataModule

    if split not in ("valid", "test"):
        raise ConfigError(f"split must be 'valid' or 'test', not {split!r}")
    if windows is not None and first_bytes is not None:
        raise ConfigError("give windows or first_bytes, not both")
    module = load_task(source)
    context = module.model.config.max_seq_len
    if first_bytes is not None:
        windows = math.ceil(first_bytes / context)
    bs = batch_size or (1 if context >= 2048 else 16)
    if windows is not None:
        bs = math.gcd(bs, windows)  # whole batches cover exactly the first `windows` windows
    datamodule = ByteTextDataModule(dataset=dataset, data_dir=data_dir, eval_batch_size=bs)
    limit = 1.0 if windows is None else windows // bs
    trainer = Trainer(
        accelerator="auto",
        devices=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        limit_val_batches=limit,
        limit_test_batches=limit,
    )
    run = trainer.test if split == "test" else trainer.validate
    run(module, datamodule=datamodule, verbose=False)
    key = "test/bpb" if split == "test" else "val/bpb"
    value = float(trainer.callback_metrics[key])
    return Metric(
        name="bits_per_byte",
        value=round(value, 5),
        dataset=dataset,
        split=split,
        windows=windows,
        targets=_targets(module, datamodule, split, windows),
        precision=precision,
        context=context,
        hardware=hardware(trainer),
        date=datetime.date.today().isoformat(),
    )


def save_metric(metric: Metric, path: str | os.PathLike) -> None:
    """Add ``metric`` to the JSON list in ``path``, replacing one measured the same way."""
    path = Path(path)
    records = json.loads(path.read_text()) if path.is_file() else []
    same = ("name", "dataset", "split", "windows", "precision")
    new = metric.to_dict()
    records = [r for r in records if any(r.get(k) != new.get(k) for k in same)] + [new]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=2) + "\n")


def load_metrics(path: str | os.PathLike) -> list[Metric]:
    """The metrics :func:`save_metric` wrote to ``path``."""
    try:
        return [Metric(**r) for r in json.loads(Path(path).read_text())]
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} does not exist: measure the run first (zoo evaluate RUN --out {path})."
        ) from None
