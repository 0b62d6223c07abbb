"""Model cards of published checkpoints: the README.md that ``zoo export`` writes, per task.

:func:`model_card` renders a card from the checkpoint's config, measured metrics and training facts:
Hub metadata (library, tags, datasets, the metrics in the model-index format, where a slice of a
split is named as a slice), then what the model is, a usage snippet for the task, the results with
the command that re-measures each row, the attention structure, the optional curves
(:mod:`zoo.publishing.card_sections`: by position, by context length, the copy probe's retrieval
by distance, attention over the source), samples and benchmark, the training facts, the lineage,
the config and the model's limitations. A card stands alone (on the Hub as in a clone): the files
it names ship beside it, and no text of it points into the repository's docs or a research log
(:func:`~zoo.publishing.card_sections.standalone`).
:func:`structure_of` is the registry's ``structure`` of a saved model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from zoo.hub.schema import CAVEATS, TASKS, Metric
from zoo.publishing.card_sections import (
    attention_section,
    bench_section,
    by_context_section,
    by_position_section,
    copy_probe_section,
    samples_section,
    standalone,
)
from zoo.publishing.training import stage_source, training_windows

__all__ = ["CAVEATS", "DATASETS", "TASK_CARDS", "TaskCard", "model_card", "structure_of", "task_of"]

DATASETS = {  # model card wording of the data sets a checkpoint can be trained on
    "pg19mini": "pg19mini: 60 Project Gutenberg books published before 1919 (PG-19's rule), "
    "book-level split 55 / 2 / 3; bytes, no tokenizer",
    "enwik8": "enwik8: the first 100M bytes of an English Wikipedia dump, 90M/5M/5M split",
    "tinyshakespeare": "Tiny Shakespeare (1.1 MB), 90/5/5 split",
    "enwik8_prefix": "enwik8_prefix: the first 4,154,399 bytes of enwik8, split 90/5/5 % in order",
    "cifar10": "CIFAR-10: 48,000 training images, 2,000 held out for validation (seeded, as the "
    "papers), 10,000 test images; 32×32 RGB as 3,072 sub-pixels in raster order",
    "multi30k": "Multi30k task 1 (Flickr30k captions), German→English: 29,000 training pairs, "
    "val 1,014, test2016 1,000 (the `valid` and `test` splits of its metrics)",
}


@dataclass(frozen=True)
class TaskCard:
    """The task-specific wording of a model card."""

    summary: str  # "a byte-level causal language model"
    tags: tuple[str, ...]
    pipeline_tag: str
    task_type: str  # model-index task
    use: str  # the code block of "## Use" ({name}, {repo_id} are filled in)
    limitations: str


TASK_CARDS = {
    "causal_lm": TaskCard(
        summary="a byte-level causal language model",
        tags=("byte-level", "causal-lm", "long-context"),
        pipeline_tag="text-generation",
        task_type="text-generation",
        use="""```python
import torch
import zoo

model = zoo.from_pretrained("{name}")  # or "{repo_id}"; files verified against checkpoints.yaml
out = zoo.generate(model, torch.tensor([list(b"It was a cold night")]), max_new_tokens=200)
```

or `zoo generate --checkpoint {name} --prompt "It was a cold night"`; fine-tune with
`zoo fit --config recipe.yaml --model.init_from {name}`.""",
        limitations="A small research checkpoint: trained briefly on a small corpus of "
        "public-domain books, it models their spelling and style, not facts; samples are often "
        "ungrammatical. Text from before 1919 carries the views of its time.",
    ),
    "image_lm": TaskCard(
        summary="an autoregressive pixel model (each sub-pixel predicted from the ones before it "
        "in raster order, as 256 intensities)",
        tags=("image-generation", "autoregressive", "pixel-model", "long-context"),
        pipeline_tag="unconditional-image-generation",
        task_type="image-generation",
        use="""```python
import zoo
from zoo.generation import sample_images

model = zoo.from_pretrained("{name}").eval()  # or "{repo_id}"; verified against checkpoints.yaml
images = sample_images(model, (32, 32, 3), 4, progress=True)  # (4, 32, 32, 3) uint8
```

or `zoo sample --checkpoint {name} --out samples.png --num-samples 8 --completions 8`; fine-tune
with `zoo fit --config recipe.yaml --model.init_from {name}`.""",
        limitations="A small research checkpoint trained for a fraction of the papers' budgets: "
        "its samples have the colours and rough layout of CIFAR-10 images, not recognisable "
        "objects. Bits/dim is a likelihood on the training data set's distribution only.",
    ),
    "translation": TaskCard(
        summary="an encoder-decoder model for translation, with its joint BPE tokenizer",
        tags=("translation", "seq2seq", "transformer"),
        pipeline_tag="translation",
        task_type="translation",
        use="""```python
import zoo

model = zoo.from_pretrained("{name}")  # or "{repo_id}"; tokenizer.json comes with it
print(zoo.translate(model, ["Ein Mann fährt Fahrrad."], {decoding}))
```

or `echo "Ein Mann fährt Fahrrad." | zoo translate --checkpoint {name}`, which decodes as the
test BLEU below was measured.""",
        limitations="A small research checkpoint trained on 29,000 image captions: it translates "
        "short descriptive German sentences; longer or other text falls outside what it has seen.",
    ),
}


def task_of(metrics: list[Metric]) -> str:
    """The task whose headline metric the metrics hold (:data:`~zoo.hub.schema.TASKS`):
    ``image_lm`` for bits per dim, ``translation`` for BLEU, else ``causal_lm``."""
    names = {m.name for m in metrics}
    return next((t for t, metric in TASKS.items() if metric in names), "causal_lm")


def trained_context(facts: dict[str, Any], context: int) -> int:
    """The longest window the model was trained on: the largest ``seq_len`` of the training
    data (or of its ``stages``), else its ``context``."""
    lengths = [st.get("seq_len") for st in facts.get("stages") or []]
    lengths.append(facts.get("data", {}).get("seq_len"))
    return max((n for n in lengths if n), default=context)


def structure_of(config: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """The registry's ``structure`` of a saved model: its config's ``structure()`` (``config``
    is ``config.json``'s content) and the ``trained_context`` of its training facts."""
    from zoo.models.registry import get_model_class

    cls = get_model_class(config["model_type"])
    structure = cls.config_class.from_dict(config["config"]).structure()  # type: ignore[attr-defined]
    return structure | {"trained_context": trained_context(facts, structure["context"])}


def model_card(
    name: str,
    config: dict[str, Any],
    metrics: list[Metric],
    facts: dict[str, Any],
    repo_id: str,
    *,
    task: str = "causal_lm",
    by_position: str | None = None,
    by_position_plot: str | None = None,
    by_context: str | None = None,
    by_context_plot: str | None = None,
    by_context_command: str | None = None,
    copy_probe: str | None = None,
    copy_probe_plot: str | None = None,
    copy_probe_command: str | None = None,
    samples: list[str] = (),
    bench: str | None = None,
    bench_plot: str | None = None,
    attention: Any = None,
) -> ModelCard:
    """The README.md of a published checkpoint, with model-index metadata.

    ``task`` (a key of :data:`zoo.hub.schema.TASKS`) picks the card's wording. In the
    model-index a slice of a split is named as such (``"test (slice: first 16 windows)"``), so it
    never reads as the split's score. ``by_position`` (the text of ``by_position.md``) and
    ``by_position_plot`` (the PNG's path relative to the card) add a section on bits per byte by
    position; ``by_context`` and ``by_context_plot`` (``by_context.md`` and its PNG) a section on
    bits per byte of the same bytes by context length, measured with ``by_context_command``;
    ``copy_probe`` and ``copy_probe_plot`` (``copy_probe.md`` and its PNG) a section on retrieval
    at a distance, measured with ``copy_probe_command``, naming the registered ``copy_gain`` of
    ``metrics`` if there is one; ``attention`` (a translation model's
    :class:`zoo.support.AttentionProfile`, its picture ``attention.png`` beside the card) a section
    on its attention support; ``samples`` (PNG paths relative to the card) a section of
    samples; ``bench`` (the text of ``zoo bench``'s ``bench.md``) and ``bench_plot`` a section on
    time and memory by sequence length.
    """
    card = TASK_CARDS[task]
    model_type = config["model_type"]
    model_name, description = _described(name, model_type)
    dataset = facts.get("data", {}).get("dataset") or (metrics[0].dataset if metrics else "")
    data = _metadata(name, task, card, model_type, facts, metrics, dataset)
    results, caveats, direction = _results_rows(name, metrics)
    curve = by_position_section(name, by_position, by_position_plot) + by_context_section(
        by_context_command or f"zoo evaluate {name} --by-context", by_context, by_context_plot
    ) + copy_probe_section(name, copy_probe_command or f"zoo evaluate {name} --probe copy",
                           copy_probe, copy_probe_plot, metrics) + attention_section(attention)  # fmt: skip
    attention_structure = structure_of(config, facts)
    structure = _structure_section(attention_structure)
    pictures = samples_section(name, samples) + bench_section(name, bench, bench_plot)
    cfg = config["config"]
    config_rows = "\n".join(f"| `{k}` | `{v}` |" for k, v in cfg.items())
    corpus = _corpus(dataset, facts.get("data", {}).get("extra_train") or [])
    use = card.use.replace("{name}", name).replace("{repo_id}", repo_id)
    use = use.replace("{decoding}", _decoding_arguments(metrics))
    body = f"""
# {name}

`{model_name}` ({description}): {card.summary} of the attention-zoo library
(`model_type: {model_type}`), trained on {corpus}.

## Use

With the attention-zoo Python package installed (`import zoo`). Every file this card names
(`recipe.yaml`, `training.json`, the curves' data) ships in the same folder as the card.

{use}

## Results

{direction}. The last column's command measures its row again;
`zoo evaluate {name} --registered` re-measures every row and compares it with the value here.
Rows measured on a slice say so: only "all" rows are the split's score.

| metric | data set | split | measured on | value | precision | decoding | hardware | command |
|---|---|---|---|---|---|---|---|---|
{results}
{caveats}{structure}{curve}{pictures}
{_training_section(facts, cfg, task)}{_lineage_section(facts)}
## Configuration

| field | value |
|---|---|
{config_rows}

## Limitations

{_limitations(card, attention_structure, metrics)}
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{standalone(body)}")


def _described(name: str, model_type: str) -> tuple[str, str]:
    """The card's model name (``NAME`` without its data set) and its preset's description."""
    from zoo.models.registry import get_preset

    model_name = name.rsplit(".", 1)[0]
    try:
        return model_name, get_preset(model_name).description
    except KeyError:
        return model_name, model_type


def _corpus(dataset: str, extra: list[str]) -> str:
    """The card's wording of the training data: the data set, and any extra training splits."""
    also = ". Its training data also held the training split of "
    return DATASETS.get(dataset, dataset) + "".join(also + DATASETS.get(e, e) for e in extra)


def _metadata(name, task, card, model_type, facts, metrics, dataset) -> ModelCardData:
    """The card's model-index metadata: one eval result per metric, a slice named as such."""
    return ModelCardData(
        language=_languages(task, facts),
        license="apache-2.0",
        library_name="attention-zoo",
        tags=[model_type.replace("_", "-"), *card.tags, "pytorch"],
        datasets=[dataset] if dataset else None,
        metrics=sorted({m.name for m in metrics}) or [TASKS[task]],
        model_name=name,
        pipeline_tag=card.pipeline_tag,
        eval_results=[
            EvalResult(
                task_type=card.task_type,
                dataset_type=m.dataset,
                dataset_name=m.dataset + (" (JPEG copy)" if m.dataset in CAVEATS else ""),
                dataset_split=m.split if m.whole else f"{m.split} (slice: {m.measured_on})",
                metric_type=m.name,
                metric_name=f"{m.kind.heading} ({', '.join(filter(None, (m.measured_on, m.search_text)))})",
                metric_config=m.signature,
                metric_value=m.value,
            )
            for m in metrics
        ],
    )


def _results_rows(name: str, metrics: list[Metric]) -> tuple[str, str, str]:
    """The results table's rows, the caveats and signatures under it, and which way is better."""
    results = "\n".join(
        f"| {m.kind.heading} | {m.dataset}{' †' if m.dataset in CAVEATS else ''} | {m.split} "
        f"| {m.measured_on}{_of_context(m)} ({m.targets:,} {m.kind.targets}) | {m.format()} "
        f"| {m.precision} "
        f"| {m.decoding_text} | {m.hardware or 'unknown'} | `{remeasure_command(name, m)}` |"
        for m in metrics
    )
    caveats = "".join(
        f"\n† {CAVEATS[d]}.\n" for d in sorted({m.dataset for m in metrics}) if d in CAVEATS
    ) + "".join(
        f"\nsacrebleu signature: `{sig}`.\n" for sig in sorted({m.signature for m in metrics
                                                                if m.signature})
    )  # fmt: skip
    direction = ", ".join(
        f"{m.kind.heading}: {'lower' if m.kind.lower_is_better else 'higher'} is better"
        for m in {m.name: m for m in metrics}.values()
    )
    return results, caveats, direction[:1].upper() + direction[1:]


def remeasure_command(name: str, m: Metric) -> str:
    """The ``zoo evaluate`` command that measures ``m`` of the checkpoint ``name`` again: its
    split, slice, precision and (BLEU) decoding; a copy gain through ``--registered``."""
    if m.probe:
        return f"zoo evaluate {name} --registered --metric {m.name}"
    words = [f"zoo evaluate {name} --split {m.split}"]
    if m.windows is not None:
        words.append(f"--windows {m.windows}")
    if m.precision != "32-true":
        words.append(f"--precision {m.precision}")
    d = m.decoding or {}
    if d.get("search") == "greedy":
        words.append("--decoding greedy")
    elif d.get("search") == "beam":
        words.append(f"--decoding beam --beam-size {d.get('beam_size')} --alpha {d.get('alpha')}")
    return " ".join(words)


def _limitations(card: TaskCard, structure: dict[str, Any], metrics: list[Metric]) -> str:
    """The card's limits: the task's, then what the structure, the training windows and the data
    sets of the metrics say about its figures, one item each."""
    items = [card.limitations]
    if not structure.get("causal", True):
        items.append(
            "Its figures are not a strict likelihood: evaluation looks ahead (top-w routing "
            "chooses each cluster's members from the whole window), so they do not compare "
            "exactly with a causal model's."
        )
    context, trained = structure.get("context"), structure.get("trained_context")
    if context and trained and trained < context:
        items.append(
            f"It was trained on windows of {trained:,} positions, shorter than its context "
            f"({context:,}): positions past {trained:,} were never trained, and what it does "
            "there is an extrapolation of its position scheme."
        )
    items += [f"{CAVEATS[d]}." for d in sorted({m.dataset for m in metrics}) if d in CAVEATS]
    return "\n".join(f"- {item}" for item in items)


def _training_section(facts: dict[str, Any], cfg: dict[str, Any], task: str) -> str:
    """The card's training table, from ``training.json``'s facts (``cfg``: the model config)."""
    unit = {"image_lm": "sub-pixels (one image)", "translation": "padded source tokens"}.get(
        task, "bytes"
    )
    windows = training_windows(
        facts.get("data", {}), cfg.get("max_seq_len"), facts.get("stages"), unit
    )
    tokens, wall, why = facts.get("tokens"), facts.get("wall_time_s"), facts.get("wall_time_note")
    return f"""## Training

| quantity | value |
|---|---|
| optimizer steps | {facts.get("optimizer_steps")} |
| training windows | {windows} |
| tokens | {f"{tokens:,}" if tokens else "unknown"} |
| wall time | {f"{wall:,.0f} s ({tokens / wall:,.0f} tokens/s)" if wall and tokens else why or "unknown"} |
| hardware | {facts.get("hardware") or "unknown"} |
| precision | {facts.get("precision") or "unknown"} |
| optimisation | {json.dumps(facts.get("optimization", {}))} |
| data | {json.dumps(facts.get("data", {}))} |

`recipe.yaml` is the recipe that trained it (`zoo fit --config recipe.yaml`){_stages_note(facts)};
`training.json` has these facts in machine-readable form.
"""


def _stages_note(facts: dict[str, Any]) -> str:
    """For a model trained in stages: where the earlier stages' recipes are."""
    if len(facts.get("stages") or []) < 2:
        return ""
    return (
        ", its last stage. The stages' recipes named `recipes/...` are packaged with "
        "attention-zoo: `zoo fit --config recipes/<family>/<file>.yaml` runs each, in order (a "
        "stage's `init_from` names the model it starts from)"
    )


def _languages(task: str, facts: dict[str, Any]) -> list[str] | str | None:
    """The card's ``language``: a translation model's two, a text model's English, else none."""
    data = facts.get("data", {})
    if task == "translation":
        return [data.get("source_lang") or "de", data.get("target_lang") or "en"]
    return "en" if task != "image_lm" else None


def _decoding_arguments(metrics: list[Metric]) -> str:
    """``zoo.translate``'s arguments for the decoding of the first whole-test BLEU:
    ``beam_size=4, alpha=2.0`` (the paper's when none)."""
    test = next((m for m in metrics if m.name == "bleu" and m.whole and m.split == "test"), None)
    d = (test.decoding if test else None) or {"search": "beam", "beam_size": 4, "alpha": 0.6}
    if d.get("search") == "greedy":
        return 'decoding="greedy"'
    return f"beam_size={d.get('beam_size', 4)}, alpha={d.get('alpha', 0.6)}"


def _of_context(m: Metric) -> str:
    """`` of 4,096 bytes`` for metrics measured on windows of the model's context."""
    return (
        f" of {m.context:,} {m.kind.targets}" if m.kind.windows == "windows" and m.context else ""
    )


def _structure_section(structure: dict[str, Any]) -> str:
    """The card's table of the attention structure (the registry's ``structure``)."""
    rows = "\n".join(f"| `{k}` | `{v}` |" for k, v in structure.items())
    if structure.get("causal"):
        causal = "Every prediction depends only on earlier positions: the likelihood is strict."
    else:
        causal = (
            "Evaluation looks ahead (top-w routing chooses each cluster's members from the whole "
            "window), so its figures are not a strict likelihood."
        )
    context, trained = structure.get("context"), structure.get("trained_context")
    if context and trained and trained < context:
        causal += (
            f" It was trained on windows of {trained:,} positions, shorter than its context "
            f"({context:,})."
        )
    return f"""
## Attention structure

Recorded in the zoo's registry of checkpoints (`structure`), where `zoo list --attention
{structure.get("pattern")}` and `--context` filter on it. {causal}

| field | value |
|---|---|
{rows}
"""


def _lineage_section(facts: dict[str, Any]) -> str:
    """Where the checkpoint comes from: recipe, code, versions, data, parent (named as
    :func:`zoo.lineage.checkpoint_name` names it, never a local folder)."""
    from zoo.lineage import checkpoint_name

    lineage = facts.get("lineage") or {}
    commits = lineage.get("git_commits")
    data = lineage.get("data")
    versions = facts.get("versions") or {}
    stages = facts.get("stages") or []
    rows = [
        ("recipe", ", then ".join(map(stage_source, stages)) if stages else "`recipe.yaml`"),
        ("git commit of training", ", ".join(f"`{c}`" for c in commits) if commits
         else "not recorded (trained before the zoo recorded it)"),
        ("git commit of export", f"`{lineage['export_commit']}`" if lineage.get("export_commit")
         else "not recorded"),
        ("package versions at export", ", ".join(f"{k} {v}" for k, v in versions.items() if v)
         or "unknown"),
        ("training data", f"{data['dataset']} ({', '.join(data['splits'])}), sha256 "
         f"`{data['sha256']}` (zoo.lineage"
         + ("; recomputed at export from the run's data settings, as the run predates it)"
            if data.get("recorded") == "at export" else ")") if data else "not recorded"),
        ("fine-tuned from", _parent(checkpoint_name(lineage.get("parent")))),
    ]  # fmt: skip
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"""
## Lineage

| what | value |
|---|---|
{table}
"""


def _parent(parent: str | None) -> str:
    """The lineage's parent: a published checkpoint, or the model a packaged recipe trains."""
    if not parent:
        return "– (trained from scratch)"
    if parent.startswith("recipes/") and parent.endswith((".yaml", ".yml")):
        return f"the model that the packaged recipe `{parent}` trains"
    return f"`{parent}`"
