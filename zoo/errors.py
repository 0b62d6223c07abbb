"""Exceptions raised by the zoo, and the warnings the ``zoo`` command shows in one line.

Each error says what was wrong and how to fix it; they subclass the built-in exception a caller would
expect (``ValueError``, ``KeyError``, ``FileNotFoundError``) so ordinary ``except`` clauses still work.
A :class:`ZooWarning` is a ``UserWarning`` that ``zoo`` prints as ``zoo: warning: MESSAGE``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "CheckpointError",
    "ChecksumError",
    "ConfigError",
    "DataNotFoundError",
    "HubError",
    "RegistryError",
    "RetiredCheckpointWarning",
    "SequenceTooLongError",
    "UnknownModelError",
    "UnsafePathError",
    "ZooError",
    "ZooWarning",
    "compile_failure",
    "compile_failures",
]


class ZooError(Exception):
    """Base of the zoo's own errors: the CLI prints their message instead of a stack trace."""


class ConfigError(ZooError, ValueError):
    """A configuration has an unknown key or an invalid value."""


class UnknownModelError(ZooError, KeyError):
    """A model name is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class CheckpointError(ZooError, RuntimeError):
    """A checkpoint on disk is missing, corrupt, or does not match its config."""


class SequenceTooLongError(ZooError, ValueError):
    """An input (with the cache) is longer than the model's ``max_seq_len``."""


class DataNotFoundError(ZooError, FileNotFoundError):
    """A data set could not be found locally and could not be downloaded."""


class ChecksumError(CheckpointError):
    """A checkpoint file's sha256 differs from the one recorded for it: in ``checkpoints.yaml``
    (published checkpoints) or in the folder's ``manifest.json`` (``save_pretrained``).

    Attributes: ``path`` (the file), ``expected`` and ``actual`` (hex sha256 digests).
    """

    def __init__(
        self,
        path: str,
        expected: str,
        actual: str,
        hint: str = "",
        recorded_in: str = "checkpoints.yaml registers",
    ) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(
            f"checksum mismatch for {path}: {recorded_in} sha256 {expected}, "
            f"the file has {actual}. The file is truncated, corrupt or was changed; nothing was "
            f"loaded.{(' ' + hint) if hint else ''}"
        )


class UnsafePathError(CheckpointError):
    """A file name taken from data (a manifest, the registry, a Hub listing, a command-line name)
    leads outside its folder, or names a symlink out of it or a file that is not a regular file
    (:func:`zoo.files.contained_path`); it was refused before anything was opened, hashed,
    uploaded or deleted."""


class RegistryError(ConfigError):
    """``checkpoints.yaml`` (or an entry of it) fails schema validation."""


class HubError(ZooError, RuntimeError):
    """The Hugging Face Hub refused a request, or could not be reached and nothing is cached."""


class ZooWarning(UserWarning):
    """Base of the zoo's own warnings: the CLI prints their message as one line,
    ``zoo: warning: ...``, instead of Python's file, line and source."""


class RetiredCheckpointWarning(ZooWarning):
    """A retired published checkpoint was loaded (``checkpoints.yaml``: its ``retired`` field
    gives the reason and the checkpoint to use instead)."""


def compile_failure(error: BaseException) -> str | None:
    """The one-line cause when ``error`` is ``torch.compile``'s backend failing (Inductor's
    generated C++ not compiling, no C++ compiler), e.g. ``"CppCompileError: C++ compile
    error"``; ``None`` for any other error (a bug of the model's own code, bad input)."""
    from torch._dynamo.exc import BackendCompilerFailed  # Inductor's errors included

    if not isinstance(error, BackendCompilerFailed):
        return None
    cause = getattr(error, "inner_exception", None) or error
    first = next((line.strip() for line in str(cause).splitlines() if line.strip()), "")
    return f"{type(cause).__name__}: {first[:200]}"


@contextmanager
def compile_failures(name: str, active: bool = True) -> Iterator[None]:
    """Turn the compiler backend failing inside the block (:func:`compile_failure`) into a
    one-line :class:`ConfigError` saying that ``name`` could not be compiled and to train without
    ``--model.compile``; every other error passes unchanged (as all do when not ``active``)."""
    try:
        yield
    except Exception as e:
        cause = compile_failure(e) if active else None
        if cause is None:
            raise
        raise ConfigError(
            f"torch.compile could not compile {name} ({cause}): run without --model.compile "
            "(eager: the same numbers, slower)"
        ) from None
