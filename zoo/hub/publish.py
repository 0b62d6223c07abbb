"""Publishing a trained run: export it as a Hub-ready folder, register it, push it.

The folder (``zoo export``) holds exactly what is pushed and shipped under ``checkpoints/<name>/``:

- ``config.json`` and ``model.safetensors`` (``save_pretrained``; never pickles),
- ``README.md``, the model card: metadata (library name, tags, datasets, the metrics in the Hub's
  model-index format) and tables of the measured results, the training facts and the config,
- ``recipe.yaml``, the recipe that trained it (``zoo fit --config recipe.yaml`` reproduces it),
- ``golden.json``: logits of a fixed input (:mod:`zoo.golden`), which ``zoo verify`` recomputes,
- ``training.json``: optimizer steps, tokens, wall time, hardware, precision, optimisation and data
  settings, read from the Lightning checkpoint (the :class:`~zoo.callbacks.TrainingSummary` state),
- optionally ``by_position.md`` / ``.json`` / ``.png``, bits per byte by position in the window
  (``zoo evaluate RUN --by-position``, then ``zoo export --by-position DIR``), shown in the card.

``zoo push`` uploads such a folder (or exports a run first) with ``HfApi.create_repo`` and
``upload_folder``; with ``update_registry`` it pins the returned commit in ``checkpoints.yaml``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError

from zoo.errors import CheckpointError, ConfigError, HubError
from zoo.golden import GOLDEN_NAME
from zoo.golden import record as record_golden
from zoo.hub.download import endpoint, sha256_file
from zoo.hub.registry import TASKS, CheckpointEntry, Metric, Registry, load_registry

__all__ = [
    "PUBLISHED_FILES",
    "export_run",
    "model_card",
    "push",
    "refresh_card",
    "register",
    "task_of",
]

PUBLISHED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",  # translation models: their joint BPE
    "README.md",
    "recipe.yaml",
    "training.json",
    "manifest.json",  # sha256 of config, weights, tokenizer: checked when loaded by repo id
    "golden.json",  # logits of a fixed input, recorded at export: `zoo verify` (zoo.golden)
    "by_position.md",  # optional: bits per byte by position in the window (zoo evaluate
    "by_position.json",  # --by-position), shown in the model card
    "by_position.png",
    "samples.png",  # optional: image models' samples and completions (zoo sample), in the card
    "samples_completions.png",
    "bench.md",  # optional: time and memory by sequence length on one machine (zoo bench),
    "bench.json",  # shown in the card
    "bench.png",
)
SAMPLE_FILES = ("samples.png", "samples_completions.png")
BENCH_FILES = ("bench.md", "bench.json", "bench.png")
DEFAULT_NAMESPACE = "attention-zoo"

DATASETS = {  # model card wording of the data sets a checkpoint can be trained on
    "pg19mini": "pg19mini: 60 Project Gutenberg books published before 1919 (PG-19's rule), "
    "book-level split 55 / 2 / 3; bytes, no tokenizer",
    "enwik8": "enwik8: the first 100M bytes of an English Wikipedia dump, 90M/5M/5M split",
    "tinyshakespeare": "Tiny Shakespeare (1.1 MB), 90/5/5 split",
    "enwik8_prefix": "enwik8_prefix: the first 4,154,399 bytes of enwik8, split 90/5/5 % in order",
    "cifar10": "CIFAR-10: 48,000 training images, 2,000 held out for validation (seeded, as the "
    "papers), 10,000 test images; 32×32 RGB as 3,072 sub-pixels in raster order",
    "multi30k": "Multi30k task 1 (Flickr30k captions), German→English: 29,000 training pairs, "
    "val 1,014, test2016 1,000",
}
CAVEATS = {  # said beside every figure measured on these data sets
    "cifar10": "JPEG copy (quality ≈75) of CIFAR-10: its pixels differ slightly from the lossless "
    "release, so these bits/dim are not exactly comparable with published figures",
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
        summary="an encoder-decoder Transformer for translation, with its joint BPE tokenizer",
        tags=("translation", "seq2seq", "transformer"),
        pipeline_tag="translation",
        task_type="translation",
        use="""```python
import zoo

model = zoo.from_pretrained("{name}")  # or "{repo_id}"; tokenizer.json comes with it
print(zoo.translate(model, ["Ein Mann fährt Fahrrad."], beam_size=4))
```

or `echo "Ein Mann fährt Fahrrad." | zoo translate --checkpoint {name}`.""",
        limitations="A small research checkpoint trained on 29,000 image captions: it translates "
        "short descriptive German sentences; longer or other text falls outside what it has seen.",
    ),
}


def task_of(metrics: list[Metric]) -> str:
    """The task whose headline metric the metrics hold (:data:`~zoo.hub.registry.TASKS`):
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
    from zoo.registry import get_model_class

    cls = get_model_class(config["model_type"])
    structure = cls.config_class.from_dict(config["config"]).structure()  # type: ignore[attr-defined]
    return structure | {"trained_context": trained_context(facts, structure["context"])}


def training_facts(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Training facts from a loaded Lightning checkpoint dict (what ``training.json`` holds)."""
    summary = ckpt.get("callbacks", {}).get("TrainingSummary", {})
    hp = ckpt.get("hyper_parameters", {})
    dm = ckpt.get("datamodule_hyper_parameters", {})
    wall = summary.get("wall_time")
    tokens = summary.get("tokens")
    return {
        "optimizer_steps": ckpt.get("global_step"),
        "tokens": tokens,
        "wall_time_s": round(wall, 1) if wall else None,
        "tokens_per_s": round(tokens / wall) if tokens and wall else None,
        "hardware": ", ".join(summary.get("hardware", [])) or None,
        "precision": summary.get("precision") or None,
        "optimization": {
            k: hp.get(k)
            for k in ("lr", "weight_decay", "betas", "eps", "warmup_steps", "lr_schedule")
        },
        "data": {k: dm.get(k) for k in ("dataset", "batch_size", "seq_len", "seed")},
        "versions": {
            "attention-zoo": _version("attention-zoo"),
            "torch": torch.__version__,
            "lightning": _version("lightning"),
        },
    }


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


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
    samples: list[str] = (),
    bench: str | None = None,
    bench_plot: str | None = None,
) -> ModelCard:
    """The README.md of a published checkpoint, with model-index metadata.

    ``task`` (a key of :data:`zoo.hub.registry.TASKS`) picks the card's wording. In the
    model-index a slice of a split is named as such (``"test (slice: first 16 windows)"``), so it
    never reads as the split's score. ``by_position`` (the text of ``by_position.md``) and
    ``by_position_plot`` (the PNG's path relative to the card) add a section on bits per byte by
    position; ``samples`` (PNG paths relative to the card) a section of samples; ``bench`` (the
    text of ``zoo bench``'s ``bench.md``) and ``bench_plot`` a section on time and memory by
    sequence length.
    """
    from zoo.registry import get_preset

    card = TASK_CARDS[task]
    model_type = config["model_type"]
    model_name = name.rsplit(".", 1)[0]
    try:
        description = get_preset(model_name).description
    except KeyError:
        description = model_type
    dataset = facts.get("data", {}).get("dataset") or (metrics[0].dataset if metrics else "")
    data = ModelCardData(
        language="en" if task != "image_lm" else None,
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
                metric_name=f"{m.kind.unit} ({m.measured_on})",
                metric_config=m.signature,
                metric_value=m.value,
            )
            for m in metrics
        ],
    )
    results = "\n".join(
        f"| {m.kind.unit} | {m.dataset}{' †' if m.dataset in CAVEATS else ''} | {m.split} "
        f"| {m.measured_on}{_of_context(m)} ({m.targets:,} {m.kind.targets}) | {m.format()} "
        f"| {m.precision} "
        f"| {_how(m)} | {m.hardware or 'unknown'} |"
        for m in metrics
    )
    caveats = "".join(
        f"\n† {CAVEATS[d]}.\n" for d in sorted({m.dataset for m in metrics}) if d in CAVEATS
    )
    direction = ", ".join(
        f"{m.kind.unit}: {'lower' if m.kind.lower_is_better else 'higher'} is better"
        for m in {m.name: m for m in metrics}.values()
    )
    curve = _by_position_section(name, by_position, by_position_plot)
    structure = _structure_section(structure_of(config, facts))
    pictures = _samples_section(name, samples) + _bench_section(name, bench, bench_plot)
    cfg = config["config"]
    config_rows = "\n".join(f"| `{k}` | `{v}` |" for k, v in cfg.items())
    tokens, wall = facts.get("tokens"), facts.get("wall_time_s")
    unit = {"image_lm": "sub-pixels (one image)", "translation": "tokens"}.get(task, "bytes")
    windows = _training_windows(
        facts.get("data", {}), cfg.get("max_seq_len"), facts.get("stages"), unit
    )
    extra = facts.get("data", {}).get("extra_train") or []
    corpus = DATASETS.get(dataset, dataset) + "".join(
        f". Its training data also held the training split of {DATASETS.get(e, e)}" for e in extra
    )
    use = card.use.replace("{name}", name).replace("{repo_id}", repo_id)
    body = f"""
# {name}

`{model_name}` ({description}): {card.summary} of the attention-zoo library
(`model_type: {model_type}`), trained on {corpus}.

## Use

{use}

## Results

Measured with `zoo evaluate {name} [--split S] [--windows N]` ({direction});
`zoo evaluate {name} --registered` re-measures every row. Rows measured on a slice say so: only
"all" rows are the split's score.

| metric | data set | split | measured on | value | precision | decoding | hardware |
|---|---|---|---|---|---|---|---|
{results}
{caveats}{structure}{curve}{pictures}
## Training

| quantity | value |
|---|---|
| optimizer steps | {facts.get("optimizer_steps")} |
| training windows | {windows} |
| tokens | {f"{tokens:,}" if tokens else "unknown"} |
| wall time | {f"{wall:,.0f} s ({tokens / wall:,.0f} tokens/s)" if wall and tokens else "unknown"} |
| hardware | {facts.get("hardware") or "unknown"} |
| precision | {facts.get("precision") or "unknown"} |
| optimisation | {json.dumps(facts.get("optimization", {}))} |
| data | {json.dumps(facts.get("data", {}))} |

`recipe.yaml` is the recipe that trained it (`zoo fit --config recipe.yaml`); `training.json` has
these facts in machine-readable form.

## Configuration

| field | value |
|---|---|
{config_rows}

## Limitations

{card.limitations}
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")


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

Recorded in `checkpoints.yaml` (`structure`) and checked against the config by the tests;
`zoo list --attention {structure.get("pattern")}` and `--context` filter on it. {causal}

| field | value |
|---|---|
{rows}
"""


def _how(m: Metric) -> str:
    """The decoding settings of a BLEU row (``beam 4, α 0.6, average of 5``), else a dash."""
    if not m.decoding:
        return "–"
    return ", ".join(f"{k} {v}" for k, v in m.decoding.items())


def _bench_section(name: str, table: str | None, plot: str | None) -> str:
    if table is None:
        return ""
    lines = table.strip().splitlines()
    title = lines[0].removeprefix("# ").strip() if lines and lines[0].startswith("#") else ""
    body = "\n".join(lines[1:] if title else lines).strip()
    parts = [
        "\n## Speed and memory by sequence length\n",
        f"{title}, measured with `zoo bench {name}` (`bench.json` has the numbers). Run it on your "
        "machine to see yours.\n",
    ]
    if plot is not None:
        parts.append(f"![time and memory by sequence length]({plot})\n")
    parts.append(body + "\n")
    return "\n".join(parts)


def _samples_section(name: str, samples: list[str]) -> str:
    if not samples:
        return ""
    pictures = "\n\n".join(f"![{Path(p).stem.replace('_', ' ')}]({p})" for p in samples)
    return (
        "\n## Samples\n\n"
        f"Drawn with `zoo sample --checkpoint {name} --out samples.png --num-samples 8 "
        "--completions 8 --seed 0` (temperature 1.0). Completions keep the top half of test "
        "images; their rows are the given half, the completion, the original.\n\n"
        f"{pictures}\n"
    )


def _training_windows(
    data: dict[str, Any], context: int | None, stages: list[dict] | None = None, unit: str = "bytes"
) -> str:
    """``"8 x 1,024 bytes per optimizer step"``, saying so when the windows are shorter than the
    model's context (the positions past them are then never trained). A model trained in
    ``stages`` (``training.json``: each with ``recipe``, ``optimizer_steps``, ``batch_size``,
    ``seq_len``) gets one such line per stage."""
    if stages:
        return "; then ".join(
            f"{_training_windows(st, context, unit=unit)} for {st.get('optimizer_steps', '?'):,} steps "
            f"(`{st.get('recipe', '?')}`)"
            for st in stages
        )
    batch, seq_len = data.get("batch_size"), data.get("seq_len")
    if not batch or not seq_len:
        return "unknown"
    text = f"{batch} × {seq_len:,} {unit} per optimizer step"
    if context and seq_len < context:
        text += (
            f" (shorter than the context, {context:,}: positions {seq_len:,} and later are "
            "evaluated but never trained, an extrapolation of the position scheme)"
        )
    return text


def _by_position_section(name: str, table: str | None, plot: str | None) -> str:
    if table is None and plot is None:
        return ""
    parts = [
        "\n## Bits per byte by position\n",
        "Does the model use its context? Bits per byte at each position of the evaluation "
        f"window, measured with `zoo evaluate {name} --by-position` (`by_position.json` has the "
        "numbers):\n",
    ]
    if plot is not None:
        parts.append(f"![bits per byte by position in the window]({plot})\n")
    if table is not None:
        parts.append(table.strip() + "\n")
    return "\n".join(parts)


def export_run(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    name: str,
    recipe: str | os.PathLike,
    metrics: list[Metric],
    repo_id: str | None = None,
    by_position: str | os.PathLike | None = None,
    samples: str | os.PathLike | None = None,
    bench: str | os.PathLike | None = None,
) -> Path:
    """Write the publishable folder of a trained run (see the module docstring) to ``out_dir``.

    Args:
        source: a run directory (``runs/<family>/<dataset>``, its ``checkpoints/best.ckpt``), a
            ``.ckpt`` file of :class:`~zoo.tasks.CausalLM`, or a ``save_pretrained`` folder that
            holds its own ``training.json`` (a model trained and saved on another machine, e.g. a
            GPU whose Lightning checkpoint stayed there): its files are copied as they are (their
            dtype too), after the folder loads and matches its ``manifest.json``.
        name: the checkpoint's name, ``<model>.<dataset>``.
        recipe: the recipe YAML that trained it (copied as ``recipe.yaml``).
        metrics: the measured metrics (``zoo evaluate --out``) for the model card.
        repo_id: its Hub repo (default ``attention-zoo/<name>``), shown in the card.
        by_position: a folder from ``zoo evaluate --by-position`` (``--out-dir``): its
            ``by_position.md`` / ``.json`` / ``.png`` are copied into ``out_dir``. The card shows
            the curve and table whenever ``out_dir`` has these files.
        samples: an image model's sample grid from ``zoo sample --out PNG``: copied as
            ``samples.png``, with its ``<stem>_completions.png`` beside it when there is one.
        bench: a folder from ``zoo bench NAME --out-dir DIR``: its ``bench.md`` / ``.json`` /
            ``.png`` are copied, and the card shows them.

    The card's wording follows the task of the metrics (:func:`task_of`).

    Raises:
        CheckpointError: ``source`` is not a run, a checkpoint or a saved model with
        ``training.json``, or ``by_position`` holds none of the files; ChecksumError: the saved
        model does not match its manifest; ConfigError: no recipe file.
    """
    from zoo.evaluation import BY_POSITION_FILES, find_checkpoint
    from zoo.tasks import CausalLM

    saved = Path(source)
    ckpt_path = find_checkpoint(source)
    if ckpt_path is None and not (saved / "config.json").is_file():
        raise CheckpointError(
            f"{source} is neither a .ckpt file, a run directory with checkpoints/best.ckpt, nor "
            "a save_pretrained folder."
        )
    if ckpt_path is None and not (saved / "training.json").is_file():
        raise CheckpointError(
            f"{source} is a saved model without training.json: write its training facts there "
            "(optimizer_steps, tokens, wall_time_s, hardware, ...) to export it."
        )
    if not Path(recipe).is_file():
        raise ConfigError(
            f"recipe {recipe} does not exist: pass the YAML the run was trained with."
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if ckpt_path is None:
        from zoo.pretrained import MANIFEST_NAME, from_pretrained

        model = from_pretrained(
            saved.resolve()
        )  # loads, and checks every file against the manifest
        for f in ("config.json", "model.safetensors", MANIFEST_NAME, GOLDEN_NAME):
            if (saved / f).is_file() and (saved / f).resolve() != (out / f).resolve():
                shutil.copyfile(saved / f, out / f)
        facts = json.loads((saved / "training.json").read_text())
    else:
        module = CausalLM.load_from_checkpoint(ckpt_path, map_location="cpu")
        model = module.model
        model.save_pretrained(out)
        facts = training_facts(torch.load(ckpt_path, map_location="cpu", weights_only=False))
        facts["checkpoint"] = ckpt_path.name
    if ckpt_path is not None or not (out / GOLDEN_NAME).is_file():  # a saved model keeps its own
        record_golden(model, out)
    if Path(recipe).resolve() != (out / "recipe.yaml").resolve():
        shutil.copyfile(recipe, out / "recipe.yaml")
    config = json.loads((out / "config.json").read_text())
    facts["data"]["seq_len"] = facts["data"]["seq_len"] or config["config"].get("max_seq_len")
    (out / "training.json").write_text(json.dumps(facts, indent=2) + "\n")
    if by_position is not None:
        found = [f for f in BY_POSITION_FILES if (Path(by_position) / f).is_file()]
        if not found:
            raise CheckpointError(
                f"{by_position} has none of {list(BY_POSITION_FILES)}: write them with "
                f"`zoo evaluate {source} --by-position --out-dir {by_position}`."
            )
        for f in found:
            if (Path(by_position) / f).resolve() != (out / f).resolve():
                shutil.copyfile(Path(by_position) / f, out / f)
    if samples is not None:
        grid = Path(samples)
        if not grid.is_file():
            raise CheckpointError(
                f"{grid} does not exist: draw it with `zoo sample --checkpoint {source} --out {grid}`."
            )
        completions = grid.with_name(f"{grid.stem}_completions{grid.suffix}")
        for src, dst in ((grid, SAMPLE_FILES[0]), (completions, SAMPLE_FILES[1])):
            if src.is_file() and src.resolve() != (out / dst).resolve():
                shutil.copyfile(src, out / dst)
    if bench is not None:
        found = [f for f in BENCH_FILES if (Path(bench) / f).is_file()]
        if "bench.md" not in found:
            raise CheckpointError(
                f"{bench} has no bench.md: write it with `zoo bench {name} --out-dir {bench}`."
            )
        for f in found:
            if (Path(bench) / f).resolve() != (out / f).resolve():
                shutil.copyfile(Path(bench) / f, out / f)
    md, png = out / "by_position.md", out / "by_position.png"
    card = model_card(
        name,
        config,
        metrics,
        facts,
        repo_id or f"{DEFAULT_NAMESPACE}/{name}",
        task=task_of(metrics),
        by_position=md.read_text() if md.is_file() else None,
        by_position_plot=png.name if png.is_file() else None,
        samples=[f for f in SAMPLE_FILES if (out / f).is_file()],
        bench=(out / "bench.md").read_text() if (out / "bench.md").is_file() else None,
        bench_plot="bench.png" if (out / "bench.png").is_file() else None,
    )
    card.save(out / "README.md")
    return out


def refresh_card(name: str, registry: Registry | None = None) -> CheckpointEntry:
    """Render the model card of the registered checkpoint ``name`` again, from its shipped files
    and its registry entry (metrics, recipe, repo), and re-register it: for when the card's
    template changes. Weights and config are untouched; ``revision`` is kept only if the card
    did not change (a changed card must be pushed again).

    Raises:
        UnknownModelError: no such entry; CheckpointError: its shipped copy is not here.
    """
    registry = registry or load_registry()
    entry = registry.get(name)
    folder = registry.shipped_dir / entry.name
    if not (folder / "training.json").is_file():
        raise CheckpointError(f"{folder} has no shipped copy of {entry.name}: `zoo pull` it first.")
    before = sha256_file(folder / "README.md") if (folder / "README.md").is_file() else None
    export_run(folder, folder, name=entry.name, recipe=folder / "recipe.yaml",
               metrics=list(entry.metrics), repo_id=entry.repo_id)  # fmt: skip
    revision = entry.revision if sha256_file(folder / "README.md") == before else None
    return register(folder, name=entry.name, recipe=entry.recipe, metrics=list(entry.metrics),
                    repo_id=entry.repo_id, revision=revision, registry=registry)  # fmt: skip


def register(
    folder: str | os.PathLike,
    *,
    name: str,
    recipe: str,
    metrics: list[Metric],
    repo_id: str | None = None,
    revision: str | None = None,
    registry: Registry | None = None,
) -> CheckpointEntry:
    """Add (or replace) the ``checkpoints.yaml`` entry of an exported folder and save the file.

    Every file of the folder is recorded with its sha256 and size; ``revision`` stays ``None`` until
    ``zoo push --update-registry`` pins the commit the push created.
    """
    from zoo.registry import get_model_class, get_preset

    folder = Path(folder)
    registry = registry or load_registry()
    meta = json.loads((folder / "config.json").read_text())
    cls = get_model_class(meta["model_type"])
    with torch.device("meta"):
        model = cls(cls.config_class.from_dict(meta["config"]))  # type: ignore[attr-defined]
    facts = json.loads((folder / "training.json").read_text())
    model_name, _, dataset = name.rpartition(".")
    entry = CheckpointEntry(
        name=name,
        model=model_name,
        model_type=meta["model_type"],
        task=task_of(list(metrics)),
        parameters=sum(p.numel() for p in model.parameters()),
        dataset=dataset,
        description=get_preset(model_name).description,
        recipe=str(recipe),
        config=meta["config"],
        repo_id=repo_id or f"{DEFAULT_NAMESPACE}/{name}",
        revision=revision,
        files={
            f: {"sha256": sha256_file(folder / f), "size": (folder / f).stat().st_size}
            for f in PUBLISHED_FILES
            if (folder / f).is_file()
        },
        metrics=tuple(metrics),
        training={
            k: facts.get(k)
            for k in ("optimizer_steps", "tokens", "wall_time_s", "hardware", "precision")
        },  # fmt: skip
        structure=structure_of(meta, facts),
    )
    registry.with_entry(entry).save()
    return entry


def _refusal(e: HfHubHTTPError, repo_id: str) -> HubError:
    status = e.response.status_code if e.response is not None else None
    message = e.server_message or str(e).splitlines()[0]
    hint = {
        401: "No valid token was sent: set HF_TOKEN or run `hf auth login` with a write token.",
        403: f"Your token cannot write to {repo_id}: use a token with write access to "
        f"'{repo_id.split('/')[0]}', or push to your own namespace (--repo-id you/name).",
        404: f"The repository {repo_id} does not exist or is not visible to your token.",
    }.get(status or 0, "")
    return HubError(f"the Hub refused the push to {repo_id}: {status} {message}. {hint}".strip())


def push(
    source: str | os.PathLike,
    repo_id: str,
    *,
    name: str | None = None,
    recipe: str | os.PathLike | None = None,
    metrics: list[Metric] | None = None,
    branch: str | None = None,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Upload a published folder (or export a run first) to ``repo_id``; return the commit sha.

    ``source`` is a folder from :func:`export_run` (it must hold ``config.json`` and
    ``model.safetensors``), or a run / ``.ckpt`` with ``name``, ``recipe`` and ``metrics``. The
    repo is created if needed; only :data:`PUBLISHED_FILES` are uploaded, in one commit.

    Raises:
        HubError: the Hub refused (no token, no rights, ...), with the server's message.
    """
    folder = Path(source)
    tmp = None
    if not (folder / "config.json").is_file():
        if name is None or recipe is None:
            raise ConfigError(
                f"{source} is not an exported folder (no config.json); to push a run, give "
                "its checkpoint name and recipe (zoo push RUN --name NAME --recipe YAML)."
            )
        tmp = tempfile.TemporaryDirectory(prefix="zoo-push-")
        folder = export_run(
            source, tmp.name, name=name, recipe=recipe, metrics=metrics or [], repo_id=repo_id
        )
    missing = [f for f in ("config.json", "model.safetensors") if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"{folder} lacks {missing}: export it with `zoo export` first.")
    api = HfApi(endpoint=endpoint(), token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=branch,
            allow_patterns=list(PUBLISHED_FILES),
            commit_message=commit_message or f"Upload {folder.name} with attention-zoo",
        )
    except LocalTokenNotFoundError:
        raise HubError(
            f"no Hugging Face token to push to {repo_id}: set HF_TOKEN or run `hf auth login`."
        ) from None
    except HfHubHTTPError as e:
        raise _refusal(e, repo_id) from None
    finally:
        if tmp is not None:
            tmp.cleanup()
    return info.oid


def pin_revision(folder: str | os.PathLike, repo_id: str, revision: str) -> CheckpointEntry:
    """Record in ``checkpoints.yaml`` that the entry whose files are ``folder``'s is at
    ``repo_id@revision`` on the Hub.

    Raises:
        ConfigError: no registry entry has exactly these files (register it first).
    """
    registry = load_registry()
    folder = Path(folder)
    for entry in registry.entries.values():
        if all(
            (folder / f).is_file() and sha256_file(folder / f) == rec["sha256"]
            for f, rec in entry.files.items()
        ):
            from dataclasses import replace

            pinned = replace(entry, repo_id=repo_id, revision=revision)
            registry.with_entry(pinned).save()
            return pinned
    raise ConfigError(
        f"no entry of {registry.path} has exactly the files of {folder}: register it first "
        "(zoo export ... --register)."
    )
