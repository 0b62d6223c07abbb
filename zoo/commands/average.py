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
        "--last", type=int, help="with a directory: how many, 1 or more (default 5)"
    )
    parser.add_argument("--out", required=True, help="the .ckpt to write")
    ns = parser.parse_args(args)

    from zoo.averaging import last_checkpoints, save_average
    from zoo.errors import ZooError

    if ns.last is not None and ns.last < 1:
        parser.exit(2, f"zoo average: error: --last is {ns.last}: average the last 1 or more "
                    "checkpoints (the paper: 5)\n")  # fmt: skip
    try:
        if len(ns.sources) == 1 and Path(ns.sources[0]).is_dir():
            paths = last_checkpoints(ns.sources[0], 5 if ns.last is None else ns.last)
        else:
            paths = [Path(s) for s in ns.sources]
            folders = [str(p) for p in paths if p.is_dir()]
            if folders:
                parser.exit(2, f"zoo average: error: {', '.join(folders)} is a directory: give "
                            "one directory (with --last), or .ckpt files\n")  # fmt: skip
            if ns.last is not None:
                parser.exit(2, "zoo average: error: --last picks from a directory: with .ckpt "
                            "files, name the ones to average\n")  # fmt: skip
            missing = [str(p) for p in paths if not p.is_file()]
            if missing:
                parser.exit(2, f"zoo average: error: not found: {', '.join(missing)}\n")
        out = save_average(paths, ns.out, progress=True)
    except ZooError as e:
        parser.exit(2, f"zoo average: error: {e}\n")
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {out}")
