"""`zoo export` of a run trained in stages (a second recipe whose ``init_from`` names the first
run): training.json and the card list every stage, and the totals are those of all of them."""

import json
from pathlib import Path

import torch
from fakes import fake_run

from zoo.hub import Metric
from zoo.publishing import export_run
from zoo.publishing.export import _with_earlier_stages

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes/sparse_transformer/pg19mini_fixed_v3_8heads_4096_400.yaml"


def _edit(run: Path, **changes) -> None:
    """Change a fake run's checkpoint as a real stage would have written it."""
    path = run / "checkpoints" / "best.ckpt"
    ckpt = torch.load(path, weights_only=False)
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
    assert f"for 30 steps (the run `{first}`); then 2 × 64 bytes per optimizer step" in card
    assert f"for 5 steps (`{RECIPE}`)" in card


def test_a_fine_tune_of_a_published_checkpoint_is_not_a_stage():
    facts = {"optimizer_steps": 7, "tokens": 10, "wall_time_s": 1.0,
             "lineage": {"parent": "transformer_lm_small.pg19mini"}}  # fmt: skip
    assert _with_earlier_stages(dict(facts), recipe="r.yaml") == facts
