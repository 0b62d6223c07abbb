"""``zoo evaluate``: bits per byte (or dim, or BLEU) on a split or a text file, ``--registered``
re-measurement, and the profiles (``--by-position``, ``--by-context``, ``--probe copy``)."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from rich.table import Table

from zoo.commands.common import console, one_line_warnings

__all__ = ["evaluate_main"]


def evaluate_main(args: list[str]) -> None:
    parser = _parser()
    ns = parser.parse_args(args)
    _check_flags(parser, ns)
    from zoo.callbacks import quiet_lightning_warnings  # Lightning: only once the flags are checked

    quiet_lightning_warnings()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no device/limit banners
    from zoo.data.byte_corpora import EmptyDataWarning

    with one_line_warnings("zoo evaluate", EmptyDataWarning):
        _evaluate(ns)


def _parser() -> argparse.ArgumentParser:
    """``zoo evaluate``'s arguments: the measurement, then each profile's group."""
    from zoo.hub.schema import METRICS

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
    _by_position_arguments(parser)
    _by_context_arguments(parser)
    _probe_arguments(parser)
    attention = parser.add_argument_group("attention of a translation model (zoo.support)")
    attention.add_argument("--attention", action="store_true", help="the mean attention support "
                           "(source tokens with non-zero weight per target token, teacher-forced "
                           "on the references of --split) and the attention map of one sentence: "
                           "attention.md / .json / .png in --out-dir (default "
                           "attention/<SOURCE>)")  # fmt: skip
    attention.add_argument("--line", type=int, help="--attention: the line of --split (0-based) "
                           "to translate and draw (default 22)")  # fmt: skip
    return parser


def _by_position_arguments(parser: argparse.ArgumentParser) -> None:
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


def _by_context_arguments(parser: argparse.ArgumentParser) -> None:
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


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    probe = parser.add_argument_group("zero-shot retrieval (docs/results/retrieval.md)")
    probe.add_argument("--probe", choices=("copy",), help="copy: a span of random lowercase "
                       "letters (uniform a-z, from --seed; or --span-kind) at the end of a window "
                       "of the model's context and again d bytes earlier; bits per byte on its "
                       "second copy after the cue, against the same window without the first "
                       "copy: copy_probe.md / .json / .png in --out-dir (default "
                       "copy_probe/<SOURCE>)")  # fmt: skip
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
    probe.add_argument("--span-kind", nargs="+", metavar="KIND", help="what the span is made "
                       "of: letters (random a-z, the default), uppercase, digits, printable "
                       "(ASCII 0x20-0x7e), bytes (1-255) or text (natural text from another "
                       "document, or far from the window); several are measured on the same "
                       "windows and shown side by side")  # fmt: skip


def _check_flags(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Refuse flags that do not go together, or values out of range, in one line (exit 2)."""
    if ns.metric and not ns.registered:
        parser.error("--metric goes with --registered")
    by_context = ns.by_context is not None
    probe_flags = (ns.span, ns.cue, ns.trials, ns.distances, ns.seed, ns.span_kind)
    if ns.probe and (ns.by_position or by_context or ns.registered or ns.out
                     or ns.precision != "32-true" or ns.windows is not None
                     or ns.first_bytes is not None or ns.context is not None
                     or ns.stride is not None):  # fmt: skip
        parser.error(
            "--probe measures in fp32 and writes its own files (--out-dir): not with "
            "--by-position, --by-context, --context, --stride, --registered, --out, --precision, "
            "--windows or --first-bytes"
        )
    if ns.attention and (ns.probe or ns.by_position or by_context or ns.registered or ns.out
                         or ns.text_file or ns.precision != "32-true" or ns.windows is not None
                         or ns.first_bytes is not None or ns.context is not None
                         or ns.stride is not None):  # fmt: skip
        parser.error(
            "--attention measures a translation model's attention in fp32 and writes its own "
            "files (--out-dir): not with --probe, --by-position, --by-context, --registered, "
            "--out, --text-file, --precision, --windows, --first-bytes, --context or --stride"
        )
    if ns.line is not None and not ns.attention:
        parser.error("--line goes with --attention")
    if not ns.probe and any(v is not None for v in probe_flags):
        parser.error("--span, --cue, --trials, --distances, --seed and --span-kind go with --probe")
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
        or (
            (ns.out_dir is not None or ns.name is not None)
            and not (by_context or ns.probe or ns.attention)
        )
        or ns.stride is not None
    ):
        parser.error(
            "--context and --stride go with --by-position; --out-dir and --name with "
            "--by-position, --by-context, --probe or --attention"
        )
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
    _check_numbers(parser, ns)


def _check_numbers(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Refuse a ``--tolerance`` or ``--seed`` out of range in one line (exit 2); the other numbers
    are checked by the functions that take them (each a one-line error)."""
    import math

    from zoo.errors import ConfigError
    from zoo.generation import check_seed

    if ns.tolerance is not None:
        if not ns.registered:
            parser.exit(2, "zoo evaluate: error: --tolerance goes with --registered (the largest "
                        "difference from a registered value that passes)\n")  # fmt: skip
        if not (math.isfinite(ns.tolerance) and ns.tolerance >= 0):
            parser.exit(2, f"zoo evaluate: error: --tolerance is {ns.tolerance}: use a finite "
                        "number >= 0 (0: exactly the registered value; default per metric: "
                        "0.002 bits, 0.05 BLEU or perplexity)\n")  # fmt: skip
    if ns.seed is not None:
        try:
            check_seed(ns.seed)
        except ConfigError as e:
            parser.exit(2, f"zoo evaluate: error: {e}\n")


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
    if ns.attention:
        _attention(ns)
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
    console().print(table)
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
        from zoo.tasks.checkpoint import read_checkpoint

        hp = read_checkpoint(ckpt)
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

    from zoo.by_position import bits_by_position, save_position_profile

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
    console().print(table)
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
    console().print(table)
    out = ns.out_dir or str(Path("by_context") / _sanitised(ns.source))
    named = dataclasses.replace(p, source=ns.name) if ns.name else p
    paths = save_context_profile(named, out)
    print(f"wrote {', '.join(str(path) for path in paths)}")


def _copy_probe(ns: argparse.Namespace) -> None:
    """``zoo evaluate SOURCE --probe copy``: measure (:func:`zoo.probes.copy_probe`), print the
    table, write the files (which call the model ``--name``, default SOURCE)."""

    import torch

    from zoo.errors import ZooError
    from zoo.probes import copy_probe, copy_probe_rich_table, save_copy_probe

    given = {k: getattr(ns, k) for k in ("span", "cue", "trials", "distances", "seed",
                                         "span_kind")}  # fmt: skip
    try:
        p = copy_probe(ns.source, dataset=ns.dataset, split=ns.split, text_file=ns.text_file,
                       batch_size=ns.batch_size, data_dir=ns.data_dir,
                       device="cuda" if torch.cuda.is_available() else "cpu",
                       **{k: v for k, v in given.items() if v is not None})  # fmt: skip
    except ZooError as e:
        print(f"zoo evaluate: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    console().print(copy_probe_rich_table(p))
    out = ns.out_dir or str(Path("copy_probe") / _sanitised(ns.source))
    paths = save_copy_probe(p.renamed(ns.name) if ns.name else p, out)
    print(f"wrote {', '.join(str(path) for path in paths)}")


def _attention(ns: argparse.Namespace) -> None:
    """``zoo evaluate SOURCE --attention``: measure (:func:`zoo.support.attention_profile`), print
    the table, write the files (which call the model ``--name``, default SOURCE)."""
    import dataclasses

    from zoo.errors import ZooError
    from zoo.support import attention_profile, save_attention_profile

    try:
        line = 22 if ns.line is None else ns.line
        p, drawn = attention_profile(ns.source, dataset=ns.dataset, split=ns.split, line=line,
                                     beam_size=ns.beam_size, alpha=ns.alpha,
                                     data_dir=ns.data_dir, progress=True)  # fmt: skip
    except (ValueError, ZooError) as e:
        print(f"zoo evaluate: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(p.text())
    out = ns.out_dir or str(Path("attention") / _sanitised(ns.source))
    paths = save_attention_profile(dataclasses.replace(p, source=ns.name or p.source), drawn, out)
    print(f"wrote {', '.join(str(path) for path in paths)}")
