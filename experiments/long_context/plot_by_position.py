"""Several models' bits-per-byte-by-position curves, or their bits-by-context curves, in one picture
(experiments/long_context/log.md).

Each argument is ``LABEL=PATH``, PATH a ``by_position.json`` (``zoo evaluate SOURCE --by-position``)
or a ``by_context.json`` (``zoo evaluate SOURCE --by-context``), or the folder holding one; all
arguments of one picture are of one kind:

    python experiments/long_context/plot_by_position.py --out docs/img/by_position_v1.png \\
        "dense 256=checkpoints/transformer_lm_small.pg19mini" \\
        "sparse strided 4096=checkpoints/sparse_transformer_small_strided.pg19mini"
    python experiments/long_context/plot_by_position.py --out docs/img/by_context_published.png \\
        "dense 256=docs/bench/by_context/transformer_lm_small.pg19mini" ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.drawing import plot_context_profiles, plot_position_profiles
from zoo.profiles import load_context_profile, load_position_profile


def _is_context(path: str) -> bool:
    p = Path(path)
    return p.name == "by_context.json" or (p.is_dir() and (p / "by_context.json").is_file())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("curves", nargs="+", metavar="LABEL=PATH")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--title", default=None)
    ns = p.parse_args()
    pairs = []
    for arg in ns.curves:
        label, sep, path = arg.partition("=")
        if not sep:
            p.error(f"{arg!r} is not LABEL=PATH")
        pairs.append((label, path))
    kinds = {_is_context(path) for _, path in pairs}
    if len(kinds) > 1:
        p.error("give by_position or by_context profiles, not both in one picture")
    if kinds == {True}:
        profiles = [(label, load_context_profile(path)) for label, path in pairs]
        print(plot_context_profiles(profiles, ns.out, title=ns.title))
    else:
        profiles = [(label, load_position_profile(path)) for label, path in pairs]
        print(plot_position_profiles(profiles, ns.out, title=ns.title))


if __name__ == "__main__":
    main()
