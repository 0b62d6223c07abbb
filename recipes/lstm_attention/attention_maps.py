"""One sentence through several translation models, their source x target attention side by side
(as the lecture's slides show softmax, sparsemax, fusedmax and constrained sparsemax): each model
translates the sentence (beam search) and its attention over the source, step by step, is drawn;
exact zeros stay white, so each mapping's support is visible.

    python recipes/lstm_attention/attention_maps.py CKPT [CKPT ...] \\
        --sentence "Ein Mann fährt Fahrrad." --out docs/img/attention_mappings.png
    python recipes/lstm_attention/attention_maps.py CKPT ... --line 7   # test2016 line 7 (0-based)

Each panel is titled by the model's mapping (``config.mapping``, or the Transformer's
``attention_mapping``) and shows its translation underneath.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.beam_search import translate_with_attention
from zoo.drawing import AttentionMap, draw_attention_maps


def mapping_of(model) -> str:
    """The probability mapping a translation model attends with (``"softmax"`` if it names none)."""
    config = model.config
    return getattr(config, "mapping", None) or getattr(config, "attention_mapping", "softmax")


def attention_maps(models, sentence: str, beam_size: int = 4, alpha: float = 0.6):
    """``(maps, translations)``: one :class:`AttentionMap` per model for ``sentence``, titled by its
    mapping, and the model's translation.

    Raises:
        ValueError: from :func:`translate_with_attention` (empty or too long sentence, a model
            without ``attention_weights``).
    """
    maps, translations = [], []
    for model in models:
        text, weights, source, output = translate_with_attention(
            model, sentence, beam_size=beam_size, alpha=alpha
        )
        maps.append(AttentionMap(mapping_of(model), weights, source, output))
        translations.append(text)
    return maps, translations


def main() -> None:
    from zoo.cli import load_model
    from zoo.data.translation import load_pairs

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "checkpoints", nargs="+", help="translation checkpoints (.ckpt or model folders)"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--sentence", help="the source sentence")
    what.add_argument("--line", type=int, help="take this line (0-based) of --split instead")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--data-dir", help="default: $ZOO_DATA_DIR")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--out", required=True, help="the PNG to write")
    ns = p.parse_args()
    sentence, reference = ns.sentence, None
    if ns.line is not None:
        pairs = load_pairs("multi30k", ns.split, "de", "en", data_dir=ns.data_dir)
        if not 0 <= ns.line < len(pairs):
            p.error(f"--line {ns.line} is outside {ns.split}, which has {len(pairs)} lines")
        sentence, reference = pairs[ns.line]
    models = [load_model(c, task="Translation").eval() for c in ns.checkpoints]
    try:
        maps, translations = attention_maps(models, sentence, ns.beam_size, ns.alpha)
    except ValueError as e:
        p.error(str(e))
    title = sentence + (f"\nreference: {reference}" if reference else "")
    path = draw_attention_maps(maps, Path(ns.out), title=title)
    for m, text in zip(maps, translations, strict=True):
        print(f"{m.title:>10}: {text}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
