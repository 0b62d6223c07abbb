"""Where every data module finds its files, and how it downloads them.

The layout is ``<dir>/<dataset>/...``. ``data_dir`` alone is searched when it is given (an explicit
directory is the only place searched, and downloads go there); otherwise ``$ZOO_DATA_DIR``, then
the download cache ``$ZOO_CACHE_DIR/data`` (default ``~/.cache/zoo/data``). A data set not found is
one :class:`~zoo.errors.DataNotFoundError` line that says where it was looked for and how to fix it
(:func:`not_found`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

from zoo.errors import DataNotFoundError

__all__ = [
    "cache_dir",
    "corpus_dir",
    "download_dir",
    "fetch_file",
    "find_file",
    "not_found",
    "search_dirs",
]


def cache_dir() -> Path:
    return Path(os.environ.get("ZOO_CACHE_DIR", Path.home() / ".cache" / "zoo")) / "data"


def search_dirs(data_dir: str | os.PathLike | None) -> list[Path]:
    """Directories searched for ``<dataset>/...``, in order: ``[data_dir]`` alone when it is given
    (``$ZOO_DATA_DIR`` and the cache are not searched then), else ``$ZOO_DATA_DIR`` and the
    download cache."""
    if data_dir:
        return [Path(data_dir).expanduser()]
    dirs = [Path(os.environ["ZOO_DATA_DIR"])] if os.environ.get("ZOO_DATA_DIR") else []
    return [*dirs, cache_dir()]


def download_dir(data_dir: str | os.PathLike | None) -> Path:
    """Where downloaded files go: ``data_dir`` when it is given (the only place searched then, so
    the files are found there next time), else the download cache."""
    return Path(data_dir).expanduser() if data_dir else cache_dir()


def corpus_dir(dataset: str, data_dir: str | os.PathLike | None) -> Path:
    """``<dir>/<dataset>`` of the first search directory that holds ``<dataset>/`` (the first
    search directory's when none does): where the data set's files are read from, for messages."""
    dirs = search_dirs(data_dir)
    return next((d / dataset for d in dirs if (d / dataset).is_dir()), dirs[0] / dataset)


def find_file(
    dataset: str, names: Sequence[str], data_dir: str | os.PathLike | None
) -> Path | None:
    """The first of ``names`` found as ``<dir>/<dataset>/<name>`` or ``<dir>/<name>`` in
    :func:`search_dirs` order, or ``None``."""
    for root in search_dirs(data_dir):
        for name in names:
            for candidate in (root / dataset / name, root / name):
                if candidate.is_file():
                    return candidate
    return None


def fetch_file(url: str, dest: Path) -> Path:
    """Download ``url`` to ``dest`` (via a temporary file, so an interrupted download leaves nothing)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch.hub.download_url_to_file(url, str(dest), progress=True)
    except Exception as e:  # URLError, HTTPError, timeouts
        raise DataNotFoundError(f"could not download {url}: {e}") from None
    return dest


def not_found(dataset: str, names: Sequence[str], data_dir, hint: str) -> DataNotFoundError:
    """The one-line error for a data set not found: where it was looked for and how to fix it."""
    flags = "(zoo evaluate: --data-dir; zoo fit: --data.init_args.data_dir; Python: data_dir=)"
    fetch = (
        "or fetch it from its public home (zoo fit: --data.init_args.download true; Python: "
        "download=True)."
    )
    if data_dir:
        env = os.environ.get("ZOO_DATA_DIR")
        elsewhere = (
            f" Leave the data directory out to use $ZOO_DATA_DIR ({env}), which has {dataset}/."
            if env and (Path(env) / dataset).is_dir()
            else ""
        )
        return DataNotFoundError(
            f"{dataset}: none of {list(names)} found in {Path(data_dir) / dataset}, the data "
            f"directory given {flags}: when one is given it is the only place searched "
            f"($ZOO_DATA_DIR is not). {hint} Put {dataset}/ under {data_dir}, give the directory "
            f"that holds {dataset}/, {fetch}{elsewhere}"
        )
    looked = ", ".join(str(d / dataset) for d in search_dirs(data_dir))
    return DataNotFoundError(
        f"{dataset}: none of {list(names)} found in [{looked}]. {hint} Point the ZOO_DATA_DIR "
        f"environment variable or the data directory {flags} at a directory holding "
        f"{dataset}/, {fetch}"
    )
