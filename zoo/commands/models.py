"""``zoo models`` (the registered presets) and ``zoo pattern`` (draw an attention pattern)."""

from __future__ import annotations

import argparse

import torch
from rich.console import Console
from rich.table import Table

__all__ = ["models_main", "pattern_main"]


def models_main(args: list[str]) -> None:
    from zoo.models.registry import get_preset, list_models

    table = Table(title="registered models")
    table.add_column("name", no_wrap=True)
    table.add_column("family")
    table.add_column("parameters", justify="right")
    table.add_column("description")
    for name in list_models(args[0] if args else None):
        preset = get_preset(name)
        with torch.device("meta"):  # count without allocating
            n = sum(p.numel() for p in preset.model_cls(preset.config).parameters())
        table.add_row(name, preset.family, f"{n / 1e6:.2f}M", preset.description)
    Console().print(table)


def pattern_main(args: list[str]) -> None:
    from zoo.attention.patterns import PATTERNS
    from zoo.drawing import draw_pattern

    parser = argparse.ArgumentParser(
        prog="zoo pattern",
        description="Draw an attention pattern: its connectivity matrix (blocks shaded) and the "
        "keys one query attends to, to PNG.",
    )
    parser.add_argument("name", choices=sorted(PATTERNS))
    parser.add_argument("--out", required=True, help="the PNG file to write")
    parser.add_argument("--n", type=int, default=64, help="sequence length drawn")
    parser.add_argument("--block-size", type=int, default=4)
    parser.add_argument("--stride", type=int, help="strided / fixed: l")
    parser.add_argument("--c", type=int, help="fixed: summary cells per block")
    parser.add_argument("--distinct-summaries", action="store_true", help="fixed: per-head")
    parser.add_argument("--window", type=int, help="local: positions attended")
    parser.add_argument("--query-block", type=int, help="local_1d: positions per query block")
    parser.add_argument("--memory", type=int, help="local_1d: positions before the block")
    parser.add_argument("--width", type=int, help="local_2d: grid width (3 x pixels for RGB)")
    parser.add_argument("--query-height", type=int, help="local_2d: query block rows")
    parser.add_argument("--query-width", type=int, help="local_2d: query block columns")
    parser.add_argument("--memory-height", type=int, help="local_2d: memory rows above")
    parser.add_argument("--memory-width", type=int, help="local_2d: memory columns each side")
    parser.add_argument("--component", type=int, choices=(1, 2), help="A1 or A2 alone")
    parser.add_argument("--query", type=int, help="the query shown on the right (default: last)")
    parser.add_argument("--head", type=int, default=0, help="head drawn (distinct summaries)")
    ns = parser.parse_args(args)
    keys = ("stride", "c", "window", "component", "query_block", "memory", "width",
            "query_height", "query_width", "memory_height", "memory_width")  # fmt: skip
    params = {k: getattr(ns, k) for k in keys if getattr(ns, k) is not None}
    if ns.distinct_summaries:
        params["distinct_summaries"] = True
    path = draw_pattern(
        ns.name, ns.out, n=ns.n, block_size=ns.block_size, query=ns.query, head=ns.head, **params
    )
    print(f"wrote {path}")
