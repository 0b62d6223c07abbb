"""Files and hashes: the names of a saved model's files, sha256, manifests, atomic writes, and
what counts as an explicit local path. The bottom of the house: the hub, the loaders and the
models' ``save_pretrained`` all use it, and it imports nothing of the zoo but its errors.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zoo.errors import CheckpointError, ChecksumError

__all__ = [
    "CONFIG_NAME",
    "MANIFEST_NAME",
    "TOKENIZER_NAME",
    "WEIGHTS_NAME",
    "UnverifiedWeightsWarning",
    "atomic_path",
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
    (config, weights, tokenizer) must be listed.

    Raises:
        ChecksumError: a file's sha256 differs from the manifest's (both hashes named).
        CheckpointError: the manifest is unreadable, or lists a missing file or omits one present.
    """
    directory = Path(directory)
    manifest = directory / MANIFEST_NAME
    if not manifest.is_file():
        return False
    try:
        recorded = json.loads(manifest.read_text())["sha256"]
        assert isinstance(recorded, dict)
    except (json.JSONDecodeError, KeyError, TypeError, AssertionError):
        raise CheckpointError(
            f"{manifest} is not a valid manifest (a JSON object with a 'sha256' table): re-save "
            "the model with save_pretrained."
        ) from None
    present = {f for f in (CONFIG_NAME, WEIGHTS_NAME, TOKENIZER_NAME) if (directory / f).is_file()}
    unlisted = sorted(present - recorded.keys())
    if unlisted:
        raise CheckpointError(
            f"{directory} has {unlisted} but its {MANIFEST_NAME} does not list them: they were "
            "added after save_pretrained (or left from an earlier save); remove them or re-save "
            "the model that belongs with them."
        )
    for name, expected in sorted(recorded.items()):
        path = directory / name
        if not path.is_file():
            raise CheckpointError(
                f"{path} is missing although {MANIFEST_NAME} lists it: copy the whole folder."
            )
        actual = sha256_file(path)
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
