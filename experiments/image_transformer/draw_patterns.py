"""Draw the CIFAR-10 presets' attention over a real test image (docs/img/image_patterns.png).

    python experiments/image_transformer/draw_patterns.py --out docs/img/image_patterns.png

Panels: the Image Transformer's local 1-D and 2-D attention, the Sparse Transformer's strided A1
and A2 (stride 96: one row of sub-pixels) and dense causal attention, for one query pixel.
"""

from __future__ import annotations

import argparse

from zoo.attention.patterns import get_pattern
from zoo.data.images import load_images
from zoo.drawing import draw_patterns_on_image
from zoo.models.registry import get_preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="directory with cifar10/ (default $ZOO_DATA_DIR)")
    parser.add_argument("--out", default="docs/img/image_patterns.png")
    parser.add_argument("--image", type=int, default=7003, help="test image index")
    parser.add_argument("--row", type=int, default=20)
    parser.add_argument("--column", type=int, default=14)
    ns = parser.parse_args()
    image = load_images("cifar10", data_dir=ns.data_dir, splits=("test",))["test"][ns.image]
    stride = get_preset("sparse_transformer_cifar10").config.stride
    patterns = {
        "Image Transformer 1-D": get_preset("image_transformer_cifar10_1d").config.pattern(),
        "Image Transformer 2-D": get_preset("image_transformer_cifar10_2d").config.pattern(),
        "strided A1 (row before)": get_pattern("strided", stride=stride, component=1),
        "strided A2 (column)": get_pattern("strided", stride=stride, component=2),
        "dense causal": get_pattern("causal"),
    }
    print(f"wrote {draw_patterns_on_image(patterns, image, (ns.row, ns.column), ns.out)}")


if __name__ == "__main__":
    main()
