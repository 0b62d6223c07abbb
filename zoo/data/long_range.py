"""Long-range tasks as a LightningDataModule, and their accuracy by distance.

The tasks (``mqar``, ``copy``, ``pg19_repeats``, ``pg19_copies``) are defined in
:mod:`zoo.data.long_range_tasks`: items written twice in a sequence, the bytes of the second
occurrence after its key or cue scored, distances controlled. :class:`LongRangeTaskDataModule`
feeds them to :class:`zoo.tasks.CausalLM` with ``zoo fit`` (a recipe's ``data:``, as in
``experiments/long_range/mqar_routing.yaml``); :func:`task_accuracy_by_distance` measures a
trained model on them, by power-of-two distance bucket, without Lightning (docs/results/retrieval.md
has the runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal

import numpy as np
import torch
from lightning import LightningDataModule
from torch import nn
from torch.utils.data import DataLoader, Sampler

from zoo.config import require_positive
from zoo.data.byte_corpora import load_byte_corpus
from zoo.data.long_range_tasks import SPLIT_STREAM, LongRangeTask, TaskExamples
from zoo.data.windows import EvalWindows, ResumableLoader, samples_done
from zoo.errors import ConfigError

__all__ = [
    "TASK_CORPUS",
    "FreshOrder",
    "LongRangeTaskDataModule",
    "TaskAccuracy",
    "task_accuracy_by_distance",
    "task_hits",
]


TASK_CORPUS: dict[str, str] = {"pg19_repeats": "pg19mini", "pg19_copies": "pg19mini"}
"""The byte corpus whose windows a task's examples are (the synthetic tasks have none)."""


class FreshOrder(Sampler[int]):
    """Epoch ``e`` yields examples ``e n .. (e + 1) n - 1``, so every step draws new ones; the
    first epoch iterated starts ``start`` in (a resumed run: the examples already trained on)."""

    def __init__(self, n: int, start: int = 0) -> None:
        self.n, self.start, self.epoch = n, start, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        start, self.start = self.start, 0
        return iter(range(self.epoch * self.n + start, (self.epoch + 1) * self.n))

    def __len__(self) -> int:
        return self.n - self.start


# --- the DataModule --------------------------------------------------------------------------------
class LongRangeTaskDataModule(LightningDataModule):
    """Long-range tasks (:mod:`zoo.data.long_range_tasks`) for any byte-level causal LM: batches
    ``(x, y)`` of int64 ``(batch_size, seq_len)``, ``-100`` on the targets not scored.

    Args:
        task: ``mqar``, ``copy``, ``pg19_repeats`` or ``pg19_copies`` (the copying curriculum:
            the window's own text, and some random spans, recurring later in the window).
        seq_len: bytes per sequence (1,024 to 8,192 in the recipes); ``None`` takes the model's
            ``max_seq_len`` at setup.
        n_pairs: items per sequence: key-value pairs (mqar), spans copied (copy), planted repeats
            (pg19_repeats, in a window that gets any), copies (pg19_copies, likewise; a copy
            that finds no free place is left out).
        key_len: mqar: uppercase letters per key (at most 8; keys are distinct in a sequence).
        value_len: mqar: digits per value.
        span: copy, pg19_repeats: bytes per span.
        cue: copy, pg19_repeats: the second copy's first bytes, not scored (pg19_copies: by
            :func:`task_accuracy_by_distance`, at most ``min_span // 2`` of them).
        min_distance: the shortest distance (bytes, start to start); ``None``: the item's width
            (pg19_copies: every copy's distance is at least its length).
        max_distance: the longest distance; ``None``: ``seq_len`` minus the item's width.
        distance_multiple: draw only distances that are multiples of this (1: every distance;
            the stride, for a strided pattern: docs/results/retrieval.md).
        alphabet: ``letters`` (lowercase) or ``bytes``: the filler of mqar and copy, and the
            spans of copy and pg19_repeats.
        rate: pg19_repeats, pg19_copies: the probability that a training window gets repeats
            (copies).
        min_span: pg19_copies: the shortest copy in bytes (default 8); a copy's length is drawn
            log-uniformly between ``min_span`` and ``max_span``.
        max_span: pg19_copies: the longest copy in bytes (default 256).
        random_share: pg19_copies: the share of copies that are random spans written twice
            rather than the window's own text (default 0.25).
        random_kinds: pg19_copies: the kinds of those spans, one drawn uniformly per copy:
            ``letters``, ``uppercase``, ``digits``, ``printable`` (0x20-0x7e) or ``bytes``
            (1-255), as the copy probe names them (default letters and printable: the probe's
            uppercase, digits, bytes and text are held out).
        n_eval: examples in each of the validation and test sets (pg19_repeats, pg19_copies:
            windows with repeats for :func:`task_accuracy_by_distance`; their loaders are
            pg19mini's own).
        batch_size: training sequences per batch.
        eval_batch_size: sequences per evaluation batch (default: ``batch_size``).
        train_samples_per_epoch: training examples per epoch (each epoch draws new ones).
        num_workers: DataLoader worker processes.
        seed: seed of the training examples (the evaluation sets do not depend on it).
        data_dir: pg19_repeats, pg19_copies: the directory holding ``pg19mini/`` (see
            :class:`~zoo.data.ByteTextDataModule`).
        download: pg19_repeats, pg19_copies: fetch missing books.

    Raises:
        ConfigError: an unknown task, or settings that cannot work (a distance past the sequence,
            items that do not fit, a cue as long as the span, ...), at construction, or at setup
            when ``seq_len`` comes from the model; a ``seq_len`` past the model's context, at setup.
    """

    def __init__(
        self,
        task: Literal["mqar", "copy", "pg19_repeats", "pg19_copies"] = "mqar",
        seq_len: int | None = None,
        n_pairs: int = 4,
        key_len: int = 2,
        value_len: int = 2,
        span: int = 32,
        cue: int = 8,
        min_distance: int | None = None,
        max_distance: int | None = None,
        distance_multiple: int = 1,
        alphabet: Literal["letters", "bytes"] = "letters",
        rate: float = 0.5,
        min_span: int = 8,
        max_span: int = 256,
        random_share: float = 0.25,
        random_kinds: Sequence[str] = ("letters", "printable"),
        n_eval: int = 256,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        train_samples_per_epoch: int = 1_000_000,
        num_workers: int = 0,
        seed: int = 0,
        data_dir: str | None = None,
        download: bool = False,
    ) -> None:
        super().__init__()
        require_positive(
            "LongRangeTaskDataModule",
            n_eval=n_eval,
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            train_samples_per_epoch=train_samples_per_epoch,
        )
        require_positive("LongRangeTaskDataModule", 0, num_workers=num_workers)
        self.save_hyperparameters()
        settings = {f.name: self.hparams[f.name] for f in fields(LongRangeTask)}
        self.spec = LongRangeTask(**settings).check()
        self.n_eval, self.batch_size = n_eval, batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.train_samples_per_epoch = train_samples_per_epoch
        self.num_workers, self.seed = num_workers, seed
        self.data_dir, self.download = data_dir, download
        self.splits: dict[str, list[np.ndarray]] = {}  # pg19 tasks: the books of each split

    @property
    def seq_len(self) -> int | None:
        return self.spec.seq_len

    @property
    def dataset(self) -> str | None:
        """The byte corpus the task's windows come from (:data:`TASK_CORPUS`), else ``None``."""
        return TASK_CORPUS.get(self.spec.task)

    def resolve(self, model: nn.Module | None = None) -> LongRangeTask:
        """The task with ``seq_len`` set (from ``model``, or the trainer's model, when it is
        ``None``) and checked.

        Raises:
            ConfigError: the settings do not fit that ``seq_len``, or it is past the model's context.
        """
        if model is None and self.trainer is not None:
            model = self.trainer.lightning_module
        config = _config(model)
        context = getattr(config, "max_seq_len", None)
        if self.spec.seq_len is None:
            if context is None:
                raise ConfigError(
                    "seq_len is not set and there is no model to take max_seq_len "
                    "from; pass --data.init_args.seq_len"
                )
            self.spec = replace(self.spec, seq_len=context).check()
        if context is not None and self.spec.seq_len > context:
            raise ConfigError(
                f"seq_len={self.spec.seq_len} is past the model's context "
                f"(max_seq_len={context}); lower seq_len or raise max_seq_len"
            )
        return self.spec

    def prepare_data(self) -> None:
        if self.download and self.dataset is not None:
            load_byte_corpus(self.dataset, data_dir=self.data_dir, download=True)

    def setup(self, stage: str | None = None) -> None:
        self.resolve()
        if self.dataset is not None:
            self._load(
                {"fit": ("train", "valid"), "validate": ("valid",), "test": ("test",)}.get(
                    stage or "", ("train", "valid", "test")
                )
            )

    def _load(self, splits: Sequence[str]) -> None:
        missing = [s for s in splits if s not in self.splits]
        if missing:
            docs = load_byte_corpus(
                self.dataset, data_dir=self.data_dir, download=self.download, splits=missing
            )
            for split, raw in docs.items():
                self.splits[split] = [np.frombuffer(d, dtype=np.uint8) for d in raw]

    def examples(self, split: Literal["train", "valid", "test"]) -> TaskExamples:
        """The examples of ``split``: the fixed ``n_eval`` of ``valid`` or ``test`` (for
        pg19 tasks, windows of the split's books with repeats), or the training ones."""
        spec = self.resolve()
        text, rate = None, 1.0
        if self.dataset is not None:
            self._load((split,))
            text = np.concatenate(self.splits[split])
            if len(text) <= spec.seq_len:
                raise ConfigError(
                    f"{self.dataset} {split} has {len(text)} bytes, not more than "
                    f"seq_len={spec.seq_len}"
                )
            rate = spec.rate if split == "train" else 1.0
        if split == "train":
            return TaskExamples(spec, (0, self.seed), self.train_samples_per_epoch, text, rate)
        return TaskExamples(spec, (SPLIT_STREAM[split],), self.n_eval, text, rate)

    def train_dataloader(self) -> DataLoader:
        data = self.examples("train")
        return ResumableLoader(
            data,
            batch_size=self.batch_size,
            drop_last=True,
            sampler=FreshOrder(data.n, start=self._examples_done(data.n)),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def _examples_done(self, n: int) -> int:
        """Examples of the current epoch that a resumed run already trained on (0 if fresh)."""
        return samples_done(self.trainer, n, self.batch_size)

    def _eval_loader(self, split: Literal["valid", "test"]) -> DataLoader:
        if self.dataset is not None:
            self._load((split,))
            data = EvalWindows(self.splits[split], self.resolve().seq_len)
        else:
            data = self.examples(split)
        return DataLoader(
            data, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("valid")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")


def _config(model: nn.Module | None):
    """The model config of a bare model or of a LightningModule wrapping one (``.model``)."""
    config = getattr(model, "config", None)
    return config if config is not None else getattr(getattr(model, "model", None), "config", None)


# --- accuracy by distance --------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskAccuracy:
    """Exact-match accuracy (argmax) of the scored bytes, by distance bucket.

    Bucket ``i`` holds the items whose distance ``d`` satisfies ``lower[i] <= d < 2 lower[i]``
    (``lower``: powers of two); ``items[i]`` of them. ``byte_accuracy[i]`` is the fraction of their
    scored bytes predicted right, ``item_accuracy[i]`` the fraction of items with every scored byte
    right. ``chance`` is a uniform guess's byte accuracy over the scored bytes' alphabet.
    ``causal`` is ``False`` for a model whose evaluation is not strictly causal (top-w routing): it
    may read the answer, and its accuracy is not a measurement of retrieval.
    """

    task: str
    split: str
    seq_len: int
    lower: tuple[int, ...]
    items: tuple[int, ...]
    byte_accuracy: tuple[float, ...]
    item_accuracy: tuple[float, ...]
    chance: float
    causal: bool = True

    def table(self) -> str:
        """A markdown table, one row per bucket."""
        note = "" if self.causal else " (model not strictly causal: not a measurement of retrieval)"
        head = (
            f"{self.task}, {self.split}, seq_len {self.seq_len}: chance {self.chance:.4f} per byte"
        )
        rows = [
            f"| {lo:,}–{2 * lo - 1:,} | {n} | {b:.4f} | {i:.4f} |"
            for lo, n, b, i in zip(
                self.lower, self.items, self.byte_accuracy, self.item_accuracy, strict=True
            )
        ]
        table = ["| distance | items | byte accuracy | item accuracy |", "|---|---|---|---|", *rows]
        return "\n".join([head + note, "", *table])


def task_accuracy_by_distance(
    model: nn.Module,
    datamodule: LongRangeTaskDataModule,
    split: Literal["valid", "test"] = "valid",
    *,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
) -> TaskAccuracy:
    """The accuracy of ``model`` on the scored bytes of ``datamodule``'s ``split`` examples, by
    distance (:class:`TaskAccuracy`).

    ``model`` maps int64 ``(B, T)`` bytes to ``(B, T, 256)`` logits: a bare model
    (``CausalLM.load_from_checkpoint(path).model``, :func:`zoo.from_pretrained`) or a
    :class:`~zoo.tasks.CausalLM`. It runs in fp32 and eval mode, as the copy probe runs (it is
    converted to fp32 in place; its train/eval mode is restored), without Lightning. A
    ``seq_len`` of ``None`` is taken from the model.

    Raises:
        ConfigError: as :meth:`LongRangeTaskDataModule.resolve`.
    """
    spec = datamodule.resolve(model)
    structure = getattr(_config(model), "structure", None)
    causal = (structure() if callable(structure) else {}).get("causal") is not False
    distance, right, total = task_hits(
        model, datamodule, split, batch_size=batch_size, device=device
    )
    bucket = 2 ** np.floor(np.log2(np.maximum(distance, 1))).astype(np.int64)
    lower = np.unique(bucket)
    rows = [(bucket == b) for b in lower]
    return TaskAccuracy(
        task=spec.task,
        split=split,
        seq_len=spec.seq_len,
        lower=tuple(int(b) for b in lower),
        items=tuple(int(r.sum()) for r in rows),
        byte_accuracy=tuple(float(right[r].sum() / total[r].sum()) for r in rows),
        item_accuracy=tuple(float((right[r] == total[r]).mean()) for r in rows),
        chance=spec.chance,
        causal=causal,
    )


def task_hits(
    model: nn.Module,
    datamodule: LongRangeTaskDataModule,
    split: Literal["valid", "test"] = "valid",
    *,
    batch_size: int = 8,
    device: str | torch.device = "cpu",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item of ``split``'s examples: ``(distance, right, total)``, int64 ``(items,)``: its
    distance in bytes, its scored bytes predicted right (argmax), and its scored bytes. The
    model runs as :func:`task_accuracy_by_distance` says; that function buckets these by distance.

    Raises:
        ConfigError: as :meth:`LongRangeTaskDataModule.resolve`.
    """
    datamodule.resolve(model)
    data = datamodule.examples(split)
    training = model.training
    model = model.float().to(device).eval()
    distance, right, total = [], [], []
    try:
        with torch.no_grad():
            for start in range(0, len(data), batch_size):
                batch = [data.example(i) for i in range(start, min(start + batch_size, len(data)))]
                x = torch.stack([e.x for e in batch]).to(device)  # (B, T)
                pred = model(x).logits.float().argmax(-1).cpu()  # (B, T)
                for e, p in zip(batch, pred, strict=True):
                    idx = torch.from_numpy(e.scored)  # (n, m)
                    hits = (p[idx] == e.y[idx]).sum(1)  # (n,)
                    distance += e.distance.tolist()
                    right += hits.tolist()
                    total += [idx.shape[1]] * len(hits)
    finally:
        model.train(training)
    return np.array(distance), np.array(right), np.array(total)
