"""One sentence through several translation models, their source x target attention side by side
(as the lecture's slides show softmax, sparsemax, fusedmax and constrained sparsemax): each model
translates the sentence (beam search) and its attention over the source, step by step, is drawn;
exact zeros stay white, so each mapping's support is visible.

    python experiments/lstm_attention/attention_maps.py CKPT [CKPT ...] \\
        --sentence "Ein Mann fährt Fahrrad." --out docs/img/attention_mappings.png
    python experiments/lstm_attention/attention_maps.py CKPT ... --line 7   # test2016 line 7 (0-based)

Each panel is titled by the model's mapping (``config.mapping``, or the Transformer's
``attention_mapping``). ``CKPT@MAPPING`` decodes an LSTM with another mapping than it was trained
with (e.g. a sparsemax model with fusedmax, whose prox is too slow on a CPU to train with here); the
panel then says so. The sink of a constrained mapping is a parameter, so only a constrained model
can be decoded with a constrained mapping.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from zoo.beam_search import translate_with_attention
from zoo.drawing import AttentionMap, draw_attention_maps
from zoo.support import mapping_of


def decode_with(model, mapping: str, fusedmax_lam: float | None = None):
    """The LSTM ``model`` attending with ``mapping`` instead of the one it was trained with
    (and fusedmax's ``λ = fusedmax_lam``, when given).

    Raises:
        ValueError: not an LSTM with attention, or a switch into or out of a constrained mapping
            (which needs the trained sink).
    """
    from zoo.attention.mappings import CONSTRAINED

    config = model.config
    if not hasattr(config, "mapping"):
        raise ValueError(f"{type(model).__name__} has no per-model mapping to switch")
    if (mapping in CONSTRAINED) != (config.mapping in CONSTRAINED):
        raise ValueError(
            f"cannot decode a {config.mapping} model with {mapping}: the constrained mappings "
            "attend to a trained sink; switch between unconstrained (or between constrained) ones"
        )
    model.trained_mapping = config.mapping
    lam = config.fusedmax_lam if fusedmax_lam is None else fusedmax_lam
    model.config = dataclasses.replace(config, mapping=mapping, fusedmax_lam=lam)
    return model


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
        title = mapping_of(model)
        if title == "fusedmax":
            title += f" (λ {model.config.fusedmax_lam:g})"
        if getattr(model, "trained_mapping", None):
            title += f"\n({model.trained_mapping}-trained)"
        maps.append(AttentionMap(title, weights, source, output))
        translations.append(text)
    return maps, translations


def main() -> None:
    from zoo.data.translation import load_pairs
    from zoo.errors import ZooError
    from zoo.loading import load_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "checkpoints",
        nargs="+",
        help="translation checkpoints (.ckpt or model folders); CKPT@MAPPING decodes with MAPPING",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--sentence", help="the source sentence")
    what.add_argument("--line", type=int, help="take this line (0-based) of --split instead")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--data-dir", help="default: $ZOO_DATA_DIR")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--fusedmax-lam", type=float, help="λ of the models decoded @fusedmax")
    p.add_argument("--columns", type=int, help="panels per row (default: all in one row)")
    p.add_argument("--out", required=True, help="the PNG to write")
    ns = p.parse_args()
    sentence, reference = ns.sentence, None
    if ns.line is not None:
        pairs = load_pairs("multi30k", ns.split, "de", "en", data_dir=ns.data_dir)
        if not 0 <= ns.line < len(pairs):
            p.error(f"--line {ns.line} is outside {ns.split}, which has {len(pairs)} lines")
        sentence, reference = pairs[ns.line]
    models = []
    try:
        for spec in ns.checkpoints:
            path, _, mapping = spec.partition("@")
            model = load_model(path, task="Translation").eval()
            models.append(decode_with(model, mapping, ns.fusedmax_lam) if mapping else model)
        maps, translations = attention_maps(models, sentence, ns.beam_size, ns.alpha)
    except (ValueError, ZooError) as e:
        p.error(str(e))
    title = sentence + (f"\nreference: {reference}" if reference else "")
    path = draw_attention_maps(maps, Path(ns.out), title=title, columns=ns.columns)
    for m, text in zip(maps, translations, strict=True):
        print(f"{m.title.replace(chr(10), ' '):>28}: {text}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
