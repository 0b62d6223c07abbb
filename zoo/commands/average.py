"""``zoo average``: average the weights of a run's last checkpoints."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["average_main"]


def average_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo average",
        description="Average the weights of the last N checkpoints of a run into one checkpoint "
        "(Vaswani et al. 2017, section 6.1).",
    )
    parser.add_argument(
        "sources", nargs="+", help="a directory of periodic checkpoints, or .ckpt files"
    )
    parser.add_argument(
        "--last", type=int, default=5, help="with a directory: how many (default 5)"
    )
    parser.add_argument("--out", required=True, help="the .ckpt to write")
    ns = parser.parse_args(args)

    from zoo.averaging import last_checkpoints, save_average

    if len(ns.sources) == 1 and Path(ns.sources[0]).is_dir():
        paths = last_checkpoints(ns.sources[0], ns.last)
    else:
        paths = [Path(s) for s in ns.sources]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            parser.exit(2, f"zoo average: error: not found: {', '.join(missing)}\n")
    out = save_average(paths, ns.out, progress=True)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {out}")
