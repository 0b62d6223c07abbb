"""Byte-level language-modelling data: the tokenizer and the LightningDataModule.

The corpora (``dataset=``: ``pg19mini``, ``enwik8``, ``enwik8_prefix``, ``tinyshakespeare``,
``text_file``, ``files``), their splits and where their files are found are in
:mod:`zoo.data.byte_corpora`; a corpus of one's own (``files``), streamed when larger than memory,
in :mod:`zoo.data.corpus_files`.

Training draws random windows; evaluation covers every byte of a split exactly once
(:mod:`zoo.data.windows`). The first byte of each document has no context and is not scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from lightning import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader

from zoo.config import require_positive
from zoo.data.byte_corpora import Split, load_byte_corpus
from zoo.data.corpus_files import StreamedDocuments, StreamedWindows
from zoo.data.windows import (
    EvalWindows,
    RandomWindows,
    ResumableLoader,
    ResumableOrder,
    samples_done,
)
from zoo.errors import ConfigError

__all__ = ["ByteTextDataModule", "ByteTokenizer"]


class ByteTokenizer:
    """UTF-8 bytes as tokens: ``vocab_size = 256``; decoding replaces invalid sequences with U+FFFD."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return bytes(ids).decode("utf-8", errors="replace")


# --- the DataModule --------------------------------------------------------------------------------
class ByteTextDataModule(LightningDataModule):
    """Byte-level language-modelling data: batches ``(x, y)`` of int64 ``(batch_size, seq_len)``.

    Args:
        dataset: one of ``pg19mini``, ``enwik8``, ``enwik8_prefix``, ``tinyshakespeare``,
            ``text_file``, ``files`` (see the module docstring for splits).
        data_dir: directory holding ``<dataset>/``, the only one searched when given (default:
            ``$ZOO_DATA_DIR``, then the download cache).
        path: the file for ``dataset="text_file"``.
        data_files: for ``dataset="files"``: glob(s) of text, JSON lines or parquet files
            (:mod:`zoo.data.corpus_files`).
        text_column: for ``dataset="files"``: the column holding the text.
        streaming: for ``dataset="files"``: stream a corpus larger than memory (training then
            reads contiguous windows without end: set ``max_steps`` and an integer
            ``val_check_interval``).
        seq_len: window length; ``None`` uses the model's ``max_seq_len``.
        batch_size: training windows per batch.
        eval_batch_size: windows per evaluation batch (default: ``batch_size``).
        train_samples_per_epoch: random windows per training epoch (default: enough windows to cover
            the training split once).
        download: fetch missing files from the set's public home into ``data_dir`` (default:
            ``$ZOO_CACHE_DIR``).
        num_workers: DataLoader worker processes.
        seed: seed of the random training windows.
        prompts: texts that ``zoo predict`` continues (one sample per prompt).
        seq_len_warmup_steps: sequence-length warmup ("staged training": Press et al. 2021,
            Shortformer §3; Li et al. 2022): for this many optimizer steps each training batch of
            ``(batch_size, seq_len)`` is cut into more, shorter windows ``(batch_size * seq_len / l,
            l)``, with ``l`` doubling from ``seq_len_warmup_start`` to ``seq_len`` in equal stages
            (:meth:`window_length`). The bytes of every step are the same as without warmup. 0
            turns it off. A resumed run must keep the schedule it was started with.
        seq_len_warmup_start: the first stage's window length; ``seq_len`` must be this times a
            power of two.
        seq_len_warmup_doubling: ``True``: the stages double the length (above); ``False``: one
            stage, all ``seq_len_warmup_steps`` at ``seq_len_warmup_start``, then ``seq_len``
            (Shortformer's two-stage schedule).
        extra_train: more data sets whose training splits are added to ``dataset``'s (e.g.
            ``["enwik8_prefix"]`` beside pg19mini); validation and test stay ``dataset``'s.

    Raises:
        ConfigError: a warmup whose start does not divide ``seq_len`` by a power of two, or a
            resumed run whose warmup schedule differs from its checkpoint's.
    """

    def __init__(
        self,
        dataset: Literal[
            "pg19mini", "enwik8", "enwik8_prefix", "tinyshakespeare", "text_file", "files"
        ] = "pg19mini",
        data_dir: str | None = None,
        path: str | None = None,
        seq_len: int | None = None,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        train_samples_per_epoch: int | None = None,
        download: bool = False,
        num_workers: int = 0,
        seed: int = 0,
        prompts: list[str] | None = None,
        seq_len_warmup_steps: int = 0,
        seq_len_warmup_start: int = 256,
        seq_len_warmup_doubling: bool = True,
        extra_train: list[str] | None = None,
        data_files: list[str] | str | None = None,
        text_column: str = "text",
        streaming: bool = False,
    ) -> None:
        super().__init__()
        require_positive(
            "ByteTextDataModule", seq_len=seq_len, batch_size=batch_size,
            eval_batch_size=eval_batch_size, train_samples_per_epoch=train_samples_per_epoch,
        )  # fmt: skip
        require_positive("ByteTextDataModule", 0, num_workers=num_workers)
        if seq_len_warmup_steps < 0 or seq_len_warmup_start <= 0:
            raise ConfigError(
                "seq_len_warmup_steps must be >= 0 and seq_len_warmup_start positive, got "
                f"{seq_len_warmup_steps} and {seq_len_warmup_start}"
            )
        self.seq_len_warmup_steps = seq_len_warmup_steps
        self.seq_len_warmup_start = seq_len_warmup_start
        self.seq_len_warmup_doubling = seq_len_warmup_doubling
        self.save_hyperparameters()
        self.dataset, self.data_dir, self.path = dataset, data_dir, path
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.train_samples_per_epoch = train_samples_per_epoch
        self.download, self.num_workers, self.seed = download, num_workers, seed
        self.prompts = prompts
        self.extra_train = list(extra_train or [])
        if streaming and (dataset != "files" or extra_train):
            raise ConfigError("streaming=True reads dataset='files' alone (no extra_train)")
        self.corpus = {"data_files": data_files, "text_column": text_column}  # dataset="files"
        if streaming:
            self.corpus["streaming"] = True
        self.splits: dict[str, list[np.ndarray]] = {}
        self.tokenizer = ByteTokenizer()

    def _resolve_seq_len(self) -> int:
        if self.seq_len is None:
            module = self.trainer.lightning_module if self.trainer is not None else None
            model = getattr(module, "model", None)
            if model is None:
                raise ValueError(
                    "seq_len is not set and there is no model to take max_seq_len from"
                )
            self.seq_len = model.config.max_seq_len
        return self.seq_len

    def warmup_lengths(self) -> list[int]:
        """The window length of each warmup stage, doubling up to ``seq_len`` (``[]``: no warmup)."""
        if not self.seq_len_warmup_steps:
            return []
        L, length = self._resolve_seq_len(), self.seq_len_warmup_start
        lengths = []
        while length < L:
            lengths.append(length)
            length *= 2
        if length != L:
            raise ConfigError(
                f"seq_len_warmup_start={self.seq_len_warmup_start} doubled never reaches "
                f"seq_len={L}; pick a start that divides {L} by a power of two (e.g. {L // 16})"
            )
        return lengths if self.seq_len_warmup_doubling else lengths[:1]

    def window_length(self, step: int) -> int:
        """Training window length at optimizer step ``step``: each warmup stage lasts
        ``seq_len_warmup_steps / stages`` steps, then ``seq_len``."""
        lengths = self.warmup_lengths()
        if step >= self.seq_len_warmup_steps or not lengths:
            return self._resolve_seq_len()
        return lengths[step * len(lengths) // self.seq_len_warmup_steps]

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """During sequence-length warmup, cut each training window into windows of the current
        length (:meth:`window_length`): ``(B, L)`` -> ``(B L / l, l)``."""
        trainer = self.trainer
        if not self.seq_len_warmup_steps or trainer is None or not trainer.training:
            return batch
        length = self.window_length(trainer.global_step)
        x, y = batch
        if length >= x.shape[1]:
            return batch
        return x.reshape(-1, length), y.reshape(-1, length)

    def state_dict(self) -> dict:
        """Saved in every checkpoint, so a resumed run can check its warmup schedule."""
        return {
            "seq_len": self.seq_len,
            "seq_len_warmup_steps": self.seq_len_warmup_steps,
            "seq_len_warmup_start": self.seq_len_warmup_start,
            "seq_len_warmup_doubling": self.seq_len_warmup_doubling,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        mine = self.state_dict()
        if self.seq_len is None:  # resolved from the model later; compare the schedule only
            mine.pop("seq_len")
        changed = {
            k: (state_dict[k], v) for k, v in mine.items() if k in state_dict and state_dict[k] != v
        }
        if changed:
            was = ", ".join(f"{k}={old}" for k, (old, _) in changed.items())
            now = ", ".join(f"{k}={new}" for k, (_, new) in changed.items())
            flags = " ".join(f"--data.init_args.{k} {old}" for k, (old, _) in changed.items())
            raise ConfigError(
                f"the checkpoint was trained with {was}, this run asks for {now}: resume with "
                f"{flags}, or start a new run from its weights instead of resuming"
            )

    def prepare_data(self) -> None:  # download once (rank 0) before setup runs on every process
        if self.download:
            load_byte_corpus(self.dataset, data_dir=self.data_dir, path=self.path, download=True,
                             **self.corpus)  # fmt: skip

    def setup(self, stage: str | None = None) -> None:
        needed = {
            "fit": ("train", "valid"),
            "validate": ("valid",),
            "test": ("test",),
            "predict": (),  # prompts only
        }.get(stage or "", ("train", "valid", "test"))
        missing = [s for s in needed if s not in self.splits]
        if missing:
            docs = load_byte_corpus(self.dataset, data_dir=self.data_dir, path=self.path,
                                    download=self.download, splits=missing, **self.corpus)  # fmt: skip
            if "train" in missing:
                for extra in self.extra_train:
                    more = load_byte_corpus(extra, data_dir=self.data_dir, splits=("train",))
                    docs["train"] = docs["train"] + more["train"]
            for split, raw in docs.items():
                self.splits[split] = (raw if isinstance(raw, StreamedDocuments)
                                      else [np.frombuffer(d, dtype=np.uint8) for d in raw])  # fmt: skip
        self._resolve_seq_len()

    def num_bytes(self, split: Split) -> int:
        return sum(len(d) for d in self.splits[split])

    def train_dataloader(self) -> DataLoader:
        if isinstance(self.splits["train"], StreamedDocuments):
            return self._streamed_loader(self.splits["train"])
        stream = np.concatenate(self.splits["train"])
        seq_len = self._resolve_seq_len()
        n = self.train_samples_per_epoch or max(1, len(stream) // seq_len)
        ds = RandomWindows(stream, seq_len, n, seed=self.seed)
        order = ResumableOrder(n, seed=self.seed, start=self._windows_done(n))
        return ResumableLoader(
            ds,
            batch_size=self.batch_size,
            sampler=order,
            drop_last=True,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def _streamed_loader(self, documents: StreamedDocuments) -> DataLoader:
        trainer, done = self.trainer, 0
        if trainer is not None:
            if isinstance(trainer.val_check_interval, float) and trainer.limit_val_batches:
                raise ConfigError(
                    "streaming=True trains on an endless stream, so validation needs an integer "
                    "interval: --trainer.val_check_interval 500 --trainer.check_val_every_n_epoch null"
                )
            done = trainer.global_step * trainer.accumulate_grad_batches * self.batch_size
        windows = StreamedWindows(documents, self._resolve_seq_len(), skip=done)
        return DataLoader(windows, batch_size=self.batch_size, num_workers=self.num_workers)

    def _windows_done(self, n: int) -> int:
        """Windows of the current epoch that a resumed run's optimizer steps already trained on
        (0 for a fresh run)."""
        return samples_done(self.trainer, n, self.batch_size)

    def _eval_loader(self, split: Split) -> DataLoader:
        ds = EvalWindows(self.splits[split], self._resolve_seq_len())
        return DataLoader(
            ds, batch_size=self.eval_batch_size, shuffle=False, num_workers=self.num_workers
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("valid")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    def predict_dataloader(self) -> DataLoader:
        """One prompt per batch, ``(1, T)`` int64."""
        if not self.prompts:
            raise ConfigError(
                "zoo predict continues the data module's prompts: pass "
                '--data.init_args.prompts \'["It was", "Once upon"]\''
            )
        encoded = [torch.tensor(self.tokenizer.encode(p), dtype=torch.int64) for p in self.prompts]
        return DataLoader(encoded, batch_size=1, collate_fn=torch.stack)
