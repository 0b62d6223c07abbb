"""What each model gains from stretches of its context, on the same bytes, against a reference model
(experiments/long_context/log.md §5i).

Each argument is ``LABEL=PATH``, PATH a ``by_context.json`` (``zoo evaluate SOURCE --by-context``)
or its folder; all profiles must be measured on the same bytes (the same ``--block-spacing`` and
``--target-len``). For every stretch ``SHORT:LONG`` (default 256:1024, 1024:4096, 256:4096) the table
gives each model's gain, ``bits(SHORT) - bits(LONG)`` ± its paired standard error over the blocks,
and how much more it gains than the reference (the first argument) ± the standard error of that
difference of differences (:func:`zoo.by_context.gain_difference`):

    python experiments/long_context/context_gains.py --out docs/bench/by_context/routing_gains.md \\
        "random routing=runs/eval/random.by_context" \\
        "causal routing=docs/bench/by_context/routing_transformer_small_top2.pg19mini"
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.by_context import gain_difference, paired_difference
from zoo.profiles import load_context_profile


def gains_table(profiles: list[tuple[str, object]], stretches: list[tuple[int, int]]) -> str:
    """Markdown: one row per model, for each stretch its gain and its gain over the first model's,
    each ± a paired standard error, in bits per byte."""
    head = ["model"]
    for s, l in stretches:
        head += [f"gain {s:,} → {l:,}", "over the reference"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ref = profiles[0][1]
    for label, p in profiles:
        row = [label]
        for s, l in stretches:
            g, se = paired_difference(p, s, p, l)
            row.append(f"{g:+.4f} ± {se:.4f}")
            if p is ref:
                row.append("–")
            else:
                d, dse = gain_difference(p, ref, s, l)
                row.append(f"{d:+.4f} ± {dse:.4f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _stretch(text: str) -> tuple[int, int]:
    short, sep, long = text.partition(":")
    if not sep or not short.isdigit() or not long.isdigit() or int(short) >= int(long):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not SHORT:LONG with SHORT < LONG, e.g. 256:1024"
        )
    return int(short), int(long)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("profiles", nargs="+", metavar="LABEL=PATH", help="the first is the reference")
    p.add_argument("--stretch", type=_stretch, nargs="+", metavar="SHORT:LONG",
                   default=[(256, 1024), (1024, 4096), (256, 4096)])  # fmt: skip
    p.add_argument("--out", help="also write the table to this markdown file")
    ns = p.parse_args(argv)
    profiles = []
    for arg in ns.profiles:
        label, sep, path = arg.partition("=")
        if not sep:
            p.error(f"{arg!r} is not LABEL=PATH")
        profiles.append((label, load_context_profile(path)))
    table = gains_table(profiles, ns.stretch)
    print(table, end="")
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text(table)


if __name__ == "__main__":
    main()
