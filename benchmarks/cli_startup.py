"""How long the ``zoo`` command takes to answer: the wall time of the console script, in a fresh
process per run (issue 78: a command line that answers at once).

    python -m benchmarks.cli_startup --out docs/bench/cli_startup.md
    git archive HEAD zoo kernels checkpoints.yaml | tar -x -C /tmp/before  # an older zoo
    python -m benchmarks.cli_startup --baseline /tmp/before --baseline-label "HEAD"

Each row runs the ``zoo`` script beside this interpreter ``--repeats`` times (median, min and max
of the wall time, output discarded) and lists the heavy libraries the command left imported
(:func:`benchmarks.import_time.measure`, the same probe as ``import zoo``'s table). With
``--baseline DIR`` the zoo found in DIR (first on ``PYTHONPATH``) is timed too, its runs
interleaved with these, so that both sides see the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.import_time import measure

ROWS = [  # (what a user types, the arguments of `zoo`)
    ("zoo --help", ["--help"]),
    ("zoo generate --help", ["generate", "--help"]),
    ("zoo list", ["list"]),
    ("zoo models", ["models"]),
    ("zoo fit --help", ["fit", "--help"]),
]
ZOO = Path(sys.executable).with_name("zoo")  # the console script of this environment


def wall_time(args: list[str], env: dict[str, str], cwd: str) -> float:
    """Seconds from starting ``zoo ARGS`` to its exit.

    Raises:
        RuntimeError: the command failed (its status and the end of its stderr).
    """
    start = time.perf_counter()
    done = subprocess.run([str(ZOO), *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=600)  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"zoo {' '.join(args)} exited {done.returncode}: {done.stderr[-500:]}")
    return seconds


def loaded(args: list[str]) -> str:
    """The heavy libraries ``zoo ARGS`` leaves imported, run in-process by a fresh interpreter."""
    code = f"from zoo.cli import main\ntry:\n    main({args!r})\nexcept SystemExit:\n    pass"
    return ", ".join(measure(code)[1]) or "none"


def spread(times: list[float]) -> str:
    return f"{statistics.median(times):.2f} | {min(times):.2f}–{max(times):.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=5, help="runs per command (default 5)")
    p.add_argument("--baseline", type=Path, help="also time the zoo package in this folder")
    p.add_argument("--baseline-label", default="baseline", help="its column's name")
    p.add_argument("--out", help="write the markdown table here")
    ns = p.parse_args()
    from benchmarks.harness import machine

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    sides = {"now": env}
    if ns.baseline is not None:
        path = os.pathsep.join([str(ns.baseline.resolve()), env.get("PYTHONPATH", "")])
        sides[ns.baseline_label] = {**env, "PYTHONPATH": path.rstrip(os.pathsep)}
    header = "| command | median s | min–max s | heavy libraries imported |"
    rule = "|---|---|---|---|"
    if ns.baseline is not None:
        header += f" {ns.baseline_label}: median s | min–max s |"
        rule += "---|---|"
    command = shlex.join(["python", "-m", "benchmarks.cli_startup", *sys.argv[1:]])
    lines = [
        f"`{command}`: wall time of the `zoo` console script, a fresh process per run, "
        f"{ns.repeats} runs per command{' (the two sides interleaved)' if ns.baseline else ''}; "
        f"{machine()}, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        "",
        header,
        rule,
    ]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as cwd:  # no checkout on sys.path but the zoo's own
        for label, args in ROWS:
            times: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(ns.repeats):
                for side, side_env in sides.items():
                    times[side].append(wall_time(args, side_env, cwd))
            row = f"| `{label}` | {spread(times['now'])} | {loaded(args)} |"
            if ns.baseline is not None:
                row += f" {spread(times[ns.baseline_label])} |"
            lines.append(row)
            print(row, flush=True)
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text("\n".join(lines) + "\n")
        print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
