"""The Hugging Face cache, seen from the zoo: a cached file is used only once it stays inside its
repo's cache folder (:func:`checked_cached`), and one that failed a check is removed without
following a link out of the cache (:func:`evict`).

The cache keeps each repo in ``models--ORG--NAME/``: the file contents in ``blobs/``, and in
``snapshots/REV/`` one link per file into ``blobs/`` (a plain copy where links are not
available). A link planted elsewhere is never followed, read or deleted through.
"""

from __future__ import annotations

import os
from pathlib import Path

from zoo.errors import UnsafePathError
from zoo.files import contained_path

__all__ = ["checked_cached", "evict"]


def checked_cached(path: Path, repo_id: str) -> Path:
    """``path``, a snapshot's file as ``hf_hub_download`` returns it, once it is a regular file
    whose link leads into the same repo's cache folder (:func:`~zoo.files.contained_path`).

    Raises:
        UnsafePathError: it leads outside (a planted link) or is not a regular file; the link is
            removed from the cache first (:func:`evict`), so the next run downloads it anew.
    """
    try:
        return contained_path(
            path.parent, path.name, what=f"the Hugging Face cache of {repo_id}",
            fix="the link was removed from the cache: run the command again to download the "
            "file anew",
        )  # fmt: skip
    except UnsafePathError:
        evict(path)
        raise


def evict(path: Path) -> None:
    """Remove a cached file that failed its check: the snapshot entry ``path`` itself (a link is
    removed, never followed), and the blob it links to only when that lies in the same repo's
    ``blobs/`` folder (``models--ORG--NAME/blobs``). Nothing outside the repo's cache folder is
    deleted, wherever a planted link points."""
    snapshots = next((p for p in path.parents if p.name == "snapshots"), None)
    if snapshots is None or not _real_inside(path.parent, snapshots.parent):
        return  # not a snapshot of the cache (or its folder leads out of it): leave it alone
    blob = _blob_of(path, snapshots.parent / "blobs")
    for p in (path, blob):
        if p is not None:
            try:
                p.unlink()  # removes a link itself, not its target
            except FileNotFoundError:
                pass


def _real_inside(path: Path, root: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def _blob_of(link: Path, blobs: Path) -> Path | None:
    """The entry of ``blobs`` that the snapshot link ``link`` points to, or ``None``: ``link`` is
    no link, points elsewhere, or ``blobs`` is itself a link (it would lead out of the cache)."""
    if not link.is_symlink() or blobs.is_symlink() or not blobs.is_dir():
        return None
    target = link.parent / os.readlink(link)
    if os.path.realpath(target.parent) != os.path.realpath(blobs):
        return None
    return blobs / target.name
