"""``zoo bench``: time and memory of a checkpoint on this machine (bench.md/.json/.png)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.commands.common import DEVICE_HELP, default_device
from zoo.errors import ZooError

__all__ = ["PRECISIONS", "bench_main"]

# the keys of zoo.bench.PRECISIONS, named here so that --help imports no torch (a test keeps them equal)
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true")


def _default_out_dir(name: str) -> Path:
    """``bench/<name>``: a folder's own name, or a repo id with ``/`` as ``--``."""
    from zoo.files import explicit_path

    local = explicit_path(name)
    return Path("bench") / (local.resolve().name if local is not None else name.replace("/", "--"))


def _flop_table(card):  # noqa: ANN001, ANN202
    """The terminal's table of executed GFLOP/s and shares of the peak (bench.md's second)."""
    from rich.table import Table

    from zoo.bench import FLOP_COLUMNS, flop_rows, peak_line

    flops = Table(title="Executed FLOP/s", caption=peak_line(card))
    flops.add_column("length", justify="right")
    for _, header in FLOP_COLUMNS:
        flops.add_column(f"{header} GFLOP/s", justify="right")
        flops.add_column(f"{header} %pk", justify="right")
    for cells in flop_rows(card):
        flops.add_row(*cells)
    return flops


# --- zoo bench -------------------------------------------------------------------------------------
def bench_main(args: list[str]) -> None:
    """``zoo bench NAME``: measure, print a table, write the card (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="zoo bench",
        description="Measure a checkpoint on this machine: forward time, generation tokens/s and "
        "training-step time, with peak memory, over sequence lengths from 256 doubling to its "
        "context. Writes bench.md, bench.json and bench.png.",
    )
    parser.add_argument("name", help="a published checkpoint (`zoo list`), a Hub repo id or a "
                        "save_pretrained folder (./folder)")  # fmt: skip
    parser.add_argument("--device", help=DEVICE_HELP)
    parser.add_argument(
        "--precision",
        "--dtype",
        default="32-true",
        choices=PRECISIONS,
        help="32-true (fp32, default); bf16-mixed is `zoo fit`'s default on GPUs with bf16 and "
        "CPUs with AVX512-BF16 or AMX",
    )
    parser.add_argument("--lengths", type=int, nargs="+", metavar="N", help="sequence lengths (default: 256 "
                        "doubling to the context, the context last)")  # fmt: skip
    parser.add_argument("--new-tokens", type=int, default=64, metavar="N", help="tokens decoded (timed) "
                        "for generation; the prompt is the length minus these")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the median is shown")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before them")
    parser.add_argument(
        "--threads", type=int, metavar="N", help="torch CPU threads (default: torch's)"
    )
    parser.add_argument("--out-dir", type=Path, help="default: bench/<name>")
    ns = parser.parse_args(args)

    import torch

    from zoo.bench import COLUMNS, benchmark, table_rows, title, write_card

    ns.device = default_device(ns.device)
    if ns.threads is not None:
        if ns.threads < 1:
            parser.exit(2, f"zoo bench: error: --threads must be >= 1, got {ns.threads}\n")
        torch.set_num_threads(ns.threads)
    from zoo.precision import slow_precision_warning

    slow = slow_precision_warning(ns.precision) if ns.device == "cpu" else None
    if slow is not None:
        print(f"zoo bench: warning: {slow}", file=sys.stderr)
    try:
        card = benchmark(
            ns.name, device=ns.device, precision=ns.precision, lengths=ns.lengths,
            new_tokens=ns.new_tokens, warmup=ns.warmup, repeats=ns.repeats, progress=True,
        )  # fmt: skip
    except ZooError as e:
        parser.exit(2, f"zoo bench: error: {e}\n")
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{title(card)}\n{card.precision}, torch {card.torch_version}",
        caption="ms: median time; tok/s: cached decoding; MiB: peak memory above the model",
    )
    for _, header, _, _ in COLUMNS:
        table.add_column(header, justify="right")
    for cells in table_rows(card):
        table.add_row(*cells)
    console = Console()
    console.print(table)
    console.print(_flop_table(card))
    paths = write_card(card, ns.out_dir or _default_out_dir(ns.name))
    print(f"wrote {', '.join(str(p) for p in paths)}")
