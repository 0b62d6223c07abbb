"""``zoo list``: the published checkpoints as a table that fits the terminal, markdown, JSON, or the
README's table."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from zoo.commands.common import console
from zoo.errors import ConfigError

__all__ = ["list_main", "markdown_table"]


README_START = (
    "<!-- checkpoints:start (generated from checkpoints.yaml by `zoo list --write-readme`) -->"
)


README_END = "<!-- checkpoints:end -->"


def _emit(text: str) -> None:
    """Write ``text`` to stdout. A reader that has closed the pipe (``zoo list | head``) ends the
    command quietly, with status 0.

    Raises:
        SystemExit: with status 0, when the pipe is closed.
    """
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        try:  # Python flushes stdout again at exit: let that flush find /dev/null, not the pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):  # not a file descriptor (tests)
            pass
        raise SystemExit(0) from None


def _rendered(console: Console, renderable) -> str:
    """What ``console`` prints for ``renderable`` (with its colours when it has any)."""
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


def _whole(entry, split: str) -> str:
    """The task's metric measured on the whole ``split`` (``1.803 bits/byte``), or a dash; a † when
    its data set has a caveat (:data:`zoo.hub.schema.CAVEATS`)."""
    from zoo.hub.schema import CAVEATS

    m = entry.whole_split(split)
    if m is None:
        return "–"
    return f"{m.value:.{max(2, m.kind.digits - 1)}f} {m.kind.unit}" + (
        " †" if m.dataset in CAVEATS else ""
    )


RETIRED_MARK = "‡"


RETIRED_DOCS = "docs/checkpoints.md#retired-checkpoints"


def _test_cell(entry) -> str:
    """The test column: :func:`_whole` of ``test``, with a ‡ when the checkpoint is retired."""
    return _whole(entry, "test") + (f" {RETIRED_MARK}" if entry.retired is not None else "")


def _hidden_line(hidden: int) -> str:
    """The line under ``zoo list``'s table when retired checkpoints were left out."""
    what = "checkpoint" if hidden == 1 else "checkpoints"
    return f"{hidden} retired {what} hidden; zoo list --all shows them\n" if hidden else ""


def markdown_table(entries, show_retired: bool = False) -> str:
    """The README's table of published checkpoints (whole splits only: slices never show). Retired
    checkpoints are one line under it, naming them and where to read why; ``show_retired`` gives
    them rows instead, their test value marked ‡."""
    rows = [e for e in entries if show_retired or e.retired is None]
    retired = [e.name for e in entries if e.retired is not None]
    lines = [
        "| checkpoint | family | task | params | context | data | valid | test "
        "| trained on | recipe |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in rows:
        t = e.training
        wall = t.get("wall_time_s")
        trained = (
            f"{t.get('tokens') or 0:,} tokens, "
            f"{f'{wall:,.0f} s' if wall else 'wall time not recorded'}, {t.get('hardware')}"
        )
        lines.append(
            f"| `{e.name}` | {e.model_type} | {e.task} | {e.parameters / 1e6:.2f}M | "
            f"{e.config.get('max_seq_len')} | {e.dataset} | {_whole(e, 'valid')} | "
            f"{_test_cell(e)} | {trained} | [{Path(e.recipe).name}]({e.recipe}) |"
        )
    from zoo.hub.schema import CAVEATS

    notes = [f"† {d}: {CAVEATS[d]}." for d in sorted({e.dataset for e in rows}) if d in CAVEATS]
    if retired and show_retired:
        notes.append(f"{RETIRED_MARK} retired: still loadable, with a warning ([why, and what "
                     f"replaces it]({RETIRED_DOCS})).")  # fmt: skip
    elif retired:
        names = ", ".join(f"`{n}`" for n in retired)
        notes.append(f"Retired, still loadable with a warning ([why, and what replaces them]"
                     f"({RETIRED_DOCS})): {names}.")  # fmt: skip
    return "\n".join(lines + ([""] + ["\n\n".join(notes)] if notes else []))  # a paragraph each


def _readme_with_table(readme: str, table: str) -> str:
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(readme):
        raise SystemExit(f"the README has no {README_START} ... {README_END} section")
    return pattern.sub(lambda _: f"{README_START}\n{table}\n{README_END}", readme)


def _list_record(e, registry) -> dict:
    """One checkpoint as ``zoo list --json`` gives it (the parent named, never a local folder)."""
    from zoo.hub import weights_source
    from zoo.lineage import checkpoint_name

    st, head = e.structure, e.headline
    return {
        "name": e.name,
        "family": e.model_type,
        "task": e.task,
        "attention": st.get("pattern"),
        "causal": st.get("causal", True),
        "context": st.get("context"),
        "parameters": e.parameters,
        "dataset": e.dataset,
        "headline": {
            "name": head.name,
            "value": head.value,
            "unit": head.kind.unit,
            "split": head.split,
            "windows": head.windows,
        },
        "parent": checkpoint_name(e.training.get("parent")),
        "weights_from": weights_source(e, registry),
        "repo_id": e.repo_id,
        "revision": e.revision,
        "recipe": e.recipe,
        "retired": e.retired.to_dict() if e.retired is not None else None,  # null: active
    }


def _wide_table(entries, records, title: str) -> Table:
    """Every column of ``zoo list``: name, attention, context, params, data, test, parent, weights."""
    from zoo.hub.schema import CAVEATS

    notes = [f"† {d}: {CAVEATS[d]}." for d in sorted({e.dataset for e in entries}) if d in CAVEATS]
    retired = [f"{e.name} (use {e.retired.use_instead})" for e in entries if e.retired is not None]
    if retired:
        notes.append(f"{RETIRED_MARK} retired, still loadable with a warning: "
                     f"{', '.join(retired)}; docs/checkpoints.md says why.")  # fmt: skip
    table = Table(title=title, caption=" ".join(notes) or None)
    for col in ("name", "attention", "context", "params", "data", "test", "parent", "weights from"):
        right = col in ("params", "test", "context")
        table.add_column(col, justify="right" if right else "left", no_wrap=True)
    for e, r in zip(entries, records, strict=True):
        table.add_row(
            e.name,
            f"{r['attention'] or '?'}" + ("" if r["causal"] else " (looks ahead)"),
            f"{r['context'] or 0:,}",
            f"{e.parameters / 1e6:.2f}M",
            e.dataset,
            _test_cell(e),
            r["parent"] or "–",
            r["weights_from"],
        )
    return table


def _family(model_type: str) -> str:
    """A model family in a word or two: ``routing_transformer_lm`` -> ``routing``,
    ``transformer_seq2seq`` -> ``seq2seq``, ``transformer_lm`` -> ``transformer``,
    ``lstm_seq2seq`` -> ``lstm``; one word, so the narrow table's columns stay whole."""
    words = [w for w in model_type.split("_") if w != "lm"]
    words = [w for w in words if w != "transformer"] or words
    return "-".join([w for w in words if w != "seq2seq"] or words)


SHORT_UNITS = {"bits/byte": "bpb", "bits/dim": "bpd"}


def _narrow_table(entries, title: str, short: bool = False) -> Table:
    """The columns that fit a narrow terminal: name, family, context, params and the test metric.
    The name never wraps; ``short`` spaces the columns by one character and abbreviates the units
    and the context's header (explained in the caption), so that the table fits 80 characters."""
    from zoo.hub.schema import CAVEATS

    caption = "ctx: context, bpb: bits per byte, bpd: bits per dim (sub-pixel). " if short else ""
    caption += "".join(f"† {CAVEATS[d].split(':')[0]}. " for d in sorted({e.dataset for e in entries})
                       if d in CAVEATS)  # fmt: skip
    if any(e.retired is not None for e in entries):
        caption += f"{RETIRED_MARK} retired (docs/checkpoints.md). "
    table = Table(title=title, box=None, pad_edge=False, padding=(0, 0, 0, 1) if short else (0, 1),
                  header_style="bold underline",
                  caption=caption + "zoo list --wide: every column")  # fmt: skip
    table.add_column("name", no_wrap=True, min_width=max(len(e.name) for e in entries))
    table.add_column("family")
    for col in ("ctx" if short else "context", "params", "test"):
        table.add_column(col, justify="right", no_wrap=True)
    for e in entries:
        test = _test_cell(e)
        if short:
            test = " ".join(SHORT_UNITS.get(w, w) for w in test.split(" "))
        table.add_row(
            e.name,
            _family(e.model_type),
            f"{e.structure.get('context', 0):,}",
            f"{e.parameters / 1e6:.2f}M",
            test,
        )
    return table


def _width(console: Console, table: Table) -> tuple[int, int]:
    """The (minimum, natural) width of ``table`` in characters, whatever ``console``'s width."""
    from rich.measure import Measurement

    m = Measurement.get(console, console.options.update_width(100_000), table)
    return m.minimum, m.maximum


def _listing(entries, registry, console: Console, wide: bool) -> str:
    """``zoo list``'s table as text: every column when they fit ``console``'s width or, with
    ``wide``, in lines as long as they need; else the narrow columns (:func:`_narrow_table`, roomy
    or short), else one line per checkpoint."""
    title = f"published checkpoints ({registry.path})"
    records = [_list_record(e, registry) for e in entries]
    full = _wide_table(entries, records, title)
    natural = _width(console, full)[1]
    if wide or natural <= console.width:
        console.width = max(console.width, natural)  # --wide: lines longer than the terminal
        return _rendered(console, full)
    for short in (False, True):
        narrow = _narrow_table(entries, "published checkpoints", short)
        if _width(console, narrow)[1] <= console.width:
            return _rendered(console, narrow)
    return "".join(
        f"{e.name}: {e.model_type}, context {e.structure.get('context', 0):,}, "
        f"{e.parameters / 1e6:.2f}M parameters, test {_test_cell(e)}\n"
        for e in entries
    )


def list_main(args: list[str]) -> None:
    from zoo.hub.schema import TASKS  # imports zoo.hub (huggingface_hub: a few tenths of a second)

    parser = argparse.ArgumentParser(
        prog="zoo list",
        description="The published checkpoints. A terminal narrower than the full table gets the "
        "narrow view (name, family, context, parameters, test metric); --wide prints every "
        "column, --markdown and --json are for scripts. Retired checkpoints (still loadable, with "
        "a warning) show only with --all; --json lists them all, each with its 'retired' field.",
    )
    parser.add_argument("pattern", nargs="?", help="a glob over names, e.g. 'routing*'")
    parser.add_argument("--task", choices=sorted(TASKS))
    parser.add_argument("--attention", metavar="PATTERN",
                        help="the attention pattern: dense, fixed, strided, local, routing, ...")  # fmt: skip
    causal = parser.add_mutually_exclusive_group()
    causal.add_argument("--causal", action="store_const", const=True, dest="causal",
                        help="only strictly causal evaluation")  # fmt: skip
    causal.add_argument("--lookahead", action="store_const", const=False, dest="causal",
                        help="only models whose evaluation looks ahead (top-w routing)")  # fmt: skip
    parser.add_argument("--context", metavar="N", help="context length: N, '>=4096', '<1024', ...")
    parser.add_argument("--all", action="store_true", help="also the retired checkpoints (their "
                        f"test value marked {RETIRED_MARK}; docs/checkpoints.md)")  # fmt: skip
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--wide", action="store_true", help="every column, whatever the width")
    view.add_argument("--markdown", action="store_true", help="print the README's table")
    view.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    view.add_argument("--write-readme", metavar="README", nargs="?", const="README.md",
                      help="regenerate the table in README (default README.md)")  # fmt: skip
    ns = parser.parse_args(args)

    from zoo.hub import load_registry
    from zoo.hub.registry import list_pretrained

    registry = load_registry()
    filters = (ns.pattern, ns.task, ns.attention, ns.causal, ns.context)
    if ns.write_readme and (any(f is not None for f in filters) or ns.all):
        parser.error("--write-readme writes the README's table of every checkpoint: no filters, "
                     "no --all (it names the retired ones under the table)")  # fmt: skip
    try:
        entries = list_pretrained(ns.pattern, task=ns.task, attention=ns.attention,
                                  causal=ns.causal, context=ns.context,
                                  include_retired=True)  # fmt: skip
    except ConfigError as e:
        parser.error(str(e))
    if ns.write_readme:
        path = Path(ns.write_readme)
        path.write_text(_readme_with_table(path.read_text(), markdown_table(entries)))
        _emit(f"updated the checkpoint table of {path}\n")
    elif ns.markdown:
        _emit(markdown_table(entries, show_retired=ns.all) + "\n")
    elif ns.json:  # every checkpoint, each with its "retired" field: scripts filter themselves
        _emit(json.dumps([_list_record(e, registry) for e in entries], indent=2) + "\n")
    else:
        shown = [e for e in entries if ns.all or e.retired is None]
        hidden = _hidden_line(len(entries) - len(shown))
        if not shown:
            active = "active published" if hidden else "published"
            _emit(f"no {active} checkpoint matches these filters\n{hidden}")
        else:
            _emit(_listing(shown, registry, console(), ns.wide) + hidden)
