"""What several commands share: the ``--device`` default and check, the model loader, bytes from
arguments and stdin, the terminal console and one-line warnings.

Nothing here imports torch or Lightning at import time: a command builds its parser from this
module, and ``zoo COMMAND --help`` must answer without loading them (tests/test_cli_startup.py)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

__all__ = [
    "DEVICE_HELP",
    "checked_device",
    "console",
    "default_device",
    "load_model",
    "one_line_warnings",
    "prompt_bytes",
    "stdin_bytes",
]

DEVICE_HELP = "cpu, cuda or cuda:N (default: cuda if this machine has one, else cpu)"


def default_device(device: str | None) -> str:
    """``device`` if given, else ``cuda`` when torch sees a GPU, else ``cpu``: a ``--device``
    default decided after parsing, so that ``--help`` imports no torch."""
    if device is not None:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(checkpoint: str, device: str = "cpu", **options):
    """:func:`zoo.loading.load_model` (``options``: its ``task``, ``wrong_kind``), imported on the
    first call: it imports torch and the tasks.

    Raises:
        ZooError: what :func:`zoo.loading.load_model` raises (a missing, unsafe or wrong-kind
            checkpoint).
    """
    from zoo.loading import load_model as load

    return load(checkpoint, device, **options)


def checked_device(parser: argparse.ArgumentParser, device: str) -> str:
    """``device`` if this machine has it; else exit 2 with a one-line error naming what it has
    (:func:`zoo.pretrained.device_problem`)."""
    from zoo.pretrained import device_problem

    problem = device_problem(device, cpu="--device cpu")
    if problem is not None:
        parser.exit(2, f"{parser.prog}: error: --device {device!r} {problem}\n")
    return device


def prompt_bytes(text: str) -> bytes:
    """The bytes of a command-line argument as the user typed them: Python decodes arguments
    with ``surrogateescape``, so bytes that are not UTF-8 come back unchanged."""
    return os.fsencode(text)


def stdin_bytes() -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)  # a StringIO (tests) has no bytes underneath
    return buffer.read() if buffer is not None else sys.stdin.read().encode("utf-8")


@contextlib.contextmanager
def one_line_warnings(prog: str, *categories: type[Warning]):
    """Show warnings of ``categories`` as one line each on stderr, ``<prog>: warning: MESSAGE``;
    others as Python shows them. Python's filters still apply first, so a warning repeated from
    the same line shows once."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, categories):
            print(f"{prog}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def console():
    """A :class:`rich.console.Console`; 132 columns when not a terminal (logs) unless COLUMNS
    says otherwise, so tables keep one line per row."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() or "COLUMNS" in os.environ else Console(width=132)
