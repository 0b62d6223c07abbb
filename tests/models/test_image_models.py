"""Image models: the Image Transformer's gathered local attention and coordinates, the image presets
of the three families, image sampling (`zoo sample`), and ImageLM's bits/dim.

Causality, cached decoding, backward and save/load of every image preset are in test_models.py.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning import Trainer
from PIL import Image

import zoo
from zoo.attention import functional
from zoo.attention.gathered import GatheredPlan, gathered_attention, query_blocks
from zoo.attention.patterns import local_1d, local_2d
from zoo.cli import main
from zoo.data.images import BOS_ID, ImageDataModule
from zoo.errors import ConfigError
from zoo.generation import sample_images
from zoo.models import ImageTransformerConfig, ImageTransformerLM
from zoo.models.image_transformer import coordinate_encodings
from zoo.tasks import ImageLM

PATTERNS = [
    (local_1d(8, 5), 45),  # a ragged last block
    (local_1d(16, 0), 40),  # no memory: block-diagonal causal
    (local_2d(12, 2, 5, 1, 3), 50),  # blocks that do not divide the width, a ragged last row
    (local_2d(9, 3, 3, 2, 3), 81),  # 3x3 RGB pixels a row
]


@pytest.mark.parametrize("pattern, T", PATTERNS, ids=lambda p: getattr(p, "name", p))
def test_query_blocks_partition_the_positions_and_hold_every_allowed_key(pattern, T):
    q_index, k_index = query_blocks(pattern, T)
    real = q_index[q_index >= 0]
    assert sorted(real.tolist()) == list(range(T))  # every position in exactly one block
    mask = pattern.mask(T)
    for qs, ks in zip(q_index, k_index, strict=True):
        for i in qs[qs >= 0].tolist():
            wanted = set(mask[i].nonzero().flatten().tolist())
            assert wanted <= set(ks.tolist()), (i, wanted - set(ks.tolist()))


@pytest.mark.parametrize("pattern, T", PATTERNS, ids=lambda p: getattr(p, "name", p))
def test_gathered_attention_equals_dense_masked_attention_with_gradients(pattern, T):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g, requires_grad=True) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=pattern.mask(T))
    got = gathered_attention(q, k, v, GatheredPlan.build(pattern, T, q.device))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    grad = torch.randn(got.shape, generator=g)
    for a, b in zip(
        torch.autograd.grad(got, (q, k, v), grad),
        torch.autograd.grad(want, (q, k, v), grad),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_the_image_transformer_attends_through_its_pattern_in_every_layer():
    config = ImageTransformerConfig(
        max_seq_len=48, image_shape=(4, 4, 3), d_model=16, n_layers=2, n_heads=2, d_ff=32,
        dropout=0.0, attention="local_1d", query_block=8, memory=4, block_size=4,
    )  # fmt: skip
    torch.manual_seed(0)
    model = ImageTransformerLM(config).eval()
    x = torch.randn(1, 48, 16)
    for block in model.blocks:
        attn = block.attention
        assert [g.pattern.name for g in attn.groups] == ["local_1d(query_block=8, memory=4)"]
        q, k, v = attn.split_heads(x)
        mask = local_1d(8, 4).mask(48)
        want = attn.merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        torch.testing.assert_close(attn(x), want, rtol=1e-5, atol=1e-5)
    assert functional.route(attn.groups[0].pattern) == "gathered"
    assert any(isinstance(p, GatheredPlan) for p in functional._PLANS.values())  # built, kept
    assert config.replace(attention="local_2d").pattern().name.startswith("local_2d(width=12,")
    with pytest.raises(ValueError, match="not block-local"):
        GatheredPlan.build(zoo.attention.patterns.causal(), 8, torch.device("cpu"))


def test_coordinates_are_row_and_column_sinusoids():
    pe = coordinate_encodings(3072, 96, 64)
    assert pe.shape == (3072, 64)
    t = 5 * 96 + 40  # row 5, sub-pixel 40 of its row (pixel 13, green)
    half = 32
    assert pe[t, 0] == pytest.approx(math.sin(5)) and pe[t, 1] == pytest.approx(math.cos(5))
    assert pe[t, half] == pytest.approx(math.sin(40)) and pe[t, half + 1] == pytest.approx(
        math.cos(40)
    )
    assert torch.equal(pe[t, half:], pe[40, half:])  # same column, another row
    assert torch.equal(pe[t, :half], pe[5 * 96, :half])  # same row, another column


def test_rotary_positions_turn_queries_and_keys_and_decode_like_the_full_forward():
    """position="rotary": no position table, every layer's attention rotates, and decoding one
    sub-pixel at a time with the cache gives the full forward's logits."""
    from zoo import create_model

    model = create_model("image_transformer_tiny", position="rotary").eval()
    assert not hasattr(model, "pos_table")
    assert all(b.attention.rotary is not None for b in model.blocks)
    ids = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids).logits
        cache = model.init_cache(2)
        steps = torch.cat(
            [model(ids[:, i : i + 1], past_key_values=cache).logits for i in range(48)], 1
        )
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"image_shape": (32, 32, 3), "max_seq_len": 1024}, "more than max_seq_len"),
        ({"image_shape": (32, 32)}, "must be \\(H, W, C\\)"),
        ({"d_model": 66, "n_heads": 2}, "multiple of 4"),
        ({"attention": "local_3d"}, "unknown attention .local_3d."),
        ({"query_block": 0, "attention": "local_1d"}, "query_block"),
    ],
)
def test_bad_image_transformer_configs_raise(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ImageTransformerConfig(**overrides)


def test_cifar10_presets_fit_cifar10_images():
    for name in zoo.list_models("*cifar10*"):
        config = zoo.models.registry.get_preset(name).config
        assert config.vocab_size == BOS_ID + 1 and config.max_seq_len == 3072, name
    sparse = zoo.models.registry.get_preset("sparse_transformer_cifar10").config
    assert sparse.position_dims == (32, 32, 3) and sparse.stride == 96  # one row of sub-pixels
    routing = zoo.create_model("routing_transformer_cifar10")
    routes = [b.attention.n_routing > 0 for b in routing.blocks]
    assert routes == [False, False, True, True]  # routing layers at the top


def tiny_image_model(shape=(4, 4, 3)) -> ImageTransformerLM:
    torch.manual_seed(0)
    return ImageTransformerLM(
        ImageTransformerConfig(
            max_seq_len=math.prod(shape),
            image_shape=shape,
            d_model=16,
            n_layers=1,
            n_heads=2,
            d_ff=32,
            dropout=0.0,
            query_height=2,
            query_width=shape[1] * shape[2],
            memory_height=2,
            memory_width=0,
            block_size=4,
        )  # fmt: skip
    ).eval()


def test_samples_and_completions_are_images_that_keep_the_given_rows():
    model = tiny_image_model()
    with torch.no_grad():  # make the start token the most likely output, so suppressing it shows
        model.lm_head.weight[BOS_ID] += 5.0
    g = torch.Generator().manual_seed(0)
    samples = sample_images(model, (4, 4, 3), 5, generator=g)
    assert samples.shape == (5, 4, 4, 3) and samples.dtype == torch.uint8
    assert len(torch.unique(samples)) > 20  # sampled, not a constant
    originals = np.random.default_rng(0).integers(0, 256, (3, 4, 4, 3), dtype=np.uint8)
    done = sample_images(model, (4, 4, 3), prompt_images=originals, prompt_rows=2, generator=g)
    assert np.array_equal(done[:, :2].numpy(), originals[:, :2])
    assert not np.array_equal(done[:, 2:].numpy(), originals[:, 2:])
    greedy = sample_images(model, (4, 4, 3), 2, temperature=0)
    assert torch.equal(greedy[0], greedy[1])


def test_sampling_refuses_what_is_not_an_image_model():
    with pytest.raises(ValueError, match="vocab_size=257"):
        sample_images(zoo.create_model("transformer_lm_tiny"), (4, 4, 3), 1)
    with pytest.raises(ValueError, match="models 4x4x3 images, not 32x32x3"):  # its 2-D positions
        sample_images(tiny_image_model(), (32, 32, 3), 1)
    with pytest.raises(ValueError, match="prompt_rows"):
        images = np.zeros((1, 4, 4, 3), np.uint8)
        sample_images(tiny_image_model(), (4, 4, 3), prompt_images=images, prompt_rows=4)


def test_zoo_sample_writes_sample_and_completion_grids(tmp_path, data_dir, capsys):
    model = tiny_image_model((28, 28, 1))
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "grid.png"
    main([
        "sample", "--checkpoint", str(tmp_path / "model"), "--out", str(out), "--dataset",
        "mnist", "--data-dir", str(data_dir), "--num-samples", "3", "--completions", "2",
        "--scale", "1", "--temperature", "0.8",
    ])  # fmt: skip
    with Image.open(out) as im:
        assert im.mode == "L" and im.size == (3 * 28 + 4 * 2, 28 + 2 * 2)
    with Image.open(tmp_path / "grid_completions.png") as im:
        grid = np.asarray(im)
    assert grid.shape == (3 * 28 + 4 * 2, 2 * 28 + 3 * 2)  # given / completed / original
    given, completed, original = (grid[2 + r * 30 : 30 + r * 30, 2:30] for r in range(3))
    assert np.array_equal(given[:14], original[:14]) and np.array_equal(completed[:14], given[:14])
    assert not given[14:].any() and original[14:].any()  # the bottom half was hidden
    assert "wrote" in capsys.readouterr().out


def test_image_lm_reports_bits_per_dim_on_validation_and_test(tmp_path):
    dm = ImageDataModule(dataset="fashion_mnist", batch_size=2, limit_train=4, limit_eval=4)
    task = ImageLM(
        model="image_transformer_tiny",
        model_config={"image_shape": (28, 28, 1), "max_seq_len": 784, "query_width": 28},
        warmup_steps=1,
    )
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(task, dm)
    val = trainer.callback_metrics
    assert {"train/bpd", "val/bpd", "val/loss"} <= set(val) and "val/bpb" not in val
    assert float(val["val/bpd"]) == pytest.approx(float(val["val/loss"]) / math.log(2), rel=1e-5)
    assert 4.0 < float(val["val/bpd"]) < 9.0  # near uniform (8 bits/dim) after 2 steps
    (result,) = trainer.test(task, dm, verbose=False)
    assert set(result) == {"test/bpd", "test/loss"}
    assert len(dm.splits["val"]) == len(dm.splits["test"]) == 4


def test_limit_eval_draws_random_images_from_the_class_sorted_files(data_dir):
    dm = ImageDataModule(dataset="cifar10", data_dir=str(data_dir), limit_eval=500)
    dm.setup("test")
    assert len(dm.splits["val"]) == len(dm.splits["test"]) == 500
    # the files are sorted by class (1,000 test images each): a fair sample spans the classes
    assert np.bincount(dm.test_indices // 1000, minlength=10).min() >= 25
    assert np.bincount(dm.val_indices // 5000, minlength=10).min() >= 25
    full = ImageDataModule(dataset="cifar10", data_dir=str(data_dir))
    full.setup("test")
    assert set(dm.val_indices) <= set(full.val_indices)  # the same hold-out, a subset of it
