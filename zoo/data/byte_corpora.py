"""Byte-level corpora and their splits, as raw bytes (:func:`load_byte_corpus`).

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
"""

from __future__ import annotations

import gzip
import os
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from zoo.data.corpus_files import load_corpus_files
from zoo.data.sources import download_dir, fetch_file, find_file, not_found
from zoo.errors import DataNotFoundError

__all__ = [
    "PG19MINI_TEST",
    "PG19MINI_TRAIN",
    "PG19MINI_VALID",
    "EmptyDataWarning",
    "load_byte_corpus",
    "read_enwik8_zip",
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
    streaming: bool = False,
) -> dict[str, list[bytes]]:
    """Documents of each requested split as raw bytes: ``{"train": [doc, ...], ...}`` (streamed
    ``files``: the training split is a :class:`~zoo.data.corpus_files.StreamedDocuments`).

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
        return load_corpus_files(data_files or [], text_column=text_column, splits=splits,
                                 streaming=streaming)  # type: ignore[return-value]  # fmt: skip
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
