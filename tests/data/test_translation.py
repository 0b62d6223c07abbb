"""The translation data module: Multi30k from the real files, text_files parsing, joint BPE,
token-bucketed batches."""

import unicodedata

import pytest

from zoo.data.translation import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    TokenBatchSampler,
    TranslationDataModule,
    load_pairs,
    train_bpe,
)
from zoo.errors import ConfigError, DataNotFoundError


@pytest.fixture(scope="module")
def multi30k(data_dir):
    dm = TranslationDataModule(data_dir=str(data_dir), vocab_size=4000, max_tokens=2048)
    dm.setup("fit")
    return dm


@pytest.mark.parametrize(
    "split, n",
    [("train", 29000), ("val", 1014), ("test_2016_flickr", 1000), ("test_2018_flickr", 1071)],
)
def test_multi30k_splits_have_the_published_sizes(data_dir, split, n):
    pairs = load_pairs("multi30k", split, "de", "en", data_dir=str(data_dir))
    assert len(pairs) == n and all(s and t for s, t in pairs)


def test_joint_bpe_round_trips_text_and_reserves_the_special_ids(multi30k):
    tok = multi30k.tokenizer
    assert tok.get_vocab_size() == 4000
    assert [tok.token_to_id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]
    for de, en in multi30k.texts["train"][:300]:
        for text in (de, en):
            ids = tok.encode(text).ids
            assert PAD_ID not in ids and BOS_ID not in ids and EOS_ID not in ids
            assert tok.decode(ids) == unicodedata.normalize("NFKC", text).strip()


def test_batches_hold_about_max_tokens_and_shift_the_target(multi30k):
    loader = multi30k.train_dataloader()
    seen = 0
    for src, tgt_in, tgt_out in loader:
        assert src.numel() <= 2048 or src.shape[0] == 1
        assert tgt_in.shape == tgt_out.shape and (tgt_in[:, 0] == BOS_ID).all()
        lengths = (tgt_out != PAD_ID).sum(1)
        assert (tgt_out[range(len(lengths)), lengths - 1] == EOS_ID).all()
        body = (tgt_out[:, :-1] != PAD_ID) & (tgt_out[:, :-1] != EOS_ID)  # target tokens
        assert (tgt_in[:, 1:][body] == tgt_out[:, :-1][body]).all()  # shifted by one
        seen += src.shape[0]
    assert seen == len(multi30k.splits["train"].filter(lambda e: len(e["src"]) <= 256))


def test_token_batch_sampler_covers_every_pair_once_and_reshuffles():
    lengths = [(i * 7919) % 50 + 1 for i in range(500)]
    sampler = TokenBatchSampler(lengths, max_tokens=200, shuffle=True, seed=0)
    first, second = list(sampler), list(sampler)
    assert sorted(i for b in first for i in b) == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 200 for b in first)
    assert first != second and sorted(map(tuple, first)) == sorted(map(tuple, second))


def test_text_files_parse_a_wmt_style_corpus(tmp_path):
    (tmp_path / "newstest2014.en").write_text("A house.\nThe cat sat.\n")
    (tmp_path / "newstest2014.de").write_text("Ein Haus.\nDie Katze saß.\n")
    pairs = load_pairs("text_files", "newstest2014", "en", "de", path=str(tmp_path))
    assert pairs == [("A house.", "Ein Haus."), ("The cat sat.", "Die Katze saß.")]
    (tmp_path / "bad.en").write_text("one\ntwo\n")
    (tmp_path / "bad.de").write_text("eins\n")
    with pytest.raises(ConfigError, match="aligned line by line"):
        load_pairs("text_files", "bad", "en", "de", path=str(tmp_path))
    with pytest.raises(DataNotFoundError, match="train.en"):
        load_pairs("text_files", "train", "en", "de", path=str(tmp_path))


def test_missing_multi30k_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("ZOO_DATA_DIR")
    with pytest.raises(DataNotFoundError, match="ZOO_DATA_DIR"):
        load_pairs("multi30k", "val", "de", "en", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="test_2016_flickr"):
        load_pairs("multi30k", "test2016", "de", "en", data_dir=str(tmp_path))


def test_bpe_on_a_tiny_corpus():
    tok = train_bpe(["low lower lowest", "new newer newest"] * 10, vocab_size=40)
    assert tok.decode(tok.encode("lower newest").ids) == "lower newest"


def _tarball(path, members: dict[str, str]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def _sgm(lang: str, sentences: list[str]) -> str:
    segs = "".join(f'<seg id="{i + 1}">{s}</seg>\n' for i, s in enumerate(sentences))
    return (f'<srcset setid="newstest2014" srclang="any">\n<doc sysid="ref" docid="1" '
            f'genre="news" origlang="{lang}">\n<p>\n{segs}</p>\n</doc>\n</srcset>\n')  # fmt: skip


def _wmt14_release(root):
    """statmt.org's five WMT14 En-De tarballs in miniature, with the real member names."""
    root.mkdir(parents=True, exist_ok=True)
    corpora = {"training-parallel-europarl-v7.tgz": "training/europarl-v7.de-en",
               "training-parallel-commoncrawl.tgz": "commoncrawl.de-en",
               "training-parallel-nc-v9.tgz": "training/news-commentary-v9.de-en"}  # fmt: skip
    for i, (tarball, stem) in enumerate(corpora.items()):
        _tarball(root / tarball, {f"{stem}.de": f"Satz {i}a\nSatz {i}b\n",
                                  f"{stem}.en": f"sentence {i}a\nsentence {i}b\n",
                                  f"{stem}.fr": "phrase\n"})  # fmt: skip
    _tarball(root / "dev.tgz", {"dev/newstest2013.de": "Guten Morgen .\n",
                                "dev/newstest2013.en": "Good morning .\n"})  # fmt: skip
    _tarball(root / "test-full.tgz", {
        "test-full/newstest2014-deen-src.de.sgm": _sgm("de", ["Ein  Test .", " Zwei "]),
        "test-full/newstest2014-deen-ref.en.sgm": _sgm("de", ["A test .", "Two"]),
        "test-full/newstest2014-deen-src.en.sgm": _sgm("en", ["wrong side", "x"]),
        "test-full/newstest2014-deen-ref.de.sgm": _sgm("en", ["falsche Seite", "y"]),
    })  # fmt: skip


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))  # members are extracted there
    return tmp_path / "cache" / "data"


def test_wmt14_is_read_from_the_statmt_tarballs(tmp_path, own_cache):
    _wmt14_release(tmp_path / "wmt14")
    train = load_pairs("wmt14", "train", "de", "en", data_dir=str(tmp_path))
    assert train == [(f"Satz {i}{c}", f"sentence {i}{c}") for i in range(3) for c in "ab"]
    assert load_pairs("wmt14", "newstest2013", "en", "de", data_dir=str(tmp_path)) == [
        ("Good morning .", "Guten Morgen .")
    ]
    # the test set: <seg> lines of the SGML, whitespace collapsed; source side "src", target "ref"
    test = load_pairs("wmt14", "newstest2014", "de", "en", data_dir=str(tmp_path))
    assert test == [("Ein Test .", "A test ."), ("Zwei", "Two")]
    assert load_pairs("wmt14", "newstest2014", "en", "de", data_dir=str(tmp_path))[0] == (
        "wrong side", "falsche Seite"
    )  # fmt: skip


def test_wmt14_downloads_from_its_public_home(tmp_path, monkeypatch, own_cache):
    from zoo.data import translation

    _wmt14_release(tmp_path / "statmt")
    urls = {name: (tmp_path / "statmt" / name).as_uri() for name in translation.WMT14_URLS}
    monkeypatch.setattr(translation, "WMT14_URLS", urls)
    monkeypatch.delenv("ZOO_DATA_DIR")
    with pytest.raises(
        DataNotFoundError, match=r"training-parallel-europarl-v7\.tgz.*download=True"
    ):
        load_pairs("wmt14", "train", "de", "en")
    pairs = load_pairs("wmt14", "newstest2014", "de", "en", download=True)
    assert pairs[0] == ("Ein Test .", "A test .")
    assert (own_cache / "wmt14" / "test-full.tgz").is_file()
    (tmp_path / "statmt" / "test-full.tgz").unlink()  # now served from the cache
    assert load_pairs("wmt14", "newstest2014", "de", "en") == pairs


def test_wmt14_bad_input_is_a_clear_error(tmp_path, own_cache):
    root = tmp_path / "wmt14"
    _wmt14_release(root)
    with pytest.raises(ConfigError, match="English-German"):
        load_pairs("wmt14", "train", "fr", "en", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="no split 'newstest2015'"):
        load_pairs("wmt14", "newstest2015", "de", "en", data_dir=str(tmp_path))
    (root / "dev.tgz").write_bytes((root / "dev.tgz").read_bytes()[:40])  # truncated download
    with pytest.raises(DataNotFoundError, match="truncated"):
        load_pairs("wmt14", "newstest2013", "de", "en", data_dir=str(tmp_path))
