"""The repository's own registry and shipped checkpoints: checkpoints.yaml is valid and agrees with
the files under checkpoints/, the README table is generated from it, and every shipped checkpoint
re-measures its registered metric on the fixed slice of the test books. Every byte-level LM
registers its copy probe's gain (`copy_gain`) and publishes the curve; the short-context ones
re-measure it here (the others take minutes: `zoo evaluate NAME --registered --metric copy_gain`)."""

import json
import re
from pathlib import Path

import pytest

import zoo
from zoo.commands.listing import _readme_with_table, markdown_table
from zoo.evaluation import evaluate, remeasure
from zoo.hub import load_registry, sha256_file
from zoo.models.registry import get_preset
from zoo.probes import COPY_PROBE_FILES, default_distances, gain_metric, load_copy_probe
from zoo.publishing import structure_of
from zoo.publishing.card_sections import standalone
from zoo.publishing.export import folder_card

# retired checkpoints are loaded and re-measured like the others: their one warning is expected
pytestmark = pytest.mark.filterwarnings("ignore::zoo.errors.RetiredCheckpointWarning")

REPO = Path(__file__).resolve().parents[1]
REGISTRY = load_registry(REPO / "checkpoints.yaml")
ENTRIES = sorted(REGISTRY.entries.values(), key=lambda e: e.name)
FAMILIES = {
    "transformer_lm",
    "sparse_transformer_lm",
    "routing_transformer_lm",
    "transformer_seq2seq",
}
TASKS = {"causal_lm", "image_lm", "translation"}  # the pixel models: a family's image variant
TOLERANCE = {  # the registered value to its printed decimals (fp32 on different CPUs agrees to
    # ~1e-6 bits here), so a code change that alters a published model's outputs cannot land
    "bits_per_byte": 5e-5,
    "bits_per_dim": 5e-5,
    "bleu": 0.005,  # BLEU: fp32 beam search, printed to 2 decimals
    "copy_gain": 5e-5,
}
BYTE_LMS = [e for e in ENTRIES if e.task == "causal_lm"]


def test_every_family_and_task_has_a_published_checkpoint():
    assert {e.model_type for e in ENTRIES} >= FAMILIES
    assert {e.task for e in ENTRIES} == TASKS


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_agrees_with_its_shipped_files(entry):
    folder = REGISTRY.shipped_dir / entry.name
    assert sorted(p.name for p in folder.iterdir()) == sorted(entry.files)
    for name, record in entry.files.items():
        assert (folder / name).stat().st_size == record["size"], name
        assert sha256_file(folder / name) == record["sha256"], name
    for name, record in entry.files.items():  # small enough to ship: the repository's rule
        assert not name.endswith(".safetensors") or record["size"] <= 60e6, name
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == entry.model_type and config["config"] == entry.config
    assert get_preset(entry.model).family == entry.model_type
    assert (REPO / entry.recipe).is_file()
    assert entry.headline.split == "test" and entry.headline.windows is None
    assert any(m.windows is not None for m in entry.metrics)  # the slice below
    card = (folder / "README.md").read_text()  # every card: a benchmark by length and lineage
    assert "bench.md" in entry.files and "## Speed and memory by sequence length" in card
    assert "## Lineage" in card and "golden.json" in entry.files
    assert entry.training["tokens"] > 0
    if entry.training["wall_time_s"] is None:  # only where training.json says why, and the card
        note = json.loads((folder / "training.json").read_text())["wall_time_note"]
        assert f"| wall time | {standalone(note)} |" in card
    else:
        assert entry.training["wall_time_s"] > 0


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_every_card_stands_alone_and_is_rendered_from_its_shipped_files(entry):
    """The card is what `zoo.publishing.refresh_card` renders from the files beside it (so a
    template change re-renders every card), says how to load the model, re-measure each metric and
    what its limits are, and names nothing that exists only in a clone of the zoo or on the
    machine that made it: no docs page, log section, local path or session date."""
    folder = REGISTRY.shipped_dir / entry.name
    config = json.loads((folder / "config.json").read_text())
    facts = json.loads((folder / "training.json").read_text())
    card = (folder / "README.md").read_text()
    rendered = folder_card(folder, entry.name, config, list(entry.metrics), facts, entry.repo_id)
    assert str(rendered) == card, f"run zoo.publishing.refresh_card({entry.name!r})"
    assert f'zoo.from_pretrained("{entry.name}")' in card and "## Limitations" in card
    assert f"`zoo evaluate {entry.name} --split {entry.headline.split}" in card
    body = card.split("\n---\n", 1)[1]
    for local in ("docs/", "§", "runs/", "./", "/work", "/home", "/tmp", "../"):
        assert local not in body, local
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", body)
    for link in re.findall(r"\]\(([^)]+)\)", body):  # pictures and links: files beside the card
        assert link.startswith("https://") or link in entry.files, link


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_structure_metadata_is_what_the_config_and_training_say(entry):
    """The registry's attention structure is the config's, recomputed from the shipped files: a
    hand edit or a config change that the metadata does not follow fails here."""
    folder = REGISTRY.shipped_dir / entry.name
    config = json.loads((folder / "config.json").read_text())
    facts = json.loads((folder / "training.json").read_text())
    assert entry.structure == structure_of(config, facts)
    assert entry.structure["context"] == entry.config["max_seq_len"]
    card = (folder / "README.md").read_text()
    assert (
        "## Attention structure" in card
        and f"| `pattern` | `{entry.structure['pattern']}` |" in card
    )


def test_no_retired_checkpoint_is_the_readme_default():
    """`make run` (the README's two commands) uses the Makefile's CHECKPOINT: never a retired one."""
    (default,) = re.findall(r"^CHECKPOINT \?= (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert REGISTRY.get(default).retired is None


def first_test_bits_per_byte(entry) -> float:
    return next(m.value for m in entry.metrics if m.name == "bits_per_byte" and m.split == "test")


def test_every_active_long_context_lm_beats_every_active_short_one_on_pg19mini():
    """Issue 53's goal, kept by the registry: every active pg19mini LM of 4,096+ bytes of context
    has a lower first test bits/byte than every active one of <= 512; a checkpoint that loses is
    retrained, fine-tuned or retired (docs/checkpoints.md, "Retired checkpoints")."""
    lms = [e for e in BYTE_LMS if e.dataset == "pg19mini" and e.retired is None]
    long = {e.name: first_test_bits_per_byte(e) for e in lms if e.structure["context"] >= 4096}
    short = {e.name: first_test_bits_per_byte(e) for e in lms if e.structure["context"] <= 512}
    assert long and short
    best_short = min(short, key=short.get)
    losers = {n: v for n, v in long.items() if v >= short[best_short]}
    assert not losers, f"{losers} do not beat {best_short} ({short[best_short]})"


def test_readme_table_is_generated_from_the_registry():
    readme = (REPO / "README.md").read_text()
    assert _readme_with_table(readme, markdown_table(ENTRIES)) == readme, (
        "README.md's checkpoint table is out of date: run `zoo list --write-readme`"
    )


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_shipped_checkpoint_re_measures_its_registered_metric(entry, data_dir, monkeypatch):
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    model = zoo.from_pretrained(entry.name, dtype="float32")  # offline: the shipped copy, fp32
    # the registered config may predate fields added since (with defaults that keep the model)
    registered_config = type(model.config).from_dict(entry.config)
    assert not model.training and model.config == registered_config
    # the slices of the split; copy_gain: test_every_byte_lm_registers_its_copy_gain below
    for registered in (m for m in entry.metrics if m.windows is not None and m.name != "copy_gain"):
        measured = evaluate(
            entry.name,
            dataset=registered.dataset,
            split=registered.split,
            windows=registered.windows,
            precision=registered.precision,
            decoding=registered.decoding,
            data_dir=str(data_dir),
            progress=False,
        )
        assert measured.targets == registered.targets
        assert measured.decoding == registered.decoding
        assert measured.value == pytest.approx(registered.value, abs=TOLERANCE[registered.name])


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_shipped_checkpoint_verifies_its_golden_logits(entry, monkeypatch):
    """`zoo verify` on every shipped checkpoint: a change that alters a published model's outputs
    (code, kernels, a torch upgrade beyond fp32 noise) fails here."""
    from zoo.golden import verify

    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    assert "golden.json" in entry.files
    verdict = verify(entry.name)
    assert verdict.ok, verdict.summary()


@pytest.mark.parametrize("entry", BYTE_LMS, ids=lambda e: e.name)
def test_every_byte_lm_registers_its_copy_gain_and_publishes_its_curve(entry):
    """The copy probe's gain at d = 1,024 (at the largest distance that fits, for a shorter
    context), at the probe's defaults, as its published curve has it; the curve in the card."""
    (gain,) = [m for m in entry.metrics if m.name == "copy_gain"]
    context = entry.structure["context"]
    distance = 1024 if context >= 4096 else default_distances(context, 32)[-1]
    assert gain.probe == {"distance": distance, "span": 32, "cue": 8, "seed": 0}
    assert (gain.dataset, gain.split, gain.windows, gain.targets, gain.precision, gain.context) == (
        entry.dataset, "test", 32, 32 * 24, "32-true", context
    )  # fmt: skip
    assert gain.hardware and gain.date
    assert set(COPY_PROBE_FILES) <= set(entry.files)
    folder = REGISTRY.shipped_dir / entry.name
    probe = load_copy_probe(folder)
    assert probe.source == entry.name and probe.max_seq_len == context
    assert gain_metric(probe, distance, hardware=gain.hardware, date=gain.date) == gain
    card = (folder / "README.md").read_text()
    assert "## Retrieval at a distance (copy probe)" in card and "(copy_probe.png)" in card
    assert f"`zoo evaluate {entry.name} --registered --metric copy_gain`" in card


def test_only_byte_lms_have_a_copy_gain():
    """The probe refuses image and translation models: their entries carry neither."""
    assert len(BYTE_LMS) >= 8
    for entry in ENTRIES:
        if entry.task != "causal_lm":
            assert not any(m.name == "copy_gain" for m in entry.metrics), entry.name
            assert not set(COPY_PROBE_FILES) & set(entry.files), entry.name


@pytest.mark.parametrize(
    "entry", [e for e in BYTE_LMS if e.structure["context"] <= 256], ids=lambda e: e.name
)
def test_shipped_short_context_lm_re_measures_its_copy_gain(entry, data_dir, monkeypatch):
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    (gain,) = [m for m in entry.metrics if m.name == "copy_gain"]
    measured = remeasure(entry.name, gain, data_dir=str(data_dir), progress=False)
    assert measured.probe == gain.probe and measured.targets == gain.targets
    assert measured.value == pytest.approx(gain.value, abs=TOLERANCE["copy_gain"])
