"""Byte-level text: corpora, splits, windows and the LightningDataModule.

Corpora (``dataset=``) and their splits:

- ``pg19mini``: 60 Project Gutenberg books (PG-19's pre-1919 rule) with a fixed book-level split
  (55 train / 2 valid / 3 test books; ``splits.tsv``).
- ``enwik8``: the Hutter Prize file; the standard split is the first 90M bytes for training and the
  next two 5M for validation and test. Requires the full 100,000,000-byte file (``enwik8.zip``).
- ``enwik8_prefix``: any prefix of enwik8 (e.g. the 4.15 MB ``enwik8_prefix_4154399``), split
  90/5/5 % in order: a text set of its own, NOT comparable with published enwik8 numbers.
- ``tinyshakespeare``: char-rnn's 1.1 MB file, split 90/5/5 % in order.
- ``text_file``: any local UTF-8 (or binary) file given by ``path``, split 90/5/5 % in order.
- ``files``: a corpus of one's own, ``data_files`` globs of text, JSON lines or parquet files
  (``text_column``), read with ``datasets`` and split by whole documents
  (:mod:`zoo.data.corpus_files`).

The files are found as :mod:`zoo.data.sources` says (``data_dir``, else ``$ZOO_DATA_DIR``, then
the download cache, filled from each set's public home when ``download=True``).

An empty file (a zero-byte book) is read as an empty document, which scores nothing: loading it
warns (:class:`EmptyDataWarning`), naming the file, and the split's measurements cover the other
documents only.

Training draws random windows; evaluation covers every byte of a split exactly once
(:mod:`zoo.data.windows`). The first byte of each document has no context and is not scored.
"""

from __future__ import annotations

import gzip
import os
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from lightning import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader

from zoo.config import require_positive
from zoo.data.sources import download_dir, fetch_file, find_file, not_found
from zoo.data.windows import (
    EvalWindows,
    RandomWindows,
    ResumableLoader,
    ResumableOrder,
    samples_done,
)
from zoo.errors import ConfigError, DataNotFoundError

__all__ = [
    "ByteTextDataModule",
    "ByteTokenizer",
    "EmptyDataWarning",
    "load_byte_corpus",
    "split_enwik8",
]

Split = Literal["train", "valid", "test"]

# pg19mini's book-level split (the ``splits.tsv`` shipped with the data, embedded so that the online
# download path knows it too).
PG19MINI_VALID = (174, 1400)
PG19MINI_TEST = (84, 768, 2641)
# fmt: off
PG19MINI_TRAIN = (
    11, 16, 23, 33, 35, 36, 43, 46, 74, 76, 98, 105, 110, 120, 135, 145, 147, 158, 161, 175, 205,
    219, 236, 244, 345, 514, 730, 766, 829, 844, 963, 996, 1023, 1080, 1184, 1232, 1342, 1497,
    1513, 1661, 1952, 1998, 2097, 2542, 2554, 2591, 2701, 2814, 3207, 3300, 3600, 6130, 14264,
    20203, 28054,
)
# fmt: on
URLS = {
    "tinyshakespeare": "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",  # noqa: E501
    "enwik8": "http://mattmahoney.net/dc/enwik8.zip",
    "pg19mini": "https://www.gutenberg.org/cache/epub/{ebook}/pg{ebook}.txt",
}
ENWIK8_BYTES = 100_000_000


class EmptyDataWarning(UserWarning):
    """A data file is empty (zero bytes): it is read as a document that scores nothing."""


class ByteTokenizer:
    """UTF-8 bytes as tokens: ``vocab_size = 256``; decoding replaces invalid sequences with U+FFFD."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return bytes(ids).decode("utf-8", errors="replace")


def _warn_empty(dataset: str, split: str, empty: Sequence[Path], total: int) -> None:
    """Warn (:class:`EmptyDataWarning`) that the files ``empty`` of ``split`` hold no bytes."""
    if not empty:
        return
    files = ", ".join(str(p) for p in empty)
    verb = "is" if len(empty) == 1 else "are"
    rest = total - len(empty)
    warnings.warn(
        f"{dataset} {split}: {files} {verb} empty (0 bytes) and count{'s' if verb == 'is' else ''}"
        f" as nothing: the {split} split is measured on its other {rest} of {total} documents; "
        "restore the file if it is damaged",
        EmptyDataWarning,
        stacklevel=3,
    )


def _read(path: Path) -> bytes:
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes())
    return path.read_bytes()


def _split_in_order(
    data: bytes, fractions: tuple[float, float] = (0.90, 0.95)
) -> dict[str, list[bytes]]:
    a, b = (int(len(data) * f) for f in fractions)
    return {"train": [data[:a]], "valid": [data[a:b]], "test": [data[b:]]}


def split_enwik8(data: bytes) -> dict[str, list[bytes]]:
    """The standard enwik8 split: bytes [0, 90M) train, [90M, 95M) valid, [95M, 100M) test.

    Raises:
        ValueError: ``data`` is not the full 100,000,000-byte file.
    """
    if len(data) != ENWIK8_BYTES:
        raise ValueError(
            f"enwik8 must be exactly {ENWIK8_BYTES:,} bytes for the standard 90M/5M/5M split, got "
            f"{len(data):,}. For a prefix of the file use dataset='enwik8_prefix'."
        )
    return {
        "train": [data[:90_000_000]],
        "valid": [data[90_000_000:95_000_000]],
        "test": [data[95_000_000:]],
    }


def read_enwik8_zip(path: Path) -> bytes:
    """The ``enwik8`` member of ``enwik8.zip`` (or the raw file itself)."""
    if not zipfile.is_zipfile(path):
        return path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        if "enwik8" not in zf.namelist():
            raise DataNotFoundError(f"{path} has no 'enwik8' member (members: {zf.namelist()[:5]})")
        return zf.read("enwik8")


def locate(
    folder: str,
    names: Sequence[str],
    data_dir: str | os.PathLike | None,
    *,
    hint: str,
    download: bool = False,
    source: tuple[str, str] | None = None,
) -> Path:
    """The first of ``names`` found under ``<dir>/<folder>/`` of the search directories, or the file
    downloaded from ``source = (url, file name)`` into :func:`download_dir` when ``download`` is on.

    Raises:
        DataNotFoundError: not found locally, and not downloadable or not downloaded.
    """
    found = find_file(folder, names, data_dir)
    if found is not None:
        return found
    if download and source is not None:
        url, filename = source
        return fetch_file(url, download_dir(data_dir) / folder / filename)
    raise not_found(folder, names, data_dir, hint)


def _pg19mini(data_dir, download: bool, splits: Sequence[str]) -> dict[str, list[bytes]]:
    table = {"train": PG19MINI_TRAIN, "valid": PG19MINI_VALID, "test": PG19MINI_TEST}
    hint = "pg19mini is 60 Project Gutenberg books (18.7 MB gzipped)."
    out: dict[str, list[bytes]] = {}
    for split in splits:
        paths = [
            locate(
                "pg19mini",
                (f"{ebook}.txt.gz", f"{ebook}.txt"),
                data_dir,
                hint=hint,
                download=download,
                source=(URLS["pg19mini"].format(ebook=ebook), f"{ebook}.txt"),
            )
            for ebook in table[split]
        ]
        out[split] = [_read(p) for p in paths]
        empty = [p for p, doc in zip(paths, out[split], strict=True) if not doc]
        _warn_empty("pg19mini", split, empty, len(paths))
    return out


def _single_file(dataset: str, found: Path, data: bytes) -> bytes:
    """``data``, the one file of ``dataset``; warns when it is empty (every split is then)."""
    if not data:
        warnings.warn(
            f"{dataset}: {found} is empty (0 bytes): every split of {dataset} is empty; restore "
            "the file if it is damaged",
            EmptyDataWarning,
            stacklevel=3,
        )
    return data


def load_byte_corpus(
    dataset: str,
    *,
    data_dir: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
    download: bool = False,
    splits: Sequence[str] = ("train", "valid", "test"),
    data_files: str | Sequence[str] | None = None,
    text_column: str = "text",
) -> dict[str, list[bytes]]:
    """Documents of each requested split as raw bytes: ``{"train": [doc, ...], ...}``.

    ``data_dir``, when given, is the only directory searched (see the module docstring). An empty
    file gives an empty document and an :class:`EmptyDataWarning` naming it.

    Raises:
        DataNotFoundError: the files are not found where they are looked for (listed in the message)
            and ``download`` is off or the download failed.
        ValueError: an unknown ``dataset``.
    """
    if dataset == "pg19mini":
        return _pg19mini(data_dir, download, splits)
    if dataset == "files":
        from zoo.data.corpus_files import load_corpus_files  # lazily: datasets

        return load_corpus_files(data_files or [], text_column=text_column, splits=splits)
    if dataset == "text_file":
        if path is None or not Path(path).is_file():
            raise DataNotFoundError(f"text_file: path={path!r} is not a file; pass path=<file>.")
        parts = _split_in_order(_single_file(dataset, Path(path), _read(Path(path))))
    elif dataset == "tinyshakespeare":
        found = locate(dataset, ("input.txt",), data_dir, hint="Tiny Shakespeare is one 1.1 MB "
                       "file.", download=download, source=(URLS[dataset], "input.txt"))  # fmt: skip
        parts = _split_in_order(_single_file(dataset, found, _read(found)))
    elif dataset == "enwik8":
        found = locate(dataset, ("enwik8.zip", "enwik8"), data_dir,
                       hint="enwik8.zip is 36 MB (100 MB unzipped).", download=download,
                       source=(URLS[dataset], "enwik8.zip"))  # fmt: skip
        parts = split_enwik8(read_enwik8_zip(found))
    elif dataset == "enwik8_prefix":
        found = locate("enwik8", ("enwik8_prefix_4154399", "enwik8_prefix"), data_dir,
                       hint="enwik8_prefix is a local-only set.")  # fmt: skip
        parts = _split_in_order(_single_file(dataset, found, found.read_bytes()))
    else:
        raise ValueError(f"unknown byte-level dataset {dataset!r}")
    return {s: parts[s] for s in splits}


# --- the DataModule --------------------------------------------------------------------------------
class ByteTextDataModule(LightningDataModule):
    """Byte-level language-modelling data: batches ``(x, y)`` of int64 ``(batch_size, seq_len)``.

    Args:
        dataset: one of ``pg19mini``, ``enwik8``, ``enwik8_prefix``, ``tinyshakespeare``,
            ``text_file``, ``files`` (see the module docstring for splits).
        data_dir: directory holding ``<dataset>/``, the only one searched when given (default:
            ``$ZOO_DATA_DIR``, then the download cache).
        path: the file for ``dataset="text_file"``.
        data_files, text_column: for ``dataset="files"``: glob(s) of text, JSON lines or parquet
            files, and the column holding the text (:mod:`zoo.data.corpus_files`).
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
        self.corpus = {"data_files": data_files, "text_column": text_column}  # dataset="files"
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
                self.splits[split] = [np.frombuffer(d, dtype=np.uint8) for d in raw]
        self._resolve_seq_len()

    def num_bytes(self, split: Split) -> int:
        return sum(len(d) for d in self.splits[split])

    def train_dataloader(self) -> DataLoader:
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
