"""How sparse a translation model's attention is: the mean number of source positions with
non-zero attention per target token (its support), on a Multi30k split, teacher-forced on the
references, with the model's own mapping (``model.attention_weights``). For the Transformer the
support is counted per head of every decoder layer's encoder-decoder attention and averaged (the
head-average of sparse heads would count the union of their supports).

    python experiments/lstm_attention/support_size.py CKPT [CKPT ...] --split test_2016_flickr

Prints, per checkpoint, the mean support, the mean source length it is out of, and their ratio.
"""

from __future__ import annotations

import argparse

import torch

from zoo.data.translation import BOS_ID, load_pairs
from zoo.loading import load_model


def _maps(model, src, tgt) -> list:
    """Every attention map of one sentence: the LSTM's one, or each head of each Transformer
    decoder layer."""
    layers = getattr(model, "decoder", None)
    if isinstance(layers, torch.nn.ModuleList):  # the Transformer: (H, T, S) per layer
        return [
            head
            for layer in range(len(layers))
            for head in model.attention_weights(src, tgt, layer, average_heads=False)[0]
        ]
    return [model.attention_weights(src, tgt)[0]]


@torch.no_grad()
def support(model, pairs, batch_size: int = 64) -> tuple[float, float]:
    """Mean support and mean source length (tokens, sink excluded) over the target tokens (and over
    heads and layers, for the Transformer)."""
    tok = model.tokenizer
    total = sources = count = 0.0
    for i in range(0, len(pairs), batch_size):
        for src_text, tgt_text in pairs[i : i + batch_size]:
            src = torch.tensor([tok.encode(src_text).ids])
            tgt = torch.tensor([[BOS_ID, *tok.encode(tgt_text).ids]])
            for w in _maps(model, src, tgt):  # (T, S [+ sink]) each
                w = w[:, : src.shape[1]]
                total += float((w > 0).sum())
                sources += src.shape[1] * w.shape[0]
                count += w.shape[0]
    return total / count, sources / count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--data-dir")
    ns = p.parse_args()
    pairs = load_pairs("multi30k", ns.split, "de", "en", data_dir=ns.data_dir)
    for ckpt in ns.checkpoints:
        model = load_model(ckpt, task="Translation").eval()
        mean, length = support(model, pairs)
        print(
            f"{ckpt}: mean support {mean:.2f} of {length:.2f} source tokens ({mean / length:.1%})"
        )


if __name__ == "__main__":
    main()
