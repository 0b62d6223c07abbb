"""``zoo generate`` (text) and ``zoo sample`` (images) from any checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.commands.common import (
    DEVICE_HELP,
    checked_device,
    default_device,
    load_model,
    prompt_bytes,
)
from zoo.errors import ZooError

__all__ = ["generate_main", "sample_main"]


def generate_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo generate", description="Sample text from a trained model."
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a .ckpt from `zoo fit`, a published checkpoint (`zoo list`), a Hub repo id or a "
        "save_pretrained directory",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", default="\n", help="text to continue (default: a newline); "
                        "any bytes, UTF-8 or not: the models are byte-level")  # fmt: skip
    source.add_argument("--prompt-file", help="continue the bytes of this file instead")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="tokens to add (default "
                        "256); --num-samples x (prompt + these) at most 10,000,000")  # fmt: skip
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy; at most 100")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the K most likely "
                        "tokens (K >= the vocabulary: all of them)")  # fmt: skip
    parser.add_argument("--top-p", type=float, default=None, help="nucleus mass in (0, 1]; the "
                        "most likely token is always kept, so a tiny value is greedy")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="0 to 2**64 - 1 (default 0)")
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument(
        "--truncate-prompt",
        action="store_true",
        help="keep the last max_seq_len tokens of a long prompt instead of failing",
    )
    parser.add_argument("--compile", action="store_true", help="compile the one-token step "
                        "(torch.compile): the same tokens, faster after a compile of seconds; "
                        "pays off for long samples")  # fmt: skip
    parser.add_argument("--device", help=DEVICE_HELP)
    ns = parser.parse_args(args)

    import torch

    from zoo.data.text import ByteTokenizer
    from zoo.generation import check_generation, check_sampling, generate, seeded_generator

    try:  # the flags given, at once: not after loading the model
        check_sampling(temperature=ns.temperature, top_k=ns.top_k, top_p=ns.top_p)
        generator = seeded_generator(ns.seed)  # on the CPU: checked before --device is
    except ZooError as e:
        parser.exit(2, f"zoo generate: error: {e}\n")
    if ns.prompt_file is not None:
        if not Path(ns.prompt_file).is_file():
            parser.exit(2, f"zoo generate: error: --prompt-file {ns.prompt_file} does not exist\n")
        data = Path(ns.prompt_file).read_bytes()
    else:
        data = prompt_bytes(ns.prompt)
    if not data:
        parser.exit(2, "zoo generate: error: the prompt is empty: give at least one byte to "
                    "continue (the default prompt is a newline)\n")  # fmt: skip
    if ns.num_samples < 1 or ns.max_new_tokens < 0:
        parser.exit(2, "zoo generate: error: --num-samples must be >= 1 and --max-new-tokens "
                    f">= 0, got {ns.num_samples} and {ns.max_new_tokens}\n")  # fmt: skip
    ns.device = checked_device(parser, default_device(ns.device))
    try:
        model = load_model(ns.checkpoint, ns.device)
    except ZooError as e:
        parser.exit(2, f"zoo generate: error: {e}\n")
    tokenizer = ByteTokenizer()
    try:  # before num_samples copies of the prompt are built
        check_generation(model, ns.num_samples, len(data), ns.max_new_tokens,
                         truncate_prompt=ns.truncate_prompt)  # fmt: skip
    except ValueError as e:
        parser.exit(2, f"zoo generate: error: {e}\n")
    prompt = torch.tensor([list(data)] * ns.num_samples, device=ns.device)
    generator = seeded_generator(ns.seed, ns.device)
    try:
        out = generate(model, prompt, ns.max_new_tokens, temperature=ns.temperature,
                       top_k=ns.top_k, top_p=ns.top_p, generator=generator,
                       truncate_prompt=ns.truncate_prompt, compile=ns.compile)  # fmt: skip
    except ValueError as e:
        parser.exit(2, f"zoo generate: error: {e}\n")
    for i, row in enumerate(out):
        if ns.num_samples > 1:
            print(f"--- sample {i} ---")
        print(tokenizer.decode(row))


def sample_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo sample",
        description="Sample images from an image model: unconditional samples, and completions of "
        "the top half of test images, written as PNG grids.",
    )
    parser.add_argument("--checkpoint", required=True, help="a .ckpt from `zoo fit` (ImageLM) or "
                        "anything zoo.from_pretrained takes")  # fmt: skip
    parser.add_argument("--out", required=True, help="PNG of the unconditional samples; the "
                        "completions go to <stem>_completions.png")  # fmt: skip
    parser.add_argument("--num-samples", type=int, default=8, help="unconditional samples")
    parser.add_argument("--completions", type=int, default=8, help="test images completed "
                        "(0: none); rows: top half given, completion, original")  # fmt: skip
    parser.add_argument("--dataset", help="image shape and test images (default: the model's "
                        "data set, else cifar10)")  # fmt: skip
    parser.add_argument("--data-dir", help="directory with <dataset>/ (default $ZOO_DATA_DIR)")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="samples and the test images chosen "
                        "(0 to 2**64 - 1)")  # fmt: skip
    parser.add_argument("--scale", type=int, default=2, help="pixels per image pixel in the PNG")
    parser.add_argument("--device", help=DEVICE_HELP)
    ns = parser.parse_args(args)

    import numpy as np

    from zoo.data.images import IMAGE_DATASETS, load_images, save_image_grid
    from zoo.generation import check_sampling, sample_images, seeded_generator

    try:  # the flags given, at once: not after loading the model
        check_sampling(temperature=ns.temperature, top_k=ns.top_k)
        seeded_generator(ns.seed)
    except ZooError as e:
        parser.exit(2, f"zoo sample: error: {e}\n")
    if ns.dataset is not None and ns.dataset not in IMAGE_DATASETS:
        parser.exit(2, f"zoo sample: error: --dataset must be one of {sorted(IMAGE_DATASETS)}\n")
    if ns.num_samples < 0 or ns.completions < 0 or ns.num_samples + ns.completions == 0:
        parser.exit(2, "zoo sample: error: --num-samples and --completions must be >= 0, and "
                    "one of them > 0\n")  # fmt: skip
    ns.device = checked_device(parser, default_device(ns.device))
    model = load_model(ns.checkpoint, ns.device, task="ImageLM")
    ns.dataset = ns.dataset or _dataset_of(model)
    own = getattr(model.config, "image_shape", None)
    shape = IMAGE_DATASETS[ns.dataset][0] if ns.dataset else tuple(own)
    _check_png_size(parser, shape, ns)
    originals = None
    if ns.completions:  # checked before anything is sampled, so a bad flag costs nothing
        h, w, c = shape
        if ns.dataset is None:
            parser.exit(2, f"zoo sample: error: --completions needs test images of the "
                        f"model's {h}x{w}x{c} shape, and no image data set has them: use "
                        "--completions 0\n")  # fmt: skip
        if own is not None and tuple(own) != tuple(shape):
            parser.exit(2, f"zoo sample: error: the model completes {own[0]}x{own[1]}x{own[2]} "
                        f"images, and {ns.dataset}'s are {h}x{w}x{c}: choose a --dataset of its "
                        "shape\n")  # fmt: skip
        test = load_images(ns.dataset, data_dir=ns.data_dir, splits=("test",))["test"]
        if ns.completions > len(test):
            parser.exit(2, f"zoo sample: error: --completions {ns.completions}: the test split "
                        f"of {ns.dataset} has {len(test)} images\n")  # fmt: skip
        chosen = np.sort(np.random.default_rng(ns.seed).choice(len(test), ns.completions, False))
        originals = test[chosen]
    generator = seeded_generator(ns.seed, ns.device)
    options = dict(temperature=ns.temperature, top_k=ns.top_k, generator=generator, progress=True)
    try:
        if ns.num_samples:
            samples = sample_images(model, shape, ns.num_samples, **options)
            print(f"wrote {save_image_grid(samples, ns.out, nrow=ns.num_samples, scale=ns.scale)}")
        if originals is not None:
            half = shape[0] // 2
            done = sample_images(model, shape, prompt_images=originals, prompt_rows=half, **options)
            given = originals.copy()
            given[:, half:] = 0
            grid = np.concatenate([given, done.numpy(), originals])
            path = Path(ns.out).with_name(Path(ns.out).stem + "_completions.png")
            print(f"wrote {save_image_grid(grid, path, nrow=ns.completions, scale=ns.scale)}")
    except ValueError as e:
        parser.exit(2, f"zoo sample: error: {e}\n")


def _check_png_size(parser: argparse.ArgumentParser, shape, ns: argparse.Namespace) -> None:
    """Exit 2 if ``--scale`` is below 1, or a grid ``zoo sample`` would write has more pixels than
    Pillow opens (``Image.MAX_IMAGE_PIXELS``, its guard against decompression bombs): a huge
    ``--scale``."""
    from PIL import Image

    if ns.scale < 1:
        parser.exit(2, f"zoo sample: error: --scale is {ns.scale}: draw each image pixel as at "
                    "least 1 PNG pixel\n")  # fmt: skip
    h, w, _ = shape
    grids = [(1, ns.num_samples)] if ns.num_samples else []  # (rows, columns) of images
    grids += [(3, ns.completions)] if ns.completions else []
    for rows, columns in grids:
        pixels = (rows * (h + 2) + 2) * (columns * (w + 2) + 2) * ns.scale**2  # 2-pixel padding
        if pixels > Image.MAX_IMAGE_PIXELS:
            parser.exit(2, f"zoo sample: error: a grid of {rows * columns:,} image(s) at --scale "
                        f"{ns.scale} is a PNG of {pixels:,} pixels, more than the "
                        f"{Image.MAX_IMAGE_PIXELS:,} Pillow opens: use a smaller --scale, or "
                        "fewer --num-samples / --completions\n")  # fmt: skip


def _dataset_of(model) -> str | None:
    """The image data set whose images ``model`` has the shape of (the first listed, so cifar10
    before imagenet32), for a model that fixes its shape (the Image Transformer; ``None`` if no
    data set has its shape); else cifar10."""
    from zoo.data.images import IMAGE_DATASETS

    own = getattr(model.config, "image_shape", None)
    if own is not None:
        for name, (shape, _) in IMAGE_DATASETS.items():
            if tuple(shape) == tuple(own):
                return name
        return None
    return "cifar10"
