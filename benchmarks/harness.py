"""What the CPU benchmarks share: one measurement per fresh process, peak RSS, growth exponents, a
markdown table and a log-log plot.

A benchmark module defines ``run_one(method, n) -> dict`` and calls :func:`time_and_peak` in it;
its ``main`` measures every ``(method, n)`` in a subprocess (``python -m benchmarks.<name> --one
METHOD N``, with the repository root on its ``PYTHONPATH``) with :func:`measure`, so one method's
memory never inflates another's, then writes the table with :func:`write_report`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from zoo.lineage import device_name

__all__ = [
    "growth",
    "machine",
    "measure",
    "measure_all",
    "parser",
    "time_and_peak",
    "write_report",
]

REPO = Path(__file__).resolve().parents[1]  # where ``benchmarks`` imports from


def parser(doc: str, methods: Sequence[str]) -> argparse.ArgumentParser:
    """The options every benchmark takes: ``--sizes``, ``--methods``, ``--out``, ``--timeout``,
    and the hidden ``--one METHOD N`` its subprocesses run."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--methods", nargs="+", default=list(methods), choices=methods)
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement")
    p.add_argument("--one", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    return p


def time_and_peak(step: Callable[[], float], repeats: int = 3) -> tuple[float, float]:
    """Run ``step`` (returning its own seconds) once to warm up, then ``repeats`` times.

    Returns the median time in ms and the growth of the process's peak resident set in MiB
    (``ru_maxrss``, measured from before the warm-up, which is where the peak happens).
    """
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    step()
    times = sorted(step() for _ in range(repeats))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    return 1e3 * times[len(times) // 2], peak / 1024


def measure_all(module: str, ns: argparse.Namespace) -> list[dict]:
    """:func:`measure` every ``(method, n)`` of ``ns.methods`` and ``ns.sizes`` (the options of
    :func:`parser`), sizes outermost, with a progress bar."""
    from rich.progress import track

    jobs = [(m, n) for n in ns.sizes for m in ns.methods]
    return [measure(module, m, n, ns.timeout) for m, n in track(jobs, description="measuring")]


def measure(
    module: str, method: str, n: int, timeout: float, env: dict[str, str] | None = None
) -> dict:
    """``python -m module --one method n`` in a fresh process: its last stdout line (JSON), or a
    row with an ``error`` (timeout, crash, out of memory).

    ``module`` is ``benchmarks.<name>``: the repository root goes first on the subprocess's
    ``PYTHONPATH``, ahead of the one ``env`` (or else this process) gives, so it imports from any
    working directory."""
    cmd = [sys.executable, "-m", module, "--one", method, str(n)]
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=True, env=env
        )
        return json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"method": method, "n": n, "error": f"over {timeout:.0f} s"}
    except subprocess.CalledProcessError as e:
        tail = (e.stderr or "").strip().splitlines()[-1:] or ["killed"]
        return {"method": method, "n": n, "error": tail[0][:80]}


def growth(rows: list[dict], method: str, metric: str = "ms") -> float | None:
    """Least-squares slope of log(metric) against log(n): the ``k`` of ``metric ~ n^k``."""
    pts = [(math.log(r["n"]), math.log(r[metric])) for r in rows
           if r["method"] == method and r.get(metric, 0) > 0]  # fmt: skip
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def machine() -> str:
    """``"AMD EPYC 9R14 (2 threads), torch 2.x"`` for table captions: the CPU's model name."""
    return f"{device_name('cpu')}, torch {torch.__version__}"


def write_report(
    rows: list[dict],
    methods: Sequence[str],
    metrics: Sequence[tuple[str, str, str]],
    header: list[str],
    out: Path,
    stem: str,
) -> str:
    """Write ``<stem>.md`` (one row per method and metric, one column per n, plus the growth
    exponent of time), ``<stem>.json`` and ``<stem>.png`` under ``out``; return the markdown.

    ``metrics``: ``(key, unit, plot label)``; the first is the time whose exponent is fitted.
    """
    sizes = sorted({r["n"] for r in rows})
    cell = {(r["method"], r["n"]): r for r in rows}
    lines = [*header, "", "| method | " + " | ".join(f"n={n}" for n in sizes) + " | time ~ n^k |",
             "|---|" + "---|" * (len(sizes) + 1)]  # fmt: skip
    for i, (metric, unit, _) in enumerate(metrics):
        for m in methods:
            vals = []
            for n in sizes:
                r = cell.get((m, n), {})
                vals.append(f"{r[metric]:,.0f}" if metric in r else r.get("error", "-"))
            k = growth(rows, m, metric) if i == 0 else None
            tail = f"{k:.2f}" if k is not None else ""
            lines.append(f"| {m} ({unit}) | " + " | ".join(vals) + f" | {tail} |")
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    _plot(rows, methods, metrics, out / f"{stem}.png")
    return text


def _plot(rows, methods, metrics, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4))
    for ax, (metric, _, label) in zip(list(axes), metrics, strict=True):
        for m in methods:
            pts = [(r["n"], r[metric]) for r in rows if r["method"] == m and metric in r]
            if pts:
                ax.loglog(*zip(*pts, strict=True), marker="o", label=m)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
