"""Publishing a trained run: export it as a Hub-ready folder and register it.

The folder (``zoo export``) holds exactly what is pushed and shipped under ``checkpoints/<name>/``:

- ``config.json`` and ``model.safetensors`` (``save_pretrained``; never pickles),
- ``README.md``, the model card (:mod:`zoo.publishing.cards`),
- ``recipe.yaml``, the recipe that trained it (``zoo fit --config recipe.yaml`` reproduces it),
- ``golden.json``: logits of a fixed input (:mod:`zoo.golden`), which ``zoo verify`` recomputes,
- ``training.json``: what trained it (:mod:`zoo.publishing.training`),
- optionally ``by_position.*`` (bits per byte by position), ``by_context.*`` (by context
  length), ``copy_probe.*`` (the copy probe's retrieval by distance, byte-level LMs),
  ``samples*.png`` (image models) and ``bench.*`` (``zoo bench``), each shown in the card.

Published files name checkpoints, not folders of the machine that trained them: the parent
(``init_from``) is written as :func:`zoo.lineage.checkpoint_name` gives it, and the card calls
the measured model by the checkpoint's name.

:func:`register` records the folder in ``checkpoints.yaml``; :func:`refresh_card` renders a
registered checkpoint's card again from its shipped files, writing nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import warnings
from pathlib import Path

import torch

from zoo.errors import CheckpointError, ConfigError
from zoo.files import contained_path
from zoo.golden import GOLDEN_NAME
from zoo.golden import record as record_golden
from zoo.hub.download import sha256_file
from zoo.hub.registry import Registry, load_registry
from zoo.hub.schema import NAME_PATTERN, CheckpointEntry, Metric
from zoo.lineage import checkpoint_name
from zoo.publishing.cards import model_card, structure_of, task_of
from zoo.publishing.training import data_checksum_at_export, training_facts, with_earlier_stages
from zoo.tasks.checkpoint import read_checkpoint

__all__ = [
    "BENCH_FILES",
    "DEFAULT_NAMESPACE",
    "PUBLISHED_FILES",
    "SAMPLE_FILES",
    "checked_name",
    "export_run",
    "folder_card",
    "refresh_card",
    "register",
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
    "by_context.md",  # optional: bits per byte of the same bytes by context length (zoo evaluate
    "by_context.json",  # --by-context), shown in the model card
    "by_context.png",
    "copy_probe.md",  # optional: retrieval gain by distance of a planted span (zoo evaluate
    "copy_probe.json",  # --probe copy, zoo.probes), shown in the model card
    "copy_probe.png",
    "attention.md",  # optional: a translation model's attention support and one sentence's
    "attention.json",  # attention map (zoo evaluate --attention, zoo.support), in the card
    "attention.png",
    "samples.png",  # optional: image models' samples and completions (zoo sample), in the card
    "samples_completions.png",
    "bench.md",  # optional: time and memory by sequence length on one machine (zoo bench),
    "bench.json",  # shown in the card
    "bench.png",
)
SAMPLE_FILES = ("samples.png", "samples_completions.png")
BENCH_FILES = ("bench.md", "bench.json", "bench.png")
DEFAULT_NAMESPACE = "attention-zoo"


def checked_name(name: str) -> str:
    """``name`` if it is a published name, ``<model>.<dataset>`` of lowercase letters, digits and
    ``_`` (:data:`~zoo.hub.schema.NAME_PATTERN`): it becomes the registry's key and the folder
    ``checkpoints/<name>``, so it can hold no ``/`` or ``..``.

    Raises:
        ConfigError: one line naming it and the rule, before anything is read or written.
    """
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        raise ConfigError(
            f"{name!r} (--name) is not a published name: '<model>.<dataset>', lowercase letters, "
            "digits and '_' on each side, no '/' or '..' (e.g. transformer_lm_small.pg19mini); "
            "nothing was written."
        )
    return name


def _checked_out(out: Path, doing: str) -> None:
    """Refuse to write into (or hash from) ``out`` through a link: a published file already there
    must be a regular file of the folder (a symlink would send a write, or a read, wherever it
    points). ``doing``: what for, in the message (``"exporting to runs/x"``).

    Raises:
        UnsafePathError: naming the file; nothing was written.
    """
    for f in PUBLISHED_FILES:
        contained_path(
            out, f, what=doing, allow_links=False,
            fix="put the file itself there (or remove it: the export writes it) and run it again",
        )  # fmt: skip


def export_run(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    name: str,
    recipe: str | os.PathLike,
    metrics: list[Metric],
    repo_id: str | None = None,
    by_position: str | os.PathLike | None = None,
    by_context: str | os.PathLike | None = None,
    copy_probe: str | os.PathLike | None = None,
    samples: str | os.PathLike | None = None,
    bench: str | os.PathLike | None = None,
    attention: str | os.PathLike | None = None,
) -> Path:
    """Write the publishable folder of a trained run (see the module docstring) to ``out_dir``.

    Args:
        source: a run directory (``runs/<family>/<dataset>``, its ``checkpoints/best.ckpt``), a
            ``.ckpt`` file of any zoo task (``CausalLM``, ``ImageLM``, ``Translation``), or a
            ``save_pretrained`` folder that holds its own ``training.json`` (a model trained and
            saved on another machine, e.g. a GPU whose Lightning checkpoint stayed there): its files
            are copied as they are (their dtype too), after the folder loads and matches its
            ``manifest.json``.
        name: the checkpoint's name, ``<model>.<dataset>``.
        recipe: the recipe YAML that trained it (copied as ``recipe.yaml``).
        metrics: the measured metrics (``zoo evaluate --out``) for the model card.
        repo_id: its Hub repo (default ``attention-zoo/<name>``), shown in the card.
        by_position: a folder from ``zoo evaluate --by-position`` (``--out-dir``): its
            ``by_position.md`` / ``.json`` / ``.png`` are copied into ``out_dir``. The card shows
            the curve and table whenever ``out_dir`` has these files.
        by_context: a folder from ``zoo evaluate --by-context`` (``--out-dir``): its
            ``by_context.md`` / ``.json`` / ``.png`` are copied likewise and shown in the card.
        copy_probe: a folder from ``zoo evaluate --probe copy`` (``--out-dir``): its
            ``copy_probe.md`` / ``.json`` / ``.png`` are copied likewise and shown in the card.
        samples: an image model's sample grid from ``zoo sample --out PNG``: copied as
            ``samples.png``, with its ``<stem>_completions.png`` beside it when there is one.
        bench: a folder from ``zoo bench NAME --out-dir DIR``: its ``bench.md`` / ``.json`` /
            ``.png`` are copied, and the card shows them.
        attention: a translation model's folder from ``zoo evaluate --attention``
            (``--out-dir``): its ``attention.md`` / ``.json`` / ``.png`` are copied and shown.

    The card's wording follows the task of the metrics (:func:`task_of`).

    Raises:
        CheckpointError: ``source`` is not a run, a checkpoint or a saved model with
            ``training.json``, ``by_position``, ``by_context``, ``copy_probe`` or ``attention``
            holds none of its files, or ``bench`` has no ``bench.md``.
        ChecksumError: the saved model does not match its manifest.
        ConfigError: no recipe file, or ``name`` is not a published name (:func:`checked_name`).
        UnsafePathError: a file of ``out_dir`` is a symlink or not a regular file (nothing is
            written through it).
    """
    checked_name(name)
    saved, ckpt_path = _checked_source(source, recipe)
    out = Path(out_dir)
    _checked_out(out, f"exporting to {out}")
    out.mkdir(parents=True, exist_ok=True)
    model, facts = _weights_and_facts(saved, ckpt_path, out, name, recipe)
    if ckpt_path is not None or not (saved / GOLDEN_NAME).is_file():  # a saved model keeps its own
        record_golden(model, out)
    if Path(recipe).resolve() != (out / "recipe.yaml").resolve():
        shutil.copyfile(recipe, out / "recipe.yaml")
    config = json.loads((out / "config.json").read_text())
    facts["data"]["seq_len"] = facts["data"]["seq_len"] or config["config"].get("max_seq_len")
    lineage = facts.get("lineage") or {}
    if lineage.get("parent"):  # a checkpoint's name or its run's recipe, not a local folder
        lineage["parent"] = checkpoint_name(lineage["parent"])
    (out / "training.json").write_text(json.dumps(facts, indent=2) + "\n")
    _copy_extras(source, out, name, by_position, by_context, copy_probe, samples, bench)
    if attention is not None:
        from zoo.support import FILES as ATTENTION_FILES

        _copy_measured(attention, ATTENTION_FILES, ATTENTION_FILES, out,
                       f"zoo evaluate {source} --attention --out-dir {attention}")  # fmt: skip
        _warn_local_source(out, "attention", name, flag="--attention")
    folder_card(out, name, config, metrics, facts, repo_id).save(out / "README.md")
    return out


def _checked_source(source, recipe) -> tuple[Path, Path | None]:
    """``source`` as a folder and its Lightning checkpoint (None: a saved model), once it is one
    that :func:`export_run` takes and the recipe exists."""
    from zoo.pretrained import find_checkpoint

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
    return saved, ckpt_path


def _weights_and_facts(saved: Path, ckpt_path: Path | None, out: Path, name: str, recipe):
    """Write the weights and config into ``out``; return the model and its training facts (a
    saved model's ``training.json``, or read from the checkpoint), with earlier stages."""
    from zoo.loading import load_task

    if ckpt_path is None:
        from zoo.files import MANIFEST_NAME
        from zoo.pretrained import from_pretrained

        model = from_pretrained(
            saved.resolve()
        )  # loads, and checks every file against the manifest
        for f in ("config.json", "model.safetensors", MANIFEST_NAME, GOLDEN_NAME):
            if (saved / f).is_file() and (saved / f).resolve() != (out / f).resolve():
                shutil.copyfile(saved / f, out / f)
        facts = with_earlier_stages(
            json.loads((saved / "training.json").read_text()), name, recipe=str(recipe)
        )  # read before this export writes training.json over a previous version's
        if not (facts.get("lineage") or {}).get("data"):  # exported before it was recorded
            data = data_checksum_at_export(model.config.max_seq_len, facts.get("data", {}))
            if data is not None:
                facts.setdefault("lineage", {})["data"] = data
    else:
        module = load_task(ckpt_path)  # the task it was saved from
        model = module.model
        model.save_pretrained(out)  # with tokenizer.json for a translation model
        ckpt = read_checkpoint(ckpt_path)  # as data (torch.load weights_only=True)
        facts = with_earlier_stages(training_facts(ckpt, ckpt_path), name, recipe=str(recipe))
        facts["checkpoint"] = ckpt_path.name
        if facts["lineage"]["data"] is None:  # trained before the checksum was recorded
            facts["lineage"]["data"] = data_checksum_at_export(
                model.config.max_seq_len, facts["data"]
            )
    return model, facts


def _copy_extras(source, out: Path, name: str, by_position, by_context, copy_probe, samples,
                 bench) -> None:  # fmt: skip
    """Copy the measured curves, sample grids and bench files that :func:`export_run` was given."""
    from zoo.probes import COPY_PROBE_FILES
    from zoo.profiles import BY_CONTEXT_FILES, BY_POSITION_FILES

    if by_position is not None:
        _copy_measured(by_position, BY_POSITION_FILES, BY_POSITION_FILES, out,
                       f"zoo evaluate {source} --by-position --out-dir {by_position}")  # fmt: skip
        _warn_local_source(out, "by_position", name)
    if by_context is not None:
        _copy_measured(by_context, BY_CONTEXT_FILES, BY_CONTEXT_FILES, out,
                       f"zoo evaluate {source} --by-context --out-dir {by_context}")  # fmt: skip
        _warn_local_source(out, "by_context", name)
    if copy_probe is not None:
        _copy_measured(copy_probe, COPY_PROBE_FILES, COPY_PROBE_FILES, out,
                       f"zoo evaluate {source} --probe copy --out-dir {copy_probe}")  # fmt: skip
        _warn_local_source(out, "copy_probe", name, flag="--probe copy")
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
        _copy_measured(bench, BENCH_FILES, ("bench.md",), out,
                       f"zoo bench {name} --out-dir {bench}")  # fmt: skip


def folder_card(
    out: Path, name: str, config: dict, metrics: list[Metric], facts: dict, repo_id: str | None
):
    """The model card of the exported folder ``out`` (``config``, ``facts``: its ``config.json``
    and ``training.json``), showing whatever curves and pictures it holds; nothing is written."""
    from zoo.probes import load_copy_probe
    from zoo.profiles import load_context_profile

    md, png = out / "by_position.md", out / "by_position.png"
    ctx_md, ctx_png = out / "by_context.md", out / "by_context.png"
    card = model_card(
        name,
        config,
        metrics,
        facts,
        repo_id or f"{DEFAULT_NAMESPACE}/{name}",
        task=task_of(metrics),
        by_position=_named(md, _profile_source(out, "by_position"), name),
        by_position_plot=png.name if png.is_file() else None,
        by_context=_named(ctx_md, _profile_source(out, "by_context"), name),
        by_context_plot=ctx_png.name if ctx_png.is_file() else None,
        by_context_command=(
            load_context_profile(out).command(name) if (out / "by_context.json").is_file() else None
        ),  # fmt: skip
        copy_probe=_named(out / "copy_probe.md", _profile_source(out, "copy_probe"), name),
        copy_probe_plot="copy_probe.png" if (out / "copy_probe.png").is_file() else None,
        copy_probe_command=(
            load_copy_probe(out).command(name) if (out / "copy_probe.json").is_file() else None
        ),  # fmt: skip
        samples=[f for f in SAMPLE_FILES if (out / f).is_file()],
        attention=_attention_of(out, name),
        bench=_named_bench(out, name),
        bench_plot="bench.png" if (out / "bench.png").is_file() else None,
    )
    return card


def _named_bench(out: Path, name: str) -> str | None:
    """``bench.md``'s text for the card, its title naming the checkpoint ``name`` where it names
    the folder it was measured from (``Benchmark of ./checkpoints/<name> on ...``)."""
    if not (out / "bench.md").is_file():
        return None
    text = (out / "bench.md").read_text()
    measured = _profile_source(out, "bench", key="name")
    if measured and measured != name:
        text = text.replace(f"Benchmark of {measured} on ", f"Benchmark of {name} on ", 1)
    return text


def _attention_of(out: Path, name: str):
    """The attention profile in ``out`` (``attention.json``) for the card, or ``None``."""
    from zoo.support import load_attention_profile

    if not (out / "attention.json").is_file():
        return None
    return dataclasses.replace(load_attention_profile(out), source=name)


def _profile_source(out: Path, stem: str, key: str = "source") -> str | None:
    """The ``source`` (or ``key``) that ``out/<stem>.json`` (a by-position or by-context profile,
    a bench card) records."""
    try:
        return str(json.loads((out / f"{stem}.json").read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _named(md: Path, source: str | None, name: str) -> str | None:
    """The text of a profile's markdown ``md`` for the card, calling the model ``name`` where it
    says `` `source` `` (``None`` without the file)."""
    if not md.is_file():
        return None
    text = md.read_text()
    return text.replace(f"`{source}`", f"`{name}`") if source and source != name else text


def _warn_local_source(out: Path, stem: str, name: str, flag: str | None = None) -> None:
    """Warn when the profile copied to ``out/<stem>.*`` calls the model by a local path: those
    files are published as measured (the card names ``name``). ``flag``: the ``zoo evaluate``
    option that measures it (default ``--<stem>``, dashed)."""
    from zoo.files import explicit_path

    source = _profile_source(out, stem)
    if source is None or explicit_path(source) is None:
        return
    warnings.warn(
        f"{stem}.json/.md/.png call the model {source!r}, a local path, and are published as "
        f"measured (the card says {name}): measure with `zoo evaluate {source} "
        f"{flag or '--' + stem.replace('_', '-')} --name {name}` to name the checkpoint in them too",
        stacklevel=3,
    )


def _copy_measured(
    folder: str | os.PathLike, files: tuple[str, ...], needed: tuple[str, ...], out: Path, how: str
) -> None:
    """Copy those of ``files`` that ``folder`` holds into ``out``.

    Raises:
        CheckpointError: ``folder`` holds none of ``needed``; the message says how to write them
        (the command ``how``).
    """
    found = [f for f in files if (Path(folder) / f).is_file()]
    if not any(f in found for f in needed):
        missing = f"no {needed[0]}" if len(needed) == 1 else f"none of {list(needed)}"
        raise CheckpointError(f"{folder} has {missing}: write {'them' if len(needed) > 1 else 'it'} "
                              f"with `{how}`.")  # fmt: skip
    for f in found:
        if (Path(folder) / f).resolve() != (out / f).resolve():
            shutil.copyfile(Path(folder) / f, out / f)


def refresh_card(name: str, registry: Registry | None = None) -> CheckpointEntry:
    """Render the model card of the registered checkpoint ``name`` again from its shipped files
    (``config.json``, ``training.json``, the curves, samples and bench files beside it) and its
    registry entry (metrics, repo), for when the card's template changes. Nothing is measured or
    loaded, and only ``README.md`` is written; the entry changes only in ``README.md``'s sha256
    and size, and its ``revision`` is dropped if the card changed (a changed card must be pushed
    again). ``zoo export --register`` from the shipped folder exports everything again instead.

    Raises:
        UnknownModelError: no such entry.
        CheckpointError: its shipped copy is not here.
        UnsafePathError: a file of the folder is a symlink or not a regular file.
    """
    registry = registry or load_registry()
    entry = registry.get(name)
    folder = registry.shipped_dir / entry.name
    if not (folder / "training.json").is_file() or not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} has no shipped copy of {entry.name}: `zoo pull` it first.")
    _checked_out(folder, f"rendering the card of {folder}")
    config = json.loads((folder / "config.json").read_text())
    facts = json.loads((folder / "training.json").read_text())
    card = folder_card(folder, entry.name, config, list(entry.metrics), facts, entry.repo_id)
    card.save(folder / "README.md")
    readme = {"sha256": sha256_file(folder / "README.md"),
              "size": (folder / "README.md").stat().st_size}  # fmt: skip
    if entry.files.get("README.md") == readme:
        return entry
    entry = dataclasses.replace(entry, files=entry.files | {"README.md": readme}, revision=None)
    registry.with_entry(entry).save()
    return entry


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
    ``zoo push --update-registry`` pins the commit the push created. Replacing an entry keeps its
    retirement (``retired``: a decision of the registry, not a file of the folder).

    Raises:
        ConfigError: ``name`` is not a published name (:func:`checked_name`); UnsafePathError: a
            file of ``folder`` is a symlink or not a regular file (nothing of it is hashed).
    """
    from zoo.models.registry import get_model_class, get_preset

    checked_name(name)
    folder = Path(folder)
    _checked_out(folder, f"registering {folder}")
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
        }
        | {"parent": checkpoint_name((facts.get("lineage") or {}).get("parent"))},  # fmt: skip
        structure=structure_of(meta, facts),
        retired=registry.entries[name].retired if name in registry.entries else None,
    )
    registry.with_entry(entry).save()
    return entry
