"""Files and hashes: the names of a saved model's files, sha256, manifests, atomic writes, what
counts as an explicit local path, and :func:`contained_path`, the check that a file name taken
from data stays inside its folder. The bottom of the house: the hub, the loaders and the models'
``save_pretrained`` all use it, and it imports nothing of the zoo but its errors.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zoo.errors import CheckpointError, ChecksumError, UnsafePathError

__all__ = [
    "CONFIG_NAME",
    "MANIFEST_NAME",
    "TOKENIZER_NAME",
    "WEIGHTS_NAME",
    "UnverifiedWeightsWarning",
    "atomic_path",
    "contained_path",
    "explicit_path",
    "sha256_file",
    "verify_manifest",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"  # only for models with a subword tokenizer
MANIFEST_NAME = "manifest.json"  # sha256 of the other files, written last by save_pretrained


class UnverifiedWeightsWarning(UserWarning):
    """A local folder was loaded without a ``manifest.json`` to check its files against."""


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


_DRIVE = re.compile(r"^[A-Za-z]:")  # C:, C:\\x, C:x: a Windows drive, absolute or not
_VIRTUAL = ("/proc", "/sys")  # regular files by stat, made up by the kernel: endless or blocking


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _link_roots(folder: str) -> tuple[str, ...]:
    """Where the links of the real folder ``folder`` may lead: the folder, and for a snapshot of
    the Hugging Face cache (``models--ORG--NAME/snapshots/REV``) its repo's folder, whose
    ``blobs/`` hold what the snapshot's links point to."""
    snapshots = os.path.dirname(folder)
    repo = os.path.dirname(snapshots)
    if os.path.basename(snapshots) == "snapshots" and "--" in os.path.basename(repo):
        return folder, repo
    return (folder,)


def contained_path(
    folder: str | os.PathLike,
    name: str,
    *,
    what: str,
    fix: str = "",
    directory: bool = False,
    allow_links: bool = True,
) -> Path:
    """``folder / name``, once ``name`` (taken from data: a manifest, the registry, a Hub
    listing, a command-line name) is known to stay inside ``folder``; call it before the file is
    opened, hashed, uploaded or deleted.

    Refused without looking at the disk: an empty name, an absolute path, a ``..`` component, a
    ``\\``, a drive letter or a control character (so a refusal never tells whether a path
    outside exists). Then, for what exists: a symlink anywhere on the path whose target leaves
    ``folder`` (in a Hugging Face cache snapshot, ``models--ORG--NAME/snapshots/REV``, the links
    may lead into the same repo's folder, where its ``blobs/`` are), any symlink when
    ``allow_links`` is False, a file of ``/proc`` or ``/sys``, and anything but a
    regular file (a FIFO, device, socket; a folder unless ``directory``). A path that does not
    exist is returned: whether it must exist is the caller's business.

    Args:
        folder: the folder the name belongs to.
        name: the relative, ``/``-separated name.
        what: where the name came from, for the message: the file and its key
            (``"runs/x/manifest.json, key 'sha256'"``).
        fix: what to do, for the message (default: name only files inside ``folder``).
        directory: ``name`` is a folder (``zoo export``'s output), not a file.
        allow_links: False refuses every symlink, even one that stays inside (``zoo push``
            uploads the file itself, never what a link points to).

    Raises:
        UnsafePathError: one line naming ``what``, the name and what to do; nothing was opened.
    """
    folder = Path(folder)
    fix = fix or f"name only files inside {folder}"

    def refuse(problem: str) -> UnsafePathError:
        return UnsafePathError(f"{what}: {problem}; {fix}.")

    if not isinstance(name, str) or not name:
        raise refuse(f"{name!r} is not a file name")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise refuse(f"{name!r} holds a control character")
    if name.startswith(("/", "~")) or os.path.isabs(name):
        raise refuse(f"{name!r} is an absolute path, outside {folder}")
    if "\\" in name or _DRIVE.match(name):
        raise refuse(f"{name!r} holds a '\\' or a drive letter, not a plain name inside {folder}")
    if ".." in name.split("/"):
        raise refuse(f"{name!r} climbs out of {folder} with '..'")
    roots = _link_roots(os.path.realpath(folder))
    step = folder
    for part in Path(name).parts:  # every link on the way, the last one included
        step = step / part
        if not os.path.lexists(step):
            return folder / name  # nothing more to follow: whether it must exist is the caller's
        if not os.path.islink(step):
            continue
        if not allow_links:
            raise refuse(f"{step} is a symlink, and only the files themselves are taken")
        if not any(_inside(os.path.realpath(step), root) for root in roots):
            raise refuse(f"{step} is a symlink leading outside {folder}")
    path = folder / name
    real = os.path.realpath(path)
    if any(_inside(real, v) for v in _VIRTUAL):
        raise refuse(f"{path} is a file of {'/'.join(real.split('/')[:2])}, not a saved file")
    try:
        mode = os.stat(path).st_mode  # stat opens nothing: a FIFO does not block it
    except OSError:
        return path  # a dangling link inside the folder: missing, as the caller sees it
    if directory and not stat.S_ISDIR(mode):
        raise refuse(f"{path} is not a folder")
    if not directory and not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO, socket or device"
        raise refuse(f"{path} is not a regular file ({kind})")
    return path


def explicit_path(source: str | os.PathLike) -> Path | None:
    """``source`` as a local path if it names one explicitly, else ``None`` (a name).

    Explicit: any ``os.PathLike`` (``pathlib.Path``), or a string that starts with ``/``, ``./``,
    ``../`` or ``~``, ends with ``/`` or ``.ckpt``, or holds more than one ``/`` or a ``\\``. Anything else
    (``transformer_lm_small.pg19mini``, ``ns/repo``) is a published checkpoint or a Hub repo id and
    never resolves to a same-named folder in the working directory, so a folder dropped there cannot
    stand in for verified weights.
    """
    if isinstance(source, os.PathLike):
        return Path(source).expanduser()
    text = str(source)
    explicit = (
        text.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or text in (".", "..")
        or text.count("/") > 1
        or "\\" in text
        or text.endswith((".ckpt", "/"))
    )
    return Path(text).expanduser() if explicit else None


def verify_manifest(directory: str | os.PathLike) -> bool:
    """Check ``directory``'s files against its ``manifest.json``; ``False`` if it has none.

    Every file the manifest lists must exist with its sha256, and every loadable file present
    (config, weights, tokenizer) must be listed. Every name is checked to stay inside
    ``directory`` (:func:`contained_path`) before any file is hashed.

    Raises:
        UnsafePathError: the manifest (or a file it lists, or a loadable file present) leads
            outside ``directory``: an absolute path, ``..``, a symlink out of it, or not a regular
            file (a FIFO, a device); nothing was hashed.
        ChecksumError: a file's sha256 differs from the manifest's (both hashes named).
        CheckpointError: the manifest is unreadable, or lists a missing file or omits one present.
    """
    directory = Path(directory)
    manifest = directory / MANIFEST_NAME
    fix = (
        f"a {MANIFEST_NAME} lists only the regular files of its own folder: re-save the model "
        "with save_pretrained, or copy the file itself into the folder"
    )
    for name in (MANIFEST_NAME, CONFIG_NAME, WEIGHTS_NAME, TOKENIZER_NAME):  # what the loader opens
        contained_path(directory, name, what=f"{directory}", fix=fix)
    if not manifest.is_file():
        return False
    try:
        recorded = json.loads(manifest.read_text())["sha256"]
        assert isinstance(recorded, dict)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AssertionError):
        raise CheckpointError(
            f"{manifest} is not a valid manifest (a JSON object with a 'sha256' table): re-save "
            "the model with save_pretrained."
        ) from None
    paths = {  # every name checked before anything is hashed
        name: contained_path(directory, name, what=f"{manifest}, key 'sha256'", fix=fix)
        for name in sorted(recorded)
    }
    present = {f for f in (CONFIG_NAME, WEIGHTS_NAME, TOKENIZER_NAME) if (directory / f).is_file()}
    unlisted = sorted(present - recorded.keys())
    if unlisted:
        raise CheckpointError(
            f"{directory} has {unlisted} but its {MANIFEST_NAME} does not list them: they were "
            "added after save_pretrained (or left from an earlier save); remove them or re-save "
            "the model that belongs with them."
        )
    for name, path in paths.items():
        if not path.is_file():
            raise CheckpointError(
                f"{path} is missing although {MANIFEST_NAME} lists it: copy the whole folder."
            )
        actual = sha256_file(path)
        expected = recorded[name]
        if actual != expected:
            raise ChecksumError(
                str(path), expected, actual, recorded_in=f"its {MANIFEST_NAME} records"
            )
    return True


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it to ``final`` only if the block succeeds."""
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a saved model is not
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
