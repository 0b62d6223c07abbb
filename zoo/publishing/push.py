"""Pushing a published folder to the Hugging Face Hub, and pinning the pushed commit.

``zoo push`` uploads a folder from ``zoo export`` (or exports a run first) in one commit
(:mod:`zoo.hub.upload`: ``HfApi.create_repo`` and ``upload_folder``); with ``update_registry``
the CLI pins the returned commit in ``checkpoints.yaml`` (:func:`pin_revision`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from zoo.errors import CheckpointError, ConfigError
from zoo.hub.download import sha256_file
from zoo.hub.registry import load_registry
from zoo.hub.schema import CheckpointEntry, Metric
from zoo.hub.upload import HubCommit, checked_repo_id, upload_folder
from zoo.publishing.export import PUBLISHED_FILES, export_run

__all__ = ["checked_repo_id", "pin_revision", "push"]


def push(
    source: str | os.PathLike,
    repo_id: str,
    *,
    name: str | None = None,
    recipe: str | os.PathLike | None = None,
    metrics: list[Metric] | None = None,
    branch: str | None = None,
    create_pr: bool = False,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
) -> HubCommit:
    """Upload a published folder (or export a run first) to ``repo_id``; return the commit sha
    (a ``str``; for ``create_pr`` its ``pr_url`` and ``pr_revision`` name the pull request).

    ``source`` is a folder from :func:`export_run` (it must hold ``config.json`` and
    ``model.safetensors``), or a run / ``.ckpt`` with ``name``, ``recipe`` and ``metrics``. The
    repo is created if needed, and so is ``branch``; only :data:`PUBLISHED_FILES` are uploaded,
    in one commit, or with ``create_pr`` as a pull request against ``main``
    (:func:`zoo.hub.upload.upload_folder`).

    Raises:
        ConfigError: ``repo_id`` is not a valid Hub repo id (:func:`checked_repo_id`),
            ``source`` is a run without ``name`` and ``recipe``, or ``create_pr`` with a
            ``branch`` other than ``main``; CheckpointError: the folder lacks
            its config or weights; UnsafePathError: a file to upload is a symlink or not a
            regular file (named; nothing is sent); HubError: the Hub refused (no token, no
            rights, ...), with the server's message.
    """
    checked_repo_id(repo_id)
    folder = Path(source)
    tmp = None
    if not (folder / "config.json").is_file():
        if name is None or recipe is None:
            raise ConfigError(
                f"{source} is not an exported folder (no config.json); to push a run, give "
                "its checkpoint name and recipe (zoo push RUN --name NAME --recipe YAML)."
            )
        tmp = tempfile.TemporaryDirectory(prefix="zoo-push-")
        folder = export_run(
            source, tmp.name, name=name, recipe=recipe, metrics=metrics or [], repo_id=repo_id
        )
    missing = [f for f in ("config.json", "model.safetensors") if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"{folder} lacks {missing}: export it with `zoo export` first.")
    try:
        return upload_folder(
            folder, repo_id, files=PUBLISHED_FILES, branch=branch, create_pr=create_pr,
            private=private, token=token,
            commit_message=commit_message or f"Upload {folder.name} with attention-zoo",
        )  # fmt: skip
    finally:
        if tmp is not None:
            tmp.cleanup()


def pin_revision(folder: str | os.PathLike, repo_id: str, revision: str) -> CheckpointEntry:
    """Record in ``checkpoints.yaml`` that the entry whose files are ``folder``'s is at
    ``repo_id@revision`` on the Hub.

    Raises:
        ConfigError: no registry entry has exactly these files (register it first);
        UnsafePathError: a file the registry names is a link out of ``folder`` or not a regular
            file (nothing of it is hashed).
    """
    registry = load_registry()
    folder = Path(folder)
    for entry in registry.entries.values():
        if all(
            entry.file_in(folder, f).is_file() and sha256_file(folder / f) == rec["sha256"]
            for f, rec in entry.files.items()
        ):
            from dataclasses import replace

            pinned = replace(entry, repo_id=repo_id, revision=str(revision))  # a plain str
            registry.with_entry(pinned).save()
            return pinned
    raise ConfigError(
        f"no entry of {registry.path} has exactly the files of {folder}: register it first "
        "(zoo export ... --register)."
    )
