"""Train a recipe and measure it in one command, for a lent GPU whose checkpoints stay behind.

A device machine is lent for minutes, starts bare, and hands back only a few files. So this script
does, for each recipe in turn, everything that needs the run's Lightning checkpoint:

1. ``zoo fit --config RECIPE`` (a subprocess, so that one run's failure leaves the next one);
2. ``zoo evaluate RUN`` on the whole test and validation splits (fp32), ``--by-position`` on
   test, and ``--by-context`` on test and validation (``--block-spacing``), in this process;
3. unless the recipe is marked ``:no-weights``, the best checkpoint as a ``save_pretrained``
   folder in bf16 (a 25M model is 51 MB: the registry's limit is 60 MB) with its
   ``training.json``, which ``zoo export`` takes on this machine;
4. the run's logs (``fit.log``: what ``zoo fit`` printed) and measurements, packed as
   ``OUT/<run name>.tar.000``, ``.001``, ... of at most ``--piece-mb`` MiB each for the transfer
   back (``cat NAME.tar.* | tar x`` joins them).

``--deadline`` (seconds from the start) skips whatever step would start after it, so a command
stopped at its limit still returns what is finished.

Usage, on the device after ``source experiments/long_context/device_setup.sh``::

    python experiments/long_context/device_run.py --out $OUT/runs \\
        experiments/routing_transformer/pg19mini_gpu.yaml \\
        experiments/routing_transformer/pg19mini_gpu_local.yaml:no-weights

A ``:no-weights`` suffix keeps a recipe's weights on the device (only its measurements return).
Arguments after ``--`` go to every ``zoo fit`` (e.g. ``-- --trainer.max_steps 2`` for a smoke run).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml


def run_dir_of(recipe: Path) -> Path:
    """The run directory a recipe writes (its ``trainer.default_root_dir``)."""
    return Path(yaml.safe_load(recipe.read_text())["trainer"]["default_root_dir"])


def measure(run: Path, spacing: int | None, log, windows: int | None = None) -> None:
    """Whole-split bits/byte, bits by position and by context of ``run``'s best checkpoint
    (``windows``: only the first windows / blocks, for a smoke run)."""
    from zoo.cli import main as zoo

    results = run / "results.json"
    source = str(run) if run.is_absolute() else f"./{run}"  # a path, never read as a Hub repo id
    some = ["--windows", str(windows)] if windows else []
    blocks = ["--blocks", str(windows)] if windows else []
    blocks += ["--block-spacing", str(spacing)] if spacing else []  # default: the model's context
    steps = [
        ["--split", "test", "--out", str(results), *some],
        ["--split", "valid", "--out", str(results), *some],
        ["--split", "test", "--by-position", "--out-dir", str(run / "by_position"), *some],
        ["--split", "test", "--by-context", "--out-dir", str(run / "by_context"), *blocks],
        ["--split", "valid", "--by-context", "--out-dir", str(run / "by_context_valid"), *blocks],
    ]  # fmt: skip
    for args in steps:
        t = time.time()
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                zoo(["evaluate", source, "--precision", "32-true", *args])
        except SystemExit as e:  # a zoo error: say which, and go on with the next measurement
            why = err.getvalue().strip().splitlines()[-1:] or [""]
            log(f"evaluate {' '.join(args)}: exit {e.code}: {why[0]}")
        finally:
            sys.stderr.write(err.getvalue())
        log(f"evaluate {' '.join(args[:3])}: {time.time() - t:.1f} s")


def save_bf16(run: Path, out: Path) -> None:
    """The best checkpoint as a bf16 ``save_pretrained`` folder with its ``training.json``."""
    import torch

    from zoo.loading import load_task
    from zoo.pretrained import find_checkpoint
    from zoo.publishing.training import training_facts

    path = find_checkpoint(run)
    model = load_task(path).model.to(torch.bfloat16)
    model.save_pretrained(out)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    facts = training_facts(ckpt, path) | {"checkpoint": path.name}
    (out / "training.json").write_text(json.dumps(facts, indent=2) + "\n")


def pack(out: Path, piece_mb: int) -> list[Path]:
    """The folder ``out`` as ``out.tar.000``, ``.001``, ... of at most ``piece_mb`` MiB each."""
    archive = out.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        tar.add(out, arcname=out.name)
    data, size, pieces = archive.read_bytes(), piece_mb << 20, []
    for i in range(0, len(data), size):
        piece = archive.with_name(f"{archive.name}.{i // size:03d}")
        piece.write_bytes(data[i : i + size])
        pieces.append(piece)
    archive.unlink()
    return pieces


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    fit_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="+", help="RECIPE.yaml[:no-weights], trained in turn")
    parser.add_argument("--out", type=Path, required=True, help="folder packed for the transfer")
    parser.add_argument("--block-spacing", type=int,
                        help="--by-context's spacing (default: zoo evaluate's)")  # fmt: skip
    parser.add_argument("--deadline", type=float, default=float("inf"),
                        help="seconds from the start after which no step starts")  # fmt: skip
    parser.add_argument("--piece-mb", type=int, default=15)
    parser.add_argument("--windows", type=int, help="measure only this many windows (smoke runs)")
    ns = parser.parse_args(argv)
    start = time.time()
    ns.out.mkdir(parents=True, exist_ok=True)
    log_file = (ns.out / "device_run.log").open("a")

    def log(message: str) -> None:
        line = f"[{time.time() - start:7.1f} s] {message}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    for spec in ns.recipes:
        recipe, _, flag = spec.partition(":")
        recipe, run = Path(recipe), run_dir_of(Path(recipe))
        if time.time() - start > ns.deadline:
            log(f"{recipe}: skipped, past the deadline")
            continue
        t = time.time()
        dest = ns.out / run.name
        dest.mkdir(parents=True, exist_ok=True)
        with (dest / "fit.log").open("w") as fit_log:  # returned with the run, not in the output
            rc = subprocess.call([sys.executable, "-m", "zoo.cli", "fit", "--config", str(recipe),
                                  *fit_args], stdout=fit_log, stderr=subprocess.STDOUT)  # fmt: skip
        log(f"fit {recipe}: exit {rc} in {time.time() - t:.1f} s")
        if rc:
            print((dest / "fit.log").read_text()[-3000:], flush=True)
        if (run / "checkpoints").is_dir() and any((run / "checkpoints").glob("*.ckpt")):
            if time.time() - start <= ns.deadline:
                measure(run, ns.block_spacing, log, ns.windows)
            if flag != "no-weights":
                save_bf16(run, dest / "model")
                log(f"saved {dest / 'model'} in bf16")
        for item in ("results.json", "by_position", "by_context", "by_context_valid", "logs"):
            src = run / item
            if src.is_dir():
                shutil.copytree(src, dest / item, dirs_exist_ok=True)
            elif src.is_file():
                shutil.copy(src, dest / item)
        for piece in pack(dest, ns.piece_mb):  # now, so that a later step's failure loses nothing
            log(f"packed {piece} ({piece.stat().st_size / 2**20:.1f} MiB)")
        shutil.rmtree(dest)
    log_file.close()


if __name__ == "__main__":
    main()
