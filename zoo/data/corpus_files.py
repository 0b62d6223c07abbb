"""A user's own corpus for the byte-level data module (``dataset="files"``), read with ``datasets``.

``data_files`` are glob patterns (``"books/**/*.txt"``) of one kind:

- plain text (``.txt``, ``.text``, ``.md``): each file is one document, its bytes exactly as on
  disk. ``datasets``' ``text`` builder reads them as Latin-1, which maps every byte to one
  character, so a file that is not UTF-8 loses nothing: a byte model reads bytes;
- JSON lines (``.json``, ``.jsonl``) or parquet (``.parquet``): each row is one document, its
  ``text_column`` encoded as UTF-8.

Documents are split with a seed: ``valid_fraction`` and ``test_fraction`` of them (at least one
each) are held out, the rest train, so no document is in two splits. The documents are held in
memory as bytes (the data module's windows need them there).

A corpus larger than memory is streamed (``streaming=True``, ``datasets``' streaming mode). A
document's split is then drawn from a seeded hash of its bytes (:func:`document_split`: the
fractions hold in expectation, and equal documents share a split), the held-out documents are
read into memory once, and training reads the rest as an endless stream of contiguous windows
(:class:`StreamedWindows`), each pass in a new seeded order within a shuffle buffer.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from zoo.errors import ConfigError, DataNotFoundError

__all__ = [
    "KINDS",
    "StreamedDocuments",
    "StreamedWindows",
    "document_split",
    "load_corpus_files",
    "split_documents",
]

KINDS = {".txt": "text", ".text": "text", ".md": "text", ".json": "json", ".jsonl": "json",
         ".parquet": "parquet"}  # fmt: skip


def _expand(data_files: str | Sequence[str]) -> list[str]:
    """The files the patterns match, sorted, each pattern matching at least one."""
    patterns = [data_files] if isinstance(data_files, str | os.PathLike) else list(data_files)
    if not patterns:
        raise ConfigError(
            "data_files is empty: pass one or more globs: data_files='my_books/*.txt' (on the "
            "command line --data.init_args.data_files 'my_books/*.txt')"
        )
    files: list[str] = []
    for pattern in patterns:
        found = sorted(p for p in glob.glob(os.path.expanduser(str(pattern)), recursive=True)
                       if Path(p).is_file())  # fmt: skip
        if not found:
            raise DataNotFoundError(
                f"data_files: the pattern {str(pattern)!r} matches no file (from {Path.cwd()}); "
                "check the path, and quote a glob so that the shell does not expand it."
            )
        files += found
    return sorted(set(files))


def _kind(files: list[str]) -> str:
    kinds = {KINDS.get(Path(f).suffix.lower()) for f in files}
    unknown = sorted({Path(f).suffix or f for f in files if Path(f).suffix.lower() not in KINDS})
    if unknown:
        raise ConfigError(
            f"data_files: {', '.join(unknown)} is not a corpus file kind; use text "
            f"({', '.join(k for k, v in KINDS.items() if v == 'text')}), JSON lines or parquet."
        )
    if len(kinds) > 1:
        raise ConfigError(
            f"data_files mixes {' and '.join(sorted(kinds))} files; give one kind per data set."
        )
    return kinds.pop()


def _load(files: list[str], kind: str, streaming: bool = False):
    """``datasets``' table (or ``IterableDataset`` when ``streaming``) of the files' documents."""
    import datasets  # lazily: a second or two to import
    from datasets.exceptions import DatasetGenerationError

    datasets.disable_progress_bars()
    options = {"sample_by": "document", "encoding": "latin-1"} if kind == "text" else {}
    try:
        return datasets.load_dataset(
            kind, data_files=files, split="train", streaming=streaming, **options
        )
    except DatasetGenerationError as e:
        cause = e.__cause__ or e
        raise ConfigError(
            f"data_files: datasets could not read the {kind} files ({type(cause).__name__}: "
            f"{str(cause).splitlines()[0] if str(cause) else ''})"
        ) from None


def _documents(rows, kind: str, text_column: str, columns: list[str] | None) -> Iterator[bytes]:
    """Each row's text as bytes: a text file's exact bytes, a JSON or parquet column in UTF-8."""
    column = "text" if kind == "text" else text_column
    if columns is not None and column not in columns:
        raise ConfigError(
            f"data_files: the {kind} rows have no column {text_column!r} (they have "
            f"{', '.join(columns)}); pass text_column=<one of them>."
        )
    encoding = "latin-1" if kind == "text" else "utf-8"  # latin-1: the file's bytes exactly
    for i, row in enumerate(rows):
        value = row.get(column) if isinstance(row, dict) else row
        if not isinstance(value, str):
            raise ConfigError(
                f"data_files: row {i} has {column}={value!r}, not a string; drop or fix that row."
            )
        yield value.encode(encoding)


def _read_documents(files: list[str], kind: str, text_column: str) -> list[bytes]:
    ds = _load(files, kind)
    column = "text" if kind == "text" else text_column
    values = ds[column] if column in ds.column_names else []
    return list(_documents(values, kind, text_column, ds.column_names))


def split_documents(
    documents: Sequence[bytes], *, seed: int = 0, valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
) -> dict[str, list[bytes]]:  # fmt: skip
    """``{"train", "valid", "test"}``: a seeded shuffle of whole documents; ``valid_fraction`` and
    ``test_fraction`` of them (rounded, at least 1 each) are held out, in their original order.

    Raises:
        ConfigError: fewer than 3 documents, or fractions outside ``(0, 1)`` that leave no
            training document.
    """
    n = len(documents)
    if not (0 < valid_fraction < 1 and 0 < test_fraction < 1):
        raise ConfigError(
            f"valid_fraction and test_fraction must be in (0, 1), got {valid_fraction} and "
            f"{test_fraction}"
        )
    n_valid, n_test = (max(1, round(f * n)) for f in (valid_fraction, test_fraction))
    if n - n_valid - n_test < 1:
        raise ConfigError(
            f"data_files holds {n} document(s): splitting whole documents into train, valid and "
            "test needs at least 3 (one file of plain text: use dataset=text_file, split 90/5/5 "
            "in order)."
        )
    order = np.random.default_rng(seed).permutation(n)
    held = {"valid": sorted(order[:n_valid]), "test": sorted(order[n_valid : n_valid + n_test])}
    train = sorted(order[n_valid + n_test :])
    return {"train": [documents[i] for i in train],
            **{s: [documents[i] for i in idx] for s, idx in held.items()}}  # fmt: skip


def load_corpus_files(
    data_files: str | Sequence[str], *, text_column: str = "text", seed: int = 0,
    splits: Sequence[str] = ("train", "valid", "test"), streaming: bool = False,
) -> dict[str, list[bytes] | StreamedDocuments]:  # fmt: skip
    """The documents of ``data_files`` split by :func:`split_documents`, as raw bytes; with
    ``streaming``, split by :func:`document_split`, the training split a
    :class:`StreamedDocuments` that is read when iterated.

    Raises:
        DataNotFoundError: a pattern that matches no file; ConfigError: an unknown or mixed file
        kind, rows without ``text_column`` or with a non-string value, a file ``datasets`` cannot
        parse (its reason in one line), or fewer than 3 documents (1 held-out one, streamed).
    """
    files = _expand(data_files)
    kind = _kind(files)
    if not streaming:
        parts = split_documents(_read_documents(files, kind, text_column), seed=seed)
        return {s: parts[s] for s in splits}
    stream = StreamedDocuments(files, kind, text_column, seed)
    out: dict[str, list[bytes] | StreamedDocuments] = {s: [] for s in splits if s != "train"}
    if out:  # one pass for the held-out documents
        for doc in stream.all_documents():
            split = document_split(doc, seed)
            if split in out:
                out[split].append(doc)  # type: ignore[union-attr]
        empty = [s for s, docs in out.items() if not docs]
        if empty:
            raise ConfigError(
                f"data_files: no document fell in {' or '.join(empty)} (each is ~5% of the "
                "documents, drawn by a hash): stream a corpus of more documents, or drop "
                "streaming=True to split a small one exactly."
            )
    if "train" in splits:
        out["train"] = stream
    return {s: out[s] for s in splits}


def document_split(doc: bytes, seed: int = 0, valid_fraction: float = 0.05,
                   test_fraction: float = 0.05) -> str:  # fmt: skip
    """``"train"``, ``"valid"`` or ``"test"`` for a streamed document: a uniform draw from the
    BLAKE2b hash of its bytes keyed by ``seed``, against the fractions. The same bytes always land
    in the same split, whatever the order or the files they come in."""
    key = (seed % 2**64).to_bytes(8, "little")
    digest = hashlib.blake2b(doc, digest_size=8, key=key).digest()
    u = int.from_bytes(digest, "little") / 2**64
    return (
        "valid" if u < valid_fraction else "test" if u < valid_fraction + test_fraction else "train"
    )


class StreamedDocuments:
    """The training documents of a streamed corpus (``datasets`` streaming mode), read anew at
    every pass; pass ``p`` is shuffled with ``seed + p`` in a buffer of ``buffer_size``
    documents. Inside a ``DataLoader`` worker, each worker reads its share of the files."""

    def __init__(self, files: list[str], kind: str, text_column: str, seed: int,
                 buffer_size: int = 1000) -> None:  # fmt: skip
        self.files, self.kind, self.text_column = files, kind, text_column
        self.seed, self.buffer_size = seed, buffer_size

    def all_documents(self) -> Iterator[bytes]:
        """Every document of every split, in file order."""
        ds = _load(self.files, self.kind, streaming=True)
        yield from _documents(ds, self.kind, self.text_column, _columns(ds))

    def passes(self) -> Iterator[bytes]:
        """The training documents, pass after pass, without end."""
        from datasets.distributed import split_dataset_by_node

        for p in range(2**62):
            ds = _load(self.files, self.kind, streaming=True)
            ds = ds.shuffle(seed=self.seed + p, buffer_size=self.buffer_size)
            worker = get_worker_info()
            if worker is not None:
                ds = split_dataset_by_node(ds, rank=worker.id, world_size=worker.num_workers)
            for doc in _documents(ds, self.kind, self.text_column, _columns(ds)):
                if document_split(doc, self.seed) == "train":
                    yield doc


def _columns(ds) -> list[str] | None:
    return list(ds.column_names) if getattr(ds, "column_names", None) is not None else None


class StreamedWindows(IterableDataset):
    """Training windows cut from a stream of documents: the documents are joined end to end and
    cut into windows of ``seq_len + 1`` bytes that overlap by one, so each byte is a target
    once per pass. Yields ``(x, y)``, int64 ``(seq_len,)`` each, ``y`` = ``x`` shifted by one.
    The first ``skip`` windows are read and dropped: a resumed run goes on where it stopped."""

    def __init__(self, documents: StreamedDocuments, seq_len: int, skip: int = 0) -> None:
        self.documents, self.seq_len, self.skip = documents, seq_len, skip

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        buffer, n, L = bytearray(), 0, self.seq_len
        for doc in self.documents.passes():
            buffer += doc
            while len(buffer) > L:
                chunk = torch.from_numpy(np.frombuffer(buffer, np.uint8, L + 1).astype(np.int64))
                del buffer[:L]
                n += 1
                if n > self.skip:
                    yield chunk[:-1], chunk[1:]
