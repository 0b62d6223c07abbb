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
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zoo.errors import ConfigError, DataNotFoundError

__all__ = ["KINDS", "load_corpus_files", "split_documents"]

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


def _read_documents(files: list[str], kind: str, text_column: str) -> list[bytes]:
    import datasets  # lazily: a second or two to import
    from datasets.exceptions import DatasetGenerationError

    datasets.disable_progress_bars()
    options = {"sample_by": "document", "encoding": "latin-1"} if kind == "text" else {}
    try:
        ds = datasets.load_dataset(kind, data_files=files, split="train", **options)
    except DatasetGenerationError as e:
        cause = e.__cause__ or e
        raise ConfigError(
            f"data_files: datasets could not read the {kind} files ({type(cause).__name__}: "
            f"{str(cause).splitlines()[0] if str(cause) else ''})"
        ) from None
    column = "text" if kind == "text" else text_column
    if column not in ds.column_names:
        raise ConfigError(
            f"data_files: the {kind} rows have no column {text_column!r} (they have "
            f"{', '.join(ds.column_names)}); pass text_column=<one of them>."
        )
    values = ds[column]
    bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
    if bad is not None:
        raise ConfigError(
            f"data_files: row {bad} has {text_column}={values[bad]!r}, not a string; drop or fix "
            "that row."
        )
    encoding = "latin-1" if kind == "text" else "utf-8"  # latin-1: the file's bytes exactly
    return [v.encode(encoding) for v in values]


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
    splits: Sequence[str] = ("train", "valid", "test"),
) -> dict[str, list[bytes]]:  # fmt: skip
    """The documents of ``data_files`` split by :func:`split_documents`, as raw bytes.

    Raises:
        DataNotFoundError: a pattern that matches no file; ConfigError: an unknown or mixed file
        kind, rows without ``text_column`` or with a non-string value, a file ``datasets`` cannot
        parse (its reason in one line), or fewer than 3 documents.
    """
    files = _expand(data_files)
    parts = split_documents(_read_documents(files, _kind(files), text_column), seed=seed)
    return {s: parts[s] for s in splits}
