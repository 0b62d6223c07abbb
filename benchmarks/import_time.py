"""How long `import zoo` and its common first steps take, each in a fresh interpreter.

    python benchmarks/import_time.py --out docs/bench/import_time.md

Every row runs ``python -c CODE`` ``--repeats`` times (median, min) and lists the heavy libraries
that CODE left imported. `import zoo` is lazy: the goal (issue 19) is < 1 s on a 2-core CPU; torch
alone is the floor of anything that builds a model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROWS = [
    ("python -c pass", "pass"),
    ("import torch (the floor for models)", "import torch"),
    ("import zoo", "import zoo"),
    ("import zoo.models", "import zoo.models"),
    (
        "zoo.create_model('transformer_lm_small')",
        "import zoo; zoo.create_model('transformer_lm_small')",
    ),
    ("import zoo.cli (the zoo command)", "import zoo.cli"),
    ("import lightning (for comparison)", "import lightning"),
]
HEAVY = ("torch", "lightning", "datasets", "huggingface_hub", "triton", "matplotlib", "pandas")


def measure(code: str) -> tuple[float, list[str]]:
    probe = (
        "import time, sys, json; t = time.perf_counter()\n"
        f"{code}\n"
        "print(json.dumps([time.perf_counter() - t, "
        f"[m for m in {HEAVY!r} if m in sys.modules]]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    seconds, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    return seconds, loaded


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="write the markdown table here")
    args = p.parse_args()
    lines = [
        f"`python benchmarks/import_time.py` ({args.repeats} fresh interpreters per row; "
        f"Python {sys.version.split()[0]})",
        "",
        "| code | median s | min s | heavy libraries imported |",
        "|---|---|---|---|",
    ]
    for label, code in ROWS:
        runs = [measure(code) for _ in range(args.repeats)]
        times = [t for t, _ in runs]
        loaded = ", ".join(runs[-1][1]) or "none"
        lines.append(
            f"| `{label}` | {statistics.median(times):.2f} | {min(times):.2f} | {loaded} |"
        )
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
