"""zoo.kernels: the Triton kernel layer (block-sparse and routing attention) and its dispatch.

The layer's modules live in the repository's top-level ``kernels/`` folder (``op_ref``, the PyTorch
path and the Triton kernels of each op; :mod:`zoo.kernels.dispatch` chooses among them and is
re-exported here). A wheel installs them in ``zoo/kernels/`` (``pyproject.toml``'s package-dir).

The folder has no ``__init__.py`` on purpose: ``import kernels`` from a clone's root, a notebook or
pytest must find Hugging Face's ``kernels`` package (which transformers imports), not ours. This
module makes ``zoo.kernels`` a package by giving it a ``__path__`` (a module with one is a package,
as the import system's reference says), the installed folder first, else the checkout's.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
__path__ = [  # noqa: PLE0237  (the import system reads it: zoo.kernels.<module> resolves here)
    str(folder)
    for folder in (_HERE / "kernels", _HERE.parent / "kernels")  # wheel, then checkout
    if (folder / "dispatch.py").is_file()
][:1]

from zoo.kernels.dispatch import *  # noqa: E402, F403
from zoo.kernels.dispatch import __all__  # noqa: E402, F401
