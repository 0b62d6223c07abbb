"""Several models' bits-per-byte-by-position curves in one picture (docs/long_context.md).

Each argument is ``LABEL=PATH``, PATH a ``by_position.json`` (or its folder) written by
``zoo evaluate SOURCE --by-position``:

    python recipes/long_context/plot_by_position.py --out docs/img/by_position_v1.png \\
        "dense 256=checkpoints/transformer_lm_small.pg19mini" \\
        "sparse strided 4096=checkpoints/sparse_transformer_small_strided.pg19mini"
"""

from __future__ import annotations

import argparse

from zoo.drawing import plot_position_profiles
from zoo.evaluation import load_position_profile


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("curves", nargs="+", metavar="LABEL=PATH")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--title", default=None)
    ns = p.parse_args()
    profiles = []
    for arg in ns.curves:
        label, sep, path = arg.partition("=")
        if not sep:
            p.error(f"{arg!r} is not LABEL=PATH")
        profiles.append((label, load_position_profile(path)))
    print(plot_position_profiles(profiles, ns.out, title=ns.title))


if __name__ == "__main__":
    main()
