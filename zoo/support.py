"""How much of the source a translation model attends to: its attention support, and one sentence's
attention map.

The support of a target token is the number of source positions with non-zero attention weight
(Martins & Astudillo 2016, sparsemax; Peters et al. 2019, entmax): a softmax always has the whole
source, sparse mappings a few positions. :func:`attention_profile` measures the mean support on a
split, teacher-forced on the references with the model's own mapping (``attention_weights``), and
decodes one sentence of it with its attention drawn. ``zoo evaluate SOURCE --attention`` writes it
as ``attention.md`` / ``.json`` / ``.png``, which ``zoo export --attention`` shows on the card.

For the Transformer the support is counted per head of every decoder layer's encoder-decoder
attention and averaged (the average over heads of sparse heads would count the union of their
supports); the picture is its last layer averaged over heads, as ``zoo translate --attention-map``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = [
    "AttentionProfile",
    "attention_maps_of",
    "attention_profile",
    "attention_support",
    "load_attention_profile",
    "mapping_of",
    "save_attention_profile",
]

FILES = ("attention.md", "attention.json", "attention.png")


def mapping_of(model: nn.Module) -> str:
    """The probability mapping a translation model attends with (``"softmax"`` if it names none)."""
    config = model.config
    return getattr(config, "mapping", None) or getattr(config, "attention_mapping", "softmax")


def attention_maps_of(model: nn.Module, src: Tensor, tgt: Tensor) -> list[Tensor]:
    """Every attention map ``(T, S [+ 1 sink])`` of one sentence pair (``src`` ``(1, S)``, ``tgt``
    ``(1, T)`` token ids): the LSTM's one, or each head of each Transformer decoder layer."""
    layers = getattr(model, "decoder", None)
    if isinstance(layers, nn.ModuleList):  # the Transformer: (H, T, S) per layer
        return [
            head
            for layer in range(len(layers))
            for head in model.attention_weights(src, tgt, layer, average_heads=False)[0]
        ]
    return [model.attention_weights(src, tgt)[0]]


@torch.no_grad()
def attention_support(
    model: nn.Module, pairs: Sequence[tuple[str, str]], *, progress: bool = False
) -> tuple[float, float]:
    """``(mean support, mean source length)`` in tokens over the target tokens of ``pairs``
    (source, reference), teacher-forced, the sink of a constrained mapping excluded (and averaged
    over heads and layers for the Transformer).

    Raises:
        ValueError: no pairs, or a model without a tokenizer or ``attention_weights``.
    """
    from zoo.data.translation import BOS_ID

    tok = getattr(model, "tokenizer", None)
    if tok is None or not hasattr(model, "attention_weights"):
        raise ValueError(f"{type(model).__name__} is not a translation model with a tokenizer")
    if not pairs:
        raise ValueError("attention_support needs at least one sentence pair")
    total = sources = count = 0.0
    rows = pairs
    if progress:
        from rich.progress import track

        rows = track(pairs, description="attention support", transient=True)
    for src_text, tgt_text in rows:
        src = torch.tensor([tok.encode(src_text).ids])
        tgt = torch.tensor([[BOS_ID, *tok.encode(tgt_text).ids]])
        for w in attention_maps_of(model, src, tgt):
            w = w[:, : src.shape[1]]
            total += float((w > 0).sum())
            sources += src.shape[1] * w.shape[0]
            count += w.shape[0]
    return total / count, sources / count


@dataclasses.dataclass(frozen=True)
class AttentionProfile:
    """What :func:`attention_profile` measured. ``support`` and ``source_tokens`` are means over
    the target tokens of ``sentences`` pairs of ``dataset``'s ``split`` (tokens);
    ``line`` (0-based) of that split is ``sentence``, drawn in ``attention.png`` as the model
    translated it (``translation``, with ``beam_size`` and ``alpha``; ``reference`` is the split's)."""

    source: str
    mapping: str
    dataset: str
    split: str
    sentences: int
    support: float
    source_tokens: float
    line: int
    sentence: str
    reference: str
    translation: str
    beam_size: int
    alpha: float

    @property
    def share(self) -> float:
        """Mean support as a fraction of the mean source length."""
        return self.support / self.source_tokens

    def command(self, source: str | None = None) -> str:
        """The ``zoo evaluate`` command that measures this profile of ``source``."""
        return (f"zoo evaluate {source or self.source} --attention --dataset {self.dataset} "
                f"--split {self.split} --line {self.line}")  # fmt: skip

    def text(self) -> str:
        """The markdown table of ``attention.md``."""
        return (
            "| mapping | data set | split | sentences | mean support (tokens) | mean source length "
            "(tokens) | share |\n|---|---|---|---:|---:|---:|---:|\n"
            f"| {self.mapping} | {self.dataset} | {self.split} | {self.sentences:,} | "
            f"{self.support:.2f} | {self.source_tokens:.2f} | {self.share:.1%} |\n\n"
            f"Line {self.line} of {self.split}: {self.sentence}\n\n"
            f"- reference: {self.reference}\n"
            f"- translation (beam {self.beam_size}, alpha {self.alpha:g}): {self.translation}\n"
        )


def attention_profile(
    source: str | os.PathLike | nn.Module,
    *,
    dataset: str = "multi30k",
    split: str = "test",
    line: int = 0,
    source_lang: str = "de",
    target_lang: str = "en",
    beam_size: int | None = None,
    alpha: float | None = None,
    data_dir: str | os.PathLike | None = None,
    progress: bool = False,
):
    """Measure the mean attention support of a translation model on ``split`` of ``dataset``
    (``"valid"`` or ``"test"``: Multi30k's val and test2016), ``source_lang`` to ``target_lang``,
    and decode its ``line`` (0-based) with the model's decoding (registered for a published
    checkpoint, else the paper's) unless ``beam_size`` / ``alpha`` say otherwise.

    Returns:
        ``(AttentionProfile, AttentionMap)``: the numbers, and the drawn sentence's map
        (:func:`zoo.drawing.draw_attention_maps` draws it).

    Raises:
        ValueError: a ``line`` outside the split, a model that is not a translation model, or
            missing data (a :class:`zoo.errors.DataError`).
    """
    from zoo.beam_search import decoding_settings, translate_with_attention
    from zoo.data.translation import EVAL_SPLITS, load_pairs
    from zoo.drawing import AttentionMap
    from zoo.loading import load_model

    if split not in ("valid", "test"):
        raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
    not_translation = ("--attention measures a translation model's attention over its source; "
                       "a language model's use of context is --by-position, --by-context or "
                       "--probe copy")  # fmt: skip
    model = (source if isinstance(source, nn.Module)
             else load_model(source, task="Translation", wrong_kind=not_translation))  # fmt: skip
    model = model.eval()
    if not hasattr(model, "attention_weights"):
        raise ValueError(f"{type(model).__name__} is not a translation model: --attention "
                         "measures an encoder-decoder's attention over the source")  # fmt: skip
    if dataset not in EVAL_SPLITS:
        raise ValueError(f"dataset must be one of {sorted(EVAL_SPLITS)}, got {dataset!r}")
    pairs = load_pairs(dataset, EVAL_SPLITS[dataset][split], source_lang, target_lang,
                       data_dir=data_dir)  # fmt: skip
    if not 0 <= line < len(pairs):
        raise ValueError(f"line {line} is outside {dataset} {split}, which has {len(pairs)} "
                         f"lines (0 to {len(pairs) - 1})")  # fmt: skip
    settings = decoding_settings(model, beam_size=beam_size, alpha=alpha)
    support, length = attention_support(model, pairs, progress=progress)
    sentence, reference = pairs[line]
    text, weights, src_tokens, out_tokens = translate_with_attention(
        model, sentence, decoding=settings["decoding"], beam_size=settings["beam_size"],
        alpha=settings["alpha"],
    )  # fmt: skip
    mapping = mapping_of(model)
    name = str(source) if not isinstance(source, nn.Module) else type(source).__name__
    profile = AttentionProfile(
        source=name, mapping=mapping, dataset=dataset, split=split, sentences=len(pairs),
        support=support, source_tokens=length, line=line, sentence=sentence,
        reference=reference, translation=text, beam_size=settings["beam_size"],
        alpha=settings["alpha"],
    )  # fmt: skip
    return profile, AttentionMap(mapping, weights, src_tokens, out_tokens)


def save_attention_profile(profile: AttentionProfile, drawn, out_dir: str | os.PathLike):
    """Write ``attention.md``, ``attention.json`` and ``attention.png`` (the map ``drawn``) into
    ``out_dir``; returns their paths."""
    from zoo.drawing import draw_attention_maps

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "attention.md").write_text(profile.text(), encoding="utf-8")
    data = dataclasses.asdict(profile) | {"share": profile.share, "command": profile.command()}
    (out / "attention.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                                        encoding="utf-8")  # fmt: skip
    title = f"{profile.sentence}\n-> {profile.translation}"
    png = draw_attention_maps([drawn], out / "attention.png", title=title)
    return [out / "attention.md", out / "attention.json", png]


def load_attention_profile(path: str | os.PathLike) -> AttentionProfile:
    """The profile in ``path`` (``attention.json``, or a folder holding it).

    Raises:
        ValueError: the file is missing or is not an attention profile.
    """
    path = Path(path)
    file = path / "attention.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        fields = {f.name for f in dataclasses.fields(AttentionProfile)}
        return AttentionProfile(**{k: v for k, v in data.items() if k in fields})
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{file} is not an attention profile of `zoo evaluate --attention` "
                         f"({e})") from None  # fmt: skip
