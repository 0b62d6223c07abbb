"""Image data: the image <-> sequence round trip, the data sets on the real files (CIFAR-10 JPEG, the
MNIST test set, Fashion-MNIST), the release formats on files the tests build, PNG grids, bits/dim."""

import io
import math
import pickle
import tarfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from zoo.data import images as image_data
from zoo.data.images import (
    BOS_ID,
    ImageDataModule,
    image_to_sequence,
    load_images,
    save_image_grid,
    sequence_to_image,
)
from zoo.errors import ConfigError, DataNotFoundError
from zoo.files import sha256_file
from zoo.metrics import BitsPerDim


def test_image_to_sequence_is_raster_order_with_channels_innermost_and_round_trips():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 4, 5, 3), dtype=np.uint8)
    seq = image_to_sequence(images)
    assert seq.shape == (3, 60) and seq.dtype == torch.int64
    assert seq[0, :3].tolist() == images[0, 0, 0].tolist()  # R, G, B of pixel (0, 0)
    assert seq[0, 3:6].tolist() == images[0, 0, 1].tolist()  # then pixel (0, 1)
    assert seq[1, 3 * 5 : 3 * 5 + 3].tolist() == images[1, 1, 0].tolist()  # row 1 starts at 15
    back = sequence_to_image(seq, (4, 5, 3))
    assert back.dtype == torch.uint8 and np.array_equal(back.numpy(), images)
    with pytest.raises(ValueError, match="not 4x5x1"):
        sequence_to_image(seq, (4, 5, 1))
    with pytest.raises(ValueError, match="0..255"):
        sequence_to_image(torch.full((1, 60), BOS_ID), (4, 5, 3))


def test_bits_per_dim_is_nats_over_ln2_per_sub_pixel():
    # two sub-pixels predicted with probabilities 1/2 and 1/4: 1 + 2 bits over 2 dims
    probs = torch.full((2, 256), 1e-9)
    probs[0, 10], probs[1, 20] = 0.5, 0.25
    probs[0, 11], probs[1, 21] = 0.5, 0.75
    nats = F.cross_entropy(probs.log(), torch.tensor([10, 20]), reduction="sum")
    assert float(nats) == pytest.approx(3 * math.log(2), rel=1e-6)
    metric = BitsPerDim()
    metric.update(nats, 2)
    assert float(metric.compute()) == pytest.approx(1.5, rel=1e-6)
    metric.update(torch.tensor(256 * math.log(256)), 256)  # uniform over 256 values: 8 bits/dim
    assert float(metric.compute()) == pytest.approx((3 + 8 * 256) / 258, rel=1e-6)


@pytest.fixture(scope="module")
def cifar10(data_dir):
    dm = ImageDataModule(dataset="cifar10", data_dir=str(data_dir), batch_size=4)
    dm.setup("fit")
    return dm


def test_cifar10_from_the_jpeg_copy_has_the_papers_split(cifar10):
    sizes = {k: v.shape for k, v in cifar10.splits.items()}
    assert sizes == {
        "train": (48000, 32, 32, 3),
        "val": (2000, 32, 32, 3),
        "test": (10000, 32, 32, 3),
    }
    assert cifar10.seq_len == 3072 and cifar10.splits["train"].dtype == np.uint8
    assert not set(cifar10.train_indices) & set(cifar10.val_indices)
    assert len(set(cifar10.train_indices) | set(cifar10.val_indices)) == 50000
    # real photographs: every value used, mean near CIFAR-10's ~120 (R, G, B 125, 123, 114)
    means = cifar10.splits["test"].reshape(-1, 3).mean(0)
    assert np.allclose(means, [125, 123, 114], atol=4), means
    x, y = next(iter(cifar10.train_dataloader()))
    assert x.shape == y.shape == (4, 3072) and x.dtype == torch.int64
    assert (x[:, 0] == BOS_ID).all() and torch.equal(x[:, 1:], y[:, :-1])
    assert int(y.max()) <= 255


def test_the_mnist_test_set_reads_from_the_real_idx_file(data_dir):
    test = load_images("mnist", data_dir=str(data_dir), splits=("test",))["test"]
    assert test.shape == (10000, 28, 28, 1) and test.dtype == np.uint8
    assert 33.0 < test.mean() < 34.5  # MNIST's test mean intensity is 0.1325 * 255 = 33.8
    with pytest.raises(DataNotFoundError, match="train-images-idx3-ubyte.gz"):
        load_images("mnist", data_dir=str(data_dir))  # the shared copy has no training images


def test_fashion_mnist_from_the_debian_package(monkeypatch):
    if not (image_data.DEBIAN_FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file():
        pytest.fail("install Fashion-MNIST: apt-get install dataset-fashion-mnist (make test does)")
    monkeypatch.delenv("ZOO_DATA_DIR")  # no data directory: the Debian package's copy is found
    dm = ImageDataModule(dataset="fashion_mnist")
    dm.setup("fit")
    assert {k: v.shape for k, v in dm.splits.items()} == {
        "train": (55000, 28, 28, 1), "val": (5000, 28, 28, 1), "test": (10000, 28, 28, 1)
    }  # fmt: skip
    assert dm.seq_len == 784


def _cifar_release(path, images_by_batch):
    with tarfile.open(path, "w:gz") as tf:
        for name, images in images_by_batch.items():
            planes = images.transpose(0, 3, 1, 2).reshape(len(images), -1)  # R, G, B planes
            data = pickle.dumps({b"data": planes, b"labels": [0] * len(images)})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def _release_images(seed=0):
    rng = np.random.default_rng(seed)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    return {n: rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8) for n in names}


def test_the_official_cifar10_release_is_parsed_and_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ZOO_DATA_DIR")
    batches = _release_images()
    (tmp_path / "cs.toronto.edu").mkdir()
    release = tmp_path / "cs.toronto.edu" / "cifar-10-python.tar.gz"
    _cifar_release(release, batches)
    with pytest.raises(DataNotFoundError, match="cifar-10-python.tar.gz.*download=True"):
        load_images("cifar10")
    monkeypatch.setattr(image_data, "CIFAR10_URL", release.as_uri())
    monkeypatch.setattr(image_data, "CIFAR10_SHA256", sha256_file(release))  # our stand-in
    got = load_images("cifar10", download=True)
    train = np.concatenate([batches[f"data_batch_{i}"] for i in range(1, 6)])
    assert np.array_equal(got["train"], train) and np.array_equal(
        got["test"], batches["test_batch"]
    )
    release.unlink()
    assert np.array_equal(load_images("cifar10")["train"], train)  # from the cache now


def test_a_damaged_release_or_idx_file_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cifar10").mkdir()
    _cifar_release(
        tmp_path / "cifar10" / "cifar-10-python.tar.gz",
        {"data_batch_1": np.zeros((1, 32, 32, 3), np.uint8)},
    )
    with pytest.raises(DataNotFoundError, match="not the CIFAR-10 python release .sha256"):
        load_images("cifar10", data_dir=str(tmp_path))
    release = tmp_path / "cifar10" / "cifar-10-python.tar.gz"
    monkeypatch.setattr(image_data, "CIFAR10_SHA256", sha256_file(release))  # passes the check
    with pytest.raises(DataNotFoundError, match="not the complete CIFAR-10 python release"):
        load_images("cifar10", data_dir=str(tmp_path))
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03" + b"\x00" * 40)
    with pytest.raises(DataNotFoundError, match="not an idx3 image file"):
        load_images("mnist", data_dir=str(tmp_path), splits=("test",))
    with pytest.raises(ConfigError, match="unknown image data set 'cifar100'"):
        ImageDataModule(dataset="cifar100")


def test_downsampled_imagenet_npz_release_is_parsed(tmp_path):
    rng = np.random.default_rng(0)
    images = {f"train_data_batch_{i}": rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
              for i in (1, 2, 10)}  # fmt: skip
    images["val_data"] = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    for name, x in images.items():  # rows of R, G, B planes, as the release stores them
        np.savez(tmp_path / f"{name}.npz", data=x.transpose(0, 3, 1, 2).reshape(len(x), -1),
                 labels=np.ones(len(x)))  # fmt: skip
    got = load_images("imagenet32", path=str(tmp_path))
    order = [images[f"train_data_batch_{i}"] for i in (1, 2, 10)]  # numeric, not text, order
    assert np.array_equal(got["train"], np.concatenate(order))
    assert np.array_equal(got["test"], images["val_data"])
    with pytest.raises(DataNotFoundError, match="not 3x64x64"):
        load_images("imagenet64", path=str(tmp_path))
    with pytest.raises(ConfigError, match="needs path"):
        load_images("imagenet32")


def test_image_grid_png_has_the_layout_and_the_pixels(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 4, 6, 3), dtype=np.uint8)
    path = save_image_grid(images, tmp_path / "grid.png", nrow=3, padding=1)
    grid = np.asarray(Image.open(path))
    assert grid.shape == (2 * (4 + 1) + 1, 3 * (6 + 1) + 1, 3) and grid.dtype == np.uint8
    assert np.array_equal(grid[1:5, 1:7], images[0])
    assert np.array_equal(grid[6:10, 8:14], images[4])  # second row, second column
    assert (grid[6:10, 15:21] == 255).all()  # the empty sixth cell
    gray = save_image_grid(images[..., :1], tmp_path / "gray.png", nrow=5, scale=2)
    assert Image.open(gray).mode == "L" and Image.open(gray).size == (2 * (5 * 8 + 2), 2 * 8)
