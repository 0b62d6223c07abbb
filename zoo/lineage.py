"""Where a checkpoint comes from: the code's git commit and a checksum of the data it was trained on.

Model cards and ``checkpoints.yaml`` carry these beside the recipe, the package versions and the
parent checkpoint (``init_from``), so a reader can tell exactly what produced a published model.

- :func:`git_commit`: the commit of the zoo's source checkout (``"<sha>"``, ``"<sha>+dirty"`` when
  tracked files differ from it), or ``None`` for an installed wheel. :class:`~zoo.callbacks.
  TrainingSummary` records it when a fit starts (and again on every resume).
- :func:`data_checksum`: the sha256 of the data a data module serves, over the split names and every
  document's or image's bytes in order (a translation data module: every sentence pair). It is
  computed from what was loaded, not from the files, so the same data from another source (the JPEG
  copy vs the lossless CIFAR-10 release, a gzip vs a plain file) is told apart only when its content
  differs.
- :func:`checkpoint_name`: how published files (cards, ``training.json``, plots, ``zoo list``)
  name a parent checkpoint or a measured model: a published name or the recipe that trained it,
  never a folder of the machine it was trained on.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


__all__ = ["checkpoint_name", "data_checksum", "device_name", "form_factor", "git_commit"]


# Hopper parts by the board power limit that tells their form factors apart (NVIDIA's data
# sheets): the SXM modules run at up to 700 W, the PCIe cards at 350-400 W (H100 PCIe, H100 NVL)
# and 600 W (H200 NVL). The names alone do not say it: "NVIDIA H100 80GB HBM3" and "NVIDIA H200"
# are the SXM parts.
_PCIE_MAX_WATTS = {"H100": 400.0, "H200": 600.0}


def form_factor(name: str, power_limit_w: float | None) -> str | None:
    """``"SXM"`` or ``"PCIe"`` for a GPU named ``name`` (as ``nvidia-smi`` and torch give it) with
    board power limit ``power_limit_w`` (W), or ``None`` when neither tells."""
    if "PCIe" in name or "NVL" in name:
        return "PCIe"
    if "SXM" in name:
        return "SXM"
    for part, pcie_max in _PCIE_MAX_WATTS.items():
        if part in name and power_limit_w is not None:
            return "SXM" if power_limit_w > pcie_max else "PCIe"
    return None


def _power_limit_w(index: int) -> float | None:
    """The board power limit of GPU ``index`` in watts, from ``nvidia-smi``; ``None`` without it."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", "--query-gpu=power.limit", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout  # fmt: skip
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def device_name(device: str | torch.device = "cpu") -> str:
    """The machine a measurement or run uses, for cards. For a CUDA device: the GPU's name, with
    its form factor and power limit where ``nvidia-smi`` gives them (``"NVIDIA H200 (SXM,
    700 W)"``); else the CPU's model name and torch's thread count (``"AMD EPYC 9R14 (2
    threads)"``)."""
    import torch  # here: zoo list reads this module without needing torch

    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        watts = _power_limit_w(index)
        kind = form_factor(name, watts)
        details = [d for d in (kind, None if watts is None else f"{watts:.0f} W") if d]
        return f"{name} ({', '.join(details)})" if details else name
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu} ({torch.get_num_threads()} threads)"


def git_commit() -> str | None:
    """The git commit of the zoo's source checkout, ``"+dirty"`` when tracked files differ; ``None``
    when the package is not a git checkout (an installed wheel) or git is missing."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


def _chunks(split: Any) -> Iterable[bytes]:
    import numpy as np

    if isinstance(split, np.ndarray):  # images (N, H, W, C)
        yield np.ascontiguousarray(split).tobytes()
    else:  # documents: a list of uint8 arrays or bytes
        for doc in split:
            yield bytes(doc) if not isinstance(doc, np.ndarray) else doc.tobytes()


def _pairs_checksum(datamodule: Any) -> dict[str, Any] | None:
    """The training and validation sentence pairs of a translation data module (each pair as
    ``source \\t target \\n`` in UTF-8, read from its files), or ``None`` when they are not here."""
    from zoo.data.translation import load_pairs
    from zoo.errors import ZooError

    hp = datamodule.hparams
    names = [hp.train_split, hp.val_split]
    digest = hashlib.sha256()
    try:
        for name in names:
            digest.update(f"split:{name}\n".encode())
            for src, tgt in load_pairs(hp.dataset, name, hp.source_lang, hp.target_lang,
                                       data_dir=hp.data_dir, path=hp.path):  # fmt: skip
                digest.update(f"{src}\t{tgt}\n".encode())
    except (ZooError, OSError, ValueError):
        return None
    return {"dataset": hp.dataset, "splits": names, "sha256": digest.hexdigest()}


def data_checksum(datamodule: Any, splits: Iterable[str] | None = None) -> dict[str, Any] | None:
    """``{"dataset", "splits", "sha256"}`` of the splits a data module has loaded (its ``splits``
    dict after ``setup``; ``splits`` picks some); for a translation data module (one with
    ``source_lang``), of its training and validation sentence pairs. ``None`` for a data module
    with neither, or whose data is not here."""
    if hasattr(getattr(datamodule, "hparams", None), "source_lang"):
        return _pairs_checksum(datamodule)
    loaded = getattr(datamodule, "splits", None)
    if not isinstance(loaded, dict) or not loaded:
        return None
    names = sorted(loaded if splits is None else [s for s in splits if s in loaded])
    digest = hashlib.sha256()
    try:
        for name in names:
            digest.update(f"split:{name}\n".encode())
            for chunk in _chunks(loaded[name]):
                digest.update(len(chunk).to_bytes(8, "little"))
                digest.update(chunk)
    except TypeError:
        return None
    dataset = getattr(getattr(datamodule, "hparams", None), "dataset", None)
    dataset = dataset or getattr(datamodule, "dataset", None)  # a task's corpus (pg19_repeats)
    return {"dataset": dataset, "splits": names, "sha256": digest.hexdigest()}


def _registered_names() -> set[str]:
    from zoo.errors import ZooError
    from zoo.hub.registry import load_registry

    try:
        return set(load_registry().entries)
    except (ZooError, OSError):
        return set()


def _recipe_training_into(run: Path) -> str | None:
    """``recipes/<family>/<stem>.yaml``, the packaged recipe whose ``trainer.default_root_dir`` is
    the run directory ``run`` (compared as normalised relative paths), or ``None``."""
    import importlib.resources

    try:
        wanted = os.path.normpath(os.path.relpath(run) if run.is_absolute() else run)
    except ValueError:  # another drive (Windows)
        return None
    root = Path(str(importlib.resources.files("zoo").joinpath("recipes")))
    pattern = re.compile(r"^\s*default_root_dir:\s*['\"]?([^'\"\s#]+)", re.M)
    for recipe in sorted(root.glob("*/*.yaml")):
        found = pattern.search(recipe.read_text(errors="replace"))
        if found and os.path.normpath(found.group(1)) == wanted:
            return f"recipes/{recipe.relative_to(root).as_posix()}"
    return None


def checkpoint_name(source: str | os.PathLike | None) -> str | None:
    """How a published file names the checkpoint ``source`` (an ``init_from`` parent, or the
    model a curve was measured on) without a folder of the machine that made it.

    - a published name or Hub repo id (not a local path): itself;
    - a local path whose folder (or run folder, for ``<run>/checkpoints/x.ckpt``) is named after
      a checkpoint of ``checkpoints.yaml`` (``./checkpoints/<name>``): that name;
    - a run directory (or a ``.ckpt`` in its ``checkpoints/``) that a packaged recipe trains into
      (its ``trainer.default_root_dir``): ``recipes/<family>/<stem>.yaml``;
    - a recipe (``recipes/<family>/<stem>.yaml``, what this function gives a run): itself;
    - any other local path: the run folder's name (a lone ``.ckpt``: the file's name).

    ``None`` or ``""`` gives ``None``. Local paths are recognised as
    :func:`zoo.files.explicit_path` does.
    """
    if source is None or str(source) == "":
        return None
    from zoo.files import explicit_path

    path = explicit_path(source)
    if path is None or (str(source).startswith("recipes/") and path.suffix in (".yaml", ".yml")):
        return str(source)
    path = Path(os.path.normpath(path))
    if path.name in ("", ".", ".."):
        path = path.resolve()
    in_run = path.suffix == ".ckpt" and path.parent.name == "checkpoints"
    run = path.parent.parent if in_run else path
    names = _registered_names()
    for candidate in (path.name, run.name):
        if candidate in names:
            return candidate
    if path.suffix == ".ckpt" and not in_run:
        return path.name
    return _recipe_training_into(run) or run.name
