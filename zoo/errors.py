"""Exceptions raised by the zoo.

Each error says what was wrong and how to fix it; they subclass the built-in exception a caller would
expect (``ValueError``, ``KeyError``, ``FileNotFoundError``) so ordinary ``except`` clauses still work.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataNotFoundError",
    "UnknownModelError",
    "ZooError",
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


class DataNotFoundError(ZooError, FileNotFoundError):
    """A data set could not be found locally and could not be downloaded."""
