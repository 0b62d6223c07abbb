import csv
import gzip
import zipfile

import numpy as np
import pytest
import torch

from zoo.data.byte_corpora import (
    PG19MINI_TEST,
    PG19MINI_TRAIN,
    PG19MINI_VALID,
    load_byte_corpus,
    read_enwik8_zip,
    split_enwik8,
)
from zoo.data.text import ByteTextDataModule, ByteTokenizer
from zoo.data.windows import EvalWindows, RandomWindows
from zoo.errors import DataNotFoundError


def test_embedded_pg19mini_split_equals_splits_tsv(data_dir):
    with open(data_dir / "pg19mini" / "splits.tsv") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    by_split = {
        s: sorted(int(r["ebook"]) for r in rows if r["split"] == s)
        for s in ("train", "valid", "test")
    }
    assert by_split == {
        "train": sorted(PG19MINI_TRAIN),
        "valid": sorted(PG19MINI_VALID),
        "test": sorted(PG19MINI_TEST),
    }


def test_pg19mini_books_are_read_whole(data_dir):
    with open(data_dir / "pg19mini" / "books.tsv") as f:
        sizes = {int(r["ebook"]): int(r["bytes"]) for r in csv.DictReader(f, delimiter="\t")}
    docs = load_byte_corpus("pg19mini", data_dir=data_dir, splits=("valid", "test"))
    assert [len(d) for d in docs["valid"]] == [sizes[b] for b in PG19MINI_VALID]
    assert [len(d) for d in docs["test"]] == [sizes[b] for b in PG19MINI_TEST]


def test_tinyshakespeare_and_enwik8_prefix_splits_cover_the_file(data_dir):
    ts = load_byte_corpus("tinyshakespeare", data_dir=data_dir)
    assert sum(len(d) for docs in ts.values() for d in docs) == 1_115_394
    assert ts["train"][0].startswith(b"First Citizen:")
    ew = load_byte_corpus("enwik8_prefix", data_dir=data_dir)
    assert [len(ew[s][0]) for s in ("train", "valid", "test")] == [3_738_959, 207_720, 207_720]
    assert ew["train"][0].startswith(b"<mediawiki")


def test_enwik8_standard_split_from_a_zip(tmp_path):
    data = bytes(range(256)) * 390_625  # exactly 100,000,000 bytes
    path = tmp_path / "enwik8" / "enwik8.zip"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("enwik8", data)
    assert read_enwik8_zip(path) == data
    splits = load_byte_corpus("enwik8", data_dir=tmp_path)
    assert [len(splits[s][0]) for s in ("train", "valid", "test")] == [
        90_000_000,
        5_000_000,
        5_000_000,
    ]
    assert splits["valid"][0][:2] == bytes([90_000_000 % 256, (90_000_000 + 1) % 256])
    assert splits["test"][0][-1] == (100_000_000 - 1) % 256


def test_enwik8_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="enwik8_prefix"):
        split_enwik8(b"x" * 1000)


def test_enwik8_zip_without_the_member(tmp_path):
    path = tmp_path / "enwik8.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("other", b"abc")
    with pytest.raises(DataNotFoundError, match="no 'enwik8' member"):
        read_enwik8_zip(path)


def test_missing_data_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    with pytest.raises(DataNotFoundError) as err:
        load_byte_corpus("tinyshakespeare", data_dir=tmp_path / "nowhere")
    message = str(err.value)
    assert str(tmp_path / "nowhere" / "tinyshakespeare") in message
    assert "ZOO_DATA_DIR" in message and "download=True" in message


def test_text_file(tmp_path):
    path = tmp_path / "notes.txt.gz"
    path.write_bytes(gzip.compress(b"0123456789" * 10))
    parts = load_byte_corpus("text_file", path=path)
    assert b"".join(parts["train"] + parts["valid"] + parts["test"]) == b"0123456789" * 10
    with pytest.raises(DataNotFoundError, match="path="):
        load_byte_corpus("text_file", path=tmp_path / "missing.txt")


def test_extra_train_adds_training_documents_and_leaves_evaluation_alone(data_dir):
    """pg19mini plus the enwik8 prefix: the training split gains the prefix's, valid does not."""
    plain = ByteTextDataModule("pg19mini", data_dir=str(data_dir), seq_len=64)
    mixed = ByteTextDataModule(
        "pg19mini", data_dir=str(data_dir), seq_len=64, extra_train=["enwik8_prefix"]
    )
    plain.setup("fit")
    mixed.setup("fit")
    extra = load_byte_corpus("enwik8_prefix", data_dir=data_dir, splits=("train",))["train"]
    assert mixed.num_bytes("train") == plain.num_bytes("train") + sum(map(len, extra))
    assert mixed.num_bytes("valid") == plain.num_bytes("valid")
    assert bytes(mixed.splits["train"][-1]) == extra[-1]


@pytest.mark.parametrize("seq_len", [1, 7, 16])
def test_eval_windows_score_every_byte_exactly_once(seq_len):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 256, n).astype(np.uint8) for n in (1, 2, 16, 17, 33)]
    ds = EvalWindows(docs, seq_len)
    xs, ys = zip(*(ds[i] for i in range(len(ds))), strict=True)
    x, y = torch.stack(xs), torch.stack(ys)
    assert x.shape == y.shape == (len(ds), seq_len)
    scored = y[y != -100]
    expected = np.concatenate([d[1:] for d in docs])
    assert scored.tolist() == expected.tolist()
    assert len(scored) == ds.num_targets
    # every scored target is preceded (in its window) by its true context byte
    for xi, yi, (d, start) in zip(x, y, ds.index, strict=True):
        n = int((yi != -100).sum())
        assert xi[:n].tolist() == docs[d][start : start + n].tolist()


def test_random_windows_are_shifted_and_reproducible():
    data = np.arange(1000, dtype=np.int64).astype(np.uint8)
    ds = RandomWindows(data, seq_len=32, num_samples=10, seed=3)
    x, y = ds[4]
    assert x.shape == (32,) and torch.equal(x[1:], y[:-1])
    assert torch.equal(ds[4][0], RandomWindows(data, 32, 10, seed=3)[4][0])
    with pytest.raises(ValueError, match="fewer than seq_len"):
        RandomWindows(data[:10], seq_len=32, num_samples=1)


def test_datamodule_batches(data_dir):
    dm = ByteTextDataModule("tinyshakespeare", data_dir=str(data_dir), seq_len=64, batch_size=4)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (4, 64) and x.dtype == torch.int64
    vx, vy = next(iter(dm.val_dataloader()))
    assert vx.shape == (4, 64)
    assert ByteTokenizer().decode(vx[0]) == dm.splits["valid"][0][:64].tobytes().decode()


def test_tokenizer_round_trip():
    tok = ByteTokenizer()
    text = "naïve café — 東京"
    assert tok.decode(tok.encode(text)) == text
    assert max(tok.encode(text)) < 256


@pytest.fixture
def http_server(tmp_path):
    """A static file server on 127.0.0.1 standing in for a data set's public home."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_from_the_public_home(http_server, tmp_path, monkeypatch):
    from zoo.data import byte_corpora, sources

    root, url = http_server
    (root / "input.txt").write_bytes(b"ROMEO: " * 1000)
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    monkeypatch.setitem(byte_corpora.URLS, "tinyshakespeare", f"{url}/input.txt")
    with pytest.raises(DataNotFoundError):  # off by default: nothing leaves the machine unasked
        load_byte_corpus("tinyshakespeare", data_dir=tmp_path / "none")
    parts = load_byte_corpus("tinyshakespeare", data_dir=tmp_path / "none", download=True)
    assert b"".join(parts["train"] + parts["valid"] + parts["test"]) == b"ROMEO: " * 1000
    # into the data directory given, the only place searched next time
    fetched = tmp_path / "none" / "tinyshakespeare" / "input.txt"
    assert fetched.read_bytes() == b"ROMEO: " * 1000
    assert not (sources.cache_dir() / "tinyshakespeare").exists()
    (root / "input.txt").unlink()  # the second load reads the downloaded file
    assert load_byte_corpus("tinyshakespeare", data_dir=tmp_path / "none", download=True) == parts
    # without a data directory: into the cache
    (root / "input.txt").write_bytes(b"ROMEO: " * 1000)
    assert load_byte_corpus("tinyshakespeare", download=True) == parts
    assert (sources.cache_dir() / "tinyshakespeare" / "input.txt").is_file()


def test_failed_download_leaves_nothing_behind(http_server, tmp_path, monkeypatch):
    from zoo.data import byte_corpora, sources

    _, url = http_server
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    monkeypatch.setitem(byte_corpora.URLS, "enwik8", f"{url}/missing/enwik8.zip")
    with pytest.raises(DataNotFoundError, match="could not download .*missing/enwik8.zip"):
        load_byte_corpus("enwik8", data_dir=tmp_path / "none", download=True)
    folder = sources.cache_dir() / "enwik8"
    assert not folder.exists() or not any(folder.iterdir())
