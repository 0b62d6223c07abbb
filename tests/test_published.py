"""The repository's own registry and shipped checkpoints: checkpoints.yaml is valid and agrees with
the files under checkpoints/, the README table is generated from it, and every shipped checkpoint
re-measures its registered metric on the fixed slice of the test books."""

import json
from pathlib import Path

import pytest

import zoo
from zoo.evaluation import evaluate
from zoo.hub import load_registry, sha256_file
from zoo.publishing import structure_of
from zoo.publishing.cli import _readme_with_table, markdown_table
from zoo.registry import get_preset

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
}


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
    assert entry.training["tokens"] > 0 and entry.training["wall_time_s"] > 0


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


def test_readme_table_is_generated_from_the_registry():
    readme = (REPO / "README.md").read_text()
    assert _readme_with_table(readme, markdown_table(ENTRIES)) == readme, (
        "README.md's checkpoint table is out of date: run `zoo list --write-readme`"
    )


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_shipped_checkpoint_re_measures_its_registered_metric(entry, data_dir, monkeypatch):
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    model = zoo.from_pretrained(entry.name)  # offline: the shipped copy, verified
    # the registered config may predate fields added since (with defaults that keep the model)
    registered_config = type(model.config).from_dict(entry.config)
    assert not model.training and model.config == registered_config
    for registered in (m for m in entry.metrics if m.windows is not None):
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
