"""``zoo models`` (the registered presets) and ``zoo pattern`` (draw an attention pattern)."""

from __future__ import annotations

import argparse
import textwrap

__all__ = ["PATTERNS", "models_main", "pattern_main"]

# the names of zoo.attention.patterns.PATTERNS, here so that --help imports no torch (a test keeps
# them equal)
PATTERNS = ("causal", "local", "local_1d", "local_2d", "strided", "fixed")

# below this many characters for the description, each model's description goes under its name
MIN_DESCRIPTION = 24


def models_main(args: list[str]) -> None:
    """``zoo models [PATTERN]``: the registered presets, by family, as a table that fits the
    terminal (the descriptions wrap; a narrow one gets each description under its name)."""
    parser = argparse.ArgumentParser(
        prog="zoo models",
        description="The registered models (presets), by family: name, parameters and what each "
        "is. zoo.create_model(NAME) builds one; a recipe names it in --model.init_args.model. "
        "Published weights are `zoo list`.",
    )
    parser.add_argument("pattern", nargs="?", help="a glob over names, e.g. 'routing*'")
    ns = parser.parse_args(args)

    from zoo.commands.common import console

    rows = _model_rows(ns.pattern)
    out = console()
    if not rows:
        out.print(f"no registered model matches {ns.pattern!r}", markup=False)
        return
    name_width = max(len(name) for _, name, _, _ in rows)
    params_width = max(len(params) for _, _, params, _ in rows)
    if out.width - name_width - params_width - 4 >= MIN_DESCRIPTION:
        out.print(_models_table(rows, name_width))
    else:  # too narrow for a third column: the description under the name, indented
        indent = " " * 4
        for _, name, params, description in rows:
            out.print(f"{name}  {params}", markup=False, highlight=False)
            lines = textwrap.wrap(description, max(out.width, 20), initial_indent=indent,
                                  subsequent_indent=indent)  # fmt: skip
            out.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _model_rows(pattern: str | None) -> list[tuple[str, str, str, str]]:
    """(family, name, parameters, description) of each preset matching ``pattern``, by family
    then name; parameters counted on the meta device (nothing allocated)."""
    import torch

    from zoo.models.registry import get_preset, list_models

    rows = []
    for name in list_models(pattern):
        preset = get_preset(name)
        with torch.device("meta"):  # count without allocating
            n = sum(p.numel() for p in preset.model_cls(preset.config).parameters())
        rows.append((preset.family, name, f"{n / 1e6:.2f}M", preset.description))
    return sorted(rows)


def _models_table(rows: list[tuple[str, str, str, str]], name_width: int):
    """The rows as a borderless table: a bold line per family, then its presets; the name and
    parameters never wrap, the description takes the rest of the width."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"registered models ({len(rows)})", box=None, pad_edge=False,
                  header_style="bold underline",
                  caption="zoo.create_model(NAME); in a recipe: --model.init_args.model NAME")  # fmt: skip
    table.add_column("name", no_wrap=True, min_width=name_width)
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("description", overflow="fold")
    family = None
    for row_family, name, params, description in rows:
        if row_family != family:
            if family is not None:
                table.add_row()
            family = row_family
            table.add_row(Text(family, style="bold"), "", "")
        table.add_row(Text(name), params, Text(description))
    return table


def pattern_main(args: list[str]) -> None:
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

    from zoo.drawing import draw_pattern

    keys = ("stride", "c", "window", "component", "query_block", "memory", "width",
            "query_height", "query_width", "memory_height", "memory_width")  # fmt: skip
    params = {k: getattr(ns, k) for k in keys if getattr(ns, k) is not None}
    if ns.distinct_summaries:
        params["distinct_summaries"] = True
    path = draw_pattern(
        ns.name, ns.out, n=ns.n, block_size=ns.block_size, query=ns.query, head=ns.head, **params
    )
    print(f"wrote {path}")
