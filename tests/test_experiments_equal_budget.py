"""experiments/long_range/equal_budget.py: every run builds a model of the shared size with the
base config's context, the runs differ only in their attention, and the report orders runs, marks
a non-causal model and writes its table, JSON and picture."""

import json

import pytest
import torch
import yaml
from fakes import recipe_module

from zoo import create_model

equal_budget = recipe_module("experiments/long_range/equal_budget.py")


BASES = [equal_budget.BASE, *(equal_budget.HERE / name for name in equal_budget.TABLES)]
EVERY_RUN = [(base, name) for base in BASES for name in equal_budget.runs_of(base)]


def _parameters(model) -> int:
    """Parameters outside the output layer (the Sparse Transformer's is untied)."""
    head = {id(model.lm_head.weight)} if model.lm_head.weight is not model.tok_emb.weight else set()
    return sum(p.numel() for p in model.parameters() if id(p) not in head)


@pytest.mark.parametrize(("base", "name"), EVERY_RUN, ids=lambda x: getattr(x, "name", x))
def test_every_run_builds_a_model_of_the_shared_size(base, name):
    preset, overrides, _ = equal_budget.runs_of(base)[name]
    size = equal_budget.size_of(base)
    changed = set(overrides) & set(size)
    assert changed <= {"d_ff"}, "a run may change the shared size only to balance parameters"
    model = create_model(preset, **{**size, **overrides})
    config = yaml.safe_load(base.read_text())
    assert model.config.max_seq_len == config["data"]["init_args"]["seq_len"]
    for key, value in size.items():
        assert key in changed or getattr(model.config, key) == value
    dense = create_model("transformer_lm_small_moba", **size, attention="dense")
    assert abs(_parameters(model) / _parameters(dense) - 1) <= 0.05
    logits = model(torch.randint(0, 256, (1, 64))).logits
    assert logits.shape == (1, 64, 256)


def test_only_the_top_w_run_is_not_causal():
    causal = {}
    for name, (preset, overrides, _) in equal_budget.RUNS.items():
        structure = create_model(preset, **{**equal_budget.SIZE, **overrides}).config.structure()
        causal[name] = structure.get("causal") is not False
    assert [n for n, c in causal.items() if not c] == ["routing_topw"]


def _result(name, seed, accuracy, causal=True):
    return {
        "name": name, "seed": seed, "reach": f"{name}'s reach", "steps": 10, "chance": 0.1,
        "lower": [16, 512], "items": [5, 5], "byte_accuracy": accuracy,
        "item_accuracy": accuracy, "best_val_bpb": 1.5, "tokens_per_s": 1000.0, "wall_s": 120.0,
        "causal": causal,
    }  # fmt: skip


def test_report_orders_runs_marks_top_w_and_writes_table_json_png(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    for r in [
        _result("routing_topw", 0, [1.0, 1.0], causal=False),
        _result("local_128", 1, [0.9, 0.12]),
        _result("local_128", 0, [0.95, 0.1]),
        _result("dense_1024", 0, [1.0, 0.99]),
    ]:
        folder = runs / f"{r['name']}_s{r['seed']}"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps(r))
    equal_budget.report(runs, out)
    table = (out / "equal_budget.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "seed" not in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| dense_1024", "| local_128", "| local_128", "| routing_topw †",
    ]  # fmt: skip
    assert rows[1].split(" | ")[1:4] == ["0", "0.950", "0.100"]
    assert "| 16–31 | 512–1,023 |" in table
    saved = json.loads((out / "equal_budget.json").read_text())
    assert [(r["name"], r["seed"]) for r in saved][:3] == [
        ("dense_1024", 0), ("local_128", 0), ("local_128", 1),
    ]  # fmt: skip
    assert (out / "equal_budget.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_without_runs_says_how_to_make_them(tmp_path):
    with pytest.raises(SystemExit, match="no finished runs under .*without --report"):
        equal_budget.report(tmp_path, tmp_path / "out")


def test_the_caption_on_causality_only_when_a_run_is_not_causal(tmp_path):
    folder = tmp_path / "runs" / "local_128_s0"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(_result("local_128", 0, [0.9, 0.1])))
    equal_budget.report(tmp_path / "runs", tmp_path / "out")
    assert "†" not in (tmp_path / "out" / "equal_budget.md").read_text()
