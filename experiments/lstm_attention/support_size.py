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

from zoo.data.translation import load_pairs
from zoo.loading import load_model
from zoo.support import attention_support as support  # the library's; `zoo evaluate --attention`


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
