"""``zoo verify``: recompute a published model's golden logits and report any drift."""

from __future__ import annotations

import argparse
import sys

__all__ = ["DTYPES", "verify_main"]

# the keys of zoo.golden.DTYPES, named here so that --help imports no torch (a test keeps them equal)
DTYPES = ("float32", "bfloat16", "float16")


def verify_main(args: list[str]) -> None:
    """``zoo verify NAME [--dtype float32] [--device cpu]``: exit status 1 on drift."""
    parser = argparse.ArgumentParser(
        prog="zoo verify",
        description="Recompute a published model's golden logits on this machine and compare "
        "them with those recorded when it was published.",
    )
    parser.add_argument("source", help="a published name, Hub repo id or save_pretrained folder")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tolerance", type=float, help="the largest logit difference that "
                        "passes (default per dtype: zoo.golden.TOLERANCE, printed with the "
                        "result)")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="print every compared number")
    ns = parser.parse_args(args)

    from rich.console import Console
    from rich.table import Table

    from zoo.errors import ZooError
    from zoo.golden import verify

    try:
        verdict = verify(ns.source, dtype=ns.dtype, device=ns.device, tolerance=ns.tolerance)
    except ZooError as e:
        parser.exit(2, f"zoo verify: error: {e}\n")
    if ns.verbose or not verdict.ok:
        table = Table(title=f"{ns.source}: golden logits")
        for col in ("value", "recorded", "recomputed", "difference"):
            table.add_column(col, justify="left" if col == "value" else "right")
        for what, want, got in verdict.rows:
            bad = abs(want - got) > verdict.tolerance
            diff = f"{got - want:+.2e}"
            table.add_row(
                what, f"{want:.6f}", f"{got:.6f}", f"[bold red]{diff}[/]" if bad else diff
            )
        Console().print(table)
    print(f"{ns.source}: {verdict.summary()}")
    if not verdict.ok:
        sys.exit(1)
