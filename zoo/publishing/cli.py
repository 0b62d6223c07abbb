"""The checkpoint commands of ``zoo``: list, pull, evaluate, export, push.

zoo list [PATTERN] [--task T] [--attention P] [--causal | --lookahead] [--context '>=4096'] [--all]
         [--wide | --markdown | --json | --write-readme]
zoo pull NAME                              # download every file into the HF cache, verified
zoo evaluate SOURCE [--split test] [--windows N] [--out results.json]
zoo evaluate SOURCE --text-file BOOK [--split test]   # bits per byte on any text (its last 5 %)
zoo evaluate SOURCE --by-position [--context N] [--bucket 64] [--stride S] [--out-dir DIR] [--name N]
zoo evaluate SOURCE --by-context [C ...] [--target-len 256] [--block-spacing S] [--blocks N]
             [--out-dir DIR] [--name N]
zoo evaluate SOURCE --probe copy [--text-file F] [--span 32] [--cue 8] [--trials 32]
             [--distances D ...] [--seed 0] [--out-dir DIR] [--name N]
zoo evaluate NAME --registered [--metric M ...]  # re-measure every registered metric (or M's)
zoo export RUN --name NAME --recipe YAML --results results.json [--register] [--by-position DIR]
           [--by-context DIR] [--copy-probe DIR] [--samples PNG] [--bench DIR]
zoo push FOLDER_OR_RUN --repo-id NS/NAME [--update-registry]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

from zoo.errors import ConfigError

__all__ = ["evaluate_main", "export_main", "list_main", "markdown_table", "pull_main", "push_main"]

README_START = (
    "<!-- checkpoints:start (generated from checkpoints.yaml by `zoo list --write-readme`) -->"
)
README_END = "<!-- checkpoints:end -->"


def _console() -> Console:
    """Rich output; 132 columns when not a terminal (logs) unless COLUMNS says otherwise, so
    tables keep one line per row."""
    return Console() if sys.stdout.isatty() or "COLUMNS" in os.environ else Console(width=132)


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
    its data set has a caveat (:data:`zoo.publishing.cards.CAVEATS`)."""
    from zoo.publishing.cards import CAVEATS

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
        trained = (
            f"{t.get('tokens') or 0:,} tokens, {t.get('wall_time_s') or 0:,.0f} s, "
            f"{t.get('hardware')}"
        )
        lines.append(
            f"| `{e.name}` | {e.model_type} | {e.task} | {e.parameters / 1e6:.2f}M | "
            f"{e.config.get('max_seq_len')} | {e.dataset} | {_whole(e, 'valid')} | "
            f"{_test_cell(e)} | {trained} | [{Path(e.recipe).name}]({e.recipe}) |"
        )
    from zoo.publishing.cards import CAVEATS

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
    from zoo.publishing.cards import CAVEATS

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
    ``transformer_seq2seq`` -> ``seq2seq``, ``transformer_lm`` -> ``transformer``."""
    words = [w for w in model_type.split("_") if w != "lm"]
    return " ".join([w for w in words if w != "transformer"] or words)


SHORT_UNITS = {"bits/byte": "bpb", "bits/dim": "bpd"}


def _narrow_table(entries, title: str, short: bool = False) -> Table:
    """The columns that fit a narrow terminal: name, family, context, params and the test metric.
    The name never wraps; ``short`` spaces the columns by one character and abbreviates the units
    (explained in the caption), so that the table fits 80 characters."""
    from zoo.publishing.cards import CAVEATS

    caption = "bpb: bits per byte, bpd: bits per dim (sub-pixel). " if short else ""
    caption += "".join(f"† {CAVEATS[d].split(':')[0]}. " for d in sorted({e.dataset for e in entries})
                       if d in CAVEATS)  # fmt: skip
    if any(e.retired is not None for e in entries):
        caption += f"{RETIRED_MARK} retired (docs/checkpoints.md). "
    table = Table(title=title, box=None, pad_edge=False, padding=(0, 0, 0, 1) if short else (0, 1),
                  header_style="bold underline",
                  caption=caption + "zoo list --wide: every column")  # fmt: skip
    table.add_column("name", no_wrap=True, min_width=max(len(e.name) for e in entries))
    table.add_column("family")
    for col in ("context", "params", "test"):
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
    from zoo.hub import load_registry
    from zoo.hub.registry import TASKS, list_pretrained

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
    registry = load_registry()
    filters = (ns.pattern, ns.task, ns.attention, ns.causal, ns.context)
    if ns.write_readme and (any(f is not None for f in filters) or ns.all):
        parser.error("--write-readme writes the README's table of every checkpoint: no filters, "
                     "no --all (it names the retired ones under the table)")  # fmt: skip
    try:
        entries = list_pretrained(ns.pattern, task=ns.task, attention=ns.attention,
                                  causal=ns.causal, context=ns.context)  # fmt: skip
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
            _emit(_listing(shown, registry, _console(), ns.wide) + hidden)


def pull_main(args: list[str]) -> None:
    from zoo.hub import pull

    parser = argparse.ArgumentParser(
        prog="zoo pull",
        description="Download every file of a published checkpoint at its pinned revision into the "
        "Hugging Face cache and verify its sha256 (resumes interrupted downloads).",
    )
    parser.add_argument("name")
    parser.add_argument("--cache-dir", help="default: the HF cache (HF_HOME)")
    parser.add_argument("--force", action="store_true", help="download again even if cached")
    ns = parser.parse_args(args)
    path = pull(ns.name, cache_dir=ns.cache_dir, force_download=ns.force)
    print(f"{ns.name}: all files verified in {path}")


def evaluate_main(args: list[str]) -> None:
    from zoo.callbacks import quiet_lightning_warnings
    from zoo.hub.registry import METRICS

    parser = argparse.ArgumentParser(
        prog="zoo evaluate",
        description="Measure a model on a split: bits per byte (text) or bits per dim (images). "
        "SOURCE is a published name, a Hub repo id, a save_pretrained directory, a run directory "
        "or a .ckpt.",
    )
    parser.add_argument("source")
    parser.add_argument("--dataset", help="default: the published checkpoint's, the run's, or "
                        "pg19mini")  # fmt: skip
    parser.add_argument("--split", default="test", choices=("valid", "test"))
    first = parser.add_mutually_exclusive_group()
    first.add_argument("--windows", type=int, help="only the first N windows of the split (image "
                       "data sets: a seed-0 sample of N images)")  # fmt: skip
    first.add_argument(
        "--first-bytes", type=int, help="only the windows covering the first N bytes of the split"
    )
    parser.add_argument("--precision", default="32-true", help="a Lightning precision")
    search = parser.add_argument_group("translation (BLEU): decoding, default the registered "
                                       "test BLEU's for a published name, else the paper's")  # fmt: skip
    search.add_argument("--decoding", choices=("beam", "greedy"))
    search.add_argument("--beam-size", type=int)
    search.add_argument("--alpha", type=float, help="GNMT length penalty exponent")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--data-dir", help="the directory holding <dataset>/, the only place "
                        "searched when given (default: $ZOO_DATA_DIR, then the download cache)")  # fmt: skip
    parser.add_argument("--out", help="add the result to this JSON file (zoo export reads it)")
    parser.add_argument(
        "--registered",
        action="store_true",
        help="re-measure every metric checkpoints.yaml registers for SOURCE and compare",
    )
    parser.add_argument("--tolerance", type=float, help="--registered: the largest difference "
                        "allowed (default per metric: 0.002 bits, 0.05 BLEU or perplexity)")  # fmt: skip
    parser.add_argument("--metric", nargs="+", choices=sorted(METRICS), metavar="M",
                        help="--registered: re-measure only the registered metrics of these "
                        f"names ({', '.join(sorted(METRICS))}), e.g. copy_gain, which takes "
                        "seconds to minutes where a whole split's bits/byte can take hours")  # fmt: skip
    by = parser.add_argument_group("bits per byte by position in the window")
    by.add_argument("--by-position", action="store_true",
                    help="bits per byte by position of the predicted byte in its window: a table, "
                    "and by_position.md / .json / .png in --out-dir")  # fmt: skip
    by.add_argument("--context", type=int, help="window in bytes (default: the model's "
                    "max_seq_len; longer for rotary or sinusoidal positions: extrapolation)")  # fmt: skip
    by.add_argument("--bucket", type=int, default=64, help="positions per bucket (default 64)")
    by.add_argument("--stride", type=int, help="sliding windows, one every STRIDE bytes, each "
                    "scoring its last STRIDE bytes: every byte gets >= context - STRIDE bytes "
                    "of context (default: non-overlapping windows)")  # fmt: skip
    by.add_argument("--out-dir", help="default: by_position/<SOURCE, sanitised> (by_context/... "
                    "with --by-context, copy_probe/... with --probe)")  # fmt: skip
    by.add_argument("--name", help="--by-position / --by-context / --probe: what the files call "
                    "the model (default: SOURCE); give the published name of a run you will `zoo export`, "
                    "so that its files name the checkpoint, not a local folder")  # fmt: skip
    ctx = parser.add_argument_group("bits per byte of the same bytes by context length")
    ctx.add_argument("--by-context", type=int, nargs="*", metavar="C",
                     help="score the same target bytes with windows of C bytes for each C "
                     "(default 64, 128, ... up to max_seq_len): by_context.md / .json / .png in "
                     "--out-dir")  # fmt: skip
    ctx.add_argument("--target-len", type=int, default=256,
                     help="target bytes per block (default 256)")  # fmt: skip
    ctx.add_argument("--block-spacing", type=int, metavar="S",
                     help="one target block at the end of every S-byte window (default: the "
                     "largest C, more if --target-len is over half of it); the same S scores "
                     "models of different contexts on the same bytes")  # fmt: skip
    ctx.add_argument("--blocks", type=int, help="only the first N target blocks")
    probe = parser.add_argument_group("zero-shot retrieval (docs/long_context.md)")
    probe.add_argument("--probe", choices=("copy",), help="copy: a span of random lowercase "
                       "letters (uniform a-z, from --seed) at the end of a window of the model's "
                       "context and again d bytes earlier; bits per byte on its second copy after "
                       "the cue, against the same window without the first copy: copy_probe.md / "
                       ".json / .png in --out-dir (default copy_probe/<SOURCE>)")  # fmt: skip
    probe.add_argument("--text-file", metavar="FILE", help="text from this file (.gz read as "
                       "gzip) instead of the model's data set: with --probe its windows; without, "
                       "bits per byte on its --split (split 90/5/5 %% in order: test is the last "
                       "5 %%), e.g. a book no recipe trains on")  # fmt: skip
    probe.add_argument("--span", type=int, help="span length m in bytes (default 32)")
    probe.add_argument("--cue", type=int, help="bytes of the second copy not scored (default 8)")
    probe.add_argument("--trials", type=int, help="windows, at least 2 (default 32)")
    probe.add_argument("--distances", type=int, nargs="+", metavar="D", help="between the "
                       "copies' starts, span <= D <= context - span (default: powers of two "
                       "from 16 that fit)")  # fmt: skip
    probe.add_argument("--seed", type=int, help="seed of the windows and spans (default 0)")
    ns = parser.parse_args(args)
    if ns.metric and not ns.registered:
        parser.error("--metric goes with --registered")
    by_context = ns.by_context is not None
    probe_flags = (ns.span, ns.cue, ns.trials, ns.distances, ns.seed)
    if ns.probe and (ns.by_position or by_context or ns.registered or ns.out
                     or ns.precision != "32-true" or ns.windows is not None
                     or ns.first_bytes is not None or ns.context is not None
                     or ns.stride is not None):  # fmt: skip
        parser.error(
            "--probe measures in fp32 and writes its own files (--out-dir): not with "
            "--by-position, --by-context, --context, --stride, --registered, --out, --precision, "
            "--windows or --first-bytes"
        )
    if not ns.probe and any(v is not None for v in probe_flags):
        parser.error("--span, --cue, --trials, --distances and --seed go with --probe")
    if ns.text_file and not ns.probe and (ns.dataset or ns.registered or ns.by_position
                                          or by_context):  # fmt: skip
        parser.error(
            "--text-file measures bits per byte on that file: not with --dataset, --registered, "
            "--by-position or --by-context"
        )
    if by_context and (ns.by_position or ns.registered or ns.out or ns.precision != "32-true"
                       or ns.windows is not None or ns.first_bytes is not None
                       or ns.context is not None or ns.stride is not None):  # fmt: skip
        parser.error(
            "--by-context measures in fp32 and writes its own files (--out-dir): not with "
            "--by-position, --context, --stride, --registered, --out, --precision, --windows or "
            "--first-bytes (use --blocks)"
        )
    if not by_context and (
        ns.target_len != 256 or ns.blocks is not None or ns.block_spacing is not None
    ):
        parser.error("--target-len, --block-spacing and --blocks go with --by-context")
    if not ns.by_position and (
        ns.context is not None
        or ((ns.out_dir is not None or ns.name is not None) and not by_context and not ns.probe)
        or ns.stride is not None
    ):
        parser.error("--context, --stride, --out-dir and --name go with --by-position")
    for flag, value, whole in (("--windows", ns.windows, True),
                               ("--first-bytes", ns.first_bytes, True),
                               ("--batch-size", ns.batch_size, False)):  # fmt: skip
        if value is not None and value < 1:
            fix = " (leave it out to measure the whole split)" if whole else ""
            parser.exit(2, f"zoo evaluate: error: {flag} must be >= 1, got {value}{fix}\n")
    if ns.by_position and (ns.registered or ns.out or ns.precision != "32-true"):
        parser.error(
            "--by-position measures in fp32 and writes its own files (--out-dir): not with "
            "--registered, --out or --precision"
        )
    quiet_lightning_warnings()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no device/limit banners
    with _one_line_warnings("zoo evaluate"):
        _evaluate(ns)


@contextlib.contextmanager
def _one_line_warnings(prog: str):
    """Print the data sets' warnings (:class:`~zoo.data.text.EmptyDataWarning`) as one line each,
    ``<prog>: warning: ...`` on stderr; other warnings as Python shows them."""
    from zoo.data.text import EmptyDataWarning

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, EmptyDataWarning):
            print(f"{prog}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _evaluate(ns: argparse.Namespace) -> None:
    """``zoo evaluate`` once its arguments are checked: measure, compare or profile ``ns.source``."""
    from zoo.evaluation import evaluate, remeasure, save_metric
    from zoo.hub import load_registry

    by_context = ns.by_context is not None
    ns.dataset = ns.dataset or _dataset_of(ns.source)
    if ns.by_position:
        _by_position(ns)
        return
    if by_context:
        _by_context(ns)
        return
    if ns.probe:
        _copy_probe(ns)
        return
    decoding = {k: v for k, v in (("search", ns.decoding), ("beam_size", ns.beam_size),
                                  ("alpha", ns.alpha)) if v is not None} or None  # fmt: skip
    if not ns.registered:
        from zoo.precision import slow_precision_warning

        slow = slow_precision_warning(ns.precision)
        if slow is not None:
            print(f"zoo evaluate: warning: {slow}", file=sys.stderr)
        dataset = "text_file" if ns.text_file else ns.dataset
        m = evaluate(ns.source, dataset=dataset, split=ns.split, windows=ns.windows,
                     first_bytes=ns.first_bytes, precision=ns.precision, decoding=decoding,
                     batch_size=ns.batch_size, data_dir=ns.data_dir,
                     text_file=ns.text_file)  # fmt: skip
        how = f", {m.decoding_text}" if m.decoding else ""
        print(f"{ns.source}: {m.format()} {m.kind.unit} on {m.label}, {m.precision}{how}")
        if m.signature:
            print(f"sacrebleu signature: {m.signature}")
        if ns.out:
            save_metric(m, ns.out)
            print(f"recorded in {ns.out}")
        return
    entry = load_registry().get(ns.source)
    chosen = [m for m in entry.metrics if not ns.metric or m.name in ns.metric]
    if not chosen:
        sys.exit(f"zoo evaluate: {entry.name} registers no {' or '.join(ns.metric)} metric "
                 f"(it has {', '.join(sorted({m.name for m in entry.metrics}))})")  # fmt: skip
    table = Table(title=f"{entry.name}: registered vs measured")
    for col in ("metric", "measured on", "precision", "registered", "measured", "difference"):
        table.add_column(col, justify="left" if col in ("metric", "measured on") else "right")
    failed = []
    for reg in chosen:
        m = remeasure(entry.name, reg, data_dir=ns.data_dir)
        diff = m.value - reg.value
        tolerance = reg.kind.tolerance if ns.tolerance is None else ns.tolerance
        same_data = not reg.targets or m.targets == reg.targets
        ok = abs(diff) <= tolerance and same_data
        if not same_data:  # an empty or changed file: the value is of other data
            failed.append(f"{reg.label}: measured on {m.targets:,} {reg.kind.targets}, registered "
                          f"on {reg.targets:,}: the data differs from what was registered (an "
                          "empty or changed file?)")  # fmt: skip
        elif not ok:
            failed.append(f"{reg.name} on {reg.label}: {diff:+.4f} {reg.kind.unit} (tolerance "
                          f"{tolerance})")  # fmt: skip
        style = "green" if ok else "bold red"
        label = f"{reg.label}, {reg.search_text}" if reg.search_text else reg.label
        table.add_row(reg.kind.heading, label, reg.precision, reg.format(), m.format(),
                      f"[{style}]{diff:+.4f}[/{style}]")  # fmt: skip
    _console().print(table)
    if failed:
        sys.exit("zoo evaluate: measured values differ from checkpoints.yaml: " + "; ".join(failed))


def _dataset_of(source: str) -> str:
    """The data set a source was trained on: a published checkpoint's, a Lightning run's (its
    data module's ``dataset``), else ``pg19mini``."""
    from zoo.errors import ZooError
    from zoo.hub import load_registry
    from zoo.pretrained import find_checkpoint

    try:
        ckpt = find_checkpoint(source)
    except ZooError:
        ckpt = None
    if ckpt is not None:
        import torch

        hp = torch.load(ckpt, map_location="cpu", weights_only=False, mmap=True)
        return (hp.get("datamodule_hyper_parameters") or {}).get("dataset") or "pg19mini"
    entry = load_registry().entries.get(source)
    return entry.dataset if entry is not None else "pg19mini"


def _sanitised(source: str) -> str:
    """A folder name: ``runs/transformer_lm/pg19mini`` -> ``runs_transformer_lm_pg19mini``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", source.strip("/\\.")).strip("_") or "model"


def _by_position(ns: argparse.Namespace) -> None:
    """``zoo evaluate SOURCE --by-position``: measure, print the table, write the files (which
    call the model ``--name``, default SOURCE)."""
    import dataclasses

    import torch

    from zoo.evaluation import bits_by_position, save_position_profile

    profile = bits_by_position(ns.source, dataset=ns.dataset, split=ns.split, context=ns.context,
                               bucket=ns.bucket, windows=ns.windows, first_bytes=ns.first_bytes,
                               batch_size=ns.batch_size, data_dir=ns.data_dir, stride=ns.stride,
                               device="cuda" if torch.cuda.is_available() else "cpu")  # fmt: skip
    p = profile
    table = Table(
        title=f"{ns.source}: bits per byte by position in the window ({p.dataset} {p.split}, "
        f"{p.windows:,} windows of {p.context:,} bytes)"
    )
    for col in ("positions", "bytes scored", "bits/byte"):
        table.add_column(col, justify="left" if col == "positions" else "right", no_wrap=True)
    for positions, n, bits, extrapolated in p.rows():
        table.add_row(
            positions + (" [yellow](extrapolated)[/yellow]" if extrapolated else ""),
            f"{n:,}",
            "–" if bits is None else f"{bits:.4f}",
        )
    _console().print(table)
    print(f"{ns.source}: {p.bits_per_byte:.4f} bits/byte overall ({p.targets:,} bytes scored)")
    if p.stride is not None:
        print(
            f"sliding windows every {p.stride:,} bytes: every byte past a document's first "
            f"{p.context:,} predicted from at least {p.context - p.stride:,} bytes"
        )
    if p.extrapolated:
        print(
            f"trained on windows of {p.max_seq_len:,} bytes: positions {p.max_seq_len:,} and "
            "beyond are extrapolation"
        )
    out = ns.out_dir or str(Path("by_position") / _sanitised(ns.source))
    named = dataclasses.replace(profile, source=ns.name) if ns.name else profile
    paths = save_position_profile(named, out)
    print(f"wrote {', '.join(str(path) for path in paths)}")


def _by_context(ns: argparse.Namespace) -> None:
    """``zoo evaluate SOURCE --by-context [C ...]``: measure, print the table, write the files
    (which call the model ``--name``, default SOURCE)."""
    import dataclasses

    import torch

    from zoo.by_context import bits_by_context, save_context_profile

    p = bits_by_context(ns.source, contexts=ns.by_context or None, dataset=ns.dataset,
                        split=ns.split, target_len=ns.target_len, blocks=ns.blocks,
                        block_spacing=ns.block_spacing,
                        data_dir=ns.data_dir,
                        device="cuda" if torch.cuda.is_available() else "cpu")  # fmt: skip
    table = Table(
        title=f"{ns.source}: bits per byte of the same {p.targets:,} bytes ({p.dataset} "
        f"{p.split}, {p.blocks:,} blocks of {p.target_len}) by context length"
    )
    for col in ("context", "fewest bytes", "bits/byte", f"gain of {p.contexts[-1]:,} ± s.e."):
        table.add_column(col, justify="right", no_wrap=True)
    for i, c in enumerate(p.contexts):
        last = i == len(p.contexts) - 1
        table.add_row(
            f"{c:,}" + (" [yellow](extrapolated)[/yellow]" if p.extrapolated(i) else ""),
            f"{p.min_context[i]:,}",
            f"{p.bits[i]:.4f}",
            "–" if last else f"{p.gain[i]:+.4f} ± {p.gain_se[i]:.4f}",
        )
    _console().print(table)
    out = ns.out_dir or str(Path("by_context") / _sanitised(ns.source))
    named = dataclasses.replace(p, source=ns.name) if ns.name else p
    paths = save_context_profile(named, out)
    print(f"wrote {', '.join(str(path) for path in paths)}")


def _copy_probe(ns: argparse.Namespace) -> None:
    """``zoo evaluate SOURCE --probe copy``: measure (:func:`zoo.probes.copy_probe`), print the
    table, write the files (which call the model ``--name``, default SOURCE)."""
    import dataclasses

    import torch

    from zoo.errors import ZooError
    from zoo.probes import copy_probe, copy_probe_rich_table, save_copy_probe

    given = {k: getattr(ns, k) for k in ("span", "cue", "trials", "distances", "seed")}
    try:
        p = copy_probe(ns.source, dataset=ns.dataset, split=ns.split, text_file=ns.text_file,
                       batch_size=ns.batch_size, data_dir=ns.data_dir,
                       device="cuda" if torch.cuda.is_available() else "cpu",
                       **{k: v for k, v in given.items() if v is not None})  # fmt: skip
    except ZooError as e:
        print(f"zoo evaluate: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    _console().print(copy_probe_rich_table(p))
    out = ns.out_dir or str(Path("copy_probe") / _sanitised(ns.source))
    paths = save_copy_probe(dataclasses.replace(p, source=ns.name) if ns.name else p, out)
    print(f"wrote {', '.join(str(path) for path in paths)}")


def export_main(args: list[str]) -> None:
    from zoo.evaluation import load_metrics
    from zoo.hub import load_registry
    from zoo.publishing.export import export_run, register

    parser = argparse.ArgumentParser(
        prog="zoo export",
        description="Turn a trained run into the folder that is pushed and shipped: config.json, "
        "model.safetensors, README.md (model card), recipe.yaml, training.json.",
    )
    parser.add_argument("run", help="a run directory (its checkpoints/best.ckpt), a .ckpt, or a "
                        "save_pretrained folder with its own training.json")  # fmt: skip
    parser.add_argument(
        "--name", required=True, help="<model>.<dataset>, e.g. transformer_lm_small.pg19mini"
    )
    parser.add_argument("--recipe", required=True, help="the recipe YAML that trained it")
    parser.add_argument(
        "--results", help="metrics from `zoo evaluate --out` (default RUN/results.json)"
    )
    parser.add_argument("--out", help="default: checkpoints/NAME beside checkpoints.yaml")
    parser.add_argument("--repo-id", help="default: attention-zoo/NAME")
    parser.add_argument("--register", action="store_true", help="add the entry to checkpoints.yaml")
    parser.add_argument("--by-position", metavar="DIR", help="the folder of `zoo evaluate RUN "
                        "--by-position` (by_position.md/.json/.png): published, in the card")  # fmt: skip
    parser.add_argument("--by-context", metavar="DIR", help="the folder of `zoo evaluate RUN "
                        "--by-context` (by_context.md/.json/.png): published, in the card")  # fmt: skip
    parser.add_argument("--copy-probe", metavar="DIR", help="the folder of `zoo evaluate RUN "
                        "--probe copy` (copy_probe.md/.json/.png): published, in the card")  # fmt: skip
    parser.add_argument("--samples", metavar="PNG", help="an image model's `zoo sample --out PNG` "
                        "grid (and its _completions.png): published, in the card")  # fmt: skip
    parser.add_argument("--bench", metavar="DIR", help="the folder of `zoo bench NAME --out-dir "
                        "DIR` (bench.md/.json/.png): published, in the card")  # fmt: skip
    ns = parser.parse_args(args)
    if ns.repo_id is not None:
        from zoo.publishing.push import checked_repo_id

        checked_repo_id(ns.repo_id)
    results = ns.results or str(Path(ns.run) / "results.json")
    metrics = load_metrics(results)
    out = export_run(
        ns.run,
        ns.out or load_registry().shipped_dir / ns.name,
        name=ns.name,
        recipe=ns.recipe,
        metrics=metrics,
        repo_id=ns.repo_id,
        by_position=ns.by_position,
        by_context=ns.by_context,
        copy_probe=ns.copy_probe,
        samples=ns.samples,
        bench=ns.bench,
    )
    print(f"exported {ns.run} to {out}")
    if ns.register:
        entry = register(out, name=ns.name, recipe=ns.recipe, metrics=metrics, repo_id=ns.repo_id)
        print(f"registered {entry.name} in checkpoints.yaml (hub: {entry.repo_id}, not pushed yet)")


def push_main(args: list[str]) -> None:
    from zoo.evaluation import load_metrics
    from zoo.publishing.push import checked_repo_id, pin_revision, push

    parser = argparse.ArgumentParser(
        prog="zoo push",
        description="Publish an exported folder (or a run, exported on the fly) to the Hugging Face "
        "Hub in one commit. Needs a token with write access (HF_TOKEN or `hf auth login`).",
    )
    parser.add_argument("source", help="a folder from `zoo export` or a run directory")
    parser.add_argument("--repo-id", required=True)
    parser.add_argument("--name", help="for a run: <model>.<dataset>")
    parser.add_argument("--recipe", help="for a run: the recipe YAML")
    parser.add_argument("--results", help="for a run: metrics (default RUN/results.json)")
    parser.add_argument("--branch", help="default: main")
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--commit-message")
    parser.add_argument(
        "--update-registry",
        action="store_true",
        help="pin the new commit in checkpoints.yaml (the entry with these files)",
    )
    ns = parser.parse_args(args)
    checked_repo_id(ns.repo_id)  # before anything is read or exported
    metrics = None
    if not (Path(ns.source) / "config.json").is_file() and ns.name:
        metrics = load_metrics(ns.results or str(Path(ns.source) / "results.json"))
    sha = push(ns.source, ns.repo_id, name=ns.name, recipe=ns.recipe, metrics=metrics,
               branch=ns.branch, private=ns.private, commit_message=ns.commit_message)  # fmt: skip
    print(f"pushed {ns.source} to {ns.repo_id} at commit {sha}")
    if ns.update_registry:
        entry = pin_revision(ns.source, ns.repo_id, sha)
        print(f"pinned {entry.name} to {entry.repo_id}@{sha} in checkpoints.yaml")
