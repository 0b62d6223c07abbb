"""`zoo export` of a run trained in stages (a second recipe whose ``init_from`` names the first
run): training.json and the card list every stage, and the totals are those of all of them."""

import json
from pathlib import Path

import torch
from fakes import fake_run

from zoo.hub import Metric
from zoo.publishing import export_run
from zoo.publishing.training import with_earlier_stages

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes/sparse_transformer/sparse_transformer_small.pg19mini.yaml"


def _edit(run: Path, **changes) -> None:
    """Change a fake run's checkpoint as a real stage would have written it."""
    path = run / "checkpoints" / "best.ckpt"
    ckpt = torch.load(path, weights_only=True)
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            ckpt[section][field] = value
        else:
            ckpt[section] = value
    torch.save(ckpt, path)


def _summary(tokens: int, wall: float, hardware: str) -> dict:
    return {"tokens": tokens, "wall_time": wall, "hardware": [hardware],
            "precision": "bf16-mixed", "git_commits": ["0" * 40],
            "data": {"dataset": "pg19mini", "splits": ["train"], "sha256": "f" * 64}}  # fmt: skip


def test_a_second_stage_exports_with_both_stages_and_their_totals(tmp_path):
    data = {"dataset": "pg19mini", "seed": 0}
    first = fake_run(tmp_path / "stage1", seed=1)
    _edit(first, global_step=30, callbacks={"TrainingSummary": _summary(3840, 20.0, "CPU A (1 threads)")},
          datamodule_hyper_parameters=data | {"batch_size": 4, "seq_len": 32})  # fmt: skip
    second = fake_run(tmp_path / "stage2", seed=2)
    _edit(second, global_step=5, hyper_parameters__init_from=str(first), hyper_parameters__lr=2e-4,
          callbacks={"TrainingSummary": _summary(640, 4.5, "CPU B (2 threads)")},
          datamodule_hyper_parameters=data | {"batch_size": 2, "seq_len": 64})  # fmt: skip
    metric = Metric("bits_per_byte", 8.0, "pg19mini", "test", None, 547, "32-true", context=64)
    out = export_run(second, tmp_path / "out", name="transformer_lm_tiny.pg19mini",
                     recipe=RECIPE, metrics=[metric])  # fmt: skip

    facts = json.loads((out / "training.json").read_text())
    assert [st.get("run") for st in facts["stages"]] == [str(first), None]
    assert [st.get("recipe") for st in facts["stages"]] == [None, str(RECIPE)]
    assert [(st["optimizer_steps"], st["tokens"], st["seq_len"], st["batch_size"])
            for st in facts["stages"]] == [(30, 3840, 32, 4), (5, 640, 64, 2)]  # fmt: skip
    assert facts["stages"][1]["lr"] == 2e-4
    assert (facts["optimizer_steps"], facts["tokens"], facts["wall_time_s"]) == (35, 4480, 24.5)
    assert facts["tokens_per_s"] == round(4480 / 24.5)
    assert facts["hardware"] == "CPU A (1 threads); CPU B (2 threads)"
    card = (out / "README.md").read_text()
    # the earlier run named by its folder's name, not by a path of the machine that trained it
    assert "for 30 steps (the run `stage1`); then 2 × 64 bytes per optimizer step" in card
    assert str(first) not in card
    assert f"for 5 steps (`{RECIPE}`)" in card


def test_a_fine_tune_of_a_published_checkpoint_is_not_a_stage():
    facts = {"optimizer_steps": 7, "tokens": 10, "wall_time_s": 1.0,
             "lineage": {"parent": "transformer_lm_small.pg19mini"}}  # fmt: skip
    assert with_earlier_stages(dict(facts), recipe="r.yaml") == facts


def _previous(folder: Path, **facts) -> Path:
    folder.mkdir(parents=True)
    (folder / "training.json").write_text(json.dumps(facts))
    return folder


def test_a_new_version_trained_on_from_the_previous_one_lists_both_stages(tmp_path):
    previous = _previous(tmp_path / "checkpoints" / "m.pg19mini", optimizer_steps=2000,
                         tokens=262_144_000, wall_time_s=376.6, hardware="GPU A",
                         data={"seq_len": 8192, "batch_size": 16}, optimization={"lr": 1e-3})  # fmt: skip
    facts = {"optimizer_steps": 1500, "tokens": 196_608_000, "wall_time_s": 248.9,
             "hardware": "GPU B", "data": {"seq_len": 8192, "batch_size": 16},
             "optimization": {"lr": 5e-4}, "lineage": {"parent": str(previous)}}  # fmt: skip
    staged = with_earlier_stages(dict(facts), "m.pg19mini", recipe="stage2.yaml")
    assert [st.get("checkpoint") for st in staged["stages"]] == [
        "m.pg19mini (previous version)",
        None,
    ]
    assert [st["lr"] for st in staged["stages"]] == [1e-3, 5e-4]
    assert (staged["optimizer_steps"], staged["tokens"], staged["wall_time_s"]) == (
        3500, 458_752_000, 625.5)  # fmt: skip
    assert staged["hardware"] == "GPU A; GPU B"
    # another checkpoint's folder: a fine-tune into a new model, one stage
    assert with_earlier_stages(dict(facts), "other.pg19mini", recipe="r.yaml") == facts


def test_training_facts_record_the_extra_training_sets():
    from zoo.publishing.training import training_facts

    data = {"dataset": "pg19mini", "extra_train": ["enwik8_prefix"]}
    ckpt = {"global_step": 3, "hyper_parameters": {}, "datamodule_hyper_parameters": data}
    assert training_facts(ckpt)["data"]["extra_train"] == ["enwik8_prefix"]
    ckpt["datamodule_hyper_parameters"]["extra_train"] = []
    assert "extra_train" not in training_facts(ckpt)["data"]


def test_training_facts_record_a_long_range_task_and_the_corpus_of_its_windows():
    """A run on LongRangeTaskDataModule (no ``dataset`` hyperparameter) records its task's
    settings, and pg19_repeats the corpus its windows come from (top2 v3 and v4 were patched by
    hand before)."""
    from zoo.data import LongRangeTaskDataModule
    from zoo.publishing.training import training_facts

    dm = LongRangeTaskDataModule(task="pg19_repeats", seq_len=512, n_pairs=2, rate=0.25,
                                 batch_size=4)  # fmt: skip
    assert dm.dataset == "pg19mini"
    ckpt = {
        "global_step": 3,
        "hyper_parameters": {},
        "datamodule_hyper_parameters": dict(dm.hparams),
    }
    data = training_facts(ckpt)["data"]
    assert (data["dataset"], data["task"], data["n_pairs"], data["rate"], data["seq_len"]) == (
        "pg19mini", "pg19_repeats", 2, 0.25, 512)  # fmt: skip
    mqar = LongRangeTaskDataModule(task="mqar", seq_len=256)
    assert mqar.dataset is None
    ckpt["datamodule_hyper_parameters"] = dict(mqar.hparams)
    data = training_facts(ckpt)["data"]
    assert (data["dataset"], data["task"]) == (None, "mqar")
    ckpt["datamodule_hyper_parameters"] = {"dataset": "pg19mini", "seq_len": 256}
    assert "task" not in training_facts(ckpt)["data"]


def test_a_saved_model_without_golden_logits_gets_its_own_not_the_previous_versions(tmp_path):
    """Re-publishing a checkpoint from a save_pretrained folder (a GPU run's export, its golden
    logits dropped to be recorded here) must not keep the previous version's golden.json."""
    from zoo.golden import verify

    metric = Metric("bits_per_byte", 8.0, "pg19mini", "test", None, 547, "32-true", context=64)
    kwargs = {"name": "transformer_lm_tiny.pg19mini", "recipe": RECIPE, "metrics": [metric]}
    previous = export_run(fake_run(tmp_path / "v1", seed=1), tmp_path / "published", **kwargs)
    saved = export_run(fake_run(tmp_path / "v2", seed=2), tmp_path / "saved", **kwargs)
    (saved / "golden.json").unlink()
    stale = (previous / "golden.json").read_text()
    export_run(saved, previous, **kwargs)
    assert (previous / "golden.json").read_text() != stale
    assert verify(previous).identical  # the folder's model reproduces its golden logits


def test_exporting_a_new_version_again_does_not_count_its_stage_twice(tmp_path):
    previous = _previous(tmp_path / "m.pg19mini", optimizer_steps=20, tokens=200,
                         wall_time_s=2.0, hardware="A", data={}, optimization={})  # fmt: skip
    facts = {"optimizer_steps": 10, "tokens": 100, "wall_time_s": 1.0, "hardware": "B",
             "data": {}, "optimization": {}, "lineage": {"parent": str(previous)}}  # fmt: skip
    once = with_earlier_stages(dict(facts), "m.pg19mini", recipe="r.yaml")
    (previous / "training.json").write_text(json.dumps(once))  # the first export's output
    twice = with_earlier_stages(dict(facts), "m.pg19mini", recipe="r.yaml")
    assert twice["stages"] == once["stages"] and twice["optimizer_steps"] == 30
