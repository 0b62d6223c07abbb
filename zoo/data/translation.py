"""Translation data: sentence pairs, a joint BPE vocabulary, and batches of about ``max_tokens`` tokens.

Data sets (``dataset=``):

- ``multi30k``: Multi30k task 1 (Elliott et al. 2016), en/de/fr/cs image captions: ``train`` 29,000
  pairs, ``val`` 1,014, and the test sets ``test_2016_flickr`` (1,000; the standard one),
  ``test_2017_flickr``, ``test_2017_mscoco``, ``test_2018_flickr``. Files ``raw/<split>.<lang>.gz``
  from ``multi30k/`` under ``data_dir`` when it is given (the only place searched then), else under
  ``$ZOO_DATA_DIR`` or the download cache; with ``download=True`` missing files are fetched from the
  dataset's GitHub repository (into ``data_dir`` when given).
- ``wmt14``: WMT14 English-German as in the Transformer paper (§5.1, about 4.5M pairs): ``train``
  is Europarl v7 + Common Crawl + News Commentary v9, ``newstest2013`` the usual validation set and
  ``newstest2014`` (the full 3,003-sentence release, as sacrebleu's ``wmt14/full``) the test set.
  The files are read from ``wmt14/`` under ``data_dir`` (alone, when given) or else ``$ZOO_DATA_DIR``
  or the cache (extracted, or the statmt.org tarballs themselves), else (``download=True``) fetched
  from statmt.org into the same place; the SGML test
  files are reduced to their ``<seg>`` lines with whitespace collapsed, as sacrebleu does.
- ``text_files``: any parallel corpus as aligned plain-text files ``<path>/<split>.<lang>``.

Tokenization (Vaswani et al. 2017, §5.1, byte-pair encoding with a shared source-target vocabulary):
one BPE model learned with ``tokenizers`` on the training split's source and target sides, NFKC
normalised, words marked by a metaspace so that decoding restores the text; special tokens
``<pad>`` 0, ``<s>`` 1 (BOS), ``</s>`` 2 (EOS), ``<unk>`` 3. Batches group pairs of similar length so
that each holds about ``max_tokens`` source (and target) tokens, as the paper's ~25,000-token
batches; ``datasets.Dataset`` holds the encoded pairs.

Shape legend: B pairs, S source tokens, T target tokens.
"""

from __future__ import annotations

import gzip
import random
import re
import shutil
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from datasets import Dataset
from lightning import LightningDataModule
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from torch.utils.data import DataLoader, Sampler

from zoo.config import require_positive
from zoo.data.sources import download_dir, fetch_file, find_file, not_found
from zoo.errors import ConfigError, DataNotFoundError

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "EVAL_SPLITS",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "WMT14_URLS",
    "TokenBatchSampler",
    "TranslationDataModule",
    "load_pairs",
    "train_bpe",
]

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco",
                   "test_2018_flickr")  # fmt: skip
EVAL_SPLITS = {  # the zoo's "valid" and "test" of each parallel corpus (zoo evaluate --split)
    "multi30k": {"valid": "val", "test": "test_2016_flickr"},
    "wmt14": {"valid": "newstest2013", "test": "newstest2014"},
}


def _read_lines(path: Path) -> list[str]:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = data.decode("utf-8").rstrip("\n").split("\n")
    if path.suffix == ".sgm":  # WMT's SGML: one <seg id="..."> per sentence
        seg = re.compile(r"<seg[^>]*>(.*)</seg>")
        lines = [" ".join(seg.search(x).group(1).split()) for x in lines if x.startswith("<seg ")]
    return lines


def _multi30k(split: str, lang: str, data_dir, download: bool) -> list[str]:
    if split not in MULTI30K_SPLITS:
        raise ConfigError(f"multi30k has no split {split!r}; splits: {', '.join(MULTI30K_SPLITS)}")
    name = f"{split}.{lang}.gz"
    path = find_file("multi30k", [f"raw/{name}", name], data_dir)
    if path is None:
        if not download:
            raise not_found("multi30k", [f"raw/{name}"], data_dir, "")
        dest = download_dir(data_dir) / "multi30k" / "raw" / name
        path = fetch_file(MULTI30K_URL.format(name=name), dest)
    return _read_lines(path)


WMT14_URLS = {
    "training-parallel-europarl-v7.tgz": "https://statmt.org/wmt13/training-parallel-europarl-v7.tgz",
    "training-parallel-commoncrawl.tgz": "https://statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    "training-parallel-nc-v9.tgz": "https://statmt.org/wmt14/training-parallel-nc-v9.tgz",
    "dev.tgz": "https://data.statmt.org/wmt17/translation-task/dev.tgz",
    "test-full.tgz": "https://statmt.org/wmt14/test-full.tgz",
}
WMT14_FILES = {  # split -> (tarball, member); {lang} de|en, {role} src|ref (test: source or reference)
    "train": [
        ("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en.{lang}"),
        ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en.{lang}"),
        ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en.{lang}"),
    ],
    "newstest2013": [("dev.tgz", "dev/newstest2013.{lang}")],
    "newstest2014": [("test-full.tgz", "test-full/newstest2014-deen-{role}.{lang}.sgm")],
}


def _extract(tarball: Path, member: str, dest: Path) -> Path:
    """Copy ``member`` of the gzipped tarball to ``dest`` (atomically)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with tarfile.open(tarball, "r:gz") as tf, open(tmp, "wb") as out:
            f = tf.extractfile(member)
            if f is None:
                raise KeyError(member)
            shutil.copyfileobj(f, out)
    except (KeyError, tarfile.TarError, OSError, EOFError) as e:
        tmp.unlink(missing_ok=True)
        raise DataNotFoundError(
            f"{tarball} has no readable {member} ({type(e).__name__}: {e}): the file is "
            "truncated or not the statmt.org release; delete it and download it again."
        ) from None
    tmp.replace(dest)
    return dest


def _wmt14(split: str, lang: str, role: str, data_dir, download: bool) -> list[str]:
    if split not in WMT14_FILES:
        raise ConfigError(f"wmt14 has no split {split!r}; splits: {', '.join(WMT14_FILES)}")
    if lang not in ("de", "en"):
        raise ConfigError(f"wmt14 is English-German: language {lang!r} is neither 'de' nor 'en'")
    lines: list[str] = []
    for tarball, pattern in WMT14_FILES[split]:
        member = pattern.format(lang=lang, role=role)
        path = find_file("wmt14", [member, Path(member).name], data_dir)
        if path is None:
            archive = find_file("wmt14", [tarball], data_dir)
            if archive is None:
                if not download:
                    raise not_found("wmt14", [member, tarball], data_dir,
                                     f"It is in {WMT14_URLS[tarball]}.")  # fmt: skip
                dest = download_dir(data_dir) / "wmt14" / tarball
                archive = fetch_file(WMT14_URLS[tarball], dest)
            path = _extract(archive, member, download_dir(data_dir) / "wmt14" / member)
        lines += _read_lines(path)
    return lines


def load_pairs(
    dataset: str,
    split: str,
    source_lang: str,
    target_lang: str,
    *,
    data_dir: str | None = None,
    path: str | None = None,
    download: bool = False,
) -> list[tuple[str, str]]:
    """Aligned ``(source, target)`` sentences of ``split``.

    Raises:
        DataNotFoundError: a file is missing (the message says where it looked and how to fix it).
        ConfigError: unknown data set or split, or source and target files of different lengths.
    """
    if dataset == "multi30k":
        src = _multi30k(split, source_lang, data_dir, download)
        tgt = _multi30k(split, target_lang, data_dir, download)
    elif dataset == "wmt14":
        src = _wmt14(split, source_lang, "src", data_dir, download)
        tgt = _wmt14(split, target_lang, "ref", data_dir, download)
    elif dataset == "text_files":
        if path is None:
            raise ConfigError(
                "dataset='text_files' needs path: a directory of <split>.<lang> files"
            )
        files = [Path(path) / f"{split}.{lang}" for lang in (source_lang, target_lang)]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise DataNotFoundError(f"{', '.join(missing)} not found: text_files reads "
                                    "<path>/<split>.<lang>, one sentence per line")  # fmt: skip
        src, tgt = (_read_lines(f) for f in files)
    else:
        raise ConfigError(
            f"unknown translation data set {dataset!r}: multi30k, wmt14 or text_files"
        )
    if len(src) != len(tgt):
        raise ConfigError(
            f"{dataset} {split}: {len(src)} {source_lang} lines but {len(tgt)} {target_lang} lines; "
            "the files must be aligned line by line"
        )
    return list(zip(src, tgt, strict=True))


def train_bpe(texts: Sequence[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """A joint BPE tokenizer learned on ``texts`` (see the module docstring for its conventions)."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


class TokenBatchSampler(Sampler[list[int]]):
    """Batches of indices whose padded size ``len(batch) * longest`` stays within ``max_tokens``.

    Pairs are sorted by length (longest of source and target), cut into batches, and the batches
    shuffled (``shuffle=True``, a new order each epoch from ``seed``), as length-bucketed batching
    usually is. A pair longer than ``max_tokens`` forms a batch of its own.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, shuffle: bool, seed: int = 0):
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        self.batches: list[list[int]] = []
        batch: list[int] = []
        longest = 0
        for i in order:
            longest_if = max(longest, lengths[i])
            if batch and longest_if * (len(batch) + 1) > max_tokens:
                self.batches.append(batch)
                batch, longest_if = [], lengths[i]
            batch.append(i)
            longest = longest_if
        if batch:
            self.batches.append(batch)
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(self.batches)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(batches)
            self.epoch += 1
        return iter(batches)


def collate(examples: list[dict]) -> tuple:
    """``(src (B, S), tgt_in (B, T), tgt_out (B, T))`` int64, PAD-padded: ``tgt_in`` is BOS + target,
    ``tgt_out`` target + EOS (the decoder input shifted by one). Evaluation examples also carry the
    raw target sentence (``"ref"``): their batches get a fourth item, the list of references,
    which BLEU is computed against."""
    src = [torch.tensor(e["src"]) for e in examples]
    tgt = [torch.tensor(e["tgt"]) for e in examples]
    bos, eos = torch.tensor([BOS_ID]), torch.tensor([EOS_ID])

    def pad(seqs):
        return torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD_ID)

    batch = (
        pad(src),
        pad([torch.cat([bos, t]) for t in tgt]),
        pad([torch.cat([t, eos]) for t in tgt]),
    )
    if "ref" in examples[0]:
        return (*batch, [e["ref"] for e in examples])
    return batch


class TranslationDataModule(LightningDataModule):
    """Sentence pairs for translation, batched by tokens.

    Args:
        dataset: ``multi30k``, ``wmt14`` or ``text_files`` (module docstring).
        source_lang: the source language's code in the file names (``de``, ``en``, ...).
        target_lang: the target language's code.
        data_dir: directory holding ``multi30k/``, the only one searched when given (default:
            ``$ZOO_DATA_DIR``, then the download cache).
        path: the directory of ``text_files``.
        vocab_size: size of the joint BPE vocabulary learned on the training split.
        max_tokens: tokens (padded source or target) per training batch.
        eval_batch_size: sentences per validation / test batch.
        train_split: the training split's name (Multi30k: ``train``).
        val_split: the validation split's name (Multi30k: ``val``).
        test_split: the test split's name (Multi30k: ``test_2016_flickr``).
        max_length: training pairs with a side longer than this many tokens are dropped (and pairs
            with an empty side).
        download: fetch missing files from the set's public home (as
            :class:`~zoo.data.ByteTextDataModule`).
        num_workers: DataLoader worker processes.
        seed: seed of the training batches' order (a new order each epoch).

    ``self.tokenizer`` (a ``tokenizers.Tokenizer``) exists after ``setup``; the model task saves it
    with its checkpoints, so a trained model translates with no other files.
    """

    def __init__(
        self,
        dataset: str = "multi30k",
        source_lang: str = "de",
        target_lang: str = "en",
        data_dir: str | None = None,
        path: str | None = None,
        vocab_size: int = 8000,
        max_tokens: int = 4096,
        eval_batch_size: int = 64,
        train_split: str = "train",
        val_split: str = "val",
        test_split: str = "test_2016_flickr",
        max_length: int = 256,
        download: bool = False,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        require_positive(
            "TranslationDataModule", vocab_size=vocab_size, max_tokens=max_tokens,
            eval_batch_size=eval_batch_size, max_length=max_length,
        )  # fmt: skip
        require_positive("TranslationDataModule", 0, num_workers=num_workers)
        self.save_hyperparameters()
        self.tokenizer: Tokenizer | None = None
        self.splits: dict[str, Dataset] = {}
        self.texts: dict[str, list[tuple[str, str]]] = {}

    def _pairs(self, split: str) -> list[tuple[str, str]]:
        hp = self.hparams
        if split not in self.texts:
            self.texts[split] = load_pairs(
                hp.dataset, split, hp.source_lang, hp.target_lang,
                data_dir=hp.data_dir, path=hp.path, download=hp.download,
            )  # fmt: skip
        return self.texts[split]

    def _encode(self, split: str) -> Dataset:
        if split not in self.splits:
            pairs = self._pairs(split)
            assert self.tokenizer is not None
            src = [e.ids for e in self.tokenizer.encode_batch([s for s, _ in pairs])]
            tgt = [e.ids for e in self.tokenizer.encode_batch([t for _, t in pairs])]
            self.splits[split] = Dataset.from_dict({"src": src, "tgt": tgt})
        return self.splits[split]

    def setup(self, stage: str | None = None) -> None:
        hp = self.hparams
        if self.tokenizer is None:
            train = self._pairs(hp.train_split)
            self.tokenizer = train_bpe([s for pair in train for s in pair], hp.vocab_size)

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        data = self._encode(hp.train_split)

        def keep(e) -> bool:  # no empty side (crawled corpora have them), nothing overlong
            n_src, n_tgt = len(e["src"]), len(e["tgt"])
            return n_src > 0 and n_tgt > 0 and max(n_src, n_tgt + 1) <= hp.max_length

        data = data.filter(keep)
        lengths = [max(len(s), len(t) + 1) for s, t in zip(data["src"], data["tgt"], strict=True)]
        sampler = TokenBatchSampler(lengths, hp.max_tokens, shuffle=True, seed=hp.seed)
        return DataLoader(data, batch_sampler=sampler, collate_fn=collate,
                          num_workers=hp.num_workers)  # fmt: skip

    def _eval_loader(self, split: str) -> DataLoader:
        data = self._encode(split)
        data = data.add_column("ref", [t for _, t in self._pairs(split)])
        return DataLoader(data, batch_size=self.hparams.eval_batch_size, shuffle=False,
                          collate_fn=collate, num_workers=self.hparams.num_workers)  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.hparams.val_split)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.hparams.test_split)
