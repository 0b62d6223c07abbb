"""``zoo translate``: translate text (stdin or ``--input``) with an encoder-decoder checkpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.commands.common import (
    DEVICE_HELP,
    checked_device,
    default_device,
    load_model,
    stdin_bytes,
)
from zoo.errors import ZooError

__all__ = ["translate_main"]


def translate_main(args: list[str]) -> None:
    parser = _parser()
    ns = parser.parse_args(args)

    from zoo.beam_search import check_decoding, decoding_settings, translate

    keys = ("decoding", "beam_size", "alpha", "max_len_a", "max_len_b")
    try:  # the flags given, at once: not after loading the model and reading stdin
        check_decoding(**{k: getattr(ns, k) for k in keys}, batch_size=ns.batch_size)
    except ValueError as e:
        parser.exit(2, f"zoo translate: error: {e}\n")
    if ns.input is not None and not Path(ns.input).is_file():
        parser.exit(2, f"zoo translate: error: {ns.input} does not exist\n")
    ns.device = checked_device(parser, default_device(ns.device))
    try:
        model = load_model(ns.checkpoint, ns.device, task="Translation")
    except ZooError as e:
        parser.exit(2, f"zoo translate: error: {e}\n")
    # flags left out resolve as in zoo.translate(): the model's registered decoding, else the paper's
    settings = decoding_settings(model, **{k: getattr(ns, k) for k in keys})
    ns.decoding, ns.beam_size, ns.alpha, ns.max_len_a, ns.max_len_b = (settings[k] for k in keys)
    raw = Path(ns.input).read_bytes() if ns.input else stdin_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        parser.exit(2, f"zoo translate: error: {ns.input or 'stdin'} is not UTF-8 text (byte "
                    f"0x{raw[e.start]:02x} on line {line}): the tokenizer takes UTF-8; convert it, "
                    "e.g. with iconv\n")  # fmt: skip
    sentences = text.splitlines()
    try:
        out = translate(
            model, sentences, decoding=ns.decoding, beam_size=ns.beam_size, alpha=ns.alpha,
            max_len_a=ns.max_len_a, max_len_b=ns.max_len_b, batch_size=ns.batch_size,
            progress=sys.stderr.isatty() or ns.input is not None,
        )  # fmt: skip
    except ValueError as e:
        parser.exit(2, f"zoo translate: error: {e}\n")
    if ns.attention_map:
        _draw_attention_map(parser, model, sentences, ns)
    result = "".join(line + "\n" for line in out)
    if ns.output:
        Path(ns.output).write_text(result, encoding="utf-8")
    else:
        sys.stdout.write(result)


def _draw_attention_map(parser, model, sentences: list[str], ns) -> None:
    """``zoo translate --attention-map``: the first non-empty sentence's attention, drawn."""
    from zoo.beam_search import translate_with_attention
    from zoo.drawing import AttentionMap, draw_attention_maps

    first = next((s for s in sentences if s.strip()), None)
    if first is None:
        parser.exit(2, "zoo translate: error: --attention-map needs a non-empty sentence\n")
    try:
        text, weights, source, output = translate_with_attention(
            model, first, decoding=ns.decoding, beam_size=ns.beam_size, alpha=ns.alpha,
            max_len_a=ns.max_len_a, max_len_b=ns.max_len_b,
        )  # fmt: skip
    except ValueError as e:
        parser.exit(2, f"zoo translate: error: --attention-map: {e}\n")
    mapping = getattr(model.config, "mapping", "softmax")
    path = draw_attention_maps(
        [AttentionMap(f"{type(model).__name__}, {mapping}", weights, source, output)],
        ns.attention_map, title=f"{first}\n-> {text}",
    )  # fmt: skip
    print(f"attention map of {first!r} written to {path}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoo translate",
        description="Translate text, one sentence per line, from stdin or --input to stdout or "
        "--output, with an encoder-decoder model (beam search as the Transformer paper).",
        epilog="Line N of the output is the translation of line N of the input; an empty or "
        "whitespace-only line translates to an empty line, without running the model (a model "
        "asked to translate nothing invents a sentence). The decoding flags left out resolve as "
        "zoo.translate() resolves them in Python: a published checkpoint's registered decoding, "
        "else beam 4, alpha 0.6, max length 1.0 * source + 50.",
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a .ckpt from `zoo fit` of a Translation recipe (or `zoo average`), a published "
        "checkpoint, a Hub repo id or a save_pretrained directory (with tokenizer.json)",
    )
    parser.add_argument("--input", help="a text file, one sentence per line (default: stdin)")
    parser.add_argument("--output", help="where to write the translations (default: stdout)")
    parser.add_argument("--decoding", choices=("beam", "greedy"),
                        help="default: a published checkpoint's (the decoding of its registered "
                        "test BLEU), else beam")  # fmt: skip
    parser.add_argument("--beam-size", type=int, help="default: the checkpoint's, else 4")
    parser.add_argument(
        "--alpha",
        type=float,
        help="GNMT length penalty exponent (default: the checkpoint's, else 0.6)",
    )
    parser.add_argument("--max-len-a", type=float, help="default: the checkpoint's, else 1.0")
    parser.add_argument(
        "--max-len-b",
        type=int,
        help="max length = a * source + b (default: the checkpoint's, else 50)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument("--device", help=DEVICE_HELP)
    parser.add_argument(
        "--attention-map",
        metavar="PNG",
        help="also draw the source x target attention of the first sentence into this PNG",
    )
    return parser
