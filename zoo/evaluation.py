"""Measuring any trained model on a split of its data (``zoo evaluate``): bits per byte of text,
bits per dim of images (:func:`evaluate_images`), BLEU of translations (:func:`evaluate_translation`).

The measurement is Lightning's evaluation loop over :class:`~zoo.data.ByteTextDataModule`'s windows
(non-overlapping windows of the model's context, each document on its own; the metric is summed NLL
over all scored bytes / ln 2 / bytes, :class:`~zoo.metrics.BitsPerByte`), so it is exactly what
``zoo test`` reports. ``windows=N`` measures the first ``N`` windows of the split, in order: the
fixed slice the test suite re-measures for each published checkpoint. Published metrics are
measured in full fp32 (``precision="32-true"``) so that they reproduce to ~1e-4 bits on any CPU.

:func:`bits_by_position` (``zoo evaluate SOURCE --by-position``) splits the same measurement by the
position of the predicted byte in its window: the target at position ``t`` is predicted from the
``t + 1`` bytes ``x[0..t]`` of its window, so the curve shows whether a model uses its context. With
``context`` past the trained ``max_seq_len`` (models whose positions extend: rotary, sinusoidal)
the positions beyond it are extrapolation, and every output says so.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from pathlib import Path
from typing import Any

from lightning import Trainer

from zoo.beam_search import PAPER_DECODING, default_decoding
from zoo.callbacks import hardware
from zoo.data.windows import EvalWindows
from zoo.errors import CheckpointError, ConfigError, DataNotFoundError
from zoo.hub.schema import Metric
from zoo.loading import load_task
from zoo.pretrained import find_checkpoint

__all__ = [
    "evaluate",
    "evaluate_images",
    "evaluate_translation",
    "load_metrics",
    "remeasure",
    "require_bytes",
    "require_positive_slice",
    "save_metric",
]


def require_positive_slice(windows: int | None, first_bytes: int | None = None) -> None:
    """Raise ConfigError for a slice of fewer than one window (or byte): ``None`` is the whole split."""
    for name, value in (("windows", windows), ("first_bytes", first_bytes)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value} (None: the whole split)")


def require_bytes(datamodule, dataset: str, split: str, data_dir: str | None) -> None:
    """Raise DataNotFoundError when ``split`` (loaded) has no byte to score: every document empty."""
    from zoo.data.sources import corpus_dir

    docs = datamodule.splits[split]
    if sum(max(len(d) - 1, 0) for d in docs) == 0:
        raise DataNotFoundError(
            f"no bytes to evaluate in {corpus_dir(dataset, data_dir)}/{split}: its {len(docs)} "
            f"document(s) hold {sum(len(d) for d in docs)} bytes; restore the files, or point "
            "--data-dir (data_dir=) at a complete copy of the data set"
        )


def _targets(module, datamodule, split: str, windows: int | None) -> int:
    ds = EvalWindows(datamodule.splits[split], module.model.config.max_seq_len)
    n = len(ds) if windows is None else min(windows, len(ds))
    return sum(min(ds.seq_len, len(ds.docs[d]) - 1 - start) for d, start in ds.index[:n])


def evaluate(
    source,
    *,
    dataset: str = "pg19mini",
    split: str = "test",
    windows: int | None = None,
    first_bytes: int | None = None,
    precision: str = "32-true",
    batch_size: int | None = None,
    data_dir: str | None = None,
    progress: bool = True,
    decoding: dict[str, Any] | None = None,
    text_file: str | os.PathLike | None = None,
) -> Metric:
    """Bits per byte of ``source`` (see :func:`load_task`) on ``split`` of ``dataset``; bits per
    dim for an image data set (:func:`evaluate_images`), BLEU for a parallel corpus
    (:func:`evaluate_translation`, with ``decoding``; ``windows``: the first sentences).

    Args:
        windows: measure only the first ``windows`` evaluation windows of the split (None: all).
        first_bytes: instead of ``windows``: as many windows as cover this many bytes
            (``ceil(first_bytes / context)``), the same slice of the text for any context.
        precision: a Lightning precision; published metrics use ``"32-true"``.
        batch_size: windows per batch (default: 16, or 1 for contexts of 2048 bytes and more).
        data_dir: the directory holding ``<dataset>/``, the only one searched when given
            (default: ``$ZOO_DATA_DIR``, then the download cache).
        text_file: instead of ``dataset``: any local text file (``.gz`` read as gzip), split in
            order 90/5/5 % (``dataset="text_file"``, :mod:`zoo.data.byte_corpora`); ``split`` picks the
            last 5 % (``test``) or the 5 % before it (``valid``). For text no recipe trains on,
            e.g. a book outside pg19mini.

    Returns:
        a :class:`~zoo.hub.schema.Metric` (``value`` in bits per byte) with the bytes scored.
        Empty documents (zero-byte files) score nothing and warn
        (:class:`~zoo.data.byte_corpora.EmptyDataWarning`).

    Raises:
        ConfigError: an unknown split, ``windows``, ``first_bytes`` or ``batch_size`` below 1.
        CheckpointError: the model cannot be loaded.
        HubError: the model cannot be loaded from the Hub.
        DataNotFoundError: the data set is not found, or its split has no byte to score.
    """
    from zoo.data import ByteTextDataModule
    from zoo.data.images import IMAGE_DATASETS
    from zoo.data.translation import EVAL_SPLITS
    from zoo.tasks import CausalLM

    if split not in ("valid", "test"):
        raise ConfigError(f"split must be 'valid' or 'test', not {split!r}")
    require_positive_slice(windows, first_bytes)
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if dataset in EVAL_SPLITS:
        if first_bytes is not None or precision != "32-true":
            raise ConfigError(
                f"{dataset} is a parallel corpus: give --windows N (the first N sentences) and "
                "measure BLEU in fp32 (--precision 32-true)"
            )
        return evaluate_translation(source, dataset=dataset, split=split, sentences=windows,
                                    decoding=decoding, data_dir=data_dir,
                                    progress=progress)  # fmt: skip
    if decoding is not None:
        raise ConfigError(f"decoding settings are for translation, not for {dataset}")
    if dataset in IMAGE_DATASETS:
        if first_bytes is not None:
            raise ConfigError(
                f"{dataset} is an image data set: give --windows N (images), not first_bytes"
            )
        return evaluate_images(source, dataset=dataset, split=split, images=windows,
                               precision=precision, batch_size=batch_size, data_dir=data_dir,
                               progress=progress)  # fmt: skip
    if windows is not None and first_bytes is not None:
        raise ConfigError("give windows or first_bytes, not both")
    if text_file is not None:
        dataset = _text_file_dataset(dataset, text_file)
    module = load_task(source, CausalLM)
    context = module.model.config.max_seq_len
    if first_bytes is not None:
        windows = math.ceil(first_bytes / context)
    bs = batch_size or (1 if context >= 2048 else 16)
    if windows is not None:
        bs = math.gcd(bs, windows)  # whole batches cover exactly the first `windows` windows
    datamodule = ByteTextDataModule(
        dataset=dataset, data_dir=data_dir, seq_len=context, eval_batch_size=bs, path=text_file
    )
    datamodule.setup("test" if split == "test" else "validate")
    require_bytes(datamodule, dataset, split, data_dir)
    limit = 1.0 if windows is None else windows // bs
    trainer = _trainer(precision, progress, limit)
    run = trainer.test if split == "test" else trainer.validate
    run(module, datamodule=datamodule, verbose=False)
    key = "test/bpb" if split == "test" else "val/bpb"
    if key not in trainer.callback_metrics:  # nothing was scored (Lightning logs no metric then)
        raise DataNotFoundError(f"no bytes were scored on {dataset} {split} ({windows} windows)")
    value = float(trainer.callback_metrics[key])
    return Metric(
        name="bits_per_byte",
        value=round(value, 5),
        dataset=dataset if text_file is None else Path(text_file).name,
        split=split,
        windows=windows,
        targets=_targets(module, datamodule, split, windows),
        precision=precision,
        context=context,
        hardware=hardware(trainer),
        date=datetime.date.today().isoformat(),
    )


def _text_file_dataset(dataset: str, text_file: str | os.PathLike) -> str:
    """``"text_file"``, once ``text_file`` exists and no other data set was asked for."""
    if dataset not in ("pg19mini", "text_file"):  # pg19mini: the default, not a choice
        raise ConfigError(f"give a data set ({dataset}) or a text file, not both")
    if not Path(text_file).is_file():
        raise DataNotFoundError(f"text file {str(text_file)!r} not found")
    return "text_file"


def _trainer(precision: str, progress: bool, limit: int | float) -> Trainer:
    """A Lightning Trainer that only evaluates: one device, no logger, checkpoints or summary,
    ``limit`` validation / test batches (a count, or 1.0 for all)."""
    return Trainer(
        accelerator="auto",
        devices=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        limit_val_batches=limit,
        limit_test_batches=limit,
    )


def remeasure(
    source, registered: Metric, *, data_dir: str | None = None, progress: bool = True
) -> Metric:
    """Measure ``source`` again as the ``registered`` metric of ``checkpoints.yaml`` was measured
    (``zoo evaluate NAME --registered``): its data set, split, slice, precision and decoding, or
    for ``copy_gain`` the copy probe at its one distance with its settings
    (:func:`zoo.probes.copy_gain`).

    Raises:
        ZooError: what :func:`evaluate` or :func:`zoo.probes.copy_probe` raise.
    """
    if registered.name == "copy_gain":
        from zoo.probes import copy_gain

        p = registered.probe or {}
        return copy_gain(source, distance=p["distance"], dataset=registered.dataset,
                         split=registered.split, span=p["span"], cue=p["cue"],
                         trials=registered.windows, seed=p["seed"], data_dir=data_dir,
                         progress=progress)  # fmt: skip
    return evaluate(source, dataset=registered.dataset, split=registered.split,
                    windows=registered.windows, precision=registered.precision,
                    decoding=registered.decoding, data_dir=data_dir,
                    progress=progress)  # fmt: skip


def evaluate_images(
    source,
    *,
    dataset: str = "cifar10",
    split: str = "test",
    images: int | None = None,
    precision: str = "32-true",
    batch_size: int | None = None,
    data_dir: str | None = None,
    progress: bool = True,
) -> Metric:
    """Bits per dim of the image model ``source`` (see :func:`load_task`) on ``split``.

    Args:
        images: measure the seed-0 random sample of this many images that
            :class:`~zoo.data.ImageDataModule` evaluates with ``limit_eval`` (the files are sorted
            by class, so the first images would not be a fair slice); None: the whole split.
        batch_size: images per batch (default 8).

    Returns:
        a :class:`~zoo.hub.schema.Metric` named ``bits_per_dim`` (``windows``: the images,
        ``targets``: the sub-pixels scored; ``context``: sub-pixels per image).

    Raises:
        ConfigError: an unknown split; CheckpointError / HubError: the model cannot be loaded;
        DataNotFoundError: the data set is not found.
    """
    from zoo.data import ImageDataModule
    from zoo.tasks import ImageLM

    module = load_task(source, ImageLM)
    datamodule = ImageDataModule(dataset=dataset, data_dir=data_dir, limit_eval=images,
                                 eval_batch_size=batch_size or 8)  # fmt: skip
    if module.model.config.max_seq_len < datamodule.seq_len:
        raise ConfigError(
            f"{source} has a context of {module.model.config.max_seq_len} positions, fewer than "
            f"one {dataset} image ({datamodule.seq_len} sub-pixels): it is not a {dataset} model."
        )
    trainer = _trainer(precision, progress, limit=1.0)
    run = trainer.test if split == "test" else trainer.validate
    run(module, datamodule=datamodule, verbose=False)
    key = "test/bpd" if split == "test" else "val/bpd"
    n = len(datamodule.splits["test" if split == "test" else "val"])
    return Metric(
        name="bits_per_dim",
        value=round(float(trainer.callback_metrics[key]), 5),
        dataset=dataset,
        split=split,
        windows=images,
        targets=n * datamodule.seq_len,
        precision=precision,
        context=datamodule.seq_len,
        hardware=hardware(trainer),
        date=datetime.date.today().isoformat(),
    )


def _translation_model(source: str | os.PathLike):
    """``(model, training facts)`` of a translation ``.ckpt``, run directory, published name, repo
    id or saved folder; the facts hold ``averaged_from`` and the data's languages when known."""
    from zoo.hub import resolve
    from zoo.pretrained import from_pretrained
    from zoo.tasks import Translation
    from zoo.tasks.checkpoint import read_checkpoint

    ckpt = find_checkpoint(source)
    if ckpt is not None:
        model = load_task(ckpt, Translation).model.eval()
        saved = read_checkpoint(ckpt)
        data = saved.get("datamodule_hyper_parameters") or {}
        return model, {"averaged_from": saved.get("averaged_from"), "data": dict(data)}
    folder, _ = resolve(source)
    model = from_pretrained(source, dtype="float32")  # as the registry's metrics were measured
    facts = folder / "training.json"
    return model, json.loads(facts.read_text()) if facts.is_file() else {}


def evaluate_translation(
    source: str | os.PathLike,
    *,
    dataset: str = "multi30k",
    split: str = "test",
    sentences: int | None = None,
    decoding: dict[str, Any] | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    batch_size: int = 64,
    data_dir: str | None = None,
    progress: bool = True,
) -> Metric:
    """Corpus BLEU of the translation model ``source`` on ``split`` of a parallel corpus.

    Translates with :func:`zoo.beam_search.translate` in fp32 and scores with sacrebleu's default
    BLEU (13a tokenization, ``exp`` smoothing) against the raw references, as
    ``recipes/transformer/decoding_sweep.py`` does. ``split`` is the zoo's ``valid`` or ``test``,
    which :data:`~zoo.data.translation.EVAL_SPLITS` names for each corpus (Multi30k: ``val`` and
    ``test_2016_flickr``).

    Args:
        source: a ``.ckpt`` of :class:`~zoo.tasks.Translation` (e.g. from ``zoo average``), a run
            directory, a published name, a repo id or a ``save_pretrained`` folder.
        sentences: only the first N sentences of the split, in order (None: all).
        decoding: ``search`` (``beam`` or ``greedy``), ``beam_size``, ``alpha`` (GNMT's length
            penalty exponent), ``max_len_a``, ``max_len_b``; missing keys: :func:`default_decoding`.
        source_lang: default: the source language the model was trained on, else ``de``.
        target_lang: default: the target language the model was trained on, else ``en``.

    Returns:
        a :class:`~zoo.hub.schema.Metric` named ``bleu`` (0-100) with sacrebleu's ``signature``
        and the ``decoding`` used, plus ``checkpoint`` (the averaged steps) when known;
        ``windows``: the sentences of a slice, ``targets``: the sentences scored.

    Raises:
        ConfigError: an unknown split, corpus or decoding setting, ``sentences`` below 1;
        CheckpointError / HubError: the model cannot be loaded; DataNotFoundError: the corpus is
        not found; ValueError: a sentence longer than the model's context.
    """
    import sacrebleu

    from zoo.beam_search import translate
    from zoo.data.translation import EVAL_SPLITS, load_pairs

    if dataset not in EVAL_SPLITS:
        raise ConfigError(
            f"{dataset} is not a parallel corpus the zoo knows: {sorted(EVAL_SPLITS)}"
        )
    if split not in EVAL_SPLITS[dataset]:
        raise ConfigError(f"split must be 'valid' or 'test', not {split!r}")
    settings = default_decoding(source) | (decoding or {})
    unknown = sorted(set(settings) - set(PAPER_DECODING) - {"checkpoint"})
    if unknown or settings["search"] not in ("beam", "greedy"):
        raise ConfigError(
            f"decoding settings {unknown or settings['search']!r} are not understood: give "
            f"search (beam or greedy), {', '.join(list(PAPER_DECODING)[1:])}"
        )
    if sentences is not None and sentences < 1:
        raise ConfigError(f"sentences must be >= 1, got {sentences} (None: the whole split)")
    model, facts = _translation_model(source)
    data = facts.get("data") or {}
    pairs = load_pairs(dataset, EVAL_SPLITS[dataset][split],
                       source_lang or data.get("source_lang") or "de",
                       target_lang or data.get("target_lang") or "en", data_dir=data_dir)  # fmt: skip
    pairs = pairs[:sentences] if sentences is not None else pairs
    greedy = settings["search"] == "greedy"
    hyps = translate(
        model, [s for s, _ in pairs], decoding=settings["search"], beam_size=settings["beam_size"],
        alpha=settings["alpha"], max_len_a=settings["max_len_a"], max_len_b=settings["max_len_b"],
        batch_size=batch_size, progress=progress,
    )  # fmt: skip
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hyps, [[t for _, t in pairs]])
    used = {"search": settings["search"]} | (
        {} if greedy else {k: settings[k] for k in ("beam_size", "alpha")}
    )
    used |= {k: settings[k] for k in ("max_len_a", "max_len_b")}
    averaged = (facts.get("averaged_from") or {}).get("global_steps")
    if averaged:
        used["checkpoint"] = f"average of {len(averaged)} (steps {', '.join(map(str, averaged))})"
    return Metric(
        name="bleu",
        value=round(score.score, 4),
        dataset=dataset,
        split=split,
        windows=sentences,
        targets=len(pairs),
        precision="32-true",
        hardware=hardware(),
        date=datetime.date.today().isoformat(),
        signature=str(bleu.get_signature()),
        decoding=used,
    )


def save_metric(metric: Metric, path: str | os.PathLike) -> None:
    """Add ``metric`` to the JSON list in ``path``, replacing one measured the same way."""
    path = Path(path)
    records = json.loads(path.read_text()) if path.is_file() else []
    same = ("name", "dataset", "split", "windows", "precision", "decoding")
    new = metric.to_dict()
    records = [r for r in records if any(r.get(k) != new.get(k) for k in same)] + [new]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=2) + "\n")


def load_metrics(path: str | os.PathLike) -> list[Metric]:
    """The metrics :func:`save_metric` wrote to ``path``."""
    try:
        return [Metric(**r) for r in json.loads(Path(path).read_text())]
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} does not exist: measure the run first (zoo evaluate RUN --out {path})."
        ) from None
