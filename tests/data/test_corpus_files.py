"""A corpus of one's own through ``datasets`` (``dataset="files"``, issue 55 item 4): text files as
exact bytes, JSON lines and parquet by ``text_column``, splits by whole documents, one-line errors."""

import json
import sys
from pathlib import Path

import pytest
import torch

from zoo.data import ByteTextDataModule
from zoo.data.corpus_files import load_corpus_files, split_documents
from zoo.errors import ConfigError, DataNotFoundError

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


def books(folder: Path, n: int = 10) -> dict[str, bytes]:
    """``n`` small text files in two sub-folders, one of them not UTF-8."""
    written = {}
    for i in range(n):
        path = folder / ("a" if i % 2 else "b") / f"book{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = f"Book {i}.\nIt was a cold night, {i}.\n".encode() * (i + 1)
        if i == 3:
            data += b"caf\xe9 \x00\xff not UTF-8\n"
        path.write_bytes(data)
        written[str(path)] = data
    return written


def test_text_files_are_documents_of_their_exact_bytes_split_whole(tmp_path):
    written = books(tmp_path)
    dm = ByteTextDataModule(dataset="files", data_files=str(tmp_path / "**" / "*.txt"), seq_len=16)
    dm.setup("fit")
    dm.setup("test")
    got = {s: [bytes(d) for d in dm.splits[s]] for s in ("train", "valid", "test")}
    assert sorted(sum(got.values(), [])) == sorted(written.values())  # each in exactly one split
    assert len(got["valid"]) == len(got["test"]) == 1 and len(got["train"]) == 8
    assert any(b"caf\xe9 \x00\xff" in d for d in sum(got.values(), []))
    again = load_corpus_files(str(tmp_path / "**" / "*.txt"))
    assert again == {s: got[s] for s in ("train", "valid", "test")}  # the same split every time
    assert load_corpus_files(str(tmp_path / "**" / "*.txt"), seed=1) != again


def test_json_lines_and_parquet_take_a_text_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"body": f"document {i} é", "id": i} for i in range(6)]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    parts = load_corpus_files(str(tmp_path / "*.jsonl"), text_column="body")
    docs = sorted(sum(parts.values(), []))
    assert docs == sorted(r["body"].encode() for r in rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    assert sorted(sum(load_corpus_files(str(tmp_path / "c.parquet"), text_column="body").values(),
                      [])) == docs  # fmt: skip
    with pytest.raises(ConfigError, match="no column 'text' .*body, id.*text_column="):
        load_corpus_files(str(tmp_path / "*.jsonl"))


@pytest.mark.parametrize(
    "files, error, message",
    [
        (["nothing/*.txt"], DataNotFoundError, "the pattern 'nothing/\\*.txt' matches no file"),
        ([], ConfigError, "data_files is empty"),
        (["*.csv"], ConfigError, ".csv is not a corpus file kind"),
        (["*.txt", "*.jsonl"], ConfigError, "mixes json and text files"),
        (["one/*.txt"], ConfigError, "holds 1 document.*dataset=text_file"),
    ],
)
def test_bad_corpora_are_one_line_errors(tmp_path, monkeypatch, files, error, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.txt").write_text("x")
    (tmp_path / "b.txt").write_text("y")
    (tmp_path / "c.jsonl").write_text('{"text": "z"}\n')
    (tmp_path / "d.csv").write_text("text\nz\n")
    with pytest.raises(error, match=message) as err:
        load_corpus_files(files)
    assert "\n" not in str(err.value)


def test_a_non_string_text_value_names_its_row(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n{"text": null}\n')
    with pytest.raises(ConfigError, match="row 2 has text=None"):
        load_corpus_files(str(tmp_path / "c.jsonl"))


def test_split_documents_holds_out_whole_documents():
    docs = [bytes([i]) for i in range(40)]
    parts = split_documents(docs, seed=3, valid_fraction=0.1, test_fraction=0.05)
    assert (len(parts["train"]), len(parts["valid"]), len(parts["test"])) == (34, 4, 2)
    assert sorted(sum(parts.values(), [])) == docs


def test_zoo_fit_on_an_empty_glob_is_a_one_line_error(capsys, tmp_path):
    from test_cli_inputs import RECIPE, run_zoo

    code, _, err = run_zoo(
        capsys, "fit", "--config", str(RECIPE), "--data.init_args.dataset=files",
        f"--data.init_args.data_files={tmp_path}/*.txt",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err and "matches no file" in err


def test_the_fine_tuning_recipe_trains_a_published_model_on_a_folder_of_text(capsys, tmp_path):
    from test_cli_inputs import run_zoo

    books(tmp_path / "books", n=20)
    code, _, err = run_zoo(
        capsys, "fit", "--config", str(REPO / "recipes/transformer_lm/finetune_text_files.yaml"),
        f"--data.init_args.data_files={tmp_path}/books/**/*.txt", f"--run_dir={tmp_path}/run",
        "--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.limit_val_batches=1",
        "--data.init_args.batch_size=2", "--trainer.enable_progress_bar=false",
    )  # fmt: skip
    assert code == 0, err
    import torch

    saved = torch.load(tmp_path / "run/checkpoints/last.ckpt", weights_only=True)
    assert saved["global_step"] == 2
    assert saved["hyper_parameters"]["init_from"] == "transformer_lm_small.pg19mini"


# --- streaming (a corpus larger than memory) ------------------------------------------------------


def marked_books(folder: Path, n: int) -> dict[bytes, bytes]:
    """``n`` text files, each its own marker ``<doc017>`` repeated; ``{marker: bytes}``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for i in range(n):
        marker = f"<doc{i:03d}>".encode()
        (folder / f"{i:03d}.txt").write_bytes(marker * (3 + i % 5))
        out[marker] = marker * (3 + i % 5)
    return out


def test_document_split_is_a_seeded_hash_of_the_bytes():
    from zoo.data.corpus_files import document_split

    docs = [f"document {i}".encode() for i in range(4000)]
    splits = [document_split(d, seed=0) for d in docs]
    assert splits == [document_split(d, seed=0) for d in docs]  # deterministic
    assert splits != [document_split(d, seed=1) for d in docs]  # the seed matters
    for name in ("valid", "test"):
        assert 0.04 < splits.count(name) / len(docs) < 0.06  # 5% each, in expectation


def test_streaming_holds_out_by_hash_and_trains_on_an_endless_stream_of_the_rest(tmp_path):
    from zoo.data.corpus_files import StreamedDocuments, document_split

    books_ = marked_books(tmp_path / "books", 80)
    dm = ByteTextDataModule(dataset="files", data_files=str(tmp_path / "books" / "*.txt"),
                            seq_len=16, batch_size=4, streaming=True)  # fmt: skip
    dm.setup("fit")
    dm.setup("test")
    assert isinstance(dm.splits["train"], StreamedDocuments)
    held = {s: sorted(bytes(d) for d in dm.splits[s]) for s in ("valid", "test")}
    for s in ("valid", "test"):
        assert held[s] == sorted(d for d in books_.values() if document_split(d) == s) != []
    train = {m for m, d in books_.items() if document_split(d) == "train"}
    seen, batches = set(), iter(dm.train_dataloader())
    total = sum(len(books_[m]) for m in train)
    for _ in range(2 * total // (4 * 16) + 2):  # past the end of the first pass: it goes on
        x, y = next(batches)
        assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64
        assert torch.equal(x[:, 1:], y[:, :-1])
        text = bytes(x.flatten().tolist()) + bytes(y[:, -1].tolist())
        seen |= {m for m in books_ if m in text}
    assert seen == train  # every training document, and no held-out one


def test_a_resumed_stream_goes_on_where_it_stopped(tmp_path):
    from zoo.data.corpus_files import StreamedWindows

    marked_books(tmp_path / "books", 40)
    dm = ByteTextDataModule(dataset="files", data_files=str(tmp_path / "books" / "*.txt"),
                            seq_len=8, streaming=True)  # fmt: skip
    dm.setup("fit")
    from itertools import islice

    first = [x for x, _ in islice(StreamedWindows(dm.splits["train"], 8), 12)]
    later = [x for x, _ in islice(StreamedWindows(dm.splits["train"], 8, skip=5), 7)]
    assert all(torch.equal(a, b) for a, b in zip(first[5:], later, strict=True))


def test_streaming_asks_for_what_an_endless_stream_needs(tmp_path):
    from types import SimpleNamespace

    marked_books(tmp_path / "books", 40)
    with pytest.raises(ConfigError, match="streaming=True reads dataset='files' alone"):
        ByteTextDataModule(dataset="pg19mini", streaming=True)
    dm = ByteTextDataModule(dataset="files", data_files=str(tmp_path / "books" / "*.txt"),
                            seq_len=8, streaming=True)  # fmt: skip
    dm.setup("fit")
    dm.trainer = SimpleNamespace(val_check_interval=1.0, limit_val_batches=1.0, global_step=0,
                                 accumulate_grad_batches=1)  # fmt: skip
    with pytest.raises(ConfigError, match="--trainer.val_check_interval 500"):
        dm.train_dataloader()


def test_zoo_fit_streams_a_folder_of_text(capsys, tmp_path):
    from test_cli_inputs import run_zoo

    marked_books(tmp_path / "books", 60)
    code, _, err = run_zoo(
        capsys, "fit", "--config", str(REPO / "recipes/transformer_lm/finetune_text_files.yaml"),
        f"--data.init_args.data_files={tmp_path}/books/*.txt", "--data.init_args.streaming=true",
        f"--run_dir={tmp_path}/run", "--trainer.max_steps=3", "--trainer.val_check_interval=3",
        "--trainer.limit_val_batches=1", "--data.init_args.batch_size=2",
        "--trainer.enable_progress_bar=false", "--trainer.check_val_every_n_epoch=null",
    )  # fmt: skip
    assert code == 0, err
    assert (
        torch.load(tmp_path / "run/checkpoints/last.ckpt", weights_only=True)["global_step"] == 3
    )
