"""Images as byte sequences for autoregressive pixel models, and the image data sets of the papers.

An image ``(H, W, C)`` uint8 becomes ``H * W * C`` sub-pixels in raster order with the channels of
each pixel together: R, G, B of pixel (0, 0), then of pixel (0, 1), ... (3,072 positions for a CIFAR-10
image), as in the Image Transformer and the Sparse and Routing Transformers' image experiments.
Every sub-pixel is a token 0..255; models predict all of them, so each sequence starts with a
start token ``BOS_ID = 256`` (image models have ``vocab_size = 257``; the start token is never a
target). Bits per dim = the mean negative log-likelihood per sub-pixel in nats / ln 2.

Data sets (``dataset=``), each read from ``<data_dir>/<name>/`` when ``data_dir`` is given (the
only place searched then; downloads go there too), else from ``$ZOO_DATA_DIR/<name>/`` or the
download cache, or, with ``download=True``, from its public home:

- ``cifar10``: 50,000 training and 10,000 test images, 32×32×3. The official release
  (``cifar-10-python.tar.gz`` from cs.toronto.edu) gives the exact pixels; the project's offline copy
  (``cifar10_jpg_{train,test}.zip``, JPEG quality ~75) is used when the release is absent. JPEG is
  lossy: bits/dim measured on it are not exactly comparable with published figures. As the papers,
  2,000 training images (a fixed random choice, ``seed``) are held out for validation.
- ``mnist`` / ``fashion_mnist``: 60,000 + 10,000 images, 28×28×1, the idx files
  (``train-images-idx3-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``); 5,000 training images held out.
  Fashion-MNIST is also found where Debian's ``dataset-fashion-mnist`` installs it (when no
  ``data_dir`` is given).
- ``imagenet32`` / ``imagenet64``: downsampled ImageNet (Oord et al. 2016; Chrabaszcz et al. 2017),
  the npz release unpacked under ``path`` (``train_data_batch_*.npz``, ``val_data.npz``: ``data``
  rows of R, G, B planes). Its validation set is the test split; 10,000 training images are held out.
  It cannot be downloaded automatically (the release needs a login at image-net.org).

Shape legend: N images, H height, W width, C channels, L = H * W * C.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from lightning import LightningDataModule
from PIL import Image
from rich.progress import track
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from zoo.config import require_positive
from zoo.data.sources import cache_dir, download_dir, fetch_file, find_file, not_found
from zoo.errors import ConfigError, DataNotFoundError
from zoo.files import sha256_file

__all__ = [
    "BOS_ID",
    "IMAGE_DATASETS",
    "ImageDataModule",
    "image_to_sequence",
    "load_images",
    "save_image_grid",
    "sequence_to_image",
]

BOS_ID = 256  # the start token before the first sub-pixel
IMAGE_DATASETS = {  # name -> (H, W, C), training images held out for validation
    "cifar10": ((32, 32, 3), 2000),
    "mnist": ((28, 28, 1), 5000),
    "fashion_mnist": ((28, 28, 1), 5000),
    "imagenet32": ((32, 32, 3), 10000),
    "imagenet64": ((64, 64, 3), 10000),
}
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
# sha256 of that release (as Keras and torchvision pin it): the release is a pickle, so no other
# file of that name is ever unpickled
CIFAR10_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
IDX_URLS = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/{name}",
    "fashion_mnist": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/{name}",
}
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def image_to_sequence(images: np.ndarray | Tensor) -> Tensor:
    """``(N, H, W, C)`` uint8 -> ``(N, H*W*C)`` int64 sub-pixels in raster order, channels innermost."""
    images = torch.as_tensor(np.asarray(images))
    if images.ndim != 4:
        raise ValueError(f"expected images of shape (N, H, W, C), got {tuple(images.shape)}")
    return images.reshape(images.shape[0], -1).long()


def sequence_to_image(sequences: Tensor, shape: Sequence[int]) -> Tensor:
    """``(N, L)`` sub-pixels (0..255) -> ``(N, H, W, C)`` uint8 images; the inverse of
    :func:`image_to_sequence`.

    Raises:
        ValueError: ``L`` is not ``H * W * C`` or a value is outside 0..255.
    """
    H, W, C = shape
    if sequences.shape[-1] != H * W * C:
        raise ValueError(f"sequences of length {sequences.shape[-1]} are not {H}x{W}x{C} images")
    if sequences.numel() and (int(sequences.min()) < 0 or int(sequences.max()) > 255):
        raise ValueError("sub-pixel values must be in 0..255 (the start token is not a pixel)")
    return sequences.reshape(-1, H, W, C).to(torch.uint8)


def save_image_grid(
    images: np.ndarray | Tensor, path: str | os.PathLike, nrow: int = 8, padding: int = 2,
    scale: int = 1,
) -> Path:  # fmt: skip
    """Write ``(N, H, W, C)`` uint8 images as one PNG grid of ``nrow`` images per row (white
    ``padding`` pixels between them), each pixel ``scale`` times enlarged; returns the path."""
    images = np.asarray(images.cpu() if isinstance(images, Tensor) else images)
    if images.ndim != 4 or images.dtype != np.uint8:
        raise ValueError(f"expected uint8 images (N, H, W, C), got {images.dtype} {images.shape}")
    N, H, W, C = images.shape
    ncol = min(nrow, N)
    nrows = -(-N // ncol)
    grid = np.full(
        (nrows * (H + padding) + padding, ncol * (W + padding) + padding, C), 255, np.uint8
    )
    for i, image in enumerate(images):
        r, c = divmod(i, ncol)
        y, x = padding + r * (H + padding), padding + c * (W + padding)
        grid[y : y + H, x : x + W] = image
    if scale > 1:
        grid = grid.repeat(scale, axis=0).repeat(scale, axis=1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(grid[..., 0] if C == 1 else grid).save(path)
    return path


# --- readers ---------------------------------------------------------------------------------------
def _read_idx(path: Path) -> np.ndarray:
    """An idx3 image file (optionally gzipped) -> ``(N, H, W, 1)`` uint8."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(data) < 16:
        raise DataNotFoundError(f"{path} is truncated: it has no idx header")
    magic, n, h, w = struct.unpack(">IIII", data[:16])
    if magic != 2051 or len(data) != 16 + n * h * w:
        raise DataNotFoundError(
            f"{path} is not an idx3 image file of {n} {h}x{w} images (magic {magic}, "
            f"{len(data)} bytes): it is truncated or another file; download it again."
        )
    return np.frombuffer(data, np.uint8, offset=16).reshape(n, h, w, 1)


def _read_cifar10_release(path: Path) -> dict[str, np.ndarray]:
    """The official python release: pickled batches of ``data`` rows (R, G, B planes of 32x32),
    unpickled only once the file's sha256 is the release's (:data:`CIFAR10_SHA256`).

    Raises:
        DataNotFoundError: another file (truncated, changed or planted) under the release's name.
    """
    actual = sha256_file(path)
    if actual != CIFAR10_SHA256:
        raise DataNotFoundError(
            f"{path} is not the CIFAR-10 python release (sha256 {actual}, the release's is "
            f"{CIFAR10_SHA256}); it was not unpickled: delete it and download it again."
        )
    batches: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    names = {f"cifar-10-batches-py/data_batch_{i}": "train" for i in range(1, 6)}
    names["cifar-10-batches-py/test_batch"] = "test"
    try:
        with tarfile.open(path, "r:gz") as tf:
            for member, split in names.items():
                f = tf.extractfile(member)
                if f is None:
                    raise KeyError(member)
                batch = pickle.load(f, encoding="bytes")  # the release is a pickle; see docstring
                batches[split].append(np.asarray(batch[b"data"], np.uint8))
    except (KeyError, tarfile.TarError, EOFError, pickle.UnpicklingError) as e:
        raise DataNotFoundError(
            f"{path} is not the complete CIFAR-10 python release ({type(e).__name__}: {e}); "
            "delete it and download it again."
        ) from None
    return {
        split: np.concatenate(rows).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy()
        for split, rows in batches.items()
    }


def _read_jpeg_zip(path: Path) -> np.ndarray:
    """All ``*.jpg`` of a zip, sorted by name (``<split>/<class>/NNNN.jpg``) -> ``(N, H, W, 3)``."""
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if n.endswith(".jpg"))
        images = [
            np.asarray(Image.open(io.BytesIO(z.read(n))).convert("RGB"))
            for n in track(names, description=f"decoding {path.name}", transient=True)
        ]
    return np.stack(images)


def _cached(source: Path, name: str, read) -> dict[str, np.ndarray]:
    """``read()`` (a dict of arrays) once per version of ``source`` (its size and mtime), kept as an
    .npz in the cache: decoding 60,000 JPEGs takes seconds, loading the arrays a fraction of one."""
    stat = source.stat()
    target = cache_dir() / "images" / f"{name}-{stat.st_size}-{int(stat.st_mtime)}.npz"
    if target.is_file():
        with np.load(target) as npz:
            return {k: npz[k] for k in npz.files}
    arrays = read()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(target)
    return arrays


def _cifar10(data_dir, download: bool) -> dict[str, np.ndarray]:
    release = find_file("cifar10", ["cifar-10-python.tar.gz"], data_dir)
    if release is not None:
        return _cached(release, "cifar10-release", lambda: _read_cifar10_release(release))
    zips = {s: find_file("cifar10", [f"cifar10_jpg_{s}.zip"], data_dir) for s in ("train", "test")}
    if all(zips.values()):
        return {s: _cached(p, f"cifar10-jpg-{s}", lambda p=p, s=s: {s: _read_jpeg_zip(p)})[s]
                for s, p in zips.items()}  # fmt: skip
    if not download:
        raise not_found("cifar10", ["cifar-10-python.tar.gz", "cifar10_jpg_{train,test}.zip"],
                         data_dir, f"The release is at {CIFAR10_URL}.")  # fmt: skip
    dest = download_dir(data_dir) / "cifar10" / "cifar-10-python.tar.gz"
    release = fetch_file(CIFAR10_URL, dest)
    return _cached(release, "cifar10-release", lambda: _read_cifar10_release(release))


def _idx(dataset: str, data_dir, download: bool, splits: Sequence[str]) -> dict[str, np.ndarray]:
    out = {}
    for split, stem in (("train", "train"), ("test", "t10k")):
        if split not in splits:
            continue
        name = f"{stem}-images-idx3-ubyte.gz"
        path = find_file(dataset, [name, name[:-3]], data_dir)
        debian = DEBIAN_FASHION_MNIST / name
        if path is None and dataset == "fashion_mnist" and not data_dir and debian.is_file():
            path = debian
        if path is None:
            if not download:
                hint = ("Debian: apt-get install dataset-fashion-mnist. "
                        if dataset == "fashion_mnist" else "")  # fmt: skip
                raise not_found(dataset, [name], data_dir, hint)
            dest = download_dir(data_dir) / dataset / name
            path = fetch_file(IDX_URLS[dataset].format(name=name), dest)
        out[split] = _read_idx(path)
    return out


def _imagenet(dataset: str, path) -> dict[str, np.ndarray]:
    size = int(dataset.removeprefix("imagenet"))
    if path is None:
        raise ConfigError(
            f"{dataset} needs path: the directory of the unpacked npz release (train_data_batch_*"
            ".npz and val_data.npz from image-net.org's 'Downsampled ImageNet' page)"
        )
    root = Path(path)
    train_files = sorted(
        root.glob("train_data_batch_*.npz"), key=lambda p: int(p.stem.split("_")[-1])
    )
    val = root / "val_data.npz"
    if not train_files or not val.is_file():
        raise DataNotFoundError(
            f"{root} must hold train_data_batch_<i>.npz and val_data.npz (the {size}x{size} npz "
            "release of Downsampled ImageNet)"
        )

    def read(files: list[Path]) -> np.ndarray:
        rows = []
        for f in files:
            try:
                rows.append(np.load(f)["data"])
            except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
                raise DataNotFoundError(f"{f} is not a readable npz with 'data' ({e})") from None
        data = np.concatenate(rows).astype(np.uint8, copy=False)
        if data.shape[1] != 3 * size * size:
            raise DataNotFoundError(
                f"{files[0]} has rows of {data.shape[1]} values, not 3x{size}x{size}: is it the "
                f"{size}x{size} release?"
            )
        return data.reshape(-1, 3, size, size).transpose(0, 2, 3, 1).copy()

    return {"train": read(train_files), "test": read([val])}


def load_images(
    dataset: str, *, data_dir: str | os.PathLike | None = None, path: str | os.PathLike | None = None,
    download: bool = False, splits: Sequence[str] = ("train", "test"),
) -> dict[str, np.ndarray]:  # fmt: skip
    """``{"train": (N, H, W, C), "test": (N', H, W, C)}`` uint8 images of ``dataset`` (the official
    train and test sets; the validation hold-out is :class:`ImageDataModule`'s). ``splits`` limits
    what MNIST and Fashion-MNIST read (the other sets come in one file per release).

    Raises:
        ConfigError: an unknown data set (or ImageNet without ``path``).
        DataNotFoundError: missing or damaged files (the message says where it looked and how to fix it).
    """
    if dataset not in IMAGE_DATASETS:
        raise ConfigError(
            f"unknown image data set {dataset!r}; choose one of {sorted(IMAGE_DATASETS)}"
        )
    if dataset == "cifar10":
        return _cifar10(data_dir, download)
    if dataset in IDX_URLS:
        return _idx(dataset, data_dir, download, splits)
    return _imagenet(dataset, path)


class ImageSequences(Dataset):
    """``(x, y)`` pairs for next-sub-pixel prediction: ``y`` = the image's ``L`` sub-pixels,
    ``x`` = ``BOS_ID`` followed by the first ``L - 1`` of them; both ``(L,)`` int64."""

    def __init__(self, images: np.ndarray) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        y = torch.from_numpy(self.images[i].reshape(-1).astype(np.int64))
        x = torch.cat([torch.tensor([BOS_ID]), y[:-1]])
        return x, y


class ImageDataModule(LightningDataModule):
    """Images as sub-pixel sequences for autoregressive models (see the module docstring).

    Args:
        dataset: ``cifar10``, ``mnist``, ``fashion_mnist``, ``imagenet32`` or ``imagenet64``.
        data_dir: directory holding ``<dataset>/``, the only one searched when given (default:
            ``$ZOO_DATA_DIR``, then the download cache).
        path: the npz release directory (ImageNet).
        val_size: training images held out for validation (default: the data set's, e.g. 2,000
            for CIFAR-10 as in the papers); a fixed random choice from ``seed``.
        batch_size: images per training batch.
        eval_batch_size: images per evaluation batch.
        limit_train: use only the first this many training images (quick runs).
        limit_eval: evaluate on a random subset of this many images of each of validation and test
            (quick runs on a CPU; drawn from ``seed``, so the same images every run). The official
            files are sorted by class, so the first batches would not be a fair sample.
        download: fetch missing files from the set's public home (as
            :class:`~zoo.data.ByteTextDataModule`).
        num_workers: DataLoader worker processes.
        seed: seed of the validation split and of ``limit_eval``'s subset.

    After ``setup``: ``splits`` (``train``, ``val``, ``test`` arrays ``(N, H, W, C)`` uint8),
    ``train_indices`` / ``val_indices`` (positions in the official training set), ``test_indices``
    (positions in the official test set), ``image_shape``
    ``(H, W, C)`` and ``seq_len`` ``H * W * C``. Batches are ``(x, y)`` int64 ``(B, L)``.
    """

    def __init__(
        self,
        dataset: str = "cifar10",
        data_dir: str | None = None,
        path: str | None = None,
        val_size: int | None = None,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        limit_train: int | None = None,
        limit_eval: int | None = None,
        download: bool = False,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        require_positive(
            "ImageDataModule", val_size=val_size, batch_size=batch_size,
            eval_batch_size=eval_batch_size, limit_train=limit_train, limit_eval=limit_eval,
        )  # fmt: skip
        require_positive("ImageDataModule", 0, num_workers=num_workers)
        if dataset not in IMAGE_DATASETS:
            raise ConfigError(
                f"unknown image data set {dataset!r}; choose one of {sorted(IMAGE_DATASETS)}"
            )
        self.save_hyperparameters()
        self.image_shape: tuple[int, int, int] = IMAGE_DATASETS[dataset][0]
        self.seq_len = int(np.prod(self.image_shape))
        self.splits: dict[str, np.ndarray] = {}

    def prepare_data(self) -> None:  # download once (rank 0) before setup runs on every process
        hp = self.hparams
        if hp.download:
            load_images(hp.dataset, data_dir=hp.data_dir, path=hp.path, download=True)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        hp = self.hparams
        images = load_images(hp.dataset, data_dir=hp.data_dir, path=hp.path, download=hp.download)
        train = images["train"]
        n_val = IMAGE_DATASETS[hp.dataset][1] if hp.val_size is None else hp.val_size
        if not 0 <= n_val < len(train):
            raise ConfigError(f"val_size={n_val} must be below the {len(train)} training images")
        rng = np.random.default_rng(hp.seed)
        order = rng.permutation(len(train))
        self.val_indices = np.sort(order[:n_val][: hp.limit_eval])  # None keeps them all
        self.train_indices = np.sort(order[n_val:])[: hp.limit_train]
        self.test_indices = np.sort(rng.permutation(len(images["test"]))[: hp.limit_eval])
        self.splits = {
            "train": train[self.train_indices],
            "val": train[self.val_indices],
            "test": images["test"][self.test_indices],
        }

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        hp = self.hparams
        size = hp.batch_size if shuffle else (hp.eval_batch_size or hp.batch_size)
        return DataLoader(ImageSequences(self.splits[split]), batch_size=size, shuffle=shuffle,
                          num_workers=hp.num_workers, drop_last=shuffle)  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
